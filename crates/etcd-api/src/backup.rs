//! `EtcdBackup`: one-shot or scheduled snapshots of an etcd cluster.
//!
//! The spec is coreos's `BackupSpec` field for field, plus optional additions (schedule,
//! compression, Local storage, stall timeout, deletion policy) that coreos would ignore.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::condition::{self, Condition};
use crate::drill::{BackupDrill, DrillRecord, RecordedContents};
use crate::encryption::BackupEncryption;
use crate::error::{Blocks, SpecError, check_storage};
use crate::storage::{AbsSource, GcsSource, LocalSource, OssSource, S3Source, StorageType};

/// Desired backup: where to read etcd, where to write, and how often.
// The repeated `type_ = "..."` inside printcolumn(...) is not a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "etcd.database.coreos.com",
    version = "v1beta2",
    kind = "EtcdBackup",
    namespaced,
    status = "EtcdBackupStatus",
    derive = "PartialEq",
    shortname = "eb",
    category = "etcd",
    doc = "A one-shot or periodic snapshot of an etcd cluster (coreos-compatible).",
    printcolumn(name = "Storage", type_ = "string", json_path = ".spec.storageType"),
    printcolumn(
        name = "Schedule",
        type_ = "string",
        json_path = ".spec.backupPolicy.schedule"
    ),
    printcolumn(
        name = "Interval",
        type_ = "integer",
        json_path = ".spec.backupPolicy.backupIntervalInSecond",
        description = "Seconds between backups (coreos periodic mode)"
    ),
    printcolumn(
        name = "Last Success",
        type_ = "date",
        json_path = ".status.lastSuccessDate"
    ),
    printcolumn(name = "Succeeded", type_ = "boolean", json_path = ".status.succeeded"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.Reason",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(
    validation = Rule::new("self.storageType != 'S3' || has(self.s3)").message("storageType S3 requires the s3 block"),
    validation = Rule::new("self.storageType != 'ABS' || has(self.abs)").message("storageType ABS requires the abs block"),
    validation = Rule::new("self.storageType != 'GCS' || has(self.gcs)").message("storageType GCS requires the gcs block"),
    validation = Rule::new("self.storageType != 'OSS' || has(self.oss)").message("storageType OSS requires the oss block"),
    validation = Rule::new("self.storageType != 'Local' || has(self.local)").message("storageType Local requires the local block"),
    validation = Rule::new("!has(self.drill) || self.storageType in ['S3', 'GCS', 'ABS', 'Local']").message("drills restore S3, GCS, ABS and Local backups only"),
    validation = Rule::new("!has(self.drill) || !has(self.encryption) || has(self.drill.identitySecret)").message("encrypted backups are drilled with a private key: set drill.identitySecret"),
    validation = Rule::new("!has(self.continuous) || self.storageType in ['S3', 'GCS', 'ABS', 'Local']").message("the continuous archive writes to S3, GCS, ABS or Local storage only"),
    validation = Rule::new("!has(self.continuous) || (has(self.backupPolicy) && (has(self.backupPolicy.schedule) || (has(self.backupPolicy.backupIntervalInSecond) && self.backupPolicy.backupIntervalInSecond > 0)))").message("the continuous archive replays changes onto scheduled backups: set backupPolicy.schedule or backupIntervalInSecond")
)]
#[serde(rename_all = "camelCase")]
pub struct EtcdBackupSpec {
    /// Client URLs of members of one etcd cluster. The snapshot is taken from the member with the
    /// highest revision. Required (coreos failed at run time without it).
    #[schemars(length(min = 1))]
    pub etcd_endpoints: Vec<String>,
    /// Backend for the snapshot; the block of the same name must be set.
    pub storage_type: StorageType,
    /// How often and how long. Absent, or `backupIntervalInSecond: 0` without `schedule`, means
    /// one backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_policy: Option<BackupPolicy>,
    /// S3 target, for `storageType: S3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Source>,
    /// Azure target, for `storageType: ABS`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abs: Option<AbsSource>,
    /// GCS target, for `storageType: GCS`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gcs: Option<GcsSource>,
    /// OSS target, for `storageType: OSS`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oss: Option<OssSource>,
    /// Local/PVC target, for `storageType: Local`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<LocalSource>,
    /// Secret with the etcd client certificate: keys `etcd-client.crt`, `etcd-client.key` and
    /// `etcd-client-ca.crt`.
    #[serde(
        rename = "clientTLSSecret",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub client_tls_secret: Option<String>,
    /// Compression of the stored object. Defaults to `none`, which stores exactly the snapshot
    /// stream so stock `etcdutl snapshot restore` can verify it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<Compression>,
    /// Encrypt each backup (after compression) to age recipients, so the bucket alone reveals
    /// nothing; only a restore with a matching private key reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<BackupEncryption>,
    /// Abort the backup when etcd sends no snapshot bytes for this many seconds. Unset or 0:
    /// 60 seconds. Unlike `timeoutInSecond` it does not fail slow but progressing backups of
    /// large databases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub stall_timeout_in_second: Option<i64>,
    /// What happens to stored backups when this EtcdBackup is deleted. Defaults to `Retain`,
    /// as in coreos.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_policy: Option<DeletionPolicy>,
    /// Record etcd's `HashKV` of the key space with each backup, for drills to compare (default
    /// true). It reads every key revision since the last compaction on the member: turn it off
    /// for very large clusters where that costs too much (about 0.2 s per GiB on the benchmark
    /// bed); drills then compare the revision and the key count only.
    #[serde(
        rename = "recordHashKV",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub record_hash_kv: Option<bool>,
    /// Prove backups by restoring them: a run-once pod restores the newest backup with its
    /// etcd version and compares what it serves with what was recorded at backup time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drill: Option<BackupDrill>,
    /// Archive every change between the scheduled backups, so that a restore can go to any
    /// revision or time since the oldest kept backup (`etcd-backup point-in-time`). The
    /// operator watches the cluster and stores segments beside the backups, under
    /// `<path>.changes/`, compressed and encrypted like them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuous: Option<ContinuousArchive>,
}

