//! `docs/reference/etcd-restore-operator.md` documents every flag of `etcd-restore-operator` (with its environment
//! variable and default) in its `## Flags` table and every metric it registers in its
//! `## Metrics` table, and neither a flag nor a metric it no longer has; its `## How a restore
//! fails` section names every failure reason.

use std::path::Path;

use etcd_cluster::restore_plan::RestoreFailure;
use repo_checks::reference_docs::{
    check_flags, check_metrics, check_named_in_doc, check_named_in_section,
};

#[test]
fn every_flag_is_documented() {
    check_flags(
        Path::new(env!("CARGO_BIN_EXE_etcd-restore-operator")),
        "etcd-restore-operator.md",
    );
}

#[test]
fn every_metric_is_documented() {
    check_metrics(
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src")),
        "etcd-restore-operator.md",
    );
}

#[test]
fn every_failure_reason_is_documented() {
    let reasons = RestoreFailure::ALL.map(RestoreFailure::as_str);
    check_named_in_section("etcd-restore-operator.md", "How a restore fails", &reasons);
}

/// The troubleshooting page says what to do about each failure reason.
#[test]
fn every_failure_reason_is_in_the_troubleshooting_page() {
    let reasons = RestoreFailure::ALL.map(RestoreFailure::as_str);
    check_named_in_doc("operations/troubleshooting.md", &reasons);
}
