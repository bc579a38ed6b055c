//! Streaming download that resumes after a dropped connection with a ranged read pinned to the
//! object's generation (so a replaced object is never spliced into the old one).

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;

use super::{GcsStore, SERVICE};
use crate::http::{Body, ResumingBody, encode_query};
use crate::object::ObjectInfo;
use crate::{Result, StorageError};

pub struct GcsDownload {
    store: GcsStore,
    info: ObjectInfo,
    body: ResumingBody,
}

impl GcsDownload {
    pub(super) async fn start(store: GcsStore, key: &str) -> Result<GcsDownload> {
        let info = store
            .head(key)
            .await?
            .ok_or_else(|| StorageError::NotFound {
                url: store.url(key),
            })?;
        let body = ResumingBody::new(open_at(&store, &info, 0).await?, info.size);
        Ok(GcsDownload { store, info, body })
    }

    pub fn info(&self) -> &ObjectInfo {
        &self.info
    }

    pub async fn next_chunk(&mut self) -> Result<Option<Bytes>> {
        let (store, info) = (&self.store, &self.info);
        self.body
            .next_chunk(SERVICE, &store.url(&info.key), |offset| {
                open_at(store, info, offset)
            })
            .await
    }
}

/// A media read of the object's generation from `offset`.
async fn open_at(store: &GcsStore, info: &ObjectInfo, offset: u64) -> Result<Incoming> {
    let key = &info.key;
    let generation = info.etag.clone().unwrap_or_default();
    let url = format!(
        "{}?alt=media&ifGenerationMatch={}",
        store.object_url(key),
        encode_query(&generation)
    );
    let authorization = store.tokens.authorization(&store.http).await?;
    let response: Response<Incoming> = store
        .http
        .send("get object", || {
            let mut b = Request::get(&url);
            if offset > 0 {
                b = b.header("range", format!("bytes={offset}-"));
            }
            if let Some(a) = &authorization {
                b = b.header("authorization", a);
            }
            b.body(Body::default()).map_err(|e| store.bad_request(&e))
        })
        .await?;
    let status = response.status();
    // A resumed read must be the rest of the object: a server (or proxy) that ignored the
    // range would splice the object's start in at `offset`.
    if offset > 0 && status.is_success() && status != StatusCode::PARTIAL_CONTENT {
        return Err(StorageError::Cloud {
            service: SERVICE,
            operation: "get object",
            url: store.url(key),
            message: format!("a read from byte {offset} was answered with HTTP {status}, not 206"),
        });
    }
    if status.is_success() {
        return Ok(response.into_body());
    }
    let reply = store.http.read_small("get object", response).await?;
    Err(match status {
        StatusCode::PRECONDITION_FAILED | StatusCode::NOT_FOUND => {
            StorageError::ChangedWhileReading {
                url: store.url(key),
                expected: format!("generation {generation}"),
                found: "another generation, or none".into(),
            }
        }
        _ => store.classify("get object", key, &reply),
    })
}
