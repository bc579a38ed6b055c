//! One backup run: snapshot to S3 through etcd-snapshot's verified streaming path, then
//! retention. Free of Kubernetes, so it is tested against real etcd and S3.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use backup_storage::{Location, Precondition, StorageError, Store, UploadOptions};
use etcd_snapshot::{EtcdConnection, ObjectName, Progress, SaveOptions, SaveReport};
use operator_runtime::tenant_credentials::CredentialsError;

use crate::local::{self, LocalVolume, LocalVolumeError};
use crate::retention::{self, OWNER_METADATA_KEY, recorded_owner};
use crate::secrets::{Resolved, SecretError};
use crate::validate::{BackupPlan, Target};

/// Multipart uploads under the object's prefix left unfinished this long (a killed operator)
/// are removed before the next run. Long, so a slow backup of another EtcdBackup sharing the
/// prefix is never hit.
const ABANDONED_UPLOAD_AGE: Duration = Duration::from_secs(24 * 3600);

/// A verified, committed backup, and what retention did afterwards.
#[derive(Debug)]
pub struct Outcome {
    pub report: SaveReport,
    /// Deleted keys, or why pruning failed. A failed prune never fails the backup.
    pub pruned: Result<Vec<String>, String>,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Secret(#[from] SecretError),
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error(transparent)]
    Snapshot(#[from] etcd_snapshot::Error),
    #[error(transparent)]
    LocalVolume(#[from] LocalVolumeError),
    #[error(
        "refusing to overwrite {url}: it exists and was not written by this EtcdBackup ({why}); \
         choose another path or remove that object"
    )]
    NotOwned { url: String, why: String },
}

impl RunError {
    /// Short machine-readable cause: status `lastFailure.reason`, event reason suffix and the
    /// `reason` label of the failure metric.
    pub fn reason(&self) -> &'static str {
        use etcd_snapshot::Error as E;
        match self {
            RunError::Secret(SecretError::Missing(_)) => "SecretNotFound",
            RunError::Secret(SecretError::Credentials(CredentialsError::NoCredentials(_))) => {
                "NoCredentials"
            }
            RunError::Secret(SecretError::Credentials(CredentialsError::CredentialSourcing {
                ..
            })) => "CredentialSourcingRefused",
            RunError::Secret(SecretError::Recipients { .. })
            | RunError::Secret(SecretError::SseCustomerKey { .. }) => "EncryptionKeysInvalid",
            RunError::Secret(_) => "SecretInvalid",
            RunError::NotOwned { .. } => "ObjectNotOwned",
            RunError::Storage(e) | RunError::Snapshot(E::Storage(e)) => storage_reason(e),
            RunError::Snapshot(e) => match e {
                E::NoEndpoints | E::Unreachable { .. } | E::NoMemberAnswered(_) => {
                    "EtcdUnreachable"
                }
                E::Tls { .. } | E::TlsMaterial(_) => "EtcdTLSFailed",
                E::Stalled { .. } => "SnapshotStalled",
                E::DeadlineExceeded { .. } => "Timeout",
                e if e.is_integrity() => "SnapshotCorrupt",
                _ => "SnapshotFailed",
            },
            RunError::LocalVolume(_) => "LocalVolumeUnavailable",
        }
    }

    /// Whether another attempt of the same run may succeed, as a Job's retries would: etcd
    /// unreachable or no member answering (a leader change, a member restarting after an
    /// upgrade), a snapshot stream cut or stalled, S3 unreachable, a Secret the API server did
    /// not hand over. Never what fails again the same way: data that failed its checks,
    /// credentials or keys refused, a missing bucket or Secret, a bad spec, the run's deadline.
    pub fn is_transient(&self) -> bool {
        use etcd_snapshot::Error as E;
        match self {
            RunError::Secret(SecretError::Read { transient, .. }) => *transient,
            RunError::Storage(e) | RunError::Snapshot(E::Storage(e)) => {
                matches!(e, StorageError::Unreachable { .. })
            }
            RunError::Snapshot(e) => matches!(
                e,
                E::Unreachable { .. }
                    | E::NoMemberAnswered(_)
                    | E::Stream { .. }
                    | E::Stalled { .. }
            ),
            _ => false,
        }
    }

    /// Whether this failure has a cause that only a person can fix (the storage Secret, keys S3
    /// refuses or does not find, no such bucket, the operator's volume), not one that may pass
    /// (S3 or the API server unreachable). Bounds the wait of the Delete finalizer.
    pub fn cannot_succeed_by_waiting(&self) -> bool {
        match self {
            RunError::Secret(SecretError::Read { .. }) => false,
            RunError::Secret(_) | RunError::LocalVolume(_) => true,
            RunError::Storage(e) => matches!(
                e,
                StorageError::NoCredentials { .. }
                    | StorageError::Credentials { .. }
                    | StorageError::AccessDenied { .. }
                    | StorageError::NoSuchBucket { .. }
            ),
            _ => false,
        }
    }
}

