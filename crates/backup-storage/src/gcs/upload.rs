//! A resumable upload of a stream of unknown length with bounded memory.
//!
//! The session is started with the object's name, metadata and precondition; chunks (the part
//! size, a multiple of 256 KiB as GCS requires) are then sent in order, one in flight while
//! the next fills, so at most two chunks are in memory. The last request says the total size
//! and carries the CRC32C of the whole object (`X-Goog-Hash`), which GCS checks before it
//! creates the object; the object it returns must have that CRC32C and size, or nothing is
//! reported good.
//!
//! A chunk whose request failed is not blindly sent again: the session is asked how much it
//! persisted (`Content-Range: bytes */*`) and the rest of the chunk goes from there.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::{Bytes, BytesMut};
use http::{Request, StatusCode};
use tokio::task::JoinHandle;

use super::{GcsStore, ObjectResource, SERVICE};
use crate::http::{Body, backoff, encode_query};
use crate::object::{ObjectInfo, Precondition, UploadOptions};
use crate::{Result, StorageError};

/// GCS's chunk granularity.
const CHUNK_UNIT: usize = 256 * 1024;

pub struct GcsUpload {
    store: GcsStore,
    key: String,
    options: UploadOptions,
    chunk_size: usize,
    buffer: BytesMut,
    /// The session URI, once started.
    session: Option<String>,
    /// Bytes handed to earlier chunks (the offset of `buffer`'s first byte).
    offset: u64,
    in_flight: Option<JoinHandle<Result<()>>>,
    /// Boxed: the digest's tables would make every `Upload` large.
    crc: Box<crc_fast::Digest>,
    failed: Option<String>,
}

/// What a chunk request ended with.
enum ChunkAnswer {
    /// The session persisted bytes up to (not including) this offset and wants more.
    Persisted(u64),
    /// The object was created.
    Created(Box<ObjectResource>),
}

