#!/usr/bin/env bash
# Benchmark: `etcd-backup save` vs `etcdctl snapshot save` + `aws s3 cp`, on real etcd and a real
# Garage S3 server. Usage: e2e/bench-etcd.sh [--size-mib 1024] [--small-mib 100]
set -euo pipefail
cd "$(dirname "$0")/.."
e2e/install-deps.sh >/dev/null
cargo build --release --locked -p etcd-backup -p bench --bin etcd-backup --bin bench-etcd-save
exec target/release/bench-etcd-save --etcd-backup target/release/etcd-backup "$@"
