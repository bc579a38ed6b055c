#!/usr/bin/env bash
# Builds the upstream programs the beds run from their published Go modules (the go command's own
# module configuration; no other source):
#
#   Kubernetes $KUBE_VERSION   kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
#                              kube-proxy, kubectl   (k8s.io/kubernetes)
#   etcd, each line            etcd, etcdctl, etcdutl (go.etcd.io/etcd/{server,etcdctl,etcdutl}/v3)
#   containerd 2               containerd, containerd-shim-runc-v2, ctr
#   fake-gcs-server            the GCS emulator of the storage tests (github.com/fsouza/fake-gcs-server)
#   helm                       the chart's tests: render, lint, install, upgrade (helm.sh/helm/v3)
#
# Versions are in versions.sh. Each build module (a go.mod that requires the upstream module and
# pins every module its go.mod points at a local directory, which the published zip does not
# carry, to the same release) is kept with its resolved go.sum in e2e/upstream/<name>-<version>/,
# so a build is reproducible; a missing one is made (`--pin` makes them all again).
#
# Idempotent: a warm cache (every binary present and reporting its version) costs nothing. Cold,
# on 2 cores: see the README (Kubernetes is most of it). One build at a time per machine.
#
#   build.sh [--pin]       KUBE_VERSION=1.35 build.sh builds that Kubernetes instead of 1.37
#   build.sh --demo        only what e2e/demo.sh runs: Kubernetes, containerd and the etcd of
#                          the control plane and of the demo's cluster (one line on 1.37); the other
#                          etcd lines, fake-gcs-server and helm are the tests' (a later build.sh
#                          adds them)
#
# Prints `KUBE_TESTBED_BIN=DIR` on its last line of stdout.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=versions.sh
source "$here/versions.sh"
pins=$repo/e2e/upstream
repin=0 demo=0
case ${1:-} in
  --pin) repin=1; shift ;;
  --demo) demo=1; shift ;;
esac
[[ $# == 0 ]] || { echo "usage: $0 [--pin | --demo]" >&2; exit 2; }

log() { echo "build.sh: $*" >&2; }
die() { log "$*"; exit 1; }

command -v go >/dev/null || die "no go command on PATH: the bed's upstream programs are built with Go (see the README)"
export CGO_ENABLED=0 GOFLAGS=-mod=readonly GOTOOLCHAIN=local

# The version line a binary reports, as "NAME VERSION".
reported() {
  local b=$1
  case ${b##*/} in
    kubectl) "$b" version --client 2>/dev/null | awk '/^Client Version:/ {print "kubectl", $3}' ;;
    kube-*|kubelet) "$b" --version 2>/dev/null | awk -v n="${b##*/}" '{print n, $2}' ;;
    etcd) "$b" --version 2>/dev/null | awk '/^etcd Version:/ {print "etcd", "v" $3}' ;;
    etcdctl) "$b" version 2>/dev/null | awk '/^etcdctl version:/ {print "etcdctl", "v" $3}' ;;
    etcdutl) "$b" version 2>/dev/null | awk '/^etcdutl version:/ {print "etcdutl", "v" $3}' ;;
    containerd) "$b" --version 2>/dev/null | awk '{print "containerd", $3}' ;;
    helm) "$b" version --short 2>/dev/null | awk '{sub(/\+.*/, ""); print "helm", $1}' ;;
    *) [[ -x $b ]] && echo "${b##*/} present" ;;
  esac
}
# True when every binary in DIR is there and reports VERSION.
warm() {
  local dir=$1 version=$2 b line
  shift 2
  for b in "$@"; do
    line=$(reported "$dir/$b")
    [[ $line == "$b $version" || $line == "$b present" ]] || return 1
  done
}

