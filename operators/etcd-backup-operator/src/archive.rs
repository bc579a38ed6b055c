//! `spec.continuous`: the archive of every change between the scheduled backups.
//!
//! One task per EtcdBackup in this process, as its snapshots are: reconcile starts it (again
//! after a spec change), stops it when the field goes or the object is deleted, and copies what
//! it did into `status.continuous`. The task keeps nothing of its own: after an operator
//! restart it resumes from what is stored (`etcd_snapshot::changes::archive`), so no change is
//! lost while etcd still holds it, and a gap is said when it does not.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backup_storage::{Location, Store, UploadOptions};
use chrono::{DateTime, Utc};
use etcd_api::EtcdBackup;
use etcd_snapshot::changes::{ArchiveEvent, ArchiveOptions, SegmentLayers};
use etcd_snapshot::{EtcdConnection, ObjectName, SaveOptions};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::{Client, ResourceExt};
use tokio::sync::watch;

use crate::retention::OWNER_METADATA_KEY;
use crate::secrets;
use crate::validate::BackupPlan;

/// How long a stopped archive may take to store its open segment and end.
const STOP_WAIT: Duration = Duration::from_secs(30);
/// Pause before a failed archive starts again (doubled up to [`RETRY_MAX`]).
const RETRY_FIRST: Duration = Duration::from_secs(10);
const RETRY_MAX: Duration = Duration::from_secs(300);

/// What a running archive did, for the status.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ArchiveState {
    pub archived_through: Option<i64>,
    pub last_change_time: Option<DateTime<Utc>>,
    pub last_segment: Option<String>,
    pub segments: u64,
    /// Gaps not yet in the status, oldest first (reconcile acknowledges them once written).
    pub pending_gaps: Vec<Gap>,
    /// Why it is not running, while it is not.
    pub last_error: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Gap {
    pub archived_through: i64,
    pub resumed_after: i64,
    pub time: DateTime<Utc>,
}

struct Running {
    generation: Option<i64>,
    stop: watch::Sender<bool>,
    state: Arc<Mutex<ArchiveState>>,
    task: tokio::task::JoinHandle<()>,
    /// The `status.continuous` last written for it: newer than the cache may show, so a
    /// reconcile of a stale copy never counts from an older status.
    written: Option<etcd_api::ArchiveStatus>,
}

/// The archives this process runs, by EtcdBackup UID.
#[derive(Default)]
pub struct Archives {
    running: Mutex<HashMap<String, Running>>,
    /// Told `(namespace, name)` of an EtcdBackup whose archive did something worth a status
    /// update (a segment stored, a gap, a failure), so the status follows without polling.
    changed: Mutex<Option<tokio::sync::mpsc::UnboundedSender<(String, String)>>>,
}

/// What a task needs, copied out of the reconcile.
pub struct Start {
    pub client: Client,
    pub namespace: String,
    pub plan: BackupPlan,
    pub location: Location,
    pub owner: String,
    pub allow_ambient: bool,
    pub segment_seconds: Duration,
    pub segment_max_bytes: u64,
    /// Shared with the EtcdBackup's runs: one snapshot at a time.
    pub snapshot_lock: Arc<tokio::sync::Mutex<()>>,
}

