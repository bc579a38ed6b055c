//! The membership planner's rules as specifications ("when X and Y, then step Z"), for the rules
//! about members whose node is down, and a table that checks, for one world of each case, that
//! exactly the rule the documented order names answers it.

use etcd_cluster::plan::{NodeDown, RULES, decide};
use etcd_cluster::{ClusterNames, Intent, Member, MembershipObserved, MembershipStep, PodState};

fn names() -> ClusterNames {
    ClusterNames::new("c", "ns", Some("cluster.local"))
}

const READY: PodState = PodState::Running { ready: true };
const GRACE: u64 = 300;

/// A persistent cluster whose members `c-0..c-{n-1}` run healthy on claims, `c-0` leading.
fn healthy(n: u64) -> MembershipObserved {
    let members: Vec<Member> = (0..n)
        .map(|i| Member {
            id: i + 1,
            name: Some(format!("c-{i}")),
            started: true,
            learner: false,
            healthy: true,
            leader: i == 0,
        })
        .collect();
    let names: Vec<String> = members.iter().filter_map(|m| m.name.clone()).collect();
    MembershipObserved {
        pods: names.iter().map(|n| (n.clone(), READY)).collect(),
        claims: names.iter().cloned().collect(),
        members: Some(members),
        leader_list: true,
        replace_after_seconds: Some(GRACE),
        persistent: true,
        bootstrapped: true,
        ..Default::default()
    }
}

/// `member` stopped answering because its node has been down `seconds` (`None`: node gone).
fn node_down(o: &mut MembershipObserved, member: &str, seconds: Option<u64>) {
    let m = o
        .members
        .as_mut()
        .unwrap()
        .iter_mut()
        .find(|m| m.name.as_deref() == Some(member))
        .unwrap();
    m.healthy = false;
    let letter = member.trim_start_matches("c-");
    o.nodes_down.insert(
        member.to_string(),
        NodeDown {
            node: format!("node-{letter}"),
            for_seconds: seconds,
            cordoned: false,
            fenced: seconds.is_none(),
        },
    );
}

fn step(size: usize, o: &MembershipObserved) -> MembershipStep {
    decide(&names(), size, o).1
}

fn rule(size: usize, o: &MembershipObserved) -> &'static str {
    decide(&names(), size, o).0
}

