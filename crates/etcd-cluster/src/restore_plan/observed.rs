//! What the restore's planner is given: the restore's recorded status and what the world
//! shows (the cluster, its member and restore pods, claims, etcd's health), gathered by
//! the restore operator's `observe`.

use std::collections::{BTreeMap, BTreeSet};

use super::recorded::{ExpectedBackup, KeySpace, RestorePhase, RestorePlan, VerifiedSnapshot};

/// How long after its grace period a member pod's deletion counts as overdue: a kubelet that
/// runs confirms it within seconds of the grace period's end.
pub const DELETION_OVERDUE_SECONDS: i64 = 30;

/// How a run-once restore pod is doing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodRun {
    /// No container started yet (its volumes are not mounted: nothing was written).
    Waiting,
    Running,
    /// Exited 0; its fetch's report (read only until the snapshot is recorded).
    Succeeded {
        output: String,
    },
    /// Why it failed (its termination message or the kubelet's reason).
    Failed {
        /// The container that failed: `fetch` (the backup could not be read or verified) or
        /// the restore tool.
        container: String,
        /// How it exited, when it ran and exited (not when it could not start).
        exit: Option<ToolExit>,
        message: String,
    },
}

/// How a container of the `etcd-backup` image exited, as its exit code says (the operator
/// that read the pod maps the code with `command_line::EXIT_*`, where the codes are defined).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolExit {
    /// The data failed verification (corrupted, truncated, altered).
    DataBad,
    /// The identity given cannot decrypt it (none, not an age identity, not a recipient).
    NoUsableIdentity,
    /// Any other failure the tool reported (unreachable, refused, missing, a point not
    /// reached).
    Failed,
    /// Another code: the tool did not say (killed at a memory limit, evicted, a crash).
    Other(i32),
}

/// The container name [`PodRun::Failed`] carries when no container of the pod started in time
/// (see `observe::START_DEADLINE`).
pub const NOT_STARTED: &str = "pod";

/// The EtcdCluster as the restore needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterView {
    pub paused: bool,
    /// The operator reported the pause (`status.controlPaused`) for the current generation: it
    /// no longer acts on the cluster.
    pub pause_seen: bool,
    /// The restore holding the cluster (its annotation `etcd.database.coreos.com/restore`).
    pub restore: Option<String>,
    pub size: usize,
    pub version: String,
    /// Members keep data on claims (`pod.persistentVolumeClaimSpec`).
    pub persistent: bool,
}

/// The restored members' health, asked of each member.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Health {
    /// Members in etcd's member list as voters.
    pub voters: BTreeSet<String>,
    /// Members that answered their status without errors, with their revision.
    pub revisions: BTreeMap<String, i64>,
    /// The key space one member serves, read only when the planner compares it with the
    /// backup's record ([`super::key_space_to_check`]).
    pub contents: Option<KeySpace>,
}

/// Why the snapshot cannot be read: the restore fails with this reason and message.
pub type SourceProblem = (super::RestoreFailure, String);

#[derive(Clone, Debug, Default)]
pub struct RestoreObserved {
    /// This restore's uid (its lock on the cluster).
    pub uid: String,
    /// Recorded in status.
    pub phase: Option<RestorePhase>,
    /// Recorded once every member's fetch verified it: from then on the cluster may be touched.
    pub snapshot: Option<VerifiedSnapshot>,
    /// What the EtcdBackup recorded of the backup (a `backupRef` restore), pinned with the plan.
    pub expected: Option<ExpectedBackup>,
    pub plan: Option<RestorePlan>,
    pub revision_bumped: Option<bool>,
    pub restored_revision: Option<i64>,
    /// The failure recorded by a [`RestoreStep::Discard`] (reason, message), while it is carried out.
    pub failing: Option<(super::RestoreFailure, String)>,
    /// Where the snapshot is, and why it cannot be read when it cannot (reason, message).
    pub source_url: String,
    pub source_problem: Option<SourceProblem>,
    /// The world.
    pub cluster: Option<ClusterView>,
    /// The cluster's member pods (`app=etcd,etcd_cluster=<name>`), with whether they are ready.
    pub member_pods: BTreeMap<String, bool>,
    /// Member pods in trouble the restore must act on or report.
    pub member_problems: BTreeMap<String, MemberProblem>,
    /// Member pods being deleted (not in `member_pods`).
    pub member_pods_going: BTreeSet<String>,
    /// Those of them whose graceful deletion is overdue (its grace period ended more than
    /// [`DELETION_OVERDUE_SECONDS`] ago): their node does not confirm it, being down or its
    /// kubelet dead, and they would stay for ever.
    pub member_pods_overdue: BTreeSet<String>,
    /// Its claims attached to it (same labels), not being deleted.
    pub claims: BTreeSet<String>,
    /// Claims detached from it earlier (by this or an earlier restore): their names stay taken.
    pub detached_claims: BTreeSet<String>,
    /// Those of them that carry this restore's uid (its detach step wrote it): the only claims
    /// its `Delete` policy may delete.
    pub detached_by_this: BTreeSet<String>,
    /// Every claim of the namespace, whoever's (a user's named like a member included): a new
    /// member is never named after one, or it would be restored onto it.
    pub all_claims: BTreeSet<String>,
    /// Claims made for restores of this name and not yet joined to the cluster (labelled as
    /// the restore's pods), not being deleted: their names stay taken.
    pub staged_claims: BTreeSet<String>,
    /// Names of its pods and claims being deleted: taken until they are gone (a claim created
    /// under such a name would be the old one, and vanish).
    pub terminating: BTreeSet<String>,
    pub restore_pods: BTreeMap<String, PodRun>,
    /// Asked only once every planned member pod is ready.
    pub health: Option<Health>,
    /// Old volumes are deleted after success (else kept, detached).
    pub delete_old_volumes: bool,
    /// Can create the cluster when it does not exist (`spec.newCluster`).
    pub can_create_cluster: bool,
    /// A recovery from the surviving member (`spec.fromSurvivor`).
    pub from_survivor: bool,
    /// The member `spec.fromSurvivor.member` names, when it names one.
    pub survivor_asked: Option<String>,
    /// What the cluster's members answered when asked their status (a recovery from a survivor
    /// asks until the snapshot is recorded): the members that did not answer are not here.
    pub member_statuses: Vec<MemberStatus>,
}

/// A member's own view, from its status (answered without a leader).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberStatus {
    pub member: String,
    pub raft_term: u64,
    /// The highest log index it knows committed.
    pub raft_index: u64,
    pub revision: i64,
    /// It knows a leader: the cluster has quorum.
    pub has_leader: bool,
    /// The node its pod runs on (a node that is up: the member answered).
    pub node: Option<String>,
}

/// A member pod the kubelet does not run, and why.
#[derive(Clone, Debug, PartialEq)]
pub enum MemberProblem {
    /// It will not run again (phase Failed: evicted, or its node shut down). Its claim keeps
    /// the restored data, so the member can simply be started again.
    Ended(String),
    /// A container keeps failing or cannot start (crash loop, image pull): it may pass, and
    /// the user must know.
    Stuck(String),
}
