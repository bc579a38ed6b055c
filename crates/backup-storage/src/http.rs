//! The HTTP client of the GCS and Azure backends: hyper over rustls with aws-lc-rs (the
//! workspace's one crypto provider), the system's roots plus an optional CA bundle, and retries
//! of the requests that may be repeated.
//!
//! The S3 backend has its own client inside the AWS SDK; these two services speak plain REST,
//! which is a few requests each, so they are written here rather than pulling in a second HTTP
//! stack (see docs/concepts/design-decisions.md).

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::{Result, StorageError};

pub(crate) type Body = Full<Bytes>;

/// How long one attempt of one request may take: a chunk on a slow link may take long; a dead
/// connection is found by the connect timeout or the server's reset.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(600);

/// How long a body may send nothing before its connection counts as dead (a half-open
/// connection would otherwise hang a download for good).
const BODY_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// One service endpoint's client.
#[derive(Clone)]
pub(crate) struct HttpClient {
    client: Client<HttpsConnector<HttpConnector>, Body>,
    /// "GCS" or "Azure Blob", for messages.
    pub service: &'static str,
    /// The endpoint, for messages.
    pub endpoint: Arc<str>,
    max_attempts: u32,
}

/// A response whose body was read whole (small bodies only: errors, JSON, XML listings).
pub(crate) struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// The most a small body may hold: a listing page or an error document, never object data.
const SMALL_BODY_LIMIT: usize = 32 << 20;

impl HttpClient {
    pub fn new(
        service: &'static str,
        endpoint: &str,
        ca_bundle_pem: Option<&[u8]>,
        max_attempts: u32,
    ) -> Result<HttpClient> {
        let mut roots = rustls::RootCertStore::empty();
        // Certificates the system store holds but rustls cannot parse are skipped, as curl does.
        let native = rustls_native_certs::load_native_certs();
        roots.add_parsable_certificates(native.certs);
        if let Some(pem) = ca_bundle_pem {
            use rustls::pki_types::CertificateDer;
            use rustls::pki_types::pem::PemObject;
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| StorageError::CaBundle {
                    path: "(CA bundle)".into(),
                    message: e.to_string(),
                })?;
                roots.add(cert).map_err(|e| StorageError::CaBundle {
                    path: "(CA bundle)".into(),
                    message: e.to_string(),
                })?;
            }
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| StorageError::Tls {
                service,
                endpoint: endpoint.to_string(),
                message: e.to_string(),
            })?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(Duration::from_secs(10)));
        http.set_nodelay(true);
        http.set_keepalive(Some(Duration::from_secs(30)));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Ok(HttpClient {
            client: Client::builder(TokioExecutor::new()).build(connector),
            service,
            endpoint: endpoint.into(),
            max_attempts: max_attempts.max(1),
        })
    }

    /// Sends the request `make` builds, once per attempt: connection failures, timeouts, 408,
    /// 429 and 5xx are retried with backoff, up to the configured attempts. Any other answer is
    /// returned as it is, for the caller to classify. Only idempotent requests (or ones whose
    /// repeat the service recognises, like a resumable chunk) may be sent this way.
    pub async fn send(
        &self,
        operation: &'static str,
        make: impl Fn() -> Result<Request<Body>>,
    ) -> Result<Response<Incoming>> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let last = attempt >= self.max_attempts;
            let request = make()?;
            match tokio::time::timeout(ATTEMPT_TIMEOUT, self.client.request(request)).await {
                Ok(Ok(response)) if !retryable(response.status()) || last => return Ok(response),
                Ok(Ok(response)) => {
                    tracing::debug!(service = self.service, operation, status = %response.status(), attempt, "retrying");
                }
                Ok(Err(e)) if last => return Err(self.transport_error(operation, &e)),
                Ok(Err(e)) => {
                    tracing::debug!(service = self.service, operation, error = %error_chain(&e), attempt, "retrying");
                }
                Err(_) if last => {
                    return Err(StorageError::Unreachable {
                        service: self.service,
                        endpoint: self.endpoint.to_string(),
                        message: format!("{operation} timed out"),
                    });
                }
                Err(_) => {}
            }
            tokio::time::sleep(backoff(attempt)).await;
        }
    }

    /// One attempt, its whole (small) answer read: for requests whose repeat must be decided
    /// by the caller (a resumable chunk).
    pub async fn send_once(
        &self,
        operation: &'static str,
        make: impl Fn() -> Result<Request<Body>>,
    ) -> Result<Reply> {
        let request = make()?;
        match tokio::time::timeout(ATTEMPT_TIMEOUT, self.client.request(request)).await {
            Ok(Ok(response)) => self.read_small(operation, response).await,
            Ok(Err(e)) => Err(self.transport_error(operation, &e)),
            Err(_) => Err(StorageError::Unreachable {
                service: self.service,
                endpoint: self.endpoint.to_string(),
                message: format!("{operation} timed out"),
            }),
        }
    }

    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// [`send`](Self::send), then reads the whole (small) body.
    pub async fn send_small(
        &self,
        operation: &'static str,
        make: impl Fn() -> Result<Request<Body>>,
    ) -> Result<Reply> {
        let response = self.send(operation, make).await?;
        self.read_small(operation, response).await
    }

    pub async fn read_small(
        &self,
        operation: &'static str,
        response: Response<Incoming>,
    ) -> Result<Reply> {
        let (parts, mut body) = response.into_parts();
        let mut all = BytesMut::new();
        let idle = || StorageError::Unreachable {
            service: self.service,
            endpoint: self.endpoint.to_string(),
            message: format!("{operation}: no data for {} s", BODY_IDLE_TIMEOUT.as_secs()),
        };
        while let Some(frame) = tokio::time::timeout(BODY_IDLE_TIMEOUT, body.frame())
            .await
            .map_err(|_| idle())?
        {
            let frame = frame.map_err(|e| self.transport_error(operation, &e))?;
            if let Ok(data) = frame.into_data() {
                if all.len() + data.len() > SMALL_BODY_LIMIT {
                    return Err(StorageError::Cloud {
                        service: self.service,
                        operation,
                        url: self.endpoint.to_string(),
                        message: format!("the answer is larger than {SMALL_BODY_LIMIT} bytes"),
                    });
                }
                all.extend_from_slice(&data);
            }
        }
        Ok(Reply {
            status: parts.status,
            headers: parts.headers,
            body: all.freeze(),
        })
    }

    /// A connection-level failure: TLS, unreachable, or other.
    pub fn transport_error(
        &self,
        operation: &'static str,
        e: &(dyn std::error::Error + 'static),
    ) -> StorageError {
        let detail = error_chain(e);
        let lower = detail.to_lowercase();
        if lower.contains("certificate") || lower.contains("tls") || lower.contains("handshake") {
            StorageError::Tls {
                service: self.service,
                endpoint: self.endpoint.to_string(),
                message: detail,
            }
        } else {
            StorageError::Unreachable {
                service: self.service,
                endpoint: self.endpoint.to_string(),
                message: format!("{operation}: {detail}"),
            }
        }
    }
}

