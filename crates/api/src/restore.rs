//! `EtcdRestore`: replace an `EtcdCluster`'s data with a stored snapshot.
//!
//! As in coreos, the EtcdRestore is named after the cluster it restores and its spec names where
//! the snapshot is. The spec is immutable: a restore is a one-time operation.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::condition::{self, Condition};
use crate::error::{SpecError, check_storage};
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
    printcolumn(name = "Storage", type_ = "string", json_path = ".spec.backupStorageType"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Succeeded", type_ = "boolean", json_path = ".status.succeeded"),
    printcolumn(name = "Reason", type_ = "string", json_path = ".status.reason"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[x_kube(
    validation = Rule::new("self == oldSelf").message("spec is immutable; create a new EtcdRestore"),
    validation = Rule::new("self.backupStorageType != 'S3' || has(self.s3)").message("backupStorageType S3 requires the s3 block"),
    validation = Rule::new("self.backupStorageType != 'ABS' || has(self.abs)").message("backupStorageType ABS requires the abs block"),
    validation = Rule::new("self.backupStorageType != 'GCS' || has(self.gcs)").message("backupStorageType GCS requires the gcs block"),
    validation = Rule::new("self.backupStorageType != 'OSS' || has(self.oss)").message("backupStorageType OSS requires the oss block"),
    validation = Rule::new("self.backupStorageType != 'Local' || has(self.local)").message("backupStorageType Local requires the local block")
)]
#[serde(rename_all = "camelCase")]
pub struct EtcdRestoreSpec {
    /// Backend holding the snapshot; the block of the same name must be set.
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
        let t = self.backup_storage_type;
        check_storage(t, self.has_block(t), self.s3.as_ref(), self.local.as_ref())
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
}

/// Steps of a restore.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum RestorePhase {
    /// Accepted, nothing done yet.
    Pending,
    /// Checking the snapshot and the cluster, pausing the cluster.
    Preparing,
    /// Restoring the seed member from the snapshot.
    Restoring,
    /// Waiting for the restored cluster to become healthy.
    Verifying,
    /// The cluster runs on the restored data.
    Succeeded,
    /// The restore stopped; see `reason` and the `Ready` condition.
    Failed,
}

impl RestorePhase {
    /// Whether the restore is over, successfully or not.
    pub fn is_terminal(self) -> bool {
        matches!(self, RestorePhase::Succeeded | RestorePhase::Failed)
    }
}

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