/// `spec.continuous`: how the archive of changes is cut into segments.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ContinuousArchive {
    /// A segment is stored at the latest this many seconds after its first change: about how
    /// far a restore to a point can lag behind the cluster. Default 60.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3600))]
    pub segment_seconds: Option<i64>,
    /// ...or once it holds this many bytes of changes. Default 64 MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1048576, max = 4294967296_i64))]
    pub segment_max_bytes: Option<i64>,
}

/// Defaults of `spec.continuous`.
pub const DEFAULT_SEGMENT_SECONDS: i64 = 60;
pub const DEFAULT_SEGMENT_MAX_BYTES: i64 = 64 << 20;

/// `status.continuous`: where the archive of changes is.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveStatus {
    /// Every change up to this revision is stored: a restore can reach any revision from
    /// the oldest kept backup to this one (except inside `lastGap`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archived_through_revision: Option<i64>,
    /// When the archive saw the last stored change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_change_time: Option<Time>,
    /// The newest stored segment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_segment: Option<String>,
    /// Gaps since the operator started archiving this EtcdBackup: the cluster compacted
    /// changes before they were stored (the archive was stopped or fell behind).
    #[serde(default)]
    pub gaps: i64,
    /// The newest gap: no point after `archivedThrough` up to `resumedAfter` can be restored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_gap: Option<ArchiveGap>,
    /// Why the archive is not running, while it is not (retried).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// A stretch of revisions the archive lost.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveGap {
    pub archived_through: i64,
    pub resumed_after: i64,
    pub time: Time,
}

/// When and for how long to back up (coreos `BackupPolicy` plus `schedule`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(validation = Rule::new(
    "!has(self.schedule) || !has(self.backupIntervalInSecond) || self.backupIntervalInSecond == 0"
).message("set either schedule or a non-zero backupIntervalInSecond, not both"))]
#[serde(rename_all = "camelCase")]
pub struct BackupPolicy {
    /// Total deadline of one backup run, in seconds. 0 or unset: no total deadline; only the
    /// stall timeout (`stallTimeoutInSecond`, 60 seconds unless set) ends a run that hangs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub timeout_in_second: Option<i64>,
    /// Seconds between backups; 0 or unset means one-shot (unless `schedule` is set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub backup_interval_in_second: Option<i64>,
    /// How many backups to keep (newest by revision); 0 or unset keeps all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_backups: Option<i32>,
    /// Cron schedule in UTC, five fields (`minute hour day-of-month month day-of-week`) or a
    /// macro such as `@hourly`. Alternative to `backupIntervalInSecond`; unlike it, the first
    /// backup runs at the first matching time rather than one interval after creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(
        pattern = r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|\S+(\s+\S+){4})$"
    ))]
    pub schedule: Option<String>,
}

