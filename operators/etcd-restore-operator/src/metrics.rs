//! Prometheus metrics (`/metrics`), prefixed `etcd_restore_`.

use operator_runtime::process::PerObjectState;
use operator_runtime::reconcile_errors::ReconcileErrors;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use etcd_api::RestorePhase;
use etcd_cluster::restore_plan::RestoreFailure;

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct RestoreLabels {
    pub namespace: String,
    pub name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub namespace: String,
    pub name: String,
    /// `succeeded` or `failed`.
    pub result: String,
    /// Why it failed (`BackupInvalid`, ...); empty for a success.
    pub reason: String,
}

pub struct Metrics {
    pub registry: Registry,
    /// Restores that finished, by result and failure reason.
    pub finished: Family<ResultLabels, Counter>,
    /// 1 while a restore is running.
    pub in_progress: Family<RestoreLabels, Gauge>,
    /// Seconds the last finished restore took.
    pub duration_seconds: Family<RestoreLabels, Gauge<f64, AtomicU64>>,
    /// 1 while an EtcdRestore that failed exists (what the alert watches: it ends when the
    /// restore is deleted or retried, and comes back after an operator restart).
    pub failed: Family<RestoreLabels, Gauge>,
    pub reconcile_errors: ReconcileErrors,
    /// The restores with series, so that a deleted one's series go with it.
    seen: Mutex<BTreeSet<RestoreLabels>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("etcd_restore");
        let finished = Family::<ResultLabels, Counter>::default();
        registry.register(
            "finished",
            "Restores finished, by result (succeeded, failed) and, for a failure, its reason",
            finished.clone(),
        );
        let in_progress = Family::<RestoreLabels, Gauge>::default();
        registry.register(
            "in_progress",
            "1 while the restore runs",
            in_progress.clone(),
        );
        let duration_seconds = Family::<RestoreLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "duration_seconds",
            "Wall-clock seconds of the last finished restore, from start to success or failure",
            duration_seconds.clone(),
        );
        let failed = Family::<RestoreLabels, Gauge>::default();
        registry.register(
            "failed",
            "1 while the EtcdRestore exists in phase Failed",
            failed.clone(),
        );
        let reconcile_errors = ReconcileErrors::default();
        reconcile_errors.register(&mut registry);
        Metrics {
            registry,
            failed,
            seen: Mutex::default(),
            finished,
            in_progress,
            duration_seconds,
            reconcile_errors,
        }
    }
}

impl Metrics {
    pub fn running(&self, namespace: &str, name: &str) {
        let labels = self.labels(namespace, name);
        self.in_progress.get_or_create(&labels).set(1);
        self.failed.get_or_create(&labels).set(0);
    }

    /// A restore deleted before it ended: no longer in progress, and not counted as finished.
    pub fn abandoned(&self, namespace: &str, name: &str) {
        self.in_progress
            .get_or_create(&self.labels(namespace, name))
            .set(0);
    }

    /// A restore that ended earlier (seen again, after a restart of the operator, say).
    pub fn ended(&self, namespace: &str, name: &str, phase: RestorePhase) {
        self.failed
            .get_or_create(&self.labels(namespace, name))
            .set(i64::from(phase == RestorePhase::Failed));
    }

    pub fn finish(
        &self,
        namespace: &str,
        name: &str,
        outcome: Result<(), RestoreFailure>,
        seconds: f64,
    ) {
        let succeeded = outcome.is_ok();
        let labels = self.labels(namespace, name);
        self.in_progress.get_or_create(&labels).set(0);
        self.duration_seconds.get_or_create(&labels).set(seconds);
        self.failed
            .get_or_create(&labels)
            .set(i64::from(!succeeded));
        self.finished
            .get_or_create(&result_labels(&labels, outcome))
            .inc();
    }

