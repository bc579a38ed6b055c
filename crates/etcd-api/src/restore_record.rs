//! What a restore records in its status about its plan and the snapshot (part of the
//! EtcdRestore API, re-exported by `restore`; the restore planner in `etcd-cluster` uses them).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The verified backup: what the members' `etcd-backup fetch` reported (all the same).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerifiedSnapshot {
    /// Revision in the backup's manifest (none for a snapshot without a manifest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// Size of the etcd database in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub db_bytes: Option<i64>,
    /// sha256 of the stored object, checked against its manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// CRC32C of the stored object, for an encrypted backup, whose manifest records it instead
    /// of a sha256 (age authenticates the content itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crc32c: Option<String>,
    /// sha256 of the snapshot itself (the plaintext), as its trailer says and the fetch checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub db_sha256: Option<String>,
    /// Version of the etcd member the backup was taken from, in the backup's manifest (none for
    /// a snapshot without a manifest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_version: Option<String>,
    /// The snapshot's own latest revision, as the restore tool logged it when it moved the
    /// revision forward (etcd 3.4.27+ and 3.5.10+). It is above `revision` when the cluster
    /// was written to while the snapshot was taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_revision: Option<i64>,
    /// A restore to a point: the key space at the point, as each member's replay read it
    /// (their snapshot files differ byte-wise; this must not), and what the restored members
    /// must serve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_space: Option<KeySpace>,
}

/// What the EtcdBackup recorded of the backup a `backupRef` restore takes
/// (`status.lastBackup`), pinned with the plan: every member's fetch must report the same
/// checksums and revision before anything of the cluster is touched, and the restored members
/// must serve the recorded key space before the restore succeeds. Someone who can write the
/// bucket can replace an object and its manifest with another valid snapshot; they cannot
/// change this record.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExpectedBackup {
    /// sha256 of the stored object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// CRC32C of the stored object (an encrypted backup's manifest records it instead of a
    /// sha256).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crc32c: Option<String>,
    /// sha256 of the snapshot itself (the plaintext): what proves an encrypted backup is the
    /// one recorded (a CRC32C can be forged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub db_sha256: Option<String>,
    /// Revision in the backup's manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// The key space at backup time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contents: Option<KeySpace>,
}

/// A key space at one revision: how many keys, and the SHA-256 of every key with its value
/// and metadata (the digest drills compare).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeySpace {
    /// The revision it was read at.
    pub revision: i64,
    pub key_count: i64,
    pub content_sha256: String,
}

/// Recorded before the first member is made.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestorePlan {
    /// The restored members (new names, above every existing one).
    pub members: Vec<String>,
    /// The new cluster token all of them share.
    pub token: String,
    /// The etcd version they run.
    pub version: String,
    /// Claims of the replaced members, detached from the cluster and kept until the restored
    /// cluster is healthy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub detached_claims: Vec<String>,
    /// A recovery from a survivor (`spec.fromSurvivor`): the member whose data is restored,
    /// chosen before anything was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub survivor: Option<Survivor>,
    /// Every member was healthy and the cluster is (being) handed back to its operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handed_over: Option<bool>,
}

/// The member a recovery from a survivor restores, and what it reported when it was chosen:
/// of the members that answered, the highest committed Raft index, then revision, then term.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Survivor {
    pub member: String,
    pub raft_term: u64,
    /// The highest log index it knows committed.
    pub raft_index: u64,
    pub revision: i64,
    /// The node it ran on, which was up: the restored member is made there (a node where
    /// the old members were may be down without Kubernetes knowing it yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The other members that answered (none had a leader), each as `name: term T, index I,
    /// revision R`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub others: Vec<String>,
}

/// Steps of a restore.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum RestorePhase {
    /// Accepted, nothing done yet.
    Pending,
    /// Pausing the cluster and planning the new members.
    Preparing,
    /// Every new member fetching, verifying and restoring the snapshot onto its own volume
    /// while the old members still run; once all verified it, the old members stop and the
    /// new ones start.
    Restoring,
    /// Waiting for every restored member to be healthy with the snapshot's data.
    Verifying,
    /// The cluster runs on the restored data.
    Succeeded,
    /// The restore stopped; see `reason` and the `Ready` condition.
    Failed,
}

impl RestorePhase {
    /// Whether the restore is over, successfully or not.
    pub fn is_terminal(self) -> bool {
        matches!(self, RestorePhase::Succeeded | RestorePhase::Failed)
    }
}
