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

# What is cached decides how long the first run takes: each missing part's cold time, measured
# on this repository's 2-core machine (docs/getting-started.md), scaled by the cores here.
source e2e/cluster/versions.sh
started=$SECONDS
cores=$(nproc)
minutes=0 missing=()
need() { missing+=("$1"); minutes=$((minutes + $2)); }
command -v garage >/dev/null || [[ -x $HOME/.cargo/bin/garage ]] || need Garage 9
[[ -x $kube_bin/kube-apiserver ]] || need "Kubernetes $kube_release" 10
[[ -x $(etcd_bin "$control_plane_etcd")/etcd && -x $(etcd_bin "$demo_etcd_release")/etcd &&
  -x $containerd_bin/containerd ]] || need "etcd and containerd" 3
[[ -x ${CARGO_TARGET_DIR:-target}/debug/demo ]] || need "the operators and CLI" 5
minutes=$(((minutes * 2 + cores - 1) / cores + 3))
if ((${#missing[@]})); then
  echo "demo: about $minutes minutes on this machine ($cores cores): first it builds $(IFS=,; echo "${missing[*]}" | sed 's/,/, /g'); then about 3 minutes of demo"
else
  echo "demo: about 3 minutes (everything is built; most of it is the cron schedule's two backups)"
fi
# One line per stage: time since the start, what is done, what comes next.
stage() {
  local s=$((SECONDS - started))
  printf 'demo: [%d:%02d] %s\n' $((s / 60)) $((s % 60)) "$*"
}
stage "next: packages and Garage (e2e/install-deps.sh --demo)"
e2e/install-deps.sh --demo
stage "next: Kubernetes, containerd and etcd from their Go modules (e2e/cluster/build.sh --demo)"
e2e/cluster/build.sh --demo >/dev/null
# The debug profile: it compiles in a fraction of the release build's time (thin LTO, one codegen
# unit), and the demo measures nothing. Release images and the benchmarks use the release profile.
stage "next: the operators, the CLI and the demo (cargo build, debug profile)"
cargo build --locked -p etcd-backup -p etcd-backup-operator -p etcd-operator \
  -p etcd-restore-operator -p demo -p testbed --bin etcd-backup --bin etcd-backup-operator \
  --bin etcd-operator --bin etcd-restore-operator --bin demo --bin bed-agent
stage "next: the demo (bed, operators, cluster, backups, disaster, restore)"
# The bed's MySQL images need MariaDB's packages, which the demo does not install.
export BED_MYSQL_IMAGES=0
status=0
"${CARGO_TARGET_DIR:-target}"/debug/demo "$@" || status=$?
if [[ $status == 3 ]]; then
  echo "demo: running the CLI walk-through instead" >&2
  exec e2e/demo-cli.sh
fi
stage "done"
exit "$status"
