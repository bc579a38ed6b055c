//! The backup data path: the xbstream is parsed, compressed, encrypted, hashed and uploaded as
//! it flows.
//! Nothing becomes visible until [`Ingest::commit`], which the caller reaches only when the
//! producer reported success; every other path aborts the upload.

use std::time::Instant;

use backup_storage::encryption::{Encryption, Recipients};
use backup_storage::layers::LayerEncoder;
use backup_storage::stored_checksum::{ChecksumKind, StoredChecksum, StoredHasher};
use backup_storage::{Store, Upload, UploadOptions};
use chrono::Utc;
use sha2::{Digest, Sha256};

use crate::chain::{self, Base, Taken};
use crate::compress::Compression;
use crate::lineage::Lineage;
use crate::manifest::{FORMAT, FORMAT_INCREMENTAL, IncrementalOf, Manifest, manifest_key};
use crate::metadata::BackupMetadata;
use crate::profile::Family;
use crate::xbstream::{Parser, StreamSummary};
use crate::{Error, Result};

/// Where a backup goes: the store, the key, and how the stream is written there.
#[derive(Clone, Copy)]
pub struct Destination<'a> {
    pub store: &'a Store,
    pub key: &'a str,
    pub options: &'a IngestOptions,
}

#[derive(Debug, Clone)]
pub struct IngestOptions {
    pub compression: Compression,
    pub zstd_level: i32,
    pub zstd_threads: u32,
    /// Encrypt (after compression) to these age recipients.
    pub recipients: Option<Recipients>,
    pub upload: UploadOptions,
}

impl Default for IngestOptions {
    fn default() -> Self {
        IngestOptions {
            compression: Compression::None,
            zstd_level: 3,
            zstd_threads: 2,
            recipients: None,
            upload: UploadOptions::default(),
        }
    }
}

pub struct Ingest {
    parser: Parser,
    encoder: LayerEncoder,
    /// The stored bytes' checksum: sha256, or CRC32C for an encrypted backup (see
    /// `backup_storage::stored_checksum`).
    stored: StoredHasher,
    /// The plaintext's sha256, for encrypted backups only: there the stored hash says nothing
    /// about the stream a restore extracts.
    plain_sha: Option<Sha256>,
    upload: Upload,
    compression: Compression,
    encryption: Option<Encryption>,
    started: Instant,
    start_time: chrono::DateTime<Utc>,
}

/// Where a backup comes from, recorded in its manifest.
#[derive(Debug, Clone)]
pub struct Origin {
    /// `local`, or `serve HOST:PORT`.
    pub source: String,
    /// The source data dir's lineage, when known.
    pub lineage: Option<Lineage>,
    /// Set when the source took an incremental on this base.
    pub base: Option<Base>,
}

impl Origin {
    pub fn full(source: impl Into<String>, lineage: Option<Lineage>) -> Origin {
        Origin {
            source: source.into(),
            lineage,
            base: None,
        }
    }

    fn taken(&self) -> Taken {
        match &self.base {
            Some(base) => Taken::Incremental {
                from_lsn: base.to_lsn,
            },
            None => Taken::Full(None),
        }
    }
}

/// A stream that parsed cleanly, fully uploaded but not yet committed.
pub struct Finished {
    upload: Upload,
    pub summary: StreamSummary,
    pub metadata: BackupMetadata,
    stored: StoredChecksum,
    plain_sha: Option<String>,
    compression: Compression,
    encryption: Option<Encryption>,
    started: Instant,
    start_time: chrono::DateTime<Utc>,
}

impl Ingest {
    pub async fn start(store: &Store, key: &str, options: &IngestOptions) -> Result<Ingest> {
        let encoder = LayerEncoder::new(
            options.compression,
            options.zstd_level,
            options.zstd_threads,
            options.recipients.as_ref(),
        )?;
        let upload = store.upload(key, options.upload.clone()).await?;
        Ok(Ingest {
            parser: Parser::new(),
            encoder,
            stored: StoredHasher::new(ChecksumKind::for_new_object(options.recipients.is_some())),
            plain_sha: options.recipients.is_some().then(Sha256::new),
            upload,
            compression: options.compression,
            encryption: options.recipients.as_ref().map(Encryption::age),
            started: Instant::now(),
            start_time: Utc::now(),
        })
    }

    /// On error the caller must [`Ingest::abort`] (a failed storage write has aborted already).
    pub async fn write(&mut self, data: &[u8]) -> Result<()> {
        self.parser.feed(data)?;
        if let Some(plain) = self.plain_sha.as_mut() {
            plain.update(data);
        }
        let out = self.encoder.encode(data)?;
        if !out.is_empty() {
            self.stored.update(out);
            self.upload.write(out).await?;
        }
        Ok(())
    }

    pub fn stream_position(&self) -> u64 {
        self.parser.position()
    }

