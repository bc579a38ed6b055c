//! Defragmentation rounds, pure: which member is next, when to wait, when to stop.
//!
//! One member at a time: followers first (by name), the leader last, after leadership has been
//! moved to a follower (a member blocks while it defragments; a blocked leader would stall
//! every write until an election). A member is defragmented only while every member is
//! healthy, the membership is what the spec says (no member being added, removed or
//! upgraded), and the cluster has a member to spare (three or more: with the member blocked,
//! the others still make a quorum). A member whose free space is below the thresholds is
//! skipped. A member that does not serve reads again within the timeout after its
//! defragmentation stops the round.
//!
//! "Healthy" here means more than answering `Status`: a defragmenting member may answer
//! `Status` (at times it does, at times only once done), but it blocks every read and write
//! until it is done (etcd's backend holds its read and write locks while it rebuilds the file;
//! `tests/defrag_blocks.rs` of the operator shows it on a real etcd). So a member counts as
//! done defragmenting, and as one the round may rely on, only when it also serves a
//! serializable read ([`MemberDb::serves_reads`]). The call's own answer is recorded by the
//! operator when it comes (defragmented, or failed, which stops the round); a member still
//! recorded as current had its answer lost (the call outlived the member timeout, or the
//! operator restarted mid-call): it is done when it serves reads again, its result
//! unconfirmed, and nothing else starts before.

use std::time::Duration;

/// `DefragMember.result` of a member whose call answered success.
pub const DEFRAGMENTED: &str = "Defragmented";
/// Of a member whose call's answer was lost, and which serves reads again.
pub const UNCONFIRMED: &str = "Unconfirmed";
/// Of a member whose call (or the connection for it) failed.
pub const FAILED: &str = "Failed";
/// `DefragRoundResult.result` of a round a failed member stopped.
pub const ROUND_FAILED: &str = "Failed";

/// A member as the round sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberDb {
    pub name: String,
    pub id: u64,
    pub leader: bool,
    pub learner: bool,
    /// Answers `Status` without errors, started.
    pub healthy: bool,
    /// Served a serializable read in time: its database is not locked by a defragmentation.
    pub serves_reads: bool,
    /// The database file's size, and the part of it in use (etcd's `dbSize`, `dbSizeInUse`).
    pub db_size: i64,
    pub in_use: i64,
    /// The backend quota: etcd refuses writes (`NOSPACE`) once the file reaches it.
    pub quota: i64,
}

impl MemberDb {
    /// Healthy and not blocked by a defragmentation.
    pub fn ready(&self) -> bool {
        self.healthy && self.serves_reads
    }

    pub fn free(&self) -> i64 {
        (self.db_size - self.in_use).max(0)
    }
}

/// When a member is worth defragmenting: at least this share of its file, and this many bytes,
/// free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thresholds {
    pub min_free_percent: i64,
    pub min_free_bytes: i64,
}

impl Thresholds {
    /// Enough free space to return, or a file at 80 % of its quota or more: etcd counts the
    /// file's size against the quota, free pages included (and pages freed while no write can
    /// commit, as under `NOSPACE`, do not show as free yet), so such a member is defragmented
    /// whatever the thresholds say.
    pub fn worth_it(&self, m: &MemberDb) -> bool {
        let free = m.free();
        let enough = free >= self.min_free_bytes && free * 100 >= self.min_free_percent * m.db_size;
        enough || (m.quota > 0 && m.db_size * 10 >= m.quota * 8)
    }
}

/// What the round has recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoundState {
    /// Members finished (defragmented or skipped).
    pub done: Vec<String>,
    /// The member recorded as being defragmented whose call's answer was not recorded (still
    /// under way, cut short at the member timeout, or lost with a restarted operator), and for
    /// how long.
    pub current: Option<String>,
    pub current_for: Duration,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DefragStep {
    /// Not now (recorded as the round's wait reason; the round goes on later).
    Wait(String),
    /// The member recorded as current, whose call's answer was lost, serves reads again: its
    /// defragmentation has ended (whether it freed space is not known).
    Finished { member: String },
    /// Record `member` as current, then defragment it.
    Defragment { member: String, id: u64 },
    /// `member`'s free space is below the thresholds: record it skipped.
    Skip { member: String },
    /// Only the leader is left: move leadership to follower `to` first.
    MoveLeader { member: String, to: u64 },
    /// Every member is done.
    Complete,
    /// The round cannot go on: a member did not come back in time, or the cluster has no
    /// member to spare.
    Stop {
        member: Option<String>,
        reason: String,
    },
}

