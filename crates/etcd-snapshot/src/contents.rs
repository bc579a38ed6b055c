//! What a restore of a snapshot must reproduce: the key count and etcd's `HashKV` at a revision,
//! taken from the member the snapshot came from and recorded in the manifest. A drill restores
//! the snapshot, asks the restored member the same questions and compares ([`compare`]).

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
    let counted = client
        .get(
            "",
            Some(
                GetOptions::new()
                    .with_all_keys()
                    .with_count_only()
                    .with_revision(revision),
            ),
        )
        .await
        .map_err(|e| classify(endpoint, &e))?;
    let (hash_kv, compact_revision, hash_skipped) = match hash {
        HashKv::Skip => (None, None, Some("turned off".to_string())),
        HashKv::Take => {
            let answer = client
                .hash_kv(revision)
                .await
                .map_err(|e| classify(endpoint, &e))?;
            (Some(answer.hash()), Some(answer.compact_version()), None)
        }
    };
    Ok(Contents {
        revision,
        key_count: counted.count(),
        hash_kv,
        compact_revision,
        hash_skipped,
        seconds: (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
    })
}

/// What differs between the recorded contents and the restored member's answers, one line
/// each; empty when they match. Only what both sides have is compared.
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
    if let (Some(a), Some(b)) = (recorded.compact_revision, restored.compact_revision)
        && a != b
    {
        differences.push(format!(
            "compacted at revision {a} recorded, the restore is compacted at {b}"
        ));
    }
    if let (Some(a), Some(b)) = (recorded.hash_kv, restored.hash_kv)
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
        let mut compacted = contents(42, Some(7));
        compacted.compact_revision = Some(300);
        assert!(compare(&contents(42, Some(7)), &compacted)[0].contains("compacted"));
    }

    #[test]
    fn old_manifests_without_a_hash_still_parse() {
        let parsed: Contents =
            serde_json::from_str(r#"{"revision":5,"keyCount":3,"seconds":0.0}"#).unwrap();
        assert_eq!(parsed.hash_kv, None);
    }
}
