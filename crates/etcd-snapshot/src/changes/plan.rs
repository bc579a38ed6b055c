//! Which snapshot and which segments reach a point, decided from names and manifests only
//! (pure; the rules are tested as a specification).
//!
//! Rules, in order:
//! 1. The snapshot is the newest one at or before the point (by its recorded revision, or for
//!    a time, by when it was taken); none: the point is before the oldest snapshot.
//! 2. The segments are those of the snapshot's cluster that hold the revisions after it up to
//!    the point: from the one holding the snapshot's next revision to the one holding the point.
//! 3. They must follow each other with no revision missing (a gap: the archive fell behind
//!    and the cluster compacted) and reach the point (not archived yet).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::segment::{SegmentKey, SegmentManifest};

/// A snapshot that may start a restore to a point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotAt {
    pub key: String,
    pub revision: i64,
    pub cluster_id: String,
    /// When it was started; its revision was committed at or before this.
    pub taken: DateTime<Utc>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Target {
    Revision(i64),
    /// The last revision committed at or before this time (as the archive saw it).
    Time(DateTime<Utc>),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Revision(r) => write!(f, "revision {r}"),
            Target::Time(t) => write!(f, "{}", t.to_rfc3339()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unreachable {
    #[error(
        "no snapshot at or before {target} (the oldest kept is {oldest}): nothing to start from"
    )]
    BeforeOldestSnapshot { target: String, oldest: String },
    #[error("there are no snapshots under this base")]
    NoSnapshots,
    #[error(
        "snapshots of several clusters ({clusters}) lie before the point (a cluster restored into a new ID archives apart): name one with --cluster-id (an EtcdRestore: spec.pointInTime.clusterId)"
    )]
    SeveralClusters { clusters: String },
    #[error(
        "the archive has a gap: revisions {from}..={to} were never archived (the archiver fell behind and the cluster compacted them); points in the gap cannot be restored, points after the next snapshot can"
    )]
    Gap { from: i64, to: i64 },
    #[error(
        "the archive read revisions {from}..={to} while catching up with history (after a start or a broken watch): their commit times are known only to be before they were read, so a time among them cannot be resolved; restore to a revision instead (--revision)"
    )]
    TimeUnknown { from: i64, to: i64 },
    #[error(
        "{target} is not archived yet: the archive of cluster {cluster_id} reaches revision {newest} ({newest_time})"
    )]
    NotArchivedYet {
        target: String,
        cluster_id: String,
        newest: i64,
        newest_time: String,
    },
}

/// Rule 1: the snapshots at or before the point, newest first (the first one starts; an older
/// one only when a newer holds more than its recorded revision, past the point). They must all
/// be of one cluster: a base holding the archives of several (a cluster restored into a new
/// ID) needs the cluster named.
pub fn snapshots_before(
    snapshots: &[SnapshotAt],
    target: Target,
) -> Result<Vec<&SnapshotAt>, Unreachable> {
    let at_or_before = |s: &&SnapshotAt| match target {
        Target::Revision(r) => s.revision <= r,
        Target::Time(t) => s.taken <= t,
    };
    let mut before: Vec<&SnapshotAt> = snapshots.iter().filter(at_or_before).collect();
    before.sort_by_key(|s| std::cmp::Reverse((s.revision, s.taken)));
    let mut clusters: Vec<&str> = before.iter().map(|s| s.cluster_id.as_str()).collect();
    clusters.sort_unstable();
    clusters.dedup();
    if clusters.len() > 1 {
        return Err(Unreachable::SeveralClusters {
            clusters: clusters.join(", "),
        });
    }
    if !before.is_empty() {
        return Ok(before);
    }
    let oldest = snapshots.iter().min_by_key(|s| (s.revision, s.taken));
    Err(match oldest {
        None => Unreachable::NoSnapshots,
        Some(o) => Unreachable::BeforeOldestSnapshot {
            target: target.to_string(),
            oldest: format!(
                "{} at revision {}, {}",
                o.key,
                o.revision,
                o.taken.to_rfc3339()
            ),
        },
    })
}

