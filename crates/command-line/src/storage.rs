//! The flags of the programs that read and write backups: the `--s3-*`, `--gcs-*` and
//! `--azure-*` flags and the store they open, `--compress`, and the encryption keys.

use std::path::PathBuf;

use backup_storage::compress::Compression;
use backup_storage::coreos_secrets::{self, SecretDir, SecretProblem};
use backup_storage::encryption::{EncryptionError, Identity, Recipients};
use backup_storage::{
    AzureCredentials, AzureOptions, CustomerKey, GcsCredentials, GcsOptions, Location, S3Options,
    ServerSideEncryption, StorageError, Store, StoreOptions,
};
use clap::{Args, ValueEnum};

/// How to reach the store a URL names: S3 settings beyond the standard AWS environment
/// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT_URL`,
/// `AWS_SHARED_CREDENTIALS_FILE`, `AWS_CONFIG_FILE`, web identity, instance profile), which is
/// read as usual, and the GCS and Azure settings.
#[derive(Args, Debug, Clone)]
pub struct StorageArgs {
    /// S3 endpoint for S3-compatible servers (default: AWS, or AWS_ENDPOINT_URL).
    #[arg(long, global = true)]
    pub s3_endpoint: Option<String>,
    /// S3 region (default: AWS_REGION or the AWS config, then us-east-1).
    #[arg(long, global = true)]
    pub s3_region: Option<String>,
    /// Use path-style URLs (https://endpoint/bucket/key); most S3-compatible servers need it.
    #[arg(long, global = true, env = "S3_FORCE_PATH_STYLE")]
    pub s3_force_path_style: bool,
    /// Extra CA bundle (PEM) to trust for the S3 endpoint.
    #[arg(long, global = true)]
    pub s3_ca_file: Option<PathBuf>,
    /// Attempts per S3 request, with exponential backoff.
    #[arg(long, global = true, default_value_t = 5)]
    pub s3_max_attempts: u32,
    /// S3 server-side encryption of what is written: AES256 (SSE-S3) or aws:kms (SSE-KMS).
    /// Default: the bucket's own default encryption.
    #[arg(long, global = true, value_enum, value_name = "MODE")]
    pub s3_sse: Option<SseArg>,
    /// The KMS key for --s3-sse aws:kms (default: the account's S3 KMS key).
    #[arg(long, global = true, requires = "s3_sse", value_name = "KEY_ID")]
    pub s3_sse_kms_key_id: Option<String>,
    /// SSE-C: a file with the 256-bit key (32 raw bytes, or their base64) that every write and
    /// read of the objects then carries. Never pass the key itself as an argument.
    #[arg(long, global = true, conflicts_with = "s3_sse", value_name = "FILE")]
    pub s3_sse_c_key_file: Option<PathBuf>,
    #[command(flatten)]
    pub gcs: GcsArgs,
    #[command(flatten)]
    pub azure: AzureArgs,
}

/// Google Cloud Storage (`gs://bucket/key`). Credentials: `--gcs-credentials-file` (or
/// `GOOGLE_APPLICATION_CREDENTIALS`), else `--gcs-access-token-file`, else the metadata server
/// (GKE workload identity, the node's service account); `--gcs-anonymous` sends none.
#[derive(Args, Debug, Clone, Default)]
pub struct GcsArgs {
    /// GCS endpoint (default: STORAGE_EMULATOR_HOST when set, else Google's).
    #[arg(long, global = true, value_name = "URL")]
    pub gcs_endpoint: Option<String>,
    /// A service account key file (JSON).
    #[arg(
        long,
        global = true,
        env = "GOOGLE_APPLICATION_CREDENTIALS",
        value_name = "FILE"
    )]
    pub gcs_credentials_file: Option<PathBuf>,
    /// A file holding an OAuth access token (coreos' `access-token`); it is not refreshed.
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        conflicts_with = "gcs_credentials_file"
    )]
    pub gcs_access_token_file: Option<PathBuf>,
    /// Send no credentials (an emulator, a public bucket).
    #[arg(long, global = true, conflicts_with_all = ["gcs_credentials_file", "gcs_access_token_file"])]
    pub gcs_anonymous: bool,
    /// A coreos `gcpSecret` mounted as a directory: its `credentials.json`, else its
    /// `access-token` (what the operators' restore and drill pods pass). Without any GCS
    /// credential (flag or GOOGLE_APPLICATION_CREDENTIALS): GCS_SECRET_DIR, if set.
    // The variable is read by `options`, not by clap: clap would refuse it beside another
    // credential as a conflict, and could not let a flag win over it.
    #[arg(long, global = true, value_name = "DIR", conflicts_with_all = ["gcs_credentials_file", "gcs_access_token_file", "gcs_anonymous"])]
    pub gcs_secret_dir: Option<PathBuf>,
}

