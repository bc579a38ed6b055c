//! Streaming download that resumes after a dropped connection with a ranged GET pinned to the
//! object's ETag (so a replaced object is never spliced into the old one).

use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;

use super::{S3Store, backoff, object_info};
use crate::object::ObjectInfo;
use crate::{Result, StorageError};

/// Consecutive failed resumes before giving up.
const MAX_RESUMES: u32 = 8;

pub struct S3Download {
    store: S3Store,
    info: ObjectInfo,
    body: ByteStream,
    offset: u64,
}

impl S3Download {
    pub(super) async fn start(store: S3Store, key: &str) -> Result<S3Download> {
        let request = store.client.get_object().bucket(&store.bucket).key(key);
        let out = super::sse::sse_customer!(request, &store.sse)
            .send()
            .await
            .map_err(|e| store.classify(e, "GetObject", key))?;
        let info = object_info(
            key,
            out.content_length(),
            out.last_modified(),
            out.e_tag(),
            out.metadata(),
        );
        Ok(S3Download {
            store,
            info,
            body: out.body,
            offset: 0,
        })
    }

    pub fn info(&self) -> &ObjectInfo {
        &self.info
    }

    pub async fn next_chunk(&mut self) -> Result<Option<Bytes>> {
        let mut failures = 0;
        // Why the last resume failed: its empty stand-in body ends at once, and the user must
        // see this cause, not that empty end.
        let mut resume_error: Option<String> = None;
        loop {
            match self.body.next().await {
                Some(Ok(chunk)) => {
                    self.offset += chunk.len() as u64;
                    return Ok(Some(chunk));
                }
                None if self.offset >= self.info.size => return Ok(None),
                // Cut short (None before the end) or a read error: resume from `offset`.
                ended => {
                    let cause = match (ended, resume_error.take()) {
                        (Some(Err(e)), _) => e.to_string(),
                        (_, Some(resume)) => resume,
                        _ => "connection closed early".to_string(),
                    };
                    if failures >= MAX_RESUMES {
                        return Err(StorageError::S3 {
                            operation: "GetObject",
                            url: self.store.url(&self.info.key),
                            message: format!(
                                "download stopped at byte {} of {} and {failures} resumes failed: {cause}",
                                self.offset, self.info.size
                            ),
                        });
                    }
                    tracing::warn!(key = %self.info.key, offset = self.offset, %cause, "resuming download");
                    tokio::time::sleep(backoff(failures)).await;
                    failures += 1;
                    if let Err(e) = self.resume().await {
                        if matches!(e, StorageError::ChangedWhileReading { .. }) {
                            return Err(e);
                        }
                        tracing::warn!(key = %self.info.key, error = %e, "resume attempt failed");
                        resume_error = Some(e.to_string());
                        self.body = ByteStream::from_static(b"");
                    }
                }
            }
        }
    }

    async fn resume(&mut self) -> Result<()> {
        let mut request = self
            .store
            .client
            .get_object()
            .bucket(&self.store.bucket)
            .key(&self.info.key)
            .range(format!("bytes={}-", self.offset));
        if let Some(etag) = &self.info.etag {
            request = request.if_match(etag);
        }
        let request = super::sse::sse_customer!(request, &self.store.sse);
        let out = request.send().await.map_err(|e| {
            match self.store.classify(e, "GetObject", &self.info.key) {
                // The If-Match above failed: the object was rewritten since the first read.
                StorageError::PreconditionFailed { .. } => StorageError::ChangedWhileReading {
                    url: self.store.url(&self.info.key),
                    expected: self.info.etag.clone().unwrap_or_default(),
                    found: "a different version".into(),
                },
                other => other,
            }
        })?;
        self.body = out.body;
        Ok(())
    }
}
