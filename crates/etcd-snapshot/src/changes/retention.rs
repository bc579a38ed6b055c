//! Which segments retention deletes: those no kept snapshot needs to reach a point.
//!
//! A restore to a point starts from a snapshot and replays the segments after it, so a segment
//! is needed while it holds a revision after the oldest kept snapshot of its cluster. Segments
//! of a cluster with no kept snapshot cannot be replayed onto anything and go too (a cluster
//! restored into a new ID leaves the old archive behind once the old snapshots rotate out).
//!
//! Segments are found by their keys: consecutive segments of a cluster do not overlap, so a
//! segment ends before the next one starts, and only the newest segment of a cluster needs its
//! manifest (its last revision) to be judged.

use std::collections::BTreeMap;

use backup_storage::Store;

use super::segment::{SegmentKey, SegmentManifest, archive_prefix, parse_segment_key};
use backup_storage::MANIFEST_SUFFIX;

use crate::{Manifest, Result, manifest_key};

/// The segments of `base`'s archive (and their manifests) to delete when `kept` are the
/// snapshots that stay: those none of them needs. Nothing when a kept snapshot's manifest
/// cannot be read (its cluster is unknown, so any segment may be needed).
pub async fn segments_to_prune(store: &Store, base: &str, kept: &[String]) -> Result<Vec<String>> {
    let listed: Vec<String> = store
        .list(&archive_prefix(base))
        .await?
        .into_iter()
        .map(|o| o.key)
        .collect();
    let segments: Vec<SegmentKey> = listed
        .iter()
        .filter_map(|key| parse_segment_key(base, key))
        .collect();
    let stale = stale_pending_manifests(base, &listed, &segments);
    if segments.is_empty() {
        return Ok(Vec::new());
    }
    let mut snapshots = Vec::new();
    for key in kept {
        match Manifest::load(store, key).await {
            Ok(Some(m)) => snapshots.push(KeptSnapshot {
                cluster_id: m.cluster_id,
                revision: m.etcd_revision,
            }),
            _ => return Ok(Vec::new()),
        }
    }
    let mut newest: BTreeMap<&str, &SegmentKey> = BTreeMap::new();
    for segment in &segments {
        let entry = newest.entry(&segment.cluster_id).or_insert(segment);
        if segment.first_revision > entry.first_revision {
            *entry = segment;
        }
    }
    let mut newest_last = BTreeMap::new();
    for (cluster, segment) in newest {
        if let Some(m) = SegmentManifest::load(store, &segment.key).await? {
            newest_last.insert(cluster.to_string(), m.last_revision);
        }
    }
    Ok(segments_to_delete(&segments, &newest_last, &snapshots)
        .into_iter()
        .flat_map(|key| [manifest_key(&key), key])
        .chain(stale)
        .collect())
}

/// The pending manifests (written just before a segment's commit, see the writer) of
/// segments that are not their cluster's newest: only the newest one's is ever read back, after
/// a crash between the commit and the manifest. Others are left by a crash before a commit
/// whose segment was then written under another key (the archive resumed after a snapshot),
/// or by a delete that failed; nothing reads them.
pub fn stale_pending_manifests(
    base: &str,
    listed: &[String],
    segments: &[SegmentKey],
) -> Vec<String> {
    let mut newest: BTreeMap<&str, i64> = BTreeMap::new();
    for segment in segments {
        let first = newest
            .entry(&segment.cluster_id)
            .or_insert(segment.first_revision);
        *first = (*first).max(segment.first_revision);
    }
    listed
        .iter()
        .filter(|key| {
            let Some(segment) = key
                .strip_suffix(".pending")
                .and_then(|k| k.strip_suffix(MANIFEST_SUFFIX))
                .and_then(|k| parse_segment_key(base, k))
            else {
                return false;
            };
            newest
                .get(segment.cluster_id.as_str())
                .is_some_and(|n| segment.first_revision < *n)
        })
        .cloned()
        .collect()
}

/// A kept snapshot: its cluster and revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptSnapshot {
    pub cluster_id: String,
    pub revision: i64,
}

