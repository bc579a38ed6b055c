//! Restore drills (`spec.drill`): the newest backup restored in a run-once pod and compared
//! with what the operator recorded when it took it.
//!
//! Stages: [`plan`] decides (pure: nothing, start, or follow the running drill), [`pod`]
//! builds the drill pod (pure), [`verdict`] reads a finished pod (pure), and this module
//! applies: it records the drill as `Running` with its pod's name before it creates the pod
//! (a restarted operator finds the pod by that name, or makes it again), and records the
//! verdict (with the end of the failing step's log) before it deletes the pod, failed or not: a
//! drill pod holds a decrypted copy of the backup, the restored data and the mounted identity,
//! none of which may outlive the drill. Its status fields (`lastDrill`, `lastSuccessfulDrill`, the `Drilled` condition) are
//! applied under a field manager of their own, so a backup run finishing at the same time
//! never overwrites them with the copy it started from.

pub mod plan;
pub mod pod;
#[cfg(test)]
mod reconcile_tests;
pub mod verdict;

use std::time::Duration;

use chrono::{DateTime, Utc};
use etcd_api::condition::{self, Condition};
use etcd_api::{DrillRecord, DrillResult, EtcdBackup, EtcdBackupStatus};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};

use crate::context::{Context, Error};
use crate::metrics::{ObjectLabels, object_labels};
use crate::status::{chrono_time, time};
use crate::validate::{BackupPlan, DrillPlan, DrillWhen};
use plan::Next;
use pod::CannotDrill;
use verdict::Verdict;

/// Field manager of the drill's status fields.
pub const MANAGER: &str = "etcd-backup-operator-drill";
/// The condition: True after a successful drill, False after a failed one.
pub use crate::status::DRILLED as CONDITION;
/// How often a running drill's pod is looked at.
const FOLLOW_EVERY: Duration = Duration::from_secs(10);
/// Beyond the pod's own deadline (counted by the kubelet from the pod's start), time for it to
/// be scheduled and report.
const DEADLINE_GRACE: Duration = Duration::from_secs(120);

/// Runs the drill side of `backup`; returns when to look again (`None`: on a change).
pub async fn reconcile(
    backup: &EtcdBackup,
    plan: &BackupPlan,
    ctx: &Context,
    now: DateTime<Utc>,
) -> Result<Option<Duration>, Error> {
    let prev = backup.status.clone().unwrap_or_default();
    let labels = object_labels(backup);
    observe(ctx, &labels, plan, &prev, now);
    let pods: Api<Pod> =
        Api::namespaced(ctx.client.clone(), &backup.namespace().unwrap_or_default());
    let Some(drill) = &plan.drill else {
        // spec.drill removed while a drill ran: its pod goes, and the record says so.
        if let Some(running) = prev
            .last_drill
            .as_ref()
            .filter(|d| d.result == DrillResult::Running)
        {
            delete_drill_pods(&pods, backup).await?;
            let verdict = failed("Cancelled", "spec.drill was removed while the drill ran");
            finish(backup, &prev, running.clone(), verdict, ctx, now).await?;
        } else if prev.last_drill.is_some() {
            // No drill pod outlives spec.drill (one left by an operator stopped between a
            // verdict and the pod's deletion, or by an older version that kept failed ones).
            delete_drill_pods(&pods, backup).await?;
        }
        return Ok(None);
    };
    let created = backup
        .meta()
        .creation_timestamp
        .as_ref()
        .map(chrono_time)
        .unwrap_or(now);
    match plan::next(drill, &prev, created, now) {
        Next::Idle(at) => Ok(at.map(|at| (at - now).to_std().unwrap_or_default())),
        Next::Start => start(backup, drill, &prev, &pods, ctx, now).await,
        Next::Watch(running) => follow(backup, drill, &prev, *running, &pods, ctx, now).await,
    }
}

/// Records the drill of the newest backup as running, then creates its pod.
async fn start(
    backup: &EtcdBackup,
    drill: &DrillPlan,
    prev: &EtcdBackupStatus,
    pods: &Api<Pod>,
    ctx: &Context,
    now: DateTime<Utc>,
) -> Result<Option<Duration>, Error> {
    let Some(newest) = &prev.last_backup else {
        return Ok(None);
    };
    let name = pod::pod_name(backup, now.timestamp());
    let running = DrillRecord {
        object_key: newest.object_key.clone(),
        backup_number: newest.number,
        result: DrillResult::Running,
        pod: Some(name.clone()),
        etcd_version: newest.etcd_version.clone(),
        start_time: Some(time(now)),
        ..Default::default()
    };
    let drill_pod = match build_pod(backup, drill, prev, &name, ctx) {
        Ok(p) => p,
        Err(e) => return cannot_drill(backup, prev, running, e, ctx, now).await,
    };
    // A pod of an earlier drill left behind (an operator stopped before deleting it).
    delete_drill_pods(pods, backup).await?;
    apply(
        backup,
        prev,
        running,
        prev.last_successful_drill.clone(),
        None,
    )
    .await_on(ctx)
    .await?;
    create(pods, &drill_pod).await?;
    tracing::info!(namespace = %backup.namespace().unwrap_or_default(), name = %backup.name_any(), object = %newest.object_key, pod = %name, "restore drill started");
    Ok(Some(FOLLOW_EVERY))
}

