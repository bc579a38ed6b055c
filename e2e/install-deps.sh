#!/usr/bin/env bash
# Installs what the tests, the demo and the benchmark run against, on Debian 12. Idempotent:
# installs only what is missing and says what it installed.
#
#   install-deps.sh          everything
#   install-deps.sh --demo   what e2e/demo.sh needs (the bed, Garage); not the tests' MariaDB,
#                            emulators, aws CLI, promtool, rustfmt and clippy
set -euo pipefail

sudo=; [[ $(id -u) == 0 ]] || sudo=sudo
installed=()
demo=0
[[ ${1:-} == --demo ]] && demo=1

# etcd 3.4 (server, etcdctl); protoc and the well-known .proto files (libprotobuf-dev) for
# etcd-client's build; GNU time for the benchmark; jq for test.sh's list of test targets.
packages=(etcd-server etcd-client protobuf-compiler libprotobuf-dev time jq)
# MariaDB server and mariadb-backup for the MySQL runner's tests (the tests start their own
# servers on temporary data dirs; the packaged service is not used).
((demo)) || packages+=(mariadb-server mariadb-backup mariadb-client)
# The image checks (testbed::image): chroot is in coreutils; openssl is the program that needs a
# library distroless/cc lacks.
packages+=(openssl)
# The Kubernetes bed with a kubelet (e2e/cluster/up.sh; Kubernetes, etcd and containerd 2 are
# built from Go modules by e2e/cluster/build.sh): runc for containerd, CNI plugins, the pause
# process (catatonit) and a shell for images (busybox), cluster DNS (dnsmasq), kube-proxy's
# iptables and conntrack, umoci to write OCI images without a registry or daemon; curl for the
# beds' readiness checks.
packages+=(runc containernetworking-plugins catatonit busybox-static dnsmasq-base iptables
  iproute2 conntrack umoci curl)
if ((!demo)); then
  # mmdebstrap makes the MariaDB and mysql-backup images' Debian trees (e2e/cluster/images.sh).
  packages+=(mmdebstrap)
  # The reference age tool: encrypted backups must open with it, and its files with ours.
  packages+=(age)
  # pip, to install the aws CLI below when it is missing.
  command -v aws >/dev/null || packages+=(python3-pip)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  $sudo apt-get update -q
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  installed+=("${missing[@]}")
fi

# Garage (S3 server): not packaged by Debian, so built from its crate, with only what the beds
# use (the sqlite metadata engine and the metrics the benchmarks read; no lmdb or K2V), at
# opt-level 1 except its hashing, checksum, compression and database crates, which do the
# per-byte work and stay at 3. On 2 cores: 8 min 16 s (downloads aside), against 14.5 min for
# its default release build.
if ! command -v garage >/dev/null && [[ ! -x $HOME/.cargo/bin/garage ]]; then
  hot=(blake2 crc-fast md-5 sha1 sha2 xxhash-rust zstd-sys libsqlite3-sys libsodium-sys)
  config=(--config profile.release.opt-level=1)
  for crate in "${hot[@]}"; do
    config+=(--config "profile.release.package.$crate.opt-level=3")
  done
  cargo install garage --locked --version 2.5.0 --no-default-features \
    --features bundled-libs,sqlite,metrics "${config[@]}"
  installed+=(garage)
fi

if ((demo)); then
  echo "install-deps: ${installed[*]:-nothing to install}"
  exit 0
fi

# aws CLI: the benchmark's baseline client and a handy independent S3 client in tests.
if ! command -v aws >/dev/null; then
  # Debian 12's Python refuses pip installs outside a venv unless told otherwise (PEP 668).
  python3 -m pip install -q awscli 2>/dev/null || python3 -m pip install -q --break-system-packages awscli
  installed+=(awscli)
fi

# promtool (the alert-rule tests): from Debian's prometheus package, unpacked into a cache rather
# than installed (installing the package would start a Prometheus server).
promtool=${XDG_CACHE_HOME:-$HOME/.cache}/etcd-backup-suite/prometheus/usr/bin/promtool
if [[ ! -x $promtool ]]; then
  debs=$(mktemp -d)
  (cd "$debs" && { apt-get download -q prometheus 2>/dev/null \
    || { $sudo apt-get update -q && apt-get download -q prometheus; }; })
  # dpkg-deb makes the target directory but not its parents (a new machine has no cache yet).
  mkdir -p "${promtool%/usr/bin/promtool}"
  dpkg-deb -x "$debs"/prometheus_*.deb "${promtool%/usr/bin/promtool}"
  rm -rf "$debs"
  installed+=(promtool)
fi

# Azurite (the Azure Blob emulator of the storage tests), from the npm registry: 3.35.0 is the
# last release that runs on Debian 12's Node 20. Kept in the cache, not installed globally.
azurite=${XDG_CACHE_HOME:-$HOME/.cache}/etcd-backup-suite/azurite-3.35.0
if [[ ! -x $azurite/node_modules/.bin/azurite-blob ]]; then
  command -v npm >/dev/null || { $sudo apt-get update -q && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends nodejs npm; }
  mkdir -p "$azurite"
  npm install --prefix "$azurite" --no-audit --no-fund --loglevel=error azurite@3.35.0 >&2
  installed+=(azurite)
fi

# rustfmt and clippy: e2e/test.sh fails on unformatted code and on clippy warnings first.
for component in rustfmt clippy; do
  if ! rustup component list --installed 2>/dev/null | grep -q "^$component"; then
    rustup component add "$component"
    installed+=("$component")
  fi
done

command -v go >/dev/null || echo "install-deps: no go command on PATH; e2e/cluster/build.sh needs Go 1.26 or later" >&2

echo "install-deps: ${installed[*]:-nothing to install}"
