//! Azure Storage credentials: the account's shared key (coreos' `storage-key`), a SAS token, or
//! workload identity (a federated token file, as AKS mounts it, exchanged with Microsoft Entra
//! for an access token), or none (a public container).
//!
//! Shared Key signs each request (HMAC-SHA256 of its canonical form, the 2009-09-19 scheme
//! every current service version uses); a SAS is a query string added to each URL; workload
//! identity sends a bearer token, cached until a minute before it expires.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use hmac::{Hmac, KeyInit, Mac};
use http::Request;
use serde::Deserialize;
use sha2::Sha256;
use tokio::sync::Mutex;

use crate::http::{Body, HttpClient, encode_query};
use crate::{Result, StorageError};

/// Where Azure credentials come from.
#[derive(Clone, Default)]
pub enum AzureCredentials {
    /// No credentials (a container with public read access).
    Anonymous,
    /// The storage account's key (base64, as the portal shows it).
    SharedKey(String),
    /// A SAS token (the query string, with or without its leading `?`).
    Sas(String),
    /// Workload identity: the federated token in `token_file` is exchanged with
    /// `authority_host` for tenant `tenant_id` and client `client_id` (the variables AKS's
    /// workload identity webhook sets: `AZURE_FEDERATED_TOKEN_FILE`, `AZURE_TENANT_ID`,
    /// `AZURE_CLIENT_ID`, `AZURE_AUTHORITY_HOST`). The ambient identity.
    #[default]
    WorkloadIdentity,
}

impl std::fmt::Debug for AzureCredentials {
    // Never print secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AzureCredentials::Anonymous => "Anonymous",
            AzureCredentials::SharedKey(_) => "SharedKey(..)",
            AzureCredentials::Sas(_) => "Sas(..)",
            AzureCredentials::WorkloadIdentity => "WorkloadIdentity",
        })
    }
}

#[derive(Clone)]
pub(crate) struct Signer {
    account: String,
    kind: Arc<Kind>,
    cached: Arc<Mutex<Option<(String, SystemTime)>>>,
}

enum Kind {
    Anonymous,
    SharedKey(Vec<u8>),
    Sas(String),
    Workload {
        tenant_id: String,
        client_id: String,
        token_file: String,
        authority_host: String,
    },
}

#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    #[serde(default)]
    expires_in: Option<u64>,
}

impl Signer {
    pub fn new(account: &str, credentials: &AzureCredentials) -> Result<Signer> {
        let kind = match credentials {
            AzureCredentials::Anonymous => Kind::Anonymous,
            AzureCredentials::SharedKey(key) => {
                Kind::SharedKey(STANDARD.decode(key.trim()).map_err(|e| {
                    no_credentials(format!("the storage account key is not base64: {e}"))
                })?)
            }
            AzureCredentials::Sas(sas) => Kind::Sas(sas.trim().trim_start_matches('?').to_string()),
            AzureCredentials::WorkloadIdentity => {
                let var = |name: &str| {
                    std::env::var(name).map_err(|_| {
                        no_credentials(format!(
                            "no shared key or SAS was given, and workload identity is not set up ({name} is not set)"
                        ))
                    })
                };
                Kind::Workload {
                    tenant_id: var("AZURE_TENANT_ID")?,
                    client_id: var("AZURE_CLIENT_ID")?,
                    token_file: var("AZURE_FEDERATED_TOKEN_FILE")?,
                    authority_host: std::env::var("AZURE_AUTHORITY_HOST")
                        .unwrap_or_else(|_| "https://login.microsoftonline.com/".into()),
                }
            }
        };
        Ok(Signer {
            account: account.to_string(),
            kind: Arc::new(kind),
            cached: Arc::new(Mutex::new(None)),
        })
    }

    /// The URL with the SAS added, if that is the credential.
    pub fn url(&self, url: String) -> String {
        match &*self.kind {
            Kind::Sas(sas) if !sas.is_empty() => {
                let separator = if url.contains('?') { '&' } else { '?' };
                format!("{url}{separator}{sas}")
            }
            _ => url,
        }
    }

    /// What must be known before requests are built (a fresh bearer token).
    pub async fn prepare(&self, http: &HttpClient) -> Result<Option<String>> {
        let Kind::Workload {
            tenant_id,
            client_id,
            token_file,
            authority_host,
        } = &*self.kind
        else {
            return Ok(None);
        };
        let mut cached = self.cached.lock().await;
        if let Some((token, until)) = &*cached
            && SystemTime::now() < *until
        {
            return Ok(Some(token.clone()));
        }
        // The file is rotated by the kubelet; read it for every exchange.
        let assertion = std::fs::read_to_string(token_file)
            .map_err(|e| no_credentials(format!("cannot read {token_file}: {e}")))?;
        let url = format!(
            "{}/{tenant_id}/oauth2/v2.0/token",
            authority_host.trim_end_matches('/')
        );
        let form = format!(
            "grant_type=client_credentials&client_id={}&scope={}&client_assertion_type={}&client_assertion={}",
            encode_query(client_id),
            encode_query("https://storage.azure.com/.default"),
            encode_query("urn:ietf:params:oauth:client-assertion-type:jwt-bearer"),
            encode_query(assertion.trim()),
        );
        let reply = http
            .send_small("token", || {
                Request::post(&url)
                    .header("content-type", "application/x-www-form-urlencoded")
                    .body(Body::new(Bytes::from(form.clone())))
                    .map_err(|e| no_credentials(e.to_string()))
            })
            .await?;
        if !reply.status.is_success() {
            return Err(StorageError::Credentials {
                service: "Azure Blob",
                code: format!("HTTP {}", reply.status.as_u16()),
                message: reply.text().chars().take(300).collect(),
                check: "the workload identity's federated credential and client ID",
            });
        }
        let answer: TokenAnswer = serde_json::from_slice(&reply.body).map_err(|e| {
            no_credentials(format!("the token endpoint's answer is not a token: {e}"))
        })?;
        let lifetime = Duration::from_secs(answer.expires_in.unwrap_or(300));
        let until = SystemTime::now() + lifetime.saturating_sub(Duration::from_secs(60));
        *cached = Some((answer.access_token.clone(), until));
        Ok(Some(answer.access_token))
    }

