//! Spec validation errors. The controllers check what the CRDs' CEL rules check too: an object
//! stored before a rule existed, or under an older CRD, still gets a clear condition.

use crate::storage::{
    AbsSource, GcsSource, LocalSource, S3Path, S3PathError, S3Source, StorageType,
};

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
    /// `gcs.path` or `abs.path` is not `<bucket>/<object>` (`<container>/<blob>`).
    #[error("spec.{field}.path {path:?} must be \"<{namespace}>/<name>\" without a scheme")]
    ObjectPath {
        field: &'static str,
        namespace: &'static str,
        path: String,
    },
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

/// The storage blocks of a spec, for [`check_storage`].
pub(crate) struct Blocks<'a> {
    pub s3: Option<&'a S3Source>,
    pub gcs: Option<&'a GcsSource>,
    pub abs: Option<&'a AbsSource>,
    pub local: Option<&'a LocalSource>,
}

/// The block for the storage type exists, an object path parses and a local path is usable.
pub(crate) fn check_storage(
    storage_type: StorageType,
    has_block: bool,
    blocks: Blocks<'_>,
) -> Result<(), SpecError> {
    let Blocks {
        s3,
        gcs,
        abs,
        local,
    } = blocks;
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
    let object_path = |field, namespace, path: &str| SpecError::ObjectPath {
        field,
        namespace,
        path: path.to_string(),
    };
    match (storage_type, gcs, abs) {
        (StorageType::Gcs, Some(g), _) if g.location().is_err() => {
            Err(object_path("gcs", "bucket", &g.path))
        }
        (StorageType::Abs, _, Some(a)) if a.location().is_err() => {
            Err(object_path("abs", "container", &a.path))
        }
        _ => Ok(()),
    }
}