/// Azure Blob Storage (`azblob://container/key`). Credentials: `--azure-key-file`, else
/// `--azure-sas-file`, else workload identity (`AZURE_FEDERATED_TOKEN_FILE`,
/// `AZURE_CLIENT_ID`, `AZURE_TENANT_ID`, as AKS sets them).
#[derive(Args, Debug, Clone, Default)]
pub struct AzureArgs {
    /// The storage account.
    #[arg(
        long,
        global = true,
        env = "AZURE_STORAGE_ACCOUNT",
        value_name = "NAME"
    )]
    pub azure_account: Option<String>,
    /// Blob endpoint (default: https://ACCOUNT.blob.core.windows.net; Azurite:
    /// http://127.0.0.1:10000/ACCOUNT).
    #[arg(long, global = true, env = "AZURE_BLOB_ENDPOINT", value_name = "URL")]
    pub azure_endpoint: Option<String>,
    /// A file holding the storage account's key (base64, coreos' `storage-key`).
    #[arg(long, global = true, value_name = "FILE")]
    pub azure_key_file: Option<PathBuf>,
    /// A file holding a SAS token (the query string).
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        conflicts_with = "azure_key_file"
    )]
    pub azure_sas_file: Option<PathBuf>,
    /// A coreos `absSecret` mounted as a directory: `storage-account`, `storage-key` or
    /// `storage-sas-token`, and `cloud` (what the operators' restore and drill pods pass).
    /// Without any Azure credential flag: AZURE_SECRET_DIR, if set.
    // Read by `options`, as GCS_SECRET_DIR is.
    #[arg(long, global = true, value_name = "DIR", conflicts_with_all = ["azure_key_file", "azure_sas_file"])]
    pub azure_secret_dir: Option<PathBuf>,
}

/// A coreos Secret directory that cannot be used, named.
fn unusable_secret(dir: &std::path::Path, problem: SecretProblem) -> StorageError {
    StorageError::NoCredentials {
        service: "the store",
        message: format!("the Secret mounted at {}: {problem}", dir.display()),
    }
}

/// A credential read from a file, its line end trimmed.
fn read_secret(path: &PathBuf) -> backup_storage::Result<String> {
    let text = std::fs::read_to_string(path).map_err(|source| StorageError::Io {
        path: path.clone(),
        source,
    })?;
    Ok(text.trim().to_string())
}

/// Reads an environment variable (the process's, or a test's).
type Env<'a> = &'a dyn Fn(&str) -> Option<std::ffi::OsString>;

/// The directory in environment variable `name`, if set and not empty.
fn dir_from_env(env: Env<'_>, name: &str) -> Option<PathBuf> {
    env(name).filter(|v| !v.is_empty()).map(PathBuf::from)
}

impl GcsArgs {
    pub fn options(&self) -> backup_storage::Result<GcsOptions> {
        self.options_in(&|name| std::env::var_os(name))
    }

