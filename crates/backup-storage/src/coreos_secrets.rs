//! The coreos Secret formats for Google Cloud Storage (`gcpSecret`) and Azure Blob Storage
//! (`absSecret`), read the same way by the EtcdBackup operator (from a Secret's data) and by
//! `etcd-backup` in restore and drill pods (from the Secret mounted as a directory:
//! `--gcs-secret-dir`, `--azure-secret-dir`).

use crate::{AzureCredentials, GcsCredentials};

/// A service account key file (JSON).
pub const GCP_CREDENTIALS_KEY: &str = "credentials.json";
/// An OAuth access token (not refreshed).
pub const GCP_ACCESS_TOKEN_KEY: &str = "access-token";
/// The storage account.
pub const ABS_ACCOUNT_KEY: &str = "storage-account";
/// The account's key (base64).
pub const ABS_KEY_KEY: &str = "storage-key";
/// A SAS token, instead of the key.
pub const ABS_SAS_KEY: &str = "storage-sas-token";
/// `AzurePublicCloud` (the default), `AzureChinaCloud` or `AzureUSGovernmentCloud`.
pub const ABS_CLOUD_KEY: &str = "cloud";

/// What is wrong with a Secret; the caller names the Secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretProblem {
    #[error("it has no key {0:?}")]
    MissingKey(&'static str),
    #[error("its key {0:?} is not UTF-8 text")]
    NotText(&'static str),
    #[error(
        "its key \"cloud\" is {0:?}: use AzurePublicCloud, AzureChinaCloud or AzureUSGovernmentCloud, or set the endpoint"
    )]
    UnknownCloud(String),
}

/// A Secret's values by key (`None` for a key it lacks).
pub trait SecretValues {
    fn value(&self, key: &'static str) -> Option<Vec<u8>>;
}

impl<F: Fn(&'static str) -> Option<Vec<u8>>> SecretValues for F {
    fn value(&self, key: &'static str) -> Option<Vec<u8>> {
        self(key)
    }
}

fn text(secret: &dyn SecretValues, key: &'static str) -> Result<Option<String>, SecretProblem> {
    secret
        .value(key)
        .map(|bytes| String::from_utf8(bytes).map_err(|_| SecretProblem::NotText(key)))
        .transpose()
}

/// A `gcpSecret`: its service account key, else its access token.
pub fn gcs_credentials(secret: &dyn SecretValues) -> Result<GcsCredentials, SecretProblem> {
    match (
        text(secret, GCP_CREDENTIALS_KEY)?,
        text(secret, GCP_ACCESS_TOKEN_KEY)?,
    ) {
        (Some(key), _) => Ok(GcsCredentials::ServiceAccountKey(key)),
        (None, Some(token)) => Ok(GcsCredentials::AccessToken(token.trim().to_string())),
        (None, None) => Err(SecretProblem::MissingKey(GCP_CREDENTIALS_KEY)),
    }
}

/// What an `absSecret` says.
#[derive(Debug, Clone)]
pub struct AzureSecret {
    pub account: String,
    /// `None`: the account alone, for workload identity (which the caller allows or not).
    pub credentials: Option<AzureCredentials>,
    /// The account's Blob endpoint in the Secret's cloud.
    pub default_endpoint: String,
}

/// An `absSecret`: the account, its key or SAS token, and the cloud's endpoint.
pub fn azure_secret(secret: &dyn SecretValues) -> Result<AzureSecret, SecretProblem> {
    let account = text(secret, ABS_ACCOUNT_KEY)?
        .map(|a| a.trim().to_string())
        .filter(|a| !a.is_empty())
        .ok_or(SecretProblem::MissingKey(ABS_ACCOUNT_KEY))?;
    let credentials = match (text(secret, ABS_KEY_KEY)?, text(secret, ABS_SAS_KEY)?) {
        (Some(key), _) => Some(AzureCredentials::SharedKey(key)),
        (None, Some(sas)) => Some(AzureCredentials::Sas(sas)),
        (None, None) => None,
    };
    let domain = match text(secret, ABS_CLOUD_KEY)?.as_deref().map(str::trim) {
        None | Some("") | Some("AzurePublicCloud") => "core.windows.net",
        Some("AzureChinaCloud") => "core.chinacloudapi.cn",
        Some("AzureUSGovernmentCloud") => "core.usgovcloudapi.net",
        Some(other) => return Err(SecretProblem::UnknownCloud(other.to_string())),
    };
    Ok(AzureSecret {
        default_endpoint: format!("https://{account}.blob.{domain}"),
        account,
        credentials,
    })
}

/// A Secret mounted as a directory (each key a file).
pub struct SecretDir<'a>(pub &'a std::path::Path);

impl SecretValues for SecretDir<'_> {
    fn value(&self, key: &'static str) -> Option<Vec<u8>> {
        std::fs::read(self.0.join(key)).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(pairs: &'static [(&'static str, &'static str)]) -> impl SecretValues {
        move |key: &'static str| {
            pairs
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.as_bytes().to_vec())
        }
    }

    #[test]
    fn a_gcp_secret_gives_its_key_file_before_its_token() {
        let both = secret(&[("credentials.json", "{}"), ("access-token", "t")]);
        assert!(matches!(
            gcs_credentials(&both).unwrap(),
            GcsCredentials::ServiceAccountKey(_)
        ));
        let token = secret(&[("access-token", "t\n")]);
        assert!(
            matches!(gcs_credentials(&token).unwrap(), GcsCredentials::AccessToken(t) if t == "t")
        );
        assert_eq!(
            gcs_credentials(&secret(&[])).unwrap_err(),
            SecretProblem::MissingKey("credentials.json")
        );
    }

    #[test]
    fn an_abs_secret_gives_the_account_its_key_or_sas_and_the_clouds_endpoint() {
        let keyed = azure_secret(&secret(&[
            ("storage-account", "acct"),
            ("storage-key", "a2V5"),
        ]))
        .unwrap();
        assert_eq!(keyed.account, "acct");
        assert!(matches!(keyed.credentials, Some(AzureCredentials::SharedKey(k)) if k == "a2V5"));
        assert_eq!(keyed.default_endpoint, "https://acct.blob.core.windows.net");
        let china = azure_secret(&secret(&[
            ("storage-account", "acct"),
            ("storage-sas-token", "sv=1&sig=x"),
            ("cloud", "AzureChinaCloud"),
        ]))
        .unwrap();
        assert!(matches!(china.credentials, Some(AzureCredentials::Sas(_))));
        assert_eq!(
            china.default_endpoint,
            "https://acct.blob.core.chinacloudapi.cn"
        );
        let alone = azure_secret(&secret(&[("storage-account", "acct")])).unwrap();
        assert!(alone.credentials.is_none());
        assert_eq!(
            azure_secret(&secret(&[("storage-account", "a"), ("cloud", "Mars")])).unwrap_err(),
            SecretProblem::UnknownCloud("Mars".into())
        );
        assert_eq!(
            azure_secret(&secret(&[])).unwrap_err(),
            SecretProblem::MissingKey("storage-account")
        );
    }
}
