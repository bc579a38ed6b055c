#!/usr/bin/env bash
# Runs every test on this machine: installs what the tests need (etcd, Garage, MariaDB, ...),
# builds Kubernetes (1.37, or KUBE_VERSION=1.35), etcd and containerd from their Go modules (once;
# cached), then `cargo test --workspace --locked`, then the tests on a bed of three nodes (ignored
# in a plain run: `cargo test --workspace -- --ignored three_nodes`). Integration tests start
# their own servers on loopback; the Kubernetes tests start the beds (e2e/apiserver,
# e2e/cluster). With KUBECONFIG set, the Kubernetes tests use that cluster instead (and the
# three-node tests, which take nodes down, do not run). CI (.ci/run) runs exactly this.
# Formatting and clippy come first: a change that fails them fails before the long tests.
set -euo pipefail
cd "$(dirname "$0")/.."

e2e/install-deps.sh
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
[[ -n ${KUBECONFIG:-} ]] || e2e/cluster/build.sh
cargo test --workspace --locked
# The tests on the bed of three nodes (node faults, drains) run in a second run, on a bed of
# their own: one bed runs per machine, and the run above used the one-node bed, which goes first.
if [[ -n ${KUBECONFIG:-} ]]; then
  echo "test.sh: KUBECONFIG is set: the three_nodes tests (they take nodes down) are not run" >&2
  exit 0
fi
e2e/cluster/up.sh --stop "${BED_DIR:-${TMPDIR:-/tmp}/etcd-backup-suite-bed}"
cargo test --workspace --locked -- --ignored three_nodes
