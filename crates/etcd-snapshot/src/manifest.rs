//! The manifest written beside each backup once it is committed.
//!
//! S3 fixes user metadata when an upload starts, but the checksums and size are known only at
//! the end; the manifest holds them, so `verify`, `list` and the controllers can check an
//! object without trusting its name.

use std::collections::BTreeMap;

use backup_storage::encryption::Encryption;
use backup_storage::stored_checksum::StoredChecksum;
use backup_storage::{ObjectInfo, Store};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{Compression, Contents, Error, Result};

pub use backup_storage::{MANIFEST_SUFFIX, manifest_key};
pub const FORMAT: &str = "etcd-snapshot/v1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub format: String,
    /// Bytes stored (after compression and encryption) and one checksum of them: their sha256,
    /// or for an encrypted object their CRC32C (see [`backup_storage::stored_checksum`]; older
    /// manifests of encrypted objects record the sha256). Use [`Manifest::stored_checksum`].
    pub stored_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_crc32c: Option<String>,
    /// The object's ETag (local storage: its inode and mtime) once committed, so a manifest
    /// left from before a rewrite of its object never vouches for the new object unread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_etag: Option<String>,
    pub compression: Compression,
    /// Present when the object is age-encrypted: to whom (public keys only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<Encryption>,
    /// The snapshot as etcd sent it (the plaintext): database bytes (without the 32-byte trailer) and the
    /// trailer's sha256, which `etcdutl snapshot restore` checks.
    pub db_bytes: u64,
    pub db_sha256: String,
    /// Revision of the member before the snapshot started; the snapshot holds at least this.
    pub etcd_revision: i64,
    pub etcd_version: String,
    /// What a restore must reproduce (key count, `HashKV`), for drills; absent in manifests of
    /// older versions, or when the member could not be asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contents: Option<Contents>,
    pub cluster_id: String,
    pub member_id: String,
    pub endpoint: String,
    pub start_time: DateTime<Utc>,
    pub completion_time: DateTime<Utc>,
    pub duration_seconds: f64,
    pub tool: String,
    /// The caller's own metadata given with the upload (e.g. the operator's owner UID), kept
    /// here too because local files carry no user metadata.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

impl Manifest {
    pub fn parse(key: &str, bytes: &[u8]) -> Result<Manifest> {
        let manifest: Manifest = serde_json::from_slice(bytes).map_err(|e| Error::BadManifest {
            key: key.to_string(),
            message: e.to_string(),
        })?;
        if manifest.format != FORMAT {
            return Err(Error::BadManifest {
                key: key.to_string(),
                message: format!("unknown format {:?} (expected {FORMAT})", manifest.format),
            });
        }
        if let Err(message) = manifest.recorded_checksum() {
            return Err(Error::BadManifest {
                key: key.to_string(),
                message: message.into(),
            });
        }
        Ok(manifest)
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

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).expect("a manifest always serializes")
    }

    /// The manifest beside the object `key`, if there is one; an unreadable one is an error.
    pub async fn load(store: &Store, key: &str) -> Result<Option<Manifest>> {
        let key = manifest_key(key);
        match store.get_small(&key).await? {
            Some(bytes) => Manifest::parse(&key, &bytes).map(Some),
            None => Ok(None),
        }
    }

    /// Why this manifest does not describe `object` (another size or ETag), if it does not.
    pub fn staleness(&self, object: &ObjectInfo) -> Option<String> {
        if self.stored_bytes != object.size {
            return Some(format!(
                "{} bytes recorded, the object has {}",
                self.stored_bytes, object.size
            ));
        }
        match (&self.stored_etag, &object.etag) {
            (Some(recorded), Some(found)) if recorded != found => {
                Some(format!("ETag {recorded} recorded, the object has {found}"))
            }
            _ => None,
        }
    }
}

/// The manifest beside `object`, for decisions taken without reading the object (ownership,
/// listings): `None` when it has none, an error when the manifest is unreadable or stale
/// (written for another object under the same key). `verify` and `fetch` read the content
/// instead, which a copied backup (same bytes, another ETag) passes.
pub async fn read_manifest(store: &Store, object: &ObjectInfo) -> Result<Option<Manifest>> {
    let Some(manifest) = Manifest::load(store, &object.key).await? else {
        return Ok(None);
    };
    match manifest.staleness(object) {
        Some(why) => Err(Error::StaleManifest {
            key: manifest_key(&object.key),
            why,
        }),
        None => Ok(Some(manifest)),
    }
}