    /// Ends the stream: it must have ended cleanly, with the tool's final metadata files.
    /// On error the upload is aborted.
    pub async fn finish(self) -> Result<Finished> {
        let Ingest {
            parser,
            encoder,
            mut stored,
            plain_sha,
            mut upload,
            compression,
            encryption,
            started,
            start_time,
        } = self;
        let checked = (|| {
            let summary = parser.finish()?;
            let missing = BackupMetadata::missing_final_files(&summary.metadata);
            if !missing.is_empty() {
                return Err(Error::Incomplete(format!(
                    "the tool's final files {} are missing",
                    missing.join(", ")
                )));
            }
            Ok(summary)
        })();
        let summary = match checked {
            Ok(s) => s,
            Err(e) => {
                abort(upload).await;
                return Err(e);
            }
        };
        let tail = match encoder.finish() {
            Ok(t) => t,
            Err(e) => {
                abort(upload).await;
                return Err(e.into());
            }
        };
        if !tail.is_empty() {
            stored.update(&tail);
            upload.write(&tail).await?;
        }
        Ok(Finished {
            upload,
            metadata: BackupMetadata::from_files(&summary.metadata),
            summary,
            stored: stored.finish(),
            plain_sha: plain_sha.map(|s| hex::encode(s.finalize())),
            compression,
            encryption,
            started,
            start_time,
        })
    }

    pub async fn abort(self) {
        abort(self.upload).await;
    }
}

/// Before an incremental is committed: it comes from its base's data dir, continues its base's
/// GTIDs, can name its base beside itself, and the base is still there (a prune running at the
/// same time could have deleted it while this backup ran).
async fn check_base(
    store: &Store,
    key: &str,
    origin: &Origin,
    metadata: &BackupMetadata,
) -> Result<()> {
    let Some(base) = &origin.base else {
        return Ok(());
    };
    if origin.lineage.as_ref() != Some(&base.lineage) {
        return Err(Error::Incremental(format!(
            "the source's data dir lineage {:?} is not the base's {}",
            origin.lineage.as_ref().map(|l| l.to_string()),
            base.lineage
        )));
    }
    chain::gtid_continues(
        base.gtid.as_deref(),
        metadata.binlog.as_ref().and_then(|b| b.gtid.as_deref()),
    )
    .map_err(Error::NotContinuing)?;
    if IncrementalOf::name_beside(key, &base.key).is_none() {
        return Err(Error::Incremental(format!(
            "the base {} is not beside {key}",
            base.key
        )));
    }
    for needed in [base.key.clone(), manifest_key(&base.key)] {
        let gone = match store.head(&needed).await {
            Ok(Some(_)) => continue,
            Ok(None) => format!("its base {needed} was deleted while it ran"),
            Err(e) => format!("cannot check its base {needed}: {e}"),
        };
        return Err(Error::Incremental(gone));
    }
    Ok(())
}

async fn abort(upload: Upload) {
    if let Err(e) = upload.abort().await {
        tracing::warn!("could not abort the upload (it stays invisible; prune cleans it): {e}");
    }
}

impl Finished {
    pub fn stored_bytes(&self) -> u64 {
        self.upload.bytes_written()
    }

    /// Commits the object, then writes its manifest beside it. If the manifest cannot be
    /// written, the object stays (its bytes are complete) but the command fails with
    /// [`Error::ManifestNotWritten`]: it must never look like a finished backup. A stream that
    /// is not what was taken (a full backup for an incremental, another start LSN) is aborted.
    pub async fn commit(
        self,
        store: &Store,
        key: &str,
        family: Family,
        origin: &Origin,
    ) -> Result<Manifest> {
        let checked = match chain::check_stream(&origin.taken(), &self.metadata) {
            Ok(()) => check_base(store, key, origin, &self.metadata).await,
            Err(e) => Err(Error::Incremental(e)),
        };
        if let Err(e) = checked {
            abort(self.upload).await;
            return Err(e);
        }
        let info = self.upload.commit().await?;
        let manifest = Manifest {
            format: if origin.base.is_some() {
                FORMAT_INCREMENTAL
            } else {
                FORMAT
            }
            .into(),
            stored_bytes: info.size,
            stored_sha256: self.stored.sha256(),
            stored_crc32c: self.stored.crc32c(),
            stored_etag: info.etag.clone(),
            compression: self.compression,
            encryption: self.encryption,
            stream_bytes: self.summary.stream_bytes,
            stream_sha256: self.plain_sha,
            payload_bytes: self.summary.payload_bytes,
            file_count: self.summary.files,
            tool_family: family,
            backup: self.metadata,
            source: origin.source.clone(),
            lineage: origin.lineage.as_ref().map(|l| l.to_string()),
            incremental: origin.base.as_ref().map(|b| IncrementalOf {
                base: IncrementalOf::name_beside(key, &b.key).unwrap_or_default(),
                base_to_lsn: b.to_lsn,
            }),
            start_time: self.start_time,
            completion_time: Utc::now(),
            duration_seconds: self.started.elapsed().as_secs_f64(),
            runner: format!("mysql-backup {}", env!("CARGO_PKG_VERSION")),
        };
        let manifest_key = manifest_key(key);
        if let Err(e) = store
            .put_small(&manifest_key, manifest.to_json().into(), "application/json")
            .await
        {
            // A manifest from an earlier backup under the same key would describe other bytes;
            // remove it if we can (best effort: the store just failed us once).
            if let Err(d) = store.delete(&manifest_key).await {
                tracing::warn!("could not remove a manifest left under {manifest_key}: {d}");
            }
            return Err(Error::ManifestNotWritten {
                url: store.location(key).to_string(),
                manifest: store.location(&manifest_key).to_string(),
                detail: e.to_string(),
            });
        }
        Ok(manifest)
    }

    pub async fn abort(self) {
        abort(self.upload).await;
    }
}
