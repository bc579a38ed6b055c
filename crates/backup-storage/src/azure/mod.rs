//! Azure Blob Storage backend (block blobs, REST API version [`API_VERSION`]).
//!
//! - Uploads stage blocks (`Put Block`, each with its Content-MD5, which the service checks
//!   before it keeps the block) and commit them with one `Put Block List` naming exactly this
//!   upload's blocks; nothing is visible before the commit, and the committed blob's size must
//!   be what was sent (see [`upload`]). Blocks that are never committed (an aborted upload, a
//!   killed process) are not visible and Azure discards them after a week; the REST API has no
//!   call that deletes them sooner, so there is nothing to clean.
//! - Downloads resume with ranged reads pinned to the blob's ETag.
//! - User metadata names must be C# identifiers, so the `-` in ours is stored as `_` and read
//!   back as `-`.
//!
//! Endpoint: `https://<account>.blob.core.windows.net`, or a path-style one
//! (`http://127.0.0.1:10000/<account>` for Azurite).

mod auth;
mod download;
mod list;
mod upload;

use std::collections::BTreeMap;
use std::fmt;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use http::{HeaderMap, Method, Request, StatusCode};

pub use auth::AzureCredentials;
pub use download::AzureDownload;
pub use upload::AzureUpload;

use crate::http::{Body, HttpClient, Reply, encode_path, encode_query};
use crate::object::{ObjectInfo, UploadOptions};
use crate::{Result, StorageError};

/// The REST API version every request asks for (supported by Azure and by Azurite 3.35).
pub const API_VERSION: &str = "2021-12-02";
const SERVICE: &str = "Azure Blob";

/// How to reach Azure Blob Storage.
#[derive(Debug, Clone)]
pub struct AzureOptions {
    /// The storage account (`AZURE_STORAGE_ACCOUNT` when empty).
    pub account: String,
    /// `None`: `https://<account>.blob.core.windows.net`.
    pub endpoint: Option<String>,
    pub credentials: AzureCredentials,
    /// Extra trusted CA certificates (PEM), added to the system roots.
    pub ca_bundle_pem: Option<Vec<u8>>,
    /// Attempts per request, with exponential backoff.
    pub max_attempts: u32,
}

impl Default for AzureOptions {
    fn default() -> Self {
        AzureOptions {
            account: String::new(),
            endpoint: None,
            credentials: AzureCredentials::default(),
            ca_bundle_pem: None,
            max_attempts: 5,
        }
    }
}

/// One container of one account.
#[derive(Clone)]
pub struct AzureStore {
    http: HttpClient,
    signer: auth::Signer,
    container: String,
    endpoint: String,
}

impl fmt::Debug for AzureStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "AzureStore({} container {})",
            self.endpoint, self.container
        )
    }
}

impl AzureStore {
    pub async fn connect(container: &str, options: &AzureOptions) -> Result<AzureStore> {
        let account = match options.account.as_str() {
            "" => std::env::var("AZURE_STORAGE_ACCOUNT").unwrap_or_default(),
            a => a.to_string(),
        };
        if account.is_empty() {
            return Err(StorageError::NoCredentials {
                service: SERVICE,
                message: "no storage account was named (--azure-account or AZURE_STORAGE_ACCOUNT)"
                    .into(),
            });
        }
        let endpoint = options
            .endpoint
            .clone()
            .unwrap_or_else(|| format!("https://{account}.blob.core.windows.net"))
            .trim_end_matches('/')
            .to_string();
        let http = HttpClient::new(
            SERVICE,
            &endpoint,
            options.ca_bundle_pem.as_deref(),
            options.max_attempts,
        )?;
        Ok(AzureStore {
            http,
            signer: auth::Signer::new(&account, &options.credentials)?,
            container: container.to_string(),
            endpoint,
        })
    }

    pub fn container(&self) -> &str {
        &self.container
    }

    pub(crate) fn url(&self, key: &str) -> String {
        format!("azblob://{}/{key}", self.container)
    }

    fn blob_url(&self, key: &str) -> String {
        format!(
            "{}/{}/{}",
            self.endpoint,
            encode_path(&self.container, false),
            encode_path(key, true)
        )
    }

    fn container_url(&self) -> String {
        format!("{}/{}", self.endpoint, encode_path(&self.container, false))
    }

