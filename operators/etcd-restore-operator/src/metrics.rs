//! Prometheus metrics (`/metrics`), prefixed `etcd_restore_`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
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
}

pub struct Metrics {
    pub registry: Registry,
    /// Restores that finished, by result.
    pub finished: Family<ResultLabels, Counter>,
    /// 1 while a restore is running.
    pub in_progress: Family<RestoreLabels, Gauge>,
    /// Seconds the last finished restore took.
    pub duration_seconds: Family<RestoreLabels, Gauge<f64, AtomicU64>>,
    pub reconcile_errors: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("etcd_restore");
        let finished = Family::<ResultLabels, Counter>::default();
        registry.register(
            "finished",
            "Restores finished, by result (succeeded, failed)",
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
        let reconcile_errors = Counter::default();
        registry.register(
            "reconcile_errors",
            "Reconciles that returned an error",
            reconcile_errors.clone(),
        );
        Metrics {
            registry,
            finished,
            in_progress,
            duration_seconds,
            reconcile_errors,
        }
    }
}

impl Metrics {
    pub fn running(&self, namespace: &str, name: &str) {
        self.in_progress
            .get_or_create(&labels(namespace, name))
            .set(1);
    }

    /// A restore deleted before it ended: no longer in progress, and not counted as finished.
    pub fn abandoned(&self, namespace: &str, name: &str) {
        self.in_progress
            .get_or_create(&labels(namespace, name))
            .set(0);
    }

    pub fn finish(&self, namespace: &str, name: &str, succeeded: bool, seconds: f64) {
        let labels = labels(namespace, name);
        self.in_progress.get_or_create(&labels).set(0);
        self.duration_seconds.get_or_create(&labels).set(seconds);
        let result = if succeeded { "succeeded" } else { "failed" };
        self.finished
            .get_or_create(&ResultLabels {
                namespace: namespace.into(),
                name: name.into(),
                result: result.into(),
            })
            .inc();
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String");
        out
    }
}

fn labels(namespace: &str, name: &str) -> RestoreLabels {
    RestoreLabels {
        namespace: namespace.into(),
        name: name.into(),
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
        metrics.finish("ns", "c", true, 25.5);
        metrics.finish("ns", "d", false, 3.0);
        let text = metrics.encode();
        for line in [
            r#"etcd_restore_in_progress{namespace="ns",name="c"} 0"#,
            r#"etcd_restore_duration_seconds{namespace="ns",name="c"} 25.5"#,
            r#"etcd_restore_finished_total{namespace="ns",name="c",result="succeeded"} 1"#,
            r#"etcd_restore_finished_total{namespace="ns",name="d",result="failed"} 1"#,
        ] {
            assert!(text.contains(line), "{line} not in:\n{text}");
        }
    }
}
