//! Rules for a world where members answer, after the recorded change (see [`super::change`]):
//! restarts, quorum, replacement of members on lost nodes, healing, clean-up, learners and
//! scaling. Each returns `None` when no member answers or the world is not its case.

use super::change::all_names;
use super::{Member, MembershipStep, PodState, World, display};

/// When a member's pod is gone or failed and it has its claim, then it restarts on it (a
/// missing pod is made, a failed one deleted to be made again). This deletes nothing, so it
/// comes before the quorum check: it is how a cluster that lost quorum only because pods were
/// deleted or evicted recovers. Not the member a recorded change concerns (a promoted one
/// without data must not come back, one being removed stays gone), nor one whose node is down
/// (its volume is there; the pod could not start anywhere else).
pub fn members_restart_on_their_claims(world: &World) -> Option<MembershipStep> {
    let members = world.members()?;
    let subject = world.intent_subject();
    for m in members {
        let Some(name) = &m.name else { continue };
        if !world.has_data(name) || subject == Some(name.as_str()) || world.node_down(name) {
            continue;
        }
        match world.observed.pods.get(name) {
            None => {
                return Some(MembershipStep::StartMember {
                    member: name.clone(),
                    initial_cluster: all_names(members),
                });
            }
            Some(PodState::Failed) => {
                return Some(MembershipStep::DeletePod {
                    member: name.clone(),
                });
            }
            Some(_) => {}
        }
    }
    None
}

fn voters(members: &[Member]) -> Vec<&Member> {
    members.iter().filter(|m| !m.learner).collect()
}

/// Whether enough voters are healthy for etcd to commit.
fn has_quorum(members: &[Member]) -> bool {
    let voters = voters(members);
    voters.iter().filter(|m| m.healthy).count() > voters.len() / 2
}

/// When fewer voters are healthy than a majority, then nothing below runs (nothing is removed
/// or deleted). It is waited for while every unhealthy voter can come back on its data (its
/// claim is there, its node is up, and it does not keep crashing on it: its pod is starting,
/// being deleted, or running through an election); otherwise quorum is lost.
pub fn nothing_destructive_without_quorum(world: &World) -> Option<MembershipStep> {
    let members = world.members()?;
    if has_quorum(members) {
        return None;
    }
    let voters = voters(members);
    let healthy = voters.iter().filter(|m| m.healthy).count();
    let down: Vec<&&Member> = voters.iter().filter(|m| !m.healthy).collect();
    let returning = |m: &&&Member| {
        m.name.as_deref().is_some_and(|name| {
            world.has_data(name)
                && !world.node_down(name)
                && !world.observed.crashing.contains_key(name)
        })
    };
    let names: Vec<String> = down.iter().map(|m| display(m)).collect();
    if down.iter().all(returning) {
        return Some(MembershipStep::Wait {
            reason: format!(
                "{healthy} of {} voting members healthy; {} restarting on their data",
                voters.len(),
                names.join(", ")
            ),
        });
    }
    Some(MembershipStep::QuorumLost {
        dead: names,
        reason: format!("{healthy} of {} voting members healthy", voters.len()),
    })
}

/// When the member list is not the leader's, then nothing is removed or deleted (a follower's
/// list may lag: miss a member just added).
pub fn removals_only_on_the_leaders_list(world: &World) -> Option<MembershipStep> {
    world.members()?;
    (!world.observed.leader_list).then(|| MembershipStep::Wait {
        reason: "the leader does not answer; nothing is removed until it does".into(),
    })
}

/// When an unhealthy member's node has been down longer than the replacement grace, the
/// cluster has quorum without it and no earlier replacement is still missing (the cluster has
/// its size), then it is removed from etcd with its claim kept: a new member on a healthy node
/// replaces it. One at a time; never a healthy member (its node may be unreachable from the
/// API only), never a learner (rule 10 handles those).
pub fn member_on_a_lost_node_is_replaced(world: &World) -> Option<MembershipStep> {
    let members = world.members()?;
    if members.len() < world.size {
        return None;
    }
    let lost = members.iter().find(|m| {
        !m.healthy && !m.learner && m.name.as_deref().is_some_and(|n| world.node_lost(n))
    })?;
    let name = display(lost);
    let down = &world.observed.nodes_down[&name];
    let (how_long, claim) = match (down.cordoned, down.for_seconds) {
        (true, seconds) => (
            format!(
                "cordoned (drained) and the member has waited {} s to start there",
                seconds.unwrap_or_default()
            ),
            "its claim, a copy of what the others hold, is deleted",
        ),
        (false, Some(seconds)) => (format!("not Ready for {seconds} s"), "its claim is kept"),
        (false, None) => ("gone from the cluster".to_string(), "its claim is kept"),
    };
    Some(MembershipStep::RemoveMember {
        member: lost.name.clone(),
        id: lost.id,
        reason: format!(
            "its node {} is {how_long}; a new member replaces it on another node, and {claim}",
            down.node
        ),
        keep_claim: !down.cordoned,
    })
}