impl Archives {
    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<String, Running>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes sure the archive of `backup` runs for its current generation: started if not,
    /// restarted if the spec changed (the old one stores its open segment and ends first, so
    /// two never write the same segments; its gaps not yet in the status are kept).
    pub async fn ensure(&self, backup: &EtcdBackup, start: impl FnOnce() -> Start) {
        let uid = backup.uid().unwrap_or_default();
        let generation = backup.metadata.generation;
        let old = {
            let mut running = self.running();
            if running
                .get(&uid)
                .is_some_and(|r| r.generation == generation)
            {
                return;
            }
            running.remove(&uid)
        };
        let mut carried = ArchiveState::default();
        let mut written = None;
        if let Some(old) = old {
            let _ = old.stop.send(true);
            if tokio::time::timeout(STOP_WAIT, old.task).await.is_err() {
                tracing::warn!(%uid, "the previous archive did not end in time; starting the new one anyway");
            }
            carried.pending_gaps = old
                .state
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pending_gaps
                .clone();
            written = old.written;
        }
        let (stop, stopped) = watch::channel(false);
        let state = Arc::new(Mutex::new(carried));
        let changed = self
            .changed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let object = (backup.namespace().unwrap_or_default(), backup.name_any());
        let notify: Notify = Arc::new(move || {
            if let Some(changed) = &changed {
                let _ = changed.send(object.clone());
            }
        });
        let task = tokio::spawn(run(start(), state.clone(), stopped, notify));
        self.running().insert(
            uid,
            Running {
                generation,
                stop,
                state,
                task,
                written,
            },
        );
    }

    /// Stops the archive of `uid` and waits (bounded) until it stored its open segment and
    /// ended: before its EtcdBackup's objects are deleted.
    pub async fn stop_and_wait(&self, uid: &str) {
        let Some(old) = self.running().remove(uid) else {
            return;
        };
        let _ = old.stop.send(true);
        if tokio::time::timeout(STOP_WAIT, old.task).await.is_err() {
            tracing::warn!(%uid, "an archive did not end in time");
        }
    }

    /// The status last written for the archive of `uid`, and records a new one.
    pub fn written(&self, uid: &str) -> Option<etcd_api::ArchiveStatus> {
        self.running().get(uid).and_then(|r| r.written.clone())
    }

    pub fn record_written(&self, uid: &str, status: &etcd_api::ArchiveStatus) {
        if let Some(running) = self.running().get_mut(uid) {
            running.written = Some(status.clone());
        }
    }

    /// The EtcdBackups (namespace, name) whose archive did something since; the controller
    /// reconciles them. One subscriber: a later call replaces the earlier.
    pub fn subscribe(&self) -> tokio::sync::mpsc::UnboundedReceiver<(String, String)> {
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        *self.changed.lock().unwrap_or_else(|e| e.into_inner()) = Some(sender);
        receiver
    }

    /// Stops the archive of `uid`, if it runs; it stores its open segment first.
    pub fn stop(&self, uid: &str) {
        if let Some(old) = self.running().remove(uid) {
            let _ = old.stop.send(true);
        }
    }

    /// Ends every archive at once, its open segment discarded (the upload aborted; the next
    /// leader archives those changes again from etcd): a shutdown, or leadership lost, after
    /// which nothing of this replica may write beside the new leader's archive.
    pub async fn abort_all(&self, deadline: tokio::time::Instant) {
        let all: Vec<Running> = self.running().drain().map(|(_, r)| r).collect();
        for running in &all {
            running.task.abort();
        }
        for running in all {
            let _ = tokio::time::timeout_at(deadline, running.task).await;
        }
    }

    /// Stops every archive whose EtcdBackup `exists` says is gone.
    pub fn stop_unless(&self, exists: impl Fn(&str) -> bool) {
        let gone: Vec<String> = self
            .running()
            .keys()
            .filter(|uid| !exists(uid))
            .cloned()
            .collect();
        for uid in gone {
            self.stop(&uid);
        }
    }

    /// What the archive of `uid` did so far.
    pub fn state(&self, uid: &str) -> Option<ArchiveState> {
        let running = self.running();
        let state = running
            .get(uid)?
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        Some(state.clone())
    }

    /// The first `n` pending gaps are in the status now.
    pub fn acknowledge_gaps(&self, uid: &str, n: usize) {
        if let Some(running) = self.running().get(uid) {
            let mut state = running.state.lock().unwrap_or_else(|e| e.into_inner());
            let n = n.min(state.pending_gaps.len());
            state.pending_gaps.drain(..n);
        }
    }

