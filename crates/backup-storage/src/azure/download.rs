//! Streaming download that resumes after a dropped connection with a ranged read pinned to the
//! blob's ETag (so a replaced blob is never spliced into the old one).

use bytes::Bytes;
use http::{Method, StatusCode};
use hyper::body::Incoming;

use super::{AzureStore, SERVICE, info_from_headers};
use crate::http::ResumingBody;
use crate::object::ObjectInfo;
use crate::{Result, StorageError};

pub struct AzureDownload {
    store: AzureStore,
    info: ObjectInfo,
    body: ResumingBody,
}

impl AzureDownload {
    pub(super) async fn start(store: AzureStore, key: &str) -> Result<AzureDownload> {
        let (info, body) = open(&store, key, 0, None).await?;
        let body = ResumingBody::new(body, info.size);
        Ok(AzureDownload { store, info, body })
    }

    pub fn info(&self) -> &ObjectInfo {
        &self.info
    }

    pub async fn next_chunk(&mut self) -> Result<Option<Bytes>> {
        let (store, key, etag) = (&self.store, &self.info.key, self.info.etag.as_deref());
        self.body
            .next_chunk(SERVICE, &store.url(key), |offset| async move {
                open(store, key, offset, etag).await.map(|(_, body)| body)
            })
            .await
    }
}
/// A GET of the blob from `offset`, of the version `etag` when given.
async fn open(
    store: &AzureStore,
    key: &str,
    offset: u64,
    etag: Option<&str>,
) -> Result<(ObjectInfo, Incoming)> {
    let bearer = store.signer.prepare(&store.http).await?;
    let url = store.signer.url(store.blob_url(key));
    let mut headers = Vec::new();
    if offset > 0 {
        headers.push(("x-ms-range", format!("bytes={offset}-")));
    }
    if let Some(etag) = etag {
        headers.push(("if-match", etag.to_string()));
    }
    let response = store
        .http
        .send("get blob", || {
            store.signed(Method::GET, &url, &headers, Bytes::new(), bearer.as_deref())
        })
        .await?;
    let status = response.status();
    // A resumed read must be the rest of the blob (see the GCS download).
    if offset > 0 && status.is_success() && status != StatusCode::PARTIAL_CONTENT {
        return Err(StorageError::Cloud {
            service: SERVICE,
            operation: "get blob",
            url: store.url(key),
            message: format!("a read from byte {offset} was answered with HTTP {status}, not 206"),
        });
    }
    if status.is_success() {
        let info = info_from_headers(key, response.headers());
        return Ok((info, response.into_body()));
    }
    let reply = store.http.read_small("get blob", response).await?;
    Err(match (status, etag) {
        (StatusCode::PRECONDITION_FAILED, Some(etag)) | (StatusCode::NOT_FOUND, Some(etag)) => {
            StorageError::ChangedWhileReading {
                url: store.url(key),
                expected: etag.to_string(),
                found: "another version, or none".into(),
            }
        }
        _ => store.classify("get blob", key, &reply),
    })
}
