//! S3 backend (aws-sdk-s3). Works with AWS and S3-compatible servers (Garage, MinIO, Ceph RGW):
//! endpoint override, path-style addressing, custom CA bundle, and request checksums only when
//! an operation requires them, because several S3-compatible servers reject the SDK's default
//! trailing checksums.

mod checksum;
mod download;
mod error;
pub(crate) mod sse;
mod upload;

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, SystemTime};

use aws_config::profile::ProfileFileCredentialsProvider;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region};
use aws_runtime::env_config::file::{EnvConfigFileKind, EnvConfigFiles};
use aws_sdk_s3::Client;
use aws_sdk_s3::config::{RequestChecksumCalculation, ResponseChecksumValidation};
use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;
use chrono::{DateTime, Utc};

pub use download::S3Download;
pub use sse::{CustomerKey, ServerSideEncryption};
pub use upload::S3Upload;

use crate::object::{ObjectInfo, UploadOptions};
use crate::{Result, StorageError};
use error::classify;

/// Where S3 credentials come from.
#[derive(Clone, Default)]
pub enum S3Credentials {
    /// The AWS default chain: environment, shared files (`AWS_SHARED_CREDENTIALS_FILE`,
    /// `AWS_CONFIG_FILE`), web identity (IRSA), ECS and instance profile.
    #[default]
    DefaultChain,
    /// Fixed keys.
    Static {
        access_key_id: String,
        secret_access_key: String,
        session_token: Option<String>,
    },
    /// Contents of AWS shared files, as in the coreos Secret (keys `credentials` and `config`).
    /// With `credentials`, the keys come from these files only (none there is an error, never
    /// the environment's or the machine's identity). Without it, the default chain supplies the
    /// keys (e.g. the node's IAM role).
    SharedFiles {
        credentials: Option<String>,
        config: Option<String>,
        profile: Option<String>,
    },
}

impl fmt::Debug for S3Credentials {
    // Never print secrets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            S3Credentials::DefaultChain => f.write_str("DefaultChain"),
            S3Credentials::Static { access_key_id, .. } => {
                write!(f, "Static {{ access_key_id: {access_key_id:?}, .. }}")
            }
            S3Credentials::SharedFiles { profile, .. } => {
                write!(f, "SharedFiles {{ profile: {profile:?}, .. }}")
            }
        }
    }
}

/// How to reach S3.
#[derive(Debug, Clone)]
pub struct S3Options {
    /// Endpoint override for S3-compatible servers; `None` means AWS (or `AWS_ENDPOINT_URL`).
    pub endpoint: Option<String>,
    /// Region; falls back to the AWS environment/config, then `us-east-1`.
    pub region: Option<String>,
    /// `https://endpoint/bucket/key` instead of `https://bucket.endpoint/key`.
    pub force_path_style: bool,
    /// Extra trusted CA certificates (PEM), added to the system roots.
    pub ca_bundle_pem: Option<Vec<u8>>,
    pub credentials: S3Credentials,
    /// Attempts per request (each part is retried on its own), with exponential backoff.
    pub max_attempts: u32,
    /// How long to keep trying to abort a failed multipart upload (the server may be restarting).
    pub abort_retry_window: Duration,
    /// Server-side encryption asked of every write (and, for SSE-C, every read).
    pub server_side_encryption: ServerSideEncryption,
}

impl Default for S3Options {
    fn default() -> Self {
        S3Options {
            endpoint: None,
            region: None,
            force_path_style: false,
            ca_bundle_pem: None,
            credentials: S3Credentials::DefaultChain,
            max_attempts: 5,
            abort_retry_window: Duration::from_secs(60),
            server_side_encryption: ServerSideEncryption::default(),
        }
    }
}

impl S3Options {
    /// An S3-compatible server (Garage, MinIO, Ceph RGW) at `endpoint` with static keys and
    /// path-style addressing, which such servers usually need.
    pub fn s3_compatible(
        endpoint: &str,
        region: &str,
        access_key_id: &str,
        secret_access_key: &str,
    ) -> Self {
        S3Options {
            endpoint: Some(endpoint.to_string()),
            region: Some(region.to_string()),
            force_path_style: true,
            credentials: S3Credentials::Static {
                access_key_id: access_key_id.to_string(),
                secret_access_key: secret_access_key.to_string(),
                session_token: None,
            },
            ..S3Options::default()
        }
    }