fn build_pod(
    backup: &EtcdBackup,
    drill: &DrillPlan,
    prev: &EtcdBackupStatus,
    name: &str,
    ctx: &Context,
) -> Result<Pod, CannotDrill> {
    let newest = prev
        .last_backup
        .as_ref()
        .ok_or(CannotDrill::NothingRecorded)?;
    // The pod reads with the EtcdBackup's own keys only: it never gets the node's identity
    // (instance metadata), nor the operator's (it has no service account token).
    let source = fetch_pod::source::newest_backup(backup, drill.spec.identity_secret.clone())?;
    pod::drill_pod(
        backup,
        &drill.spec,
        newest,
        &source,
        &ctx.backup_image,
        name,
        drill.timeout.as_secs() as i64,
    )
}

/// Follows the running drill's pod: records its verdict, or its end by the deadline, or makes
/// the pod again if it was never made (the operator stopped between the record and the create).
async fn follow(
    backup: &EtcdBackup,
    drill: &DrillPlan,
    prev: &EtcdBackupStatus,
    running: DrillRecord,
    pods: &Api<Pod>,
    ctx: &Context,
    now: DateTime<Utc>,
) -> Result<Option<Duration>, Error> {
    let name = running.pod.clone().unwrap_or_default();
    let started = running.start_time.as_ref().map(chrono_time).unwrap_or(now);
    let deadline = started + drill.timeout + DEADLINE_GRACE;
    let late = now > deadline;
    match pods.get_opt(&name).await? {
        Some(found) => match verdict::read(&found) {
            Some(verdict) => {
                // The verdict carries the failing step's words; the pod and its decrypted
                // data go once it is recorded.
                finish(backup, prev, running, verdict, ctx, now).await?;
                delete(pods, &name).await?;
                Ok(None)
            }
            None if late => {
                let verdict = failed(
                    "TimedOut",
                    &format!(
                        "the drill pod {name} did not finish within {} s (drill.timeoutInSecond)",
                        drill.timeout.as_secs()
                    ),
                );
                finish(backup, prev, running, verdict, ctx, now).await?;
                delete(pods, &name).await?;
                Ok(None)
            }
            None => Ok(Some(FOLLOW_EVERY)),
        },
        None if late => {
            let verdict = failed("TimedOut", &format!("the drill pod {name} never ran"));
            finish(backup, prev, running, verdict, ctx, now).await?;
            Ok(None)
        }
        None => {
            let newest = prev.last_backup.as_ref().map(|b| b.object_key.as_str());
            if newest != Some(running.object_key.as_str()) {
                // A newer backup replaced the record the pod would be built from.
                let verdict = failed(
                    "PodLost",
                    "the drill pod is gone and a newer backup was taken meanwhile; the next drill proves the newer one",
                );
                finish(backup, prev, running, verdict, ctx, now).await?;
                return Ok(None);
            }
            match build_pod(backup, drill, prev, &name, ctx) {
                Ok(drill_pod) => {
                    create(pods, &drill_pod).await?;
                    Ok(Some(FOLLOW_EVERY))
                }
                Err(e) => cannot_drill(backup, prev, running, e, ctx, now).await,
            }
        }
    }
}

/// Records a drill that could not even be set up (nothing recorded to compare with, no way
/// to reach the backup) as failed.
async fn cannot_drill(
    backup: &EtcdBackup,
    prev: &EtcdBackupStatus,
    running: DrillRecord,
    why: CannotDrill,
    ctx: &Context,
    now: DateTime<Utc>,
) -> Result<Option<Duration>, Error> {
    let verdict = failed(why.reason(), &why.to_string());
    finish(backup, prev, running, verdict, ctx, now).await?;
    Ok(None)
}

fn failed(reason: &str, message: &str) -> Verdict {
    Verdict {
        result: DrillResult::Failed,
        reason: reason.into(),
        message: message.into(),
        etcd_version: None,
        revision: None,
        key_count: None,
    }
}

