//! EtcdCluster maintenance of the database file: scheduled defragmentation
//! (`spec.defragmentation`, `status.defragmentation`) and members' auto-compaction
//! (`spec.autoCompaction`). etcd's file never shrinks by itself: compaction frees pages inside
//! it, defragmentation gives them back; without both a busy cluster reaches its quota and goes
//! read-only (alarm `NOSPACE`).

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const DEFAULT_MIN_FREE_PERCENT: i32 = 30;
pub const DEFAULT_MIN_FREE_MIB: i64 = 64;
pub const DEFAULT_MEMBER_TIMEOUT_SECONDS: i64 = 300;
/// etcd's own `--auto-compaction-retention` default when the operator sets the mode: keep one
/// hour of history (periodic mode).
pub const DEFAULT_COMPACTION_RETENTION: &str = "1h";

/// `spec.defragmentation`: when and which members to defragment, one at a time.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Defragmentation {
    /// Cron schedule (UTC) of defragmentation rounds, five fields or a macro
    /// (`"0 4 * * 0"`: Sundays at 04:00).
    #[schemars(length(min = 1))]
    pub schedule: String,
    /// Defragment a member only if at least this percent of its database file is free
    /// (default 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub min_free_percent: Option<i32>,
    /// ...and at least this many MiB (default 64).
    #[serde(
        rename = "minFreeMiB",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0))]
    pub min_free_mib: Option<i64>,
    /// Seconds a member may take to defragment and serve reads again before the round stops
    /// (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10))]
    pub member_timeout_in_second: Option<i64>,
}

impl Defragmentation {
    pub fn min_free_percent(&self) -> i32 {
        self.min_free_percent.unwrap_or(DEFAULT_MIN_FREE_PERCENT)
    }
    pub fn min_free_bytes(&self) -> i64 {
        self.min_free_mib.unwrap_or(DEFAULT_MIN_FREE_MIB) * 1024 * 1024
    }
    pub fn member_timeout_seconds(&self) -> i64 {
        self.member_timeout_in_second
            .unwrap_or(DEFAULT_MEMBER_TIMEOUT_SECONDS)
    }
}

/// etcd's auto-compaction modes.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CompactionMode {
    /// Keep `retention` of history (a duration such as `1h`, `30m`).
    #[default]
    Periodic,
    /// Keep the last `retention` revisions (a number).
    Revision,
}

/// `spec.autoCompaction`: how members compact their history. Unset: periodic, one hour.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(validation = Rule::new("self.mode != 'revision' || self.retention.matches('^[0-9]+$')")
    .message("with mode revision, retention is a number of revisions"))]
#[serde(rename_all = "camelCase")]
pub struct AutoCompaction {
    #[serde(default)]
    pub mode: CompactionMode,
    /// A duration (`1h`, `30m`; `0` turns auto-compaction off) for periodic, a revision count
    /// for revision.
    #[schemars(length(min = 1), regex(pattern = r"^[0-9]+(\.[0-9]+)?(h|m|s|ms)?$"))]
    pub retention: String,
}

/// `status.defragmentation`: the round under way and the last one.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DefragStatus {
    /// The round under way, recorded before each member is defragmented.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<DefragRound>,
    /// How the last round ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_round: Option<DefragRoundResult>,
}

/// A defragmentation round under way.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DefragRound {
    /// RFC 3339 time the round started.
    pub started: String,
    /// Why it started: `Schedule` or `NoSpaceAlarm`.
    pub trigger: String,
    /// Members finished (defragmented, or skipped below the thresholds), in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub done: Vec<DefragMember>,
    /// The member being defragmented now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<String>,
    /// RFC 3339 time that member's defragmentation started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_started: Option<String>,
    /// The current member's file size before, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_size_before: Option<i64>,
}

/// One member's part in a round.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DefragMember {
    /// The member.
    pub member: String,
    /// `Defragmented` (its call said so), `Skipped` (below the thresholds), `Failed` (the call,
    /// or reaching the member for it, failed: the round stops), or `Unconfirmed` (the call's
    /// answer was lost, as when it outlived `memberTimeoutInSecond` or the operator restarted
    /// mid-call, and the member serves reads again).
    pub result: String,
    /// Its database file before, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_before: Option<i64>,
    /// Its database file after, bytes; unset when skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_after: Option<i64>,
    /// Seconds it took, until the call answered (or, its answer lost, the member served reads
    /// again); unset when skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
}

/// How a defragmentation round ended.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DefragRoundResult {
    /// RFC 3339 time the round started.
    pub started: String,
    /// RFC 3339 time it ended.
    pub finished: String,
    /// Why it started: `Schedule` or `NoSpaceAlarm`.
    #[serde(default)]
    pub trigger: String,
    /// `Succeeded`, `Failed` (a member's defragmentation failed; see `reason`), or `Stopped` (a
    /// member did not serve reads again in time, or the cluster could not spare a member; see
    /// `reason`).
    pub result: String,
    /// Why the round stopped; unset when it succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Each member's part, as in `round.done`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<DefragMember>,
}
