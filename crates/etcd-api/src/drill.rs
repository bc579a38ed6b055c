//! Restore drills of an EtcdBackup's backups (`spec.drill`, `status.lastDrill`): a run-once pod
//! fetches the newest backup (verified), restores it with the etcd version it was taken from,
//! serves it on the pod's loopback only, and compares what it serves with what the operator
//! recorded when it took the backup (revision, key count, `HashKV`).

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cluster::DEFAULT_REPOSITORY;
use crate::encryption::SecretKeyRef;

/// Drills run at most this long unless `timeoutInSecond` says otherwise.
pub const DEFAULT_DRILL_TIMEOUT_SECONDS: i64 = 1800;

/// `EtcdBackup.spec.drill`: when to prove backups by restoring them.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(validation = Rule::new("!has(self.everyBackups) || !has(self.schedule)")
    .message("set either everyBackups or schedule, not both"))]
#[serde(rename_all = "camelCase")]
pub struct BackupDrill {
    /// Drill every Nth successful backup (1: each one). The default when `schedule` is unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub every_backups: Option<i32>,
    /// Or drill the newest backup on this cron schedule (UTC), as `backupPolicy.schedule`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub schedule: Option<String>,
    /// Repository of the etcd image the drill restores and serves with; the tag is the
    /// backup's etcd version (`v3.6.16`), as EtcdCluster's `repository`. Defaults to
    /// `quay.io/coreos/etcd`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_repository: Option<String>,
    /// The age identity (private key) for encrypted backups: required with `spec.encryption`.
    /// Mounted as a file into the drill's fetch container only; the operator never reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_secret: Option<SecretKeyRef>,
    /// Resources of the drill's etcd containers (they restore and serve the whole database).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Seconds the drill pod may take from its creation to its verdict (default 1800); a pod
    /// that cannot start in time (no node, image not found) fails the drill with the reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60))]
    pub timeout_in_second: Option<i64>,
}

impl BackupDrill {
    /// Every how many backups, when there is no `schedule`.
    pub fn every(&self) -> Option<i64> {
        match (&self.schedule, self.every_backups) {
            (Some(_), _) => None,
            (None, every) => Some(i64::from(every.unwrap_or(1).max(1))),
        }
    }

    pub fn repository(&self) -> &str {
        crate::storage::non_empty(self.etcd_repository.as_deref()).unwrap_or(DEFAULT_REPOSITORY)
    }

    /// The etcd image for a backup taken from `version`.
    pub fn image_of(&self, version: &str) -> String {
        format!("{}:v{}", self.repository(), version.trim_start_matches('v'))
    }

    pub fn timeout_seconds(&self) -> i64 {
        self.timeout_in_second
            .filter(|t| *t > 0)
            .unwrap_or(DEFAULT_DRILL_TIMEOUT_SECONDS)
    }
}

/// What the operator saw of the key space when it took a backup, for drills to compare with.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecordedContents {
    /// The revision asked about (the snapshot holds at least this one).
    pub revision: i64,
    /// Keys at that revision.
    pub key_count: i64,
    /// etcd's `HashKV` at that revision; absent when turned off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_kv: Option<i64>,
    /// The compaction revision `HashKV` reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compact_revision: Option<i64>,
    /// SHA-256 (hex) of every key at that revision with its value and metadata: what a drill
    /// compares, whatever the compaction; absent with `HashKV` turned off, and in records made
    /// before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_sha256: Option<String>,
}

/// How a drill ended.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DrillResult {
    /// The drill pod exists and has not finished.
    #[default]
    Running,
    /// The restore served exactly what was recorded.
    Succeeded,
    /// The backup is bad, or the drill could not prove it (`reason` says which).
    Failed,
}

/// One drill of one backup.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrillRecord {
    /// The backup drilled (`status.lastBackup.objectKey` when it started).
    pub object_key: String,
    /// Which of this EtcdBackup's backups it was (`lastBackup.number`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_number: Option<i64>,
    pub result: DrillResult,
    /// `Passed` when it succeeded; unset while it runs. Otherwise why it failed. The backup is
    /// bad: `BackupCorrupt` (it fails its verification when fetched), `ContentMismatch` (it
    /// restores, but not to what was recorded). The drill could not prove it: `FetchFailed`,
    /// `RestoreFailed` (etcd's restore tool refused it), `DidNotServe`, `TimedOut`,
    /// `PodCannotStart` (e.g. an image that cannot be pulled), `PodFailed`,
    /// `PodLost` (its pod vanished after a newer backup), `NothingRecorded` (a backup taken
    /// before drills existed), `UnknownEtcdVersion`, `CannotReachBackup`, `NoUsableIdentity`
    /// (an encrypted backup and no `identitySecret`, or one that is not among its recipients),
    /// `Cancelled` (`spec.drill` removed while it ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What the drill found, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The run-once pod that runs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// The etcd version that restored it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_version: Option<String>,
    /// The revision compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_revision: Option<i64>,
    /// The keys the restore served at that revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_count: Option<i64>,
    /// When the drill started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the drill's verdict was recorded; unset while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// Seconds from `startTime` to `completionTime`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_seconds: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drill_without_a_schedule_runs_after_every_backup_unless_told() {
        let drill: BackupDrill = serde_json::from_str("{}").unwrap();
        assert_eq!(drill.every(), Some(1));
        let drill: BackupDrill = serde_json::from_str(r#"{"everyBackups": 24}"#).unwrap();
        assert_eq!(drill.every(), Some(24));
        let drill: BackupDrill = serde_json::from_str(r#"{"schedule": "0 4 * * 0"}"#).unwrap();
        assert_eq!(drill.every(), None);
        assert_eq!(drill.image_of("3.6.16"), "quay.io/coreos/etcd:v3.6.16");
        assert_eq!(drill.timeout_seconds(), 1800);
    }
}