    /// Reads a CA bundle file into `ca_bundle_pem`.
    pub fn with_ca_file(mut self, path: &std::path::Path) -> Result<Self> {
        let pem = std::fs::read(path).map_err(|e| StorageError::CaBundle {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
            return Err(StorageError::CaBundle {
                path: path.to_path_buf(),
                message: "no PEM certificate in the file".into(),
            });
        }
        self.ca_bundle_pem = Some(pem);
        Ok(self)
    }
}

/// One bucket on one S3 endpoint.
#[derive(Clone)]
pub struct S3Store {
    client: Client,
    bucket: String,
    /// For messages: the endpoint we talk to.
    endpoint: String,
    abort_retry_window: Duration,
    checks: checksum::ServerChecks,
    /// TLS to the endpoint (AWS itself, or an `https://` endpoint).
    tls: bool,
    sse: ServerSideEncryption,
}

impl fmt::Debug for S3Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "S3Store({} bucket {})", self.endpoint, self.bucket)
    }
}

impl S3Store {
    pub async fn connect(bucket: &str, options: &S3Options) -> Result<S3Store> {
        let retry = RetryConfig::standard()
            .with_max_attempts(options.max_attempts.max(1))
            .with_initial_backoff(Duration::from_millis(200))
            .with_max_backoff(Duration::from_secs(5));
        // No total deadline: a part on a slow link may take long. Connect failures are quick.
        let timeouts = TimeoutConfig::builder()
            .connect_timeout(Duration::from_secs(10))
            .operation_attempt_timeout(Duration::from_secs(600))
            .build();
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .retry_config(retry)
            .timeout_config(timeouts);
        match &options.credentials {
            S3Credentials::DefaultChain => {}
            S3Credentials::Static {
                access_key_id,
                secret_access_key,
                session_token,
            } => {
                loader = loader.credentials_provider(aws_credential_types::Credentials::new(
                    access_key_id,
                    secret_access_key,
                    session_token.clone(),
                    None,
                    "static",
                ));
            }
            S3Credentials::SharedFiles {
                credentials,
                config,
                profile,
            } => {
                let mut files = EnvConfigFiles::builder();
                if let Some(config) = config {
                    files = files.with_contents(EnvConfigFileKind::Config, config.clone());
                }
                if let Some(credentials) = credentials {
                    files =
                        files.with_contents(EnvConfigFileKind::Credentials, credentials.clone());
                }
                let files = files.build();
                if config.is_some() || credentials.is_some() {
                    loader = loader.profile_files(files.clone());
                }
                if let Some(profile) = profile {
                    loader = loader.profile_name(profile);
                }
                // With a `credentials` file, keys come from these files only. The default chain
                // would go on to the environment, web identity and the instance profile when
                // the file holds no keys (or before it, for environment keys): the identity
                // of whoever runs this, not of the Secret's owner.
                if credentials.is_some() {
                    let mut provider =
                        ProfileFileCredentialsProvider::builder().profile_files(files);
                    if let Some(profile) = profile {
                        provider = provider.profile_name(profile);
                    }
                    loader = loader.credentials_provider(provider.build());
                }
            }
        }
        if let Some(region) = &options.region {
            loader = loader.region(Region::new(region.clone()));
        }
        if let Some(endpoint) = &options.endpoint {
            loader = loader.endpoint_url(endpoint);
        }
        if let Some(pem) = &options.ca_bundle_pem {
            loader = loader.http_client(https_client_trusting(pem)?);
        }
        let sdk = loader.load().await;
        let mut config = aws_sdk_s3::config::Builder::from(&sdk)
            .force_path_style(options.force_path_style)
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired);
        if sdk.region().is_none() {
            config = config.region(Region::new("us-east-1"));
        }
        let endpoint = sdk
            .endpoint_url()
            .map(str::to_string)
            .unwrap_or_else(|| "AWS S3".to_string());
        Ok(S3Store {
            client: Client::from_conf(config.build()),
            bucket: bucket.to_string(),
            endpoint,
            abort_retry_window: options.abort_retry_window,
            checks: checksum::ServerChecks::default(),
            tls: sdk
                .endpoint_url()
                .is_none_or(|url| url.starts_with("https://")),
            sse: options.server_side_encryption.clone(),
        })
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// Payloads may skip SigV4's sha256 when integrity is had otherwise: TLS protects them in
    /// transit, and the server has shown it checks each part's CRC32C. Over plain HTTP the
    /// signature is what stops someone on the path from changing a part and its CRC together.
    pub(crate) fn unsigned_payloads(&self) -> bool {
        self.tls && self.checks.confirmed()
    }

