#!/usr/bin/env bash
# Runs every test on this machine: installs what the tests need (etcd, Garage, MariaDB, ...),
# builds Kubernetes (1.37, or KUBE_VERSION=1.35), etcd and containerd from their Go modules (once;
# cached), builds the tests that use the kubelet bed, then runs the tests in two lanes at once:
#
# - the bed lane: the test targets that use the kubelet bed (BED_TARGETS below), one after
#   another, on the one-node bed; then the tests on a bed of three nodes (ignored in a plain run:
#   `cargo test --workspace -- --ignored three_nodes`) on a bed of their own (one bed runs per
#   machine). The bed follows this script's life (BED_USER_PID), so it starts once per phase.
# - the other lane: `cargo clippy -D warnings` (in a target dir of its own, so neither lane's
#   cargo waits for the other's build lock), then builds and runs every other test target, the
#   unit tests and the doc tests, with the bed refused (BED_REFUSED: up.sh then fails at once, saying so): a
#   test that needs the bed but is missing from BED_TARGETS fails loudly instead of running
#   beside the bed lane unseen.
#
# Why two lanes: the bed's tests mostly wait (pods starting, node timings, grace periods) and
# left the CPU about half idle while clippy and the bed-less tests waited their turn (measured
# in docs/development/tests.md). Each lane goes on past a failure; the script fails at the end,
# naming what failed. Formatting is checked first (seconds).
#
# Integration tests start their own servers on loopback; the Kubernetes tests start the beds
# (e2e/apiserver, e2e/cluster). With KUBECONFIG set, the Kubernetes tests use that cluster instead
# (and the three-node tests, which take nodes down, do not run). CI (.ci/run) runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

# The test targets that start or join the kubelet bed, by name (a name two packages share runs
# in the bed lane for both: cargo selects targets by name, and every cargo run here selects
# the whole workspace so that it builds nothing the first build did not).
BED_TARGETS=(demo e2e in_cluster defrag_bench helm_chart drill cronjob statefulset clone_bench
  cluster images nodes)

started=$SECONDS
stamp() { printf 'test.sh: %s (%d min %02d s)\n' "$*" $(((SECONDS - started) / 60)) $(((SECONDS - started) % 60)) >&2; }

# `--test NAME` for each NAME given.
test_filters() { printf -- '--test\n%s\n' "$@"; }

e2e/install-deps.sh
cargo fmt --all --check
if [[ -z ${KUBECONFIG:-} ]]; then
  e2e/cluster/build.sh
  # The MySQL images' Debian trees (mmdebstrap; cached) beside the build, not in the bed's
  # first start: about 3 min on a new machine, mostly downloads and dpkg.
  roots_dir=$(mktemp -d "${TMPDIR:-/tmp}/test-sh-roots.XXXXXX")
  e2e/cluster/images.sh --debian-roots "$roots_dir" &
  roots_pid=$!
fi
# What the bed lane runs (and the binaries its images hold); the other lane builds the rest
# while the bed lane runs.
stamp "building the bed lane's tests"
mapfile -t bed_filters < <(test_filters "${BED_TARGETS[@]}")
cargo test --workspace --locked --no-run "${bed_filters[@]}"
if [[ -n ${roots_pid:-} ]]; then
  wait "$roots_pid" || stamp "the Debian trees failed (above); the bed's start makes them again"
  rm -rf "$roots_dir"
fi

# The names of the workspace's test targets not in BED_TARGETS.
bedless_targets() {
  cargo metadata --no-deps --format-version 1 --locked |
    jq -r '.packages[].targets[] | select(.kind | index("test")) | .name' | sort -u |
    grep -vxF -f <(printf '%s\n' "${BED_TARGETS[@]}")
}

# The lane without the bed: clippy, then what needs no bed. Its output goes to a log, shown
# when it ends (two lanes' lines interleaved would be unreadable).
bedless_lane() {
  local -a filters names
  stamp "lane without the bed: clippy"
  CARGO_TARGET_DIR=target/clippy cargo clippy --workspace --all-targets --locked -- -D warnings ||
    failed+=(clippy)
  stamp "lane without the bed: the tests that need no bed"
  export BED_REFUSED="e2e/test.sh runs this test in the lane without the bed: add its target to BED_TARGETS"
  mapfile -t names < <(bedless_targets)
  mapfile -t filters < <(test_filters "${names[@]}")
  cargo test --workspace --locked --no-fail-fast --lib --bins "${filters[@]}" ||
    failed+=("tests without the bed")
  cargo test --workspace --locked --no-fail-fast --doc || failed+=("doc tests")
  stamp "lane without the bed: done"
  ((${#failed[@]} == 0)) || { stamp "lane without the bed: FAILED: ${failed[*]}"; return 1; }
}

failed=()
lane_log=$(mktemp "${TMPDIR:-/tmp}/test-sh-bedless.XXXXXX")
# Job control: the lane runs in a process group of its own, so that stopping this script stops
# the lane's cargo and test processes too.
set -m
bedless_lane >"$lane_log" 2>&1 &
bedless_pid=$!
set +m
trap 'kill -- "-$bedless_pid" 2>/dev/null || true' EXIT

export BED_USER_PID=$$
stamp "bed lane: the tests on the one-node bed"
cargo test --workspace --locked --no-fail-fast "${bed_filters[@]}" || failed+=("the one-node bed tests")
if [[ -n ${KUBECONFIG:-} ]]; then
  echo "test.sh: KUBECONFIG is set: the three_nodes tests (they take nodes down) are not run" >&2
else
  stamp "bed lane: the tests on the bed of three nodes"
  e2e/cluster/up.sh --stop "${BED_DIR:-${TMPDIR:-/tmp}/etcd-backup-suite-bed}"
  # Every target, in case a three_nodes test is added outside BED_TARGETS: the others run none.
  cargo test --workspace --locked --no-fail-fast -- --ignored three_nodes ||
    failed+=("the three-node tests")
fi
stamp "bed lane: done; waiting for the lane without the bed"
wait "$bedless_pid" || failed+=("the lane without the bed (above)")
trap - EXIT
echo "===== the lane without the bed =====" >&2
cat "$lane_log" >&2
rm -f "$lane_log"
if ((${#failed[@]})); then
  stamp "FAILED: ${failed[*]}"
  exit 1
fi
stamp "every test passed"
