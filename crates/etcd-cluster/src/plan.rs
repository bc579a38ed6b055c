//! The membership planner: from what exists (member pods, data claims, etcd's member list with
//! each member's health) and the change recorded before it started, the single next safe step.
//! The operator records a change's intent before calling etcd, executes one step, and plans
//! again from the world, so a restart at any point finishes or undoes that change: an add whose
//! member never started is re-issued or removed, a removal is completed, and a member nobody
//! intended (a phantom of an add that timed out) is removed.
//!
//! Rules, in order:
//! 1. Restart members whose pod is gone or failed on their own claims (deletes nothing, and
//!    comes first so that a recorded change etcd refuses while a member is down cannot keep
//!    that member down).
//! 2. Finish the recorded change; an add etcd has not seen yet is dropped while a member is
//!    unhealthy (etcd would refuse it, and healing must not wait behind it).
//! 3. Never act destructively without quorum: with fewer healthy voters than a majority,
//!    nothing is removed or deleted. It is waited for while every unhealthy voter can come
//!    back on its data (it has its claim and does not keep crashing on it: its pod starting,
//!    or being deleted as in a drain), else it is [`MembershipStep::QuorumLost`].
//! 4. Heal: a member whose data is gone (no claim, or emptyDir), or that keeps crashing on its
//!    data while the others hold quorum, is removed, to be replaced by a new member under a new
//!    name (the healthy majority holds every committed write).
//! 5. Clean up: pods and claims of members etcd no longer has, phantom members.
//! 6. Promote a caught-up learner; wait for unhealthy members (the kubelet restarts them).
//! 7. Scale one member at a time, only when every member is healthy: add as a learner; remove
//!    an unhealthy member first, never the leader when there is another choice.
//!
//! When no member answers: the recorded seed is made (its failed pod deleted); an empty world
//! is seeded, or reported lost once the cluster was created; members restart on their claims
//! (missing pods made, failed ones deleted to be made again); pods starting, and pods with
//! claims being deleted, are waited for; anything else is [`MembershipStep::QuorumLost`].

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::naming::ClusterNames;

/// A member pod as the kubelet reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodState {
    /// Not yet running (scheduling, pulling, init containers).
    Pending,
    Running {
        ready: bool,
    },
    /// Terminated for good (evicted, or a container that cannot restart).
    Failed,
    /// Being deleted.
    Terminating,
}

/// One entry of etcd's member list, with what the operator learned by asking it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub id: u64,
    /// Our member name, from its peer URL; `None` for a member that is not ours.
    pub name: Option<String>,
    /// Started: etcd knows its name (an added member that never started has none).
    pub started: bool,
    pub learner: bool,
    /// Answered a status request through its own client URL.
    pub healthy: bool,
    pub leader: bool,
}

/// A membership change recorded (in the EtcdCluster's status) before it is started.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "camelCase")]
pub enum Intent {
    /// Create the first member with a fresh cluster token.
    Seed { member: String },
    /// Add `member` as a learner, start it, promote it.
    Add { member: String },
    /// Remove member `id` from etcd, then delete its pod and claim.
    Remove {
        member: Option<String>,
        id: u64,
        reason: String,
    },
}

/// What exists now.
#[derive(Clone, Debug, Default)]
pub struct MembershipObserved {
    /// Member pods of this cluster, by name.
    pub pods: BTreeMap<String, PodState>,
    /// Data claims, by member name.
    pub claims: BTreeSet<String>,
    /// Names still held by objects on their way out (claims being deleted): a new member must
    /// not take one, or it would be bound to a volume that is going away.
    pub reserved: BTreeSet<String>,
    /// etcd's member list, or `None` when no member answered.
    pub members: Option<Vec<Member>>,
    /// The list came from the leader. A follower's may lag (miss a member just added), so
    /// without it nothing is removed or deleted.
    pub leader_list: bool,
    /// Members whose pods keep crashing (restarted again and again, not part of an
    /// upgrade), with the cause: they cannot rejoin on their data.
    pub crashing: BTreeMap<String, String>,
    /// What members report wrong with themselves (etcd's status errors: the alarms such as
    /// `NOSPACE` and `CORRUPT`), by member name. Such a member counts as not healthy.
    pub member_errors: BTreeMap<String, Vec<String>>,
    /// The change in flight, if any.
    pub intent: Option<Intent>,
    /// Seconds since that change was recorded, when known.
    pub intent_age_seconds: Option<u64>,
    /// Members keep their data on claims (`persistentVolumeClaimSpec` is set).
    pub persistent: bool,
    /// The cluster has been created before (recorded when the seed answered), so an empty
    /// world means its data is lost, not that it is new.
    pub bootstrapped: bool,
    /// Running pods labelled as this cluster's members that the operators did not make (no
    /// proof of origin): they are not in `pods`, and nothing is done while they run.
    pub foreign_pods: BTreeSet<String>,
}