    /// Sends one request, signed, with the headers every request carries; retried (so only for
    /// requests that may be repeated).
    pub(crate) async fn call(
        &self,
        operation: &'static str,
        method: Method,
        url: &str,
        headers: &[(&str, String)],
        body: Bytes,
    ) -> Result<Reply> {
        let bearer = self.signer.prepare(&self.http).await?;
        let url = self.signer.url(url.to_string());
        self.http
            .send_small(operation, || {
                self.signed(
                    method.clone(),
                    &url,
                    headers,
                    body.clone(),
                    bearer.as_deref(),
                )
            })
            .await
    }

    /// A request with the common headers and `Authorization`.
    pub(crate) fn signed(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, String)],
        body: Bytes,
        bearer: Option<&str>,
    ) -> Result<Request<Body>> {
        let date = Utc::now().format("%a, %d %b %Y %H:%M:%S GMT").to_string();
        let mut builder = Request::builder()
            .method(method)
            .uri(url)
            .header("x-ms-date", date)
            .header("x-ms-version", API_VERSION)
            .header("content-length", body.len().to_string());
        for (name, value) in headers {
            builder = builder.header(*name, value);
        }
        let mut request = builder
            .body(Body::new(body))
            .map_err(|e| StorageError::Cloud {
                service: SERVICE,
                operation: "request",
                url: self.endpoint.clone(),
                message: e.to_string(),
            })?;
        self.signer.authorize(&mut request, bearer);
        Ok(request)
    }

    /// Fails early on a missing container or an unreachable endpoint. Credentials allowed to
    /// write blobs but not to read the container's properties (a SAS for blobs only) pass.
    pub async fn check_bucket(&self) -> Result<()> {
        let url = format!("{}?restype=container", self.container_url());
        let reply = self
            .call(
                "get container properties",
                Method::GET,
                &url,
                &[],
                Bytes::new(),
            )
            .await?;
        match (reply.status, error_code(&reply).as_str()) {
            (s, _) if s.is_success() => Ok(()),
            (StatusCode::FORBIDDEN, _) if !authentication_failed(&reply) => Ok(()),
            _ => Err(self.classify("get container properties", "", &reply)),
        }
    }

    /// Turns an unsuccessful answer into the cause a user can act on.
    pub(crate) fn classify(
        &self,
        operation: &'static str,
        key: &str,
        reply: &Reply,
    ) -> StorageError {
        let code = error_code(reply);
        let message = error_message(reply);
        match (reply.status, code.as_str()) {
            (_, "ContainerNotFound") => StorageError::NoSuchBucket {
                bucket: self.container.clone(),
            },
            _ if authentication_failed(reply) => StorageError::Credentials {
                service: SERVICE,
                code,
                message,
                check: "the account name, its key or SAS token, or the workload identity",
            },
            (StatusCode::FORBIDDEN, _) => StorageError::AccessDenied {
                bucket: self.container.clone(),
                code,
                message,
            },
            (StatusCode::PRECONDITION_FAILED, _) | (StatusCode::CONFLICT, "BlobAlreadyExists") => {
                StorageError::PreconditionFailed { url: self.url(key) }
            }
            (StatusCode::NOT_FOUND, _) => StorageError::NotFound { url: self.url(key) },
            (status, _) => StorageError::Cloud {
                service: SERVICE,
                operation,
                url: self.url(key),
                message: format!("{code} (HTTP {}): {message}", status.as_u16()),
            },
        }
    }

    pub async fn head(&self, key: &str) -> Result<Option<ObjectInfo>> {
        let reply = self
            .call(
                "get blob properties",
                Method::HEAD,
                &self.blob_url(key),
                &[],
                Bytes::new(),
            )
            .await?;
        match (reply.status, error_code(&reply).as_str()) {
            (s, _) if s.is_success() => Ok(Some(info_from_headers(key, &reply.headers))),
            (StatusCode::NOT_FOUND, "BlobNotFound" | "") => Ok(None),
            _ => Err(self.classify("get blob properties", key, &reply)),
        }
    }

    pub async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let mut all = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let mut url = format!(
                "{}?restype=container&comp=list&prefix={}",
                self.container_url(),
                encode_query(prefix)
            );
            if let Some(m) = &marker {
                url.push_str(&format!("&marker={}", encode_query(m)));
            }
            let reply = self
                .call("list blobs", Method::GET, &url, &[], Bytes::new())
                .await?;
            if !reply.status.is_success() {
                return Err(self.classify("list blobs", prefix, &reply));
            }
            let page = list::parse(&reply.body).map_err(|message| StorageError::Cloud {
                service: SERVICE,
                operation: "list blobs",
                url: self.url(prefix),
                message: format!("unreadable listing: {message}"),
            })?;
            all.extend(page.blobs);
            match page.next_marker.filter(|m| !m.is_empty()) {
                Some(m) => marker = Some(m),
                None => return Ok(all),
            }
        }
    }

    pub async fn delete(&self, key: &str) -> Result<()> {
        let reply = self
            .call(
                "delete blob",
                Method::DELETE,
                &self.blob_url(key),
                &[],
                Bytes::new(),
            )
            .await?;
        match (reply.status, error_code(&reply).as_str()) {
            (s, _) if s.is_success() => Ok(()),
            (StatusCode::NOT_FOUND, "BlobNotFound") => Ok(()),
            _ => Err(self.classify("delete blob", key, &reply)),
        }
    }

    pub async fn get_small(&self, key: &str) -> Result<Option<Bytes>> {
        let reply = self
            .call(
                "get blob",
                Method::GET,
                &self.blob_url(key),
                &[],
                Bytes::new(),
            )
            .await?;
        match (reply.status, error_code(&reply).as_str()) {
            (s, _) if s.is_success() => Ok(Some(reply.body)),
            (StatusCode::NOT_FOUND, "BlobNotFound") => Ok(None),
            _ => Err(self.classify("get blob", key, &reply)),
        }
    }

    /// One `Put Blob` with the body's Content-MD5, which the service checks.
    pub async fn put_small(&self, key: &str, body: Bytes, content_type: &str) -> Result<()> {
        let md5 = upload::content_md5(&body);
        let headers = [
            ("x-ms-blob-type", "BlockBlob".to_string()),
            ("content-type", content_type.to_string()),
            ("content-md5", md5),
        ];
        let reply = self
            .call("put blob", Method::PUT, &self.blob_url(key), &headers, body)
            .await?;
        if !reply.status.is_success() {
            return Err(self.classify("put blob", key, &reply));
        }
        Ok(())
    }

    pub fn upload(&self, key: &str, options: UploadOptions) -> AzureUpload {
        AzureUpload::new(self.clone(), key, options)
    }

    pub async fn download(&self, key: &str) -> Result<AzureDownload> {
        AzureDownload::start(self.clone(), key).await
    }
}