impl GcsUpload {
    pub(super) fn new(store: GcsStore, key: &str, options: UploadOptions) -> Self {
        let chunk_size = options.part_sizer.size_of(1).div_ceil(CHUNK_UNIT) * CHUNK_UNIT;
        GcsUpload {
            store,
            key: key.to_string(),
            options,
            chunk_size,
            buffer: BytesMut::with_capacity(chunk_size),
            session: None,
            offset: 0,
            in_flight: None,
            crc: Box::new(crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi)),
            failed: None,
        }
    }

    pub fn bytes_written(&self) -> u64 {
        self.offset + self.buffer.len() as u64
    }

    pub async fn write(&mut self, mut data: &[u8]) -> Result<()> {
        self.refuse_if_failed()?;
        while !data.is_empty() {
            let take = (self.chunk_size - self.buffer.len()).min(data.len());
            self.buffer.extend_from_slice(&data[..take]);
            self.crc.update(&data[..take]);
            data = &data[take..];
            if self.buffer.len() == self.chunk_size
                && let Err(e) = self.send_full_chunk().await
            {
                self.fail(&e).await;
                return Err(e);
            }
        }
        Ok(())
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

    async fn fail(&mut self, e: &StorageError) {
        self.failed = Some(e.to_string());
        if let Some(task) = self.in_flight.take() {
            task.abort();
        }
        self.cancel_session().await;
    }

    /// Sends the full buffer as a middle chunk, after the one before it is through.
    async fn send_full_chunk(&mut self) -> Result<()> {
        let session = self.session().await?;
        self.wait_in_flight().await?;
        let chunk =
            std::mem::replace(&mut self.buffer, BytesMut::with_capacity(self.chunk_size)).freeze();
        let (store, key, start) = (self.store.clone(), self.key.clone(), self.offset);
        self.offset += chunk.len() as u64;
        self.in_flight = Some(tokio::spawn(async move {
            match send_chunk(&store, &key, &session, chunk, start, None).await? {
                ChunkAnswer::Persisted(_) => Ok(()),
                ChunkAnswer::Created(_) => Err(StorageError::Cloud {
                    service: SERVICE,
                    operation: "upload chunk",
                    url: store.url(&key),
                    message: "the session created the object before its last chunk".into(),
                }),
            }
        }));
        Ok(())
    }

    async fn wait_in_flight(&mut self) -> Result<()> {
        if let Some(task) = self.in_flight.take() {
            task.await.map_err(|e| StorageError::Cloud {
                service: SERVICE,
                operation: "upload chunk",
                url: self.store.url(&self.key),
                message: e.to_string(),
            })??;
        }
        Ok(())
    }

    /// Starts the session on first use.
    async fn session(&mut self) -> Result<String> {
        if let Some(session) = &self.session {
            return Ok(session.clone());
        }
        let mut url = format!(
            "{}/upload/storage/v1/b/{}/o?uploadType=resumable&name={}",
            self.store.endpoint,
            encode_query(&self.store.bucket),
            encode_query(&self.key)
        );
        match &self.options.precondition {
            Some(Precondition::Absent) => url.push_str("&ifGenerationMatch=0"),
            Some(Precondition::Unchanged(generation)) => {
                url.push_str(&format!("&ifGenerationMatch={}", encode_query(generation)))
            }
            None => {}
        }
        let mut resource =
            serde_json::json!({ "name": self.key, "metadata": self.options.metadata });
        if let Some(content_type) = &self.options.content_type {
            resource["contentType"] = content_type.clone().into();
        }
        let body = Bytes::from(resource.to_string());
        let authorization = self.store.tokens.authorization(&self.store.http).await?;
        let reply = self
            .store
            .http
            .send_small("start upload", || {
                let mut b =
                    Request::post(&url).header("content-type", "application/json; charset=UTF-8");
                if let Some(a) = &authorization {
                    b = b.header("authorization", a);
                }
                b.body(Body::new(body.clone()))
                    .map_err(|e| self.store.bad_request(&e))
            })
            .await?;
        if !reply.status.is_success() {
            return Err(self.store.classify("start upload", &self.key, &reply));
        }
        let session = reply
            .header("location")
            .ok_or_else(|| StorageError::Cloud {
                service: SERVICE,
                operation: "start upload",
                url: self.store.url(&self.key),
                message: "the answer names no upload session (no Location header)".into(),
            })?
            .to_string();
        self.session = Some(session.clone());
        Ok(session)
    }

    /// Sends what is left as the last chunk and checks what GCS made of it.
    pub async fn commit(mut self) -> Result<ObjectInfo> {
        self.refuse_if_failed()?;
        match self.finish().await {
            Ok(info) => Ok(info),
            Err(e) => {
                self.fail(&e).await;
                Err(e)
            }
        }
    }

    async fn finish(&mut self) -> Result<ObjectInfo> {
        let session = self.session().await?;
        self.wait_in_flight().await?;
        let last = std::mem::take(&mut self.buffer).freeze();
        let total = self.offset + last.len() as u64;
        let crc = self.crc.finalize() as u32;
        let created = match send_chunk(
            &self.store,
            &self.key,
            &session,
            last,
            self.offset,
            Some((total, crc)),
        )
        .await?
        {
            ChunkAnswer::Created(object) => object,
            ChunkAnswer::Persisted(at) => {
                return Err(StorageError::Cloud {
                    service: SERVICE,
                    operation: "finish upload",
                    url: self.store.url(&self.key),
                    message: format!(
                        "the session persisted {at} of {total} bytes and made no object"
                    ),
                });
            }
        };
        self.session = None;
        let stored_crc = created.crc32c.clone().unwrap_or_default();
        let info = created.info();
        let sent_crc = STANDARD.encode(crc.to_be_bytes());
        if info.size != total || stored_crc != sent_crc {
            let (what, sent, stored) = if info.size != total {
                ("the size", total.to_string(), info.size.to_string())
            } else {
                ("the CRC32C", sent_crc, stored_crc)
            };
            // GCS itself refuses a last chunk whose X-Goog-Hash does not match; a server that
            // did not (an emulator, a proxy that broke the bytes) made a damaged object, which
            // must not stay visible: this generation is deleted, never a newer one.
            if let Some(generation) = &info.etag
                && let Err(e) = self.store.delete_generation(&self.key, generation).await
            {
                tracing::warn!(key = %self.key, error = %e, "could not delete the damaged object");
            }
            return Err(StorageError::StoredMismatch {
                url: self.store.url(&self.key),
                what: what.into(),
                sent,
                stored,
            });
        }
        Ok(info)
    }

    pub async fn abort(mut self) -> Result<()> {
        if let Some(task) = self.in_flight.take() {
            task.abort();
        }
        self.cancel_session().await;
        Ok(())
    }

    async fn cancel_session(&mut self) {
        if let Some(session) = self.session.take() {
            cancel(&self.store, &self.key, &session).await;
        }
    }
}

/// Deletes an upload session, so it never becomes an object; GCS answers 499 to that.
async fn cancel(store: &GcsStore, key: &str, session: &str) {
    let reply = store
        .http
        .send_small("cancel upload", || {
            Request::delete(session)
                .header("content-length", "0")
                .body(Body::default())
                .map_err(|e| store.bad_request(&e))
        })
        .await;
    if let Err(e) = reply {
        tracing::warn!(%key, error = %e, "could not cancel the upload session; GCS forgets it within a week, it never becomes an object");
    }
}

impl Drop for GcsUpload {
    fn drop(&mut self) {
        if let Some(task) = self.in_flight.take() {
            task.abort();
        }
        // A dropped upload (a cancelled task) cancels its session in the background, tracked
        // so a process can wait for it before it exits.
        if let (Some(session), Ok(runtime)) =
            (self.session.take(), tokio::runtime::Handle::try_current())
        {
            let (store, key) = (self.store.clone(), self.key.clone());
            crate::aborts::spawn_abort(&runtime, async move {
                cancel(&store, &key, &session).await;
            });
        }
    }
}