    fn options_in(&self, env: Env<'_>) -> backup_storage::Result<GcsOptions> {
        let no_flag = !self.gcs_anonymous
            && self.gcs_secret_dir.is_none()
            && self.gcs_credentials_file.is_none()
            && self.gcs_access_token_file.is_none();
        let from_env = no_flag
            .then(|| dir_from_env(env, "GCS_SECRET_DIR"))
            .flatten();
        let credentials = match (
            self.gcs_anonymous,
            self.gcs_secret_dir.as_ref().or(from_env.as_ref()),
            &self.gcs_credentials_file,
            &self.gcs_access_token_file,
        ) {
            (true, ..) => GcsCredentials::Anonymous,
            (false, Some(dir), ..) => coreos_secrets::gcs_credentials(&SecretDir(dir))
                .map_err(|problem| unusable_secret(dir, problem))?,
            (false, None, Some(file), _) => GcsCredentials::ServiceAccountKey(read_secret(file)?),
            (false, None, None, Some(file)) => GcsCredentials::AccessToken(read_secret(file)?),
            (false, None, None, None) => GcsCredentials::MetadataServer,
        };
        Ok(GcsOptions {
            endpoint: self.gcs_endpoint.clone(),
            credentials,
            ..GcsOptions::default()
        })
    }
}

impl AzureArgs {
    pub fn options(&self) -> backup_storage::Result<AzureOptions> {
        self.options_in(&|name| std::env::var_os(name))
    }

    fn options_in(&self, env: Env<'_>) -> backup_storage::Result<AzureOptions> {
        let no_flag = self.azure_secret_dir.is_none()
            && self.azure_key_file.is_none()
            && self.azure_sas_file.is_none();
        let from_env = no_flag
            .then(|| dir_from_env(env, "AZURE_SECRET_DIR"))
            .flatten();
        if let Some(dir) = self.azure_secret_dir.as_ref().or(from_env.as_ref()) {
            let secret = coreos_secrets::azure_secret(&SecretDir(dir))
                .map_err(|problem| unusable_secret(dir, problem))?;
            return Ok(AzureOptions {
                account: self.azure_account.clone().unwrap_or(secret.account),
                endpoint: Some(
                    self.azure_endpoint
                        .clone()
                        .unwrap_or(secret.default_endpoint),
                ),
                credentials: secret
                    .credentials
                    .unwrap_or(AzureCredentials::WorkloadIdentity),
                ..AzureOptions::default()
            });
        }
        let credentials = match (&self.azure_key_file, &self.azure_sas_file) {
            (Some(file), _) => AzureCredentials::SharedKey(read_secret(file)?),
            (None, Some(file)) => AzureCredentials::Sas(read_secret(file)?),
            (None, None) => AzureCredentials::WorkloadIdentity,
        };
        Ok(AzureOptions {
            account: self.azure_account.clone().unwrap_or_default(),
            endpoint: self.azure_endpoint.clone(),
            credentials,
            ..AzureOptions::default()
        })
    }
}

/// `--s3-sse`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SseArg {
    #[value(name = "AES256")]
    Aes256,
    #[value(name = "aws:kms")]
    AwsKms,
}

impl StorageArgs {
    pub fn options(&self) -> backup_storage::Result<S3Options> {
        let server_side_encryption = match (self.s3_sse, &self.s3_sse_c_key_file) {
            (Some(SseArg::Aes256), _) => ServerSideEncryption::S3Managed,
            (Some(SseArg::AwsKms), _) => ServerSideEncryption::Kms {
                key_id: self.s3_sse_kms_key_id.clone(),
            },
            (None, Some(path)) => {
                let bytes = std::fs::read(path).map_err(|e| backup_storage::StorageError::Io {
                    path: path.clone(),
                    source: e,
                })?;
                let key = CustomerKey::from_file_bytes(&bytes).map_err(|reason| {
                    backup_storage::StorageError::SseCustomerKey {
                        source_name: path.display().to_string(),
                        reason,
                    }
                })?;
                ServerSideEncryption::Customer(key)
            }
            (None, None) => ServerSideEncryption::BucketDefault,
        };
        let options = S3Options {
            endpoint: self.s3_endpoint.clone(),
            region: self.s3_region.clone(),
            force_path_style: self.s3_force_path_style,
            max_attempts: self.s3_max_attempts,
            server_side_encryption,
            ..S3Options::default()
        };
        match &self.s3_ca_file {
            Some(ca) => options.with_ca_file(ca),
            None => Ok(options),
        }
    }

    /// The options of the store `location` names; only its kind's flags are read (a GCS key
    /// file that cannot be read does not stop an S3 backup).
    pub fn store_options(&self, location: &Location) -> backup_storage::Result<StoreOptions> {
        Ok(match location {
            Location::S3 { .. } | Location::Local { .. } => StoreOptions::from(&self.options()?),
            Location::Gcs { .. } => StoreOptions::from(&self.gcs.options()?),
            Location::Azure { .. } => StoreOptions::from(&self.azure.options()?),
        })
    }