fn storage_reason(e: &StorageError) -> &'static str {
    match e {
        StorageError::NoSuchBucket { .. } => "BucketNotFound",
        StorageError::AccessDenied { .. } => "AccessDenied",
        // The reasons kept their S3 names from before the other stores; they mean any store.
        StorageError::Credentials { .. } | StorageError::NoCredentials { .. } => {
            "S3CredentialsRejected"
        }
        StorageError::Unreachable { .. } | StorageError::Tls { .. } => "S3Unreachable",
        _ => "UploadFailed",
    }
}

/// Runs one backup for `plan`, writing objects tagged with `owner` (the EtcdBackup's UID).
/// Nothing is visible in S3 unless the snapshot was verified; a failure aborts the upload.
/// Where `plan` stores the backups of an EtcdBackup in `namespace`: its S3 path, or its file on
/// the operator's volume.
pub fn location(
    plan: &BackupPlan,
    namespace: &str,
    volume: Option<&LocalVolume>,
) -> Result<Location, RunError> {
    Ok(match &plan.target {
        Target::S3 { location, .. } => Location::S3 {
            bucket: location.bucket.clone(),
            key: location.key.clone(),
        },
        Target::Gcs { location, .. } => Location::Gcs {
            bucket: location.bucket.clone(),
            key: location.key.clone(),
        },
        Target::Azure { location, .. } => Location::Azure {
            container: location.bucket.clone(),
            key: location.key.clone(),
        },
        Target::Local(source) => Location::Local {
            path: local::resolve(source, namespace, volume)?,
        },
    })
}

/// `drilled`: the location of the newest backup a drill proved, which retention keeps.
pub async fn run_backup(
    plan: &BackupPlan,
    location: &Location,
    resolved: Resolved,
    owner: &str,
    drilled: Option<&str>,
) -> Result<Outcome, RunError> {
    let base = &location.key();
    // `timeoutInSecond` bounds the whole backup, the S3 calls before the snapshot too (a hung
    // server would otherwise hold the run for the SDK's attempts, 10 minutes each).
    let (store, report) = match plan.deadline {
        None => save(plan, location, base, resolved, owner, None).await?,
        Some(deadline) => {
            let received = Arc::new(AtomicU64::new(0));
            let run = save(
                plan,
                location,
                base,
                resolved,
                owner,
                Some(received.clone()),
            );
            match tokio::time::timeout(deadline, run).await {
                Ok(saved) => saved?,
                // Dropping the run drops its upload, which aborts it.
                Err(_) => {
                    return Err(RunError::Snapshot(etcd_snapshot::Error::DeadlineExceeded {
                        seconds: deadline.as_secs(),
                        bytes: received.load(Ordering::Relaxed),
                    }));
                }
            }
        }
    };

    let pruned = match plan.max_backups {
        Some(keep) if !plan.trigger.is_one_shot() => {
            retention::prune(&store, base, owner, keep, &report.key, drilled)
                .await
                .map_err(|e| e.to_string())
        }
        _ => Ok(Vec::new()),
    };
    Ok(Outcome { report, pruned })
}

