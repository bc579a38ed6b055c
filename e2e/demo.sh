#!/usr/bin/env bash
# The whole product on this machine, in one command:
#   a single-node Kubernetes (real kubelet) and a local S3 server (Garage) reachable from pods;
#   the CRDs and the three operators installed from their images with the shipped manifests; then
#   1. a 3-member EtcdCluster (a claim each) from the coreos example, with sample keys;
#   2. a scheduled EtcdBackup (cron, maxBackups) to S3, waiting for two backups;
#   3. a disaster: every member pod and volume deleted (the cluster reports QuorumLost);
#   4. an EtcdRestore from the newest backup: every key back, 3 healthy members, the EtcdCluster
#      Running and owned by the EtcdCluster operator again;
#   5. a summary with timings; everything is removed at the end.
#
# Usage: e2e/demo.sh [--keep]   keep the namespace and bed up until Ctrl-C (prints how to connect)
#        e2e/demo.sh --cli      the CLI-only walk-through (no Kubernetes), e2e/demo-cli.sh
# The bed needs root (bridge, iptables, mounts, cgroups); without it, or when the bed cannot
# start, the script says why in one line and runs the CLI walk-through instead.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ ${1:-} == --cli ]]; then
  exec e2e/demo-cli.sh
fi
if [[ $(id -u) != 0 ]]; then
  echo "demo: the Kubernetes bed needs root (bridge, iptables, mounts); running the CLI walk-through instead" >&2
  exec e2e/demo-cli.sh
fi

cat <<'NOTE'
First run on a fresh machine: about 40 minutes (Garage built from source ~15 min, Kubernetes 1.37,
etcd and containerd built from their Go modules ~10 min, the release build ~10 min); later runs
about 5 minutes, most of it waiting for the cron schedule's two backups.
NOTE
e2e/install-deps.sh
e2e/cluster/build.sh
echo "== building the release binaries (the bed makes one image from each)"
cargo build --release --locked -p etcd-backup -p etcd-backup-operator -p etcd-operator \
  -p etcd-restore-operator -p testbed --bin etcd-backup --bin etcd-backup-operator \
  --bin etcd-operator --bin etcd-restore-operator --bin demo --bin bed-agent
status=0
target/release/demo "$@" || status=$?
if [[ $status == 3 ]]; then
  echo "demo: running the CLI walk-through instead" >&2
  exec e2e/demo-cli.sh
fi
exit "$status"