/// The next step. Steps that change membership come with the intent to record first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MembershipStep {
    /// Record [`Intent::Seed`], then create the claim and pod of the first member with
    /// `--initial-cluster-state=new` and a fresh token.
    Seed { member: String },
    /// Record [`Intent::Add`], then add `member` to etcd as a learner.
    AddLearner { member: String },
    /// Create the claim (when persistent) and the pod of a member etcd knows, joining with
    /// `--initial-cluster-state=existing` and `initial_cluster` (every member's name). A member
    /// with data on its claim restarts from it (etcd then ignores the initial flags).
    StartMember {
        member: String,
        initial_cluster: Vec<String>,
    },
    /// Promote a learner that caught up.
    Promote { member: String, id: u64 },
    /// Record [`Intent::Remove`], then remove the member from etcd.
    RemoveMember {
        member: Option<String>,
        id: u64,
        reason: String,
    },
    /// Delete the pod and the claim of a member etcd no longer has.
    DeleteMemberResources { member: String },
    /// Delete a failed pod so that it is made again (on its claim, if it has one).
    DeletePod { member: String },
    /// The recorded change is done (or moot): clear it.
    ClearIntent,
    /// Nothing to do until the world changes.
    Wait { reason: String },
    /// Fewer healthy voting members than a majority, or the data of every member is gone:
    /// nothing destructive happens; restore from a backup (EtcdRestore).
    QuorumLost { dead: Vec<String>, reason: String },
    /// `size` healthy voting members, nothing in flight.
    Converged,
}

/// How long a learner may take to start before it is removed again (its pod cannot be
/// scheduled, its claim does not bind, its image cannot be pulled): it holds no data anyone
/// needs, and while it is waited for nothing else moves.
pub const LEARNER_START_SECONDS: u64 = 300;

/// The next step towards `size` members.
pub fn plan(names: &ClusterNames, size: usize, observed: &MembershipObserved) -> MembershipStep {
    // A pod that passes for a member holds the name of one, and may be meant to: nothing is
    // created, removed or deleted until a human has looked at it.
    if !observed.foreign_pods.is_empty() {
        let pods: Vec<&str> = observed.foreign_pods.iter().map(String::as_str).collect();
        return MembershipStep::Wait {
            reason: format!(
                "pod {} carries this cluster's member labels but was not made by the operators (no proof of origin): nothing is done until it is deleted",
                pods.join(", ")
            ),
        };
    }
    match &observed.members {
        None => plan_unreachable(names, observed),
        Some(members) => plan_reachable(names, size, observed, members),
    }
}

/// Names of every member-like thing seen: new members get a name above all of them.
fn used_names(observed: &MembershipObserved) -> Vec<String> {
    let mut used: Vec<String> = observed
        .pods
        .keys()
        .chain(&observed.claims)
        .chain(&observed.reserved)
        .cloned()
        .collect();
    if let Some(members) = &observed.members {
        used.extend(members.iter().filter_map(|m| m.name.clone()));
    }
    match &observed.intent {
        Some(Intent::Seed { member } | Intent::Add { member }) => used.push(member.clone()),
        Some(Intent::Remove {
            member: Some(member),
            ..
        }) => used.push(member.clone()),
        _ => {}
    }
    used
}

