//! What a restore of a snapshot must reproduce: the key count, a digest of the key space and
//! etcd's `HashKV` at a revision, taken from the member the snapshot came from and recorded in
//! the manifest. A drill restores the snapshot, asks the restored member the same questions and
//! compares ([`compare`]).
//!
//! The digest ([`Contents::content_sha256`]) is what a drill relies on: SHA-256 over every key
//! at the revision, in key order, with its value and metadata (create and mod revision,
//! version, lease), read page by page. It depends only on the key space at that revision. etcd's
//! `HashKV` also covers the history kept since the last compaction, so it differs between a
//! member and a restore of its snapshot whenever their compaction differs: with the compaction
//! at the snapshot's own revision (a quiet cluster whose periodic compaction caught up) the
//! member reports no compaction (`-1`) while the restore reports one, and the hashes disagree
//! about the same key space. `HashKV` is compared only when neither side has a digest (older
//! manifests) and both report the same compaction.

use std::time::Instant;

use etcd_client::{Client, GetOptions};
use serde::{Deserialize, Serialize};

use crate::Result;
use crate::member::classify;

/// The answers a member gave about its key space at one revision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Contents {
    /// The revision asked about: the member's revision before the snapshot started, which the
    /// snapshot holds (it holds at least this).
    pub revision: i64,
    /// Keys at that revision.
    pub key_count: i64,
    /// `HashKV` at that revision: every key revision since the last compaction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_kv: Option<u32>,
    /// The compaction revision `HashKV` reported (the hash covers what came after it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compact_revision: Option<i64>,
    /// SHA-256 (hex) of every key at that revision with its value and metadata, in key order:
    /// the key space itself, whatever the compaction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_sha256: Option<String>,
    /// Why there is no hash, when there is none (turned off for a very large key space).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_skipped: Option<String>,
    /// How long the questions took on the member.
    pub seconds: f64,
}

/// Whether to ask for `HashKV`, which reads every key revision of the member's database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HashKv {
    #[default]
    Take,
    Skip,
}