/// How the stored snapshot is encoded.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// The raw snapshot (bbolt db + sha256 trailer), restorable by stock `etcdutl`.
    #[default]
    None,
    /// zstd; restore decompresses before handing the file to `etcdutl`.
    Zstd,
}

/// Fate of stored backups when the EtcdBackup is deleted.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DeletionPolicy {
    /// Keep them (coreos behaviour).
    #[default]
    Retain,
    /// Delete the objects this EtcdBackup wrote before the EtcdBackup goes away.
    Delete,
}

/// What triggers backups, derived from `backupPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackupSchedule<'a> {
    /// A single backup.
    OneShot,
    /// coreos periodic mode: every `Duration`.
    Interval(Duration),
    /// A cron expression.
    Cron(&'a str),
}

impl EtcdBackupSpec {
    /// How backups are triggered.
    pub fn schedule(&self) -> BackupSchedule<'_> {
        let Some(policy) = &self.backup_policy else {
            return BackupSchedule::OneShot;
        };
        if let Some(cron) = policy.schedule.as_deref().filter(|s| !s.trim().is_empty()) {
            return BackupSchedule::Cron(cron);
        }
        match positive_secs(policy.backup_interval_in_second) {
            Some(interval) => BackupSchedule::Interval(interval),
            None => BackupSchedule::OneShot,
        }
    }

    /// No policy, or interval 0 without a schedule: back up once, then never again.
    pub fn is_one_shot(&self) -> bool {
        self.schedule() == BackupSchedule::OneShot
    }

    /// The overall deadline, or `None` for none (only the stall timeout applies).
    pub fn timeout(&self) -> Option<Duration> {
        positive_secs(self.backup_policy.as_ref()?.timeout_in_second)
    }

    /// The stall timeout, if set; `None` leaves the controller's default (60 seconds).
    pub fn stall_timeout(&self) -> Option<Duration> {
        positive_secs(self.stall_timeout_in_second)
    }

    /// How many backups to keep; `None` keeps all.
    pub fn max_backups(&self) -> Option<u32> {
        let n = self.backup_policy.as_ref()?.max_backups?;
        u32::try_from(n).ok().filter(|n| *n > 0)
    }

    /// The effective compression.
    pub fn compression(&self) -> Compression {
        self.compression.unwrap_or_default()
    }

    /// The effective deletion policy.
    pub fn deletion_policy(&self) -> DeletionPolicy {
        self.deletion_policy.unwrap_or_default()
    }

    /// Whether the block for `storage_type` is set.
    pub fn has_block(&self, storage_type: StorageType) -> bool {
        match storage_type {
            StorageType::S3 => self.s3.is_some(),
            StorageType::Abs => self.abs.is_some(),
            StorageType::Gcs => self.gcs.is_some(),
            StorageType::Oss => self.oss.is_some(),
            StorageType::Local => self.local.is_some(),
        }
    }

    /// The checks the CRD's CEL rules make, for clusters without CEL (before Kubernetes 1.25)
    /// and for CRDs installed with the rules stripped.
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.etcd_endpoints.iter().all(|e| e.trim().is_empty()) {
            return Err(SpecError::NoEndpoints);
        }
        check_storage(
            self.storage_type,
            self.has_block(self.storage_type),
            Blocks {
                s3: self.s3.as_ref(),
                gcs: self.gcs.as_ref(),
                abs: self.abs.as_ref(),
                local: self.local.as_ref(),
            },
        )?;
        if let Some(p) = &self.backup_policy {
            for (field, value) in [
                ("backupPolicy.timeoutInSecond", p.timeout_in_second),
                (
                    "backupPolicy.backupIntervalInSecond",
                    p.backup_interval_in_second,
                ),
                ("backupPolicy.maxBackups", p.max_backups.map(i64::from)),
            ] {
                if value.is_some_and(|v| v < 0) {
                    return Err(SpecError::Negative(field));
                }
            }
            if p.schedule.is_some() && p.backup_interval_in_second.is_some_and(|v| v != 0) {
                return Err(SpecError::ScheduleAndInterval);
            }
        }
        if self.stall_timeout_in_second.is_some_and(|v| v < 0) {
            return Err(SpecError::Negative("stallTimeoutInSecond"));
        }
        if let Some(drill) = &self.drill {
            if drill.every_backups.is_some() && drill.schedule.is_some() {
                return Err(SpecError::Drill(
                    "set either everyBackups or schedule, not both",
                ));
            }
            if self.storage_type == StorageType::Oss {
                return Err(SpecError::Drill(
                    "drills restore S3, GCS, ABS and Local backups only",
                ));
            }
            if self.encryption.is_some() && drill.identity_secret.is_none() {
                return Err(SpecError::Drill(
                    "encrypted backups are drilled with a private key: set drill.identitySecret",
                ));
            }
        }
        Ok(())
    }
}

