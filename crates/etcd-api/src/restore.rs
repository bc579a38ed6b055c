//! `EtcdRestore`: replace an `EtcdCluster`'s data with a stored snapshot.
//!
//! As in coreos, the EtcdRestore is named after the cluster it restores and its spec names where
//! the snapshot is. The spec is immutable: a restore is a one-time operation.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::condition::{self, Condition};
use crate::encryption::RestoreDecryption;
use crate::error::{Blocks, SpecError, check_storage};
use crate::storage::{AbsSource, GcsSource, LocalSource, OssSource, S3Source, StorageType};

/// Which snapshot to restore into which cluster.
// The repeated `type_ = "..."` inside printcolumn(...) is not a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "etcd.database.coreos.com",
    version = "v1beta2",
    kind = "EtcdRestore",
    namespaced,
    status = "EtcdRestoreStatus",
    derive = "PartialEq",
    shortname = "er",
    category = "etcd",
    doc = "Restores an EtcdCluster from a backup (coreos-compatible). Must be named like the cluster.",
    validation = Rule::new("self.metadata.name == self.spec.etcdCluster.name")
        .message("metadata.name must equal spec.etcdCluster.name"),
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.etcdCluster.name"),
    printcolumn(name = "Source", type_ = "string", json_path = ".status.source"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Revision", type_ = "integer", json_path = ".status.restoredRevision"),
    printcolumn(name = "Duration", type_ = "string", json_path = ".status.duration"),
    printcolumn(name = "Reason", type_ = "string", json_path = ".status.reason", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[x_kube(
    validation = Rule::new("self == oldSelf").message("spec is immutable; create a new EtcdRestore"),
    validation = Rule::new("self.backupStorageType != 'S3' || has(self.s3) || has(self.backupRef) || has(self.fromSurvivor)").message("backupStorageType S3 requires the s3 block (or backupRef, or fromSurvivor)"),
    validation = Rule::new("!has(self.fromSurvivor) || !(has(self.s3) || has(self.local) || has(self.backupRef) || has(self.decryption))").message("fromSurvivor takes the data from a member of the cluster: it excludes s3, local, backupRef and decryption"),
    validation = Rule::new("!has(self.pointInTime) || has(self.backupRef)").message("pointInTime replays an EtcdBackup's continuous archive: name it in backupRef"),
    validation = Rule::new("self.backupStorageType != 'ABS' || has(self.abs) || has(self.backupRef) || has(self.fromSurvivor)").message("backupStorageType ABS requires the abs block (or backupRef)"),
    validation = Rule::new("self.backupStorageType != 'GCS' || has(self.gcs) || has(self.backupRef) || has(self.fromSurvivor)").message("backupStorageType GCS requires the gcs block (or backupRef)"),
    validation = Rule::new("self.backupStorageType != 'OSS' || has(self.oss)").message("backupStorageType OSS requires the oss block"),
    validation = Rule::new("self.backupStorageType != 'Local' || has(self.local) || has(self.backupRef) || has(self.fromSurvivor)").message("backupStorageType Local requires the local block (or backupRef)")
)]
#[serde(rename_all = "camelCase")]
pub struct EtcdRestoreSpec {
    /// Backend holding the snapshot; the block of the same name must be set. `S3` and `Local`
    /// are restored, the others refused (`BadSource`). Ignored with `backupRef` (the
    /// EtcdBackup's recorded backup decides) and with `fromSurvivor`; coreos required it, here
    /// it defaults to `S3`, which needs no block of its own with either.
    #[serde(default)]
    pub backup_storage_type: StorageType,
    /// S3 object to restore (`path` names the exact object, e.g. one periodic backup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Source>,
    /// Azure object to restore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abs: Option<AbsSource>,
    /// GCS object to restore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gcs: Option<GcsSource>,
    /// OSS object to restore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oss: Option<OssSource>,
    /// Local/PVC file to restore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<LocalSource>,
    /// The EtcdCluster, in this namespace, whose data is replaced. Its spec is kept.
    pub etcd_cluster: EtcdClusterRef,
    /// Restore the newest verified backup of this EtcdBackup (its `status.lastBackup`), from its
    /// storage with its credentials, instead of the `s3`/`local` block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_ref: Option<BackupRef>,
    /// Recover a cluster that lost quorum from its surviving member with the most recent data
    /// (instead of a backup): that member's snapshot becomes a new one-member cluster, with its
    /// revision moved forward as any restore's, which its operator grows back to `size`.
    /// Refused while any member still has a leader (the cluster has quorum). Every old
    /// member's volume is kept whatever `oldVolumes` says: a lost member may hold writes the
    /// survivor missed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_survivor: Option<FromSurvivor>,
    /// Restore the key space as it was at a revision or time instead of the newest backup:
    /// from the newest snapshot of `backupRef`'s EtcdBackup at or before the point and the
    /// changes its continuous archive (`spec.continuous`) stored after it, replayed in each
    /// restore pod. The members must all reach the same key space; the restored cluster must
    /// serve it. Needs `backupRef`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub point_in_time: Option<PointInTime>,
    /// The EtcdCluster to create when it does not exist. Ignored when it exists: its own spec
    /// is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_cluster: Option<NewCluster>,
    /// What happens to the old members' volumes once the restored cluster is healthy:
    /// `Delete` (default) or `Keep` (detached from the cluster, labelled
    /// `etcd.database.coreos.com/detached-from`). Until then they are always kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_volumes: Option<OldVolumesPolicy>,
    /// The medium of the restore pods' scratch volume (see [`ScratchMedium`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scratch_medium: Option<ScratchMedium>,
    /// The private key of an encrypted backup. Required to restore one: without it the
    /// restore fails before the cluster is touched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decryption: Option<RestoreDecryption>,
}

/// A cluster to create for the restore: members, image and a claim per member.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NewCluster {
    /// Number of members (1..7).
    #[schemars(range(min = 1, max = 7))]
    pub size: i32,
    /// etcd version, MAJOR.MINOR.PATCH (a leading `v` is ignored), e.g. `3.5.16`: a line the
    /// operators run, 3.4 to 3.7 (a later minor is refused by the schema: its flags and
    /// restore tool are unknown to this release).
    #[schemars(
        length(min = 1, max = 64),
        regex(pattern = r"^v?3\.[4-7]\.(0|[1-9][0-9]*)$")
    )]
    pub version: String,
    /// Image repository (default `quay.io/coreos/etcd`, as coreos).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub repository: Option<String>,
    /// Size of each member's claim, e.g. `1Gi`.
    #[schemars(length(min = 1, max = 64))]
    pub storage: String,
    /// StorageClass of the claims (default: the cluster's default class).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub storage_class_name: Option<String>,
}

