//! Validate and build: an `EtcdBackup` spec becomes a [`BackupPlan`] or an input error.
//! Pure, so every rule is unit-tested without an API server.

use std::time::Duration;

use etcd_api::storage::{AbsSource, GcsSource, LocalSource};
use etcd_api::{
    BackupDrill, DeletionPolicy, EtcdBackupSpec, S3Path, S3Source, SecretKeyRef, SpecError,
    StorageType,
};
use etcd_snapshot::{Compression, HashKv, ObjectName};

use crate::schedule::{InvalidSchedule, Trigger};

/// Stall timeout when the spec sets none: long enough for a busy member, short enough that a
/// hung stream is reported within minutes.
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a spec cannot be acted on. Reported as a condition and a Warning event; the operator
/// keeps running.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidSpec {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error(transparent)]
    Schedule(#[from] InvalidSchedule),
    #[error(
        "storageType {0} is not supported by this operator; use S3 (any S3-compatible server), GCS, ABS or Local"
    )]
    UnsupportedStorage(StorageType),
}

impl InvalidSpec {
    /// Condition and event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            InvalidSpec::UnsupportedStorage(_) => "UnsupportedStorageType",
            InvalidSpec::Schedule(_) => "InvalidSchedule",
            InvalidSpec::Spec(_) => "InvalidSpec",
        }
    }
}

/// Everything a run needs from the spec. Secrets are named, not read: they are read at each
/// run so rotation works.
#[derive(Debug, Clone)]
pub struct BackupPlan {
    pub trigger: Trigger,
    pub endpoints: Vec<String>,
    pub target: Target,
    pub client_tls_secret: Option<String>,
    pub compression: Compression,
    /// The Secret key with the age recipients to encrypt to, when encryption is on.
    pub recipients_secret: Option<SecretKeyRef>,
    pub stall_timeout: Duration,
    /// `timeoutInSecond`, a total deadline when set.
    pub deadline: Option<Duration>,
    pub max_backups: Option<u32>,
    pub deletion_policy: DeletionPolicy,
    /// `spec.drill`, when set.
    pub drill: Option<DrillPlan>,
    /// Whether to record `HashKV` with each backup (`spec.recordHashKV`).
    pub hash_kv: HashKv,
}

/// When and how to drill (`spec.drill`).
#[derive(Debug, Clone)]
pub struct DrillPlan {
    pub when: DrillWhen,
    pub spec: BackupDrill,
    /// From the drill pod's creation to its verdict.
    pub timeout: Duration,
}

#[derive(Debug, Clone)]
pub enum DrillWhen {
    /// After every Nth successful backup.
    EveryBackups(i64),
    /// The newest backup, on a cron schedule.
    Cron(Trigger),
}

/// Where the backups go.
#[derive(Debug, Clone)]
pub enum Target {
    S3 {
        source: Box<S3Source>,
        location: S3Path,
    },
    /// Google Cloud Storage: `location` is the bucket and object name of `gcs.path`.
    Gcs {
        source: Box<GcsSource>,
        location: S3Path,
    },
    /// Azure Blob Storage: `location` is the container and blob name of `abs.path`.
    Azure {
        source: Box<AbsSource>,
        location: S3Path,
    },
    /// A file on the volume mounted in the operator pod; resolved per run by
    /// [`crate::local::resolve`], since it depends on the operator's configuration.
    Local(LocalSource),
}

impl BackupPlan {
    /// One-shot backups write exactly the configured path (`s3.path` or `local.path`);
    /// scheduled ones add the coreos suffix. `base` is that path as a store key.
    pub fn object_name(&self, base: &str) -> ObjectName {
        if self.trigger.is_one_shot() {
            ObjectName::Exact(base.to_string())
        } else {
            ObjectName::Scheduled(base.to_string())
        }
    }

    /// The S3 settings, for S3 targets.
    pub fn s3(&self) -> Option<&S3Source> {
        match &self.target {
            Target::S3 { source, .. } => Some(source),
            Target::Gcs { .. } | Target::Azure { .. } | Target::Local(_) => None,
        }
    }
}

