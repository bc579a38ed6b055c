//! The archive side of a reconcile: starts or stops the EtcdBackup's archive
//! ([`crate::archive`]) and writes what it did into `status.continuous` and the `Archiving`
//! condition, under a field manager of its own (as the drill side does), so that neither the
//! backup side nor the drill side ever overwrites these fields with a stale copy.

use std::time::Duration;

use chrono::{DateTime, Utc};
use etcd_api::condition::{self, Condition};
use etcd_api::{
    ArchiveGap, ArchiveStatus, DEFAULT_SEGMENT_MAX_BYTES, DEFAULT_SEGMENT_SECONDS, EtcdBackup,
    EtcdBackupStatus,
};
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};

use crate::archive::{ArchiveState, Start};
use crate::context::{Context, Error, publish};
use crate::execute;
use crate::metrics::object_labels;
use crate::status::time;
use crate::validate::BackupPlan;

/// Field manager of the archive side's status fields.
pub const MANAGER: &str = "etcd-backup-operator-archive";
/// The condition the archive side owns.
pub use crate::status::ARCHIVING as CONDITION;
/// How often a running archive's progress is copied into the status besides the reconcile its
/// task asks for after each segment, gap or failure (a missed one is caught up here).
pub const STATUS_EVERY: Duration = Duration::from_secs(60);

/// Starts, keeps or stops the archive, and publishes its state. Returns when to look again.
pub async fn reconcile(
    backup: &EtcdBackup,
    plan: &BackupPlan,
    ctx: &Context,
    now: DateTime<Utc>,
) -> Result<Option<Duration>, Error> {
    let uid = backup.uid().unwrap_or_default();
    let prev = backup.status.clone().unwrap_or_default();
    let Some(continuous) = &backup.spec.continuous else {
        ctx.archives.stop(&uid);
        if prev.continuous.is_some() || condition::find(&prev.conditions, CONDITION).is_some() {
            apply(backup, None, Vec::new(), ctx).await?;
        }
        return Ok(None);
    };
    let namespace = backup.namespace().unwrap_or_default();
    let location = match execute::location(plan, &namespace, ctx.local_volume.as_ref()) {
        Ok(location) => location,
        Err(e) => {
            ctx.archives.stop(&uid);
            let status = ArchiveStatus {
                last_error: Some(e.to_string()),
                ..prev.continuous.clone().unwrap_or_default()
            };
            let condition = archiving_condition(&prev, &status, backup, now);
            if Some(&status) != prev.continuous.as_ref() {
                apply(backup, Some(&status), vec![condition], ctx).await?;
            }
            return Ok(Some(STATUS_EVERY));
        }
    };
    ctx.archives
        .ensure(backup, || Start {
            client: ctx.client.clone(),
            namespace,
            plan: plan.clone(),
            location,
            owner: uid.clone(),
            allow_ambient: ctx.allow_ambient_credentials,
            segment_seconds: Duration::from_secs(
                continuous
                    .segment_seconds
                    .unwrap_or(DEFAULT_SEGMENT_SECONDS)
                    .max(1) as u64,
            ),
            segment_max_bytes: continuous
                .segment_max_bytes
                .unwrap_or(DEFAULT_SEGMENT_MAX_BYTES)
                .max(1) as u64,
            snapshot_lock: ctx.runs.snapshot_lock(&uid),
        })
        .await;
    let Some(state) = ctx.archives.state(&uid) else {
        return Ok(Some(STATUS_EVERY));
    };
    // What this process wrote last is at least as new as the cached object's status.
    let base = ctx.archives.written(&uid).or(prev.continuous.clone());
    let status = next_status(base.as_ref(), &state);
    let condition = archiving_condition(&prev, &status, backup, now);
    let changed = Some(&status) != prev.continuous.as_ref()
        || condition::find(&prev.conditions, CONDITION).map(|c| (&c.status, &c.reason, &c.message))
            != Some((&condition.status, &condition.reason, &condition.message));
    if changed {
        apply(backup, Some(&status), vec![condition], ctx).await?;
    }
    ctx.archives.record_written(&uid, &status);
    let labels = object_labels(backup);
    if let Some(revision) = status.archived_through_revision {
        ctx.metrics
            .archived_revision
            .get_or_create(&labels)
            .set(revision);
    }
    // The series exists from the archive's start at 0, so that `increase()` sees its first
    // gap (a counter that appears with its first increment shows no increase).
    ctx.metrics
        .archive_gap_revisions
        .get_or_create(&labels)
        .inc_by(0);
    // Said once each, after the status holds them.
    for gap in &state.pending_gaps {
        let lost = (gap.resumed_after - gap.archived_through).max(0);
        ctx.metrics
            .archive_gap_revisions
            .get_or_create(&labels)
            .inc_by(lost as u64);
        let event = crate::events::archive_gap(gap.archived_through, gap.resumed_after);
        publish(ctx, &event, &backup.object_ref(&())).await;
    }
    ctx.archives
        .acknowledge_gaps(&uid, state.pending_gaps.len());
    Ok(Some(STATUS_EVERY))
}

