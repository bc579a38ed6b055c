//! The shipped monitoring (`deploy/monitoring/`): the alert rules pass Prometheus's own
//! `promtool check rules` and `promtool test rules` (`e2e/monitoring/alerts-test.yaml`, synthetic
//! series), every alert is tested firing, and every metric the rules and the Grafana dashboard
//! name is one the three operators export (and every exported one is on the dashboard).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;
use testbed::kustomize::root;

fn rule_file() -> Value {
    let path = root().join("deploy/monitoring/prometheus-rule.yaml");
    serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn dashboard() -> Value {
    let path = root().join("deploy/monitoring/grafana-dashboard.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `PROMTOOL`, else where `e2e/install-deps.sh` unpacks it, else `promtool` on `PATH`.
fn promtool() -> PathBuf {
    if let Some(path) = std::env::var_os("PROMTOOL") {
        return path.into();
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_default();
    let unpacked = cache.join("etcd-backup-suite/prometheus/usr/bin/promtool");
    if unpacked.exists() {
        unpacked
    } else {
        "promtool".into()
    }
}

fn run(args: &[&str], dir: &std::path::Path) {
    let output = Command::new(promtool())
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run promtool (e2e/install-deps.sh unpacks it): {e}"));
    assert!(
        output.status.success(),
        "promtool {args:?}:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The expressions of every rule.
fn rule_expressions() -> Vec<String> {
    let rules = rule_file();
    rules["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .map(|r| r["expr"].as_str().unwrap().to_string())
        .collect()
}

fn dashboard_expressions() -> Vec<String> {
    let dashboard = dashboard();
    dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .map(|t| t["expr"].as_str().unwrap().to_string())
        .collect()
}

/// The metric names a PromQL expression uses (this project's prefixes).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find("etcd_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// Every sample name the three operators export (counters with `_total`, histograms with their
/// `_bucket`, `_sum` and `_count`), from their own registries. A family prints nothing until it
/// has a series, so each gets one.
fn exported() -> BTreeSet<String> {
    let cluster = etcd_operator::metrics::Metrics::default();
    let labels = etcd_operator::metrics::ClusterLabels {
        namespace: "ns".into(),
        name: "c".into(),
    };
    let change = etcd_operator::metrics::ChangeLabels {
        namespace: "ns".into(),
        name: "c".into(),
        step: "add".into(),
    };
    for family in [
        &cluster.size,
        &cluster.members,
        &cluster.members_healthy,
        &cluster.quorum_lost,
    ] {
        family.get_or_create(&labels).set(1);
    }
    cluster.membership_changes.get_or_create(&change).inc();
    let member = etcd_operator::metrics::MemberLabels {
        namespace: "ns".into(),
        name: "c".into(),
        member: "c-0".into(),
    };
    for family in [&cluster.db_size, &cluster.db_size_in_use, &cluster.db_quota] {
        family.get_or_create(&member).set(1);
    }
    for family in [&cluster.last_defrag, &cluster.last_defrag_duration] {
        family.get_or_create(&member).set(1.0);
    }
    let alarm = etcd_operator::metrics::AlarmLabels {
        namespace: "ns".into(),
        name: "c".into(),
        alarm: "NOSPACE".into(),
    };
    cluster.alarms.get_or_create(&alarm).set(1);
    cluster.upgrade_steps.get_or_create(&change).inc();

    use etcd_backup_operator::metrics as backup;
    let backups = backup::Metrics::default();
    let labels = backup::ObjectLabels {
        namespace: "ns".into(),
        name: "b".into(),
    };
    for family in [
        &backups.last_success,
        &backups.last_failure,
        &backups.schedule_interval,
        &backups.last_drill_success,
        &backups.last_drill_failure,
        &backups.drill_interval,
    ] {
        family.get_or_create(&labels).set(1.0);
    }
    backups.last_size.get_or_create(&labels).set(1);
    backups.archived_revision.get_or_create(&labels).set(1);
    backups.archive_gap_revisions.get_or_create(&labels).inc();
    let result = backup::ResultLabels {
        result: "success".into(),
    };
    backups.duration.get_or_create(&result).observe(1.0);
    let failure = backup::FailureLabels {
        namespace: "ns".into(),
        name: "b".into(),
        reason: "x".into(),
    };
    backups.failures.get_or_create(&failure).inc();
    backups.drill_failures.get_or_create(&failure).inc();

    use etcd_restore_operator::metrics as restore;
    let restores = restore::Metrics::default();
    restores.running("ns", "r");
    restores.finish(
        "ns",
        "r",
        Err(etcd_cluster::restore_plan::RestoreFailure::BackupInvalid),
        1.0,
    );
    // Reconcile failures are counted by reason: a family shows only once one is counted.
    for errors in [
        &cluster.reconcile_errors,
        &backups.reconcile_errors,
        &restores.reconcile_errors,
    ] {
        errors.inc("KubernetesApi");
    }

    let texts = [cluster.encode(), backups.encode(), restores.encode()];
    let mut names = BTreeSet::new();
    for text in texts {
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("# TYPE ") else {
                continue;
            };
            let (name, kind) = rest.split_once(' ').unwrap();
            match kind {
                "counter" => names.insert(format!("{name}_total")),
                "gauge" => names.insert(name.to_string()),
                "histogram" => {
                    for suffix in ["_bucket", "_sum", "_count"] {
                        names.insert(format!("{name}{suffix}"));
                    }
                    true
                }
                other => panic!("{name}: unexpected metric type {other}"),
            };
        }
    }
    assert!(names.len() > 20, "{names:?}");
    names
}

#[test]
fn promtool_checks_the_rules_and_every_alert_fires_in_its_tests() {
    let dir = tempfile::tempdir().unwrap();
    // promtool reads rule groups; the PrometheusRule carries them as its spec.
    let groups = serde_saphyr::to_string(&rule_file()["spec"]).unwrap();
    std::fs::write(dir.path().join("rules.yaml"), groups).unwrap();
    let tests = root().join("e2e/monitoring/alerts-test.yaml");
    std::fs::copy(&tests, dir.path().join("alerts-test.yaml")).unwrap();
    run(&["check", "rules", "rules.yaml"], dir.path());
    run(&["test", "rules", "alerts-test.yaml"], dir.path());

    let cases: Value = serde_saphyr::from_str(&std::fs::read_to_string(&tests).unwrap()).unwrap();
    let tested_firing: BTreeSet<&str> = cases["tests"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_array().unwrap())
        .filter(|c| !c["exp_alerts"].as_array().unwrap().is_empty())
        .map(|c| c["alertname"].as_str().unwrap())
        .collect();
    let rules = rule_file();
    let alerts: BTreeSet<&str> = rules["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .map(|r| r["alert"].as_str().unwrap())
        .collect();
    assert_eq!(
        alerts, tested_firing,
        "every alert has a case where it fires"
    );
}

#[test]
fn rules_and_dashboard_use_only_exported_metrics_and_the_dashboard_shows_them_all() {
    let exported = exported();
    let in_rules: BTreeSet<String> = rule_expressions()
        .iter()
        .flat_map(|e| metric_names(e))
        .collect();
    let on_dashboard: BTreeSet<String> = dashboard_expressions()
        .iter()
        .flat_map(|e| metric_names(e))
        .collect();
    let unknown: Vec<_> = in_rules
        .union(&on_dashboard)
        .filter(|n| !exported.contains(*n))
        .collect();
    assert!(
        unknown.is_empty(),
        "not exported: {unknown:?}; exported: {exported:?}"
    );
    // Each exported metric (a histogram by its buckets) is on the dashboard.
    let missing: Vec<_> = exported
        .iter()
        .filter(|n| !n.ends_with("_sum") && !n.ends_with("_count"))
        .filter(|n| !on_dashboard.contains(*n))
        .collect();
    assert!(missing.is_empty(), "not on the dashboard: {missing:?}");
}

#[test]
fn metric_names_are_read_from_promql() {
    assert_eq!(
        metric_names("time() - etcd_backup_last_success_timestamp_seconds{a=\"b\"} > 3 * x"),
        BTreeSet::from(["etcd_backup_last_success_timestamp_seconds".to_string()])
    );
}

#[test]
fn the_monitoring_base_renders_the_rule_and_the_dashboard_config_map() {
    let docs = testbed::kustomize::render(&root().join("deploy/monitoring")).unwrap();
    assert_eq!(docs.len(), 2);
    let rule = docs.iter().find(|d| d["kind"] == "PrometheusRule").unwrap();
    assert_eq!(rule, &rule_file());
    let map = docs.iter().find(|d| d["kind"] == "ConfigMap").unwrap();
    assert_eq!(map["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(map["metadata"]["namespace"], "etcd");
    let json = map["data"]["grafana-dashboard.json"].as_str().unwrap();
    assert_eq!(serde_json::from_str::<Value>(json).unwrap(), dashboard());
}
