//! Client-side encryption of backups (the `age` format): `EtcdBackup` names the public keys it
//! encrypts to, `EtcdRestore` the private key that decrypts. Both are Secret keys, so the keys
//! never appear in a spec, a status or an argument.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One key of a Secret in the object's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct SecretKeyRef {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key within the Secret.
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[-._a-zA-Z0-9]+$"))]
    pub key: String,
}

/// `EtcdBackup.spec.encryption`: encrypt every backup to these recipients.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupEncryption {
    /// The Secret key holding the age recipients: public keys (`age1...`), one per line, `#`
    /// comments allowed, as `age -R` reads them. Any one of the matching private keys decrypts
    /// (several: key rotation, a break-glass key). Only public keys: the operator that writes
    /// backups cannot read them.
    pub recipients_secret: SecretKeyRef,
}

/// `EtcdRestore.spec.decryption`: the private key for an encrypted backup.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreDecryption {
    /// The Secret key holding the age identity (`AGE-SECRET-KEY-1...`, as `age-keygen`
    /// writes it). Mounted as a file into the restore pods only; the operator never reads it.
    pub identity_secret: SecretKeyRef,
}