    fn remove(&self, labels: &RestoreLabels) {
        self.in_progress.remove(labels);
        self.duration_seconds.remove(labels);
        self.failed.remove(labels);
        let failures = RestoreFailure::ALL.map(Err);
        for outcome in std::iter::once(Ok(())).chain(failures) {
            self.finished.remove(&result_labels(labels, outcome));
        }
    }

    /// The labels of a restore, now one with series.
    fn labels(&self, namespace: &str, name: &str) -> RestoreLabels {
        let labels = restore_labels(namespace, name);
        self.seen_restores().insert(labels.clone());
        labels
    }

    fn seen_restores(&self) -> std::sync::MutexGuard<'_, BTreeSet<RestoreLabels>> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String");
        out
    }
}

/// A deleted restore's series go with it.
impl PerObjectState for Metrics {
    fn forget(&self, namespace: &str, name: &str) {
        let labels = restore_labels(namespace, name);
        self.seen_restores().remove(&labels);
        self.remove(&labels);
    }

    fn retain(&self, exists: &dyn Fn(&str, &str) -> bool) {
        let gone: Vec<RestoreLabels> = {
            let mut seen = self.seen_restores();
            let gone = (seen.iter())
                .filter(|l| !exists(&l.namespace, &l.name))
                .cloned()
                .collect();
            seen.retain(|l| exists(&l.namespace, &l.name));
            gone
        };
        for labels in &gone {
            self.remove(labels);
        }
    }
}

fn restore_labels(namespace: &str, name: &str) -> RestoreLabels {
    RestoreLabels {
        namespace: namespace.into(),
        name: name.into(),
    }
}

fn result_labels(restore: &RestoreLabels, outcome: Result<(), RestoreFailure>) -> ResultLabels {
    ResultLabels {
        namespace: restore.namespace.clone(),
        name: restore.name.clone(),
        result: if outcome.is_ok() {
            "succeeded"
        } else {
            "failed"
        }
        .into(),
        reason: outcome.err().map_or("", RestoreFailure::as_str).into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restore_is_in_progress_then_counted_once_with_its_duration() {
        let metrics = Metrics::default();
        metrics.running("ns", "c");
        let text = metrics.encode();
        assert!(
            text.contains(r#"etcd_restore_in_progress{namespace="ns",name="c"} 1"#),
            "{text}"
        );
        metrics.finish("ns", "c", Ok(()), 25.5);
        metrics.finish("ns", "d", Err(RestoreFailure::BackupInvalid), 3.0);
        let text = metrics.encode();
        for line in [
            r#"etcd_restore_in_progress{namespace="ns",name="c"} 0"#,
            r#"etcd_restore_duration_seconds{namespace="ns",name="c"} 25.5"#,
            r#"etcd_restore_finished_total{namespace="ns",name="c",result="succeeded",reason=""} 1"#,
            r#"etcd_restore_finished_total{namespace="ns",name="d",result="failed",reason="BackupInvalid"} 1"#,
            r#"etcd_restore_failed{namespace="ns",name="d"} 1"#,
            r#"etcd_restore_failed{namespace="ns",name="c"} 0"#,
        ] {
            assert!(text.contains(line), "{line} not in:\n{text}");
        }
    }

    #[test]
    fn a_deleted_restore_takes_its_series_with_it() {
        let metrics = Metrics::default();
        metrics.finish("ns", "gone", Err(RestoreFailure::ClaimLost), 3.0);
        metrics.finish("ns", "relisted-away", Err(RestoreFailure::Refused), 3.0);
        metrics.ended("ns", "kept", RestorePhase::Failed);
        metrics.forget("ns", "gone");
        metrics.retain(&|_, name| name != "relisted-away");
        let text = metrics.encode();
        assert!(!text.contains(r#"name="gone""#), "{text}");
        assert!(!text.contains(r#"name="relisted-away""#), "{text}");
        assert!(
            text.contains(r#"etcd_restore_failed{namespace="ns",name="kept"} 1"#),
            "{text}"
        );
    }
}
