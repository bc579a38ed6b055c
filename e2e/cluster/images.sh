#!/usr/bin/env bash
# Builds the bed's container images without a registry or a daemon (umoci writes OCI layouts) and
# imports them into the bed's containerd (`ctr images import`), so pods run them with
# `imagePullPolicy: IfNotPresent`/`Never`:
#
#   localhost/pause:3.2                  catatonit -P (the sandbox image containerd is told about)
#   localhost/etcd:v3.4.23               Debian 12's etcd, etcdctl (coreos tag scheme <repo>:v<version>)
#   localhost/etcd:v3.5.16               Debian 13's etcd, etcdctl, etcdutl (fetched as .debs by name)
#   localhost/<binary>:dev               one per project binary found in the binaries dir:
#                                        etcd-operator, etcd-backup-operator, etcd-restore-operator,
#                                        etcd-backup (distroless/cc's file set, as the Dockerfile)
#
#   images.sh SOCKET WORKDIR [BINDIR]    BINDIR defaults to the workspace's target/debug
#
# The etcd images hold the program, the shared libraries `ldd` lists for it,
# busybox as /bin/sh, /etc/passwd with root and nonroot (65532), nsswitch.conf and the CA bundle. The etcd .debs are
# cached in ~/.cache/etcd-backup-suite/debs.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[[ $# == 2 || $# == 3 ]] || { echo "usage: $0 SOCKET WORKDIR [BINDIR]" >&2; exit 2; }
socket=$1 work=$2 bindir=${3:-${CARGO_TARGET_DIR:-$here/../../target}/debug}
debs=${XDG_CACHE_HOME:-$HOME/.cache}/etcd-backup-suite/debs

log() { echo "images.sh: $*" >&2; }

# etcd 3.5.16 from Debian 13, unpacked once into $debs/etcd-3.5.16 (linked to glibc only).
etcd35() {
  local out=$debs/etcd-3.5.16
  [[ -x $out/usr/bin/etcdutl && -x $out/usr/bin/etcd ]] && { echo "$out"; return; }
  log "fetching etcd-server and etcd-client 3.5.16 from Debian 13"
  local apt=$debs/apt-trixie
  mkdir -p "$apt/lists/partial" "$apt/archives/partial"
  printf '%s\n' 'Types: deb' 'URIs: http://deb.debian.org/debian' 'Suites: trixie' 'Components: main' \
    'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' >"$apt/trixie.sources"
  local opts=(-o APT::Sandbox::User=root -o "Dir::Etc::sourcelist=/dev/null" -o "Dir::Etc::sourceparts=$apt"
    -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache::archives=$apt/archives" -o "APT::Get::List-Cleanup=0")
  # Only the sources file named *.sources in $apt is read; the private lists dir keeps the
  # machine's own package lists untouched.
  apt-get "${opts[@]}" update -q >&2
  rm -rf "$apt/debs" && mkdir -p "$apt/debs"
  (cd "$apt/debs" && apt-get "${opts[@]}" download -q etcd-server=3.5.16\* etcd-client=3.5.16\* >&2)
  rm -rf "$out.tmp" && mkdir -p "$out.tmp"
  local deb
  for deb in "$apt"/debs/*.deb; do dpkg-deb -x "$deb" "$out.tmp"; done
  [[ -x $out.tmp/usr/bin/etcdutl ]] || { log "the 3.5.16 packages hold no etcdutl"; exit 1; }
  rm -rf "$out" && mv "$out.tmp" "$out"
  echo "$out"
}

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

# etcd 3.4 (Debian 12) and 3.5 (Debian 13): the server runs as root in the pod, as upstream's.
root=$work/rootfs/etcd-3.4
base_rootfs "$root"
add_programs "$root" /usr/bin/etcd:/usr/local/bin/etcd /usr/bin/etcdctl:/usr/local/bin/etcdctl
import_image etcd v3.4.23 "$root" 0 /usr/local/bin/etcd
etcd35=$(etcd35)
root=$work/rootfs/etcd-3.5
base_rootfs "$root"
add_programs "$root" "$etcd35/usr/bin/etcd" "$etcd35/usr/bin/etcdctl" "$etcd35/usr/bin/etcdutl"
import_image etcd v3.5.16 "$root" 0 /usr/local/bin/etcd

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