/// Keys of the segments to delete (their manifests go with them). `newest_last`: the last
/// revision of each cluster's newest segment, from its manifest; a newest segment without one
/// (a crash before it was written) is kept.
pub fn segments_to_delete(
    segments: &[SegmentKey],
    newest_last: &BTreeMap<String, i64>,
    kept: &[KeptSnapshot],
) -> Vec<String> {
    let mut by_cluster: BTreeMap<&str, Vec<&SegmentKey>> = BTreeMap::new();
    for segment in segments {
        by_cluster
            .entry(&segment.cluster_id)
            .or_default()
            .push(segment);
    }
    let mut delete = Vec::new();
    for (cluster, mut ours) in by_cluster {
        ours.sort_by_key(|s| s.first_revision);
        let oldest_kept = kept
            .iter()
            .filter(|k| k.cluster_id == cluster)
            .map(|k| k.revision)
            .min();
        for (i, segment) in ours.iter().enumerate() {
            let Some(oldest) = oldest_kept else {
                delete.push(segment.key.clone());
                continue;
            };
            // The last revision this segment may hold.
            let last = match ours.get(i + 1) {
                Some(next) => Some(next.first_revision - 1),
                None => newest_last.get(cluster).copied(),
            };
            if last.is_some_and(|last| last <= oldest) {
                delete.push(segment.key.clone());
            }
        }
    }
    delete
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(cluster: &str, first: i64) -> SegmentKey {
        SegmentKey {
            key: format!("{cluster}/{first}"),
            cluster_id: cluster.into(),
            first_revision: first,
        }
    }

    fn kept(cluster: &str, revision: i64) -> KeptSnapshot {
        KeptSnapshot {
            cluster_id: cluster.into(),
            revision,
        }
    }

    #[test]
    fn segments_wholly_before_the_oldest_kept_snapshot_go_and_the_one_spanning_it_stays() {
        let segments = [
            segment("a", 10),
            segment("a", 20),
            segment("a", 30),
            segment("a", 40),
        ];
        let newest = BTreeMap::from([("a".to_string(), 49)]);
        // The oldest kept snapshot is at 29: segments 10..19 and 20..29 hold nothing after it.
        let delete = segments_to_delete(&segments, &newest, &[kept("a", 35), kept("a", 29)]);
        assert_eq!(delete, ["a/10", "a/20"]);
        // At 30: the segment from 30 holds 31 and later, so it stays.
        let delete = segments_to_delete(&segments, &newest, &[kept("a", 30)]);
        assert_eq!(delete, ["a/10", "a/20"]);
    }

    #[test]
    fn the_newest_segment_is_judged_by_its_manifest_and_kept_without_one() {
        let segments = [segment("a", 10), segment("a", 20)];
        let delete = segments_to_delete(
            &segments,
            &BTreeMap::from([("a".into(), 25)]),
            &[kept("a", 25)],
        );
        assert_eq!(delete, ["a/10", "a/20"]);
        let delete = segments_to_delete(&segments, &BTreeMap::new(), &[kept("a", 25)]);
        assert_eq!(delete, ["a/10"]);
    }

    #[test]
    fn a_cluster_with_no_kept_snapshot_has_nothing_to_replay_onto() {
        let segments = [segment("old", 10), segment("new", 5000)];
        let newest = BTreeMap::from([("old".into(), 99), ("new".into(), 5100)]);
        let delete = segments_to_delete(&segments, &newest, &[kept("new", 4999)]);
        assert_eq!(delete, ["old/10"]);
    }

    #[test]
    fn pending_manifests_of_segments_that_are_not_their_clusters_newest_go() {
        let base = "b/etcd.backup";
        let key =
            |cluster: &str, first: i64| super::super::segment::segment_key(base, cluster, first);
        let pending = |segment: &str| format!("{segment}{MANIFEST_SUFFIX}.pending");
        let (old, newest, other) = (key("a", 10), key("a", 20), key("b", 5));
        let segments: Vec<SegmentKey> = [&old, &newest, &other]
            .iter()
            .map(|k| parse_segment_key(base, k).unwrap())
            .collect();
        let orphan = key("a", 15);
        let listed = [
            old.clone(),
            newest.clone(),
            other.clone(),
            pending(&old),
            pending(&orphan),
            pending(&newest),
            pending(&other),
            pending(&key("c", 1)),
        ]
        .map(String::from);
        assert_eq!(
            stale_pending_manifests(base, &listed, &segments),
            [pending(&old), pending(&orphan)],
            "the newest segment's pending manifest may still be read back; a cluster without \
             segments is not judged"
        );
    }

    #[test]
    fn nothing_goes_when_the_oldest_kept_snapshot_is_before_every_segment() {
        let segments = [segment("a", 10), segment("a", 20)];
        let newest = BTreeMap::from([("a".into(), 29)]);
        assert!(segments_to_delete(&segments, &newest, &[kept("a", 9)]).is_empty());
    }
}
