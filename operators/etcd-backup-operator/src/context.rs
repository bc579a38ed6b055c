//! What every stage of a reconcile shares: the operator's [`Context`] and its [`Error`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::Event;
use operator_runtime::events::Events;

use crate::archive::Archives;
use crate::execute::RunError;
use crate::in_flight::Runs;
use crate::local::LocalVolume;
use crate::metrics::{Metrics, ObjectLabels};
use operator_runtime::backoff::PerObject;
use operator_runtime::reconcile_errors::ReconcileError;

/// Field manager for status and finalizer writes; also the event reporter.
pub const MANAGER: &str = "etcd-backup-operator";

pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("deleting the backups of a deleted EtcdBackup failed: {0}")]
    Cleanup(RunError),
}

impl ReconcileError for Error {
    fn reason(&self) -> &'static str {
        match self {
            Error::Kube(_) => "KubernetesApi",
            Error::Cleanup(e) => e.reason(),
        }
    }
}

/// What reconcile needs. Small, shared, and built with a mock client in tests.
pub struct Context {
    pub client: Client,
    pub events: Events,
    pub metrics: Arc<Metrics>,
    pub runs: Arc<Runs>,
    /// The continuous archives (`spec.continuous`) this process runs.
    pub archives: Arc<Archives>,
    pub clock: Clock,
    /// The claim mounted in the operator pod for `storageType: Local`, if any.
    pub local_volume: Option<LocalVolume>,
    /// Invalid objects already reported, by UID and generation, so a status write does not
    /// trigger another event.
    pub(crate) reported_invalid: Mutex<HashMap<String, Option<i64>>>,
    /// Pause before the second attempt to write a run's result (doubled, then tripled).
    pub result_write_backoff: Duration,
    /// Pause before the second attempt of a run whose first failed for a cause that may pass
    /// (doubled before each further attempt; see [`crate::controller::RUN_ATTEMPTS`]).
    pub run_retry_backoff: Duration,
    /// Delays before retrying objects whose reconcile failed.
    pub backoff: PerObject,
    /// How long a deleted object with the Delete policy waits for its missing S3 Secret before
    /// its finalizer is released and the backups are kept.
    pub finalizer_timeout: Duration,
    /// Lend the operator's own AWS identity to EtcdBackups without keys of their own (the
    /// deployment's explicit choice; off by default).
    pub allow_ambient_credentials: bool,
    /// How long a shutdown waits for the aborts of cancelled runs' uploads.
    pub shutdown_timeout: Duration,
    /// The `etcd-backup` image the drill pods fetch and check with.
    pub backup_image: String,
}

impl Context {
    pub fn new(
        client: Client,
        instance: Option<String>,
        metrics: Arc<Metrics>,
        runs: Arc<Runs>,
        clock: Clock,
    ) -> Self {
        Context {
            events: Events::new(client.clone(), MANAGER, instance),
            client,
            metrics,
            runs,
            archives: Arc::default(),
            clock,
            local_volume: None,
            reported_invalid: Mutex::new(HashMap::new()),
            result_write_backoff: Duration::from_secs(1),
            run_retry_backoff: Duration::from_secs(5),
            backoff: PerObject::default(),
            finalizer_timeout: Duration::from_secs(300),
            allow_ambient_credentials: false,
            shutdown_timeout: Duration::from_secs(20),
            backup_image: "localhost/etcd-backup:dev".into(),
        }
    }

    /// Everything kept about a deleted EtcdBackup goes: its run is cancelled, and its retry
    /// state, invalid-spec record and metric series are dropped.
    pub fn forget(&self, uid: &str, object: &ObjectLabels) {
        self.runs.cancel(uid);
        self.archives.stop(uid);
        self.backoff.forget(uid);
        self.reported_invalid
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
        self.metrics.forget(object);
    }

    /// The same for every EtcdBackup not in the cache after a relist (deleted while the watch
    /// was down): `exists` by UID, `listed` by namespace and name (metric series).
    pub fn forget_unless(
        &self,
        exists: impl Fn(&str) -> bool,
        listed: impl Fn(&ObjectLabels) -> bool,
    ) {
        self.runs.cancel_unless(&exists);
        self.archives.stop_unless(&exists);
        self.backoff.retain(&exists);
        self.reported_invalid
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|uid, _| exists(uid));
        self.metrics.forget_unless(listed);
    }
}

pub(crate) async fn publish(ctx: &Context, event: &Event, reference: &ObjectReference) {
    ctx.events.send(event, reference).await;
}