/// Validates the spec (the CEL rules too: an object stored before a rule existed still gets a
/// clear condition) and builds the plan.
pub fn build(spec: &EtcdBackupSpec) -> Result<BackupPlan, InvalidSpec> {
    spec.validate()?;
    let trigger = Trigger::parse(spec.schedule())?;
    // `validate` checked that the type's block is there and its path parses.
    let unusable = |field| SpecError::MissingStorage {
        storage_type: spec.storage_type,
        field,
    };
    let target = match spec.storage_type {
        StorageType::S3 => {
            let s3 = spec.s3.as_ref().ok_or_else(|| unusable("s3"))?;
            Target::S3 {
                location: s3.location().map_err(SpecError::from)?,
                source: Box::new(s3.clone()),
            }
        }
        StorageType::Gcs => {
            let gcs = spec.gcs.as_ref().ok_or_else(|| unusable("gcs"))?;
            Target::Gcs {
                location: gcs.location().map_err(|_| unusable("gcs"))?,
                source: Box::new(gcs.clone()),
            }
        }
        StorageType::Abs => {
            let abs = spec.abs.as_ref().ok_or_else(|| unusable("abs"))?;
            Target::Azure {
                location: abs.location().map_err(|_| unusable("abs"))?,
                source: Box::new(abs.clone()),
            }
        }
        StorageType::Local => Target::Local(spec.local.clone().ok_or_else(|| unusable("local"))?),
        other => return Err(InvalidSpec::UnsupportedStorage(other)),
    };
    Ok(BackupPlan {
        trigger,
        endpoints: spec
            .etcd_endpoints
            .iter()
            .map(|e| e.trim().to_string())
            .filter(|e| !e.is_empty())
            .collect(),
        target,
        client_tls_secret: spec.client_tls_secret.clone().filter(|s| !s.is_empty()),
        compression: match spec.compression() {
            etcd_api::Compression::None => Compression::None,
            etcd_api::Compression::Zstd => Compression::Zstd,
        },
        recipients_secret: spec
            .encryption
            .as_ref()
            .map(|e| e.recipients_secret.clone()),
        stall_timeout: spec.stall_timeout().unwrap_or(DEFAULT_STALL_TIMEOUT),
        deadline: spec.timeout(),
        max_backups: spec.max_backups(),
        deletion_policy: spec.deletion_policy(),
        drill: spec.drill.as_ref().map(drill_plan).transpose()?,
        hash_kv: match spec.record_hash_kv {
            Some(false) => HashKv::Skip,
            _ => HashKv::Take,
        },
    })
}