/// Rule 2: the segments after `snapshot`, in order, whose manifests are needed; for a
/// revision, up to the one holding it and the one after (which shows a gap before it).
pub fn segments_after<'a>(
    segments: &'a [SegmentKey],
    snapshot: &SnapshotAt,
    target: Target,
) -> Vec<&'a SegmentKey> {
    let mut ours: Vec<&SegmentKey> = segments
        .iter()
        .filter(|s| s.cluster_id == snapshot.cluster_id)
        .collect();
    ours.sort_by_key(|s| s.first_revision);
    // The one holding the snapshot's next revision starts at or before it.
    let start = ours
        .iter()
        .rposition(|s| s.first_revision <= snapshot.revision + 1)
        .unwrap_or(0);
    let mut after = ours.into_iter().skip(start);
    match target {
        Target::Time(_) => after.collect(),
        Target::Revision(r) => {
            let mut needed: Vec<&SegmentKey> = Vec::new();
            for segment in after.by_ref() {
                let past = segment.first_revision > r;
                needed.push(segment);
                if past {
                    break;
                }
            }
            needed
        }
    }
}

/// What rule 3 found: replay the first `segments` manifests' segments, up to `revision`,
/// or for a time that falls inside the last of them, up to its last event at or before
/// `until_time` (the exact revision is then known only once it is read).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reach {
    pub revision: i64,
    pub segments: usize,
    pub until_time: Option<DateTime<Utc>>,
}

