//! `docs/reference/etcd-operator.md` documents every flag of `etcd-operator` (with its environment
//! variable and default) in its `## Flags` table and every metric it registers in its
//! `## Metrics` table, and neither a flag nor a metric it no longer has.

use std::path::Path;

use testbed::reference_docs::{check_flags, check_labels_and_annotations, check_metrics};

#[test]
fn every_flag_is_documented() {
    check_flags(
        Path::new(env!("CARGO_BIN_EXE_etcd-operator")),
        "etcd-operator.md",
    );
}

#[test]
fn every_metric_is_documented() {
    check_metrics(
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src")),
        "etcd-operator.md",
    );
}

/// The labels and annotations page is checked here, for the code of every operator and crate.
#[test]
fn every_label_and_annotation_is_documented() {
    check_labels_and_annotations();
}
