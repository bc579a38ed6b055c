//! Storage locations shared by `EtcdBackup` and `EtcdRestore`.
//!
//! coreos had separate backup and restore structs with the same JSON fields; one struct per
//! backend keeps the two CRDs in step. Every field coreos wrote is kept, optional where coreos
//! tolerated its absence, so coreos manifests round-trip unchanged.

use std::fmt;
use std::path::{Path, PathBuf};

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Secret keys of an `awsSecret` (AWS shared-file format, profile `default`), as in coreos.
pub const AWS_SECRET_CREDENTIALS_KEY: &str = "credentials";
/// See [`AWS_SECRET_CREDENTIALS_KEY`].
pub const AWS_SECRET_CONFIG_KEY: &str = "config";
/// Key of the PEM bundle in the Secret named by `s3.caSecret`.
pub const CA_SECRET_KEY: &str = "ca.crt";
/// Where `local.persistentVolumeClaim` is mounted: in the backup operator's pod (its
/// `--local-volume-claim`), and read-only in restore and drill pods.
pub const LOCAL_PVC_MOUNT_PATH: &str = "/var/lib/etcd-backup";

/// Which backend holds the snapshot. The coreos values plus `Local`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum StorageType {
    /// Amazon S3 or an S3-compatible server (`s3`).
    #[default]
    S3,
    /// Azure Blob Storage (`abs`). Accepted for coreos compatibility.
    #[serde(rename = "ABS")]
    Abs,
    /// Google Cloud Storage (`gcs`). Accepted for coreos compatibility.
    #[serde(rename = "GCS")]
    Gcs,
    /// Alibaba Cloud OSS (`oss`). Accepted for coreos compatibility.
    #[serde(rename = "OSS")]
    Oss,
    /// A file on a PersistentVolumeClaim (`local`): the one mounted in the backup operator's pod.
    Local,
}

impl StorageType {
    /// The value as written in manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            StorageType::S3 => "S3",
            StorageType::Abs => "ABS",
            StorageType::Gcs => "GCS",
            StorageType::Oss => "OSS",
            StorageType::Local => "Local",
        }
    }

    /// The JSON name of the block that must accompany this type (`s3`, `abs`, ...).
    pub fn field_name(self) -> &'static str {
        match self {
            StorageType::S3 => "s3",
            StorageType::Abs => "abs",
            StorageType::Gcs => "gcs",
            StorageType::Oss => "oss",
            StorageType::Local => "local",
        }
    }

    /// All values, for building per-type CEL rules and tests.
    pub const ALL: [StorageType; 5] = [
        StorageType::S3,
        StorageType::Abs,
        StorageType::Gcs,
        StorageType::Oss,
        StorageType::Local,
    ];
}

impl fmt::Display for StorageType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An S3 (or S3-compatible) object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct S3Source {
    /// Full path `<bucket>/<key>`, e.g. `mybucket/etcd.backup`. Periodic backups append
    /// `_v<revision>_<time>` to the key.
    #[schemars(length(max = 1024), regex(pattern = r"^[^/:]+/.+$"))]
    pub path: String,
    /// Secret in this namespace with the keys `credentials` and `config` (AWS shared files,
    /// profile `default`; static keys and `region` only). Required, as in coreos: without it a
    /// backup fails with `NoCredentials` and a restore with `BadSource`, unless the operator was
    /// started with `--allow-ambient-credentials`; then the backup operator's own AWS identity
    /// is used, and restore pods may use the node's. Drill pods read with this Secret only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub aws_secret: Option<String>,
    /// Endpoint URL of an S3-compatible server; empty or absent means AWS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    pub endpoint: Option<String>,
    /// Use path-style URLs (`endpoint/bucket/key`), needed by most S3-compatible servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force_path_style: Option<bool>,
    /// AWS region. Overrides the region in the `config` file; needed when neither is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub region: Option<String>,
    /// Secret holding a PEM CA bundle under the key `ca.crt`, trusted in addition to the
    /// system roots when talking to `endpoint` (self-signed MinIO, Ceph RGW, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub ca_secret: Option<String>,
    /// S3 server-side encryption, for policies that demand it (default: the bucket's own).
    /// It protects the data at rest on the server only: `spec.encryption` (age) is what keeps
    /// a leaked bucket unreadable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_side_encryption: Option<S3ServerSideEncryption>,
}

