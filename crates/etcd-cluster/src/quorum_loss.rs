//! Automatic recovery from a lost quorum (`spec.quorumLoss`), pure: once the membership planner
//! has said [`crate::plan::MembershipStep::QuorumLost`], whether the operator creates the
//! EtcdRestore a human would. Rules, asked in this order; the first that answers decides:
//!
//! 1. [`recovery_not_asked`]: `recovery: None` (the default): nothing, a human decides.
//! 2. [`a_restore_runs`]: an EtcdRestore of the cluster is under way (the recovery made
//!    earlier, or a human's): nothing more.
//! 3. [`the_automatic_recovery_failed`]: the recovery this operator made failed: it waits for
//!    a human (who deletes it to let the operator try again), never a second try on its own.
//!    A finished EtcdRestore of an earlier incident (succeeded, or a human's that failed) does
//!    not hold the recovery back: it is replaced (it must go first: the name is the cluster's).
//! 4. [`a_lost_member_may_come_back`]: a member that does not answer has no node known to be
//!    down (its node is Ready: it crash-loops, or is starting) or its node is only cordoned:
//!    it may come back with its data, so nothing is done.
//! 5. [`a_lost_node_is_not_fenced`]: `fencing: Required` and a lost member's node is not known
//!    to be off (neither deleted nor tainted `node.kubernetes.io/out-of-service`): wait for a
//!    human or the cloud to say so.
//! 6. [`nodes_not_down_long_enough`]: the lost members' nodes have not been down for
//!    `afterSeconds` yet: wait.
//! 7. [`no_survivor_to_recover_from`]: `FromSurvivor` with no member answering: nothing to
//!    recover from (a backup is the way, chosen by a human).
//! 8. Otherwise: [`QuorumLossDecision::Recover`].

use crate::plan::{MembershipObserved, NodeDown};

/// The annotation on an EtcdRestore the EtcdCluster operator made for `spec.quorumLoss`, and
/// its value. The restore operator reads it too: such a restore answers nodes that are down.
pub const MADE_FOR_ANNOTATION: &str = "etcd.database.coreos.com/made-for";
pub const MADE_FOR_QUORUM_LOSS: &str = "quorum-loss";

/// What `spec.quorumLoss` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recovery {
    None,
    FromSurvivor,
    /// From the newest verified backup of this EtcdBackup.
    FromBackup {
        backup: String,
    },
}

/// The policy and what the operator sees beyond the membership planner's world.
#[derive(Clone, Debug)]
pub struct QuorumLossObserved<'a> {
    pub recovery: Recovery,
    pub after_seconds: u64,
    /// `spec.quorumLoss.fencing: Required`: the lost members' nodes must be known to be off.
    pub fencing_required: bool,
    pub membership: &'a MembershipObserved,
    /// The EtcdRestore named like the cluster, when it exists.
    pub restore: Option<ExistingRestore>,
}

/// The EtcdRestore named like the cluster, as the rules need it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExistingRestore {
    /// Its phase, as written (`Pending` when it has none yet).
    pub phase: String,
    /// Succeeded or failed.
    pub ended: bool,
    pub failed: bool,
    /// This operator made it for `spec.quorumLoss`.
    pub made_for_quorum_loss: bool,
}

/// What the operator does about a lost quorum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QuorumLossDecision {
    /// Nothing automatic; the reason is added to the `QuorumLost` condition's message.
    Leave { reason: String },
    /// Create the EtcdRestore (named like the cluster) of `recovery`; with `replace`, the
    /// finished one of an earlier incident is deleted first.
    Recover {
        recovery: Recovery,
        reason: String,
        replace: bool,
    },
}

type Rule = fn(&QuorumLossObserved) -> Option<QuorumLossDecision>;

