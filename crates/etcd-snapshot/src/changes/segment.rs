//! Where segments live and the manifest beside each.
//!
//! The archive of the backups named `<base>` (the scheduled backups' base name) is
//! `<base>.changes/<cluster-id>/<first-revision, 20 digits>`: keys sort by revision, the
//! snapshots' retention (which parses `<base>_v<revision>_<time>`) never takes one for a
//! backup, and a cluster restored into a new cluster ID starts an archive of its own (its
//! history is not the old one's, even where the revision numbers meet). The last revision is
//! known only when a segment closes, so it is in the manifest, not the key.

use std::collections::BTreeMap;

use backup_storage::Store;
use backup_storage::encryption::Encryption;
use backup_storage::stored_checksum::StoredChecksum;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{Compression, Error, Result, manifest_key};

pub const SEGMENT_FORMAT: &str = "etcd-changes/v1";
const SUFFIX: &str = ".changes/";
const REVISION_DIGITS: usize = 20;

/// The prefix of every segment of `base`'s archive (all clusters).
pub fn archive_prefix(base: &str) -> String {
    format!("{base}{SUFFIX}")
}

/// The prefix of the segments of one cluster's archive.
pub fn cluster_prefix(base: &str, cluster_id: &str) -> String {
    format!("{base}{SUFFIX}{cluster_id}/")
}

/// The key of the segment of `cluster_id` that starts at `first_revision`.
pub fn segment_key(base: &str, cluster_id: &str, first_revision: i64) -> String {
    format!(
        "{}{first_revision:0width$}",
        cluster_prefix(base, cluster_id),
        width = REVISION_DIGITS
    )
}

/// A segment recognised by its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentKey {
    pub key: String,
    pub cluster_id: String,
    pub first_revision: i64,
}

/// Parses `key` as a segment of `base`'s archive; manifests and anything else yield `None`.
pub fn parse_segment_key(base: &str, key: &str) -> Option<SegmentKey> {
    let rest = key.strip_prefix(base)?.strip_prefix(SUFFIX)?;
    let (cluster_id, revision) = rest.split_once('/')?;
    if cluster_id.is_empty()
        || revision.len() != REVISION_DIGITS
        || !revision.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    Some(SegmentKey {
        key: key.to_string(),
        cluster_id: cluster_id.to_string(),
        first_revision: revision.parse().ok()?,
    })
}

/// Written beside a segment once it is committed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SegmentManifest {
    pub format: String,
    pub cluster_id: String,
    pub first_revision: i64,
    pub last_revision: i64,
    pub events: u64,
    /// When the archive received the first and the last event.
    pub first_time: DateTime<Utc>,
    pub last_time: DateTime<Utc>,
    /// The segment starts with events read while the archive caught up with history (after a
    /// start or a broken watch), through this revision: their commit times are known only to
    /// be no later than when they were read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_through_revision: Option<i64>,
    /// The sha256 of the plaintext (records and end record).
    pub plaintext_sha256: String,
    pub stored_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_crc32c: Option<String>,
    pub compression: Compression,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<Encryption>,
    pub etcd_version: String,
    pub completion_time: DateTime<Utc>,
    pub tool: String,
    /// The writer's own metadata given with the upload (the operator's owner UID), kept here
    /// too because local files carry no user metadata.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

impl SegmentManifest {
    pub fn parse(key: &str, bytes: &[u8]) -> Result<SegmentManifest> {
        let bad = |message: String| Error::BadManifest {
            key: key.to_string(),
            message,
        };
        let manifest: SegmentManifest =
            serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
        if manifest.format != SEGMENT_FORMAT {
            return Err(bad(format!(
                "unknown format {:?} (expected {SEGMENT_FORMAT})",
                manifest.format
            )));
        }
        manifest.stored_checksum().map_err(|m| bad(m.into()))?;
        Ok(manifest)
    }

    pub fn stored_checksum(&self) -> std::result::Result<StoredChecksum, &'static str> {
        StoredChecksum::from_manifest(
            self.stored_sha256.as_deref(),
            self.stored_crc32c.as_deref(),
            self.encryption.is_some(),
        )
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).expect("a manifest always serializes")
    }

    /// Writes this manifest beside segment `key`.
    pub async fn write_beside(&self, store: &Store, key: &str) -> Result<()> {
        store
            .put_small(
                &manifest_key(key),
                self.to_json().into(),
                "application/json",
            )
            .await?;
        Ok(())
    }

    /// The manifest beside segment `key`, if written.
    pub async fn load(store: &Store, key: &str) -> Result<Option<SegmentManifest>> {
        let key = manifest_key(key);
        match store.get_small(&key).await? {
            Some(bytes) => SegmentManifest::parse(&key, &bytes).map(Some),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_by_revision_and_parse_back() {
        let small = segment_key("etcd.backup", "abc", 99);
        let large = segment_key("etcd.backup", "abc", 100);
        assert!(small < large);
        assert_eq!(
            parse_segment_key("etcd.backup", &large),
            Some(SegmentKey {
                key: large.clone(),
                cluster_id: "abc".into(),
                first_revision: 100
            })
        );
    }

    #[test]
    fn other_objects_are_not_segments() {
        let key = segment_key("etcd.backup", "abc", 7);
        for other in [
            manifest_key(&key),
            "etcd.backup_v7_2026-11-29-10:00:00".to_string(),
            "etcd.backup.changes/abc/7".to_string(),
            "etcd.backup.changes//00000000000000000007".to_string(),
            "etcd.backup2.changes/abc/00000000000000000007".to_string(),
        ] {
            assert_eq!(parse_segment_key("etcd.backup", &other), None, "{other}");
        }
    }
}