/// `s3.serverSideEncryption`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[x_kube(
    validation = Rule::new("self.mode == 'SSE-C' ? has(self.customerKeySecret) : !has(self.customerKeySecret)")
        .message("customerKeySecret is required with mode SSE-C and only then"),
    validation = Rule::new("!has(self.kmsKeyId) || self.mode == 'aws:kms'")
        .message("kmsKeyId needs mode aws:kms")
)]
#[serde(rename_all = "camelCase")]
pub struct S3ServerSideEncryption {
    /// `AES256` (SSE-S3), `aws:kms` (SSE-KMS) or `SSE-C` (a key of yours, sent with every
    /// request that writes or reads the objects).
    pub mode: SseMode,
    /// The KMS key for `aws:kms` (default: the account's S3 KMS key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    pub kms_key_id: Option<String>,
    /// For `SSE-C`: the Secret key holding the 256-bit key (32 raw bytes, or their base64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub customer_key_secret: Option<crate::encryption::SecretKeyRef>,
}

/// The S3 server-side encryption modes.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum SseMode {
    #[default]
    #[serde(rename = "AES256")]
    Aes256,
    #[serde(rename = "aws:kms")]
    AwsKms,
    #[serde(rename = "SSE-C")]
    SseC,
}

impl S3Source {
    /// Bucket and key of `path`.
    pub fn location(&self) -> Result<S3Path, S3PathError> {
        S3Path::parse(&self.path)
    }

    /// The endpoint, treating `""` (which coreos restores always wrote) as unset.
    pub fn endpoint(&self) -> Option<&str> {
        non_empty(self.endpoint.as_deref())
    }

    /// The credentials Secret, or `None` for the ambient credential chain.
    pub fn aws_secret(&self) -> Option<&str> {
        non_empty(self.aws_secret.as_deref())
    }

    /// Whether to use path-style addressing (coreos default: false).
    pub fn force_path_style(&self) -> bool {
        self.force_path_style.unwrap_or(false)
    }
}

/// An Azure Blob Storage blob (coreos' `abs` block, plus an endpoint).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AbsSource {
    /// Full path `<container>/<blob>`. Periodic backups append `_v<revision>_<time>`.
    #[schemars(length(max = 1024), regex(pattern = r"^[^/:]+/.+$"))]
    pub path: String,
    /// Secret in this namespace with `storage-account` and `storage-key` (the account key,
    /// base64), as in coreos, or `storage-sas-token` instead of the key; `cloud` optionally
    /// (`AzurePublicCloud`, the default, `AzureChinaCloud`, `AzureUSGovernmentCloud`). With
    /// only `storage-account`, the operator's workload identity is used, and only when it was
    /// started with `--allow-ambient-credentials`.
    #[schemars(length(max = 253))]
    pub abs_secret: String,
    /// Blob endpoint, e.g. `http://azurite:10000/<account>` or a private endpoint; absent
    /// means `https://<account>.blob.<cloud's domain>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    pub endpoint: Option<String>,
}

impl AbsSource {
    /// `path` as a location.
    pub fn location(&self) -> Result<S3Path, S3PathError> {
        S3Path::parse(&self.path)
    }

    /// The endpoint, `""` counting as unset.
    pub fn endpoint(&self) -> Option<&str> {
        non_empty(self.endpoint.as_deref())
    }
}

