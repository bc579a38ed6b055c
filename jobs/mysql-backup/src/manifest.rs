//! The manifest written beside a committed backup. S3 fixes user metadata when an upload starts,
//! but the size, checksums and file count are known only at the end; restore checks them.

use backup_storage::encryption::Encryption;
use backup_storage::stored_checksum::StoredChecksum;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::compress::Compression;
use crate::metadata::BackupMetadata;
use crate::profile::Family;

pub use backup_storage::{MANIFEST_SUFFIX, manifest_key};
pub const FORMAT: &str = "mysql-backup/v1";
/// An incremental backup's manifest: a format of its own, so that a version of mysql-backup that
/// knows only full backups never lists, restores or counts one as a full backup.
pub const FORMAT_INCREMENTAL: &str = "mysql-backup/v1-incremental";

/// What an incremental backup builds on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IncrementalOf {
    /// The base backup (a full backup or an earlier incremental) by its name beside this one:
    /// its key relative to this backup's "directory" (the key up to its last `/`), so a chain
    /// copied or moved to another prefix or bucket stays whole. See [`IncrementalOf::base_key`].
    pub base: String,
    /// The base's `to_lsn`, which is this backup's `from_lsn`.
    pub base_to_lsn: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub format: String,
    /// Bytes stored (after compression and encryption) and one checksum of them: their sha256,
    /// or for an encrypted backup their CRC32C (age authenticates the content, and
    /// `streamSha256` records the plaintext's; older manifests of encrypted backups record the
    /// sha256). Use [`Manifest::stored_checksum`].
    pub stored_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_crc32c: Option<String>,
    /// The object's ETag once committed: a manifest left from before a rewrite of its object
    /// is never taken for the new object's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_etag: Option<String>,
    pub compression: Compression,
    /// Present when the object is age-encrypted: to whom (public keys only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<Encryption>,
    /// The xbstream as the tool wrote it (the plaintext).
    pub stream_bytes: u64,
    /// Its sha256, recorded for encrypted backups (restore checks it after decrypting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_sha256: Option<String>,
    pub payload_bytes: u64,
    pub file_count: u64,
    pub tool_family: Family,
    /// Tool and server versions, binlog file/position/GTID set, LSNs, from the backup's files.
    #[serde(flatten)]
    pub backup: BackupMetadata,
    /// `local` or the `serve` peer it was pulled from.
    pub source: String,
    /// The data dir it was taken from (`crate::lineage`); recorded since incremental backups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lineage: Option<String>,
    /// Present on an incremental backup (format [`FORMAT_INCREMENTAL`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incremental: Option<IncrementalOf>,
    pub start_time: DateTime<Utc>,
    pub completion_time: DateTime<Utc>,
    pub duration_seconds: f64,
    pub runner: String,
}

/// One complete backup: an object and the manifest beside it that records its size.
#[derive(Debug, Clone)]
pub struct Backup {
    pub key: String,
    pub manifest: Manifest,
}

/// The "directory" of a key: everything up to and including its last `/` (empty without one).
pub fn key_directory(key: &str) -> &str {
    key.rfind('/').map_or("", |i| &key[..=i])
}

impl IncrementalOf {
    /// The base's key, for an incremental stored under `own_key`.
    pub fn base_key(&self, own_key: &str) -> String {
        format!("{}{}", key_directory(own_key), self.base)
    }

    /// How an incremental stored under `own_key` names `base_key`: only a base in the same
    /// directory can be named (None otherwise).
    pub fn name_beside(own_key: &str, base_key: &str) -> Option<String> {
        let directory = key_directory(own_key);
        (key_directory(base_key) == directory).then(|| base_key[directory.len()..].to_string())
    }
}

impl Manifest {
    /// The key of the backup this one builds on, when it is an incremental stored under `own_key`.
    pub fn base_key(&self, own_key: &str) -> Option<String> {
        self.incremental.as_ref().map(|i| i.base_key(own_key))
    }

    pub fn parse(bytes: &[u8]) -> Result<Manifest, String> {
        let m: Manifest = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        match (m.format.as_str(), &m.incremental) {
            (FORMAT, None) | (FORMAT_INCREMENTAL, Some(_)) => {}
            (FORMAT, Some(_)) => return Err("a full backup's manifest names a base".into()),
            (FORMAT_INCREMENTAL, None) => {
                return Err("an incremental backup's manifest names no base".into());
            }
            (other, _) => {
                return Err(format!(
                    "unknown format {other:?} (expected {FORMAT} or {FORMAT_INCREMENTAL})"
                ));
            }
        }
        m.recorded_checksum()?;
        Ok(m)
    }

    fn recorded_checksum(&self) -> Result<StoredChecksum, &'static str> {
        StoredChecksum::from_manifest(
            self.stored_sha256.as_deref(),
            self.stored_crc32c.as_deref(),
            self.encryption.is_some(),
        )
    }

    /// The checksum of the stored bytes this manifest records.
    pub fn stored_checksum(&self) -> StoredChecksum {
        self.recorded_checksum()
            .expect("a manifest that parsed, or one this version wrote, follows the checksum rules")
    }

    pub fn is_incremental(&self) -> bool {
        self.incremental.is_some()
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).expect("a manifest always serializes")
    }
}
