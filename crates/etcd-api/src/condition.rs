//! metav1 `Condition` helpers for `EtcdBackup` and `EtcdRestore` status.
//!
//! The controllers report through conditions with `observedGeneration` (coreos only had
//! `succeeded`/`Reason`, which cannot say "still running" or "stale").

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::{JsonSchema, Schema, SchemaGenerator};

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// The object did what its spec asks: the last backup succeeded (and for a schedule, the schedule
/// is healthy), or the restored cluster is healthy.
pub const READY: &str = "Ready";
/// Work is under way: a backup (run by the operator itself) or a restore step is running.
pub const PROGRESSING: &str = "Progressing";

/// `status` value of a condition that holds.
pub const TRUE: &str = "True";
/// `status` value of a condition that does not hold.
pub const FALSE: &str = "False";
/// `status` value when the controller cannot tell yet.
pub const UNKNOWN: &str = "Unknown";

/// A new condition; `status` is `True` or `False`.
pub fn new(
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    observed_generation: Option<i64>,
    now: Time,
) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: if status { TRUE } else { FALSE }.to_string(),
        reason: reason.to_string(),
        message: message.into(),
        observed_generation,
        last_transition_time: now,
    }
}

/// The condition of this type, if any.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of this type exists with status `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == TRUE)
}

/// Inserts or replaces the condition of `new.type_`. `lastTransitionTime` only moves when the
/// status changes, as the API conventions require. Returns whether anything changed, so callers
/// can skip a no-op status write.
pub fn set(conditions: &mut Vec<Condition>, mut new: Condition) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        None => {
            conditions.push(new);
            true
        }
        Some(old) => {
            if old.status == new.status {
                new.last_transition_time = old.last_transition_time.clone();
            }
            let changed = *old != new;
            *old = new;
            changed
        }
    }
}

/// Schema of a condition list keyed by `type`, so server-side apply merges entries per type.
pub(crate) fn list_schema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = generator.subschema_for::<Vec<T>>();
    schema.insert("x-kubernetes-list-type".into(), "map".into());
    schema.insert(
        "x-kubernetes-list-map-keys".into(),
        serde_json::json!(["type"]),
    );
    schema
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    #[test]
    fn set_keeps_transition_time_while_status_holds() {
        let mut conds = Vec::new();
        assert!(set(
            &mut conds,
            new(READY, true, "BackupSucceeded", "", Some(1), at(10))
        ));
        // Same status, new message: updated, but the transition time stays.
        assert!(set(
            &mut conds,
            new(READY, true, "BackupSucceeded", "again", Some(2), at(20))
        ));
        assert_eq!(conds.len(), 1);
        assert_eq!(conds[0].last_transition_time, at(10));
        assert_eq!(conds[0].observed_generation, Some(2));
        // Identical write: no change.
        assert!(!set(
            &mut conds,
            new(READY, true, "BackupSucceeded", "again", Some(2), at(30))
        ));
        // Status flips: the transition time moves.
        assert!(set(
            &mut conds,
            new(READY, false, "SnapshotFailed", "x", Some(2), at(40))
        ));
        assert_eq!(conds[0].last_transition_time, at(40));
        assert!(!is_true(&conds, READY));
        assert!(find(&conds, PROGRESSING).is_none());
    }
}