/// A Google Cloud Storage object (coreos' `gcs` block, plus an endpoint).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GcsSource {
    /// Full path `<bucket>/<object>`. Periodic backups append `_v<revision>_<time>`.
    #[schemars(length(max = 1024), regex(pattern = r"^[^/:]+/.+$"))]
    pub path: String,
    /// Secret in this namespace with `credentials.json` (a service account key) or
    /// `access-token` (not refreshed), as in coreos. Without it, the operator's own identity
    /// (GKE workload identity) is used, and only when it was started with
    /// `--allow-ambient-credentials`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub gcp_secret: Option<String>,
    /// GCS endpoint, e.g. an emulator's `http://fake-gcs:4443`; absent means Google's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    pub endpoint: Option<String>,
}

impl GcsSource {
    /// `path` as a location.
    pub fn location(&self) -> Result<S3Path, S3PathError> {
        S3Path::parse(&self.path)
    }

    /// The endpoint, `""` counting as unset.
    pub fn endpoint(&self) -> Option<&str> {
        non_empty(self.endpoint.as_deref())
    }

    /// The credentials Secret, or `None` for the ambient identity.
    pub fn gcp_secret(&self) -> Option<&str> {
        non_empty(self.gcp_secret.as_deref())
    }
}

/// Alibaba Cloud OSS object (coreos compatibility; no backend implements it yet).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OssSource {
    /// Full path `<bucket>/<object>`.
    pub path: String,
    /// Secret with `accessKeyID` and `accessKeySecret`.
    pub oss_secret: String,
    /// OSS endpoint; coreos defaulted to `http://oss-cn-hangzhou.aliyuncs.com`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
}

/// A backup file on a PersistentVolumeClaim: backups write it from the backup operator's
/// process (on the claim mounted in its pod), restores and drills read it in their pods.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[x_kube(validation = Rule::new(
    "(has(self.persistentVolumeClaim) && self.persistentVolumeClaim != '') || self.path.startsWith('/')"
).message("local.path must be absolute unless local.persistentVolumeClaim is set"))]
#[serde(rename_all = "camelCase")]
pub struct LocalSource {
    /// Backup file path, the counterpart of `s3.path`: one-shot backups write exactly this file,
    /// periodic ones append `_v<revision>_<time>`; missing directories are created. With
    /// `persistentVolumeClaim` the path is inside that claim (mounted at
    /// `/var/lib/etcd-backup`). Without it, a backup takes an absolute path under
    /// `/var/lib/etcd-backup`, on the operator's `--local-volume-claim`, and a restore is refused
    /// (`BadSource`): restore pods read only from a named claim.
    #[schemars(length(min = 1, max = 1024))]
    pub path: String,
    /// PVC in the same namespace holding the backups. Backups run in the backup operator's
    /// process, not in pods of their own: only the claim mounted in the operator's pod (its
    /// `--local-volume-claim <namespace>/<claim>`) works, from an EtcdBackup in that claim's
    /// namespace; any other fails the run (`LocalVolumeUnavailable`). Restores (and drills)
    /// mount it read-only in their pods, so a ReadWriteOnce claim attached on another node keeps
    /// them from starting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub persistent_volume_claim: Option<String>,
}

impl LocalSource {
    /// Whether a PVC is mounted for this location.
    pub fn uses_pvc(&self) -> bool {
        non_empty(self.persistent_volume_claim.as_deref()).is_some()
    }

    /// The path inside the pod: under [`LOCAL_PVC_MOUNT_PATH`] when a PVC is used.
    pub fn pod_path(&self) -> PathBuf {
        if self.uses_pvc() {
            Path::new(LOCAL_PVC_MOUNT_PATH).join(self.path.trim_start_matches('/'))
        } else {
            PathBuf::from(&self.path)
        }
    }
}

/// `<bucket>/<key>` split into its parts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct S3Path {
    /// Bucket name (the text before the first `/`).
    pub bucket: String,
    /// Object key, which may contain further `/`.
    pub key: String,
}

