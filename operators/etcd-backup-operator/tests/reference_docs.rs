//! `docs/reference/etcd-backup-operator.md` documents every flag of `etcd-backup-operator` (with its environment
//! variable and default) in its `## Flags` table and every metric it registers in its
//! `## Metrics` table, and neither a flag nor a metric it no longer has.

use std::path::Path;

use repo_checks::reference_docs::{check_flags, check_metrics};

#[test]
fn every_flag_is_documented() {
    check_flags(
        Path::new(env!("CARGO_BIN_EXE_etcd-backup-operator")),
        "etcd-backup-operator.md",
    );
}

#[test]
fn every_metric_is_documented() {
    check_metrics(
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src")),
        "etcd-backup-operator.md",
    );
}
