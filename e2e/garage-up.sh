#!/usr/bin/env bash
# Starts a single-node Garage v2 S3 server on loopback for tests, the demo and the benchmark.
#
#   e2e/garage-up.sh DIR S3_PORT RPC_PORT ADMIN_PORT   start the instance in DIR (or restart it)
#   e2e/garage-up.sh --bucket DIR NAME                  create bucket NAME for the test key
#   e2e/garage-up.sh --stop DIR                         stop it and wait until it is gone
#
#   GARAGE_S3_ADDRESS   address the S3 API binds to (default 127.0.0.1; the kubelet bed's pods
#                       reach Garage on the bridge address 10.88.0.1)
#
# Prints `export` lines with the AWS variables clients need. The key is fixed so callers know it
# without parsing Garage's output. Loopback and test secrets only: never for production.
set -euo pipefail

GARAGE=${GARAGE:-$(command -v garage || echo "$HOME/.cargo/bin/garage")}
KEY_ID=GK31c2f218a2e44f485b94239e
SECRET=b892c0665f0ada8a4755dae98baa3b133590e11dae3bcc1f9d769d67f16c3835
BUCKET=backups

die() { echo "garage-up.sh: $*" >&2; exit 1; }
[[ -x $GARAGE ]] || die "garage not found: run e2e/install-deps.sh"

# `kill -0` is not enough: a killed server stays a zombie until init reaps it, its main thread
# turns zombie while other threads still hold its sockets, and pids get reused.
state() { awk '/^State:/{s=$2} /^Threads:/{t=$2} END{print s t}' "/proc/$1/status" 2>/dev/null; }
# Dead = gone, or a zombie whose threads have all exited.
dead() { local s; s=$(state "$1"); [[ -z $s || $s == Z1 ]]; }
pid() { cat "$dir/garage.pid" 2>/dev/null; }
running() {
  local pid; pid=$(pid) || return 1
  [[ $(state "$pid") == [^Z]* ]] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$dir/garage.toml"
}
wait_dead() { for _ in $(seq 200); do dead "$1" && return; sleep 0.025; done; return 1; }

case ${1:-} in
--stop)
  dir=$(realpath "$2")
  running || exit 0
  pid=$(pid)
  kill "$pid"
  wait_dead "$pid" || { kill -9 "$pid"; wait_dead "$pid"; }
  exit 0 ;;
--bucket)
  dir=$(realpath "$2")
  g() { "$GARAGE" -c "$dir/garage.toml" "$@" >/dev/null; }
  g bucket create "$3"
  g bucket allow --read --write --owner "$3" --key "$KEY_ID"
  exit 0 ;;
esac

(($# == 4)) || die "usage: $0 DIR S3_PORT RPC_PORT ADMIN_PORT | --bucket DIR NAME | --stop DIR"
mkdir -p "$1"
dir=$(realpath "$1") s3_port=$2 rpc_port=$3 admin_port=$4 s3_address=${GARAGE_S3_ADDRESS:-127.0.0.1}
hex() { od -An -tx1 -N"$1" /dev/urandom | tr -d ' \n'; }
if [[ ! -f $dir/garage.toml ]]; then
  # umask: Garage refuses a config with secrets that others can read.
  (umask 077 && cat >"$dir/garage.toml" <<TOML)
metadata_dir = "$dir/meta"
data_dir = "$dir/data"
db_engine = "sqlite"
replication_factor = 1
# Incompressible benchmark data would only cost CPU that the client under test needs.
compression_level = "none"
rpc_bind_addr = "127.0.0.1:$rpc_port"
rpc_public_addr = "127.0.0.1:$rpc_port"
rpc_secret = "$(hex 32)"

[s3_api]
s3_region = "garage"
api_bind_addr = "$s3_address:$s3_port"

[admin]
api_bind_addr = "127.0.0.1:$admin_port"
admin_token = "$(hex 16)"
TOML
fi

if ! running; then
  # A server killed a moment ago may still hold the ports.
  if old=$(pid); then wait_dead "$old" || true; fi
  # --single-node assigns and applies the layout (dc1, whole disk), and the default key and
  # bucket flags import our key and grant it read/write/owner on the bucket; all of it
  # happens before the S3 port opens, and again idempotently on a restart.
  GARAGE_DEFAULT_ACCESS_KEY=$KEY_ID GARAGE_DEFAULT_SECRET_KEY=$SECRET GARAGE_DEFAULT_BUCKET=$BUCKET \
    setsid "$GARAGE" -c "$dir/garage.toml" server --single-node --default-bucket \
    </dev/null >>"$dir/garage.log" 2>&1 &
  echo $! >"$dir/garage.pid"
fi

# Ready once the S3 port accepts a connection (it opens only after the setup above).
for _ in $(seq 300); do
  [[ $(state "$(pid)") == [^Z]* ]] || { tail -20 "$dir/garage.log" >&2; die "garage exited (log: $dir/garage.log)"; }
  # The RPC check proves the port is ours: a stray server holding it would fail our secret.
  if (exec 3<>"/dev/tcp/$s3_address/$s3_port") 2>/dev/null && "$GARAGE" -c "$dir/garage.toml" status >/dev/null 2>&1; then
    cat <<ENV
export AWS_ACCESS_KEY_ID=$KEY_ID
export AWS_SECRET_ACCESS_KEY=$SECRET
export AWS_REGION=garage
export AWS_DEFAULT_REGION=garage
export AWS_ENDPOINT_URL=http://$s3_address:$s3_port
export GARAGE_DIR=$dir
export GARAGE_BUCKET=$BUCKET
ENV
    exit 0
  fi
  sleep 0.05
done
tail -20 "$dir/garage.log" >&2
die "garage did not open $s3_address:$s3_port in 15 s (log: $dir/garage.log)"