/// No member answered.
fn plan_unreachable(names: &ClusterNames, observed: &MembershipObserved) -> MembershipStep {
    let MembershipObserved {
        pods,
        claims,
        intent,
        ..
    } = observed;
    if let Some(Intent::Seed { member }) = intent {
        return match pods.get(member) {
            // Evicted before it answered: its pod is made again (on its data, when it has a
            // claim: etcd then ignores the bootstrap flags).
            Some(PodState::Failed) => MembershipStep::DeletePod {
                member: member.clone(),
            },
            Some(_) => MembershipStep::Wait {
                reason: format!("seed member {member} is starting"),
            },
            None => MembershipStep::Seed {
                member: member.clone(),
            },
        };
    }
    if pods.is_empty() && claims.is_empty() {
        if observed.bootstrapped {
            return MembershipStep::QuorumLost {
                dead: Vec::new(),
                reason: "every member pod and data volume is gone".into(),
            };
        }
        let used = used_names(observed);
        return MembershipStep::Seed {
            member: names.next_member(used.iter().map(String::as_str)),
        };
    }
    // As rule 1 with quorum: members whose pods were deleted restart on their claims (the data
    // says who they are), and failed pods (evicted, say) are deleted to be made again: nothing
    // else would bring back a cluster whose every pod was evicted. Not a member being removed.
    let removing = match intent {
        Some(Intent::Remove { member, .. }) => member.as_deref(),
        _ => None,
    };
    if observed.persistent {
        let restartable = || claims.iter().filter(|c| Some(c.as_str()) != removing);
        if let Some(member) = restartable().find(|c| !pods.contains_key(*c)) {
            return MembershipStep::StartMember {
                member: member.clone(),
                initial_cluster: claims.iter().cloned().collect(),
            };
        }
        if let Some(member) = restartable().find(|c| pods.get(*c) == Some(&PodState::Failed)) {
            return MembershipStep::DeletePod {
                member: member.clone(),
            };
        }
    }
    if pods
        .values()
        .any(|p| matches!(p, PodState::Pending | PodState::Running { ready: false }))
    {
        return MembershipStep::Wait {
            reason: "no member answers yet; members are starting".into(),
        };
    }
    // Pods being deleted (every node drained, say) are not asked; with their claims kept, the
    // members restart on them once the pods are gone.
    let leaving: Vec<&str> = pods
        .iter()
        .filter(|(name, state)| {
            **state == PodState::Terminating && observed.persistent && claims.contains(*name)
        })
        .map(|(name, _)| name.as_str())
        .collect();
    if !leaving.is_empty() {
        return MembershipStep::Wait {
            reason: format!(
                "no member answers; the pods of {} are being deleted and restart on their claims once gone",
                leaving.join(", ")
            ),
        };
    }
    MembershipStep::QuorumLost {
        dead: pods.keys().cloned().collect(),
        reason: "no member answers".into(),
    }
}