# Writes the build module e2e/upstream/NAME-VERSION: requires each MODULE@VERSION, pins every
# module their go.mod files replace with a local directory to RELEASE_OF (a function of the
# module path), and records PACKAGES as tools; then resolves go.sum.
pin() {
  local name=$1 version=$2 release_of=$3 modules=$4 packages=$5 dir m path mod
  dir=$pins/$name-$version
  log "pinning $name $version in ${dir#"$repo"/}"
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
  (
    cd "$dir.tmp"
    export GOFLAGS=-mod=mod
    go mod init "testbed/$name" >/dev/null 2>&1
    for m in $modules; do
      mod=$(go mod download -json "$m@$version" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
      [[ -f $mod ]] || die "module $m@$version cannot be fetched through the Go module proxy"
      go mod edit -require="$m@$version"
      # `replace X => ./dir` or `=> ../dir`, in a block or on its own line.
      for path in $(sed -nE 's/^(replace)?[[:space:]]*([^[:space:]]+)[[:space:]]+=>[[:space:]]+\.\.?\/.*/\2/p' "$mod"); do
        [[ $path == go.etcd.io/etcd ]] && continue # etcd's guard against its pre-module path
        go mod edit -replace="$path=$path@$("$release_of" "$path" "$version")"
      done
    done
    for m in $packages; do
      # At the release: without a version, go get would take the newest.
      go get -tool "$m@$version" >&2 || die "cannot resolve $m@$version (go get -tool failed)"
    done
    go mod tidy >&2 || die "go mod tidy failed for $name $version"
  ) || exit 1
  rm -rf "$dir" && mv "$dir.tmp" "$dir"
}

# Builds PACKAGES of the build module NAME-VERSION into OUT with LDFLAGS.
build() {
  local name=$1 version=$2 out=$3 ldflags=$4 tags=$5 packages=$6 t0=$SECONDS
  log "building $name $version into $out"
  mkdir -p "$out.tmp"
  # shellcheck disable=SC2086 # word lists
  (cd "$pins/$name-$version" && go build -trimpath -tags "$tags" -ldflags "-s -w $ldflags" -o "$out.tmp/" $packages) >&2 \
    || die "building $name $version failed (module pins in e2e/upstream/$name-$version)"
  mkdir -p "$out"
  local f
  for f in "$out.tmp"/*; do mv -f "$f" "$out/"; done
  rmdir "$out.tmp"
  log "built $name $version in $((SECONDS - t0)) s"
}

mkdir -p "$upstream_cache"
exec 9>"$upstream_cache/.build.lock"
flock 9

# Kubernetes: the staging modules are published as k8s.io/<name> v0.<minor>.<patch>.
kube_staging() { local v=$2; echo "v0.${v#v1.}"; }
kube_commands=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
if ((repin)) || [[ ! -f $pins/kubernetes-$kube_release/go.sum ]]; then
  pin kubernetes "$kube_release" kube_staging k8s.io/kubernetes "${kube_commands[*]/#/k8s.io/kubernetes/cmd/}"
fi
if ! warm "$kube_bin" "$kube_release" "${kube_commands[@]}"; then
  minor=${kube_release#v1.} minor=${minor%%.*}
  ldflags=
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $p.gitVersion=$kube_release -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  done
  build kubernetes "$kube_release" "$kube_bin" "$ldflags" "" "${kube_commands[*]/#/k8s.io/kubernetes/cmd/}"
  warm "$kube_bin" "$kube_release" "${kube_commands[@]}" || die "the Kubernetes binaries in $kube_bin do not report $kube_release"
fi

# etcd: client/v2 (3.5 only) is published as v2.305.<patch>, every other module as the release.
etcd_module_release() { if [[ $1 == */v2 ]]; then echo "v2.305.${2#v3.5.}"; else echo "$2"; fi; }
etcd_lines=("${etcd_releases[@]}" "${etcd_refused_patches[@]}")
((demo)) && mapfile -t etcd_lines < <(printf '%s\n' "$control_plane_etcd" "$demo_etcd_release" | sort -u)
for release in "${etcd_lines[@]}"; do
  etcd_modules="go.etcd.io/etcd/server/v3 go.etcd.io/etcd/etcdctl/v3 go.etcd.io/etcd/etcdutl/v3"
  if ((repin)) || [[ ! -f $pins/etcd-$release/go.sum ]]; then
    pin etcd "$release" etcd_module_release "$etcd_modules" "$etcd_modules"
  fi
  out=$(etcd_bin "$release")
  if ! warm "$out" "$release" etcd etcdctl etcdutl; then
    build etcd "$release" "$out" "" "" "$etcd_modules"
    # The server's main package is its module's root, which go names after the path (server).
    mv -f "$out/server" "$out/etcd"
    warm "$out" "$release" etcd etcdctl etcdutl || die "the etcd binaries in $out do not report $release"
  fi
done

# containerd 2: no btrfs snapshotter (cgo), as the static release builds.
containerd_commands="github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 github.com/containerd/containerd/v2/cmd/ctr"
if ((repin)) || [[ ! -f $pins/containerd-$containerd_release/go.sum ]]; then
  same() { echo "$2"; }
  pin containerd "$containerd_release" same github.com/containerd/containerd/v2 "$containerd_commands"
fi
if ! warm "$containerd_bin" "$containerd_release" containerd containerd-shim-runc-v2 ctr; then
  build containerd "$containerd_release" "$containerd_bin" \
    "-X github.com/containerd/containerd/v2/version.Version=$containerd_release" "no_btrfs" "$containerd_commands"
  warm "$containerd_bin" "$containerd_release" containerd || die "containerd in $containerd_bin does not report $containerd_release"
fi

if ((demo)); then
  echo "KUBE_TESTBED_BIN=$kube_bin"
  exit 0
fi

# fake-gcs-server: one module, its main package at the root.
if ((repin)) || [[ ! -f $pins/fake-gcs-server-$fake_gcs_release/go.sum ]]; then
  same() { echo "$2"; }
  pin fake-gcs-server "$fake_gcs_release" same github.com/fsouza/fake-gcs-server github.com/fsouza/fake-gcs-server
fi
if ! warm "$fake_gcs_bin" "$fake_gcs_release" fake-gcs-server; then
  build fake-gcs-server "$fake_gcs_release" "$fake_gcs_bin" "" "" github.com/fsouza/fake-gcs-server
  warm "$fake_gcs_bin" "$fake_gcs_release" fake-gcs-server || die "fake-gcs-server is missing from $fake_gcs_bin"
fi

# helm: its command in the module's cmd/helm; the version it reports set as its release does.
if ((repin)) || [[ ! -f $pins/helm-$helm_release/go.sum ]]; then
  same() { echo "$2"; }
  pin helm "$helm_release" same helm.sh/helm/v3 helm.sh/helm/v3/cmd/helm
fi
if ! warm "$helm_bin" "$helm_release" helm; then
  build helm "$helm_release" "$helm_bin" "-X helm.sh/helm/v3/internal/version.version=$helm_release" "" helm.sh/helm/v3/cmd/helm
  warm "$helm_bin" "$helm_release" helm || die "helm in $helm_bin does not report $helm_release"
fi

echo "KUBE_TESTBED_BIN=$kube_bin"
