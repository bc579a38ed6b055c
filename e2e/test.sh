#!/usr/bin/env bash
# Runs every test on this machine: installs what the tests need (etcd, Garage, MariaDB, ...),
# builds Kubernetes (1.37, or KUBE_VERSION=1.35), etcd and containerd from their Go modules (once;
# cached), then `cargo test --workspace --locked`. Integration tests start their own servers on
# loopback; the Kubernetes tests start the beds (e2e/apiserver, e2e/cluster). With KUBECONFIG set,
# the Kubernetes tests use that cluster instead. CI (.ci/run) runs exactly this. Formatting and
# clippy come first: a change that fails them fails before the long tests.
set -euo pipefail
cd "$(dirname "$0")/.."

e2e/install-deps.sh
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
[[ -n ${KUBECONFIG:-} ]] || e2e/cluster/build.sh
cargo test --workspace --locked
