//! Google credentials: a service account's key file (the JSON a user downloads, as GCS users
//! keep it in a Secret), a fixed access token (coreos' `access-token` Secret key), the GKE
//! metadata server (workload identity, the node's service account), or none (an emulator, a
//! public bucket).
//!
//! A key file is exchanged for an access token by the OAuth 2.0 JWT bearer flow: a JWT signed
//! with the key (RS256) is posted to the key's `token_uri`. Tokens are cached until a minute
//! before they expire.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use http::Request;
use serde::Deserialize;
use tokio::sync::Mutex;

use crate::http::{Body, HttpClient};
use crate::{Result, StorageError};

const SCOPE: &str = "https://www.googleapis.com/auth/devstorage.read_write";
const METADATA_TOKEN_URL: &str =
    "http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/token";

/// Where GCS credentials come from.
#[derive(Clone, Default)]
pub enum GcsCredentials {
    /// No credentials: requests are sent without a token (an emulator, a public bucket).
    Anonymous,
    /// A service account key file's contents (JSON, `"type": "service_account"`).
    ServiceAccountKey(String),
    /// A fixed OAuth access token (coreos' `access-token`); it is not refreshed.
    AccessToken(String),
    /// The metadata server of the machine or pod (GKE workload identity, the node's service
    /// account): the ambient identity.
    #[default]
    MetadataServer,
}

impl std::fmt::Debug for GcsCredentials {
    // Never print secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GcsCredentials::Anonymous => "Anonymous",
            GcsCredentials::ServiceAccountKey(_) => "ServiceAccountKey(..)",
            GcsCredentials::AccessToken(_) => "AccessToken(..)",
            GcsCredentials::MetadataServer => "MetadataServer",
        })
    }
}

/// The fields of a service account key file this needs.
#[derive(Deserialize)]
struct ServiceAccountKey {
    #[serde(rename = "type")]
    kind: String,
    client_email: String,
    private_key: String,
    #[serde(default = "default_token_uri")]
    token_uri: String,
}

fn default_token_uri() -> String {
    "https://oauth2.googleapis.com/token".into()
}

#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    #[serde(default)]
    expires_in: Option<u64>,
}

/// Hands out access tokens, refreshing them as they expire.
#[derive(Clone)]
pub(crate) struct TokenSource {
    kind: Arc<Kind>,
    cached: Arc<Mutex<Option<(String, SystemTime)>>>,
}

enum Kind {
    Anonymous,
    Fixed(String),
    Key {
        email: String,
        key: aws_lc_rs::signature::RsaKeyPair,
        token_uri: String,
    },
    Metadata,
}

impl TokenSource {
    pub fn new(credentials: &GcsCredentials) -> Result<TokenSource> {
        let kind = match credentials {
            GcsCredentials::Anonymous => Kind::Anonymous,
            GcsCredentials::AccessToken(t) => Kind::Fixed(t.trim().to_string()),
            GcsCredentials::MetadataServer => Kind::Metadata,
            GcsCredentials::ServiceAccountKey(json) => {
                let key: ServiceAccountKey =
                    serde_json::from_str(json).map_err(|e| bad_key(&e.to_string()))?;
                if key.kind != "service_account" {
                    return Err(bad_key(&format!(
                        "its type is {:?}; a service account key (\"service_account\") is needed",
                        key.kind
                    )));
                }
                // The key is POSTed a signed assertion to this address: only to a TLS
                // endpoint, never to a plain-HTTP one a key file could name.
                if !key.token_uri.starts_with("https://") {
                    return Err(bad_key(&format!(
                        "its token_uri {:?} is not an https:// URL",
                        key.token_uri
                    )));
                }
                Kind::Key {
                    email: key.client_email,
                    key: rsa_key(&key.private_key)?,
                    token_uri: key.token_uri,
                }
            }
        };
        Ok(TokenSource {
            kind: Arc::new(kind),
            cached: Arc::new(Mutex::new(None)),
        })
    }

    /// The `Authorization` header value, or `None` without credentials.
    pub async fn authorization(&self, http: &HttpClient) -> Result<Option<String>> {
        let token = match &*self.kind {
            Kind::Anonymous => return Ok(None),
            Kind::Fixed(token) => token.clone(),
            Kind::Key { .. } | Kind::Metadata => {
                let mut cached = self.cached.lock().await;
                match &*cached {
                    Some((token, until)) if SystemTime::now() < *until => token.clone(),
                    _ => {
                        let (token, lifetime) = self.fetch(http).await?;
                        // Refreshed a minute early, so a token never expires mid-request.
                        let until =
                            SystemTime::now() + lifetime.saturating_sub(Duration::from_secs(60));
                        *cached = Some((token.clone(), until));
                        token
                    }
                }
            }
        };
        Ok(Some(format!("Bearer {token}")))
    }

