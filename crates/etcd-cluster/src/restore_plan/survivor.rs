//! The rules of a recovery from a survivor (`spec.fromSurvivor`), pure. When two of three
//! members are lost for good, the one left holds every write it committed; a restore from the
//! newest backup would throw away everything since that backup. etcd's own recovery guide
//! restores a surviving member's data into a new cluster; these rules say when that is allowed
//! and which member's data it takes. They are asked, in this order, before the snapshot is
//! recorded (before anything of the cluster is touched):
//!
//! 1. [`quorum_not_lost`]: a member that has a leader means a majority still commits writes
//!    that a recovery from one member would lose: refused.
//! 2. [`most_recent`]: of the members that answered, the one with the highest committed Raft
//!    index (every entry up to it is committed and in its log), then revision, then term (then
//!    the lowest name, so the choice is the same on every reconcile); only the member the user
//!    named, when they named one. None answered: the restore waits. The term does not come
//!    first: a member that campaigned alone has a higher term without holding more.

use super::observed::MemberStatus;
use super::recorded::Survivor;

/// Rule 1: when any member answering reports a leader, the cluster has quorum: the message
/// that refuses the recovery.
pub fn quorum_not_lost(statuses: &[MemberStatus]) -> Option<String> {
    let led: Vec<&str> = statuses
        .iter()
        .filter(|s| s.has_leader)
        .map(|s| s.member.as_str())
        .collect();
    (!led.is_empty()).then(|| {
        format!(
            "member(s) {} have a leader: the cluster has quorum, and a recovery from one member \
             would lose what the others commit; nothing was touched (restore from a backup, or \
             wait for quorum to be lost for good)",
            led.join(", ")
        )
    })
}

/// Rule 2: the member whose data holds the most: highest committed index, then revision, then
/// term, then the lowest name; `asked`, when the user named a member. `None` when no
/// member (or not the one asked) answered.
pub fn most_recent(statuses: &[MemberStatus], asked: Option<&str>) -> Option<Survivor> {
    let candidates = statuses
        .iter()
        .filter(|s| asked.is_none_or(|a| a == s.member));
    let chosen = candidates.max_by(|a, b| {
        (a.raft_index, a.revision, a.raft_term)
            .cmp(&(b.raft_index, b.revision, b.raft_term))
            // Equal: the lower name wins (max_by keeps the later of equals, so reverse names).
            .then_with(|| b.member.cmp(&a.member))
    })?;
    let others = statuses
        .iter()
        .filter(|s| s.member != chosen.member)
        .map(|s| {
            format!(
                "{}: term {}, index {}, revision {}",
                s.member, s.raft_term, s.raft_index, s.revision
            )
        })
        .collect();
    Some(Survivor {
        member: chosen.member.clone(),
        raft_term: chosen.raft_term,
        raft_index: chosen.raft_index,
        revision: chosen.revision,
        node: chosen.node.clone(),
        others,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(member: &str, term: u64, index: u64, revision: i64) -> MemberStatus {
        MemberStatus {
            member: member.into(),
            raft_term: term,
            raft_index: index,
            revision,
            has_leader: false,
            node: None,
        }
    }

    #[test]
    fn when_any_member_has_a_leader_then_the_recovery_is_refused() {
        let mut led = status("c-1", 3, 10, 5);
        led.has_leader = true;
        let why = quorum_not_lost(&[status("c-0", 3, 12, 6), led]).unwrap();
        assert!(why.contains("c-1") && why.contains("quorum"), "{why}");
        assert!(!why.contains("c-0"), "{why}");
    }

    #[test]
    fn when_no_member_has_a_leader_then_the_recovery_may_go_on() {
        assert_eq!(quorum_not_lost(&[status("c-0", 3, 12, 6)]), None);
        assert_eq!(quorum_not_lost(&[]), None);
    }

    #[test]
    fn when_no_member_answers_then_there_is_no_survivor() {
        assert_eq!(most_recent(&[], None), None);
    }

    #[test]
    fn when_the_user_names_a_member_then_only_that_one_is_chosen() {
        let statuses = [status("c-0", 4, 10, 5), status("c-1", 3, 90, 50)];
        let chosen = most_recent(&statuses, Some("c-1")).unwrap();
        assert_eq!(chosen.member, "c-1");
        assert_eq!(chosen.others, vec!["c-0: term 4, index 10, revision 5"]);
        assert_eq!(most_recent(&statuses, Some("c-7")), None);
    }

    #[test]
    fn when_committed_indexes_differ_then_the_highest_wins_over_a_higher_term() {
        // c-0 campaigned alone (its term rose) but knows fewer entries committed.
        let statuses = [status("c-0", 9, 10, 5), status("c-1", 3, 90, 50)];
        let chosen = most_recent(&statuses, None).unwrap();
        assert_eq!(chosen.member, "c-1");
        assert_eq!(chosen.others, vec!["c-0: term 9, index 10, revision 5"]);
    }

    #[test]
    fn when_indexes_are_equal_then_the_revision_then_the_term_decides() {
        let statuses = [status("c-0", 4, 12, 9), status("c-1", 5, 12, 5)];
        let chosen = most_recent(&statuses, None).unwrap();
        assert_eq!((chosen.member.as_str(), chosen.revision), ("c-0", 9));
        let statuses = [status("c-0", 4, 12, 9), status("c-1", 5, 12, 9)];
        assert_eq!(most_recent(&statuses, None).unwrap().member, "c-1");
    }

    #[test]
    fn when_everything_is_equal_then_the_lowest_name_decides() {
        let tie = [status("c-2", 4, 10, 6), status("c-1", 4, 10, 6)];
        assert_eq!(most_recent(&tie, None).unwrap().member, "c-1");
        let reversed = [status("c-1", 4, 10, 6), status("c-2", 4, 10, 6)];
        assert_eq!(most_recent(&reversed, None).unwrap().member, "c-1");
    }
}