    pub fn is_running(&self, uid: &str) -> bool {
        self.running().contains_key(uid)
    }
}

/// Asks for a reconcile of the archive's EtcdBackup.
type Notify = Arc<dyn Fn() + Send + Sync>;

/// The task: archives until stopped; after a failure, records why and starts again later.
async fn run(
    start: Start,
    state: Arc<Mutex<ArchiveState>>,
    mut stop: watch::Receiver<bool>,
    notify: Notify,
) {
    let mut retry = RETRY_FIRST;
    loop {
        let asked_to_stop = *stop.borrow();
        if asked_to_stop {
            return;
        }
        match archive_once(&start, &state, stop.clone(), &notify).await {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(namespace = %start.namespace, owner = %start.owner, error = %e, "continuous archive failed; starting again");
                state.lock().unwrap_or_else(|e| e.into_inner()).last_error = Some(e);
                notify();
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(retry) => {}
            _ = etcd_snapshot::changes::stopped(&mut stop) => return,
        }
        retry = (retry * 2).min(RETRY_MAX);
    }
}

/// Reads the Secrets, opens the store and archives; an error is said as text for the status.
async fn archive_once(
    start: &Start,
    state: &Arc<Mutex<ArchiveState>>,
    stop: watch::Receiver<bool>,
    notify: &Notify,
) -> Result<(), String> {
    let secrets_api: Api<Secret> = Api::namespaced(start.client.clone(), &start.namespace);
    let resolved = secrets::resolve(&secrets_api, &start.plan, start.allow_ambient)
        .await
        .map_err(|e| e.to_string())?;
    let store = Store::open(&start.location, &resolved.storage)
        .await
        .map_err(|e| e.to_string())?;
    let base = start.location.key();
    let mut upload = UploadOptions::default();
    upload
        .metadata
        .insert(OWNER_METADATA_KEY.into(), start.owner.clone());
    let mut snapshot = SaveOptions::new(ObjectName::Scheduled(base.clone()));
    snapshot.compression = start.plan.compression;
    snapshot.recipients = resolved.recipients.clone();
    snapshot.hash_kv = start.plan.hash_kv;
    snapshot.stall_timeout = start.plan.stall_timeout;
    snapshot.upload = upload.clone();
    let reported = state.clone();
    let notify = notify.clone();
    let options = ArchiveOptions {
        base,
        segment_seconds: start.segment_seconds,
        segment_max_bytes: start.segment_max_bytes,
        layers: SegmentLayers {
            compression: start.plan.compression,
            recipients: resolved.recipients,
            upload,
        },
        snapshot,
        snapshot_lock: start.snapshot_lock.clone(),
        identity: None,
        report: Arc::new(move |event| {
            record(&reported, event);
            notify();
        }),
    };
    let mut connection = EtcdConnection::new(start.plan.endpoints.clone());
    connection.tls = resolved.tls;
    etcd_snapshot::changes::archive(&connection, &store, &options, stop)
        .await
        .map_err(|e| e.to_string())
}

fn record(state: &Mutex<ArchiveState>, event: ArchiveEvent) {
    let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
    match event {
        ArchiveEvent::Started { after_revision, .. } => {
            state.archived_through = Some(after_revision);
        }
        ArchiveEvent::SegmentStored { key, manifest } => {
            state.last_error = None;
            state.archived_through = Some(manifest.last_revision);
            state.last_change_time = Some(manifest.last_time);
            state.last_segment = Some(key);
            state.segments += 1;
        }
        ArchiveEvent::Gap {
            archived_through,
            resumed_after,
            ..
        } => state.pending_gaps.push(Gap {
            archived_through,
            resumed_after,
            time: Utc::now(),
        }),
        ArchiveEvent::SnapshotTaken { .. } => {}
        ArchiveEvent::WatchLost { error, .. } => {
            tracing::info!(%error, "the archive's watch broke; resuming");
            state.last_error = Some(format!("{error} (resuming)"));
        }
    }
}
