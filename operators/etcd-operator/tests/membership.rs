//! The etcd behaviour the membership planner is built on, checked against real etcd processes
//! (Debian's 3.4, the version of the bed's default image) with the calls the operator makes,
//! and the planner's decision on each real member list:
//!
//! - a member added but never started has no name (the planner's `started`);
//! - a learner cannot be promoted before it runs and has caught up, and can be once it has;
//! - a learner reports itself as one in its status, and refuses a promotion asked through it;
//! - a voter added but never started (a phantom of an add that "timed out") still counts as a
//!   voter, and etcd refuses every further add until it is gone, learner or not ("unhealthy
//!   cluster"): why the planner removes phantoms first and drops a recorded add while a member
//!   is unhealthy;
//! - removal of the phantom and of a running member;
//! - right after a member joins, etcd turns changes down for a few seconds ("unhealthy
//!   cluster"), which the operator takes as "try again shortly", not as an error.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use etcd_client::{MemberAddOptions, MemberListResponse};
use etcd_cluster::{
    ClusterNames, Intent, Member, MembershipObserved, MembershipStep, PodState, plan,
};
use testbed::Etcd;

fn names() -> ClusterNames {
    ClusterNames::new("c", "ns", None)
}

/// The planner's view of a real member list: members named by their peer URLs in `named`,
/// each running in a ready pod and healthy when named in `running`.
fn observed(
    list: &MemberListResponse,
    named: &BTreeMap<String, String>,
    running: &[&str],
) -> MembershipObserved {
    let leader = list.members()[0].id();
    let members = list
        .members()
        .iter()
        .map(|m| {
            let name = named.get(&m.peer_urls()[0]).cloned();
            let up = name.as_deref().is_some_and(|n| running.contains(&n));
            Member {
                id: m.id(),
                name,
                started: !m.name().is_empty(),
                learner: m.is_learner(),
                healthy: up,
                leader: m.id() == leader,
            }
        })
        .collect();
    MembershipObserved {
        pods: running
            .iter()
            .map(|n| (n.to_string(), PodState::Running { ready: true }))
            .collect(),
        members: Some(members),
        leader_list: true,
        bootstrapped: true,
        ..Default::default()
    }
}

#[tokio::test]
async fn learner_add_promote_remove_and_a_phantom_member() {
    let seed = Etcd::start().await.unwrap();
    let mut client = seed.client().await.unwrap();
    let mut named = BTreeMap::from([(seed.peer_url.clone(), "c-0".to_string())]);

    // A learner added, not started yet: nameless, and not promotable.
    let peer = Etcd::new_peer_url();
    named.insert(peer.clone(), "c-1".into());
    let learner = MemberAddOptions::new().with_is_learner();
    let added = client
        .member_add([peer.clone()], Some(learner.clone()))
        .await
        .unwrap();
    let id = added.member().unwrap().id();
    let list = client.member_list().await.unwrap();
    let m = list.members().iter().find(|m| m.id() == id).unwrap();
    assert!(m.name().is_empty() && m.is_learner(), "{m:?}");
    assert!(client.member_promote(id).await.is_err());
    let mut world = observed(&list, &named, &["c-0"]);
    world.intent = Some(Intent::Add {
        member: "c-1".into(),
    });
    assert!(
        matches!(plan(&names(), 3, &world), MembershipStep::StartMember { ref member, .. } if member == "c-1"),
        "{:?}",
        plan(&names(), 3, &world)
    );

    // Started with `existing` and every member: it gets its name and, caught up, is promoted.
    let initial = format!("{}={},c-1={peer}", seed.name, seed.peer_url);
    let joiner = Etcd::join("c-1", &peer, &initial).await.unwrap();
    // A learner says so in its status and refuses membership changes asked through it: the
    // operator sends them to a voter (the leader first).
    let mut through_learner = joiner.client().await.unwrap();
    assert!(through_learner.status().await.unwrap().is_learner());
    let refused = through_learner.member_promote(id).await.unwrap_err();
    assert!(
        refused.to_string().contains("not supported for learner"),
        "{refused}"
    );
    assert!(!client.status().await.unwrap().is_learner());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match client.member_promote(id).await {
            Ok(_) => break,
            Err(e) if Instant::now() < deadline => {
                eprintln!("promote not yet: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("the learner was never promotable: {e}"),
        }
    }
    let list = client.member_list().await.unwrap();
    let m = list.members().iter().find(|m| m.id() == id).unwrap();
    assert!(m.name() == "c-1" && !m.is_learner(), "{m:?}");

    // A phantom voter: added, never started.
    let phantom_peer = Etcd::new_peer_url();
    named.insert(phantom_peer.clone(), "c-2".into());
    // Right after a promotion etcd turns changes down for its health interval (5 s, until
    // every voter has been connected that long): the operator retries, so does this test.
    let deadline = Instant::now() + Duration::from_secs(30);
    let phantom = loop {
        match client.member_add([phantom_peer.clone()], None).await {
            Ok(added) => break added.member().unwrap().id(),
            Err(e) if e.to_string().contains("unhealthy cluster") && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("{e}"),
        }
    };
    let list = client.member_list().await.unwrap();
    assert_eq!(list.members().iter().filter(|m| !m.is_learner()).count(), 3);
    // Two of three voters run: quorum holds, yet etcd refuses any further add.
    let refused = client
        .member_add([Etcd::new_peer_url()], Some(learner))
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("unhealthy cluster"),
        "{refused}"
    );
    // The planner removes the phantom before anything else, even below the cluster's size.
    let world = observed(&list, &named, &["c-0", "c-1"]);
    assert_eq!(
        plan(&names(), 3, &world),
        MembershipStep::RemoveMember {
            member: Some("c-2".into()),
            id: phantom,
            reason: "it was added but never started".into(),
            keep_claim: false,
        }
    );
    client.member_remove(phantom).await.unwrap();

    // Then a running member can be removed too.
    client.member_remove(id).await.unwrap();
    let list = client.member_list().await.unwrap();
    assert_eq!(list.members().len(), 1, "{:?}", list.members());
}