fn drill_plan(drill: &BackupDrill) -> Result<DrillPlan, InvalidSpec> {
    let when = match (&drill.schedule, drill.every()) {
        (Some(cron), _) => DrillWhen::Cron(Trigger::cron("spec.drill.schedule", cron)?),
        (None, every) => DrillWhen::EveryBackups(every.unwrap_or(1)),
    };
    Ok(DrillPlan {
        when,
        spec: drill.clone(),
        timeout: Duration::from_secs(drill.timeout_seconds().unsigned_abs()),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use etcd_api::{BackupPolicy, EtcdBackup};

    /// The coreos periodic example, as users write it.
    pub(crate) fn coreos_periodic() -> EtcdBackupSpec {
        serde_saphyr::from_str(
            r#"
etcdEndpoints: ["http://example-etcd-cluster-client:2379"]
storageType: S3
backupPolicy: {backupIntervalInSecond: 125, maxBackups: 4}
s3: {path: mybucket/etcd.backup, awsSecret: aws}
"#,
        )
        .unwrap()
    }

    #[test]
    fn coreos_gcs_and_abs_examples_build() {
        let gcs: EtcdBackupSpec = serde_saphyr::from_str(
            r#"
etcdEndpoints: ["http://example-etcd-cluster-client:2379"]
storageType: GCS
gcs: {path: mybucket/etcd.backup, gcpSecret: gcp}
"#,
        )
        .unwrap();
        let plan = build(&gcs).unwrap();
        assert!(matches!(&plan.target, Target::Gcs { location, .. }
            if location.bucket == "mybucket" && location.key == "etcd.backup"));
        let abs: EtcdBackupSpec = serde_saphyr::from_str(
            r#"
etcdEndpoints: ["http://example-etcd-cluster-client:2379"]
storageType: ABS
abs: {path: mycontainer/etcd.backup, absSecret: abs}
"#,
        )
        .unwrap();
        let plan = build(&abs).unwrap();
        assert!(matches!(&plan.target, Target::Azure { location, .. }
            if location.bucket == "mycontainer" && location.key == "etcd.backup"));
    }

    #[test]
    fn hash_kv_is_recorded_unless_turned_off() {
        let mut spec = coreos_periodic();
        assert_eq!(build(&spec).unwrap().hash_kv, HashKv::Take);
        spec.record_hash_kv = Some(false);
        assert_eq!(build(&spec).unwrap().hash_kv, HashKv::Skip);
    }

    #[test]
    fn coreos_periodic_example_builds() {
        let plan = build(&coreos_periodic()).unwrap();
        assert!(matches!(plan.trigger, Trigger::Interval(d) if d == Duration::from_secs(125)));
        assert!(
            matches!(&plan.target, Target::S3 { location, .. } if location.bucket == "mybucket" && location.key == "etcd.backup")
        );
        assert!(matches!(plan.object_name("k"), ObjectName::Scheduled(k) if k == "k"));
        assert_eq!(plan.max_backups, Some(4));
        assert_eq!(plan.deadline, None);
        assert_eq!(plan.stall_timeout, DEFAULT_STALL_TIMEOUT);
        assert_eq!(plan.deletion_policy, DeletionPolicy::Retain);
    }

    #[test]
    fn one_shot_writes_exactly_the_path_and_honours_the_timeout() {
        let mut spec = coreos_periodic();
        spec.backup_policy = Some(BackupPolicy {
            timeout_in_second: Some(600),
            ..Default::default()
        });
        let plan = build(&spec).unwrap();
        assert!(matches!(plan.object_name("k"), ObjectName::Exact(k) if k == "k"));
        assert_eq!(plan.deadline, Some(Duration::from_secs(600)));
    }

    #[test]
    fn local_example_builds() {
        let text = include_str!("../../../examples/etcd-backup-local-pvc.yaml");
        let doc = testbed::yaml_documents(text).unwrap().remove(1);
        let backup: EtcdBackup = serde_json::from_value(doc).unwrap();
        let plan = build(&backup.spec).unwrap();
        let Target::Local(local) = &plan.target else {
            panic!("{:?}", plan.target)
        };
        assert_eq!(local.path, "example-etcd-cluster/etcd.backup");
        assert_eq!(
            local.persistent_volume_claim.as_deref(),
            Some("etcd-backups")
        );
        assert!(plan.s3().is_none());
        assert_eq!(plan.deletion_policy, DeletionPolicy::Delete);
    }

    #[test]
    fn bad_input_is_an_error_with_a_reason() {
        let mut spec = coreos_periodic();
        spec.storage_type = StorageType::Oss;
        spec.oss = Some(Default::default());
        let err = build(&spec).unwrap_err();
        assert_eq!(err.reason(), "UnsupportedStorageType");
        assert!(err.to_string().contains("OSS"), "{err}");

        let mut spec = coreos_periodic();
        spec.storage_type = StorageType::Gcs;
        spec.gcs = Some(etcd_api::storage::GcsSource {
            path: "no-object".into(),
            ..Default::default()
        });
        let err = build(&spec).unwrap_err();
        assert_eq!(err.reason(), "InvalidSpec");
        assert!(err.to_string().contains("spec.gcs.path"), "{err}");

        let mut spec = coreos_periodic();
        spec.s3.as_mut().unwrap().path = "mybucket".into();
        assert_eq!(build(&spec).unwrap_err().reason(), "InvalidSpec");

        let mut spec = coreos_periodic();
        spec.backup_policy
            .as_mut()
            .unwrap()
            .backup_interval_in_second = Some(0);
        spec.backup_policy.as_mut().unwrap().schedule = Some("whenever".into());
        assert_eq!(build(&spec).unwrap_err().reason(), "InvalidSchedule");

        let mut spec = coreos_periodic();
        spec.etcd_endpoints = vec![" ".into()];
        assert_eq!(build(&spec).unwrap_err().reason(), "InvalidSpec");
    }

    #[test]
    fn unknown_storage_type_fails_to_parse_instead_of_crashing() {
        // coreos called Fatalf; here the object fails to deserialize, which the controller's
        // DeserializeGuard turns into a condition.
        let err = serde_json::from_value::<EtcdBackup>(serde_json::json!({
            "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdBackup",
            "metadata": {"name": "x"},
            "spec": {"etcdEndpoints": ["http://e:2379"], "storageType": "Floppy"}
        }))
        .unwrap_err();
        assert!(err.to_string().contains("Floppy"), "{err}");
    }
}
