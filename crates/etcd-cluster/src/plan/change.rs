//! Rules that finish (or drop) the membership change recorded before it started, when members
//! answer. Each returns `None` when nothing of its kind is recorded or no member answers.

use super::{Intent, LEARNER_START_SECONDS, Member, MembershipStep, World};

/// Every member name etcd knows: the `initial_cluster` of a member that joins.
pub(super) fn all_names(members: &[Member]) -> Vec<String> {
    members.iter().filter_map(|m| m.name.clone()).collect()
}

fn by_name<'a>(members: &'a [Member], name: &str) -> Option<&'a Member> {
    members.iter().find(|m| m.name.as_deref() == Some(name))
}

/// When the seed is recorded and members answer, then the record is cleared once etcd lists
/// the seed, and the seed is waited for until then.
pub fn recorded_seed_is_finished(world: &World) -> Option<MembershipStep> {
    let members = world.members()?;
    let Some(Intent::Seed { member }) = &world.observed.intent else {
        return None;
    };
    Some(if by_name(members, member).is_some() {
        MembershipStep::ClearIntent
    } else {
        MembershipStep::Wait {
            reason: format!("seed member {member} is starting"),
        }
    })
}

/// When an add is recorded: not in etcd yet, it is made (asked of the leader, only while every
/// member is healthy and the cluster still needs it) or dropped; in etcd, its pod is started
/// (only while it is a learner or on its own data: a promoted voter must never come back on an
/// empty disk, it would have forgotten its log), a learner that caught up is promoted, and a
/// learner that is no longer wanted, keeps crashing or never starts is removed (it holds no
/// data anyone needs).
pub fn recorded_add_is_finished(world: &World) -> Option<MembershipStep> {
    let members = world.members()?;
    let observed = world.observed;
    let Some(Intent::Add { member }) = &observed.intent else {
        return None;
    };
    let has_pod = observed.pods.contains_key(member);
    Some(match by_name(members, member) {
        // A follower's list may not show the add yet: ask the leader first.
        None if !observed.leader_list => MembershipStep::Wait {
            reason: "the leader does not answer; the add is checked with it first".into(),
        },
        None if members.len() < world.size && members.iter().all(|m| m.healthy) => {
            MembershipStep::AddLearner {
                member: member.clone(),
            }
        }
        // Not in etcd, so nothing happened yet: no longer wanted (size went down meanwhile),
        // or a member is unhealthy and healing comes first.
        None => MembershipStep::ClearIntent,
        Some(m) if !has_pod && (m.learner || world.has_data(member)) => {
            MembershipStep::StartMember {
                member: member.clone(),
                initial_cluster: all_names(members),
            }
        }
        Some(m) if !has_pod && !m.learner => MembershipStep::ClearIntent,
        Some(m) if m.learner => return Some(learner_step(world, members, member, m)),
        Some(_) => MembershipStep::ClearIntent,
    })
}

/// The recorded learner `m`, whose pod exists: removed when unwanted, crashing or never
/// started, promoted once caught up, else waited for.
fn learner_step(world: &World, members: &[Member], member: &str, m: &Member) -> MembershipStep {
    let observed = world.observed;
    let crashing = observed.crashing.get(member);
    let unwanted = members.len() > world.size;
    let never_started = !m.started
        && observed
            .intent_age_seconds
            .is_some_and(|age| age > LEARNER_START_SECONDS);
    if unwanted || crashing.is_some() || never_started {
        let reason = match crashing {
            Some(cause) => format!("the learner cannot start ({cause})"),
            None if unwanted => "the learner is no longer wanted (size went down)".into(),
            None => format!("the learner did not start within {LEARNER_START_SECONDS} s"),
        };
        return MembershipStep::RemoveMember {
            member: Some(member.to_string()),
            id: m.id,
            reason,
            keep_claim: false,
        };
    }
    if m.started && m.healthy {
        return MembershipStep::Promote {
            member: member.to_string(),
            id: m.id,
        };
    }
    MembershipStep::Wait {
        reason: format!("learner {member} is catching up"),
    }
}

/// When a removal is recorded, then it is made while etcd still lists the member; once the
/// leader's list no longer has it, its pod and claim go (the claim kept, detached, when the
/// removal said so), and then the record is cleared.
pub fn recorded_removal_is_finished(world: &World) -> Option<MembershipStep> {
    let members = world.members()?;
    let observed = world.observed;
    let Some(Intent::Remove {
        member,
        id,
        reason,
        keep_claim,
    }) = &observed.intent
    else {
        return None;
    };
    if members.iter().any(|m| m.id == *id) {
        return Some(MembershipStep::RemoveMember {
            member: member.clone(),
            id: *id,
            reason: reason.clone(),
            keep_claim: *keep_claim,
        });
    }
    if !observed.leader_list {
        return Some(MembershipStep::Wait {
            reason: "the leader does not answer; the removal is checked with it first".into(),
        });
    }
    if let Some(member) = member
        && (observed.pods.contains_key(member) || observed.claims.contains(member))
    {
        return Some(MembershipStep::DeleteMemberResources {
            member: member.clone(),
            keep_claim: *keep_claim,
        });
    }
    Some(MembershipStep::ClearIntent)
}
