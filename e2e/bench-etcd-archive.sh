#!/usr/bin/env bash
# Benchmark: the continuous archive (`etcd-backup archive`) under a steady load and a burst, and
# `etcd-backup point-in-time` against restoring the snapshot alone, on real etcd and a real
# Garage. Usage: e2e/bench-etcd-archive.sh [--seconds 60] [--rate 500] [--segment-seconds 5]
set -euo pipefail
cd "$(dirname "$0")/.."
e2e/install-deps.sh >/dev/null
cargo build --release --locked -p etcd-backup
cargo build --locked -p bench --bin bench-etcd-archive
exec target/debug/bench-etcd-archive --etcd-backup target/release/etcd-backup "$@"
