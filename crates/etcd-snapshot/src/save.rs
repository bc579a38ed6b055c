//! Snapshot → (zstd) → (age) → storage, verified while streaming, committed only when etcd's trailer
//! matches.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use backup_storage::encryption::{Encryption, Recipients};
use backup_storage::layers::LayerEncoder;
use backup_storage::stored_checksum::{ChecksumKind, StoredChecksum, StoredHasher};
use backup_storage::{Precondition, Store, Upload, UploadOptions};
use chrono::Utc;

use crate::contents::{self, HashKv};
use crate::manifest::{FORMAT, object_metadata};
use crate::member::{Member, classify};
use crate::naming::scheduled_name;
use crate::{
    Compression, Error, EtcdConnection, Manifest, Result, TrailerVerifier, manifest_key,
    select_member,
};

/// zstd level 3, single-threaded on purpose: zstd's worker threads buffer whole jobs (several
/// MiB each), and level 3 on one core outruns most uplinks.
const ZSTD_LEVEL: i32 = 3;

/// How long the member may take for the key count and HashKV after the snapshot (HashKV reads
/// its whole database).
const CONTENTS_TIMEOUT: Duration = Duration::from_secs(300);

/// Bytes so far, for progress bars and logs.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub received: u64,
    /// The member's database size before the snapshot (an estimate of the total).
    pub expected: u64,
    pub stored: u64,
}

/// Which key the backup gets.
#[derive(Debug, Clone)]
pub enum ObjectName {
    /// Exactly this key (coreos one-shot backups write exactly `s3.path`).
    Exact(String),
    /// `<base>_v<revision>_<YYYY-MM-DD-HH:MM:SS>`, as coreos scheduled backups.
    Scheduled(String),
}

#[derive(Clone)]
pub struct SaveOptions {
    pub name: ObjectName,
    pub compression: Compression,
    /// Encrypt (after compression) to these age recipients.
    pub recipients: Option<Recipients>,
    /// Whether the manifest's recorded contents (for drills) include `HashKV`, which reads the
    /// member's whole database; the key count is always recorded.
    pub hash_kv: HashKv,
    /// Abort when etcd sends nothing for this long. Unlike a fixed total deadline, this does
    /// not fail large snapshots that are merely slow.
    pub stall_timeout: Duration,
    /// Optional total deadline (`backupPolicy.timeoutInSecond`).
    pub deadline: Option<Duration>,
    pub upload: UploadOptions,
    pub progress: Option<Arc<dyn Fn(Progress) + Send + Sync>>,
}

impl SaveOptions {
    pub fn new(name: ObjectName) -> Self {
        SaveOptions {
            name,
            compression: Compression::None,
            recipients: None,
            hash_kv: HashKv::Take,
            stall_timeout: Duration::from_secs(60),
            deadline: None,
            upload: UploadOptions::default(),
            progress: None,
        }
    }
}

/// A committed, verified backup.
#[derive(Debug, Clone)]
pub struct SaveReport {
    pub key: String,
    /// `s3://bucket/key` or `file:///path`.
    pub url: String,
    pub manifest: Manifest,
}

/// Takes a snapshot of the most up-to-date member and stores it under the chosen name.
/// On any failure the upload is aborted and nothing is visible. `options.deadline` bounds the
/// whole of it: member selection, the stream, every part, the commit and the manifest (a hung
/// S3 server must not hold a backup for its retries' hour).
pub async fn save(
    connection: &EtcdConnection,
    store: &Store,
    options: &SaveOptions,
) -> Result<SaveReport> {
    let started = Instant::now();
    let received = AtomicU64::new(0);
    let work = save_within(connection, store, options, started, &received);
    let Some(deadline) = options.deadline else {
        return work.await;
    };
    match tokio::time::timeout(deadline, work).await {
        Ok(result) => result,
        // Dropping the work drops its upload, which aborts it.
        Err(_) => Err(Error::DeadlineExceeded {
            seconds: deadline.as_secs(),
            bytes: received.load(Ordering::Relaxed),
        }),
    }
}

