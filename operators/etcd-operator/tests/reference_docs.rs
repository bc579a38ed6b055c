//! `docs/reference/etcd-operator.md` documents every flag of `etcd-operator` (with its environment
//! variable and default) in its `## Flags` table and every metric it registers in its
//! `## Metrics` table, and neither a flag nor a metric it no longer has; its conditions table
//! lists exactly the reasons each condition can carry.

use std::path::Path;

use etcd_operator::conditions::{
    Available, ConditionReason, DataPersistent, Defragmented, Degraded, Progressing,
    VersionSupported,
};
use repo_checks::reference_docs::{
    check_flags, check_labels_and_annotations, check_metrics, check_named_in_doc, page_path,
    section_rows,
};

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

/// The reasons the `## Conditions and events` table gives for condition `R` (the code spans of
/// its last column) are exactly `R`'s.
fn reasons_documented<R: ConditionReason>(page: &str) -> Result<(), String> {
    let rows = section_rows(page, "Conditions and events");
    let Some((_, row)) = rows.iter().find(|(codes, _)| codes == &[R::TYPE]) else {
        return Err(format!("no row for the condition {}", R::TYPE));
    };
    let last = row
        .trim()
        .trim_end_matches('|')
        .rsplit('|')
        .next()
        .unwrap_or_default();
    let documented: std::collections::BTreeSet<&str> = last.split('`').skip(1).step_by(2).collect();
    let code: std::collections::BTreeSet<&str> = R::ALL.iter().map(|r| r.as_str()).collect();
    let missing: Vec<_> = code.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&code).collect();
    if missing.is_empty() && unknown.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{}: reasons not documented {missing:?}, documented but never written {unknown:?}",
            R::TYPE
        ))
    }
}

#[test]
fn every_condition_reason_is_documented() {
    let page = std::fs::read_to_string(page_path("etcd-operator.md")).unwrap();
    let problems: Vec<String> = [
        reasons_documented::<Available>(&page),
        reasons_documented::<Progressing>(&page),
        reasons_documented::<Degraded>(&page),
        reasons_documented::<DataPersistent>(&page),
        reasons_documented::<Defragmented>(&page),
        reasons_documented::<VersionSupported>(&page),
    ]
    .into_iter()
    .filter_map(Result::err)
    .collect();
    assert!(
        problems.is_empty(),
        "docs/reference/etcd-operator.md: {problems:#?}"
    );
}

/// The troubleshooting page says what to do about each reason a condition can carry.
#[test]
fn every_condition_reason_is_in_the_troubleshooting_page() {
    let reasons: Vec<&str> = (Available::ALL.iter().map(|r| r.as_str()))
        .chain(Progressing::ALL.iter().map(|r| r.as_str()))
        .chain(Degraded::ALL.iter().map(|r| r.as_str()))
        .chain(DataPersistent::ALL.iter().map(|r| r.as_str()))
        .chain(Defragmented::ALL.iter().map(|r| r.as_str()))
        .chain(VersionSupported::ALL.iter().map(|r| r.as_str()))
        .collect();
    check_named_in_doc("operations/troubleshooting.md", &reasons);
}