/// Asks `client`'s member for the key count (and `HashKV`) at `revision`.
pub async fn take(
    client: &mut Client,
    endpoint: &str,
    revision: i64,
    hash: HashKv,
) -> Result<Contents> {
    let started = Instant::now();
    let key_count = count(client, endpoint, revision).await?;
    let (hash_kv, compact_revision, content_sha256, hash_skipped) = match hash {
        HashKv::Skip => (None, None, None, Some("turned off".to_string())),
        HashKv::Take => {
            let answer = client
                .hash_kv(revision)
                .await
                .map_err(|e| classify(endpoint, &e))?;
            let digest = content_digest(client, endpoint, revision).await?;
            (
                Some(answer.hash()),
                Some(answer.compact_version()),
                Some(digest),
                None,
            )
        }
    };
    Ok(Contents {
        revision,
        key_count,
        hash_kv,
        compact_revision,
        content_sha256,
        hash_skipped,
        seconds: (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
    })
}

/// The key count and the digest ([`Contents::content_sha256`]) of the key space at
/// `revision`: what a restore compares with its backup's record.
pub async fn key_space(
    client: &mut Client,
    endpoint: &str,
    revision: i64,
) -> Result<(i64, String)> {
    let key_count = count(client, endpoint, revision).await?;
    let digest = content_digest(client, endpoint, revision).await?;
    Ok((key_count, digest))
}

/// How many keys there are at `revision`.
///
/// Reads here and in [`content_digest`] are serializable: they describe the asked member's own
/// data at a fixed revision (the revision of its snapshot, or of a restored member), which
/// needs no leader. A member that lost quorum still answers them, so the snapshot of a surviving
/// member (a recovery from a survivor) records its contents too.
async fn count(client: &mut Client, endpoint: &str, revision: i64) -> Result<i64> {
    let counted = client
        .get(
            "",
            Some(
                GetOptions::new()
                    .with_all_keys()
                    .with_count_only()
                    .with_revision(revision)
                    .with_serializable(),
            ),
        )
        .await
        .map_err(|e| classify(endpoint, &e))?;
    Ok(counted.count())
}

/// Keys read per request for the digest, at first: memory stays bounded by one page whatever
/// the size of the key space.
const DIGEST_PAGE_KEYS: i64 = 500;
/// The largest page taken. A page of large values (etcd takes up to 1.5 MiB each by default,
/// more when its request limit is raised) over this is asked again with fewer keys.
const DIGEST_PAGE_BYTES: usize = 8 << 20;

/// SHA-256 (hex) of every key at `revision`, in key order, each as its key, value, create and
/// mod revision, version and lease, every field length-prefixed so that no two key spaces
/// hash alike.
async fn content_digest(client: &mut Client, endpoint: &str, revision: i64) -> Result<String> {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    let mut from: Vec<u8> = vec![0];
    let mut kv = client
        .kv_client()
        .max_decoding_message_size(DIGEST_PAGE_BYTES);
    let mut page_keys = DIGEST_PAGE_KEYS;
    loop {
        let asked = kv
            .get(
                from.clone(),
                Some(
                    GetOptions::new()
                        .with_from_key()
                        .with_revision(revision)
                        .with_limit(page_keys)
                        .with_serializable()
                        .with_sort(etcd_client::SortTarget::Key, etcd_client::SortOrder::Ascend),
                ),
            )
            .await;
        let page = match asked {
            // Too large a page: the same keys in smaller ones.
            Err(etcd_client::Error::GRpcStatus(status))
                if status.code() == tonic::Code::OutOfRange && page_keys > 1 =>
            {
                page_keys = (page_keys / 4).max(1);
                continue;
            }
            answer => answer.map_err(|e| classify(endpoint, &e))?,
        };
        for kv in page.kvs() {
            for field in [kv.key(), kv.value()] {
                hasher.update((field.len() as u64).to_be_bytes());
                hasher.update(field);
            }
            for number in [
                kv.create_revision(),
                kv.mod_revision(),
                kv.version(),
                kv.lease(),
            ] {
                hasher.update(number.to_be_bytes());
            }
        }
        match page.kvs().last() {
            Some(last) if page.more() => {
                from = last.key().to_vec();
                from.push(0);
            }
            _ => break,
        }
    }
    Ok(hex::encode(hasher.finalize()))
}

/// What differs between the recorded contents and the restored member's answers, one line
/// each; empty when they match. Only what both sides have is compared: the digest of the key
/// space when both have one, else `HashKV` when both report the same compaction (it covers the
/// history since the compaction, see the module's documentation).
pub fn compare(recorded: &Contents, restored: &Contents) -> Vec<String> {
    let mut differences = Vec::new();
    if recorded.revision != restored.revision {
        differences.push(format!(
            "asked at revision {} but answered at {}",
            recorded.revision, restored.revision
        ));
    }
    if recorded.key_count != restored.key_count {
        differences.push(format!(
            "{} keys at revision {} recorded, the restore has {}",
            recorded.key_count, recorded.revision, restored.key_count
        ));
    }
    if let (Some(a), Some(b)) = (&recorded.content_sha256, &restored.content_sha256) {
        if a != b {
            differences.push(format!(
                "the key space at revision {} differs: SHA-256 {a} recorded, the restore's is {b}",
                recorded.revision
            ));
        }
        return differences;
    }
    if let (Some(a), Some(b)) = (recorded.hash_kv, restored.hash_kv)
        && recorded.compact_revision == restored.compact_revision
        && a != b
    {
        differences.push(format!(
            "HashKV at revision {} recorded {a}, the restore hashes to {b}",
            recorded.revision
        ));
    }
    differences
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contents(keys: i64, hash: Option<u32>) -> Contents {
        Contents {
            revision: 500,
            key_count: keys,
            hash_kv: hash,
            compact_revision: hash.map(|_| 1),
            content_sha256: None,
            hash_skipped: None,
            seconds: 0.1,
        }
    }

    #[test]
    fn matching_contents_have_no_difference() {
        assert!(compare(&contents(42, Some(7)), &contents(42, Some(7))).is_empty());
        // A hash turned off at backup time is not compared.
        assert!(compare(&contents(42, None), &contents(42, Some(7))).is_empty());
    }

    #[test]
    fn each_difference_is_named() {
        let differences = compare(&contents(42, Some(7)), &contents(41, Some(8)));
        assert_eq!(differences.len(), 2, "{differences:?}");
        assert!(differences[0].contains("42 keys at revision 500"));
        assert!(differences[1].contains("HashKV at revision 500 recorded 7"));
    }

    #[test]
    fn the_digest_decides_whatever_the_compaction_and_hash_kv_say() {
        let digest = |d: &str| Contents {
            content_sha256: Some(d.into()),
            ..contents(42, Some(7))
        };
        // Compacted differently, HashKV differs: the same key space passes.
        let mut restored = digest("aa");
        restored.compact_revision = Some(500);
        restored.hash_kv = Some(8);
        assert!(compare(&digest("aa"), &restored).is_empty());
        // Another key space fails, naming the digests.
        let differences = compare(&digest("aa"), &digest("bb"));
        assert_eq!(differences.len(), 1, "{differences:?}");
        assert!(differences[0].contains("SHA-256 aa recorded"));
    }

    #[test]
    fn without_digests_hash_kv_is_compared_only_under_the_same_compaction() {
        let mut compacted = contents(42, Some(8));
        compacted.compact_revision = Some(300);
        assert!(compare(&contents(42, Some(7)), &compacted).is_empty());
        compacted.compact_revision = Some(1);
        assert_eq!(compare(&contents(42, Some(7)), &compacted).len(), 1);
    }

    #[test]
    fn old_manifests_without_a_hash_still_parse() {
        let parsed: Contents =
            serde_json::from_str(r#"{"revision":5,"keyCount":3,"seconds":0.0}"#).unwrap();
        assert_eq!(parsed.hash_kv, None);
    }
}