    /// The underlying SDK client (tests use it to look at the server directly).
    pub fn client(&self) -> &Client {
        &self.client
    }

    pub(crate) fn url(&self, key: &str) -> String {
        format!("s3://{}/{key}", self.bucket)
    }

    /// Fails early on a missing bucket or an unreachable endpoint. A 403 is accepted: write-only
    /// credentials may not be allowed to HEAD the bucket, and a real credential problem shows on
    /// the first write with the server's own error code.
    pub async fn check_bucket(&self) -> Result<()> {
        match self.client.head_bucket().bucket(&self.bucket).send().await {
            Ok(_) => Ok(()),
            Err(err) => match self.classify(err, "HeadBucket", "") {
                StorageError::NotFound { .. } => Err(StorageError::NoSuchBucket {
                    bucket: self.bucket.clone(),
                }),
                StorageError::AccessDenied { .. } | StorageError::Credentials { .. } => Ok(()),
                other => Err(other),
            },
        }
    }

    pub(crate) fn classify<E>(
        &self,
        err: aws_sdk_s3::error::SdkError<E, aws_smithy_runtime_api::http::Response>,
        operation: &'static str,
        key: &str,
    ) -> StorageError
    where
        E: aws_sdk_s3::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        classify(err, operation, &self.url(key), &self.bucket, &self.endpoint)
    }

    pub fn upload(&self, key: &str, options: UploadOptions) -> S3Upload {
        S3Upload::new(self.clone(), key, options)
    }

    pub async fn download(&self, key: &str) -> Result<S3Download> {
        S3Download::start(self.clone(), key).await
    }

    pub async fn put_small(&self, key: &str, body: Bytes, content_type: &str) -> Result<()> {
        let request = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type(content_type)
            .body(ByteStream::from(body));
        sse::sse_write!(request, &self.sse)
            .send()
            .await
            .map_err(|e| self.classify(e, "PutObject", key))?;
        Ok(())
    }

    pub async fn get_small(&self, key: &str) -> Result<Option<Bytes>> {
        let request = self.client.get_object().bucket(&self.bucket).key(key);
        let out = match sse::sse_customer!(request, &self.sse).send().await {
            Ok(out) => out,
            Err(err) => {
                return match self.classify(err, "GetObject", key) {
                    StorageError::NotFound { .. } => Ok(None),
                    other => Err(other),
                };
            }
        };
        let body = out.body.collect().await.map_err(|e| StorageError::S3 {
            operation: "GetObject",
            url: self.url(key),
            message: e.to_string(),
        })?;
        Ok(Some(body.into_bytes()))
    }

    pub async fn head(&self, key: &str) -> Result<Option<ObjectInfo>> {
        let request = self.client.head_object().bucket(&self.bucket).key(key);
        match sse::sse_customer!(request, &self.sse).send().await {
            Ok(out) => Ok(Some(object_info(
                key,
                out.content_length(),
                out.last_modified(),
                out.e_tag(),
                out.metadata(),
            ))),
            Err(err) => match self.classify(err, "HeadObject", key) {
                StorageError::NotFound { .. } => Ok(None),
                other => Err(other),
            },
        }
    }

    pub async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .into_paginator()
            .send();
        let mut objects = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| self.classify(e, "ListObjectsV2", prefix))?;
            for object in page.contents() {
                objects.push(ObjectInfo {
                    key: object.key().unwrap_or_default().to_string(),
                    size: object.size().unwrap_or(0).max(0) as u64,
                    last_modified: object.last_modified().and_then(to_chrono),
                    etag: object.e_tag().map(str::to_string),
                    metadata: BTreeMap::new(),
                });
            }
        }
        Ok(objects)
    }

    pub async fn delete(&self, key: &str) -> Result<()> {
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| self.classify(e, "DeleteObject", key))?;
        Ok(())
    }

    pub async fn clean_incomplete(
        &self,
        prefix: &str,
        older_than: Duration,
        owned: &(dyn Fn(&str) -> bool + Sync),
    ) -> Result<usize> {
        let cutoff = SystemTime::now() - older_than;
        let (mut key_marker, mut id_marker) = (None::<String>, None::<String>);
        let mut stale = Vec::new();
        loop {
            let page = self
                .client
                .list_multipart_uploads()
                .bucket(&self.bucket)
                .prefix(prefix)
                .set_key_marker(key_marker.take())
                .set_upload_id_marker(id_marker.take())
                .send()
                .await
                .map_err(|e| self.classify(e, "ListMultipartUploads", prefix))?;
            for upload in page.uploads() {
                let started = upload
                    .initiated()
                    .and_then(|t| SystemTime::try_from(*t).ok())
                    .unwrap_or(SystemTime::UNIX_EPOCH);
                if let (Some(key), Some(id), true) =
                    (upload.key(), upload.upload_id(), started <= cutoff)
                    && owned(key)
                {
                    stale.push((key.to_string(), id.to_string()));
                }
            }
            if !page.is_truncated().unwrap_or(false) {
                break;
            }
            key_marker = page.next_key_marker().map(str::to_string);
            id_marker = page.next_upload_id_marker().map(str::to_string);
            if key_marker.is_none() {
                break;
            }
        }
        for (key, id) in &stale {
            self.abort_multipart(key, id).await?;
        }
        Ok(stale.len())
    }

    /// Aborts a multipart upload, retrying for `abort_retry_window` so that a server that is
    /// restarting still gets the abort and keeps no orphaned parts.
    pub(crate) async fn abort_multipart(&self, key: &str, upload_id: &str) -> Result<()> {
        let started = std::time::Instant::now();
        let mut attempt = 0;
        loop {
            let result = self
                .client
                .abort_multipart_upload()
                .bucket(&self.bucket)
                .key(key)
                .upload_id(upload_id)
                .send()
                .await;
            let err = match result {
                // Parts still in flight when the abort arrived may land after it and keep the
                // upload (S3 documents this; seen on Garage): abort until it is gone.
                Ok(_) => match self.upload_remains(key, upload_id).await {
                    Ok(false) => return Ok(()),
                    Ok(true) => StorageError::S3 {
                        operation: "AbortMultipartUpload",
                        url: self.url(key),
                        message: "the upload was still there after the abort".into(),
                    },
                    Err(err) => err,
                },
                Err(err) => self.classify(err, "AbortMultipartUpload", key),
            };
            // Already gone (aborted before, or completed): nothing is left behind.
            if matches!(err, StorageError::NotFound { .. }) {
                return Ok(());
            }
            if started.elapsed() >= self.abort_retry_window || !err.is_transient() {
                return Err(err);
            }
            tokio::time::sleep(backoff(attempt)).await;
            attempt += 1;
        }
    }
}