    /// Opens the store a user-typed URL (`s3://bucket/key`, `gs://bucket/key`,
    /// `azblob://container/key`, `file:///path`) names.
    pub async fn open(&self, url: &str) -> backup_storage::Result<(Store, Location)> {
        let location = Location::parse(url)?;
        let store = Store::open(&location, self.store_options(&location)?).await?;
        Ok((store, location))
    }
}

/// `--compress`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompressArg {
    None,
    Zstd,
}

impl From<CompressArg> for Compression {
    fn from(c: CompressArg) -> Self {
        match c {
            CompressArg::None => Compression::None,
            CompressArg::Zstd => Compression::Zstd,
        }
    }
}

/// Who can read the backups written: age recipients (public keys). Only the public keys are
/// needed here; the private key stays with whoever restores.
#[derive(Args, Debug, Clone, Default)]
pub struct EncryptArgs {
    /// Encrypt (age) to the recipients in this file: one public key (age1...) per line, `#`
    /// comments, as `age -R` reads. Repeat for several files.
    #[arg(long, value_name = "FILE")]
    pub encrypt_to_file: Vec<PathBuf>,
    /// Encrypt (age) to this recipient (age1...). Repeat for several; any one can decrypt.
    #[arg(long, value_name = "RECIPIENT")]
    pub encrypt_to: Vec<String>,
}

/// A failure to read keys, with the file named.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        /// An identity file (`--identity`), not a recipients file.
        identity: bool,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Invalid(#[from] EncryptionError),
}

impl KeyError {
    /// True for an identity that cannot be read or parsed (exit code 4).
    pub fn is_identity_problem(&self) -> bool {
        match self {
            KeyError::Read { identity, .. } => *identity,
            KeyError::Invalid(e) => e.is_identity_problem(),
        }
    }
}

impl EncryptArgs {
    /// The recipients given, or `None` when encryption was not asked for.
    pub fn recipients(&self) -> Result<Option<Recipients>, KeyError> {
        let mut all: Option<Recipients> = None;
        let mut add = |more: Recipients| match all.as_mut() {
            Some(all) => all.extend(more),
            None => all = Some(more),
        };
        for path in &self.encrypt_to_file {
            let text = std::fs::read_to_string(path).map_err(|source| KeyError::Read {
                path: path.clone(),
                identity: false,
                source,
            })?;
            add(Recipients::parse(&text, &path.display().to_string())?);
        }
        for (i, recipient) in self.encrypt_to.iter().enumerate() {
            add(Recipients::parse(
                recipient,
                &format!("--encrypt-to (number {})", i + 1),
            )?);
        }
        Ok(all)
    }
}

/// `--identity`: the private key that decrypts encrypted backups.
#[derive(Args, Debug, Clone, Default)]
pub struct IdentityArgs {
    /// age identity file (AGE-SECRET-KEY-1..., as age-keygen writes) to decrypt encrypted
    /// backups with. Never pass the key itself as an argument.
    #[arg(long, value_name = "FILE")]
    pub identity: Option<PathBuf>,
}