fn positive_secs(secs: Option<i64>) -> Option<Duration> {
    secs.and_then(|s| u64::try_from(s).ok())
        .filter(|s| *s > 0)
        .map(Duration::from_secs)
}

/// Observed state. The first five fields are coreos's `BackupStatus`, unchanged (including the
/// capitalised `Reason` key), so tools written for coreos keep working.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdBackupStatus {
    /// Whether the last backup succeeded (coreos; always written).
    #[serde(default)]
    pub succeeded: bool,
    /// Why the last backup failed (coreos spells the key `Reason`).
    #[serde(rename = "Reason", default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// etcd server version of the member the last successful snapshot came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_version: Option<String>,
    /// Revision of the last successful snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_revision: Option<i64>,
    /// When the last successful snapshot was taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_success_date: Option<Time>,
    /// `Ready` and `Progressing` conditions, and `Drilled` once a restore drill has ended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "condition::list_schema::<Condition>")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Details of the last successful backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_backup: Option<BackupRecord>,
    /// The last failed attempt; kept after later successes so it stays visible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<BackupFailure>,
    /// The attempts of the last run that failed for a cause that may pass (etcd or S3
    /// unreachable, a snapshot stream cut, a Secret read refused by the API server) and were
    /// retried, oldest first; absent when its first attempt settled it. The run's own result
    /// is `succeeded` and `lastFailure`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run_retries: Option<Vec<BackupFailure>>,
    /// When the next scheduled backup is due (periodic and cron modes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_schedule_time: Option<Time>,
    /// When the last scheduled backup was started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,
    /// The newest restore drill (`Running` while its pod runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_drill: Option<DrillRecord>,
    /// The continuous archive of changes (`spec.continuous`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuous: Option<ArchiveStatus>,
    /// The newest drill that succeeded; retention never deletes its backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_drill: Option<DrillRecord>,
}

/// A stored snapshot, as verified when it was written.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupRecord {
    /// Full location: `s3://bucket/key` or `file:///path`.
    pub object_key: String,
    /// Size of the stored object in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<i64>,
    /// Hex sha256 of the stored object (after compression, if any), as in the manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Hex CRC32C of the stored object, as in the manifest, for an encrypted backup: its
    /// manifest records this instead of a sha256 (age authenticates the content itself, and the
    /// snapshot's own sha256 is checked on every restore).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crc32c: Option<String>,
    /// Hex sha256 of the snapshot itself (before compression and encryption), as in the
    /// manifest: a restore by `backupRef` checks that the backup it fetched is this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub db_sha256: Option<String>,
    /// Revision of the snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_revision: Option<i64>,
    /// etcd server version of the source member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_version: Option<String>,
    /// Wall-clock duration of the backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_seconds: Option<f64>,
    /// When the backup started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the object was committed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// Encoding of the stored object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<Compression>,
    /// The age recipients (public keys) the object is encrypted to; empty when it is not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub encrypted_to: Vec<String>,
    /// How many backups this EtcdBackup has taken, this one included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number: Option<i64>,
    /// The key space at backup time, as a drill must find it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contents: Option<RecordedContents>,
    /// A Local backup: the claim that holds it and its path inside that claim, which is how
    /// restores and drills reach it (the operator may mount the claim anywhere, and an
    /// EtcdBackup without `local.persistentVolumeClaim` uses the operator's own claim).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_volume: Option<LocalVolumeRecord>,
}

