//! Google Cloud Storage backend, over GCS's JSON API.
//!
//! - Uploads are resumable uploads: chunks sent in order to an upload session, nothing visible
//!   until the last chunk; the last chunk carries the whole object's CRC32C (`X-Goog-Hash`),
//!   which GCS checks before it makes the object, and the object it reports must have that
//!   CRC32C and size (see [`upload`]). An aborted upload's session is deleted; a session left
//!   by a killed process is never visible and GCS forgets it after a week (it cannot be
//!   listed, so there is nothing to clean).
//! - Downloads resume with ranged reads pinned to the object's generation.
//! - An object's `etag` here is its generation, which conditional writes compare.
//!
//! Endpoint: `https://storage.googleapis.com`, or an emulator's (`STORAGE_EMULATOR_HOST`, as
//! Google's client libraries read it).

mod auth;
mod download;
mod upload;

use std::collections::BTreeMap;
use std::fmt;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use http::{Request, StatusCode};
use serde::Deserialize;

pub use auth::GcsCredentials;
pub use download::GcsDownload;
pub use upload::GcsUpload;

use crate::http::{Body, HttpClient, Reply, encode_path, encode_query};
use crate::object::{ObjectInfo, UploadOptions};
use crate::{Result, StorageError};

pub const DEFAULT_ENDPOINT: &str = "https://storage.googleapis.com";
const SERVICE: &str = "GCS";

/// How to reach GCS.
#[derive(Debug, Clone)]
pub struct GcsOptions {
    /// `None`: `STORAGE_EMULATOR_HOST` if set, else Google's endpoint.
    pub endpoint: Option<String>,
    pub credentials: GcsCredentials,
    /// Extra trusted CA certificates (PEM), added to the system roots.
    pub ca_bundle_pem: Option<Vec<u8>>,
    /// Attempts per request, with exponential backoff.
    pub max_attempts: u32,
}

impl Default for GcsOptions {
    fn default() -> Self {
        GcsOptions {
            endpoint: None,
            credentials: GcsCredentials::default(),
            ca_bundle_pem: None,
            max_attempts: 5,
        }
    }
}

impl GcsOptions {
    fn resolved_endpoint(&self) -> String {
        let endpoint = self
            .endpoint
            .clone()
            .or_else(|| std::env::var("STORAGE_EMULATOR_HOST").ok())
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
        let endpoint = if endpoint.contains("://") {
            endpoint
        } else {
            // Google's libraries take the emulator's host:port without a scheme.
            format!("http://{endpoint}")
        };
        endpoint.trim_end_matches('/').to_string()
    }
}

/// One bucket.
#[derive(Clone)]
pub struct GcsStore {
    http: HttpClient,
    tokens: auth::TokenSource,
    bucket: String,
    endpoint: String,
}

impl fmt::Debug for GcsStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GcsStore({} bucket {})", self.endpoint, self.bucket)
    }
}

/// An object resource, as the JSON API returns it (numbers are strings there).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ObjectResource {
    name: String,
    size: String,
    #[serde(default)]
    updated: Option<String>,
    generation: String,
    #[serde(default)]
    crc32c: Option<String>,
    #[serde(default)]
    metadata: BTreeMap<String, String>,
}