/// Opens the store, removes this EtcdBackup's abandoned uploads, checks the object may be
/// written, and saves the snapshot. `received` follows the bytes streamed, for a deadline's
/// message.
async fn save(
    plan: &BackupPlan,
    location: &Location,
    base: &str,
    resolved: Resolved,
    owner: &str,
    received: Option<Arc<AtomicU64>>,
) -> Result<(Store, SaveReport), RunError> {
    let store = Store::open(location, &resolved.storage).await?;
    // Only uploads this EtcdBackup could have started: its own key, scheduled names and
    // segments of its continuous archive.
    let owned = |key: &str| {
        etcd_snapshot::naming::is_backup_of(base, key)
            || etcd_snapshot::changes::parse_segment_key(base, key).is_some()
    };
    match store
        .clean_incomplete(base, ABANDONED_UPLOAD_AGE, &owned)
        .await
    {
        Ok(0) => {}
        Ok(n) => {
            tracing::info!(removed = n, location = %store.location(base), "removed abandoned multipart uploads")
        }
        Err(e) => {
            tracing::warn!(error = %e, location = %store.location(base), "could not list abandoned uploads")
        }
    }

    let name = plan.object_name(base);
    let precondition = match &name {
        ObjectName::Exact(key) => refuse_foreign_object(&store, key, owner).await?,
        // A new name (revision and time): `save` itself commits it only if nothing is there
        // (another EtcdBackup with the same path, the same second), which stays.
        ObjectName::Scheduled(_) => None,
    };
    let mut connection = EtcdConnection::new(plan.endpoints.clone());
    connection.tls = resolved.tls;
    let mut options = SaveOptions::new(name);
    options.compression = plan.compression;
    options.recipients = resolved.recipients;
    options.hash_kv = plan.hash_kv;
    options.stall_timeout = plan.stall_timeout;
    options.deadline = plan.deadline;
    options.upload = UploadOptions {
        precondition,
        ..UploadOptions::default()
    };
    options
        .upload
        .metadata
        .insert(OWNER_METADATA_KEY.into(), owner.into());
    if let Some(received) = received {
        options.progress = Some(Arc::new(move |p: Progress| {
            received.store(p.received, Ordering::Relaxed)
        }));
    }
    match etcd_snapshot::save(&connection, &store, &options).await {
        Err(etcd_snapshot::Error::Storage(StorageError::PreconditionFailed { url })) => {
            Err(RunError::NotOwned {
                url,
                why: "another writer put an object there before the commit".into(),
            })
        }
        Ok(report) => Ok((store, report)),
        Err(e) => Err(e.into()),
    }
}

/// The `Delete` deletion policy: removes what this EtcdBackup wrote.
/// A one-shot writes exactly its path: that path may hold a backup this EtcdBackup wrote
/// before (rewritten), or nothing, but never another tenant's or tool's object, which a
/// one-shot naming it must not be able to replace. The owner is the one recorded on the object
/// (`recorded_owner`). Returns the condition for the commit, so that a writer racing between
/// this check and the commit is refused too, by servers that implement conditional writes.
async fn refuse_foreign_object(
    store: &Store,
    key: &str,
    owner: &str,
) -> Result<Option<Precondition>, RunError> {
    let Some(object) = store.head(key).await? else {
        return Ok(Some(Precondition::Absent));
    };
    let url = store.location(key).to_string();
    match recorded_owner(store, &object).await? {
        Some(recorded) if recorded == owner => Ok(object.etag.map(Precondition::Unchanged)),
        Some(other) => Err(RunError::NotOwned {
            url,
            why: format!("EtcdBackup UID {other} wrote it"),
        }),
        None => Err(RunError::NotOwned {
            url,
            why: "neither the object nor a manifest written for it names an EtcdBackup".into(),
        }),
    }
}

pub async fn delete_backups(
    location: &Location,
    storage: &backup_storage::StoreOptions,
    owner: &str,
) -> Result<Vec<String>, RunError> {
    let store = Store::open(location, storage).await?;
    let base = location.key();
    // Both naming styles: the schedule may have changed since the objects were written.
    let mut deleted = retention::delete_owned(&store, &base, false, owner).await?;
    deleted.extend(retention::delete_owned(&store, &base, true, owner).await?);
    Ok(deleted)
}
