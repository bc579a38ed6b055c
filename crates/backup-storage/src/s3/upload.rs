//! Multipart upload of a stream of unknown length with bounded memory.
//!
//! One part buffer fills while at most `max_in_flight` earlier parts are being sent; `write`
//! waits when the pipeline is full, which pushes back on the producer (the etcd stream).
//! A stream that ends before the first part is full is sent with one PUT.
//!
//! Each part carries its CRC32C and the stored object is checked after the commit (see
//! [`super::checksum`]).
//!
//! Part buffers are recycled once their part is acknowledged, so a long upload allocates
//! `max_in_flight + 1` buffers in all: allocating a fresh 8 MiB buffer per part lets the
//! allocator keep freed ones around and memory creep up with the object size.

use std::collections::BTreeMap;

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{ChecksumAlgorithm, ChecksumType, CompletedMultipartUpload, CompletedPart};
use bytes::{Bytes, BytesMut};
use tokio::sync::oneshot;
use tokio::task::JoinSet;

use super::{S3Store, checksum};
use crate::object::{ObjectInfo, Precondition, UploadOptions};
use crate::part_size::MAX_PARTS;
use crate::{Result, StorageError};

pub struct S3Upload {
    store: S3Store,
    key: String,
    options: UploadOptions,
    buffer: BytesMut,
    upload_id: Option<String>,
    /// Number of the part being filled (1-based).
    next_part: i32,
    /// Each task gives its part buffer back with the result, for reuse.
    in_flight: JoinSet<(Result<CompletedPart>, Bytes)>,
    completed: Vec<CompletedPart>,
    /// Buffers of acknowledged parts, ready for the next ones.
    spare_buffers: Vec<BytesMut>,
    bytes: u64,
    finished: bool,
    /// Why a write failed: the upload is aborted, and every later write or commit is refused
    /// (a commit would otherwise store the part buffer's remains as the whole object).
    failed: Option<String>,
}

impl S3Upload {
    pub(super) fn new(store: S3Store, key: &str, options: UploadOptions) -> Self {
        let first = options.part_sizer.size_of(1);
        S3Upload {
            store,
            key: key.to_string(),
            options,
            buffer: BytesMut::with_capacity(first),
            upload_id: None,
            next_part: 1,
            in_flight: JoinSet::new(),
            completed: Vec::new(),
            spare_buffers: Vec::new(),
            bytes: 0,
            finished: false,
            failed: None,
        }
    }

    pub fn bytes_written(&self) -> u64 {
        self.bytes
    }

    pub async fn write(&mut self, data: &[u8]) -> Result<()> {
        self.refuse_if_failed()?;
        match self.write_parts(data).await {
            Ok(()) => Ok(()),
            Err(e) => {
                self.failed = Some(e.to_string());
                self.abort_quietly().await;
                Err(e)
            }
        }
    }

