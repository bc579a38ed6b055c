//! Which planner acts in a reconcile of an EtcdCluster, pure. The EtcdCluster operator plans
//! membership, upgrades and defragmentation; these rules say which of their steps is carried
//! out in one reconcile, in this order:
//!
//! 1. A failed upgrade holds everything up until its member runs again: of the membership
//!    steps, only those that delete nothing go on (a member started again on its claim, a
//!    pod deleted to be started again).
//! 2. Membership before upgrades: an upgrade moves on only once membership has converged (a
//!    failed one is carried out whatever membership does), and no member moves while etcd
//!    reports an alarm.
//! 3. Defragmentation only once membership has converged, no upgrade is under way and this
//!    reconcile's step succeeded.
//! 4. How soon the cluster is looked at again follows from what acted.

use crate::{MembershipStep, UpgradeStep};

/// The membership step carried out: the planned one, unless a failed upgrade holds it.
pub fn membership_turn(failed_upgrade: bool, planned: MembershipStep) -> MembershipStep {
    match planned {
        step if !failed_upgrade => step,
        step @ (MembershipStep::StartMember { .. } | MembershipStep::DeletePod { .. }) => step,
        _ => MembershipStep::Wait {
            reason: "the upgrade is paused".into(),
        },
    }
}

/// The upgrade step carried out, if any: a failed upgrade's; else, once membership has
/// converged, the planned one (`None` while etcd's member list is unknown), held while etcd
/// reports an alarm.
pub fn upgrade_turn(
    failed: Option<UpgradeStep>,
    membership: &MembershipStep,
    planned: Option<UpgradeStep>,
    alarms: bool,
) -> Option<UpgradeStep> {
    if failed.is_some() {
        return failed;
    }
    if !matches!(membership, MembershipStep::Converged) {
        return None;
    }
    Some(match planned? {
        UpgradeStep::Upgrade { .. } | UpgradeStep::FlushLog { .. } if alarms => UpgradeStep::Wait {
            reason: "etcd reports an alarm (see Degraded); the upgrade waits".into(),
        },
        step => step,
    })
}

/// Whether a defragmentation round may take its next step.
pub fn may_defragment(
    membership: &MembershipStep,
    upgrade: Option<&UpgradeStep>,
    step_succeeded: bool,
) -> bool {
    matches!(membership, MembershipStep::Converged)
        && matches!(upgrade, None | Some(UpgradeStep::Done))
        && step_succeeded
}

/// How soon the cluster is looked at again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextLook {
    /// A step changed something; the next one can often follow at once.
    Soon,
    /// Waiting for the world (a member to start, an upgrade or a defragmentation round).
    Busy,
    /// Nothing under way (converged, a failed upgrade, a lost quorum): the periodic look.
    Idle,
}

/// When to look again after `membership` and `upgrade` were carried out.
pub fn next_look(
    membership: &MembershipStep,
    upgrade: Option<&UpgradeStep>,
    defragmenting: bool,
) -> NextLook {
    let upgrading = matches!(
        upgrade,
        Some(UpgradeStep::Upgrade { .. } | UpgradeStep::Wait { .. } | UpgradeStep::FlushLog { .. })
    );
    match membership {
        MembershipStep::Converged if defragmenting => NextLook::Busy,
        _ if matches!(upgrade, Some(UpgradeStep::Failed { .. })) => NextLook::Idle,
        MembershipStep::Converged if upgrading => NextLook::Busy,
        MembershipStep::Converged | MembershipStep::QuorumLost { .. } => NextLook::Idle,
        MembershipStep::Wait { .. } => NextLook::Busy,
        _ => NextLook::Soon,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start() -> MembershipStep {
        MembershipStep::StartMember {
            member: "c-1".into(),
            initial_cluster: vec!["c-0".into(), "c-1".into(), "c-2".into()],
        }
    }

    fn add() -> MembershipStep {
        MembershipStep::AddLearner {
            member: "c-3".into(),
        }
    }

    fn upgrade() -> UpgradeStep {
        UpgradeStep::Upgrade {
            member: "c-0".into(),
            from: "3.5.16".into(),
        }
    }

    fn failed() -> UpgradeStep {
        UpgradeStep::Failed {
            member: "c-0".into(),
            version: "3.6.5".into(),
            cause: "crash loop".into(),
        }
    }

    #[test]
    fn when_an_upgrade_failed_then_only_membership_steps_that_delete_nothing_go_on() {
        assert_eq!(membership_turn(true, start()), start());
        let delete = MembershipStep::DeletePod {
            member: "c-1".into(),
        };
        assert_eq!(membership_turn(true, delete.clone()), delete);
        assert!(matches!(
            membership_turn(true, add()),
            MembershipStep::Wait { reason } if reason.contains("upgrade is paused")
        ));
        assert_eq!(membership_turn(false, add()), add());
    }

    #[test]
    fn when_membership_has_not_converged_then_no_upgrade_moves_unless_it_failed() {
        assert_eq!(upgrade_turn(None, &add(), Some(upgrade()), false), None);
        assert_eq!(
            upgrade_turn(Some(failed()), &add(), Some(upgrade()), false),
            Some(failed())
        );
        assert_eq!(
            upgrade_turn(None, &MembershipStep::Converged, Some(upgrade()), false),
            Some(upgrade())
        );
        // The member list unknown: nothing to plan from.
        assert_eq!(
            upgrade_turn(None, &MembershipStep::Converged, None, false),
            None
        );
    }

    #[test]
    fn when_etcd_reports_an_alarm_then_no_member_is_upgraded() {
        let held = upgrade_turn(None, &MembershipStep::Converged, Some(upgrade()), true);
        assert!(matches!(held, Some(UpgradeStep::Wait { reason }) if reason.contains("alarm")));
        let flush = UpgradeStep::FlushLog {
            member: "c-0".into(),
        };
        assert!(matches!(
            upgrade_turn(None, &MembershipStep::Converged, Some(flush), true),
            Some(UpgradeStep::Wait { .. })
        ));
        assert_eq!(
            upgrade_turn(
                None,
                &MembershipStep::Converged,
                Some(UpgradeStep::Done),
                true
            ),
            Some(UpgradeStep::Done)
        );
    }

    #[test]
    fn defragmentation_only_when_converged_no_upgrade_under_way_and_the_step_succeeded() {
        let converged = MembershipStep::Converged;
        assert!(may_defragment(&converged, None, true));
        assert!(may_defragment(&converged, Some(&UpgradeStep::Done), true));
        assert!(!may_defragment(&converged, Some(&upgrade()), true));
        assert!(!may_defragment(&converged, Some(&failed()), true));
        assert!(!may_defragment(&converged, None, false));
        assert!(!may_defragment(&add(), None, true));
    }

    #[test]
    fn the_next_look_follows_what_acted() {
        let converged = MembershipStep::Converged;
        assert_eq!(next_look(&converged, None, true), NextLook::Busy);
        assert_eq!(next_look(&converged, None, false), NextLook::Idle);
        assert_eq!(
            next_look(&converged, Some(&upgrade()), false),
            NextLook::Busy
        );
        assert_eq!(next_look(&add(), Some(&failed()), false), NextLook::Idle);
        let lost = MembershipStep::QuorumLost {
            dead: vec!["c-1".into(), "c-2".into()],
            reason: "two of three".into(),
        };
        assert_eq!(next_look(&lost, None, false), NextLook::Idle);
        let wait = MembershipStep::Wait {
            reason: "a member starts".into(),
        };
        assert_eq!(next_look(&wait, None, false), NextLook::Busy);
        assert_eq!(next_look(&add(), None, false), NextLook::Soon);
    }
}
