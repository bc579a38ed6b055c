//! Dereference: the Secrets a plan names, read at each run so rotated credentials are used.
//! Values only ever go into client options; errors name the Secret and key, never the content.

use std::collections::BTreeMap;

use backup_storage::coreos_secrets::{self, SecretProblem};
use backup_storage::encryption::Recipients;
use backup_storage::{
    AzureCredentials, AzureOptions, CustomerKey, GcsCredentials, GcsOptions, S3Credentials,
    S3Options, ServerSideEncryption, StoreOptions,
};
use etcd_api::client_tls;
use etcd_api::storage::{
    AWS_SECRET_CONFIG_KEY, AWS_SECRET_CREDENTIALS_KEY, AbsSource, CA_SECRET_KEY, GcsSource,
};
use etcd_api::{S3Source, SecretKeyRef, SseMode};
use etcd_snapshot::TlsPem;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use operator_runtime::tenant_credentials::{self, CredentialsError};

use crate::validate::{BackupPlan, Target};

/// The data of one Secret.
pub type SecretData = BTreeMap<String, ByteString>;

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("Secret {0:?} not found")]
    Missing(String),
    #[error("Secret {secret:?} has no key {key:?}")]
    MissingKey { secret: String, key: &'static str },
    #[error("Secret {secret:?} key {key:?} is not UTF-8 text")]
    NotText { secret: String, key: &'static str },
    /// `transient`: the API server was unreachable or answered 5xx/429 (worth another try),
    /// not a refusal.
    #[error("cannot read Secret {secret:?}: {message}")]
    Read {
        secret: String,
        message: String,
        transient: bool,
    },
    #[error(transparent)]
    Credentials(#[from] CredentialsError),
    #[error("Secret {secret:?} key {key:?} (SSE-C key): {message}")]
    SseCustomerKey {
        secret: String,
        key: String,
        message: String,
    },
    #[error("Secret {secret:?}: {problem}")]
    Unusable {
        secret: String,
        problem: SecretProblem,
    },
    #[error("Secret {secret:?} key {key:?} (encryption recipients): {message}")]
    Recipients {
        secret: String,
        key: String,
        message: String,
    },
}

/// What a run needs besides the plan: the store's client options, etcd TLS material and the
/// public keys to encrypt to.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub storage: StoreOptions,
    pub tls: Option<TlsPem>,
    pub recipients: Option<Recipients>,
}

/// Reads the Secrets named by `plan` in `secrets`' namespace.
pub async fn resolve(
    secrets: &Api<Secret>,
    plan: &BackupPlan,
    allow_ambient: bool,
) -> Result<Resolved, SecretError> {
    let tls = match &plan.client_tls_secret {
        Some(name) => Some(tls_pem(name, &read(secrets, name).await?)?),
        None => None,
    };
    let recipients = match &plan.recipients_secret {
        Some(key) => Some(recipients(key, &read(secrets, &key.name).await?)?),
        None => None,
    };
    let storage = resolve_storage(secrets, plan, allow_ambient).await?;
    Ok(Resolved {
        storage,
        tls,
        recipients,
    })
}

/// The age recipients under `key`: public keys, so they may be quoted in errors.
pub fn recipients(key: &SecretKeyRef, data: &SecretData) -> Result<Recipients, SecretError> {
    let invalid = |message: String| SecretError::Recipients {
        secret: key.name.clone(),
        key: key.key.clone(),
        message,
    };
    let bytes = data
        .get(&key.key)
        .ok_or_else(|| invalid("the Secret has no such key".into()))?;
    let text = std::str::from_utf8(&bytes.0).map_err(|_| invalid("not UTF-8 text".into()))?;
    Recipients::parse(text, "the key").map_err(|e| invalid(e.to_string()))
}

/// Only the storage Secrets (what deleting backups needs; never etcd's TLS Secret, which may be
/// gone already when a namespace is deleted).
pub async fn resolve_storage(
    secrets: &Api<Secret>,
    plan: &BackupPlan,
    allow_ambient: bool,
) -> Result<StoreOptions, SecretError> {
    Ok(match &plan.target {
        Target::S3 { source, .. } => {
            StoreOptions::from(&resolve_s3(secrets, source, allow_ambient).await?)
        }
        Target::Gcs { source, .. } => {
            let secret = match source.gcp_secret() {
                Some(name) => Some((name, read(secrets, name).await?)),
                None => None,
            };
            let secret = secret.as_ref().map(|(n, d)| (*n, d));
            StoreOptions::from(&gcs_options(source, secret, allow_ambient)?)
        }
        Target::Azure { source, .. } => {
            let data = read(secrets, &source.abs_secret).await?;
            StoreOptions::from(&azure_options(
                source,
                (&source.abs_secret, &data),
                allow_ambient,
            )?)
        }
        // Local targets need no storage credentials.
        Target::Local(_) => StoreOptions::default(),
    })
}

/// GCS options from the spec and the coreos `gcpSecret` (`credentials.json`, a service account
/// key, or `access-token`). Without a Secret, the operator's own identity (the metadata
/// server: GKE workload identity) applies only when `allow_ambient`.
pub fn gcs_options(
    gcs: &GcsSource,
    secret: Option<(&str, &SecretData)>,
    allow_ambient: bool,
) -> Result<GcsOptions, SecretError> {
    let credentials = match secret {
        // The operator's token is a bearer credential: it goes to Google only, never to an
        // endpoint a tenant names.
        None if allow_ambient && gcs.endpoint().is_some() => {
            return Err(CredentialsError::NoCredentials(
                "no gcpSecret: the operator's own identity is never sent to a custom gcs.endpoint; name a gcpSecret".into(),
            )
            .into());
        }
        None if allow_ambient => GcsCredentials::MetadataServer,
        None => {
            return Err(CredentialsError::NoCredentials(
                "no gcpSecret, and the operator lends its own identity only when started with --allow-ambient-credentials".into(),
            )
            .into());
        }
        Some((name, data)) => coreos_secrets::gcs_credentials(&values(data))
            .map_err(|problem| unusable(name, problem))?,
    };
    Ok(GcsOptions {
        endpoint: gcs.endpoint().map(str::to_string),
        credentials,
        ..GcsOptions::default()
    })
}

/// Azure options from the spec and the coreos `absSecret` (`storage-account`, and
/// `storage-key` or `storage-sas-token`, and `cloud`). With the account only, the operator's
/// own workload identity applies only when `allow_ambient`.
pub fn azure_options(
    abs: &AbsSource,
    (name, data): (&str, &SecretData),
    allow_ambient: bool,
) -> Result<AzureOptions, SecretError> {
    let secret =
        coreos_secrets::azure_secret(&values(data)).map_err(|problem| unusable(name, problem))?;
    let credentials = match secret.credentials {
        Some(credentials) => credentials,
        // As for GCS: the operator's token never goes to an endpoint a tenant names.
        None if allow_ambient && abs.endpoint().is_some() => {
            return Err(CredentialsError::NoCredentials(format!(
                "Secret {name:?} has no storage-key or storage-sas-token, and the operator's own identity is never sent to a custom abs.endpoint"
            ))
            .into());
        }
        None if allow_ambient => AzureCredentials::WorkloadIdentity,
        None => {
            return Err(SecretError::MissingKey {
                secret: name.to_string(),
                key: coreos_secrets::ABS_KEY_KEY,
            });
        }
    };
    Ok(AzureOptions {
        endpoint: Some(
            abs.endpoint()
                .map(str::to_string)
                .unwrap_or(secret.default_endpoint),
        ),
        account: secret.account,
        credentials,
        ..AzureOptions::default()
    })
}

/// A Secret's data as [`coreos_secrets`] reads it.
fn values(data: &SecretData) -> impl coreos_secrets::SecretValues + '_ {
    move |key: &'static str| data.get(key).map(|v| v.0.clone())
}