/// Why an `s3.path` is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum S3PathError {
    /// No bucket before the first `/`.
    #[error("s3 path {0:?} has no bucket; expected \"<bucket>/<key>\"")]
    MissingBucket(String),
    /// A URL such as `s3://bucket/key` where coreos expects `bucket/key`.
    #[error("s3 path {0:?} must not have a scheme; expected \"<bucket>/<key>\"")]
    Scheme(String),
    /// Nothing after the bucket.
    #[error(
        "s3 path {0:?} has no object key; expected \"<bucket>/<key>\", e.g. \"mybucket/etcd.backup\""
    )]
    MissingKey(String),
}

impl S3Path {
    /// Splits a coreos `s3.path` at the first `/`.
    pub fn parse(path: &str) -> Result<S3Path, S3PathError> {
        let (bucket, key) = path.split_once('/').unwrap_or((path, ""));
        if bucket.contains(':') {
            return Err(S3PathError::Scheme(path.to_string()));
        }
        if bucket.is_empty() {
            return Err(S3PathError::MissingBucket(path.to_string()));
        }
        if key.is_empty() {
            return Err(S3PathError::MissingKey(path.to_string()));
        }
        Ok(S3Path {
            bucket: bucket.to_string(),
            key: key.to_string(),
        })
    }
}

impl fmt::Display for S3Path {
    /// `s3://bucket/key`, the form recorded in `status.lastBackup.objectKey`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s3://{}/{}", self.bucket, self.key)
    }
}

pub(crate) fn non_empty(s: Option<&str>) -> Option<&str> {
    s.filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s3_path_splits_at_the_first_slash() {
        let p = S3Path::parse("mybucket/a/b/etcd.backup").unwrap();
        assert_eq!(p.bucket, "mybucket");
        assert_eq!(p.key, "a/b/etcd.backup");
        assert_eq!(p.to_string(), "s3://mybucket/a/b/etcd.backup");
        assert!(matches!(
            S3Path::parse("s3://b/k"),
            Err(S3PathError::Scheme(_))
        ));
    }

    #[test]
    fn s3_path_errors_name_the_missing_part() {
        for bad in ["mybucket", "mybucket/", "", "s3://mybucket/k"] {
            let err = S3Path::parse(bad).unwrap_err();
            assert!(err.to_string().contains("<bucket>/<key>"), "{bad}: {err}");
        }
        assert!(matches!(
            S3Path::parse("mybucket"),
            Err(S3PathError::MissingKey(_))
        ));
        assert!(matches!(
            S3Path::parse("/key"),
            Err(S3PathError::MissingBucket(_))
        ));
    }

    #[test]
    fn storage_type_uses_coreos_spellings() {
        let names: Vec<String> = StorageType::ALL
            .iter()
            .map(|t| {
                serde_json::to_value(t)
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(names, ["S3", "ABS", "GCS", "OSS", "Local"]);
        for t in StorageType::ALL {
            assert_eq!(serde_json::to_value(t).unwrap(), t.as_str());
        }
    }

    #[test]
    fn empty_strings_count_as_unset() {
        let s3 = S3Source {
            path: "b/k".into(),
            endpoint: Some(String::new()),
            aws_secret: Some(String::new()),
            ..Default::default()
        };
        assert_eq!(s3.endpoint(), None);
        assert_eq!(s3.aws_secret(), None);
        assert!(!s3.force_path_style());
    }

    #[test]
    fn local_path_is_under_the_pvc_mount() {
        let mut l = LocalSource {
            path: "/backups/etcd.db".into(),
            persistent_volume_claim: Some("etcd-backups".into()),
        };
        assert_eq!(
            l.pod_path(),
            Path::new("/var/lib/etcd-backup/backups/etcd.db")
        );
        l.persistent_volume_claim = None;
        assert_eq!(l.pod_path(), Path::new("/backups/etcd.db"));
    }
}
