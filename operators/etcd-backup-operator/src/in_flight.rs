//! Backups in flight: at most one per EtcdBackup, at most `max_concurrent` in total, each
//! cancellable at once (object deleted, leadership lost, shutdown).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use etcd_api::EtcdBackupStatus;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

pub struct Runs {
    in_flight: Mutex<HashMap<String, CancellationToken>>,
    /// Each object's last finished run: until the watch delivers the status that run wrote,
    /// the cached status still says "running", which must not read as interrupted.
    finished: Mutex<HashMap<String, Finished>>,
    slots: Arc<Semaphore>,
    /// One snapshot at a time per object: its runs and its archive's snapshots (to start
    /// from, after a gap) are named `<base>_v<revision>_<second>`, so two taken at once could
    /// land under one name, one's object beside the other's manifest.
    snapshot_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Cancelled on shutdown; every run's token is its child.
    root: CancellationToken,
}

/// A run that finished in this process.
struct Finished {
    started: DateTime<Utc>,
    /// Its result, while the API server has not accepted it: a later reconcile writes it, so
    /// the schedule goes on from it.
    unwritten: Option<EtcdBackupStatus>,
}

/// A registered run. Dropping it frees the object for its next run.
pub struct RunGuard {
    runs: Arc<Runs>,
    uid: String,
    pub token: CancellationToken,
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        self.runs.lock().remove(&self.uid);
    }
}

impl Runs {
    pub fn new(max_concurrent: usize, root: CancellationToken) -> Arc<Runs> {
        Arc::new(Runs {
            in_flight: Mutex::new(HashMap::new()),
            finished: Mutex::new(HashMap::new()),
            slots: Arc::new(Semaphore::new(max_concurrent.max(1))),
            snapshot_locks: Mutex::new(HashMap::new()),
            root,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, CancellationToken>> {
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a run for `uid`, or `None` if one is already in flight.
    pub fn try_start(self: &Arc<Self>, uid: &str) -> Option<RunGuard> {
        let mut map = self.lock();
        if map.contains_key(uid) || self.root.is_cancelled() {
            return None;
        }
        let token = self.root.child_token();
        map.insert(uid.to_string(), token.clone());
        Some(RunGuard {
            runs: self.clone(),
            uid: uid.to_string(),
            token,
        })
    }

    pub fn is_running(&self, uid: &str) -> bool {
        self.lock().contains_key(uid)
    }

    pub fn count(&self) -> usize {
        self.lock().len()
    }

    /// Records that the run started at `started` is over, with its result if that could not
    /// be written.
    pub fn mark_finished(
        &self,
        uid: &str,
        started: DateTime<Utc>,
        unwritten: Option<EtcdBackupStatus>,
    ) {
        let finished = Finished { started, unwritten };
        self.finished_map().insert(uid.to_string(), finished);
    }

    /// Whether this process finished the run that started at `started`.
    pub fn finished(&self, uid: &str, started: DateTime<Utc>) -> bool {
        self.finished_map()
            .get(uid)
            .is_some_and(|f| f.started == started)
    }

    /// The result of `uid`'s last run that is still to be written.
    pub fn unwritten(&self, uid: &str) -> Option<EtcdBackupStatus> {
        self.finished_map().get(uid)?.unwritten.clone()
    }

    /// The result of `uid`'s last run has been written.
    pub fn written(&self, uid: &str) {
        if let Some(f) = self.finished_map().get_mut(uid) {
            f.unwritten = None;
        }
    }

    fn finished_map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Finished>> {
        self.finished.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The lock held by whoever takes a snapshot for `uid` (see `snapshot_locks`).
    pub fn snapshot_lock(&self, uid: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.snapshot_locks()
            .entry(uid.to_string())
            .or_default()
            .clone()
    }

    fn snapshot_locks(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, Arc<tokio::sync::Mutex<()>>>> {
        self.snapshot_locks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Stops the run of `uid`, if any (the object was deleted).
    pub fn cancel(&self, uid: &str) {
        self.finished_map().remove(uid);
        self.snapshot_locks().remove(uid);
        if let Some(token) = self.lock().get(uid) {
            token.cancel();
        }
    }

    /// Stops runs of objects for which `exists` is false (deleted while the watch was down),
    /// and drops what was kept of their finished runs.
    pub fn cancel_unless(&self, exists: impl Fn(&str) -> bool) {
        self.finished_map().retain(|uid, _| exists(uid));
        self.snapshot_locks().retain(|uid, _| exists(uid));
        for (uid, token) in self.lock().iter() {
            if !exists(uid) {
                token.cancel();
            }
        }
    }

    /// Waits for one of the global slots.
    pub async fn slot(&self) -> OwnedSemaphorePermit {
        self.slots
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed")
    }

    /// Slots not in use.
    pub fn free_slots(&self) -> usize {
        self.slots.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_two_runs_of_one_object() {
        let runs = Runs::new(2, CancellationToken::new());
        let first = runs.try_start("a").unwrap();
        assert!(runs.try_start("a").is_none());
        assert!(
            runs.try_start("b").is_some(),
            "other objects are independent"
        );
        drop(first);
        assert!(
            runs.try_start("a").is_some(),
            "the next run may start once one ends"
        );
    }

    #[test]
    fn deletion_and_shutdown_cancel_runs() {
        let root = CancellationToken::new();
        let runs = Runs::new(2, root.clone());
        let a = runs.try_start("a").unwrap();
        let b = runs.try_start("b").unwrap();
        runs.cancel("a");
        assert!(a.token.is_cancelled() && !b.token.is_cancelled());
        runs.cancel_unless(|uid| uid == "a");
        assert!(b.token.is_cancelled());
        let c = runs.try_start("c").unwrap();
        root.cancel();
        assert!(c.token.is_cancelled());
        assert!(runs.try_start("d").is_none(), "no new runs after shutdown");
    }

    #[tokio::test]
    async fn the_global_limit_holds() {
        let runs = Runs::new(2, CancellationToken::new());
        let _one = runs.slot().await;
        let _two = runs.slot().await;
        assert_eq!(runs.free_slots(), 0);
        let third = tokio::time::timeout(std::time::Duration::from_millis(50), runs.slot()).await;
        assert!(third.is_err(), "a third backup must wait");
    }
}
