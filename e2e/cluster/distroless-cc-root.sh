#!/usr/bin/env bash
# Writes the runtime file set of gcr.io/distroless/cc-debian12:nonroot, as far as the project's
# binaries use it, into ROOT: the files of Debian 12's libc6 and libgcc-s1 (distroless/cc is
# built from those plus tzdata, libssl3, libstdc++6 and libgomp1, which nothing here links),
# the CA bundle, users root and nonroot (65532), nonroot's home and a sticky /tmp. No shell.
# The one recipe for both the bed's images of the Dockerfile's distroless targets (images.sh)
# and the image checks that run a binary in it (testbed::image). Needs root (chown).
#
#   distroless-cc-root.sh ROOT
set -euo pipefail
[[ $# == 1 ]] || { echo "usage: $0 ROOT" >&2; exit 2; }
root=$1
mkdir -p "$root"
ca=/etc/ssl/certs/ca-certificates.crt

# Directories (also /lib64 and the like, symlinks on a merged-/usr host) are made as needed; a
# listed file that is missing was diverted or removed.
while IFS= read -r path; do
  [[ -d $path ]] && continue
  [[ -e $path || -L $path ]] || continue
  mkdir -p "$root$(dirname "$path")"
  cp -P "$path" "$root$path"
done < <(dpkg -L libc6 libgcc-s1)

mkdir -p "$root/etc/ssl/certs"
cp "$ca" "$root$ca"
printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' \
  'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"$root/etc/passwd"
printf '%s\n' 'root:x:0:' 'nonroot:x:65532:' >"$root/etc/group"
mkdir -p "$root/home/nonroot" "$root/tmp"
chown 65532:65532 "$root/home/nonroot"
chmod 1777 "$root/tmp"