    /// Adds `Authorization` to a request whose other headers (`x-ms-date`, `x-ms-version`,
    /// and every header that is signed) are set. `bearer` is what [`prepare`](Self::prepare)
    /// returned.
    pub fn authorize(&self, request: &mut Request<Body>, bearer: Option<&str>) {
        let value = match (&*self.kind, bearer) {
            (Kind::SharedKey(key), _) => {
                let signature = sign(key, &string_to_sign(&self.account, request));
                format!("SharedKey {}:{signature}", self.account)
            }
            (Kind::Workload { .. }, Some(token)) => format!("Bearer {token}"),
            _ => return,
        };
        if let Ok(value) = http::HeaderValue::from_str(&value) {
            request.headers_mut().insert("authorization", value);
        }
    }
}

fn no_credentials(message: String) -> StorageError {
    StorageError::NoCredentials {
        service: "Azure Blob",
        message,
    }
}

fn sign(key: &[u8], text: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(text.as_bytes());
    STANDARD.encode(mac.finalize().into_bytes())
}

/// The Shared Key string to sign: the verb, eleven standard headers, the canonicalized
/// `x-ms-` headers and the canonicalized resource.
fn string_to_sign(account: &str, request: &Request<Body>) -> String {
    let headers = request.headers();
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    // Content-Length is signed empty when it is zero (service version 2015-02-21 and later).
    let length = match header("content-length").as_str() {
        "0" => String::new(),
        other => other.to_string(),
    };
    let mut text = format!(
        "{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n",
        request.method().as_str(),
        header("content-encoding"),
        header("content-language"),
        length,
        header("content-md5"),
        header("content-type"),
        header("date"),
        header("if-modified-since"),
        header("if-match"),
        header("if-none-match"),
        header("if-unmodified-since"),
        header("range"),
    );
    let mut ms: Vec<(String, String)> = headers
        .iter()
        .filter(|(name, _)| name.as_str().starts_with("x-ms-"))
        .map(|(name, value)| {
            (
                name.as_str().to_string(),
                value.to_str().unwrap_or("").trim().to_string(),
            )
        })
        .collect();
    ms.sort();
    for (name, value) in ms {
        text.push_str(&format!("{name}:{value}\n"));
    }
    text.push_str(&canonicalized_resource(account, request.uri()));
    text
}

/// `/account/path` then each query parameter, lowercased and sorted, as `\nname:value`.
fn canonicalized_resource(account: &str, uri: &http::Uri) -> String {
    let mut text = format!("/{account}{}", uri.path());
    let mut params: Vec<(String, String)> = uri
        .query()
        .map(|q| {
            url::form_urlencoded::parse(q.as_bytes())
                .map(|(k, v)| (k.to_lowercase(), v.into_owned()))
                .collect()
        })
        .unwrap_or_default();
    params.sort();
    let mut merged: Vec<(String, Vec<String>)> = Vec::new();
    for (name, value) in params {
        match merged.last_mut() {
            Some((last, values)) if *last == name => values.push(value),
            _ => merged.push((name, vec![value])),
        }
    }
    for (name, values) in merged {
        text.push_str(&format!("\n{name}:{}", values.join(",")));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_canonical_resource_lists_the_path_and_sorted_query() {
        let uri: http::Uri =
            "http://127.0.0.1:10000/acct/c/a%20b?restype=container&comp=list&prefix=x%2Fy"
                .parse()
                .unwrap();
        assert_eq!(
            canonicalized_resource("acct", &uri),
            "/acct/acct/c/a%20b\ncomp:list\nprefix:x/y\nrestype:container"
        );
    }

    #[test]
    fn the_string_to_sign_has_the_signed_headers_in_order() {
        let request =
            Request::put("https://acct.blob.core.windows.net/c/k?comp=block&blockid=QQ%3D%3D")
                .header("content-length", "5")
                .header("content-md5", "md5")
                .header("x-ms-version", "2021-12-02")
                .header("x-ms-date", "Sun, 29 Nov 2026 14:00:00 GMT")
                .body(Body::default())
                .unwrap();
        assert_eq!(
            string_to_sign("acct", &request),
            "PUT\n\n\n5\nmd5\n\n\n\n\n\n\n\nx-ms-date:Sun, 29 Nov 2026 14:00:00 GMT\nx-ms-version:2021-12-02\n/acct/c/k\nblockid:QQ==\ncomp:block"
        );
    }

    #[test]
    fn a_key_that_is_not_base64_is_refused_with_the_reason() {
        let err = Signer::new("acct", &AzureCredentials::SharedKey("not base64!".into()))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("not base64"), "{err}");
    }
}