/// A recovery from the surviving member (`spec.fromSurvivor`). The member is chosen by the
/// operator: of the members that answer, the one with the highest committed Raft index, then
/// revision, then term: the one that holds the most of what was committed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct FromSurvivor {
    /// Recover from this member instead of the one chosen (it must answer; the restore waits
    /// until it does). For when you know better, e.g. the chosen member's disk is failing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub member: Option<String>,
}

/// `spec.pointInTime`: a revision, or a time.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[x_kube(validation = Rule::new("has(self.revision) != has(self.time)").message("pointInTime names a revision or a time, exactly one"))]
#[serde(rename_all = "camelCase")]
pub struct PointInTime {
    /// The revision to restore to: the key space exactly as it was once this revision was
    /// committed (e.g. the one before a damaging change, found with `etcdctl get --rev` or a
    /// key's history).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub revision: Option<i64>,
    /// Or a time (RFC 3339): the last revision the archive saw committed at or before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<Time>,
    /// The etcd cluster ID (hex, as in the backups' manifests) whose snapshots and changes
    /// to use, when the EtcdBackup's base holds those of several: a cluster restored before
    /// gets a new ID, and its archive goes on beside the old one's. Without it such a point
    /// fails with `PointNotReached`, naming the IDs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 16), regex(pattern = r"^[0-9a-f]+$"))]
    pub cluster_id: Option<String>,
}

/// An EtcdBackup in this namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct BackupRef {
    /// Name of the EtcdBackup, in this namespace, whose newest verified backup is restored
    /// (`BadSource` when it does not exist or has no successful backup yet).
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// What to do with the replaced members' volumes after a successful restore.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum OldVolumesPolicy {
    /// Delete the replaced members' claims once the restored cluster is healthy.
    #[default]
    Delete,
    /// Keep them, detached from the cluster.
    Keep,
}

/// Where each member's restore pod keeps the fetched snapshot until the restore tool has copied
/// it onto the member's claim: `Disk` (default: an emptyDir on the node's disk) or `Memory` (a
/// memory-backed emptyDir: the node's disk is written once per member instead of twice, but each
/// restore pod holds the whole snapshot in RAM meanwhile, counted as its memory use).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ScratchMedium {
    /// The node's disk.
    #[default]
    Disk,
    /// Memory (tmpfs).
    Memory,
}