fn unusable(name: &str, problem: SecretProblem) -> SecretError {
    SecretError::Unusable {
        secret: name.to_string(),
        problem,
    }
}

/// S3 options with every Secret the `s3` block names.
async fn resolve_s3(
    secrets: &Api<Secret>,
    s3: &S3Source,
    allow_ambient: bool,
) -> Result<S3Options, SecretError> {
    let aws = match s3.aws_secret() {
        Some(name) => Some((name, read(secrets, name).await?)),
        None => None,
    };
    let ca = match s3.ca_secret.as_deref().filter(|s| !s.is_empty()) {
        Some(name) => Some((name, read(secrets, name).await?)),
        None => None,
    };
    let customer_key = match customer_key_ref(s3) {
        Some(key) => Some(read(secrets, &key.name).await?),
        None => None,
    };
    let mut options = s3_options(
        s3,
        aws.as_ref().map(|(n, d)| (*n, d)),
        ca.as_ref().map(|(n, d)| (*n, d)),
        allow_ambient,
    )?;
    options.server_side_encryption = server_side_encryption(s3, customer_key.as_ref())?;
    Ok(options)
}

fn customer_key_ref(s3: &S3Source) -> Option<&SecretKeyRef> {
    s3.server_side_encryption
        .as_ref()
        .and_then(|sse| sse.customer_key_secret.as_ref())
}

