//! Prometheus metrics (`/metrics`), prefixed `etcd_backup_`.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use operator_runtime::reconcile_errors::ReconcileErrors;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ObjectLabels {
    pub namespace: String,
    pub name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    pub namespace: String,
    pub name: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
}

pub struct Metrics {
    pub registry: Registry,
    pub last_success: Family<ObjectLabels, Gauge<f64, AtomicU64>>,
    pub last_size: Family<ObjectLabels, Gauge>,
    pub last_failure: Family<ObjectLabels, Gauge<f64, AtomicU64>>,
    pub schedule_interval: Family<ObjectLabels, Gauge<f64, AtomicU64>>,
    pub bytes: Counter,
    pub duration: Family<ResultLabels, Histogram>,
    pub failures: Family<FailureLabels, Counter>,
    pub pruned: Counter,
    pub prune_failures: Counter,
    pub running: Gauge,
    pub reconcile_errors: ReconcileErrors,
    pub last_drill_success: Family<ObjectLabels, Gauge<f64, AtomicU64>>,
    pub last_drill_failure: Family<ObjectLabels, Gauge<f64, AtomicU64>>,
    pub drill_interval: Family<ObjectLabels, Gauge<f64, AtomicU64>>,
    pub drill_failures: Family<FailureLabels, Counter>,
    pub archived_revision: Family<ObjectLabels, Gauge>,
    pub archive_gap_revisions: Family<ObjectLabels, Counter>,
    /// Every EtcdBackup with series, and the failure reasons it has one for: what goes when
    /// the object goes.
    objects: Mutex<HashMap<ObjectLabels, Reasons>>,
}

/// The reasons an EtcdBackup has failure series for.
#[derive(Default)]
struct Reasons {
    backup: BTreeSet<String>,
    drill: BTreeSet<String>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("etcd_backup");
        let last_success = Family::<ObjectLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "last_success_timestamp_seconds",
            "Unix time of the last verified backup of each EtcdBackup",
            last_success.clone(),
        );
        let last_size = Family::<ObjectLabels, Gauge>::default();
        registry.register(
            "last_size_bytes",
            "Stored size of the last verified backup of each EtcdBackup",
            last_size.clone(),
        );
        let last_failure = Family::<ObjectLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "last_failure_timestamp_seconds",
            "Unix time of the last failed backup run of each EtcdBackup",
            last_failure.clone(),
        );
        let schedule_interval = Family::<ObjectLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "schedule_interval_seconds",
            "Seconds between two runs of each scheduled EtcdBackup (interval, or cron's next two)",
            schedule_interval.clone(),
        );
        let bytes = Counter::default();
        registry.register(
            "stored_bytes",
            "Bytes of verified backups stored",
            bytes.clone(),
        );
        // 0.1 s to about 1.8 h.
        let duration = Family::<ResultLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.1, 2.0, 16))
        });
        registry.register(
            "duration_seconds",
            "Duration of backup runs by result (success, failure)",
            duration.clone(),
        );
        let failures = Family::<FailureLabels, Counter>::default();
        registry.register("failures", "Failed backup runs by reason", failures.clone());
        let pruned = Counter::default();
        registry.register(
            "pruned_objects",
            "Objects deleted by maxBackups retention",
            pruned.clone(),
        );
        let prune_failures = Counter::default();
        registry.register(
            "prune_failures",
            "Retention passes that failed",
            prune_failures.clone(),
        );
        let running = Gauge::default();
        registry.register("running", "Backups in flight", running.clone());
        let reconcile_errors = ReconcileErrors::default();
        reconcile_errors.register(&mut registry);
        let last_drill_success = Family::<ObjectLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "last_drill_success_timestamp_seconds",
            "Unix time the last successful restore drill of each EtcdBackup ended",
            last_drill_success.clone(),
        );
        let last_drill_failure = Family::<ObjectLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "last_drill_failure_timestamp_seconds",
            "Unix time the last failed restore drill of each EtcdBackup ended",
            last_drill_failure.clone(),
        );
        let drill_interval = Family::<ObjectLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "drill_interval_seconds",
            "Seconds between two drills of each EtcdBackup (every N backups times the backup period, or the drill's cron)",
            drill_interval.clone(),
        );
        let drill_failures = Family::<FailureLabels, Counter>::default();
        registry.register(
            "drill_failures",
            "Failed restore drills by reason",
            drill_failures.clone(),
        );
        let archived_revision = Family::<ObjectLabels, Gauge>::default();
        registry.register(
            "archived_revision",
            "Every change of the cluster up to this revision is in the continuous archive of each EtcdBackup (spec.continuous)",
            archived_revision.clone(),
        );
        let archive_gap_revisions = Family::<ObjectLabels, Counter>::default();
        registry.register(
            "archive_gap_revisions",
            "Revisions the continuous archive lost because the cluster compacted them before they were stored (no restore to a point can reach them)",
            archive_gap_revisions.clone(),
        );
        Metrics {
            archived_revision,
            archive_gap_revisions,
            last_drill_success,
            last_drill_failure,
            drill_interval,
            drill_failures,
            registry,
            last_success,
            last_size,
            last_failure,
            schedule_interval,
            bytes,
            duration,
            failures,
            pruned,
            prune_failures,
            running,
            reconcile_errors,
            objects: Mutex::new(HashMap::new()),
        }
    }
}