/// Consecutive failed resumes of a download before giving up.
const MAX_RESUMES: u32 = 8;

/// An object's body read chunk by chunk, reopened from the byte reached after a dropped
/// connection (the caller's `reopen` pins the read to the object's version, so a replaced
/// object is never spliced into the old one).
pub(crate) struct ResumingBody {
    body: Option<Incoming>,
    offset: u64,
    size: u64,
}

impl ResumingBody {
    pub fn new(body: Incoming, size: u64) -> ResumingBody {
        ResumingBody {
            body: Some(body),
            offset: 0,
            size,
        }
    }

    /// The next chunk, or `None` at the end. `reopen(offset)` starts a read from `offset`; its
    /// `ChangedWhileReading` ends the download, other failures are retried.
    pub async fn next_chunk<F, Fut>(
        &mut self,
        service: &'static str,
        url: &str,
        reopen: F,
    ) -> Result<Option<Bytes>>
    where
        F: Fn(u64) -> Fut,
        Fut: Future<Output = Result<Incoming>>,
    {
        let mut failures = 0;
        loop {
            let frame = match self.body.as_mut() {
                // `Err(None)`: the body sent nothing for too long.
                Some(body) => match tokio::time::timeout(BODY_IDLE_TIMEOUT, body.frame()).await {
                    Ok(frame) => frame.map(|f| f.map_err(Some)),
                    Err(_) => Some(Err(None)),
                },
                None => None,
            };
            let cause = match frame {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) if data.is_empty() => continue,
                    Ok(data) => {
                        self.offset += data.len() as u64;
                        if self.offset > self.size {
                            return Err(StorageError::Cloud {
                                service,
                                operation: "download",
                                url: url.to_string(),
                                message: format!(
                                    "the server sent more than the object's {} bytes",
                                    self.size
                                ),
                            });
                        }
                        return Ok(Some(data));
                    }
                    Err(_) => continue, // trailers
                },
                None if self.offset >= self.size => return Ok(None),
                None => "connection closed early".to_string(),
                Some(Err(Some(e))) => error_chain(&e),
                Some(Err(None)) => format!("no data for {} s", BODY_IDLE_TIMEOUT.as_secs()),
            };
            if failures >= MAX_RESUMES {
                return Err(StorageError::Cloud {
                    service,
                    operation: "download",
                    url: url.to_string(),
                    message: format!(
                        "download stopped at byte {} of {} and {failures} resumes failed: {cause}",
                        self.offset, self.size
                    ),
                });
            }
            tracing::warn!(%url, offset = self.offset, %cause, "resuming download");
            failures += 1;
            tokio::time::sleep(backoff(failures)).await;
            self.body = match reopen(self.offset).await {
                Ok(body) => Some(body),
                Err(e @ StorageError::ChangedWhileReading { .. }) => return Err(e),
                Err(e) => {
                    tracing::warn!(%url, error = %e, "resume attempt failed");
                    None
                }
            };
        }
    }
}

fn retryable(status: StatusCode) -> bool {
    status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || status.is_server_error()
}

/// Exponential backoff: 200 ms, 400 ms, ... at most 5 s.
pub(crate) fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(200u64.saturating_mul(1 << attempt.clamp(1, 6).saturating_sub(1)))
        .min(Duration::from_secs(5))
}

/// An error and its sources on one line.
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}

/// Percent-encodes an object name for a URL path, keeping `/` (Azure) or not (GCS object names
/// are one path segment).
pub(crate) fn encode_path(name: &str, keep_slash: bool) -> String {
    use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
    const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    const UNRESERVED_AND_SLASH: &AsciiSet = &UNRESERVED.remove(b'/');
    let set = if keep_slash {
        UNRESERVED_AND_SLASH
    } else {
        UNRESERVED
    };
    utf8_percent_encode(name, set).to_string()
}

/// Percent-encodes a query value.
pub(crate) fn encode_query(value: &str) -> String {
    encode_path(value, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        assert_eq!(backoff(1), Duration::from_millis(200));
        assert_eq!(backoff(2), Duration::from_millis(400));
        assert_eq!(backoff(20), Duration::from_secs(5));
    }

    #[test]
    fn object_names_are_encoded_for_each_service() {
        assert_eq!(encode_path("a/b c+d", false), "a%2Fb%20c%2Bd");
        assert_eq!(encode_path("a/b c+d", true), "a/b%20c%2Bd");
    }
}