    async fn fetch(&self, http: &HttpClient) -> Result<(String, Duration)> {
        let reply = match &*self.kind {
            Kind::Key {
                email,
                key,
                token_uri,
            } => {
                let assertion = signed_jwt(email, key, token_uri, SystemTime::now())?;
                let form = format!(
                    "grant_type={}&assertion={assertion}",
                    crate::http::encode_query("urn:ietf:params:oauth:grant-type:jwt-bearer")
                );
                http.send_small("token", || {
                    Request::post(token_uri)
                        .header("content-type", "application/x-www-form-urlencoded")
                        .body(Body::new(Bytes::from(form.clone())))
                        .map_err(|e| bad_request(&e))
                })
                .await?
            }
            Kind::Metadata => {
                http.send_small("token", || {
                    Request::get(METADATA_TOKEN_URL)
                        .header("metadata-flavor", "Google")
                        .body(Body::default())
                        .map_err(|e| bad_request(&e))
                })
                .await
                .map_err(|e| StorageError::NoCredentials {
                    service: "GCS",
                    message: format!(
                        "no key file was given and the metadata server (workload identity) did not answer: {e}"
                    ),
                })?
            }
            Kind::Anonymous | Kind::Fixed(_) => unreachable!("only refreshable tokens are fetched"),
        };
        if !reply.status.is_success() {
            return Err(StorageError::Credentials {
                service: "GCS",
                code: format!("HTTP {}", reply.status.as_u16()),
                message: reply.text().chars().take(300).collect(),
                check: "the service account key or the workload identity binding",
            });
        }
        let answer: TokenAnswer =
            serde_json::from_slice(&reply.body).map_err(|e| StorageError::NoCredentials {
                service: "GCS",
                message: format!("the token endpoint's answer is not a token: {e}"),
            })?;
        Ok((
            answer.access_token,
            Duration::from_secs(answer.expires_in.unwrap_or(300)),
        ))
    }
}

fn bad_key(reason: &str) -> StorageError {
    StorageError::NoCredentials {
        service: "GCS",
        message: format!("the service account key file is not usable: {reason}"),
    }
}

fn bad_request(e: &http::Error) -> StorageError {
    StorageError::NoCredentials {
        service: "GCS",
        message: format!("cannot build the token request: {e}"),
    }
}

/// The key in a key file's `private_key` (PKCS#8 PEM).
fn rsa_key(pem: &str) -> Result<aws_lc_rs::signature::RsaKeyPair> {
    use rustls::pki_types::PrivatePkcs8KeyDer;
    use rustls::pki_types::pem::PemObject;
    let der = PrivatePkcs8KeyDer::from_pem_slice(pem.as_bytes())
        .map_err(|e| bad_key(&format!("private_key is not a PKCS#8 PEM key: {e}")))?;
    aws_lc_rs::signature::RsaKeyPair::from_pkcs8(der.secret_pkcs8_der())
        .map_err(|e| bad_key(&format!("private_key is not an RSA key: {e}")))
}

/// The JWT of the bearer flow: `{iss, scope, aud, iat, exp}` signed with RS256.
fn signed_jwt(
    email: &str,
    key: &aws_lc_rs::signature::RsaKeyPair,
    audience: &str,
    now: SystemTime,
) -> Result<String> {
    let iat = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","typ":"JWT"}"#);
    let claims = serde_json::json!({
        "iss": email,
        "scope": SCOPE,
        "aud": audience,
        "iat": iat,
        "exp": iat + 3600,
    });
    let claims = URL_SAFE_NO_PAD.encode(claims.to_string());
    let signing_input = format!("{header}.{claims}");
    let mut signature = vec![0; key.public_modulus_len()];
    key.sign(
        &aws_lc_rs::signature::RSA_PKCS1_SHA256,
        &aws_lc_rs::rand::SystemRandom::new(),
        signing_input.as_bytes(),
        &mut signature,
    )
    .map_err(|_| bad_key("signing the token request failed"))?;
    Ok(format!(
        "{signing_input}.{}",
        URL_SAFE_NO_PAD.encode(signature)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lc_rs::signature::{KeyPair, RSA_PKCS1_2048_8192_SHA256, UnparsedPublicKey};

    /// A throwaway 2048-bit key made for this test (never used anywhere else).
    fn test_key_pem() -> String {
        let key = aws_lc_rs::rsa::KeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).unwrap();
        let der =
            aws_lc_rs::encoding::AsDer::<aws_lc_rs::encoding::Pkcs8V1Der>::as_der(&key).unwrap();
        let b64 = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
        let lines: Vec<&str> = b64
            .as_bytes()
            .chunks(64)
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect();
        format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            lines.join("\n")
        )
    }

    #[test]
    fn the_bearer_jwt_is_signed_by_the_key_file_and_names_its_account() {
        let pem = test_key_pem();
        let key = rsa_key(&pem).unwrap();
        let jwt = signed_jwt(
            "backup@project.iam.gserviceaccount.com",
            &key,
            "https://oauth2.googleapis.com/token",
            UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        )
        .unwrap();
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3);
        let claims: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
        assert_eq!(claims["iss"], "backup@project.iam.gserviceaccount.com");
        assert_eq!(claims["aud"], "https://oauth2.googleapis.com/token");
        assert_eq!(claims["exp"], 1_700_003_600);
        let public = UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, key.public_key().as_ref());
        let signature = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
        public
            .verify(format!("{}.{}", parts[0], parts[1]).as_bytes(), &signature)
            .expect("the signature verifies with the key's public half");
        // Another payload does not verify with it.
        assert!(public.verify(b"x.y", &signature).is_err());
    }

    #[test]
    fn a_key_file_of_another_type_is_refused_with_the_reason() {
        let json = r#"{"type":"authorized_user","client_email":"a","private_key":"b"}"#;
        let err = TokenSource::new(&GcsCredentials::ServiceAccountKey(json.into()))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("service_account"), "{err}");
        let err = TokenSource::new(&GcsCredentials::ServiceAccountKey("{".into()))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("not usable"), "{err}");
    }
}