/// Rule 3, with the manifests of [`segments_after`]'s segments, in order, and the next
/// snapshot of the cluster after `snapshot` (where the archive went on after a gap).
pub fn reach(
    snapshot: &SnapshotAt,
    manifests: &[SegmentManifest],
    next_snapshot: Option<&SnapshotAt>,
    target: Target,
) -> Result<Reach, Unreachable> {
    let mut through = snapshot.revision;
    let mut through_time = snapshot.taken;
    // Manifests whose segments hold revisions after the snapshot, so far.
    let mut used = 0;
    let done = |revision, segments, until_time| {
        Ok(Reach {
            revision,
            segments,
            until_time,
        })
    };
    if target == Target::Revision(through) {
        return done(through, 0, None);
    }
    for (i, m) in manifests.iter().enumerate() {
        if m.last_revision <= through {
            continue;
        }
        if m.first_revision > through + 1 {
            return Err(Unreachable::Gap {
                from: through + 1,
                to: m.first_revision - 1,
            });
        }
        match target {
            Target::Revision(r) if r <= m.last_revision => return done(r, i + 1, None),
            // Nothing archived happened between the last segment and this one's first event,
            // unless that event was read late (committed at some time before it was read).
            Target::Time(t) if t < m.first_time => {
                if let Some(late) = m.late_through_revision.filter(|l| *l >= m.first_revision) {
                    return Err(Unreachable::TimeUnknown {
                        from: m.first_revision,
                        to: late,
                    });
                }
                return done(through, used, None);
            }
            Target::Time(t) if t < m.last_time => return done(through, i + 1, Some(t)),
            _ => {}
        }
        through = m.last_revision;
        through_time = m.last_time;
        used = i + 1;
    }
    // The archive went on after a newer snapshot: what lies between is a gap.
    if let Some(next) = next_snapshot.filter(|n| n.revision > through) {
        return Err(Unreachable::Gap {
            from: through + 1,
            to: next.revision,
        });
    }
    // Past the newest archived change nothing proves that nothing else happened.
    Err(Unreachable::NotArchivedYet {
        target: target.to_string(),
        cluster_id: snapshot.cluster_id.clone(),
        newest: through,
        newest_time: through_time.to_rfc3339(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(second: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + second, 0).unwrap()
    }

    fn snapshot(revision: i64, second: i64) -> SnapshotAt {
        SnapshotAt {
            key: format!("b_v{revision}"),
            revision,
            cluster_id: "c1".into(),
            taken: at(second),
        }
    }

    fn segment(first: i64, last: i64, first_second: i64, last_second: i64) -> SegmentManifest {
        SegmentManifest {
            format: super::super::segment::SEGMENT_FORMAT.into(),
            cluster_id: "c1".into(),
            first_revision: first,
            last_revision: last,
            events: (last - first + 1) as u64,
            first_time: at(first_second),
            last_time: at(last_second),
            plaintext_sha256: String::new(),
            stored_bytes: 1,
            stored_sha256: Some(String::new()),
            stored_crc32c: None,
            compression: crate::Compression::None,
            encryption: None,
            etcd_version: "3.6.0".into(),
            completion_time: at(last_second),
            tool: String::new(),
            labels: Default::default(),
            late_through_revision: None,
        }
    }

    fn key(cluster: &str, first: i64) -> SegmentKey {
        SegmentKey {
            key: format!("{cluster}/{first}"),
            cluster_id: cluster.into(),
            first_revision: first,
        }
    }

    fn newest(snapshots: &[SnapshotAt], target: Target) -> Result<i64, Unreachable> {
        snapshots_before(snapshots, target).map(|s| s[0].revision)
    }

    #[test]
    fn rule_1_snapshots_of_two_clusters_before_the_point_need_one_named() {
        let mut other = snapshot(60, 50);
        other.cluster_id = "c2".into();
        let snapshots = [snapshot(10, 0), other];
        assert!(matches!(
            snapshots_before(&snapshots, Target::Revision(70)).unwrap_err(),
            Unreachable::SeveralClusters { .. }
        ));
        // Before the other cluster's snapshot, only one cluster is a candidate.
        assert_eq!(newest(&snapshots, Target::Revision(50)).unwrap(), 10);
    }

    #[test]
    fn rule_1_the_newest_snapshot_at_or_before_the_point_starts() {
        let snapshots = [snapshot(10, 0), snapshot(50, 100), snapshot(90, 200)];
        assert_eq!(newest(&snapshots, Target::Revision(89)).unwrap(), 50);
        assert_eq!(newest(&snapshots, Target::Revision(90)).unwrap(), 90);
        assert_eq!(newest(&snapshots, Target::Time(at(150))).unwrap(), 50);
        assert_eq!(newest(&snapshots, Target::Time(at(100))).unwrap(), 50);
    }

    #[test]
    fn rule_1_a_point_before_every_snapshot_is_refused_naming_the_oldest() {
        let snapshots = [snapshot(10, 0), snapshot(50, 100)];
        let refused = snapshots_before(&snapshots, Target::Revision(9)).unwrap_err();
        assert!(
            matches!(refused, Unreachable::BeforeOldestSnapshot { ref oldest, .. } if oldest.contains("b_v10"))
        );
        assert_eq!(
            snapshots_before(&[], Target::Revision(9)).unwrap_err(),
            Unreachable::NoSnapshots
        );
    }

    #[test]
    fn rule_2_segments_from_the_one_holding_the_next_revision_to_the_one_holding_the_point() {
        let keys = [
            key("c1", 1),
            key("c1", 20),
            key("c1", 40),
            key("c1", 60),
            key("c2", 45),
        ];
        let firsts =
            |found: Vec<&SegmentKey>| found.iter().map(|s| s.first_revision).collect::<Vec<_>>();
        // The snapshot at 30: its next revision, 31, is in the segment from 20.
        assert_eq!(
            firsts(segments_after(
                &keys,
                &snapshot(30, 0),
                Target::Revision(45)
            )),
            [20, 40, 60]
        );
        // At 39: 40 starts a segment of its own; the one after the point shows a gap before it.
        assert_eq!(
            firsts(segments_after(
                &keys,
                &snapshot(39, 0),
                Target::Revision(70)
            )),
            [40, 60]
        );
        // A time: every later segment may be needed (their manifests tell).
        assert_eq!(
            firsts(segments_after(&keys, &snapshot(30, 0), Target::Time(at(9)))),
            [20, 40, 60]
        );
    }

    #[test]
    fn rule_3_a_revision_reached_through_following_segments() {
        let manifests = [segment(20, 39, 10, 19), segment(40, 59, 20, 29)];
        assert_eq!(
            reach(&snapshot(30, 5), &manifests, None, Target::Revision(45)).unwrap(),
            Reach {
                revision: 45,
                segments: 2,
                until_time: None
            }
        );
        assert_eq!(
            reach(&snapshot(30, 5), &manifests, None, Target::Revision(30)).unwrap(),
            Reach {
                revision: 30,
                segments: 0,
                until_time: None
            }
        );
    }

    #[test]
    fn rule_3_a_missing_revision_between_segments_is_a_gap() {
        let manifests = [segment(20, 39, 10, 19), segment(50, 59, 20, 29)];
        assert_eq!(
            reach(&snapshot(30, 5), &manifests, None, Target::Revision(55)).unwrap_err(),
            Unreachable::Gap { from: 40, to: 49 }
        );
        // So is one between the snapshot and the first segment.
        assert_eq!(
            reach(
                &snapshot(30, 5),
                &[segment(35, 59, 10, 29)],
                None,
                Target::Revision(40)
            )
            .unwrap_err(),
            Unreachable::Gap { from: 31, to: 34 }
        );
        // A point before the gap is still reached.
        assert_eq!(
            reach(&snapshot(30, 5), &manifests, None, Target::Revision(39))
                .unwrap()
                .revision,
            39
        );
    }

    #[test]
    fn rule_3_a_point_before_a_newer_snapshot_the_archive_went_on_from_is_in_a_gap() {
        // Archived through 39, then the cluster compacted; the archive went on after the
        // snapshot at 80.
        let manifests = [segment(20, 39, 10, 19)];
        let next = snapshot(80, 50);
        assert_eq!(
            reach(
                &snapshot(30, 5),
                &manifests,
                Some(&next),
                Target::Revision(60)
            )
            .unwrap_err(),
            Unreachable::Gap { from: 40, to: 80 }
        );
        assert_eq!(
            reach(
                &snapshot(30, 5),
                &manifests,
                Some(&next),
                Target::Time(at(40))
            )
            .unwrap_err(),
            Unreachable::Gap { from: 40, to: 80 }
        );
        assert_eq!(
            reach(
                &snapshot(30, 5),
                &manifests,
                Some(&next),
                Target::Revision(39)
            )
            .unwrap()
            .revision,
            39
        );
    }

    #[test]
    fn rule_3_a_point_past_the_archive_is_not_archived_yet() {
        let manifests = [segment(20, 39, 10, 19)];
        let refused = reach(&snapshot(30, 5), &manifests, None, Target::Revision(40)).unwrap_err();
        assert!(matches!(
            refused,
            Unreachable::NotArchivedYet { newest: 39, .. }
        ));
        // A time after the newest archived change: nothing proves nothing happened since.
        let refused = reach(&snapshot(30, 5), &manifests, None, Target::Time(at(100))).unwrap_err();
        assert!(matches!(
            refused,
            Unreachable::NotArchivedYet { newest: 39, .. }
        ));
    }

    #[test]
    fn rule_3_a_time_between_segments_is_the_last_revision_before_it() {
        let manifests = [segment(20, 39, 10, 19), segment(40, 59, 30, 39)];
        assert_eq!(
            reach(&snapshot(30, 5), &manifests, None, Target::Time(at(25))).unwrap(),
            Reach {
                revision: 39,
                segments: 1,
                until_time: None
            }
        );
        // Before the first change after the snapshot: the snapshot itself.
        assert_eq!(
            reach(&snapshot(39, 21), &manifests, None, Target::Time(at(22))).unwrap(),
            Reach {
                revision: 39,
                segments: 0,
                until_time: None
            }
        );
    }

    #[test]
    fn rule_3_a_time_before_changes_read_late_cannot_be_resolved() {
        // The archiver restarted and read 40..=45 late: their commits may be before 25.
        let mut late = segment(40, 59, 30, 39);
        late.late_through_revision = Some(45);
        let manifests = [segment(20, 39, 10, 19), late];
        assert_eq!(
            reach(&snapshot(30, 5), &manifests, None, Target::Time(at(25))).unwrap_err(),
            Unreachable::TimeUnknown { from: 40, to: 45 }
        );
        // A revision is exact whatever the times.
        assert_eq!(
            reach(&snapshot(30, 5), &manifests, None, Target::Revision(42))
                .unwrap()
                .revision,
            42
        );
    }

    #[test]
    fn rule_3_a_time_inside_a_segment_is_found_by_reading_it() {
        let manifests = [segment(20, 39, 10, 19), segment(40, 59, 30, 39)];
        assert_eq!(
            reach(&snapshot(30, 5), &manifests, None, Target::Time(at(35))).unwrap(),
            Reach {
                revision: 39,
                segments: 2,
                until_time: Some(at(35))
            }
        );
        // At a segment's last event exactly, that whole segment, and the next one's first
        // event comes later.
        assert_eq!(
            reach(&snapshot(30, 5), &manifests, None, Target::Time(at(19))).unwrap(),
            Reach {
                revision: 39,
                segments: 1,
                until_time: None
            }
        );
    }
}