/// The service's error code: the `x-ms-error-code` header (HEAD answers have no body), else
/// the XML body's `<Code>`.
fn error_code(reply: &Reply) -> String {
    if let Some(code) = reply.header("x-ms-error-code") {
        return code.to_string();
    }
    list::element_text(&reply.body, "Code").unwrap_or_default()
}

fn error_message(reply: &Reply) -> String {
    list::element_text(&reply.body, "Message")
        .map(|m| m.lines().next().unwrap_or("").to_string())
        .unwrap_or_else(|| reply.text().trim().chars().take(500).collect())
}

/// The credentials were not accepted (a wrong key or signature, an expired SAS or token), as
/// opposed to accepted credentials that lack a permission. Azure says `AuthenticationFailed`;
/// Azurite says `AuthorizationFailure` with Azure's message for it.
fn authentication_failed(reply: &Reply) -> bool {
    reply.status == StatusCode::UNAUTHORIZED
        || matches!(
            error_code(reply).as_str(),
            "AuthenticationFailed" | "InvalidAuthenticationInfo"
        )
        || error_message(reply).starts_with("Server failed to authenticate the request")
}

/// What a HEAD or GET says about a blob.
fn info_from_headers(key: &str, headers: &HeaderMap) -> ObjectInfo {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let metadata: BTreeMap<String, String> = headers
        .iter()
        .filter_map(|(name, value)| {
            let name = name.as_str().strip_prefix("x-ms-meta-")?;
            Some((metadata_name_read(name), value.to_str().ok()?.to_string()))
        })
        .collect();
    // A ranged GET's Content-Length is the range's; Content-Range has the whole size.
    let size = header("content-range")
        .and_then(|r| r.rsplit('/').next())
        .and_then(|n| n.parse().ok())
        .or_else(|| header("content-length").and_then(|n| n.parse().ok()))
        .unwrap_or(0);
    ObjectInfo {
        key: key.to_string(),
        size,
        last_modified: header("last-modified")
            .and_then(|t| DateTime::parse_from_rfc2822(t).ok())
            .map(|t| t.with_timezone(&Utc)),
        etag: header("etag").map(str::to_string),
        metadata,
    }
}

/// Azure metadata names are C# identifiers: `-` is stored as `_`.
fn metadata_name_written(name: &str) -> String {
    name.replace('-', "_")
}

fn metadata_name_read(name: &str) -> String {
    name.replace('_', "-")
}