    fn refuse_if_failed(&self) -> Result<()> {
        match &self.failed {
            Some(cause) => Err(StorageError::UploadFailed {
                url: self.store.url(&self.key),
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    async fn write_parts(&mut self, mut data: &[u8]) -> Result<()> {
        while !data.is_empty() {
            let part_size = self.options.part_sizer.size_of(self.next_part);
            let take = (part_size - self.buffer.len()).min(data.len());
            self.buffer.extend_from_slice(&data[..take]);
            self.bytes += take as u64;
            data = &data[take..];
            if self.buffer.len() == part_size {
                self.send_part().await?;
            }
        }
        Ok(())
    }

    /// Starts the multipart upload on the first full part.
    ///
    /// The request runs in a tracked task of its own: dropped while it is in flight (a
    /// cancelled backup, a signal), this upload would never learn the ID of an upload the
    /// server may still create, and could not abort it. The task aborts such an orphan itself,
    /// and [`crate::aborts::finish_aborts`] waits for it like for any other abort.
    async fn upload_id(&mut self) -> Result<String> {
        if let Some(id) = &self.upload_id {
            return Ok(id.clone());
        }
        let request = self
            .store
            .client
            .create_multipart_upload()
            .bucket(&self.store.bucket)
            .key(&self.key)
            .set_metadata(Some(self.options.metadata.clone().into_iter().collect()))
            .set_content_type(self.options.content_type.clone())
            .checksum_algorithm(ChecksumAlgorithm::Crc32C);
        let request = super::sse::sse_write!(request, &self.store.sse);
        let (created_tx, created_rx) = oneshot::channel();
        // Sent once the ID is kept in `self`, whose `Drop` aborts it from then on.
        let (kept_tx, kept_rx) = oneshot::channel::<()>();
        let (store, key) = (self.store.clone(), self.key.clone());
        crate::aborts::spawn_abort(&tokio::runtime::Handle::current(), async move {
            let out = request.send().await;
            let id = out
                .as_ref()
                .ok()
                .map(|o| o.upload_id().unwrap_or_default().to_string());
            let taken = created_tx.send(out).is_ok() && kept_rx.await.is_ok();
            if let (Some(id), false) = (id, taken)
                && let Err(e) = store.abort_multipart(&key, &id).await
            {
                tracing::warn!(%key, upload_id = %id, error = %e, "could not abort an upload started for a dropped writer");
            }
        });
        let out = created_rx
            .await
            .map_err(|_| StorageError::S3 {
                operation: "CreateMultipartUpload",
                url: self.store.url(&self.key),
                message: "the request's task ended without an answer".into(),
            })?
            .map_err(|e| self.store.classify(e, "CreateMultipartUpload", &self.key))?;
        let id = out.upload_id().unwrap_or_default().to_string();
        tracing::debug!(key = %self.key, upload_id = %id, "multipart upload started");
        self.upload_id = Some(id.clone());
        let _ = kept_tx.send(());
        Ok(id)
    }

    async fn send_part(&mut self) -> Result<()> {
        let number = self.next_part;
        if number > MAX_PARTS {
            return Err(StorageError::TooManyParts { part: number });
        }
        let upload_id = self.upload_id().await?;
        while self.in_flight.len() >= self.options.max_in_flight.max(1) {
            self.collect_one().await?;
        }
        let next_buffer = self.buffer_for(number + 1);
        let body = std::mem::replace(&mut self.buffer, next_buffer).freeze();
        let store = self.store.clone();
        let key = self.key.clone();
        self.in_flight.spawn(async move {
            let result = upload_part(&store, &key, upload_id, number, body.clone()).await;
            (result, body)
        });
        self.next_part += 1;
        Ok(())
    }

    /// An empty buffer for part `number`: a recycled one when it is large enough.
    fn buffer_for(&mut self, number: i32) -> BytesMut {
        let size = self.options.part_sizer.size_of(number);
        match self.spare_buffers.pop() {
            Some(buffer) if buffer.capacity() >= size => buffer,
            _ => BytesMut::with_capacity(size),
        }
    }

    async fn collect_one(&mut self) -> Result<()> {
        match self.in_flight.join_next().await {
            Some(Ok((part, body))) => {
                // The SDK has dropped its copies once the request finished; if it has not,
                // the buffer is simply freed.
                if let Ok(mut buffer) = body.try_into_mut() {
                    buffer.clear();
                    self.spare_buffers.push(buffer);
                }
                self.completed.push(part?);
                Ok(())
            }
            Some(Err(join)) => Err(StorageError::S3 {
                operation: "UploadPart",
                url: self.store.url(&self.key),
                message: format!("part task failed: {join}"),
            }),
            None => Ok(()),
        }
    }

    pub async fn commit(mut self) -> Result<ObjectInfo> {
        self.refuse_if_failed()?;
        match self.finish().await {
            Ok(info) => {
                self.finished = true;
                Ok(info)
            }
            Err(e) => {
                self.abort_quietly().await;
                Err(e)
            }
        }
    }

    async fn finish(&mut self) -> Result<ObjectInfo> {
        let committed = if self.upload_id.is_none() {
            async {
                self.check_precondition().await?;
                self.put_whole().await
            }
            .await
        } else {
            self.complete().await
        };
        let etag = match committed {
            // The SDK retries a commit whose answer was lost; on a server with conditional
            // writes the retry then meets the object the first attempt stored. That one is
            // this upload's if it has its size and exactly its metadata (owner, revision,
            // start time), and the commit succeeded.
            Err(StorageError::PreconditionFailed { url }) => {
                match self.store.head(&self.key).await? {
                    Some(stored) if is_this_upload(&stored, self.bytes, &self.options.metadata) => {
                        None
                    }
                    _ => return Err(StorageError::PreconditionFailed { url }),
                }
            }
            other => other?,
        };
        let stored = self.store.head(&self.key).await?;
        let stored_size = stored.as_ref().map(|o| o.size);
        if stored_size != Some(self.bytes) {
            return Err(self.mismatch(
                "the stored size",
                self.bytes,
                stored_size.map_or("nothing".into(), |s| s.to_string()),
            ));
        }
        Ok(ObjectInfo {
            key: self.key.clone(),
            size: self.bytes,
            last_modified: stored.as_ref().and_then(|o| o.last_modified),
            etag: stored.and_then(|o| o.etag).or(etag),
            metadata: self.options.metadata.clone(),
        })
    }

    /// A stream shorter than one part: one PutObject. Returns the ETag.
    async fn put_whole(&mut self) -> Result<Option<String>> {
        let body = std::mem::take(&mut self.buffer).freeze();
        let crc = checksum::encode(checksum::crc32c(&body));
        let request = self
            .store
            .client
            .put_object()
            .bucket(&self.store.bucket)
            .key(&self.key)
            .set_metadata(Some(self.options.metadata.clone().into_iter().collect()))
            .set_content_type(self.options.content_type.clone())
            .checksum_crc32_c(&crc)
            .set_if_none_match(self.if_none_match())
            .set_if_match(self.if_match())
            .body(ByteStream::from(body));
        let request = super::sse::sse_write!(request, &self.store.sse);
        let sent = if self.store.unsigned_payloads() {
            request.customize().disable_payload_signing().send().await
        } else {
            request.send().await
        };
        let out = sent.map_err(|e| self.store.classify(e, "PutObject", &self.key))?;
        check_echo(
            &self.store,
            &self.key,
            "the CRC32C",
            &crc,
            out.checksum_crc32_c(),
        )?;
        Ok(out.e_tag().map(str::to_string))
    }

    /// Sends the last part, waits for all, and completes the upload. Returns the ETag.
    async fn complete(&mut self) -> Result<Option<String>> {
        if !self.buffer.is_empty() {
            self.send_part().await?;
        }
        while !self.in_flight.is_empty() {
            self.collect_one().await?;
        }
        // Checked once every part is stored, right before the commit: the narrowest window.
        self.check_precondition().await?;
        let mut parts = std::mem::take(&mut self.completed);
        parts.sort_by_key(|p| p.part_number());
        let sent: Option<Vec<u32>> = parts
            .iter()
            .map(|p| p.checksum_crc32_c().and_then(checksum::decode))
            .collect();
        let request = self
            .store
            .client
            .complete_multipart_upload()
            .bucket(&self.store.bucket)
            .key(&self.key)
            .upload_id(self.upload_id.clone().unwrap_or_default())
            .set_if_none_match(self.if_none_match())
            .set_if_match(self.if_match())
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(parts))
                    .build(),
            );
        let out = super::sse::sse_customer!(request, &self.store.sse)
            .send()
            .await
            .map_err(|e| self.store.classify(e, "CompleteMultipartUpload", &self.key))?;
        // Completed: there is no upload left to abort.
        self.upload_id = None;
        let composite = !matches!(out.checksum_type(), Some(ChecksumType::FullObject));
        if let (true, Some(sent), Some(stored)) = (composite, sent, out.checksum_crc32_c()) {
            let expected = checksum::composite(&sent);
            // Servers differ on the "-<parts>" suffix (AWS writes it, some omit it).
            let value = |c: &str| c.split('-').next().unwrap_or_default().to_string();
            if value(stored) != value(&expected) {
                return Err(self.mismatch("the composite CRC32C", expected, stored));
            }
        }
        Ok(out.e_tag().map(str::to_string))
    }

    /// The precondition, checked just before the commit: servers without conditional writes
    /// (Garage) ignore `If-None-Match` and `If-Match`, and would replace the object. Where the
    /// server has them, they also close the moment between this check and the commit.
    async fn check_precondition(&self) -> Result<()> {
        let Some(precondition) = &self.options.precondition else {
            return Ok(());
        };
        let stored = match self.store.head(&self.key).await {
            Ok(stored) => stored,
            // Without s3:ListBucket, AWS answers a HEAD of a missing key with 403: unknown
            // here, so the server's conditional write (`If-None-Match`) decides alone.
            Err(StorageError::AccessDenied { .. }) if *precondition == Precondition::Absent => {
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let holds = match precondition {
            Precondition::Absent => stored.is_none(),
            Precondition::Unchanged(etag) => {
                stored.is_some_and(|o| o.etag.as_deref() == Some(etag.as_str()))
            }
        };
        if holds {
            Ok(())
        } else {
            Err(StorageError::PreconditionFailed {
                url: self.store.url(&self.key),
            })
        }
    }

    fn if_none_match(&self) -> Option<String> {
        matches!(self.options.precondition, Some(Precondition::Absent)).then(|| "*".to_string())
    }

    fn if_match(&self) -> Option<String> {
        match &self.options.precondition {
            Some(Precondition::Unchanged(etag)) => Some(etag.clone()),
            _ => None,
        }
    }

    fn mismatch(&self, what: &str, sent: impl ToString, stored: impl ToString) -> StorageError {
        StorageError::StoredMismatch {
            url: self.store.url(&self.key),
            what: what.to_string(),
            sent: sent.to_string(),
            stored: stored.to_string(),
        }
    }

    pub async fn abort(mut self) -> Result<()> {
        self.abort_now().await
    }

    async fn abort_quietly(&mut self) {
        let id = self.upload_id.clone();
        if let Err(e) = self.abort_now().await {
            tracing::warn!(
                key = %self.key, upload_id = ?id, error = %e,
                "could not abort the multipart upload; `prune` or a bucket lifecycle rule removes it later"
            );
        }
    }

    /// Stops the parts in flight and aborts the upload on the server. The upload counts as
    /// finished only once that is done: dropped half-way (a deadline, a signal), `Drop` aborts
    /// it in the background instead.
    async fn abort_now(&mut self) -> Result<()> {
        self.in_flight.abort_all();
        while self.in_flight.join_next().await.is_some() {}
        let result = match self.upload_id.clone() {
            Some(id) => self.store.abort_multipart(&self.key, &id).await,
            None => Ok(()),
        };
        self.upload_id = None;
        self.finished = true;
        result
    }
}

/// Sends one part with its CRC32C, unsigned where [`S3Store::unsigned_payloads`] allows.
async fn upload_part(
    store: &S3Store,
    key: &str,
    upload_id: String,
    number: i32,
    body: Bytes,
) -> Result<CompletedPart> {
    let crc = checksum::encode(checksum::crc32c(&body));
    // ByteStream from Bytes is replayable, so the SDK can retry the part on its own.
    let request = store
        .client
        .upload_part()
        .bucket(&store.bucket)
        .key(key)
        .upload_id(upload_id)
        .part_number(number)
        .content_length(body.len() as i64)
        .checksum_crc32_c(&crc)
        .body(ByteStream::from(body));
    let request = super::sse::sse_customer!(request, &store.sse);
    let sent = if store.unsigned_payloads() {
        request.customize().disable_payload_signing().send().await
    } else {
        request.send().await
    };
    let out = sent.map_err(|e| store.classify(e, "UploadPart", key))?;
    let what = format!("part {number}'s CRC32C");
    check_echo(store, key, &what, &crc, out.checksum_crc32_c())?;
    Ok(CompletedPart::builder()
        .part_number(number)
        .set_e_tag(out.e_tag().map(str::to_string))
        .checksum_crc32_c(crc)
        .build())
}

/// Notes whether the server echoed the CRC32C it was sent (it checks them); another value back
/// means it stored other bytes.
fn check_echo(
    store: &S3Store,
    key: &str,
    what: &str,
    sent: &str,
    echoed: Option<&str>,
) -> Result<()> {
    store.checks.saw_echo(sent, echoed);
    match echoed {
        Some(stored) if stored != sent => Err(StorageError::StoredMismatch {
            url: store.url(key),
            what: what.to_string(),
            sent: sent.to_string(),
            stored: stored.to_string(),
        }),
        _ => Ok(()),
    }
}

impl Drop for S3Upload {
    /// An upload dropped without commit or abort (e.g. its task was cancelled) is aborted in
    /// the background so no parts are left on the server.
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        if let (Some(id), Ok(runtime)) =
            (self.upload_id.take(), tokio::runtime::Handle::try_current())
        {
            let store = self.store.clone();
            let key = self.key.clone();
            crate::aborts::spawn_abort(&runtime, async move {
                if let Err(e) = store.abort_multipart(&key, &id).await {
                    tracing::warn!(key = %key, upload_id = %id, error = %e, "could not abort a dropped upload");
                }
            });
        }
    }
}

/// Whether `stored` is the object this upload wrote: its size and every metadata entry the
/// upload set (the owner, and for backups the revision and start time).
fn is_this_upload(stored: &ObjectInfo, bytes: u64, metadata: &BTreeMap<String, String>) -> bool {
    stored.size == bytes
        && metadata
            .iter()
            .all(|(k, v)| stored.metadata.get(k) == Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retried_commit_recognises_only_its_own_object() {
        let ours: BTreeMap<String, String> = [
            ("etcd-backup-uid".to_string(), "u1".to_string()),
            ("etcd-revision".to_string(), "42".to_string()),
        ]
        .into();
        let stored = |size: u64, metadata: &BTreeMap<String, String>| ObjectInfo {
            key: "k".into(),
            size,
            last_modified: None,
            etag: None,
            metadata: metadata.clone(),
        };
        assert!(is_this_upload(&stored(10, &ours), 10, &ours));
        assert!(!is_this_upload(&stored(11, &ours), 10, &ours));
        let mut theirs = ours.clone();
        theirs.insert("etcd-revision".into(), "41".into());
        assert!(!is_this_upload(&stored(10, &theirs), 10, &ours));
        assert!(!is_this_upload(&stored(10, &BTreeMap::new()), 10, &ours));
    }
}
