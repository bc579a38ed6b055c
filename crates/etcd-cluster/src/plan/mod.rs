//! The membership planner: from what exists (member pods, data claims, etcd's member list with
//! each member's health, the nodes members run on) and the change recorded before it started,
//! the single next safe step. The operator records a change's intent before calling etcd,
//! executes one step, and plans again from the world, so a restart at any point finishes or
//! undoes that change: an add whose member never started is re-issued or removed, a removal is
//! completed, and a member nobody intended (a phantom of an add that timed out) is removed.
//!
//! The planner is a list of small named rules ([`RULES`]), each a function of the observed
//! world that returns a step or `None` ("not mine"). They are asked in this order and the
//! first that answers decides:
//!
//! 1. [`hold::foreign_pods_hold_everything`]: a pod passing for a member that the operators
//!    did not make stops everything.
//!
//! When no member answers ([`unreachable`]):
//! 2. the recorded seed is made (its failed pod deleted); 3. an empty world is seeded, or
//!    reported lost once the cluster was created; 4. members restart on their claims (missing
//!    pods made, failed ones deleted to be made again); 5. pods starting and 6. pods with claims
//!    being deleted are waited for; 7. anything else is [`MembershipStep::QuorumLost`].
//!
//! When members answer ([`change`], [`reachable`]):
//! 8. Restart members whose pod is gone or failed on their own claims (deletes nothing, and
//!    comes first so that a recorded change etcd refuses while a member is down cannot keep
//!    that member down). Not a member whose node is down: it cannot start anywhere else.
//! 9.-11. Finish the recorded change (seed, add, removal); an add etcd has not seen yet is
//!    dropped while a member is unhealthy (etcd would refuse it, and healing must not wait).
//! 12. Never act destructively without quorum: with fewer healthy voters than a majority,
//!    nothing is removed or deleted. It is waited for while every unhealthy voter can come
//!    back on its data (it has its claim, its node is up, and it does not keep crashing on
//!    it), else it is [`MembershipStep::QuorumLost`].
//! 13. Nothing is removed or deleted on a follower's member list (it may lag).
//! 14. Replace a member whose node has been down longer than `spec.memberReplacement`
//!    allows: removed from etcd (its claim is kept, detached), one at a time, only while the
//!    cluster keeps quorum without it and has every other replacement in place.
//! 15. Heal: a member whose data is gone (no claim, or emptyDir), or that keeps crashing on its
//!    data while the others hold quorum, is removed, to be replaced by a new member under a new
//!    name (the healthy majority holds every committed write).
//! 16. Clean up: pods and claims of members etcd no longer has, phantom members.
//! 17. Promote a caught-up learner, or wait for it.
//! 18. Add the replacement of a member removed because its node was lost, while other members
//!     are still down with their nodes (their own replacement comes after).
//! 19. Wait for unhealthy members (the kubelet restarts them), or remove one when the cluster
//!     is larger than its size.
//! 20. Scale one member at a time, only when every member is healthy: add as a learner; remove
//!     the newest member, never the leader when there is another choice.
//! 21. Converged once every member pod is ready.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::naming::ClusterNames;

pub mod change;
pub mod hold;
pub mod reachable;
pub mod unreachable;

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
    /// Remove member `id` from etcd, then delete its pod and claim. With `keep_claim` (a
    /// member whose node was lost) the claim is kept, detached from the cluster.
    Remove {
        member: Option<String>,
        id: u64,
        reason: String,
        #[serde(default)]
        keep_claim: bool,
    },
}

/// A member's node that the member cannot run on: not `Ready`, gone from the API, or cordoned
/// (drained) while the member's pod waits to be scheduled there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeDown {
    pub node: String,
    /// Seconds since it stopped being `Ready`, or since the member's pod has waited on the
    /// cordoned node; `None`: the Node object is gone (deleted, as a cloud does with a machine
    /// that no longer exists), as long as anyone can tell.
    pub for_seconds: Option<u64>,
    /// The node is up but cordoned (a drain): its volume is there, but the member cannot come
    /// back to it until it is uncordoned. Its claim is not kept when the member is replaced (a
    /// copy of data the other members hold, on a node that stays in service).
    pub cordoned: bool,
    /// Known to be off: the Node object is gone, or it carries the taint
    /// `node.kubernetes.io/out-of-service` (someone says it is shut down). What
    /// `spec.quorumLoss.fencing: Required` waits for; not Ready alone does not prove it.
    pub fenced: bool,
}

impl NodeDown {
    /// Down for longer than `seconds`.
    pub fn longer_than(&self, seconds: u64) -> bool {
        self.for_seconds.is_none_or(|down| down > seconds)
    }
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
    /// Members whose node is down (the node their pod runs on, or their claim's volume is
    /// bound to), by member name.
    pub nodes_down: BTreeMap<String, NodeDown>,
    /// A member whose node has been down this long (seconds) is replaced
    /// (`spec.memberReplacement`); `None`: never.
    pub replace_after_seconds: Option<u64>,
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
        keep_claim: bool,
    },
    /// Delete the pod and the claim of a member etcd no longer has. With `keep_claim` (its node
    /// was lost) the claim is detached from the cluster and kept, and the pod is deleted at
    /// once (its node cannot confirm; etcd no longer has the member, so it cannot serve).
    DeleteMemberResources { member: String, keep_claim: bool },
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

/// What every rule looks at: the observed world and the size asked for.
pub struct World<'a> {
    pub names: &'a ClusterNames,
    pub size: usize,
    pub observed: &'a MembershipObserved,
}