/// The rules in the order they are asked.
pub const RULES: [(&str, Rule); 7] = [
    ("recovery_not_asked", recovery_not_asked),
    ("a_restore_runs", a_restore_runs),
    (
        "the_automatic_recovery_failed",
        the_automatic_recovery_failed,
    ),
    ("a_lost_member_may_come_back", a_lost_member_may_come_back),
    ("a_lost_node_is_not_fenced", a_lost_node_is_not_fenced),
    ("nodes_not_down_long_enough", nodes_not_down_long_enough),
    ("no_survivor_to_recover_from", no_survivor_to_recover_from),
];

/// The decision: the first rule that answers, else recover.
pub fn decide(observed: &QuorumLossObserved) -> QuorumLossDecision {
    RULES
        .iter()
        .find_map(|(_, rule)| rule(observed))
        .unwrap_or_else(|| QuorumLossDecision::Recover {
            recovery: observed.recovery.clone(),
            reason: format!(
                "the nodes of members {} have been down for at least {} s",
                lost_members(observed.membership).join(", "),
                observed.after_seconds
            ),
            replace: observed.restore.is_some(),
        })
}

fn leave(reason: String) -> Option<QuorumLossDecision> {
    Some(QuorumLossDecision::Leave { reason })
}

/// The members that do not answer: every member with a pod or a claim that gave no status.
pub fn lost_members(observed: &MembershipObserved) -> Vec<String> {
    let answering: Vec<&str> = answering(observed);
    let mut names: Vec<String> = observed
        .pods
        .keys()
        .chain(observed.claims.iter())
        .filter(|m| !answering.contains(&m.as_str()))
        .cloned()
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The members that gave their status: healthy ones, and those that reported errors. Without
/// quorum a member reports "etcdserver: no leader" and counts as not healthy, but it answers:
/// it is the survivor.
fn answering(observed: &MembershipObserved) -> Vec<&str> {
    let healthy = (observed.members.iter().flatten())
        .filter(|m| m.healthy)
        .filter_map(|m| m.name.as_deref());
    let reporting = observed.member_errors.keys().map(String::as_str);
    healthy.chain(reporting).collect()
}

/// Rule 1: no recovery asked.
pub fn recovery_not_asked(observed: &QuorumLossObserved) -> Option<QuorumLossDecision> {
    (observed.recovery == Recovery::None).then(|| QuorumLossDecision::Leave {
        reason: "spec.quorumLoss.recovery is None: recover with an EtcdRestore (fromSurvivor, \
                 or from a backup)"
            .into(),
    })
}

/// Rule 2: a restore of the cluster is under way.
pub fn a_restore_runs(observed: &QuorumLossObserved) -> Option<QuorumLossDecision> {
    let restore = observed.restore.as_ref().filter(|r| !r.ended)?;
    leave(format!(
        "the EtcdRestore of the cluster is under way ({}): no other recovery is started",
        restore.phase
    ))
}

/// Rule 3: the recovery this operator made failed.
pub fn the_automatic_recovery_failed(observed: &QuorumLossObserved) -> Option<QuorumLossDecision> {
    observed
        .restore
        .as_ref()
        .filter(|r| r.failed && r.made_for_quorum_loss)?;
    leave(
        "the automatic recovery failed (see the EtcdRestore's reason): it is not tried again; \
         delete the EtcdRestore to let the operator try again, or recover by hand"
            .into(),
    )
}

/// Rule 4: a member that does not answer may come back: its node is not known to be down, or
/// is only cordoned.
pub fn a_lost_member_may_come_back(observed: &QuorumLossObserved) -> Option<QuorumLossDecision> {
    let nodes = &observed.membership.nodes_down;
    let back = lost_members(observed.membership)
        .into_iter()
        .find(|m| nodes.get(m).is_none_or(|n| n.cordoned))?;
    leave(format!(
        "member {back} does not answer but its node is not down: it may come back with its \
         data; no automatic recovery"
    ))
}

/// Rule 5: fencing is required and a lost member's node is not known to be off. A node that
/// is only not Ready may still run its member: members cut off from the control plane but not
/// from each other can keep a quorum of their own and acknowledge writes the recovery drops.
pub fn a_lost_node_is_not_fenced(observed: &QuorumLossObserved) -> Option<QuorumLossDecision> {
    if !observed.fencing_required {
        return None;
    }
    let nodes = &observed.membership.nodes_down;
    let mut unfenced: Vec<&str> = lost_members(observed.membership)
        .iter()
        .filter_map(|m| nodes.get(m))
        .filter(|n| !n.fenced)
        .map(|n| n.node.as_str())
        .collect();
    unfenced.sort();
    unfenced.dedup();
    if unfenced.is_empty() {
        return None;
    }
    leave(format!(
        "spec.quorumLoss.fencing is Required: waiting for node(s) {} to be fenced (once powered \
         off: delete the Node, or taint it node.kubernetes.io/out-of-service=nodeshutdown:NoExecute)",
        unfenced.join(", ")
    ))
}

/// Rule 6: the lost members' nodes have not been down long enough.
pub fn nodes_not_down_long_enough(observed: &QuorumLossObserved) -> Option<QuorumLossDecision> {
    let nodes = &observed.membership.nodes_down;
    let down_for = |n: &NodeDown| n.for_seconds.unwrap_or(u64::MAX);
    let shortest = lost_members(observed.membership)
        .iter()
        .filter_map(|m| nodes.get(m))
        .map(down_for)
        .min()?;
    // The message names no count of seconds: it is a condition's, which changes only when
    // the situation does.
    (shortest < observed.after_seconds).then(|| QuorumLossDecision::Leave {
        reason: format!(
            "recovering automatically once the lost members' nodes have been down for {} s \
             (spec.quorumLoss.afterSeconds)",
            observed.after_seconds
        ),
    })
}

/// Rule 7: nothing to recover from.
pub fn no_survivor_to_recover_from(observed: &QuorumLossObserved) -> Option<QuorumLossDecision> {
    let none =
        observed.recovery == Recovery::FromSurvivor && answering(observed.membership).is_empty();
    none.then(|| QuorumLossDecision::Leave {
        reason: "no member answers: there is no survivor to recover from; restore a backup".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Member, PodState};

    /// Three members; c-0 answers without a leader (not healthy: its status reports the
    /// error), c-1 and c-2 do not, their nodes down 400 s.
    fn zone_lost() -> MembershipObserved {
        let member = |id: u64, name: &str, healthy: bool| Member {
            id,
            name: Some(name.into()),
            started: true,
            learner: false,
            healthy,
            leader: false,
        };
        let down = |node: &str| NodeDown {
            node: node.into(),
            for_seconds: Some(400),
            cordoned: false,
            fenced: false,
        };
        MembershipObserved {
            pods: ["c-0", "c-1", "c-2"]
                .map(|m| (m.to_string(), PodState::Running { ready: false }))
                .into(),
            claims: ["c-0", "c-1", "c-2"].map(String::from).into(),
            members: Some(vec![
                member(1, "c-0", false),
                member(2, "c-1", false),
                member(3, "c-2", false),
            ]),
            nodes_down: [
                ("c-1".to_string(), down("node-b")),
                ("c-2".to_string(), down("node-c")),
            ]
            .into(),
            member_errors: [("c-0".to_string(), vec!["etcdserver: no leader".to_string()])].into(),
            persistent: true,
            bootstrapped: true,
            ..Default::default()
        }
    }

    /// No member answers: c-0's node is down too.
    fn all_down() -> MembershipObserved {
        let mut world = zone_lost();
        world.members = None;
        world.member_errors.clear();
        let down = world.nodes_down["c-1"].clone();
        world.nodes_down.insert(
            "c-0".into(),
            NodeDown {
                node: "node-a".into(),
                ..down
            },
        );
        world
    }

    fn observed(membership: &MembershipObserved, recovery: Recovery) -> QuorumLossObserved<'_> {
        QuorumLossObserved {
            recovery,
            after_seconds: 300,
            fencing_required: false,
            membership,
            restore: None,
        }
    }

    fn left_by(o: &QuorumLossObserved) -> Option<&'static str> {
        RULES
            .iter()
            .find(|(_, rule)| rule(o).is_some())
            .map(|(name, _)| *name)
    }

    #[test]
    fn when_the_lost_members_nodes_are_down_long_enough_then_the_survivor_recovers_it() {
        let world = zone_lost();
        let decision = decide(&observed(&world, Recovery::FromSurvivor));
        let QuorumLossDecision::Recover {
            recovery, reason, ..
        } = decision
        else {
            panic!("{decision:?}");
        };
        assert_eq!(recovery, Recovery::FromSurvivor);
        assert!(reason.contains("c-1, c-2"), "{reason}");
        let backup = Recovery::FromBackup {
            backup: "nightly".into(),
        };
        assert!(matches!(
            decide(&observed(&world, backup.clone())),
            QuorumLossDecision::Recover { recovery, .. } if recovery == backup
        ));
    }

    #[test]
    fn when_the_survivor_reports_no_leader_then_it_counts_as_answering_not_lost() {
        let world = zone_lost();
        assert_eq!(lost_members(&world), vec!["c-1", "c-2"]);
        // Without its status at all it is lost too, and its node is up: it may come back.
        let mut silent = zone_lost();
        silent.member_errors.clear();
        assert_eq!(lost_members(&silent), vec!["c-0", "c-1", "c-2"]);
        let o = observed(&silent, Recovery::FromSurvivor);
        assert_eq!(left_by(&o), Some("a_lost_member_may_come_back"));
    }

    #[test]
    fn when_no_recovery_is_asked_then_nothing_is_done() {
        let world = zone_lost();
        let o = observed(&world, Recovery::None);
        assert_eq!(left_by(&o), Some("recovery_not_asked"));
    }

    fn existing(phase: &str, made_for_quorum_loss: bool) -> Option<ExistingRestore> {
        Some(ExistingRestore {
            phase: phase.into(),
            ended: phase == "Succeeded" || phase == "Failed",
            failed: phase == "Failed",
            made_for_quorum_loss,
        })
    }

    #[test]
    fn when_a_restore_of_the_cluster_runs_or_the_automatic_one_failed_then_none_is_made() {
        let world = zone_lost();
        let mut o = observed(&world, Recovery::FromSurvivor);
        o.restore = existing("Restoring", false);
        assert_eq!(left_by(&o), Some("a_restore_runs"));
        o.restore = existing("Failed", true);
        assert_eq!(left_by(&o), Some("the_automatic_recovery_failed"));
    }

    #[test]
    fn when_a_finished_restore_of_an_earlier_incident_exists_then_it_is_replaced() {
        let world = zone_lost();
        let mut o = observed(&world, Recovery::FromSurvivor);
        for (phase, made_by_operator) in
            [("Succeeded", true), ("Succeeded", false), ("Failed", false)]
        {
            o.restore = existing(phase, made_by_operator);
            assert!(
                matches!(
                    decide(&o),
                    QuorumLossDecision::Recover { replace: true, .. }
                ),
                "{phase} {made_by_operator}"
            );
        }
        o.restore = None;
        assert!(matches!(
            decide(&o),
            QuorumLossDecision::Recover { replace: false, .. }
        ));
    }

    #[test]
    fn when_a_lost_member_crash_loops_on_a_ready_node_then_nothing_is_done() {
        let mut world = zone_lost();
        world.nodes_down.remove("c-2");
        let o = observed(&world, Recovery::FromSurvivor);
        assert_eq!(left_by(&o), Some("a_lost_member_may_come_back"));
        // A cordoned node (a drain) is up: its member comes back when it is uncordoned.
        let mut world = zone_lost();
        world.nodes_down.get_mut("c-2").unwrap().cordoned = true;
        let o = observed(&world, Recovery::FromSurvivor);
        assert_eq!(left_by(&o), Some("a_lost_member_may_come_back"));
    }

    #[test]
    fn when_a_lost_node_is_down_for_less_than_the_delay_then_it_waits() {
        let mut world = zone_lost();
        world.nodes_down.get_mut("c-1").unwrap().for_seconds = Some(120);
        let o = observed(&world, Recovery::FromSurvivor);
        assert_eq!(left_by(&o), Some("nodes_not_down_long_enough"));
        // A node deleted from the cluster (unknown since when) counts as down long enough.
        world.nodes_down.get_mut("c-1").unwrap().for_seconds = None;
        let o = observed(&world, Recovery::FromSurvivor);
        assert!(matches!(decide(&o), QuorumLossDecision::Recover { .. }));
    }

    #[test]
    fn when_fencing_is_required_then_it_waits_until_every_lost_node_is_known_to_be_off() {
        let mut world = zone_lost();
        fn required(world: &MembershipObserved) -> QuorumLossObserved<'_> {
            let mut o = observed(world, Recovery::FromSurvivor);
            o.fencing_required = true;
            o
        }
        let o = required(&world);
        assert_eq!(left_by(&o), Some("a_lost_node_is_not_fenced"));
        let QuorumLossDecision::Leave { reason } = decide(&o) else {
            panic!("recovered unfenced");
        };
        assert!(reason.contains("node-b, node-c"), "{reason}");
        // One fenced: the other is still waited for, and named alone.
        world.nodes_down.get_mut("c-1").unwrap().fenced = true;
        let QuorumLossDecision::Leave { reason } = decide(&required(&world)) else {
            panic!("recovered with node-c unfenced");
        };
        assert!(reason.contains("node(s) node-c "), "{reason}");
        // Both fenced: recovered (after the delay, which still applies).
        world.nodes_down.get_mut("c-2").unwrap().fenced = true;
        assert!(matches!(
            decide(&required(&world)),
            QuorumLossDecision::Recover { .. }
        ));
        world.nodes_down.get_mut("c-2").unwrap().for_seconds = Some(5);
        assert_eq!(
            left_by(&required(&world)),
            Some("nodes_not_down_long_enough")
        );
        // Not required (the default): not Ready for the delay is enough.
        let world = zone_lost();
        assert!(matches!(
            decide(&observed(&world, Recovery::FromSurvivor)),
            QuorumLossDecision::Recover { .. }
        ));
    }

    #[test]
    fn when_no_member_answers_then_there_is_no_survivor_but_a_backup_may_be_restored() {
        let world = all_down();
        let o = observed(&world, Recovery::FromSurvivor);
        assert_eq!(left_by(&o), Some("no_survivor_to_recover_from"));
        let o = observed(
            &world,
            Recovery::FromBackup {
                backup: "nightly".into(),
            },
        );
        assert!(matches!(decide(&o), QuorumLossDecision::Recover { .. }));
    }

    #[test]
    fn every_rule_answers_exactly_the_states_the_order_gives_it() {
        // Each state is answered by the rule named, and not by any rule before it.
        let world = zone_lost();
        let mut crash = zone_lost();
        crash.nodes_down.remove("c-1");
        let mut early = zone_lost();
        early.nodes_down.get_mut("c-2").unwrap().for_seconds = Some(1);
        let mut unfenced = observed(&world, Recovery::FromSurvivor);
        unfenced.fencing_required = true;
        let silent = all_down();
        let mut restored = observed(&world, Recovery::FromSurvivor);
        restored.restore = existing("Restoring", true);
        let mut failed = observed(&world, Recovery::FromSurvivor);
        failed.restore = existing("Failed", true);
        let cases = [
            (observed(&world, Recovery::None), Some("recovery_not_asked")),
            (restored, Some("a_restore_runs")),
            (failed, Some("the_automatic_recovery_failed")),
            (
                observed(&crash, Recovery::FromSurvivor),
                Some("a_lost_member_may_come_back"),
            ),
            (unfenced, Some("a_lost_node_is_not_fenced")),
            (
                observed(&early, Recovery::FromSurvivor),
                Some("nodes_not_down_long_enough"),
            ),
            (
                observed(&silent, Recovery::FromSurvivor),
                Some("no_survivor_to_recover_from"),
            ),
            (observed(&world, Recovery::FromSurvivor), None),
        ];
        for (o, rule) in cases {
            assert_eq!(left_by(&o), rule);
        }
    }
}
