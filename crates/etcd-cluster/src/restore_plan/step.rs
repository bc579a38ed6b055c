//! What the restore's planner decides: the one next step ([`super::plan`]), carried out by
//! the restore operator's controller and described by its status.

use super::failure::RestoreFailure;
use super::recorded::{KeySpace, RestorePlan, VerifiedSnapshot};
use crate::EtcdVersion;

/// The restore's next step. Every step is safe to repeat. A step on the restore's members
/// carries the recorded plan it acts on, so carrying it out looks nothing up again.
#[derive(Clone, Debug, PartialEq)]
pub enum RestoreStep {
    /// Nothing more to do (succeeded or failed before).
    Done,
    Fail {
        reason: RestoreFailure,
        message: String,
        /// Nothing of the cluster was touched (the snapshot was never verified): give it back
        /// to its operator as it was (unpaused when this restore paused it).
        release: bool,
    },
    /// A restore failing before the snapshot was verified first records why (`status.reason`),
    /// then removes its staged claims and its restore pods (copies of the backup; a pod holds
    /// its claim): no claim of the restore may remain under a name the cluster's operator could
    /// give a new member once the cluster is given back.
    Discard {
        reason: RestoreFailure,
        message: String,
        claims: Vec<String>,
        pods: Vec<String>,
    },
    /// Create the EtcdCluster from `spec.newCluster`, paused and held by this restore.
    CreateCluster,
    /// `spec.paused: true` and this restore's annotation on the cluster.
    PauseCluster,
    Wait {
        reason: String,
    },
    /// Record the plan in status (before any claim or pod is made).
    RecordPlan(RestorePlan),
    /// Create each member's claim (the restore's own until joined) and restore pod, which
    /// fetches and verifies the snapshot and restores it onto the claim.
    RestoreMembers {
        plan: RestorePlan,
        /// The plan's version, checked by an earlier rule.
        version: EtcdVersion,
        members: Vec<String>,
    },
    /// Record the snapshot every member's fetch verified: the cluster may now be touched (so a
    /// later failure no longer unpauses it).
    RecordSnapshot(VerifiedSnapshot),
    /// Delete old member pods (their claims keep the data).
    DeleteOldPods(Vec<String>),
    /// Delete at once (grace period 0) member pods whose graceful deletion is overdue: their
    /// node never confirms it (down, or its kubelet). Safe once the snapshot is recorded: the
    /// restored cluster's new ID keeps an old member out, and a kubelet that comes back stops
    /// a pod the API no longer has.
    ForceDeletePods(Vec<String>),
    /// Take old claims out of the cluster's selector (kept, labelled `detached-from`).
    DetachClaims(Vec<String>),
    /// Give the restored claims to the cluster (its labels, it as owner).
    JoinClaims {
        plan: RestorePlan,
        members: Vec<String>,
    },
    /// Create the member pods (and Services) on the restored claims.
    StartMembers {
        plan: RestorePlan,
        members: Vec<String>,
    },
    /// Delete member pods that will not run again; they are started again on their claims.
    RestartMembers(Vec<String>),
    /// Restored members are not running, for a reason the kubelet gives: a Warning says why,
    /// and the restore keeps waiting (the cluster stays paused, the old volumes kept).
    MembersUnhealthy(String),
    /// Record the hand-over, the revision served and the key space checked against the
    /// backup's record (when it was), then unpause the cluster, mark it as restored by this
    /// restore and release the lock.
    HandOver {
        plan: RestorePlan,
        revision: i64,
        contents: Option<KeySpace>,
    },
    /// Delete the detached claims of the replaced members (policy `Delete`).
    DeleteOldClaims(Vec<String>),
    /// The run-once restore pods of the plan's members go (with their copies of the snapshot).
    Succeed {
        plan: RestorePlan,
        revision: i64,
    },
}