impl S3Store {
    /// Whether upload `upload_id` of `key` still exists, once parts that were in flight had a
    /// moment to land.
    async fn upload_remains(&self, key: &str, upload_id: &str) -> Result<bool> {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let listed = self
            .client
            .list_parts()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(upload_id)
            .send()
            .await;
        match listed {
            Ok(_) => Ok(true),
            Err(err) => match self.classify(err, "ListParts", key) {
                StorageError::NotFound { .. } => Ok(false),
                other => Err(other),
            },
        }
    }
}

/// HEAD and GET answer with the same fields on different types.
pub(super) fn object_info(
    key: &str,
    length: Option<i64>,
    last_modified: Option<&aws_smithy_types::DateTime>,
    etag: Option<&str>,
    metadata: Option<&std::collections::HashMap<String, String>>,
) -> ObjectInfo {
    ObjectInfo {
        key: key.to_string(),
        size: length.unwrap_or(0).max(0) as u64,
        last_modified: last_modified.and_then(to_chrono),
        etag: etag.map(str::to_string),
        metadata: metadata
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default(),
    }
}

fn to_chrono(t: &aws_smithy_types::DateTime) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(t.secs(), t.subsec_nanos())
}

/// An HTTPS client that trusts the system roots plus `pem`.
fn https_client_trusting(
    pem: &[u8],
) -> Result<aws_smithy_runtime_api::client::http::SharedHttpClient> {
    use aws_smithy_http_client::tls::{self, TlsContext, TrustStore, rustls_provider::CryptoMode};
    let context = TlsContext::builder()
        .with_trust_store(TrustStore::default().with_pem_certificate(pem.to_vec()))
        .build()
        .map_err(|e| StorageError::CaBundle {
            path: "<ca bundle>".into(),
            message: e.to_string(),
        })?;
    Ok(aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::AwsLc))
        .tls_context(context)
        .build_https())
}

/// Retry pacing shared by the S3 abort and resume loops.
pub(crate) fn backoff(attempt: u32) -> Duration {
    Duration::from_millis((250u64 << attempt.min(4)).min(4000))
}
