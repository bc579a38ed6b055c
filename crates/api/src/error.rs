//! Spec validation errors. The controllers check what the CRDs' CEL rules check too: an object
//! stored before a rule existed, or under an older CRD, still gets a clear condition.

use crate::storage::{LocalSource, S3Path, S3PathError, S3Source, StorageType};

/// A spec the controllers refuse, with a message meant for `status` and Events.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// `etcdEndpoints` is empty.
    #[error("spec.etcdEndpoints must list at least one etcd client URL")]
    NoEndpoints,
    /// The block named by the storage type is absent.
    #[error("storage type {storage_type} requires spec.{field}")]
    MissingStorage {
        /// The requested storage type.
        storage_type: StorageType,
        /// JSON name of the missing block.
        field: &'static str,
    },
    /// `s3.path` is not `<bucket>/<key>`.
    #[error("spec.s3.path: {0}")]
    S3Path(#[from] S3PathError),
    /// `local.path` is relative but there is no PVC to resolve it in.
    #[error(
        "spec.local.path {0:?} must be absolute unless spec.local.persistentVolumeClaim is set"
    )]
    RelativeLocalPath(String),
    /// Both trigger styles were given.
    #[error(
        "spec.backupPolicy: set either schedule or a non-zero backupIntervalInSecond, not both"
    )]
    ScheduleAndInterval,
    /// A count or duration is below zero.
    #[error("spec.{0} must not be negative")]
    Negative(&'static str),
    /// `fromSurvivor` together with a backup to restore.
    #[error(
        "spec.fromSurvivor takes the data from a member of the cluster: it excludes s3, local, \
         backupRef, pointInTime and decryption"
    )]
    SurvivorWithBackup,
    /// `pointInTime` without the EtcdBackup whose archive it replays.
    #[error(
        "spec.pointInTime replays an EtcdBackup's continuous archive: name it in spec.backupRef"
    )]
    PointWithoutBackupRef,
    /// `pointInTime` with both or neither of its fields.
    #[error("spec.pointInTime names a revision or a time, exactly one")]
    PointNeedsOne,
    /// `spec.drill` that cannot run as written.
    #[error("spec.drill: {0}")]
    Drill(&'static str),
    /// coreos restores the cluster named like the EtcdRestore itself.
    #[error("EtcdRestore name {restore:?} must equal spec.etcdCluster.name {cluster:?}")]
    NameMismatch {
        /// `metadata.name` of the EtcdRestore.
        restore: String,
        /// `spec.etcdCluster.name`.
        cluster: String,
    },
}

/// The block for the storage type exists, an S3 path parses and a local path is usable.
pub(crate) fn check_storage(
    storage_type: StorageType,
    has_block: bool,
    s3: Option<&S3Source>,
    local: Option<&LocalSource>,
) -> Result<(), SpecError> {
    if !has_block {
        return Err(SpecError::MissingStorage {
            storage_type,
            field: storage_type.field_name(),
        });
    }
    match (storage_type, s3, local) {
        (StorageType::S3, Some(s3), _) => {
            S3Path::parse(&s3.path)?;
        }
        (StorageType::Local, _, Some(l)) if !l.uses_pvc() && !l.path.starts_with('/') => {
            return Err(SpecError::RelativeLocalPath(l.path.clone()));
        }
        _ => {}
    }
    Ok(())
}