impl World<'_> {
    /// etcd's member list, when a member answered.
    pub fn members(&self) -> Option<&[Member]> {
        self.observed.members.as_deref()
    }

    /// Whether `name` keeps its data on a claim that exists.
    pub fn has_data(&self, name: &str) -> bool {
        self.observed.persistent && self.observed.claims.contains(name)
    }

    /// Whether `name`'s node is down (for any time).
    pub fn node_down(&self, name: &str) -> bool {
        self.observed.nodes_down.contains_key(name)
    }

    /// Whether `name`'s node has been down longer than the replacement grace.
    pub fn node_lost(&self, name: &str) -> bool {
        match (
            self.observed.nodes_down.get(name),
            self.observed.replace_after_seconds,
        ) {
            (Some(down), Some(grace)) => down.longer_than(grace),
            _ => false,
        }
    }

    /// The member a recorded add or removal concerns.
    pub fn intent_subject(&self) -> Option<&str> {
        match &self.observed.intent {
            Some(Intent::Add { member }) => Some(member.as_str()),
            Some(Intent::Remove { member, .. }) => member.as_deref(),
            _ => None,
        }
    }

    /// The next free member name: above every member-like thing seen.
    pub fn next_member(&self) -> String {
        let observed = self.observed;
        let mut used: Vec<&str> = observed
            .pods
            .keys()
            .chain(&observed.claims)
            .chain(&observed.reserved)
            .map(String::as_str)
            .collect();
        if let Some(members) = &observed.members {
            used.extend(members.iter().filter_map(|m| m.name.as_deref()));
        }
        match &observed.intent {
            Some(Intent::Seed { member } | Intent::Add { member }) => used.push(member),
            Some(Intent::Remove {
                member: Some(member),
                ..
            }) => used.push(member),
            _ => {}
        }
        self.names.next_member(used)
    }
}

/// One rule: the step it takes in this world, or `None` when the world is not its case.
pub struct Rule {
    pub name: &'static str,
    pub decide: fn(&World) -> Option<MembershipStep>,
}

/// Every rule, in the order they are asked (see the module documentation). The last one of
/// each case answers every world that reaches it.
pub const RULES: &[Rule] = &[
    Rule {
        name: "foreign_pods_hold_everything",
        decide: hold::foreign_pods_hold_everything,
    },
    Rule {
        name: "recorded_seed_is_made",
        decide: unreachable::recorded_seed_is_made,
    },
    Rule {
        name: "empty_world_is_seeded_or_lost",
        decide: unreachable::empty_world_is_seeded_or_lost,
    },
    Rule {
        name: "silent_members_restart_on_their_claims",
        decide: unreachable::silent_members_restart_on_their_claims,
    },
    Rule {
        name: "starting_members_are_waited_for",
        decide: unreachable::starting_members_are_waited_for,
    },
    Rule {
        name: "leaving_pods_are_waited_for",
        decide: unreachable::leaving_pods_are_waited_for,
    },
    Rule {
        name: "nobody_answers",
        decide: unreachable::nobody_answers,
    },
    Rule {
        name: "members_restart_on_their_claims",
        decide: reachable::members_restart_on_their_claims,
    },
    Rule {
        name: "recorded_seed_is_finished",
        decide: change::recorded_seed_is_finished,
    },
    Rule {
        name: "recorded_add_is_finished",
        decide: change::recorded_add_is_finished,
    },
    Rule {
        name: "recorded_removal_is_finished",
        decide: change::recorded_removal_is_finished,
    },
    Rule {
        name: "nothing_destructive_without_quorum",
        decide: reachable::nothing_destructive_without_quorum,
    },
    Rule {
        name: "removals_only_on_the_leaders_list",
        decide: reachable::removals_only_on_the_leaders_list,
    },
    Rule {
        name: "member_on_a_lost_node_is_replaced",
        decide: reachable::member_on_a_lost_node_is_replaced,
    },
    Rule {
        name: "members_without_data_are_healed",
        decide: reachable::members_without_data_are_healed,
    },
    Rule {
        name: "leftovers_are_deleted",
        decide: reachable::leftovers_are_deleted,
    },
    Rule {
        name: "learner_is_promoted_or_waited_for",
        decide: reachable::learner_is_promoted_or_waited_for,
    },
    Rule {
        name: "replacement_of_a_lost_member_is_added",
        decide: reachable::replacement_of_a_lost_member_is_added,
    },
    Rule {
        name: "unhealthy_members_are_waited_for",
        decide: reachable::unhealthy_members_are_waited_for,
    },
    Rule {
        name: "size_is_reached_one_member_at_a_time",
        decide: reachable::size_is_reached_one_member_at_a_time,
    },
    Rule {
        name: "converged_once_every_pod_is_ready",
        decide: reachable::converged_once_every_pod_is_ready,
    },
];

/// The next step towards `size` members.
pub fn plan(names: &ClusterNames, size: usize, observed: &MembershipObserved) -> MembershipStep {
    decide(names, size, observed).1
}

/// The next step and the name of the rule that chose it.
pub fn decide(
    names: &ClusterNames,
    size: usize,
    observed: &MembershipObserved,
) -> (&'static str, MembershipStep) {
    let world = World {
        names,
        size,
        observed,
    };
    RULES
        .iter()
        .find_map(|rule| Some((rule.name, (rule.decide)(&world)?)))
        // Unreachable: `nobody_answers` and `converged_once_every_pod_is_ready` answer every
        // world of their case. Waiting is the step that cannot do harm.
        .unwrap_or((
            "none",
            MembershipStep::Wait {
                reason: "no rule applies".into(),
            },
        ))
}

/// A member's name, or its ID in hex as etcdctl prints it.
pub fn display(m: &Member) -> String {
    m.name.clone().unwrap_or_else(|| format!("{:x}", m.id))
}
