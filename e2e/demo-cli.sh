#!/usr/bin/env bash
# The CLI-only walk-through of the etcd backup data path (`e2e/demo.sh --cli`, and its fallback
# when the Kubernetes bed cannot run), on a fresh Debian machine:
#   1. installs what it needs (e2e/install-deps.sh),
#   2. starts a throwaway etcd on loopback and writes sample keys,
#   3. backs them up with `etcd-backup save` to the local directory backend (plain and zstd), and to
#      a local Garage S3 server when one is installed,
#   4. verifies every backup, wipes etcd's data, fetches a backup and restores it with the stock
#      `etcdctl snapshot restore` (hash check on), starts etcd on the restored data,
#   5. shows that every key came back.
# Everything runs under one temporary directory that is removed at the end (DEMO_KEEP=1 keeps it).
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
die() { echo "demo: $*" >&2; exit 1; }

e2e/install-deps.sh
say "building etcd-backup"
cargo build --release --locked -p etcd-backup
bin=$PWD/target/release/etcd-backup

work=$(mktemp -d /tmp/etcd-backup-demo.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [[ -d $work/garage ]] && e2e/garage-up.sh --stop "$work/garage" || true
  if [[ ${DEMO_KEEP:-} == 1 ]]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

# A free loopback port (the kernel picks it; nothing else on loopback is touched).
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start_etcd() { # NAME DATA_DIR CLIENT_PORT PEER_PORT
  etcd --name "$1" --data-dir "$2" --logger zap \
    --listen-client-urls "http://127.0.0.1:$3" --advertise-client-urls "http://127.0.0.1:$3" \
    --listen-peer-urls "http://127.0.0.1:$4" --initial-advertise-peer-urls "http://127.0.0.1:$4" \
    --initial-cluster "$1=http://127.0.0.1:$4" >"$work/$1.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do
    ETCDCTL_API=3 etcdctl --endpoints "http://127.0.0.1:$3" endpoint health >/dev/null 2>&1 && return
    sleep 0.1
  done
  tail "$work/$1.log" >&2
  die "etcd $1 did not become healthy"
}

say "starting etcd on loopback"
client=$(free_port) peer=$(free_port)
start_etcd demo "$work/etcd-data" "$client" "$peer"
export ETCDCTL_API=3
ctl() { etcdctl --endpoints "http://127.0.0.1:$client" "$@"; }

say "writing 300 sample keys"
for i in $(seq -w 1 300); do ctl put "/demo/key-$i" "value-$i-$RANDOM" >/dev/null; done
ctl get --prefix /demo/ --keys-only | grep -c . >"$work/count"
ctl get --prefix /demo/ >"$work/before.txt"
echo "etcd holds $(cat "$work/count") keys under /demo/"

say "backing up to the local directory backend"
"$bin" save --endpoints "http://127.0.0.1:$client" --to "file://$work/backups/etcd.backup"
"$bin" save --endpoints "http://127.0.0.1:$client" --to "file://$work/backups/etcd.backup.zst" --compress zstd
urls=("file://$work/backups/etcd.backup" "file://$work/backups/etcd.backup.zst")

if command -v garage >/dev/null || [[ -x $HOME/.cargo/bin/garage ]]; then
  say "backing up to a local Garage S3 server"
  eval "$(e2e/garage-up.sh "$work/garage" "$(free_port)" "$(free_port)" "$(free_port)")"
  s3=(--s3-endpoint "$AWS_ENDPOINT_URL" --s3-region "$AWS_REGION" --s3-force-path-style)
  "$bin" "${s3[@]}" save --endpoints "http://127.0.0.1:$client" --to "s3://$GARAGE_BUCKET/demo/etcd.backup" --compress zstd
  urls+=("s3://$GARAGE_BUCKET/demo/etcd.backup")
else
  echo "(no garage binary: skipping S3; \`cargo install garage --locked\` enables it)"
fi

say "verifying every backup (sha256 trailer, manifest, size)"
for url in "${urls[@]}"; do
  s3args=(); [[ $url == s3://* ]] && s3args=("${s3[@]}")
  "$bin" "${s3args[@]}" verify "$url"
done

say "wiping etcd"
kill "${pids[0]}"; wait "${pids[0]}" 2>/dev/null || true
rm -rf "$work/etcd-data"
echo "data dir removed"

restore_url=${urls[-1]}
say "fetching $restore_url and restoring it with stock etcdctl (hash check on)"
s3args=(); [[ $restore_url == s3://* ]] && s3args=("${s3[@]}")
"$bin" "${s3args[@]}" fetch "$restore_url" --out "$work/restore.db"
peer2=$(free_port) client2=$(free_port)
etcdctl snapshot restore "$work/restore.db" --name restored --data-dir "$work/restored-data" \
  --initial-cluster "restored=http://127.0.0.1:$peer2" --initial-advertise-peer-urls "http://127.0.0.1:$peer2" \
  --initial-cluster-token demo-restored >"$work/restore.log" 2>&1 || { cat "$work/restore.log"; die "snapshot restore failed"; }

say "starting etcd on the restored data"
start_etcd restored "$work/restored-data" "$client2" "$peer2"
client=$client2
ctl get --prefix /demo/ >"$work/after.txt"
if cmp -s "$work/before.txt" "$work/after.txt"; then
  echo "all $(cat "$work/count") keys and values came back identical"
  echo "demo: OK"
else
  diff "$work/before.txt" "$work/after.txt" | head
  die "restored keys differ"
fi