/// `s3.serverSideEncryption`, with the SSE-C key read from `customer_key` (the data of the
/// Secret it names). The key is never quoted.
pub fn server_side_encryption(
    s3: &S3Source,
    customer_key: Option<&SecretData>,
) -> Result<ServerSideEncryption, SecretError> {
    let Some(sse) = &s3.server_side_encryption else {
        return Ok(ServerSideEncryption::BucketDefault);
    };
    Ok(match sse.mode {
        SseMode::Aes256 => ServerSideEncryption::S3Managed,
        SseMode::AwsKms => ServerSideEncryption::Kms {
            key_id: sse.kms_key_id.clone(),
        },
        SseMode::SseC => {
            let key = customer_key_ref(s3).ok_or_else(|| SecretError::SseCustomerKey {
                secret: String::new(),
                key: String::new(),
                message: "mode SSE-C needs customerKeySecret".into(),
            })?;
            let invalid = |message: String| SecretError::SseCustomerKey {
                secret: key.name.clone(),
                key: key.key.clone(),
                message,
            };
            let bytes = customer_key
                .and_then(|data| data.get(&key.key))
                .ok_or_else(|| invalid("the Secret has no such key".into()))?;
            ServerSideEncryption::Customer(CustomerKey::from_file_bytes(&bytes.0).map_err(invalid)?)
        }
    })
}

async fn read(secrets: &Api<Secret>, name: &str) -> Result<SecretData, SecretError> {
    match secrets.get_opt(name).await {
        Ok(Some(secret)) => Ok(secret.data.unwrap_or_default()),
        Ok(None) => Err(SecretError::Missing(name.to_string())),
        Err(e) => Err(SecretError::Read {
            secret: name.to_string(),
            transient: match &e {
                kube::Error::Api(status) => status.code >= 500 || status.code == 429,
                _ => true,
            },
            message: e.to_string(),
        }),
    }
}

/// S3 options from the spec and the coreos `awsSecret` (AWS shared files `credentials` and
/// `config`, static keys and region only). Without an `awsSecret` (or without keys in it), the
/// operator's own AWS credential chain applies only when `allow_ambient` (its deployment's
/// explicit choice, `--allow-ambient-credentials`); otherwise the backup is refused.
pub fn s3_options(
    s3: &S3Source,
    aws_secret: Option<(&str, &SecretData)>,
    ca_secret: Option<(&str, &SecretData)>,
    allow_ambient: bool,
) -> Result<S3Options, SecretError> {
    let credentials = match aws_secret {
        None => {
            tenant_credentials::check(None, allow_ambient)?;
            S3Credentials::DefaultChain
        }
        Some((name, data)) => {
            let credentials = text(name, data, AWS_SECRET_CREDENTIALS_KEY)?;
            let config = text(name, data, AWS_SECRET_CONFIG_KEY)?;
            if credentials.is_none() && config.is_none() {
                return Err(SecretError::MissingKey {
                    secret: name.to_string(),
                    key: AWS_SECRET_CREDENTIALS_KEY,
                });
            }
            let files = Some((name, credentials.as_deref(), config.as_deref()));
            tenant_credentials::check(files, allow_ambient)?;
            S3Credentials::SharedFiles {
                credentials,
                config,
                profile: None,
            }
        }
    };
    let ca_bundle_pem = match ca_secret {
        None => None,
        Some((name, data)) => Some(required(name, data, CA_SECRET_KEY)?.0.clone()),
    };
    Ok(S3Options {
        endpoint: s3.endpoint().map(str::to_string),
        region: s3.region.clone().filter(|r| !r.is_empty()),
        force_path_style: s3.force_path_style(),
        ca_bundle_pem,
        credentials,
        ..S3Options::default()
    })
}