/// The series labels of `backup`.
pub fn object_labels(backup: &etcd_api::EtcdBackup) -> ObjectLabels {
    use kube::ResourceExt;
    ObjectLabels {
        namespace: backup.namespace().unwrap_or_default(),
        name: backup.name_any(),
    }
}

fn failure(object: &ObjectLabels, reason: &str) -> FailureLabels {
    FailureLabels {
        namespace: object.namespace.clone(),
        name: object.name.clone(),
        reason: reason.to_string(),
    }
}

/// One backup counted in `etcd_backup_running` until dropped: a cancelled run (object deleted,
/// shutdown) is dropped mid-way and must not leave the gauge high.
pub struct InFlight(Gauge);

impl InFlight {
    pub fn new(running: &Gauge) -> InFlight {
        running.inc();
        InFlight(running.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Metrics {
    fn objects(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectLabels, Reasons>> {
        self.objects.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes that `object` has series (called wherever one is set).
    pub fn touch(&self, object: &ObjectLabels) {
        self.objects().entry(object.clone()).or_default();
    }

    /// Counts a failed run of `object` for `reason`.
    pub fn failed(&self, object: &ObjectLabels, reason: &str) {
        self.objects()
            .entry(object.clone())
            .or_default()
            .backup
            .insert(reason.to_string());
        self.failures.get_or_create(&failure(object, reason)).inc();
    }

    /// Counts a failed drill of `object` for `reason`.
    pub fn drill_failed(&self, object: &ObjectLabels, reason: &str) {
        self.objects()
            .entry(object.clone())
            .or_default()
            .drill
            .insert(reason.to_string());
        self.drill_failures
            .get_or_create(&failure(object, reason))
            .inc();
    }

    /// Removes every series of `object` (deleted): nothing is exported for objects that are gone.
    pub fn forget(&self, object: &ObjectLabels) {
        let reasons = self.objects().remove(object).unwrap_or_default();
        self.last_success.remove(object);
        self.last_size.remove(object);
        self.last_failure.remove(object);
        self.schedule_interval.remove(object);
        self.last_drill_success.remove(object);
        self.last_drill_failure.remove(object);
        self.drill_interval.remove(object);
        self.archived_revision.remove(object);
        self.archive_gap_revisions.remove(object);
        for reason in reasons.backup {
            self.failures.remove(&failure(object, &reason));
        }
        for reason in reasons.drill {
            self.drill_failures.remove(&failure(object, &reason));
        }
    }

    /// Removes the series of every object `exists` says is gone (deleted while the watch was
    /// down).
    pub fn forget_unless(&self, exists: impl Fn(&ObjectLabels) -> bool) {
        let gone: Vec<ObjectLabels> = self
            .objects()
            .keys()
            .filter(|o| !exists(o))
            .cloned()
            .collect();
        for object in &gone {
            self.forget(object);
        }
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_cancelled_run_leaves_the_running_gauge_where_it_was() {
        let m = Metrics::default();
        let (started, wait) = tokio::sync::oneshot::channel::<()>();
        let running = m.running.clone();
        let run = tokio::spawn(async move {
            let _in_flight = InFlight::new(&running);
            started.send(()).unwrap();
            std::future::pending::<()>().await;
        });
        // Cancel only once the run is counted.
        let _ = wait.await;
        assert_eq!(m.running.get(), 1);
        run.abort();
        assert!(run.await.unwrap_err().is_cancelled());
        assert_eq!(m.running.get(), 0);
    }

    #[test]
    fn a_deleted_object_s_series_go_and_others_stay() {
        let m = Metrics::default();
        let object = |name: &str| ObjectLabels {
            namespace: "ns".into(),
            name: name.into(),
        };
        for name in ["gone", "kept"] {
            m.touch(&object(name));
            m.last_success.get_or_create(&object(name)).set(1.7e9);
            m.schedule_interval.get_or_create(&object(name)).set(60.0);
            m.failed(&object(name), "BucketNotFound");
            m.failed(&object(name), "SecretNotFound");
        }
        m.forget(&object("gone"));
        let text = m.encode();
        assert!(!text.contains(r#"name="gone""#), "{text}");
        assert_eq!(text.matches(r#"name="kept""#).count(), 4, "{text}");
        m.forget_unless(|o| o.name == "other");
        assert!(!m.encode().contains(r#"name="kept""#));
    }

    #[test]
    fn exposes_the_documented_names() {
        let m = Metrics::default();
        let labels = ObjectLabels {
            namespace: "ns".into(),
            name: "b".into(),
        };
        m.last_success.get_or_create(&labels).set(1.7e9);
        m.failures
            .get_or_create(&FailureLabels {
                namespace: "ns".into(),
                name: "b".into(),
                reason: "BucketNotFound".into(),
            })
            .inc();
        m.duration
            .get_or_create(&ResultLabels {
                result: "success".into(),
            })
            .observe(1.5);
        let text = m.encode();
        for name in [
            "etcd_backup_last_success_timestamp_seconds{namespace=\"ns\",name=\"b\"} 1700000000",
            "etcd_backup_failures_total{namespace=\"ns\",name=\"b\",reason=\"BucketNotFound\"} 1",
            "etcd_backup_duration_seconds_count{result=\"success\"} 1",
            "etcd_backup_stored_bytes_total 0",
            "etcd_backup_running 0",
        ] {
            assert!(text.contains(name), "missing {name} in\n{text}");
        }
    }
}