pub fn next_step(
    state: &RoundState,
    members: &[MemberDb],
    size: usize,
    thresholds: Thresholds,
    member_timeout: Duration,
) -> DefragStep {
    if let Some(current) = &state.current {
        let ready = members.iter().any(|m| &m.name == current && m.ready());
        return if ready {
            DefragStep::Finished {
                member: current.clone(),
            }
        } else if state.current_for > member_timeout {
            DefragStep::Stop {
                member: Some(current.clone()),
                reason: format!(
                    "{current} did not serve reads within {} s of its defragmentation; the other members were not touched",
                    member_timeout.as_secs()
                ),
            }
        } else {
            DefragStep::Wait(format!("{current} is being defragmented"))
        };
    }
    if size < 3 {
        return DefragStep::Stop {
            member: None,
            reason: format!(
                "a cluster of {size} member(s) has no member to spare: a member blocks while it is defragmented, so the cluster would stop serving; defragment it by hand in a maintenance window (etcdctl defrag), or run 3 members"
            ),
        };
    }
    if members.len() != size || members.iter().any(|m| m.learner) {
        return DefragStep::Wait(format!(
            "the membership is changing ({} of {size} members)",
            members.len()
        ));
    }
    if let Some(sick) = members.iter().find(|m| !m.healthy) {
        return DefragStep::Wait(format!("{} is not healthy", sick.name));
    }
    // A member still defragmenting (its call's answer lost in an earlier round) blocks.
    if let Some(blocked) = members.iter().find(|m| !m.serves_reads) {
        return DefragStep::Wait(format!(
            "{} serves no reads (still defragmenting?)",
            blocked.name
        ));
    }
    let mut left: Vec<&MemberDb> = members
        .iter()
        .filter(|m| !state.done.contains(&m.name))
        .collect();
    // Followers by name, then the leader.
    left.sort_by_key(|m| (m.leader, m.name.clone()));
    let Some(next) = left.first() else {
        return DefragStep::Complete;
    };
    if !thresholds.worth_it(next) {
        return DefragStep::Skip {
            member: next.name.clone(),
        };
    }
    if next.leader {
        let to = members
            .iter()
            .filter(|m| !m.leader && m.ready())
            .min_by_key(|m| m.name.clone())
            .map(|m| m.id);
        if let Some(to) = to {
            return DefragStep::MoveLeader {
                member: next.name.clone(),
                to,
            };
        }
    }
    DefragStep::Defragment {
        member: next.name.clone(),
        id: next.id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: i64 = 1024 * 1024;

    fn member(name: &str, leader: bool, size_mib: i64, in_use_mib: i64) -> MemberDb {
        MemberDb {
            name: name.into(),
            id: name.bytes().last().unwrap() as u64,
            leader,
            learner: false,
            healthy: true,
            serves_reads: true,
            db_size: size_mib * MIB,
            in_use: in_use_mib * MIB,
            quota: 2048 * MIB,
        }
    }

    fn three() -> Vec<MemberDb> {
        vec![
            member("c-0", true, 512, 100),
            member("c-1", false, 512, 100),
            member("c-2", false, 512, 100),
        ]
    }

    const T: Thresholds = Thresholds {
        min_free_percent: 30,
        min_free_bytes: 64 * MIB,
    };
    const TIMEOUT: Duration = Duration::from_secs(300);

    fn state(done: &[&str]) -> RoundState {
        RoundState {
            done: done.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn followers_first_by_name_then_the_leader_after_it_hands_over() {
        let members = three();
        let step = |done: &[&str]| next_step(&state(done), &members, 3, T, TIMEOUT);
        assert_eq!(
            step(&[]),
            DefragStep::Defragment {
                member: "c-1".into(),
                id: u64::from(b'1')
            }
        );
        assert!(matches!(step(&["c-1"]), DefragStep::Defragment { member, .. } if member == "c-2"));
        assert_eq!(
            step(&["c-1", "c-2"]),
            DefragStep::MoveLeader {
                member: "c-0".into(),
                to: u64::from(b'1')
            }
        );
        assert_eq!(step(&["c-0", "c-1", "c-2"]), DefragStep::Complete);
        // After the hand-over c-0 is a follower like any other.
        let mut moved = three();
        moved[0].leader = false;
        moved[1].leader = true;
        assert!(matches!(
            next_step(&state(&["c-1", "c-2"]), &moved, 3, T, TIMEOUT),
            DefragStep::Defragment { member, .. } if member == "c-0"
        ));
    }

    #[test]
    fn a_member_with_little_free_space_is_skipped() {
        let mut members = three();
        // 40 MiB free: below 64 MiB.
        members[1].in_use = 472 * MIB;
        assert_eq!(
            next_step(&state(&[]), &members, 3, T, TIMEOUT),
            DefragStep::Skip {
                member: "c-1".into()
            }
        );
        // 100 MiB free of 1 GiB: below 30 %.
        members[1].db_size = 1024 * MIB;
        members[1].in_use = 924 * MIB;
        assert!(matches!(
            next_step(&state(&[]), &members, 3, T, TIMEOUT),
            DefragStep::Skip { .. }
        ));
        // The same at 80 % of its quota: defragmented whatever the thresholds say.
        members[1].quota = 1280 * MIB;
        assert!(matches!(
            next_step(&state(&[]), &members, 3, T, TIMEOUT),
            DefragStep::Defragment { member, .. } if member == "c-1"
        ));
    }

    #[test]
    fn nothing_moves_unless_every_member_is_healthy_and_one_can_be_spared() {
        let mut members = three();
        members[2].healthy = false;
        assert!(
            matches!(next_step(&state(&[]), &members, 3, T, TIMEOUT), DefragStep::Wait(w) if w.contains("c-2"))
        );
        let mut learning = three();
        learning[2].learner = true;
        assert!(matches!(
            next_step(&state(&[]), &learning, 3, T, TIMEOUT),
            DefragStep::Wait(_)
        ));
        assert!(matches!(
            next_step(&state(&[]), &three()[..2], 3, T, TIMEOUT),
            DefragStep::Wait(_)
        ));
        let one = vec![member("c-0", true, 512, 100)];
        assert!(matches!(
            next_step(&state(&[]), &one, 1, T, TIMEOUT),
            DefragStep::Stop { member: None, reason } if reason.contains("no member to spare")
        ));
    }

    #[test]
    fn the_member_under_way_finishes_when_healthy_or_stops_the_round_when_late() {
        let mut members = three();
        let mut under_way = state(&["c-1"]);
        under_way.current = Some("c-2".into());
        under_way.current_for = Duration::from_secs(20);
        assert_eq!(
            next_step(&under_way, &members, 3, T, TIMEOUT),
            DefragStep::Finished {
                member: "c-2".into()
            }
        );
        members[2].healthy = false;
        assert!(matches!(
            next_step(&under_way, &members, 3, T, TIMEOUT),
            DefragStep::Wait(_)
        ));
        // Answering Status is not enough: a member that serves no read is still defragmenting.
        members[2].healthy = true;
        members[2].serves_reads = false;
        assert_eq!(
            next_step(&under_way, &members, 3, T, TIMEOUT),
            DefragStep::Wait("c-2 is being defragmented".into())
        );
        under_way.current_for = Duration::from_secs(301);
        assert!(matches!(
            next_step(&under_way, &members, 3, T, TIMEOUT),
            DefragStep::Stop { member: Some(m), .. } if m == "c-2"
        ));
    }

    #[test]
    fn when_a_member_serves_no_reads_no_other_member_starts_and_none_takes_the_leadership() {
        // c-2's defragmentation from a stopped round is still under way: it answers Status.
        let mut members = three();
        members[2].serves_reads = false;
        assert_eq!(
            next_step(&state(&[]), &members, 3, T, TIMEOUT),
            DefragStep::Wait("c-2 serves no reads (still defragmenting?)".into())
        );
        // The leader's turn: leadership goes to a follower that serves, not the first by name.
        let mut members = three();
        members[1].serves_reads = false;
        members[1].healthy = true;
        let only_leader_left = next_step(&state(&["c-1", "c-2"]), &members, 3, T, TIMEOUT);
        assert!(
            matches!(only_leader_left, DefragStep::Wait(ref w) if w.contains("c-1")),
            "{only_leader_left:?}"
        );
        let mut members = three();
        members[1].healthy = false;
        members[1].serves_reads = false;
        members[2].healthy = true;
        // c-1 sick: the round waits rather than hand leadership to it.
        assert!(matches!(
            next_step(&state(&["c-1", "c-2"]), &members, 3, T, TIMEOUT),
            DefragStep::Wait(_)
        ));
    }
}