/// etcd client TLS from a coreos `clientTLSSecret`. The CA is required; certificate and key
/// come together (etcd-snapshot rejects one without the other).
pub fn tls_pem(name: &str, data: &SecretData) -> Result<TlsPem, SecretError> {
    let optional = |key: &str| data.get(key).map(|v| v.0.clone());
    Ok(TlsPem {
        ca: required(name, data, client_tls::CA_KEY)?.0.clone(),
        cert: optional(client_tls::CERT_KEY),
        key: optional(client_tls::KEY_KEY),
    })
}

fn required<'a>(
    name: &str,
    data: &'a SecretData,
    key: &'static str,
) -> Result<&'a ByteString, SecretError> {
    data.get(key).ok_or_else(|| SecretError::MissingKey {
        secret: name.to_string(),
        key,
    })
}

fn text(name: &str, data: &SecretData, key: &'static str) -> Result<Option<String>, SecretError> {
    data.get(key)
        .map(|v| {
            String::from_utf8(v.0.clone()).map_err(|_| SecretError::NotText {
                secret: name.to_string(),
                key,
            })
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> SecretData {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
            .collect()
    }

    fn plan() -> BackupPlan {
        let mut spec = crate::validate::tests::coreos_periodic();
        let s3 = spec.s3.as_mut().unwrap();
        s3.endpoint = Some("http://127.0.0.1:3900".into());
        s3.force_path_style = Some(true);
        s3.region = Some("garage".into());
        crate::validate::build(&spec).unwrap()
    }

    #[test]
    fn coreos_aws_secret_becomes_shared_files() {
        let secret = data(&[
            (
                "credentials",
                "[default]\naws_access_key_id = AK\naws_secret_access_key = SUPERSECRET\n",
            ),
            ("config", "[default]\nregion = garage\n"),
        ]);
        let options =
            s3_options(plan().s3().unwrap(), Some(("aws", &secret)), None, false).unwrap();
        assert!(matches!(
            &options.credentials,
            S3Credentials::SharedFiles { credentials: Some(c), config: Some(_), .. } if c.contains("AK")
        ));
        assert_eq!(options.endpoint.as_deref(), Some("http://127.0.0.1:3900"));
        assert!(options.force_path_style);
        assert_eq!(options.region.as_deref(), Some("garage"));
        // Debug output (logs) never shows the secret.
        assert!(!format!("{options:?}").contains("SUPERSECRET"));
    }

    #[test]
    fn server_side_encryption_comes_from_the_spec_and_its_secret() {
        let s3 = |sse: &str| -> S3Source {
            serde_saphyr::from_str(&format!("{{path: b/k, serverSideEncryption: {sse}}}")).unwrap()
        };
        assert_eq!(
            server_side_encryption(&S3Source::default(), None).unwrap(),
            ServerSideEncryption::BucketDefault
        );
        assert_eq!(
            server_side_encryption(&s3("{mode: AES256}"), None).unwrap(),
            ServerSideEncryption::S3Managed
        );
        assert_eq!(
            server_side_encryption(&s3("{mode: 'aws:kms', kmsKeyId: k1}"), None).unwrap(),
            ServerSideEncryption::Kms {
                key_id: Some("k1".into())
            }
        );
        let sse_c = s3("{mode: SSE-C, customerKeySecret: {name: sse, key: key}}");
        let key = BTreeMap::from([("key".to_string(), ByteString(vec![5; 32]))]);
        assert!(matches!(
            server_side_encryption(&sse_c, Some(&key)).unwrap(),
            ServerSideEncryption::Customer(_)
        ));
        for data in [
            BTreeMap::new(),
            BTreeMap::from([("key".to_string(), ByteString(vec![5; 31]))]),
        ] {
            let err = server_side_encryption(&sse_c, Some(&data)).unwrap_err();
            let text = err.to_string();
            assert!(
                text.contains("Secret \"sse\" key \"key\" (SSE-C key)"),
                "{text}"
            );
        }
    }

    #[test]
    fn recipients_are_read_from_the_named_key_and_bad_ones_named() {
        let key = SecretKeyRef {
            name: "keys".into(),
            key: "recipients".into(),
        };
        let (_, public) = backup_storage::encryption::Identity::generate();
        let good = recipients(&key, &data(&[("recipients", &format!("{public}\n"))])).unwrap();
        assert_eq!(good.public_keys(), vec![public]);
        for (pairs, expected) in [
            (&[("other", "x")][..], "has no such key"),
            (
                &[("recipients", "# none yet\n")][..],
                "holds no age recipient",
            ),
            (
                &[("recipients", "age1bogus\n")][..],
                "line 1: not an age X25519 recipient",
            ),
        ] {
            let err = recipients(&key, &data(pairs)).unwrap_err().to_string();
            assert!(err.contains("Secret \"keys\" key \"recipients\""), "{err}");
            assert!(err.contains(expected), "{err}");
        }
    }

    #[test]
    fn missing_keys_name_the_secret_and_key_only() {
        let err = s3_options(
            plan().s3().unwrap(),
            Some(("aws", &data(&[("other", "SUPERSECRET")]))),
            None,
            false,
        )
        .unwrap_err();
        assert_eq!(err.to_string(), r#"Secret "aws" has no key "credentials""#);
        let err =
            s3_options(plan().s3().unwrap(), None, Some(("ca", &data(&[]))), true).unwrap_err();
        assert!(err.to_string().contains("ca.crt"), "{err}");
        let err = tls_pem("tls", &data(&[("etcd-client.crt", "SUPERSECRET")])).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"Secret "tls" has no key "etcd-client-ca.crt""#
        );
    }

    #[test]
    fn the_operator_s_own_identity_only_when_its_deployment_allows_it() {
        let s3 = plan();
        let s3 = s3.s3().unwrap();
        let err = s3_options(s3, None, None, false).unwrap_err();
        assert!(
            err.to_string().contains("--allow-ambient-credentials"),
            "{err}"
        );
        // A Secret with only a config file would fall back to the same chain.
        let config_only = data(&[("config", "[default]\nregion = garage\n")]);
        let err = s3_options(s3, Some(("aws", &config_only)), None, false).unwrap_err();
        assert!(
            matches!(
                err,
                SecretError::Credentials(CredentialsError::NoCredentials(_))
            ),
            "{err}"
        );
        let options = s3_options(s3, None, None, true).unwrap();
        assert!(matches!(options.credentials, S3Credentials::DefaultChain));
    }

    #[test]
    fn settings_that_source_credentials_elsewhere_are_refused() {
        let keys = "[default]\naws_access_key_id = AK\naws_secret_access_key = SK\n";
        for (file, text, setting) in [
            (
                "config",
                "[default]\nrole_arn = arn:aws:iam::1:role/admin\n",
                "role_arn",
            ),
            (
                "config",
                "[profile x]\ncredential_process = /bin/sh -c id\n",
                "credential_process",
            ),
            (
                "config",
                "[default]\nweb_identity_token_file = /var/run/token\n",
                "web_identity_token_file",
            ),
            (
                "config",
                "[default]\ncredential_source = Ec2InstanceMetadata\n",
                "credential_source",
            ),
            (
                "credentials",
                "[default]\nsource_profile = other\n",
                "source_profile",
            ),
        ] {
            let secret = if file == "config" {
                data(&[("credentials", keys), ("config", text)])
            } else {
                data(&[("credentials", text)])
            };
            let err =
                s3_options(plan().s3().unwrap(), Some(("aws", &secret)), None, true).unwrap_err();
            assert!(
                matches!(&err, SecretError::Credentials(CredentialsError::CredentialSourcing { setting: s, .. }) if s.as_deref() == Some(setting)),
                "{setting}: {err}"
            );
        }
        // Static keys, a session token, region and comments are fine.
        let fine = data(&[
            (
                "credentials",
                "# team a\n[default]\naws_access_key_id = AK\naws_secret_access_key = SK\naws_session_token = T\n",
            ),
            ("config", "[default]\nregion = garage\n; note\n"),
        ]);
        s3_options(plan().s3().unwrap(), Some(("aws", &fine)), None, false).unwrap();
    }

    #[test]
    fn a_gcp_secret_gives_its_key_file_or_token_and_none_needs_the_opt_in() {
        let gcs = GcsSource {
            path: "b/etcd.backup".into(),
            gcp_secret: Some("gcp".into()),
            endpoint: Some("http://fake-gcs:4443".into()),
        };
        let key = data(&[("credentials.json", "{}"), ("access-token", "t")]);
        let options = gcs_options(&gcs, Some(("gcp", &key)), false).unwrap();
        assert!(matches!(
            options.credentials,
            GcsCredentials::ServiceAccountKey(_)
        ));
        assert_eq!(options.endpoint.as_deref(), Some("http://fake-gcs:4443"));
        let token = data(&[("access-token", "t")]);
        let options = gcs_options(&gcs, Some(("gcp", &token)), false).unwrap();
        assert!(matches!(options.credentials, GcsCredentials::AccessToken(t) if t == "t"));
        let empty = data(&[]);
        let err = gcs_options(&gcs, Some(("gcp", &empty)), true).unwrap_err();
        assert!(err.to_string().contains("credentials.json"), "{err}");
        // No Secret: the operator's own identity, only when lent.
        let err = gcs_options(&gcs, None, false).unwrap_err();
        assert!(matches!(err, SecretError::Credentials(_)), "{err}");
        // Lent, but never to an endpoint the tenant names.
        let err = gcs_options(&gcs, None, true).unwrap_err();
        assert!(err.to_string().contains("custom gcs.endpoint"), "{err}");
        let google = GcsSource {
            endpoint: None,
            ..gcs.clone()
        };
        let options = gcs_options(&google, None, true).unwrap();
        assert!(matches!(
            options.credentials,
            GcsCredentials::MetadataServer
        ));
    }

    #[test]
    fn an_abs_secret_gives_the_account_its_key_or_sas_and_the_clouds_endpoint() {
        let abs = AbsSource {
            path: "c/etcd.backup".into(),
            abs_secret: "abs".into(),
            endpoint: None,
        };
        let keyed = data(&[("storage-account", "acct"), ("storage-key", "a2V5")]);
        let options = azure_options(&abs, ("abs", &keyed), false).unwrap();
        assert_eq!(options.account, "acct");
        assert!(matches!(options.credentials, AzureCredentials::SharedKey(k) if k == "a2V5"));
        assert_eq!(
            options.endpoint.as_deref(),
            Some("https://acct.blob.core.windows.net")
        );
        let china = data(&[
            ("storage-account", "acct"),
            ("storage-sas-token", "sv=1&sig=x"),
            ("cloud", "AzureChinaCloud"),
        ]);
        let options = azure_options(&abs, ("abs", &china), false).unwrap();
        assert!(matches!(options.credentials, AzureCredentials::Sas(_)));
        assert_eq!(
            options.endpoint.as_deref(),
            Some("https://acct.blob.core.chinacloudapi.cn")
        );
        let unknown = data(&[
            ("storage-account", "a"),
            ("storage-key", "k"),
            ("cloud", "Mars"),
        ]);
        let err = azure_options(&abs, ("abs", &unknown), false).unwrap_err();
        assert!(err.to_string().contains("Mars"), "{err}");
        // The account alone: workload identity, only when lent.
        let account_only = data(&[("storage-account", "acct")]);
        let err = azure_options(&abs, ("abs", &account_only), false).unwrap_err();
        assert!(err.to_string().contains("storage-key"), "{err}");
        let options = azure_options(&abs, ("abs", &account_only), true).unwrap();
        assert!(matches!(
            options.credentials,
            AzureCredentials::WorkloadIdentity
        ));
        let err = azure_options(&abs, ("abs", &data(&[])), true).unwrap_err();
        assert!(err.to_string().contains("storage-account"), "{err}");
        // An endpoint in the spec wins over the cloud's.
        let azurite = AbsSource {
            endpoint: Some("http://azurite:10000/acct".into()),
            ..abs
        };
        let options = azure_options(&azurite, ("abs", &keyed), false).unwrap();
        assert_eq!(
            options.endpoint.as_deref(),
            Some("http://azurite:10000/acct")
        );
        // The operator's identity never goes to an endpoint the tenant names.
        let err = azure_options(&azurite, ("abs", &account_only), true).unwrap_err();
        assert!(err.to_string().contains("custom abs.endpoint"), "{err}");
    }
}