/// Records `verdict` for the drill `running`, with its event and metrics.
async fn finish(
    backup: &EtcdBackup,
    prev: &EtcdBackupStatus,
    running: DrillRecord,
    verdict: Verdict,
    ctx: &Context,
    now: DateTime<Utc>,
) -> Result<(), Error> {
    let started = running.start_time.as_ref().map(chrono_time).unwrap_or(now);
    let record = DrillRecord {
        result: verdict.result,
        reason: Some(verdict.reason.clone()),
        message: Some(verdict.message.clone()),
        etcd_version: verdict
            .etcd_version
            .clone()
            .or(running.etcd_version.clone()),
        etcd_revision: verdict.revision,
        key_count: verdict.key_count,
        completion_time: Some(time(now)),
        duration_seconds: Some((now - started).num_milliseconds() as f64 / 1000.0),
        ..running
    };
    let succeeded = record.result == DrillResult::Succeeded;
    let last_successful = if succeeded {
        Some(record.clone())
    } else {
        prev.last_successful_drill.clone()
    };
    let condition = condition::new(
        CONDITION,
        succeeded,
        &verdict.reason,
        format!("{}: {}", record.object_key, verdict.message),
        backup.meta().generation,
        time(now),
    );
    apply(
        backup,
        prev,
        record.clone(),
        last_successful,
        Some(condition),
    )
    .await_on(ctx)
    .await?;
    let labels = object_labels(backup);
    if succeeded {
        ctx.metrics
            .last_drill_success
            .get_or_create(&labels)
            .set(now.timestamp() as f64);
    } else {
        ctx.metrics.drill_failed(&labels, &verdict.reason);
        ctx.metrics
            .last_drill_failure
            .get_or_create(&labels)
            .set(now.timestamp() as f64);
    }
    tracing::info!(namespace = %labels.namespace, name = %labels.name, object = %record.object_key, reason = %verdict.reason, "restore drill finished");
    let event = crate::events::drill_finished(
        succeeded,
        &record.object_key,
        &verdict.reason,
        &verdict.message,
    );
    crate::context::publish(ctx, &event, &backup.object_ref(&())).await;
    Ok(())
}

/// The drill side's status fields, applied under [`MANAGER`].
struct DrillStatus<'a> {
    backup: &'a EtcdBackup,
    body: serde_json::Value,
}

fn apply<'a>(
    backup: &'a EtcdBackup,
    prev: &EtcdBackupStatus,
    last: DrillRecord,
    last_successful: Option<DrillRecord>,
    condition: Option<Condition>,
) -> DrillStatus<'a> {
    // The condition as it stands, unless this write changes it (its transition time moves
    // only when its status does).
    let mut conditions = prev.conditions.clone();
    if let Some(new) = condition {
        condition::set(&mut conditions, new);
    }
    let drilled: Vec<Condition> = conditions
        .into_iter()
        .filter(|c| c.type_ == CONDITION)
        .collect();
    let fields = DrillFields {
        last_drill: last,
        last_successful_drill: last_successful,
        conditions: drilled,
    };
    DrillStatus {
        backup,
        body: operator_runtime::status_apply::body::<EtcdBackup, _>(&fields),
    }
}

/// The status fields a drill owns, under its own field manager, and nothing else: a drill's
/// apply never touches the backup's own fields (`EtcdBackupStatus` would claim `succeeded`).
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct DrillFields {
    last_drill: DrillRecord,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_successful_drill: Option<DrillRecord>,
    conditions: Vec<Condition>,
}

impl DrillStatus<'_> {
    async fn await_on(self, ctx: &Context) -> Result<(), Error> {
        let api: Api<EtcdBackup> = Api::namespaced(
            ctx.client.clone(),
            &self.backup.namespace().unwrap_or_default(),
        );
        api.patch_status(
            &self.backup.name_any(),
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(self.body),
        )
        .await?;
        Ok(())
    }
}

async fn create(pods: &Api<Pod>, drill_pod: &Pod) -> Result<(), Error> {
    match pods.create(&PostParams::default(), drill_pod).await {
        Ok(_) => Ok(()),
        // Made before the operator stopped: the same drill.
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn delete(pods: &Api<Pod>, name: &str) -> Result<(), Error> {
    match pods.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Deletes this EtcdBackup's drill pods.
async fn delete_drill_pods(pods: &Api<Pod>, backup: &EtcdBackup) -> Result<(), Error> {
    let found = pods
        .list(&ListParams::default().labels(&pod::label_selector(backup)))
        .await?;
    for p in found.items {
        delete(pods, &p.name_any()).await?;
    }
    Ok(())
}

/// The drill's period and its last success as status records it, so the "not drilled" alert
/// holds across an operator restart.
fn observe(
    ctx: &Context,
    labels: &ObjectLabels,
    plan: &BackupPlan,
    prev: &EtcdBackupStatus,
    now: DateTime<Utc>,
) {
    let Some(drill) = &plan.drill else {
        ctx.metrics.drill_interval.remove(labels);
        return;
    };
    let period = match &drill.when {
        DrillWhen::EveryBackups(n) => plan
            .trigger
            .period(now)
            .map(|p| p.as_secs_f64() * *n as f64),
        DrillWhen::Cron(trigger) => trigger.period(now).map(|p| p.as_secs_f64()),
    };
    if let Some(period) = period {
        ctx.metrics.drill_interval.get_or_create(labels).set(period);
    }
    let ended = |d: Option<&DrillRecord>| {
        d.and_then(|d| d.completion_time.as_ref())
            .map(|t| chrono_time(t).timestamp() as f64)
    };
    let failed = prev
        .last_drill
        .as_ref()
        .filter(|d| d.result == DrillResult::Failed);
    for (family, recorded) in [
        (
            &ctx.metrics.last_drill_success,
            ended(prev.last_successful_drill.as_ref()),
        ),
        (&ctx.metrics.last_drill_failure, ended(failed)),
    ] {
        if let Some(recorded) = recorded {
            let gauge = family.get_or_create(labels);
            if gauge.get() < recorded {
                gauge.set(recorded);
            }
        }
    }
}