/// When a member's data is gone (pod gone and no claim), it was added but never started, or it
/// keeps crashing on its data while the others hold quorum, then it is removed: a new member
/// under a new name replaces it (the healthy majority holds every committed write). A failed pod
/// without a claim is deleted to be made again.
pub fn members_without_data_are_healed(world: &World) -> Option<MembershipStep> {
    let members = world.members()?;
    let observed = world.observed;
    for m in members {
        let Some(name) = &m.name else { continue };
        let removal = |reason: String| MembershipStep::RemoveMember {
            member: Some(name.clone()),
            id: m.id,
            reason,
            keep_claim: false,
        };
        match observed.pods.get(name) {
            None if world.has_data(name) => {
                return Some(MembershipStep::StartMember {
                    member: name.clone(),
                    initial_cluster: all_names(members),
                });
            }
            None if m.started => {
                return Some(removal("its data is gone (pod and volume deleted)".into()));
            }
            None => return Some(removal("it was added but never started".into())),
            Some(PodState::Failed) => {
                return Some(MembershipStep::DeletePod {
                    member: name.clone(),
                });
            }
            Some(_) if !m.healthy && observed.crashing.contains_key(name) => {
                let cause = &observed.crashing[name];
                return Some(removal(format!(
                    "it cannot rejoin ({cause}); a new member replaces it"
                )));
            }
            Some(_) => {}
        }
    }
    None
}

/// When a pod or claim named like a member belongs to no member etcd has, then it is deleted.
/// Pods already being deleted are left to go (after a restore they are the replaced members,
/// whose claims were detached and must stay).
pub fn leftovers_are_deleted(world: &World) -> Option<MembershipStep> {
    let members = world.members()?;
    let observed = world.observed;
    let staying = observed
        .pods
        .iter()
        .filter(|(_, state)| **state != PodState::Terminating)
        .map(|(name, _)| name);
    let known = |name: &str| members.iter().any(|m| m.name.as_deref() == Some(name));
    let leftover = staying
        .chain(observed.claims.iter())
        .find(|name| !known(name) && world.names.ordinal(name).is_some())?;
    Some(MembershipStep::DeleteMemberResources {
        member: leftover.clone(),
        keep_claim: false,
    })
}

/// When etcd has a learner, then it is promoted once started and healthy, else waited for.
pub fn learner_is_promoted_or_waited_for(world: &World) -> Option<MembershipStep> {
    let m = world.members()?.iter().find(|m| m.learner)?;
    let name = display(m);
    Some(if m.started && m.healthy {
        MembershipStep::Promote {
            member: name,
            id: m.id,
        }
    } else {
        MembershipStep::Wait {
            reason: format!("learner {name} is catching up"),
        }
    })
}

/// When the cluster is below its size and every unhealthy member is on a lost node (a
/// replacement removed one, another still waits for its turn), then the replacement is added
/// as a learner: it holds up nothing of quorum, and each lost member is replaced in turn.
pub fn replacement_of_a_lost_member_is_added(world: &World) -> Option<MembershipStep> {
    let members = world.members()?;
    let unhealthy: Vec<&Member> = members.iter().filter(|m| !m.healthy).collect();
    let all_lost = unhealthy
        .iter()
        .all(|m| m.name.as_deref().is_some_and(|n| world.node_lost(n)));
    if members.len() >= world.size || unhealthy.is_empty() || !all_lost {
        return None;
    }
    Some(MembershipStep::AddLearner {
        member: world.next_member(),
    })
}

/// When a member is unhealthy, then it is waited for (the kubelet restarts it); in a cluster
/// larger than its size it is the one removed.
pub fn unhealthy_members_are_waited_for(world: &World) -> Option<MembershipStep> {
    let members = world.members()?;
    let m = members.iter().find(|m| !m.healthy)?;
    if members.len() > world.size {
        return Some(remove(
            m,
            "the cluster is larger than its size and this member is unhealthy",
        ));
    }
    Some(MembershipStep::Wait {
        reason: format!("member {} is not healthy", display(m)),
    })
}

/// When every member is healthy and the count differs from the size, then one member is added
/// as a learner, or the newest (highest ordinal) is removed, never the leader while another
/// member remains.
pub fn size_is_reached_one_member_at_a_time(world: &World) -> Option<MembershipStep> {
    let members = world.members()?;
    if members.len() < world.size {
        return Some(MembershipStep::AddLearner {
            member: world.next_member(),
        });
    }
    if members.len() > world.size {
        let victim = members
            .iter()
            .filter(|m| !m.leader)
            .max_by_key(|m| m.name.as_deref().and_then(|n| world.names.ordinal(n)))
            .unwrap_or(&members[0]);
        return Some(remove(victim, "scaling down to the cluster's size"));
    }
    None
}

/// When the cluster has its size, then it has converged once every member pod is ready (pods
/// still being deleted hold this up too: converged means they are gone).
pub fn converged_once_every_pod_is_ready(world: &World) -> Option<MembershipStep> {
    world.members()?;
    let not_ready = world
        .observed
        .pods
        .iter()
        .find(|(_, p)| !matches!(p, PodState::Running { ready: true }));
    Some(match not_ready {
        Some((name, _)) => MembershipStep::Wait {
            reason: format!("member {name} is not ready"),
        },
        None => MembershipStep::Converged,
    })
}

fn remove(m: &Member, reason: &str) -> MembershipStep {
    MembershipStep::RemoveMember {
        member: m.name.clone(),
        id: m.id,
        reason: reason.into(),
        keep_claim: false,
    }
}