async fn save_within(
    connection: &EtcdConnection,
    store: &Store,
    options: &SaveOptions,
    started: Instant,
    received: &AtomicU64,
) -> Result<SaveReport> {
    let start_time = Utc::now();
    let mut member = select_member(connection).await?;
    let key = match &options.name {
        ObjectName::Exact(key) => key.clone(),
        ObjectName::Scheduled(base) => scheduled_name(base, member.revision, start_time),
    };
    let url = store.location(&key).to_string();
    tracing::info!(endpoint = %member.endpoint, revision = member.revision, %url, "snapshot started");

    let mut upload_options = options.upload.clone();
    upload_options.content_type = Some("application/octet-stream".into());
    if matches!(options.name, ObjectName::Scheduled(_)) {
        // A scheduled name is new (revision and second): an object already under it (another
        // writer's, or a snapshot taken in the same second at the same revision) fails this
        // commit rather than being replaced, which would leave this object beside the other's
        // manifest. Checked before the commit, and by the server where it has conditional
        // writes.
        upload_options.precondition = Some(Precondition::Absent);
    }
    upload_options.metadata.extend(object_metadata(
        member.revision,
        &member.version,
        &member.cluster_id_hex(),
        &member.member_id_hex(),
        options.compression,
        options.recipients.is_some(),
        start_time,
    ));
    let mut upload = store.upload(&key, upload_options).await?;
    let streamed = match stream(&mut member, &mut upload, options, started, received).await {
        Ok(streamed) => streamed,
        Err(e) => {
            if let Err(abort) = upload.abort().await {
                tracing::warn!(%url, error = %abort, "abort after a failed snapshot also failed");
            }
            return Err(e);
        }
    };
    // Asked of the same member after the stream ended, at the revision it reported before:
    // the snapshot holds that revision. Not having them only means no drill can compare.
    // Bounded: a member that stopped answering must not hold the backup.
    let asked = contents::take(
        &mut member.client,
        &member.endpoint,
        member.revision,
        options.hash_kv,
    );
    let contents = match tokio::time::timeout(CONTENTS_TIMEOUT.max(options.stall_timeout), asked)
        .await
    {
        Ok(Ok(contents)) => Some(contents),
        Ok(Err(e)) => {
            tracing::warn!(%url, error = %e, "could not record the key count and HashKV for drills");
            None
        }
        Err(_) => {
            tracing::warn!(%url, "the member did not give the key count and HashKV in time; no drill can compare this backup");
            None
        }
    };
    let stored = upload.commit().await?;

    let manifest = Manifest {
        format: FORMAT.into(),
        stored_bytes: stored.size,
        stored_sha256: streamed.stored.sha256(),
        stored_crc32c: streamed.stored.crc32c(),
        stored_etag: stored.etag.clone(),
        compression: options.compression,
        encryption: options.recipients.as_ref().map(Encryption::age),
        db_bytes: streamed.db_bytes,
        db_sha256: streamed.db_sha256,
        etcd_revision: member.revision,
        etcd_version: member.version.clone(),
        contents,
        cluster_id: member.cluster_id_hex(),
        member_id: member.member_id_hex(),
        endpoint: member.endpoint.clone(),
        start_time,
        completion_time: Utc::now(),
        duration_seconds: started.elapsed().as_secs_f64(),
        tool: concat!("etcd-backup ", env!("CARGO_PKG_VERSION")).into(),
        labels: options.upload.metadata.clone(),
    };
    store
        .put_small(
            &manifest_key(&key),
            manifest.to_json().into(),
            "application/json",
        )
        .await?;
    tracing::info!(%url, bytes = manifest.stored_bytes, checksum = %manifest.stored_checksum(), "snapshot stored and verified");
    Ok(SaveReport { key, url, manifest })
}

struct Streamed {
    db_bytes: u64,
    db_sha256: String,
    stored: StoredChecksum,
}

async fn stream(
    member: &mut Member,
    upload: &mut Upload,
    options: &SaveOptions,
    started: Instant,
    received_total: &AtomicU64,
) -> Result<Streamed> {
    let endpoint = member.endpoint.clone();
    let mut verifier = TrailerVerifier::new();
    let mut encoder = LayerEncoder::new(
        options.compression,
        ZSTD_LEVEL,
        1,
        options.recipients.as_ref(),
    )?;
    // Neither compressed nor encrypted, the stored bytes are the stream, whose hash the
    // verifier already computes.
    let encrypted = options.recipients.is_some();
    let transformed = options.compression != Compression::None || encrypted;
    let mut stored_hash =
        transformed.then(|| StoredHasher::new(ChecksumKind::for_new_object(encrypted)));
    let expected = member.db_size.max(0) as u64;

    // Waits for the next step of the stream, bounded by the stall timeout and the deadline.
    let wait = |received: u64| -> Result<Duration> {
        let Some(deadline) = options.deadline else {
            return Ok(options.stall_timeout);
        };
        let left = deadline.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Err(Error::DeadlineExceeded {
                seconds: deadline.as_secs(),
                bytes: received,
            });
        }
        Ok(left.min(options.stall_timeout))
    };
    let timed_out = |received: u64| match options.deadline {
        Some(d) if started.elapsed() >= d => Error::DeadlineExceeded {
            seconds: d.as_secs(),
            bytes: received,
        },
        _ => Error::Stalled {
            seconds: options.stall_timeout.as_secs(),
            bytes: received,
        },
    };

    let mut snapshot = match tokio::time::timeout(wait(0)?, member.client.snapshot()).await {
        Err(_) => return Err(timed_out(0)),
        Ok(result) => result.map_err(|e| classify(&endpoint, &e))?,
    };
    loop {
        let received = verifier.total();
        let message = match tokio::time::timeout(wait(received)?, snapshot.message()).await {
            Err(_) => return Err(timed_out(received)),
            Ok(Err(e)) => {
                return Err(Error::Stream {
                    endpoint: endpoint.clone(),
                    bytes: received,
                    message: classify(&endpoint, &e).to_string(),
                });
            }
            // Read to the end of the stream: the trailer comes after `remaining_bytes == 0`.
            Ok(Ok(None)) => break,
            Ok(Ok(Some(message))) => message,
        };
        let blob = message.blob();
        verifier.update(blob);
        received_total.store(verifier.total(), Ordering::Relaxed);
        let out = encoder.encode(blob)?;
        if !out.is_empty() {
            if let Some(hash) = stored_hash.as_mut() {
                hash.update(out);
            }
            upload.write(out).await?;
        }
        if let Some(progress) = &options.progress {
            progress(Progress {
                received: verifier.total(),
                expected,
                stored: upload.bytes_written(),
            });
        }
    }
    let verified = verifier.finish()?;
    let tail = encoder.finish()?;
    if !tail.is_empty() {
        if let Some(hash) = stored_hash.as_mut() {
            hash.update(&tail);
        }
        upload.write(&tail).await?;
    }
    Ok(Streamed {
        db_bytes: verified.db_bytes,
        stored: match stored_hash {
            Some(hash) => hash.finish(),
            None => StoredChecksum {
                kind: ChecksumKind::Sha256,
                hex: verified.stream_sha256,
            },
        },
        db_sha256: verified.db_sha256,
    })
}
