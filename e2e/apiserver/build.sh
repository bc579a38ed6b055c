#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy and kubectl
# v1.20.2 from Debian 12's own `kubernetes` source package (Debian builds only kubectl from it), with Go 1.19 from Debian, after replacing
# the vendored github.com/modern-go/reflect2 v1.0.1 (broken with Go >= 1.18: panics on the first
# custom resource) by Debian's 1.0.2. See shared/reference/test-apiserver-from-debian.md.
#
# Idempotent: a warm cache (every binary present and reporting v1.20.2) skips everything,
# including apt. Cold: 7-11 minutes on 2 cores (about 7 CPU-minutes) and 2.4 GB of
# disk, all under the cache dir (source tree, GOPATH, Go build cache in the tree's _output/).
#
#   KUBE_TESTBED_CACHE  cache dir (default ${XDG_CACHE_HOME:-$HOME/.cache}/etcd-backup-suite/kube-1.20.2);
#                       the binaries go to $KUBE_TESTBED_CACHE/bin
#
# Prints the bin dir on its last line of stdout (`KUBE_TESTBED_BIN=/path`).
set -euo pipefail

version=v1.20.2
cache=${KUBE_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/etcd-backup-suite/kube-1.20.2}
bin=$cache/bin
servers=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)

log() { echo "build.sh: $*" >&2; }

# The version line binary $1 reports.
reported_version() {
  if [[ $1 == kubectl ]]; then
    "$bin/kubectl" version --client --short 2>/dev/null | sed 's/^Client Version: /Kubernetes /'
  else
    "$bin/$1" --version 2>/dev/null
  fi
}

# True when every binary is there and reports the expected version.
warm() {
  local s
  for s in "${servers[@]}"; do
    [[ -x $bin/$s ]] || return 1
    [[ $(reported_version "$s") == "Kubernetes $version" ]] || return 1
  done
}

if warm; then
  log "cached: $bin"
  echo "KUBE_TESTBED_BIN=$bin"
  exit 0
fi

mkdir -p "$cache"
# One build at a time per cache dir (parallel test binaries may call this together).
exec 9>"$cache/.lock"
flock 9
if warm; then
  log "cached (built by a concurrent run): $bin"
  echo "KUBE_TESTBED_BIN=$bin"
  exit 0
fi

sudo=; [[ $(id -u) == 0 ]] || sudo=sudo
started=$SECONDS

# 1. Source packages for bookworm (the kubernetes update, +deb12u1, comes from a point release,
#    so bookworm-updates and the security suite are listed too; apt picks the newest).
if ! apt-cache showsrc kubernetes 2>/dev/null | grep -q '^Package: kubernetes'; then
  if ! grep -rqsE '^[[:space:]]*(deb-src[[:space:]]|Types:.*deb-src)' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    log "adding deb-src for bookworm main"
    $sudo tee /etc/apt/sources.list.d/bookworm-src.sources >/dev/null <<'SOURCES'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
  fi
  $sudo apt-get update -q >&2
  updated=1
fi

# 2. Tools: Go 1.19, dpkg-source, make and rsync (Kubernetes' build); etcd, openssl, curl and ss
#    (iproute2) for up.sh.
packages=(golang-1.19-go dpkg-dev make rsync etcd-server etcd-client openssl curl iproute2)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing ${missing[*]}"
  [[ -n ${updated:-} ]] || $sudo apt-get update -q >&2
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi

# 3. The source package, unpacked once (Debian's patches applied by dpkg-source).
src=$cache/src
mkdir -p "$src"
tree=$(find "$src" -mindepth 1 -maxdepth 1 -type d -name 'kubernetes-*really1.20.2' | head -n1)
if [[ -z $tree || ! -f $tree/.testbed-unpacked ]]; then
  log "fetching the kubernetes source package"
  rm -rf "${src:?}"/kubernetes-* "${src:?}"/kubernetes_*
  (cd "$src" && apt-get source -q kubernetes >&2)
  tree=$(find "$src" -mindepth 1 -maxdepth 1 -type d -name 'kubernetes-*really1.20.2' | head -n1)
  [[ -n $tree ]] || { log "apt-get source kubernetes did not unpack a 1.20.2 tree in $src"; exit 1; }
  touch "$tree/.testbed-unpacked"
fi

# 4. The reflect2 swap.
if [[ ! -f $tree/.testbed-reflect2 ]]; then
  log "replacing vendored reflect2 with Debian's golang-github-modern-go-reflect2-dev"
  rm -rf "$src/reflect2" && mkdir -p "$src/reflect2"
  (cd "$src/reflect2" && apt-get download -q golang-github-modern-go-reflect2-dev >&2)
  dpkg-deb -x "$src"/reflect2/golang-github-modern-go-reflect2-dev_*.deb "$src/reflect2/root"
  new=$src/reflect2/root/usr/share/gocode/src/github.com/modern-go/reflect2
  [[ -f $new/reflect2.go ]] || { log "no reflect2 sources in the package"; exit 1; }
  rm -rf "$tree/vendor/github.com/modern-go/reflect2"
  cp -a "$new" "$tree/vendor/github.com/modern-go/reflect2"
  touch "$tree/.testbed-reflect2"
fi

# 5. Build in GOPATH mode, as upstream 1.20 does, offline. make keeps its Go cache in _output/.
gopath=$cache/gopath
mkdir -p "$gopath/src/k8s.io"
ln -sfn "$tree" "$gopath/src/k8s.io/kubernetes"
log "building ${servers[*]} (7-11 minutes on 2 cores when cold)"
(
  cd "$gopath/src/k8s.io/kubernetes"
  export PATH=/usr/lib/go-1.19/bin:$PATH GOPATH=$gopath GOCACHE=$cache/go-build GOPROXY=off \
    GOFLAGS='' GOTOOLCHAIN=local CGO_ENABLED=0 GO111MODULE=off \
    KUBE_GIT_VERSION=$version KUBE_GIT_MAJOR=1 KUBE_GIT_MINOR=20 KUBE_GIT_TREE_STATE=clean \
    KUBE_GIT_COMMIT=faecb196815e248d3ecfb03c680a4507229c2a56
  make WHAT="${servers[*]/#/cmd/}" >&2
)

# 6. Install into the cache's bin dir atomically.
mkdir -p "$bin"
for s in "${servers[@]}"; do
  cp "$tree/_output/bin/$s" "$bin/.$s.tmp"
  mv -f "$bin/.$s.tmp" "$bin/$s"
done
warm || { log "built binaries do not all report $version: $(for s in "${servers[@]}"; do echo -n "$s: $(reported_version "$s"); "; done)"; exit 1; }
log "built in $((SECONDS - started)) s: $bin"
echo "KUBE_TESTBED_BIN=$bin"