/// Reference to an `EtcdCluster` by name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct EtcdClusterRef {
    /// Name of the EtcdCluster; coreos requires it to equal the EtcdRestore's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

impl EtcdRestoreSpec {
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

    /// The checks the CRD's CEL rules make (except immutability), for clusters without CEL.
    /// `restore_name` is the EtcdRestore's `metadata.name`.
    pub fn validate(&self, restore_name: &str) -> Result<(), SpecError> {
        if restore_name != self.etcd_cluster.name {
            return Err(SpecError::NameMismatch {
                restore: restore_name.to_string(),
                cluster: self.etcd_cluster.name.clone(),
            });
        }
        if self.from_survivor.is_some() {
            if self.s3.is_some()
                || self.local.is_some()
                || self.backup_ref.is_some()
                || self.decryption.is_some()
                || self.point_in_time.is_some()
            {
                return Err(SpecError::SurvivorWithBackup);
            }
            return Ok(());
        }
        if let Some(point) = &self.point_in_time {
            if point.revision.is_some() == point.time.is_some() {
                return Err(SpecError::PointNeedsOne);
            }
            if self.backup_ref.is_none() {
                return Err(SpecError::PointWithoutBackupRef);
            }
        }
        if self.backup_ref.is_some() {
            return Ok(());
        }
        let t = self.backup_storage_type;
        let blocks = Blocks {
            s3: self.s3.as_ref(),
            gcs: self.gcs.as_ref(),
            abs: self.abs.as_ref(),
            local: self.local.as_ref(),
        };
        check_storage(t, self.has_block(t), blocks)
    }
}

/// Observed state: coreos's `succeeded`/`reason` plus phase and conditions.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdRestoreStatus {
    /// Whether the restore finished successfully (coreos; always written). Unlike coreos, set
    /// only once the restored cluster is healthy.
    #[serde(default)]
    pub succeeded: bool,
    /// Why the restore failed (lowercase key here, unlike EtcdBackup's `Reason`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Where the restore is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RestorePhase>,
    /// `Ready` and `Progressing` conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "condition::list_schema::<Condition>")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When the restore started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the restore reached `Succeeded` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// The backup restored: `s3://bucket/key` or `file:///path` (pinned with the plan).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// What the EtcdBackup recorded of the backup (`backupRef`), pinned with the plan: the
    /// fetches must report these checksums and revision, and the restored members this key
    /// space.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_backup: Option<ExpectedBackup>,
    /// The snapshot every new member's fetch verified, recorded before any old member is
    /// stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<VerifiedSnapshot>,
    /// The restore's plan, recorded before any claim or pod is made: new members, cluster token
    /// and the claims of the members they replace. A restarted operator resumes from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<RestorePlan>,
    /// The lowest revision the restored members serve, once healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_revision: Option<i64>,
    /// The key space the restored members serve, read at hand-over and found equal to the
    /// backup's record (a `backupRef` backup whose snapshot holds exactly the recorded
    /// revision).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_contents: Option<KeySpace>,
    /// Whether the revision was moved forward on restore (`--bump-revision`, etcd 3.4.27+ and
    /// 3.5.10+), so watchers see a compaction instead of revisions going backwards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_bumped: Option<bool>,
    /// Wall-clock time from start to completion (or until now, while running), e.g. `1m12s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
}

pub use crate::restore_record::{
    ExpectedBackup, KeySpace, RestorePhase, RestorePlan, Survivor, VerifiedSnapshot,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_checks_name_and_storage() {
        let mut spec = EtcdRestoreSpec {
            backup_storage_type: StorageType::S3,
            s3: Some(S3Source {
                path: "mybucket/etcd.backup".into(),
                ..Default::default()
            }),
            etcd_cluster: EtcdClusterRef {
                name: "example-etcd-cluster".into(),
            },
            ..Default::default()
        };
        assert_eq!(spec.validate("example-etcd-cluster"), Ok(()));
        assert!(matches!(
            spec.validate("other"),
            Err(SpecError::NameMismatch { .. })
        ));
        spec.s3.as_mut().unwrap().path = "mybucket".into();
        assert!(matches!(
            spec.validate("example-etcd-cluster"),
            Err(SpecError::S3Path(_))
        ));
        spec.backup_storage_type = StorageType::Local;
        assert!(matches!(
            spec.validate("example-etcd-cluster"),
            Err(SpecError::MissingStorage { field: "local", .. })
        ));
        assert!(RestorePhase::Failed.is_terminal() && !RestorePhase::Restoring.is_terminal());
    }
}
