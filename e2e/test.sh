#!/usr/bin/env bash
# Runs every test on this machine: installs what the tests need (etcd, Garage, MariaDB, ...),
# then `cargo test --workspace --locked`. Integration tests start their own servers on loopback.
# CI (.ci/run) runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

e2e/install-deps.sh
cargo test --workspace --locked
