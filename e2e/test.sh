#!/usr/bin/env bash
# Runs every test on this machine: installs what the tests need (etcd, Garage, MariaDB, ...),
# builds the Kubernetes 1.20 API server from Debian's source package (once; cached), then
# `cargo test --workspace --locked`. Integration tests start their own servers on loopback.
# With KUBECONFIG set, the Kubernetes tests use that cluster instead. CI (.ci/run) runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

e2e/install-deps.sh
[[ -n ${KUBECONFIG:-} ]] || e2e/apiserver/build.sh
cargo test --workspace --locked