impl IdentityArgs {
    pub fn load(&self) -> Result<Option<Identity>, KeyError> {
        let Some(path) = &self.identity else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(path).map_err(|source| KeyError::Read {
            path: path.clone(),
            identity: true,
            source,
        })?;
        Ok(Some(Identity::parse(&text, &path.display().to_string())?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// Exit code 4 is for the identity: an unreadable or invalid identity file is one, a bad
    /// recipients file is not.
    #[test]
    fn only_identity_files_are_identity_problems() {
        let missing = std::path::PathBuf::from("/nonexistent/key.txt");
        let identity = IdentityArgs {
            identity: Some(missing.clone()),
        };
        assert!(identity.load().unwrap_err().is_identity_problem());
        let recipients = EncryptArgs {
            encrypt_to_file: vec![missing],
            ..Default::default()
        };
        assert!(!recipients.recipients().unwrap_err().is_identity_problem());
        let empty = std::env::temp_dir().join(format!("no-keys-{}.txt", std::process::id()));
        std::fs::write(&empty, "# nothing\n").unwrap();
        let identity = IdentityArgs {
            identity: Some(empty.clone()),
        };
        assert!(identity.load().unwrap_err().is_identity_problem());
        let recipients = EncryptArgs {
            encrypt_to_file: vec![empty.clone()],
            ..Default::default()
        };
        assert!(!recipients.recipients().unwrap_err().is_identity_problem());
        std::fs::remove_file(empty).unwrap();
    }

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        storage: StorageArgs,
        #[arg(long, value_enum, default_value_t = CompressArg::None)]
        compress: CompressArg,
    }

    #[test]
    fn flags_become_s3_options() {
        let cli = Cli::try_parse_from([
            "t",
            "--s3-endpoint",
            "http://127.0.0.1:3900",
            "--s3-region",
            "garage",
            "--s3-force-path-style",
            "--s3-max-attempts",
            "2",
            "--compress",
            "zstd",
        ])
        .unwrap();
        let options = cli.storage.options().unwrap();
        assert_eq!(options.endpoint.as_deref(), Some("http://127.0.0.1:3900"));
        assert_eq!(options.region.as_deref(), Some("garage"));
        assert!(options.force_path_style);
        assert_eq!(options.max_attempts, 2);
        assert_eq!(Compression::from(cli.compress), Compression::Zstd);
    }

    #[test]
    fn server_side_encryption_flags_become_the_mode() {
        let parse = |args: &[&str]| Cli::try_parse_from([&["t"], args].concat());
        let options = |args: &[&str]| parse(args).unwrap().storage.options().unwrap();
        assert_eq!(
            options(&[]).server_side_encryption,
            ServerSideEncryption::BucketDefault
        );
        assert_eq!(
            options(&["--s3-sse", "AES256"]).server_side_encryption,
            ServerSideEncryption::S3Managed
        );
        assert_eq!(
            options(&["--s3-sse", "aws:kms", "--s3-sse-kms-key-id", "k1"]).server_side_encryption,
            ServerSideEncryption::Kms {
                key_id: Some("k1".into())
            }
        );
        let dir = std::env::temp_dir().join(format!("sse-c-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = dir.join("key");
        std::fs::write(&key, [9u8; 32]).unwrap();
        let path = key.to_str().unwrap();
        assert!(matches!(
            options(&["--s3-sse-c-key-file", path]).server_side_encryption,
            ServerSideEncryption::Customer(_)
        ));
        // One mode at a time; a KMS key only with aws:kms; a bad key file named.
        assert!(parse(&["--s3-sse", "AES256", "--s3-sse-c-key-file", path]).is_err());
        assert!(parse(&["--s3-sse-kms-key-id", "k1"]).is_err());
        std::fs::write(&key, b"short").unwrap();
        let err = parse(&["--s3-sse-c-key-file", path])
            .unwrap()
            .storage
            .options()
            .unwrap_err()
            .to_string();
        assert!(err.contains(path) && err.contains("32"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn gcs_and_azure_flags_choose_their_credentials() {
        let dir = std::env::temp_dir().join(format!("cloud-flags-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("secret");
        std::fs::write(&file, "c2VjcmV0\n").unwrap();
        let path = file.to_str().unwrap();
        let parse = |args: &[&str]| Cli::try_parse_from([&["t"], args].concat());
        let gcs = |args: &[&str]| parse(args).unwrap().storage.gcs.options().unwrap();
        assert!(matches!(
            gcs(&["--gcs-anonymous", "--gcs-endpoint", "http://127.0.0.1:4443"]).credentials,
            GcsCredentials::Anonymous
        ));
        assert!(matches!(
            gcs(&["--gcs-access-token-file", path]).credentials,
            GcsCredentials::AccessToken(t) if t == "c2VjcmV0"
        ));
        assert!(matches!(
            gcs(&["--gcs-credentials-file", path]).credentials,
            GcsCredentials::ServiceAccountKey(_)
        ));
        assert!(parse(&["--gcs-anonymous", "--gcs-credentials-file", path]).is_err());
        let azure = |args: &[&str]| parse(args).unwrap().storage.azure.options().unwrap();
        let keyed = azure(&["--azure-account", "acct", "--azure-key-file", path]);
        assert_eq!(keyed.account, "acct");
        assert!(matches!(keyed.credentials, AzureCredentials::SharedKey(k) if k == "c2VjcmV0"));
        assert!(matches!(
            azure(&["--azure-sas-file", path]).credentials,
            AzureCredentials::Sas(_)
        ));
        assert!(parse(&["--azure-key-file", path, "--azure-sas-file", path]).is_err());
        // coreos Secrets mounted as directories.
        let gcp = dir.join("gcp");
        std::fs::create_dir_all(&gcp).unwrap();
        std::fs::write(gcp.join("access-token"), "tok\n").unwrap();
        let gcp = gcp.to_str().unwrap();
        assert!(matches!(
            gcs(&["--gcs-secret-dir", gcp]).credentials,
            GcsCredentials::AccessToken(t) if t == "tok"
        ));
        let abs = dir.join("abs");
        std::fs::create_dir_all(&abs).unwrap();
        std::fs::write(abs.join("storage-account"), "acct").unwrap();
        std::fs::write(abs.join("storage-key"), "a2V5").unwrap();
        let abs_dir = abs.to_str().unwrap();
        let from_dir = azure(&["--azure-secret-dir", abs_dir]);
        assert_eq!(from_dir.account, "acct");
        assert_eq!(
            from_dir.endpoint.as_deref(),
            Some("https://acct.blob.core.windows.net")
        );
        assert!(matches!(
            from_dir.credentials,
            AzureCredentials::SharedKey(_)
        ));
        std::fs::remove_file(abs.join("storage-account")).unwrap();
        let err = parse(&["--azure-secret-dir", abs_dir])
            .unwrap()
            .storage
            .azure
            .options()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("storage-account") && err.contains(abs_dir),
            "{err}"
        );
        // GCS_SECRET_DIR and AZURE_SECRET_DIR from the environment: used without a credential
        // flag, and a flag wins over them (not a conflict).
        let env_gcp = gcp.to_string();
        let env_abs = abs_dir.to_string();
        std::fs::write(abs.join("storage-account"), "acct").unwrap();
        let env = move |name: &str| match name {
            "GCS_SECRET_DIR" => Some(env_gcp.clone().into()),
            "AZURE_SECRET_DIR" => Some(env_abs.clone().into()),
            _ => None,
        };
        let gcs_in = |args: &[&str]| parse(args).unwrap().storage.gcs.options_in(&env).unwrap();
        assert!(matches!(
            gcs_in(&[]).credentials,
            GcsCredentials::AccessToken(t) if t == "tok"
        ));
        assert!(matches!(
            gcs_in(&["--gcs-credentials-file", path]).credentials,
            GcsCredentials::ServiceAccountKey(_)
        ));
        assert!(matches!(
            gcs_in(&["--gcs-anonymous"]).credentials,
            GcsCredentials::Anonymous
        ));
        let azure_in = |args: &[&str]| parse(args).unwrap().storage.azure.options_in(&env).unwrap();
        assert!(matches!(
            azure_in(&[]).credentials,
            AzureCredentials::SharedKey(k) if k == "a2V5"
        ));
        assert!(matches!(
            azure_in(&["--azure-sas-file", path]).credentials,
            AzureCredentials::Sas(_)
        ));
        // Only the flags of the location's kind are read.
        let cli = parse(&["--gcs-credentials-file", "/nonexistent/key.json"]).unwrap();
        let s3 = Location::parse("s3://b/k").unwrap();
        assert!(cli.storage.store_options(&s3).is_ok());
        let gs = Location::parse("gs://b/k").unwrap();
        let err = cli.storage.store_options(&gs).unwrap_err().to_string();
        assert!(err.contains("/nonexistent/key.json"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_ca_file_is_named() {
        let cli = Cli::try_parse_from(["t", "--s3-ca-file", "/nonexistent/ca.pem"]).unwrap();
        let err = cli.storage.options().unwrap_err();
        assert!(err.to_string().contains("/nonexistent/ca.pem"), "{err}");
    }
}
