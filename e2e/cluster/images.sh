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
#   localhost/mysql-backup:dev           the Dockerfile's mysql-backup target, from Debian 12's packages
#                                        (this and the two below: only with a mysql-backup binary
#                                        in BINDIR and BED_MYSQL_IMAGES not 0; the demo sets 0)
#   localhost/mariadb-fixture:10.11      a test fixture standing in for the official mariadb:10.11
#                                        image (Debian 12's MariaDB, mariadb-fixture/ scripts)
#   localhost/ncat-clone:bench           the tutorial's clone tools (mariadb-backup, ncat), for
#                                        the clone benchmark
#
#   images.sh SOCKET[,SOCKET...] WORKDIR [BINDIR]
#                                        into each containerd (one per node) at SOCKET; BINDIR
#                                        defaults to the workspace's target/debug
#   images.sh --debian-roots WORKDIR     only makes the MySQL images' Debian trees (cached), so
#                                        e2e/test.sh makes them beside its build rather than in
#                                        the bed's first start (about 3 min on a new machine)
#
# The etcd images hold the program, the shared libraries `ldd` lists for it,
# busybox as /bin/sh, /etc/passwd with root and nonroot (65532), nsswitch.conf and the CA bundle.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.sh
source "$here/versions.sh"
roots_only=0
[[ ${1:-} == --debian-roots && $# == 2 ]] && { roots_only=1; set -- "" "$2"; }
[[ $# == 2 || $# == 3 ]] || { echo "usage: $0 SOCKET[,SOCKET...] WORKDIR [BINDIR] | --debian-roots WORKDIR" >&2; exit 2; }
IFS=, read -r -a sockets <<<"$1"
work=$2 bindir=${3:-${CARGO_TARGET_DIR:-$here/../../target}/debug}

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
  local one
  for one in "${sockets[@]}"; do
    ctr --address "$one" -n k8s.io images import --base-name "localhost/$name" "$layout.tar" >/dev/null
  done
  rm -rf "$layout" "$layout.tar"
  log "localhost/$name:$tag"
}

# debian_rootfs NAME ROOT USER PACKAGES...: ROOT becomes a Debian 12 minbase tree with PACKAGES
# (mariadb-* pinned to this machine's versions), made by mmdebstrap from this machine's apt
# sources, without apt's lists, documentation or locales. USER "mysql" creates mysql as 999:999
# before the packages install (their scripts keep an existing user); otherwise nonroot is made as
# the Dockerfile's `groupadd`/`useradd` do. Cached as a tarball named by the package versions and this
# script, so a bed start does not download them again.
debian_rootfs() {
  local name=$1 root=$2 user=$3 spec=() p version hook
  shift 3
  for p in "$@"; do
    if [[ $p == mariadb-* ]]; then
      version=$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null) \
        || { log "$p is not installed here (e2e/install-deps.sh installs it)"; exit 1; }
      spec+=("$p=$version")
    else
      spec+=("$p")
    fi
  done
  local key
  key=$(printf '%s\n' "$user" "${spec[@]}" | cat - "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16)
  local cache=$upstream_cache/debian-rootfs/$name-$key.tar
  local apt_sources=/etc/apt/sources.list.d/debian.sources
  [[ -f $apt_sources ]] || apt_sources=/etc/apt/sources.list
  rm -rf "$root" && mkdir -p "$root"
  if [[ ! -f $cache ]]; then
    if [[ $user == mysql ]]; then
      hook=(--essential-hook='echo "mysql:x:999:" >>"$1/etc/group"; echo "mysql:x:999:999:MariaDB Server:/nonexistent:/bin/false" >>"$1/etc/passwd"; echo "mysql:*:20000:0:99999:7:::" >>"$1/etc/shadow"')
    else
      hook=(--customize-hook='chroot "$1" /usr/sbin/groupadd --gid 65532 nonroot && chroot "$1" /usr/sbin/useradd --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin nonroot')
    fi
    log "mmdebstrap $name: ${spec[*]}"
    mkdir -p "$(dirname "$cache")"
    mmdebstrap --quiet --format=tar --variant=minbase --include="$(IFS=,; echo "${spec[*]}")" "${hook[@]}" \
      --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
      --dpkgopt='path-exclude=/usr/share/locale/*' \
      bookworm "$cache.partial" "$apt_sources"
    mv "$cache.partial" "$cache"
  fi
  tar -C "$root" -xf "$cache"
}

# The MySQL images' Debian packages (see mysql_images below).
mysql_backup_packages=(mariadb-backup mariadb-server-core mariadb-client ca-certificates)
mariadb_fixture_packages=(mariadb-server mariadb-client mariadb-backup)
ncat_clone_packages=(mariadb-backup mariadb-client ncat)
if ((roots_only)); then
  started=$SECONDS
  debian_rootfs mysql-backup "$work/rootfs/mysql-backup" "" "${mysql_backup_packages[@]}"
  debian_rootfs mariadb-fixture "$work/rootfs/mariadb-fixture" mysql "${mariadb_fixture_packages[@]}"
  debian_rootfs ncat-clone "$work/rootfs/ncat-clone" mysql "${ncat_clone_packages[@]}"
  rm -rf "$work/rootfs"
  log "the MySQL images' Debian trees are ready ($((SECONDS - started)) s)"
  exit 0
fi

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
  # `build.sh --demo` builds one etcd line; the tests' build.sh all of them.
  [[ -x $built/etcd ]] || { log "no etcd $release in $built: no localhost/etcd:$release image"; continue; }
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

# mysql-backup: the Dockerfile's target is debian:bookworm-slim plus mariadb-backup,
# mariadb-server-core and mariadb-client (a restore to a point replays binlogs through a private
# server) and ca-certificates, user nonroot (65532) and the binary. The bed makes the same from Debian 12's
# packages with mmdebstrap (minbase, as bookworm-slim is), mariadb-* at this machine's versions
# (the ones the tests run as processes). testbed's tests/images.rs lists what differs.
# Without a mysql-backup binary, or with BED_MYSQL_IMAGES=0 (the demo, which installs neither
# MariaDB's packages nor mmdebstrap), no MySQL image is made: they serve only mysql-backup's tests.
mysql_images() {
  root=$work/rootfs/mysql-backup
  debian_rootfs mysql-backup "$root" "" "${mysql_backup_packages[@]}"
  install -D -m 0755 "$bindir/mysql-backup" "$root/usr/local/bin/mysql-backup"
  import_image mysql-backup dev "$root" 65532:65532 /usr/local/bin/mysql-backup

  # mariadb-fixture: the stand-in for the official `mariadb:10.11` image that examples/mysql names
  # (not pullable here): Debian 12's mariadb-server, client and backup tool (the official image has
  # all three), user mysql as 999 like the official image, and fixture scripts giving the part of
  # the official image's interface the example uses (mariadb-fixture/: initialisation from
  # MARIADB_ROOT_PASSWORD[_FILE] and /docker-entrypoint-initdb.d, `healthcheck.sh --connect`).
  # Listening on every address, as the official image does (Debian's default binds 127.0.0.1).
  root=$work/rootfs/mariadb-fixture
  debian_rootfs mariadb-fixture "$root" mysql "${mariadb_fixture_packages[@]}"
  install -D -m 0755 "$here/mariadb-fixture/docker-entrypoint.sh" "$root/usr/local/bin/docker-entrypoint.sh"
  install -D -m 0755 "$here/mariadb-fixture/healthcheck.sh" "$root/usr/local/bin/healthcheck.sh"
  sed -i 's/^bind-address/#&/' "$root/etc/mysql/mariadb.conf.d/50-server.cnf"
  rm -rf "$root/var/lib/mysql" && install -d -o 999 -g 999 "$root/var/lib/mysql" "$root/run/mysqld"
  import_image mariadb-fixture 10.11 "$root" 999:999 /usr/local/bin/docker-entrypoint.sh

  # ncat-clone: for the clone benchmark only (jobs/mysql-backup/tests/clone_bench.rs), the tools of
  # the Kubernetes tutorial's replicated MySQL: `mariadb-backup --stream | ncat` on the source,
  # `ncat | mbstream -x`, `--prepare` and the client for CHANGE MASTER on the new replica.
  root=$work/rootfs/ncat-clone
  debian_rootfs ncat-clone "$root" mysql "${ncat_clone_packages[@]}"
  import_image ncat-clone bench "$root" 999:999 /bin/bash
}
if [[ ${BED_MYSQL_IMAGES:-1} == 0 ]]; then
  log "BED_MYSQL_IMAGES=0: no MySQL images (mysql-backup, mariadb-fixture, ncat-clone)"
elif [[ -x $bindir/mysql-backup ]]; then
  mysql_images
else
  log "no $bindir/mysql-backup: no MySQL images (mysql-backup, mariadb-fixture, ncat-clone)"
fi
rm -rf "$work/rootfs"
log "images built and imported in $((SECONDS - started)) s"
