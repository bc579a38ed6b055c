#!/usr/bin/env bash
# Builds the bed's container images without a registry or a daemon (umoci writes OCI layouts) and
# imports them into the bed's containerd (`ctr images import`), so pods run them with
# `imagePullPolicy: IfNotPresent`/`Never`:
#
#   localhost/pause:3.2                  catatonit -P (the sandbox image containerd is told about)
#   localhost/etcd:v3.5.33, v3.6.16, v3.7.3   etcd, etcdctl, etcdutl built by build.sh from etcd's
#                                        Go modules (versions.sh), coreos tag scheme <repo>:v<version>
#   localhost/etcd:v3.4.23               Debian 12's etcd, etcdctl: 3.4 is end of life, kept for the
#                                        upgrade-from-3.4 tests only
#   localhost/<binary>:dev               one per project binary found in the binaries dir:
#                                        etcd-operator, etcd-backup-operator, etcd-restore-operator,
#                                        etcd-backup (distroless/cc's file set, as the Dockerfile)
#
#   images.sh SOCKET WORKDIR [BINDIR]    BINDIR defaults to the workspace's target/debug
#
# The etcd images hold the program, the shared libraries `ldd` lists for it,
# busybox as /bin/sh, /etc/passwd with root and nonroot (65532), nsswitch.conf and the CA bundle.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.sh
source "$here/versions.sh"
[[ $# == 2 || $# == 3 ]] || { echo "usage: $0 SOCKET WORKDIR [BINDIR]" >&2; exit 2; }
socket=$1 work=$2 bindir=${3:-${CARGO_TARGET_DIR:-$here/../../target}/debug}

log() { echo "images.sh: $*" >&2; }

# Copies each program into ROOT at /usr/local/bin (or PATH inside ROOT for "SRC:DEST") together
# with the shared libraries it loads.
add_programs() {
  local root=$1 spec src dest lib
  shift
  for spec in "$@"; do
    src=${spec%%:*} dest=${spec#*:}
    [[ $dest == "$spec" ]] && dest=/usr/local/bin/$(basename "$src")
    install -D -m 0755 "$src" "$root$dest"
    # `ldd` prints "name => /path (addr)" and the loader as "/path (addr)".
    for lib in $(ldd "$src" 2>/dev/null | grep -oE '/[^ ]+' || true); do
      [[ -e $root$lib ]] || cp --parents -L "$lib" "$root"
    done
  done
}

# The files every image has: a shell, users, name service config, CA bundle, /tmp.
base_rootfs() {
  local root=$1
  rm -rf "$root" && mkdir -p "$root"/{bin,etc,tmp,var/lib}
  chmod 1777 "$root/tmp"
  cp /bin/busybox "$root/bin/busybox"
  ln -s busybox "$root/bin/sh"
  printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'nonroot:x:65532:65532:nonroot:/home/nonroot:/bin/sh' >"$root/etc/passwd"
  printf '%s\n' 'root:x:0:' 'nonroot:x:65532:' >"$root/etc/group"
  echo 'hosts: files dns' >"$root/etc/nsswitch.conf"
  [[ -f /etc/ssl/certs/ca-certificates.crt ]] && cp --parents /etc/ssl/certs/ca-certificates.crt "$root"
  mkdir -p "$root/home/nonroot" && chown 65532:65532 "$root/home/nonroot"
}

# Makes image NAME:TAG from ROOT with the given entrypoint (JSON-free: one word per argument),
# user and, optionally, working dir, and imports it.
import_image() {
  local name=$1 tag=$2 root=$3 user=$4
  shift 4
  local layout=$work/oci/${name//\//_}
  rm -rf "$layout"
  umoci init --layout "$layout"
  umoci new --image "$layout:$tag"
  umoci insert --image "$layout:$tag" "$root" /
  local entry=() arg
  for arg in "$@"; do entry+=(--config.entrypoint "$arg"); done
  umoci config --image "$layout:$tag" --no-history --config.user "$user" "${entry[@]}" \
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
  umoci gc --layout "$layout"
  tar -C "$layout" -cf "$layout.tar" .
  ctr --address "$socket" -n k8s.io images import --base-name "localhost/$name" "$layout.tar" >/dev/null
  rm -rf "$layout" "$layout.tar"
  log "localhost/$name:$tag"
}

mkdir -p "$work/oci"
started=$SECONDS

# Pause: catatonit (static) as the sandbox's init.
root=$work/rootfs/pause
rm -rf "$root" && mkdir -p "$root/bin"
cp /usr/bin/catatonit "$root/bin/catatonit"
import_image pause 3.2 "$root" 65535 /bin/catatonit -P

# etcd: the server runs as root in the image, as upstream's 3.5 images do; the operators' pods
# choose the user (Pod Security "restricted" needs a non-root one).
root=$work/rootfs/etcd-3.4
base_rootfs "$root"
add_programs "$root" /usr/bin/etcd:/usr/local/bin/etcd /usr/bin/etcdctl:/usr/local/bin/etcdctl
import_image etcd v3.4.23 "$root" 0 /usr/local/bin/etcd
for release in "${etcd_releases[@]}" "${etcd_refused_patches[@]}"; do
  built=$(etcd_bin "$release")
  root=$work/rootfs/etcd-$release
  base_rootfs "$root"
  add_programs "$root" "$built/etcd" "$built/etcdctl" "$built/etcdutl"
  import_image etcd "$release" "$root" 0 /usr/local/bin/etcd
done

# The project's binaries that the build holds, each in its own image. The Dockerfile's distroless
# targets get what their image holds: distroless/cc's runtime file set (distroless-cc-root.sh,
# the recipe the image checks run binaries in), the binary at /usr/local/bin, user 65532:65532,
# distroless' environment, the binary as entrypoint; no shell. testbed's tests/images.rs checks
# the imported images against the Dockerfile and the build's binaries.
for binary in etcd-operator etcd-backup-operator etcd-restore-operator etcd-backup; do
  [[ -x $bindir/$binary ]] || { log "no $bindir/$binary: no localhost/$binary:dev image"; continue; }
  root=$work/rootfs/$binary
  rm -rf "$root"
  "$here/distroless-cc-root.sh" "$root"
  install -D -m 0755 "$bindir/$binary" "$root/usr/local/bin/$binary"
  import_image "$binary" dev "$root" 65532:65532 "/usr/local/bin/$binary"
done
# No mysql-backup image: its target is Debian's bookworm-slim with mariadb-backup, which this
# machine cannot reproduce file for file, and no test runs the runner in a pod.
rm -rf "$work/rootfs"
log "images built and imported in $((SECONDS - started)) s"