fn plan_reachable(
    names: &ClusterNames,
    size: usize,
    observed: &MembershipObserved,
    members: &[Member],
) -> MembershipStep {
    let MembershipObserved {
        pods,
        claims,
        intent,
        persistent,
        ..
    } = observed;
    let by_name = |name: &str| members.iter().find(|m| m.name.as_deref() == Some(name));
    let all_names = || -> Vec<String> { members.iter().filter_map(|m| m.name.clone()).collect() };
    let has_data = |name: &str| *persistent && claims.contains(name);

    // 1. Restarts that delete nothing come before anything else, the quorum check included:
    //    members whose pods are gone or failed come back on their own claims, which is how a
    //    cluster that lost quorum only because pods were deleted or evicted recovers. The
    //    member a recorded add concerns is left to step 2 (a promoted one without data must
    //    not come back) and a member being removed is not restarted.
    let subject = match intent {
        Some(Intent::Add { member }) => Some(member.as_str()),
        Some(Intent::Remove { member, .. }) => member.as_deref(),
        _ => None,
    };
    for m in members {
        let Some(name) = &m.name else { continue };
        if !has_data(name) || subject == Some(name.as_str()) {
            continue;
        }
        match pods.get(name) {
            None => {
                return MembershipStep::StartMember {
                    member: name.clone(),
                    initial_cluster: all_names(),
                };
            }
            Some(PodState::Failed) => {
                return MembershipStep::DeletePod {
                    member: name.clone(),
                };
            }
            Some(_) => {}
        }
    }

    // 2. The recorded change.
    match intent {
        Some(Intent::Seed { member }) => {
            return if by_name(member).is_some() {
                MembershipStep::ClearIntent
            } else {
                MembershipStep::Wait {
                    reason: format!("seed member {member} is starting"),
                }
            };
        }
        Some(Intent::Add { member }) => {
            return match by_name(member) {
                // A follower's list may not show the add yet: ask the leader first.
                None if !observed.leader_list => MembershipStep::Wait {
                    reason: "the leader does not answer; the add is checked with it first".into(),
                },
                None if members.len() < size && members.iter().all(|m| m.healthy) => {
                    MembershipStep::AddLearner {
                        member: member.clone(),
                    }
                }
                // Not in etcd, so nothing happened yet: no longer wanted (size went down
                // meanwhile), or a member is unhealthy and healing comes first.
                None => MembershipStep::ClearIntent,
                // Started only while it is a learner, or on its own data: a promoted voter
                // must never come back on an empty disk (it would have forgotten its log).
                Some(m) if !pods.contains_key(member) && (m.learner || has_data(member)) => {
                    MembershipStep::StartMember {
                        member: member.clone(),
                        initial_cluster: all_names(),
                    }
                }
                Some(m) if !pods.contains_key(member) && !m.learner => MembershipStep::ClearIntent,
                // A learner holds no data anyone needs: one no longer wanted (size went down),
                // that keeps crashing or that never starts is removed instead of waited for.
                Some(m)
                    if m.learner
                        && (members.len() > size
                            || observed.crashing.contains_key(member)
                            || !m.started
                                && observed
                                    .intent_age_seconds
                                    .is_some_and(|age| age > LEARNER_START_SECONDS)) =>
                {
                    MembershipStep::RemoveMember {
                        member: Some(member.clone()),
                        id: m.id,
                        reason: match observed.crashing.get(member) {
                            Some(cause) => format!("the learner cannot start ({cause})"),
                            None if members.len() > size => {
                                "the learner is no longer wanted (size went down)".into()
                            }
                            None => format!(
                                "the learner did not start within {LEARNER_START_SECONDS} s"
                            ),
                        },
                    }
                }
                Some(m) if m.learner && m.started && m.healthy => MembershipStep::Promote {
                    member: member.clone(),
                    id: m.id,
                },
                Some(m) if m.learner => MembershipStep::Wait {
                    reason: format!("learner {member} is catching up"),
                },
                Some(_) => MembershipStep::ClearIntent,
            };
        }
        Some(Intent::Remove { member, id, reason }) => {
            if members.iter().any(|m| m.id == *id) {
                return MembershipStep::RemoveMember {
                    member: member.clone(),
                    id: *id,
                    reason: reason.clone(),
                };
            }
            if !observed.leader_list {
                return MembershipStep::Wait {
                    reason: "the leader does not answer; the removal is checked with it first"
                        .into(),
                };
            }
            if let Some(member) = member
                && (pods.contains_key(member) || claims.contains(member))
            {
                return MembershipStep::DeleteMemberResources {
                    member: member.clone(),
                };
            }
            return MembershipStep::ClearIntent;
        }
        None => {}
    }

    // 3. Quorum: nothing below runs without it. When every unhealthy voter can come back on
    //    its data, that is waited for: none of them is dead.
    let voters: Vec<&Member> = members.iter().filter(|m| !m.learner).collect();
    let healthy_voters = voters.iter().filter(|m| m.healthy).count();
    if healthy_voters < voters.len() / 2 + 1 {
        // Its data is there and it does not keep crashing on it: its pod is starting, being
        // deleted (rule 1 makes it again), or running through an election.
        let returning = |m: &&&Member| {
            m.name
                .as_deref()
                .is_some_and(|name| has_data(name) && !observed.crashing.contains_key(name))
        };
        let down: Vec<&&Member> = voters.iter().filter(|m| !m.healthy).collect();
        if down.iter().all(returning) {
            let down: Vec<String> = down.iter().map(|m| display(m)).collect();
            return MembershipStep::Wait {
                reason: format!(
                    "{healthy_voters} of {} voting members healthy; {} restarting on their data",
                    voters.len(),
                    down.join(", ")
                ),
            };
        }
        return MembershipStep::QuorumLost {
            dead: voters
                .iter()
                .filter(|m| !m.healthy)
                .map(|m| display(m))
                .collect(),
            reason: format!(
                "{healthy_voters} of {} voting members healthy",
                voters.len()
            ),
        };
    }

    // Everything below may remove or delete: only on the leader's member list.
    if !observed.leader_list {
        return MembershipStep::Wait {
            reason: "the leader does not answer; nothing is removed until it does".into(),
        };
    }

    // 4. Heal members whose data is gone, and failed pods without claims.
    for m in members {
        let Some(name) = &m.name else { continue };
        match pods.get(name) {
            None if has_data(name) => {
                return MembershipStep::StartMember {
                    member: name.clone(),
                    initial_cluster: all_names(),
                };
            }
            None => {
                let reason = if m.started {
                    "its data is gone (pod and volume deleted)"
                } else {
                    "it was added but never started"
                };
                return MembershipStep::RemoveMember {
                    member: Some(name.clone()),
                    id: m.id,
                    reason: reason.into(),
                };
            }
            Some(PodState::Failed) => {
                return MembershipStep::DeletePod {
                    member: name.clone(),
                };
            }
            Some(_) if !m.healthy && observed.crashing.contains_key(name) => {
                return MembershipStep::RemoveMember {
                    member: Some(name.clone()),
                    id: m.id,
                    reason: format!(
                        "it cannot rejoin ({}); a new member replaces it",
                        observed.crashing[name]
                    ),
                };
            }
            Some(_) => {}
        }
    }

    // 5. Leftovers: pods and claims of members etcd does not have. Pods already being deleted
    //    are left to go (after a restore they are the replaced members, whose claims were
    //    detached and must stay).
    let staying = pods
        .iter()
        .filter(|(_, state)| **state != PodState::Terminating)
        .map(|(name, _)| name);
    for name in staying.chain(claims.iter()) {
        if by_name(name).is_none() && names.ordinal(name).is_some() {
            return MembershipStep::DeleteMemberResources {
                member: name.clone(),
            };
        }
    }

    // 6. Learners and unhealthy members.
    if let Some(m) = members.iter().find(|m| m.learner) {
        let name = display(m);
        return if m.started && m.healthy {
            MembershipStep::Promote {
                member: name,
                id: m.id,
            }
        } else {
            MembershipStep::Wait {
                reason: format!("learner {name} is catching up"),
            }
        };
    }
    if let Some(m) = members.iter().find(|m| !m.healthy) {
        if members.len() > size {
            return remove(
                m,
                "the cluster is larger than its size and this member is unhealthy",
            );
        }
        return MembershipStep::Wait {
            reason: format!("member {} is not healthy", display(m)),
        };
    }

    // 7. Scale, one member at a time.
    if members.len() < size {
        let used = used_names(observed);
        return MembershipStep::AddLearner {
            member: names.next_member(used.iter().map(String::as_str)),
        };
    }
    if members.len() > size {
        // Highest ordinal first (the newest), never the leader while another member remains.
        let victim = members
            .iter()
            .filter(|m| !m.leader)
            .max_by_key(|m| m.name.as_deref().and_then(|n| names.ordinal(n)))
            .unwrap_or(&members[0]);
        return remove(victim, "scaling down to the cluster's size");
    }
    // Pods still being deleted hold this up too: converged means they are gone.
    if let Some((name, _)) = pods
        .iter()
        .find(|(_, p)| !matches!(p, PodState::Running { ready: true }))
    {
        return MembershipStep::Wait {
            reason: format!("member {name} is not ready"),
        };
    }
    MembershipStep::Converged
}

fn remove(m: &Member, reason: &str) -> MembershipStep {
    MembershipStep::RemoveMember {
        member: m.name.clone(),
        id: m.id,
        reason: reason.into(),
    }
}

/// A member's name, or its ID in hex as etcdctl prints it.
fn display(m: &Member) -> String {
    m.name.clone().unwrap_or_else(|| format!("{:x}", m.id))
}