/// What is known when the upload starts, stored as S3 user metadata on the object itself so
/// that `aws s3api head-object` shows it too.
pub(crate) fn object_metadata(
    revision: i64,
    version: &str,
    cluster_id: &str,
    member_id: &str,
    compression: Compression,
    encrypted: bool,
    start: DateTime<Utc>,
) -> BTreeMap<String, String> {
    let mut metadata = BTreeMap::from([
        ("format".into(), FORMAT.into()),
        ("etcd-revision".into(), revision.to_string()),
        ("etcd-version".into(), version.into()),
        ("etcd-cluster-id".into(), cluster_id.into()),
        ("etcd-member-id".into(), member_id.into()),
        ("compression".into(), compression.as_str().into()),
        ("created".into(), start.to_rfc3339()),
    ]);
    if encrypted {
        metadata.insert("encryption".into(), "age".into());
    }
    metadata
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        Manifest {
            format: FORMAT.into(),
            stored_bytes: 10,
            stored_sha256: Some("ab".into()),
            stored_crc32c: None,
            stored_etag: Some("\"e1\"".into()),
            compression: Compression::Zstd,
            encryption: None,
            db_bytes: 4096,
            db_sha256: "cd".into(),
            etcd_revision: 42,
            etcd_version: "3.4.23".into(),
            contents: None,
            cluster_id: "c".into(),
            member_id: "m".into(),
            endpoint: "http://127.0.0.1:2379".into(),
            start_time: DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
            completion_time: DateTime::from_timestamp(1_700_000_001, 0).unwrap(),
            duration_seconds: 1.0,
            tool: "test".into(),
            labels: BTreeMap::from([("owner".into(), "uid-1".into())]),
        }
    }

    #[test]
    fn roundtrips_with_camel_case_fields() {
        let json = sample().to_json();
        let text = String::from_utf8(json.clone()).unwrap();
        assert!(text.contains("\"dbSha256\": \"cd\""), "{text}");
        assert!(text.contains("\"compression\": \"zstd\""), "{text}");
        assert_eq!(Manifest::parse("k", &json).unwrap(), sample());
        assert!(!text.contains("storedCrc32c"), "{text}");
    }

    #[test]
    fn an_encrypted_objects_manifest_records_its_crc32c_and_one_without_a_checksum_is_refused() {
        let encrypted = Manifest {
            stored_sha256: None,
            stored_crc32c: Some("0a0b0c0d".into()),
            encryption: Some(Encryption {
                scheme: "age".into(),
                recipients: vec!["age1example".into()],
            }),
            ..sample()
        };
        let json = encrypted.to_json();
        let text = String::from_utf8(json.clone()).unwrap();
        assert!(text.contains("\"storedCrc32c\": \"0a0b0c0d\""), "{text}");
        assert!(!text.contains("storedSha256"), "{text}");
        let parsed = Manifest::parse("k", &json).unwrap();
        assert_eq!(parsed.stored_checksum().to_string(), "crc32c 0a0b0c0d");

        let neither = Manifest {
            stored_crc32c: None,
            ..encrypted.clone()
        };
        let err = Manifest::parse("k", &neither.to_json()).unwrap_err();
        assert!(err.to_string().contains("records no checksum"), "{err}");
        let plain_with_a_crc = Manifest {
            encryption: None,
            ..encrypted
        };
        let err = Manifest::parse("k", &plain_with_a_crc.to_json()).unwrap_err();
        assert!(err.to_string().contains("no storedSha256"), "{err}");
    }

    fn object(size: u64, etag: Option<&str>) -> ObjectInfo {
        ObjectInfo {
            key: "k".into(),
            size,
            last_modified: None,
            etag: etag.map(str::to_string),
            metadata: BTreeMap::new(),
        }
    }

    #[test]
    fn a_manifest_describes_only_the_object_it_was_written_for() {
        let m = sample();
        assert_eq!(m.staleness(&object(10, Some("\"e1\""))), None);
        let other_size = m.staleness(&object(11, Some("\"e1\"")));
        assert!(other_size.unwrap().contains("10 bytes recorded"));
        let rewritten = m.staleness(&object(10, Some("\"e2\"")));
        assert!(rewritten.unwrap().contains("ETag"));
        // Manifests from before the ETag was recorded are checked by size alone.
        let old = Manifest {
            stored_etag: None,
            ..sample()
        };
        assert_eq!(old.staleness(&object(10, Some("\"e2\""))), None);
        assert!(Manifest::parse("k", br#"{"format":"etcd-snapshot/v1"}"#).is_err());
    }

    #[test]
    fn rejects_garbage_and_unknown_formats() {
        assert!(Manifest::parse("k", b"{").is_err());
        let mut m = sample();
        m.format = "other/v9".into();
        let err = Manifest::parse("k", &m.to_json()).unwrap_err().to_string();
        assert!(err.contains("unknown format"), "{err}");
    }
}