/// Where a Local backup lies: a claim and a path inside it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalVolumeRecord {
    /// The PersistentVolumeClaim (in the EtcdBackup's namespace).
    pub claim: String,
    /// The file's path inside the claim, without a leading `/`.
    pub path: String,
}

/// A failed backup attempt.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupFailure {
    /// When the attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<Time>,
    /// Machine-readable cause, e.g. `SnapshotFailed`, `UploadFailed`, `Timeout`.
    pub reason: String,
    /// Human-readable detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(policy: Option<BackupPolicy>) -> EtcdBackupSpec {
        EtcdBackupSpec {
            etcd_endpoints: vec!["http://etcd:2379".into()],
            storage_type: StorageType::S3,
            backup_policy: policy,
            s3: Some(S3Source {
                path: "b/k".into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn policy(interval: Option<i64>, schedule: Option<&str>) -> Option<BackupPolicy> {
        Some(BackupPolicy {
            backup_interval_in_second: interval,
            schedule: schedule.map(Into::into),
            ..Default::default()
        })
    }

    #[test]
    fn one_shot_modes() {
        assert!(spec(None).is_one_shot());
        assert!(spec(policy(None, None)).is_one_shot());
        assert!(spec(policy(Some(0), None)).is_one_shot());
        assert!(!spec(policy(Some(125), None)).is_one_shot());
        assert!(!spec(policy(Some(0), Some("@hourly"))).is_one_shot());
        assert_eq!(
            spec(policy(Some(125), None)).schedule(),
            BackupSchedule::Interval(Duration::from_secs(125))
        );
        assert_eq!(
            spec(policy(None, Some("*/30 * * * *"))).schedule(),
            BackupSchedule::Cron("*/30 * * * *")
        );
    }

    #[test]
    fn zero_and_negative_mean_default() {
        let mut s = spec(Some(BackupPolicy {
            timeout_in_second: Some(0),
            max_backups: Some(0),
            ..Default::default()
        }));
        assert_eq!(s.timeout(), None);
        assert_eq!(s.max_backups(), None);
        s.backup_policy = Some(BackupPolicy {
            timeout_in_second: Some(600),
            max_backups: Some(4),
            ..Default::default()
        });
        assert_eq!(s.timeout(), Some(Duration::from_secs(600)));
        assert_eq!(s.max_backups(), Some(4));
        assert_eq!(s.compression(), Compression::None);
        assert_eq!(s.deletion_policy(), DeletionPolicy::Retain);
    }

    #[test]
    fn coreos_status_round_trips() {
        let empty: EtcdBackupStatus = serde_json::from_value(serde_json::json!({})).unwrap();
        assert!(!empty.succeeded);
        let failed: EtcdBackupStatus = serde_json::from_value(serde_json::json!({
            "succeeded": false, "Reason": "failed to save snapshot", "lastSuccessDate": null
        }))
        .unwrap();
        assert_eq!(failed.reason.as_deref(), Some("failed to save snapshot"));
        let written = serde_json::json!({
            "succeeded": true, "etcdVersion": "3.2.13", "etcdRevision": 3,
            "lastSuccessDate": "2019-12-15T15:57:59Z"
        });
        let ok: EtcdBackupStatus = serde_json::from_value(written.clone()).unwrap();
        assert_eq!(serde_json::to_value(&ok).unwrap(), written);
    }

    #[test]
    fn validate_mirrors_the_cel_rules() {
        assert_eq!(spec(None).validate(), Ok(()));
        let mut s = spec(policy(Some(60), Some("@daily")));
        assert_eq!(s.validate(), Err(SpecError::ScheduleAndInterval));
        s.backup_policy = policy(Some(-1), None);
        assert!(matches!(s.validate(), Err(SpecError::Negative(_))));
        s.backup_policy = None;
        s.s3 = None;
        assert!(matches!(
            s.validate(),
            Err(SpecError::MissingStorage { .. })
        ));
        s.etcd_endpoints.clear();
        assert_eq!(s.validate(), Err(SpecError::NoEndpoints));
    }
}