/// `status.continuous` from the last one written and the running archive's state. The gap
/// count only grows: an operator restart starts the archive's own count again.
/// An invalid spec stops the archive; the condition says so (the backup side's status no
/// longer claims anything about the archive).
pub async fn invalid(backup: &EtcdBackup, ctx: &Context, now: DateTime<Utc>) -> Result<(), Error> {
    let prev = backup.status.clone().unwrap_or_default();
    if backup.spec.continuous.is_none() && condition::find(&prev.conditions, CONDITION).is_none() {
        return Ok(());
    }
    let stopped = condition::new(
        CONDITION,
        false,
        "InvalidSpec",
        "the archive of changes is stopped until the spec is valid",
        backup.meta().generation,
        time(now),
    );
    let mut conditions = prev.conditions.clone();
    if !condition::set(&mut conditions, stopped) {
        return Ok(());
    }
    let kept: Vec<Condition> = conditions
        .into_iter()
        .filter(|c| c.type_ == CONDITION)
        .collect();
    apply(backup, prev.continuous.as_ref(), kept, ctx).await
}

pub fn next_status(prev: Option<&ArchiveStatus>, state: &ArchiveState) -> ArchiveStatus {
    let prev = prev.cloned().unwrap_or_default();
    let last_gap = state.pending_gaps.last().map(|gap| ArchiveGap {
        archived_through: gap.archived_through,
        resumed_after: gap.resumed_after,
        time: time(gap.time),
    });
    ArchiveStatus {
        archived_through_revision: state.archived_through.or(prev.archived_through_revision),
        last_change_time: state
            .last_change_time
            .map(|t| time(truncate(t)))
            .or(prev.last_change_time),
        last_segment: state.last_segment.clone().or(prev.last_segment),
        gaps: prev.gaps + state.pending_gaps.len() as i64,
        last_gap: last_gap.or(prev.last_gap),
        last_error: state.last_error.clone(),
    }
}

fn truncate(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(t.timestamp(), 0).unwrap_or(t)
}

/// `Archiving`: True while the archive runs (its message says how far it is), False with the
/// reason it does not.
fn archiving_condition(
    prev: &EtcdBackupStatus,
    status: &ArchiveStatus,
    backup: &EtcdBackup,
    now: DateTime<Utc>,
) -> Condition {
    let generation = backup.meta().generation;
    let new = match (&status.last_error, status.archived_through_revision) {
        (Some(error), _) => condition::new(
            CONDITION,
            false,
            "ArchiveFailing",
            format!("the archive of changes is not running (retried): {error}"),
            generation,
            time(now),
        ),
        (None, Some(revision)) => condition::new(
            CONDITION,
            true,
            "Archiving",
            format!("every change through revision {revision} is stored"),
            generation,
            time(now),
        ),
        (None, None) => condition::new(
            CONDITION,
            false,
            "ArchiveStarting",
            "the archive of changes is starting",
            generation,
            time(now),
        ),
    };
    let mut conditions = prev.conditions.clone();
    condition::set(&mut conditions, new);
    conditions
        .into_iter()
        .find(|c| c.type_ == CONDITION)
        .expect("set above")
}

/// The archive side's fields, and nothing else.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ArchiveFields<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    continuous: Option<&'a ArchiveStatus>,
    conditions: Vec<Condition>,
}

async fn apply(
    backup: &EtcdBackup,
    status: Option<&ArchiveStatus>,
    conditions: Vec<Condition>,
    ctx: &Context,
) -> Result<(), Error> {
    let api: Api<EtcdBackup> =
        Api::namespaced(ctx.client.clone(), &backup.namespace().unwrap_or_default());
    let fields = ArchiveFields {
        continuous: status,
        conditions,
    };
    api.patch_status(
        &backup.name_any(),
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(operator_runtime::status_apply::body::<EtcdBackup, _>(
            &fields,
        )),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::Gap;

    fn gap(archived_through: i64, resumed_after: i64) -> Gap {
        Gap {
            archived_through,
            resumed_after,
            time: DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
        }
    }

    #[test]
    fn gaps_add_up_across_operator_restarts() {
        let before_restart = ArchiveStatus {
            archived_through_revision: Some(90),
            gaps: 2,
            ..ArchiveStatus::default()
        };
        // After a restart, the new task found one more gap.
        let state = ArchiveState {
            archived_through: Some(400),
            pending_gaps: vec![gap(95, 380)],
            ..ArchiveState::default()
        };
        let next = next_status(Some(&before_restart), &state);
        assert_eq!(next.gaps, 3);
        assert_eq!(next.archived_through_revision, Some(400));
        assert_eq!(next.last_gap.unwrap().resumed_after, 380);
    }

    #[test]
    fn a_task_that_has_not_stored_anything_yet_keeps_what_the_status_said() {
        let written = ArchiveStatus {
            archived_through_revision: Some(90),
            last_segment: Some("b.changes/c/00000000000000000080".into()),
            ..ArchiveStatus::default()
        };
        let next = next_status(Some(&written), &ArchiveState::default());
        assert_eq!(next.archived_through_revision, Some(90));
        assert_eq!(next.last_segment, written.last_segment);
    }

    #[test]
    fn a_failing_archive_says_why() {
        let state = ArchiveState {
            last_error: Some("cannot reach etcd".into()),
            ..ArchiveState::default()
        };
        let next = next_status(None, &state);
        assert_eq!(next.last_error.as_deref(), Some("cannot reach etcd"));
    }
}
