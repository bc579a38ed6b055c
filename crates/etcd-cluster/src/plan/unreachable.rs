//! Rules for a world where no member answers (etcd's member list could not be read). Each
//! returns `None` when members do answer.

use super::{Intent, MembershipStep, PodState, World};

/// The world when no member answered, else `None` (the rule does not apply).
fn silent<'a>(world: &'a World) -> Option<&'a super::MembershipObserved> {
    world.observed.members.is_none().then_some(world.observed)
}

/// When the seed is recorded and nothing answers yet, then the seed is made; a seed pod that
/// failed (evicted before it answered) is deleted to be made again (on its data, when it has a
/// claim: etcd then ignores the bootstrap flags); a seed pod that exists is waited for.
pub fn recorded_seed_is_made(world: &World) -> Option<MembershipStep> {
    let observed = silent(world)?;
    let Some(Intent::Seed { member }) = &observed.intent else {
        return None;
    };
    Some(match observed.pods.get(member) {
        Some(PodState::Failed) => MembershipStep::DeletePod {
            member: member.clone(),
        },
        Some(_) => MembershipStep::Wait {
            reason: format!("seed member {member} is starting"),
        },
        None => MembershipStep::Seed {
            member: member.clone(),
        },
    })
}

/// When there is no pod and no claim, then a new cluster is seeded, and a cluster created
/// before has lost its data: [`MembershipStep::QuorumLost`] (a restore brings it back).
pub fn empty_world_is_seeded_or_lost(world: &World) -> Option<MembershipStep> {
    let observed = silent(world)?;
    if !(observed.pods.is_empty() && observed.claims.is_empty()) {
        return None;
    }
    Some(if observed.bootstrapped {
        MembershipStep::QuorumLost {
            dead: Vec::new(),
            reason: "every member pod and data volume is gone".into(),
        }
    } else {
        MembershipStep::Seed {
            member: world.next_member(),
        }
    })
}

/// When members keep their data on claims and nothing answers, then a member whose pod is
/// gone is started on its claim (the data says who it is), and a failed pod (evicted, say) is
/// deleted to be made again: nothing else would bring back a cluster whose every pod was
/// evicted. Not the member a recorded removal concerns.
pub fn silent_members_restart_on_their_claims(world: &World) -> Option<MembershipStep> {
    let observed = silent(world)?;
    if !observed.persistent {
        return None;
    }
    let removing = match &observed.intent {
        Some(Intent::Remove { member, .. }) => member.as_deref(),
        _ => None,
    };
    let restartable = || {
        observed
            .claims
            .iter()
            .filter(move |c| Some(c.as_str()) != removing)
    };
    if let Some(member) = restartable().find(|c| !observed.pods.contains_key(*c)) {
        return Some(MembershipStep::StartMember {
            member: member.clone(),
            initial_cluster: observed.claims.iter().cloned().collect(),
        });
    }
    let failed = restartable().find(|c| observed.pods.get(*c) == Some(&PodState::Failed))?;
    Some(MembershipStep::DeletePod {
        member: failed.clone(),
    })
}

/// When nothing answers and member pods are still starting, then they are waited for.
pub fn starting_members_are_waited_for(world: &World) -> Option<MembershipStep> {
    let observed = silent(world)?;
    observed
        .pods
        .values()
        .any(|p| matches!(p, PodState::Pending | PodState::Running { ready: false }))
        .then(|| MembershipStep::Wait {
            reason: "no member answers yet; members are starting".into(),
        })
}

/// When nothing answers and pods with claims are being deleted (every node drained, say),
/// then they are waited for: with their claims kept, the members restart on them once gone.
pub fn leaving_pods_are_waited_for(world: &World) -> Option<MembershipStep> {
    let observed = silent(world)?;
    let leaving: Vec<&str> = observed
        .pods
        .iter()
        .filter(|(name, state)| {
            **state == PodState::Terminating
                && observed.persistent
                && observed.claims.contains(*name)
        })
        .map(|(name, _)| name.as_str())
        .collect();
    if leaving.is_empty() {
        return None;
    }
    Some(MembershipStep::Wait {
        reason: format!(
            "no member answers; the pods of {} are being deleted and restart on their claims once gone",
            leaving.join(", ")
        ),
    })
}

/// When nothing answers and no rule above explains why, then quorum is lost.
pub fn nobody_answers(world: &World) -> Option<MembershipStep> {
    let observed = silent(world)?;
    Some(MembershipStep::QuorumLost {
        dead: observed.pods.keys().cloned().collect(),
        reason: "no member answers".into(),
    })
}