#[test]
fn when_a_members_node_is_down_longer_than_the_grace_and_the_others_keep_quorum_then_it_is_removed_keeping_its_claim()
 {
    let mut o = healthy(3);
    node_down(&mut o, "c-2", Some(GRACE + 1));
    match step(3, &o) {
        MembershipStep::RemoveMember {
            member,
            id,
            keep_claim,
            reason,
        } => {
            assert_eq!((member.as_deref(), id, keep_claim), (Some("c-2"), 3, true));
            assert!(reason.contains("node-2"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(rule(3, &o), "member_on_a_lost_node_is_replaced");
}

#[test]
fn when_a_members_pod_waits_on_a_drained_node_longer_than_the_grace_then_it_is_replaced_and_its_claim_deleted()
 {
    let mut o = healthy(3);
    node_down(&mut o, "c-2", Some(GRACE + 1));
    o.nodes_down.get_mut("c-2").unwrap().cordoned = true;
    o.pods.insert("c-2".into(), PodState::Pending);
    assert!(matches!(
        step(3, &o),
        MembershipStep::RemoveMember { member: Some(m), keep_claim: false, .. } if m == "c-2"
    ));
}

#[test]
fn when_a_members_node_is_down_for_less_than_the_grace_then_the_member_is_waited_for() {
    let mut o = healthy(3);
    node_down(&mut o, "c-2", Some(GRACE));
    assert_eq!(rule(3, &o), "unhealthy_members_are_waited_for");
}

#[test]
fn when_replacement_is_off_then_a_member_on_a_lost_node_is_waited_for() {
    let mut o = healthy(3);
    node_down(&mut o, "c-2", None);
    o.replace_after_seconds = None;
    assert_eq!(rule(3, &o), "unhealthy_members_are_waited_for");
}

#[test]
fn when_the_member_on_a_down_node_still_answers_then_it_is_not_replaced() {
    // The kubelet died, etcd did not: the member serves, nothing to replace.
    let mut o = healthy(3);
    node_down(&mut o, "c-2", Some(GRACE * 10));
    o.members.as_mut().unwrap()[2].healthy = true;
    assert_eq!(step(3, &o), MembershipStep::Converged);
}

#[test]
fn when_two_of_three_members_are_down_with_their_nodes_then_quorum_is_lost_and_nothing_is_removed()
{
    let mut o = healthy(3);
    node_down(&mut o, "c-1", Some(GRACE * 10));
    node_down(&mut o, "c-2", Some(10));
    match step(3, &o) {
        MembershipStep::QuorumLost { dead, .. } => assert_eq!(dead, ["c-1", "c-2"]),
        other => panic!("{other:?}"),
    }
    // Without their nodes down, the same members restarting on their data are waited for.
    o.nodes_down.clear();
    assert!(matches!(step(3, &o), MembershipStep::Wait { .. }));
}

#[test]
fn when_the_removal_of_a_lost_member_is_recorded_then_its_pod_goes_and_its_claim_is_kept_then_it_is_cleared()
 {
    let mut o = healthy(3);
    node_down(&mut o, "c-2", Some(GRACE + 1));
    o.intent = Some(Intent::Remove {
        member: Some("c-2".into()),
        id: 3,
        reason: "node lost".into(),
        keep_claim: true,
    });
    // Crash after recording, before etcd removed it: removed again, still keeping the claim.
    assert!(matches!(
        step(3, &o),
        MembershipStep::RemoveMember {
            keep_claim: true,
            ..
        }
    ));
    // etcd removed it: its pod goes, its claim is kept.
    o.members.as_mut().unwrap().pop();
    assert_eq!(
        step(3, &o),
        MembershipStep::DeleteMemberResources {
            member: "c-2".into(),
            keep_claim: true
        }
    );
    // Claim detached (no longer the cluster's), pod deleted: the change is done.
    o.claims.remove("c-2");
    o.reserved.insert("c-2".into());
    o.pods.remove("c-2");
    o.nodes_down.clear();
    assert_eq!(step(3, &o), MembershipStep::ClearIntent);
    // Its replacement comes under a new name, not on the kept claim's.
    o.intent = None;
    assert_eq!(
        step(3, &o),
        MembershipStep::AddLearner {
            member: "c-3".into()
        }
    );
}

#[test]
fn when_two_of_five_members_are_lost_then_they_are_replaced_one_after_the_other() {
    let mut o = healthy(5);
    node_down(&mut o, "c-3", Some(GRACE + 1));
    node_down(&mut o, "c-4", Some(GRACE + 1));
    // The first is removed.
    assert!(matches!(
        step(5, &o),
        MembershipStep::RemoveMember { member: Some(m), keep_claim: true, .. } if m == "c-3"
    ));
    o.members.as_mut().unwrap().retain(|m| m.id != 4);
    o.pods.remove("c-3");
    o.claims.remove("c-3");
    o.reserved.insert("c-3".into());
    o.nodes_down.remove("c-3");
    // Below size with c-4 still down on its lost node: its turn comes after the replacement
    // of c-3 is added, not before (never two removals at once).
    assert_eq!(
        (rule(5, &o), step(5, &o)),
        (
            "replacement_of_a_lost_member_is_added",
            MembershipStep::AddLearner {
                member: "c-5".into()
            }
        )
    );
    // Once it is a voter, c-4 is next.
    o.members.as_mut().unwrap().push(Member {
        id: 6,
        name: Some("c-5".into()),
        started: true,
        learner: false,
        healthy: true,
        leader: false,
    });
    o.pods.insert("c-5".into(), READY);
    o.claims.insert("c-5".into());
    assert!(matches!(
        step(5, &o),
        MembershipStep::RemoveMember { member: Some(m), keep_claim: true, .. } if m == "c-4"
    ));
}

#[test]
fn when_a_lost_nodes_member_has_no_pod_then_it_is_not_restarted_on_its_claim_but_replaced() {
    // The Node was deleted and the pod with it: a pod made again on the claim would wait
    // forever for a node that is gone.
    let mut o = healthy(3);
    node_down(&mut o, "c-1", None);
    o.pods.remove("c-1");
    assert!(matches!(
        step(3, &o),
        MembershipStep::RemoveMember { member: Some(m), keep_claim: true, .. } if m == "c-1"
    ));
    // Replacement off: not restarted either (its node is down), only waited for.
    o.replace_after_seconds = None;
    assert_eq!(rule(3, &o), "members_without_data_are_healed");
}

/// One world of each case and the rule that must answer it. A rule that shadows another, or a
/// reordering, shows here.
#[test]
fn each_world_is_answered_by_the_rule_the_order_names() {
    let size = 3;
    let mut worlds: Vec<(&str, MembershipObserved)> = Vec::new();

    let mut o = healthy(3);
    o.foreign_pods.insert("c-9".into());
    worlds.push(("foreign_pods_hold_everything", o));

    let silent = |o: &mut MembershipObserved| o.members = None;
    let mut o = healthy(1);
    silent(&mut o);
    o.intent = Some(Intent::Seed {
        member: "c-0".into(),
    });
    worlds.push(("recorded_seed_is_made", o));

    let o = MembershipObserved {
        persistent: true,
        ..Default::default()
    };
    worlds.push(("empty_world_is_seeded_or_lost", o));

    let mut o = healthy(3);
    silent(&mut o);
    o.pods.remove("c-1");
    worlds.push(("silent_members_restart_on_their_claims", o));

    let mut o = healthy(3);
    silent(&mut o);
    o.pods.insert("c-1".into(), PodState::Pending);
    worlds.push(("starting_members_are_waited_for", o));

    let mut o = healthy(3);
    silent(&mut o);
    for p in o.pods.values_mut() {
        *p = PodState::Terminating;
    }
    worlds.push(("leaving_pods_are_waited_for", o));

    let mut o = healthy(3);
    silent(&mut o);
    o.persistent = false;
    worlds.push(("nobody_answers", o));

    let mut o = healthy(3);
    o.pods.remove("c-1");
    worlds.push(("members_restart_on_their_claims", o));

    let mut o = healthy(3);
    o.intent = Some(Intent::Seed {
        member: "c-0".into(),
    });
    worlds.push(("recorded_seed_is_finished", o));

    let mut o = healthy(2);
    o.intent = Some(Intent::Add {
        member: "c-2".into(),
    });
    worlds.push(("recorded_add_is_finished", o));

    let mut o = healthy(3);
    o.intent = Some(Intent::Remove {
        member: Some("c-2".into()),
        id: 3,
        reason: "scale down".into(),
        keep_claim: false,
    });
    worlds.push(("recorded_removal_is_finished", o));

    let mut o = healthy(3);
    node_down(&mut o, "c-1", Some(1));
    node_down(&mut o, "c-2", Some(1));
    worlds.push(("nothing_destructive_without_quorum", o));

    let mut o = healthy(3);
    o.leader_list = false;
    worlds.push(("removals_only_on_the_leaders_list", o));

    let mut o = healthy(3);
    node_down(&mut o, "c-2", Some(GRACE + 1));
    worlds.push(("member_on_a_lost_node_is_replaced", o));

    let mut o = healthy(3);
    o.pods.remove("c-2");
    o.claims.remove("c-2");
    worlds.push(("members_without_data_are_healed", o));

    let mut o = healthy(3);
    o.pods.insert("c-7".into(), READY);
    worlds.push(("leftovers_are_deleted", o));

    let mut o = healthy(3);
    o.members.as_mut().unwrap()[2].learner = true;
    worlds.push(("learner_is_promoted_or_waited_for", o));

    let mut o = healthy(4);
    node_down(&mut o, "c-3", Some(GRACE + 1));
    o.members.as_mut().unwrap().remove(2);
    o.pods.remove("c-2");
    o.claims.remove("c-2");
    worlds.push(("replacement_of_a_lost_member_is_added", o));

    let mut o = healthy(3);
    o.members.as_mut().unwrap()[2].healthy = false;
    worlds.push(("unhealthy_members_are_waited_for", o));

    worlds.push(("size_is_reached_one_member_at_a_time", healthy(2)));
    worlds.push(("converged_once_every_pod_is_ready", healthy(3)));

    let order: Vec<&str> = RULES.iter().map(|r| r.name).collect();
    let expected: Vec<&str> = worlds.iter().map(|(name, _)| *name).collect();
    assert_eq!(order, expected, "one world per rule, in the rules' order");
    for (name, world) in &worlds {
        let size = if *name == "replacement_of_a_lost_member_is_added" {
            4
        } else {
            size
        };
        assert_eq!(
            rule(size, world),
            *name,
            "{:?}",
            decide(&names(), size, world).1
        );
    }
}