/// Sends `chunk`, which starts at `start` of the object; `last` is `(total size, CRC32C)` on
/// the last chunk. After a failed request, asks the session how much it has and sends the rest.
async fn send_chunk(
    store: &GcsStore,
    key: &str,
    session: &str,
    chunk: Bytes,
    start: u64,
    last: Option<(u64, u32)>,
) -> Result<ChunkAnswer> {
    let end = start + chunk.len() as u64;
    let mut from = start;
    let mut failures = 0;
    loop {
        let piece = chunk.slice((from - start) as usize..);
        let range = match (piece.is_empty(), last) {
            (true, Some((total, _))) => format!("bytes */{total}"),
            (false, Some((total, _))) => format!("bytes {from}-{}/{total}", end - 1),
            (false, None) => format!("bytes {from}-{}/*", end - 1),
            (true, None) => return Ok(ChunkAnswer::Persisted(end)),
        };
        let hash = last.map(|(_, crc)| format!("crc32c={}", STANDARD.encode(crc.to_be_bytes())));
        let answer = store
            .http
            .send_once("upload chunk", || {
                let mut b = Request::put(session).header("content-range", &range);
                if let Some(hash) = &hash {
                    b = b.header("x-goog-hash", hash);
                }
                b.body(Body::new(piece.clone()))
                    .map_err(|e| store.bad_request(&e))
            })
            .await;
        let failure = match answer {
            Ok(reply) => match chunk_answer(store, key, &reply)? {
                Some(ChunkAnswer::Persisted(at)) if at >= end => {
                    return Ok(ChunkAnswer::Persisted(at));
                }
                Some(ChunkAnswer::Persisted(at)) if at < start => {
                    return Err(lost_data(store, key, at, start));
                }
                // The session kept less than was sent, but more than before: send the rest.
                Some(ChunkAnswer::Persisted(at)) if at > from => {
                    from = at;
                    continue;
                }
                // It kept nothing more: a failure like any other (counted, with backoff).
                Some(ChunkAnswer::Persisted(at)) => {
                    format!("the session kept nothing past byte {at}")
                }
                Some(created) => return Ok(created),
                None => format!("HTTP {}", reply.status.as_u16()),
            },
            Err(e) => e.to_string(),
        };
        failures += 1;
        if failures >= store.http.max_attempts() {
            return Err(StorageError::Cloud {
                service: SERVICE,
                operation: "upload chunk",
                url: store.url(key),
                message: format!(
                    "bytes {from}..{end} not accepted after {failures} attempts: {failure}"
                ),
            });
        }
        tokio::time::sleep(backoff(failures)).await;
        // Ask the session where it is; a failure to answer is retried by the next round.
        if let Ok(reply) = store
            .http
            .send_once("upload status", || {
                Request::put(session)
                    .header(
                        "content-range",
                        match last {
                            Some((total, _)) => format!("bytes */{total}"),
                            None => "bytes */*".to_string(),
                        },
                    )
                    .body(Body::default())
                    .map_err(|e| store.bad_request(&e))
            })
            .await
        {
            match chunk_answer(store, key, &reply)? {
                Some(ChunkAnswer::Persisted(at)) if at < start => {
                    return Err(lost_data(store, key, at, start));
                }
                Some(ChunkAnswer::Persisted(at)) => from = at.min(end),
                Some(created) => return Ok(created),
                None => {}
            }
        }
    }
}

/// The session has less than it acknowledged before this chunk.
fn lost_data(store: &GcsStore, key: &str, at: u64, start: u64) -> StorageError {
    StorageError::Cloud {
        service: SERVICE,
        operation: "upload chunk",
        url: store.url(key),
        message: format!(
            "the session lost data it had acknowledged (it has {at} bytes, {start} were acknowledged)"
        ),
    }
}

/// Reads a chunk answer: 308 with the persisted range, 200/201 with the object, a retryable
/// status (`None`), or an error to give up with.
fn chunk_answer(
    store: &GcsStore,
    key: &str,
    reply: &crate::http::Reply,
) -> Result<Option<ChunkAnswer>> {
    match reply.status.as_u16() {
        308 => {
            // `Range: bytes=0-N`; none means nothing was persisted.
            let persisted = reply
                .header("range")
                .and_then(|r| r.rsplit('-').next())
                .and_then(|n| n.parse::<u64>().ok())
                .map_or(0, |n| n + 1);
            Ok(Some(ChunkAnswer::Persisted(persisted)))
        }
        200 | 201 => {
            let object: ObjectResource =
                serde_json::from_slice(&reply.body).map_err(|e| StorageError::Cloud {
                    service: SERVICE,
                    operation: "finish upload",
                    url: store.url(key),
                    message: format!("unreadable object resource: {e}"),
                })?;
            Ok(Some(ChunkAnswer::Created(Box::new(object))))
        }
        408 | 429 | 500..=599 => Ok(None),
        _ => Err(match reply.status {
            StatusCode::NOT_FOUND | StatusCode::GONE => StorageError::Cloud {
                service: SERVICE,
                operation: "upload chunk",
                url: store.url(key),
                message: "the upload session expired or was cancelled".into(),
            },
            _ => store.classify("upload chunk", key, reply),
        }),
    }
}
