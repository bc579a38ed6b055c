//! One segment being written: records → (zstd) → (age) → an upload that becomes visible only
//! when the segment closes, then its manifest. Memory stays at the upload's parts in flight
//! and one record, whatever the write rate.

use backup_storage::encryption::{Encryption, Recipients};
use backup_storage::layers::LayerEncoder;
use backup_storage::stored_checksum::{ChecksumKind, StoredChecksum, StoredHasher};
use backup_storage::{Precondition, Store, Upload, UploadOptions};
use chrono::{DateTime, TimeZone, Utc};

use super::record::{Change, RecordEncoder};
use super::segment::{SEGMENT_FORMAT, SegmentManifest, segment_key};
use crate::{Compression, Result, manifest_key};

/// Same level as snapshots: fast on one core.
const ZSTD_LEVEL: i32 = 3;

/// How segments are stored: the same layers as the snapshots beside them.
#[derive(Clone)]
pub struct SegmentLayers {
    pub compression: Compression,
    pub recipients: Option<Recipients>,
    pub upload: UploadOptions,
}

pub struct SegmentWriter {
    key: String,
    cluster_id: String,
    upload: Upload,
    records: RecordEncoder,
    layers: LayerEncoder,
    stored: Option<StoredHasher>,
    compression: Compression,
    encryption: Option<Encryption>,
    labels: std::collections::BTreeMap<String, String>,
    plaintext_bytes: u64,
    first_time: Option<DateTime<Utc>>,
    last_time: Option<DateTime<Utc>>,
    late_through: Option<i64>,
}

impl SegmentWriter {
    /// Starts the segment of `cluster_id` that begins at `first_revision`. Its key must be
    /// free: a second archiver of the same cluster (two pods in a rollout) fails its commit on
    /// servers that honour conditional writes instead of replacing this one's segment.
    pub async fn start(
        store: &Store,
        base: &str,
        cluster_id: &str,
        first_revision: i64,
        layers: &SegmentLayers,
    ) -> Result<SegmentWriter> {
        let key = segment_key(base, cluster_id, first_revision);
        let mut options = layers.upload.clone();
        options.content_type = Some("application/octet-stream".into());
        options.precondition = Some(Precondition::Absent);
        let upload = store.upload(&key, options).await?;
        let encrypted = layers.recipients.is_some();
        let transformed = layers.compression != Compression::None || encrypted;
        Ok(SegmentWriter {
            key,
            cluster_id: cluster_id.to_string(),
            upload,
            records: RecordEncoder::new(),
            layers: LayerEncoder::new(
                layers.compression,
                ZSTD_LEVEL,
                1,
                layers.recipients.as_ref(),
            )?,
            stored: transformed.then(|| StoredHasher::new(ChecksumKind::for_new_object(encrypted))),
            compression: layers.compression,
            encryption: layers.recipients.as_ref().map(Encryption::age),
            labels: layers.upload.metadata.clone(),
            plaintext_bytes: 0,
            first_time: None,
            last_time: None,
            late_through: None,
        })
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    /// Plaintext bytes so far (what `segmentMaxBytes` counts).
    pub fn plaintext_bytes(&self) -> u64 {
        self.plaintext_bytes
    }

    /// Appends one event; on failure the upload is already aborted.
    pub async fn push(&mut self, change: &Change) -> Result<()> {
        self.records.push(change);
        let time = time_of(change.time_ms);
        self.first_time.get_or_insert(time);
        self.last_time = Some(time);
        if change.late {
            self.late_through = Some(change.revision);
        }
        let plain = self.records.take();
        self.write(&plain).await
    }

    async fn write(&mut self, plain: &[u8]) -> Result<()> {
        self.plaintext_bytes += plain.len() as u64;
        let out = self.layers.encode(plain)?;
        if !out.is_empty() {
            if let Some(hash) = self.stored.as_mut() {
                hash.update(out);
            }
            self.upload.write(out).await?;
        }
        Ok(())
    }

    /// Ends the segment, commits it and writes its manifest. Everything the manifest says is
    /// known before the commit, so it is first written as a pending copy: a crash between the
    /// commit and the manifest leaves that copy, from which the next archiver writes the
    /// manifest without reading the segment (an encrypted one needs a key it may not have).
    pub async fn close(mut self, store: &Store, etcd_version: &str) -> Result<SegmentManifest> {
        let records = std::mem::take(&mut self.records);
        let (tail, end, plaintext_sha256) = records.finish();
        self.write(&tail).await?;
        let layers = std::mem::replace(
            &mut self.layers,
            LayerEncoder::new(Compression::None, 0, 1, None)?,
        );
        let last = layers.finish()?;
        if !last.is_empty() {
            if let Some(hash) = self.stored.as_mut() {
                hash.update(&last);
            }
            self.upload.write(&last).await?;
        }
        let stored = match self.stored.take() {
            Some(hash) => hash.finish(),
            None => StoredChecksum {
                kind: ChecksumKind::Sha256,
                hex: plaintext_sha256.clone(),
            },
        };
        let now = Utc::now();
        let mut manifest = SegmentManifest {
            format: SEGMENT_FORMAT.into(),
            cluster_id: self.cluster_id,
            first_revision: end.first_revision,
            last_revision: end.last_revision,
            events: end.events,
            first_time: self.first_time.unwrap_or(now),
            last_time: self.last_time.unwrap_or(now),
            late_through_revision: self.late_through,
            plaintext_sha256,
            stored_bytes: self.upload.bytes_written(),
            stored_sha256: stored.sha256(),
            stored_crc32c: stored.crc32c(),
            compression: self.compression,
            encryption: self.encryption,
            etcd_version: etcd_version.to_string(),
            completion_time: now,
            tool: concat!("etcd-backup ", env!("CARGO_PKG_VERSION")).into(),
            labels: self.labels,
        };
        let pending = pending_manifest_key(&self.key);
        store
            .put_small(&pending, manifest.to_json().into(), "application/json")
            .await?;
        let info = self.upload.commit().await?;
        manifest.stored_bytes = info.size;
        manifest.completion_time = Utc::now();
        manifest.write_beside(store, &self.key).await?;
        if let Err(e) = store.delete(&pending).await {
            tracing::warn!(key = %pending, error = %e, "a pending manifest stays behind (harmless)");
        }
        Ok(manifest)
    }
}

/// Where a segment's manifest waits while the segment is committed.
pub fn pending_manifest_key(segment: &str) -> String {
    format!("{}.pending", manifest_key(segment))
}

pub fn time_of(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_default()
}