impl ObjectResource {
    fn info(self) -> ObjectInfo {
        ObjectInfo {
            key: self.name,
            size: self.size.parse().unwrap_or(0),
            last_modified: self
                .updated
                .as_deref()
                .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                .map(|t| t.with_timezone(&Utc)),
            etag: Some(self.generation),
            metadata: self.metadata,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListPage {
    #[serde(default)]
    items: Vec<ObjectResource>,
    #[serde(default)]
    next_page_token: Option<String>,
}

impl GcsStore {
    pub async fn connect(bucket: &str, options: &GcsOptions) -> Result<GcsStore> {
        let endpoint = options.resolved_endpoint();
        let http = HttpClient::new(
            SERVICE,
            &endpoint,
            options.ca_bundle_pem.as_deref(),
            options.max_attempts,
        )?;
        Ok(GcsStore {
            http,
            tokens: auth::TokenSource::new(&options.credentials)?,
            bucket: bucket.to_string(),
            endpoint,
        })
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    pub(crate) fn url(&self, key: &str) -> String {
        format!("gs://{}/{key}", self.bucket)
    }

    fn object_url(&self, key: &str) -> String {
        format!(
            "{}/storage/v1/b/{}/o/{}",
            self.endpoint,
            encode_path(&self.bucket, false),
            encode_path(key, false)
        )
    }

    /// A request with the credentials' `Authorization` header.
    async fn request(
        &self,
        method: http::Method,
        url: &str,
    ) -> Result<impl Fn(Body) -> Result<http::request::Builder> + use<>> {
        let authorization = self.tokens.authorization(&self.http).await?;
        let url = url.to_string();
        Ok(move |_body: Body| {
            let mut builder = Request::builder().method(method.clone()).uri(&url);
            if let Some(a) = &authorization {
                builder = builder.header("authorization", a);
            }
            Ok(builder)
        })
    }

    /// Sends a bodiless request and reads the answer.
    async fn call(
        &self,
        operation: &'static str,
        method: http::Method,
        url: &str,
        extra: &[(&str, &str)],
    ) -> Result<Reply> {
        let builder = self.request(method, url).await?;
        self.http
            .send_small(operation, || {
                let mut b = builder(Body::default())?;
                for (name, value) in extra {
                    b = b.header(*name, *value);
                }
                b.body(Body::default()).map_err(|e| self.bad_request(&e))
            })
            .await
    }

    fn bad_request(&self, e: &http::Error) -> StorageError {
        StorageError::Cloud {
            service: SERVICE,
            operation: "request",
            url: self.endpoint.clone(),
            message: e.to_string(),
        }
    }

    /// Fails early on a missing bucket or an unreachable endpoint. A 403 is accepted: the
    /// credentials may write objects without being allowed to read the bucket's metadata.
    pub async fn check_bucket(&self) -> Result<()> {
        let url = format!(
            "{}/storage/v1/b/{}",
            self.endpoint,
            encode_path(&self.bucket, false)
        );
        let reply = self
            .call("get bucket", http::Method::GET, &url, &[])
            .await?;
        match reply.status {
            s if s.is_success() => Ok(()),
            StatusCode::FORBIDDEN => Ok(()),
            _ => Err(self.classify("get bucket", "", &reply)),
        }
    }

    /// Turns an unsuccessful answer into the cause a user can act on.
    pub(crate) fn classify(
        &self,
        operation: &'static str,
        key: &str,
        reply: &Reply,
    ) -> StorageError {
        let message = error_message(reply);
        match reply.status {
            StatusCode::UNAUTHORIZED => StorageError::Credentials {
                service: SERVICE,
                code: "HTTP 401".into(),
                message,
                check: "the service account key, token or workload identity",
            },
            StatusCode::FORBIDDEN => StorageError::AccessDenied {
                bucket: self.bucket.clone(),
                code: "HTTP 403".into(),
                message,
            },
            StatusCode::NOT_FOUND if key.is_empty() || bucket_missing(reply) => {
                StorageError::NoSuchBucket {
                    bucket: self.bucket.clone(),
                }
            }
            StatusCode::NOT_FOUND => StorageError::NotFound { url: self.url(key) },
            StatusCode::PRECONDITION_FAILED => {
                StorageError::PreconditionFailed { url: self.url(key) }
            }
            status => StorageError::Cloud {
                service: SERVICE,
                operation,
                url: self.url(key),
                message: format!("HTTP {}: {message}", status.as_u16()),
            },
        }
    }

    pub async fn head(&self, key: &str) -> Result<Option<ObjectInfo>> {
        let reply = self
            .call("get object", http::Method::GET, &self.object_url(key), &[])
            .await?;
        match reply.status {
            s if s.is_success() => Ok(Some(self.parse_object(key, &reply)?.info())),
            StatusCode::NOT_FOUND if !bucket_missing(&reply) => Ok(None),
            _ => Err(self.classify("get object", key, &reply)),
        }
    }

    fn parse_object(&self, key: &str, reply: &Reply) -> Result<ObjectResource> {
        serde_json::from_slice(&reply.body).map_err(|e| StorageError::Cloud {
            service: SERVICE,
            operation: "get object",
            url: self.url(key),
            message: format!("unreadable object resource: {e}"),
        })
    }

    pub async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let mut all = Vec::new();
        let mut page_token: Option<String> = None;
        loop {
            let mut url = format!(
                "{}/storage/v1/b/{}/o?prefix={}",
                self.endpoint,
                encode_path(&self.bucket, false),
                encode_query(prefix)
            );
            if let Some(token) = &page_token {
                url.push_str(&format!("&pageToken={}", encode_query(token)));
            }
            let reply = self
                .call("list objects", http::Method::GET, &url, &[])
                .await?;
            if !reply.status.is_success() {
                return Err(self.classify("list objects", "", &reply));
            }
            let page: ListPage =
                serde_json::from_slice(&reply.body).map_err(|e| StorageError::Cloud {
                    service: SERVICE,
                    operation: "list objects",
                    url: self.url(prefix),
                    message: format!("unreadable listing: {e}"),
                })?;
            // A listing leaves metadata out, as S3's does.
            all.extend(page.items.into_iter().map(|o| ObjectInfo {
                metadata: BTreeMap::new(),
                ..o.info()
            }));
            match page.next_page_token.filter(|t| !t.is_empty()) {
                Some(token) => page_token = Some(token),
                None => return Ok(all),
            }
        }
    }

    pub async fn delete(&self, key: &str) -> Result<()> {
        let reply = self
            .call(
                "delete object",
                http::Method::DELETE,
                &self.object_url(key),
                &[],
            )
            .await?;
        match reply.status {
            s if s.is_success() => Ok(()),
            StatusCode::NOT_FOUND if !bucket_missing(&reply) => Ok(()),
            _ => Err(self.classify("delete object", key, &reply)),
        }
    }

    /// Deletes `key` if it is still `generation`.
    pub(crate) async fn delete_generation(&self, key: &str, generation: &str) -> Result<()> {
        let url = format!(
            "{}?ifGenerationMatch={}",
            self.object_url(key),
            encode_query(generation)
        );
        let reply = self
            .call("delete object", http::Method::DELETE, &url, &[])
            .await?;
        match reply.status {
            s if s.is_success() => Ok(()),
            StatusCode::NOT_FOUND | StatusCode::PRECONDITION_FAILED => Ok(()),
            _ => Err(self.classify("delete object", key, &reply)),
        }
    }

    pub async fn get_small(&self, key: &str) -> Result<Option<Bytes>> {
        let url = format!("{}?alt=media", self.object_url(key));
        let reply = self
            .call("get object", http::Method::GET, &url, &[])
            .await?;
        match reply.status {
            s if s.is_success() => Ok(Some(reply.body)),
            StatusCode::NOT_FOUND if !bucket_missing(&reply) => Ok(None),
            _ => Err(self.classify("get object", key, &reply)),
        }
    }

    pub async fn put_small(&self, key: &str, body: Bytes, content_type: &str) -> Result<()> {
        let mut upload = self.upload(
            key,
            UploadOptions {
                content_type: Some(content_type.to_string()),
                ..UploadOptions::default()
            },
        );
        upload.write(&body).await?;
        upload.commit().await.map(|_| ())
    }

    pub fn upload(&self, key: &str, options: UploadOptions) -> GcsUpload {
        GcsUpload::new(self.clone(), key, options)
    }

    pub async fn download(&self, key: &str) -> Result<GcsDownload> {
        GcsDownload::start(self.clone(), key).await
    }
}

/// GCS's error message (`{"error": {"message": ...}}`), or the body as it is.
fn error_message(reply: &Reply) -> String {
    #[derive(Deserialize)]
    struct Envelope {
        error: Inner,
    }
    #[derive(Deserialize)]
    struct Inner {
        message: String,
    }
    match serde_json::from_slice::<Envelope>(&reply.body) {
        Ok(e) => e.error.message,
        Err(_) => reply.text().trim().chars().take(500).collect(),
    }
}

/// A 404 about the bucket rather than the object. GCS says "The specified bucket does not
/// exist." (fake-gcs-server: "bucket not found"); a missing object is "No such object:
/// <bucket>/<object>", which names the bucket too, so the word alone decides nothing.
fn bucket_missing(reply: &Reply) -> bool {
    let message = error_message(reply).to_lowercase();
    message.contains("bucket does not exist") || message.contains("bucket not found")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn not_found(body: &str) -> Reply {
        Reply {
            status: StatusCode::NOT_FOUND,
            headers: Default::default(),
            body: Bytes::from(body.to_string()),
        }
    }

    #[test]
    fn a_missing_object_is_not_a_missing_bucket_whatever_their_names() {
        let object = not_found(
            r#"{"error":{"code":404,"message":"No such object: my-bucket/etcd/bucket.backup","errors":[{"reason":"notFound"}]}}"#,
        );
        assert!(!bucket_missing(&object));
        let bucket = not_found(
            r#"{"error":{"code":404,"message":"The specified bucket does not exist.","errors":[{"reason":"notFound"}]}}"#,
        );
        assert!(bucket_missing(&bucket));
        assert!(bucket_missing(&not_found(
            r#"{"error":{"code":404,"message":"bucket not found"}}"#
        )));
    }
}
