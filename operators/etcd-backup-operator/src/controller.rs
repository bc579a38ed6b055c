//! The EtcdBackup controller: reconcile = dereference the object, validate and build a plan,
//! apply the finalizer, decide whether a backup is due, and update status. Backups run in
//! tasks of their own (bounded by [`Runs`]) and report through status and events when done;
//! the next run is driven by requeue.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use etcd_api::{BackupFailure, DeletionPolicy, EtcdBackup, EtcdBackupStatus};
use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use kube::api::{Patch, PatchParams};
use kube::core::DeserializeGuard;
use kube::core::error_boundary::InvalidObject;
use kube::runtime::controller::Action;
use kube::runtime::events::Event;
use kube::{Api, Resource, ResourceExt};

use crate::context::{Context, Error, MANAGER, publish};
use crate::events::{self, backups_kept};
use crate::execute::{self, Outcome};
use crate::finalizer::{finalize, has_finalizer, set_finalizer};
use crate::in_flight::RunGuard;
use crate::metrics::{InFlight, Metrics, ObjectLabels, ResultLabels};
use crate::schedule::{self, Due, History};
use crate::validate::{self, BackupPlan, InvalidSpec};
use crate::{drill, local, secrets, status};
use operator_runtime::reconcile_errors;

/// Requeue while a run is in flight; its completion triggers a reconcile anyway.
const IN_FLIGHT_RECHECK: Duration = Duration::from_secs(300);
const STALE_CACHE_RECHECK: Duration = Duration::from_secs(5);
const RESULT_WRITE_ATTEMPTS: u32 = 3;
/// Attempts of one run when they fail for a cause that may pass ([`execute::RunError::is_transient`]),
/// as a Job's `backoffLimit` would retry: the pauses are 5, 10 and 20 s by default.
pub const RUN_ATTEMPTS: u32 = 4;
/// A failed drill step is tried again after this.
const DRILL_RETRY: Duration = Duration::from_secs(30);
/// `lastFailure.reason` of a run interrupted twice.
const INTERRUPTED: &str = "Interrupted";

pub async fn reconcile(
    obj: Arc<DeserializeGuard<EtcdBackup>>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let result = match &obj.0 {
        Ok(backup) => reconcile_backup(backup, &ctx).await,
        Err(invalid) => report_invalid_object(invalid, &ctx).await,
    };
    if result.is_ok() {
        ctx.backoff.forget(&obj.uid().unwrap_or_default());
    }
    result
}

/// Retries a failed reconcile after a delay that grows with each failure of that object
/// (kube's default backoff: 0.8 s doubling to 30 s), and starts over after a success.
pub fn error_policy(
    obj: Arc<DeserializeGuard<EtcdBackup>>,
    error: &Error,
    ctx: Arc<Context>,
) -> Action {
    reconcile_errors::retry(&*obj, error, &ctx.backoff, &ctx.metrics.reconcile_errors)
}

async fn reconcile_backup(backup: &EtcdBackup, ctx: &Arc<Context>) -> Result<Action, Error> {
    let api = api_for(backup, ctx);
    let uid = backup.uid().unwrap_or_default();
    let prev = backup.status.clone().unwrap_or_default();
    let now = truncate((ctx.clock)());

    let plan = validate::build(&backup.spec);
    if backup.meta().deletion_timestamp.is_some() {
        ctx.runs.cancel(&uid);
        // Its open segment is stored before the Delete policy lists what to delete.
        ctx.archives.stop_and_wait(&uid).await;
        return finalize(backup, plan.as_ref(), ctx).await;
    }
    let plan = match plan {
        Ok(plan) => plan,
        Err(e) => {
            ctx.runs.cancel(&uid);
            ctx.archives.stop(&uid);
            if let Err(error) = crate::archive_status::invalid(backup, ctx, now).await {
                tracing::warn!(name = %backup.name_any(), %error, "could not say that the archive stopped");
            }
            return report_invalid_spec(backup, &prev, &e, &api, ctx, now).await;
        }
    };

    observe_schedule(&ctx.metrics, backup, &prev, &plan, now);

    let wants_finalizer = plan.deletion_policy == DeletionPolicy::Delete;
    if wants_finalizer != has_finalizer(backup.meta()) {
        set_finalizer(backup.meta(), wants_finalizer, &ctx.client).await?;
        // The patch comes back as a watch event, which reconciles again.
        return Ok(Action::await_change());
    }

    // Drills follow their own pods, whether or not a backup runs. A drill step that fails (the
    // API server refusing pods, say, to an operator whose RBAC predates drills) is retried on
    // its own and never holds the backups up.
    let drill_wait = match drill::reconcile(backup, &plan, ctx, now).await {
        Ok(wait) => wait,
        Err(e) => {
            tracing::warn!(name = %backup.name_any(), error = %e, "restore drill step failed; retried");
            ctx.metrics.reconcile_errors.inc("DrillStepFailed");
            let event = events::drill_step_failed(&e);
            publish(ctx, &event, &backup.object_ref(&())).await;
            Some(DRILL_RETRY)
        }
    };
    // Like drills, the archive's status never holds the backups up.
    let archive_wait = match crate::archive_status::reconcile(backup, &plan, ctx, now).await {
        Ok(wait) => wait,
        Err(e) => {
            tracing::warn!(name = %backup.name_any(), error = %e, "archive status step failed; retried");
            ctx.metrics.reconcile_errors.inc("ArchiveStepFailed");
            Some(crate::archive_status::STATUS_EVERY)
        }
    };
    let backup_wait = schedule_backup(backup, &prev, plan, &api, ctx, now).await?;
    Ok(
        match [drill_wait, archive_wait, backup_wait]
            .into_iter()
            .flatten()
            .min()
        {
            Some(wait) => Action::requeue(wait),
            None => Action::await_change(),
        },
    )
}

/// The backup side: records a finished run, or starts the one due; returns when to look
/// again (`None`: on a change).
async fn schedule_backup(
    backup: &EtcdBackup,
    prev: &EtcdBackupStatus,
    plan: BackupPlan,
    api: &Api<EtcdBackup>,
    ctx: &Arc<Context>,
    now: DateTime<Utc>,
) -> Result<Option<Duration>, Error> {
    let uid = backup.uid().unwrap_or_default();
    let generation = backup.meta().generation;
    if ctx.runs.is_running(&uid) {
        return Ok(Some(IN_FLIGHT_RECHECK));
    }
    if let Some(result) = ctx.runs.unwritten(&uid) {
        // A run's result the API server refused then: write it now, and the schedule goes on
        // from it (a failed write must never leave the object looking busy for good).
        apply_status(api, &backup.name_any(), &result).await?;
        ctx.runs.written(&uid);
        tracing::info!(name = %backup.name_any(), "recorded the result of an earlier run");
        return Ok(Some(STALE_CACHE_RECHECK));
    }
    let last_run = prev.last_schedule_time.as_ref().map(status::chrono_time);
    let progressing = status::prev_run_interrupted(prev);
    if progressing && last_run.is_some_and(|t| ctx.runs.finished(&uid, t)) {
        // The cache has not caught up with the result this process wrote; look again soon.
        return Ok(Some(STALE_CACHE_RECHECK));
    }
    if progressing && status::retry_interrupted(prev) {
        // The retry of an interrupted run was interrupted too (the operator keeps stopping
        // mid-backup): record a failure rather than retry on every restart.
        return give_up_interrupted(backup, prev, &plan, last_run, api, ctx, now).await;
    }
    let history = History {
        last_run,
        one_shot_finished: status::one_shot_finished(prev),
        // Progressing=True with no run in this process: the operator died mid-backup.
        interrupted: progressing,
    };
    let created = backup
        .meta()
        .creation_timestamp
        .as_ref()
        .map(status::chrono_time)
        .unwrap_or(now);
    match schedule::due(&plan.trigger, history, created, now) {
        Due::Never => {
            apply_if_changed(api, backup, prev, status::scheduled(prev, generation, None)).await?;
            Ok(None)
        }
        Due::At(at) => {
            let next = status::scheduled(prev, generation, Some(at));
            apply_if_changed(api, backup, prev, next).await?;
            Ok(Some((at - now).to_std().unwrap_or_default()))
        }
        Due::Now => {
            let Some(guard) = ctx.runs.try_start(&uid) else {
                return Ok(Some(IN_FLIGHT_RECHECK));
            };
            // Recorded before any data moves, so a restart knows a run was under way.
            let running = status::running(prev, generation, now);
            apply_status(api, &backup.name_any(), &running).await?;
            tokio::spawn(run(ctx.clone(), backup.clone(), plan, running, now, guard));
            Ok(Some(IN_FLIGHT_RECHECK))
        }
    }
}

/// Records the second interrupted run as failed, with a Warning; a scheduled backup goes on
/// with its next run, a one-shot has its (failed) result.
async fn give_up_interrupted(
    backup: &EtcdBackup,
    prev: &EtcdBackupStatus,
    plan: &BackupPlan,
    last_run: Option<DateTime<Utc>>,
    api: &Api<EtcdBackup>,
    ctx: &Context,
    now: DateTime<Utc>,
) -> Result<Option<Duration>, Error> {
    let message = "the backup was interrupted twice (the operator stopped during it and during \
                   its retry); it is not retried again";
    let next = last_run.and_then(|t| schedule::next_after_run(&plan.trigger, t));
    let failed = status::failed(
        prev,
        backup.meta().generation,
        INTERRUPTED,
        message,
        next,
        now,
    );
    apply_status(api, &backup.name_any(), &failed).await?;
    let event = events::backup_failed(INTERRUPTED, message);
    publish(ctx, &event, &backup.object_ref(&())).await;
    Ok(Some(STALE_CACHE_RECHECK))
}

/// One backup, in its own task: waits for a global slot, reads the Secrets, snapshots, prunes,
/// then records the result. A cancelled run (object deleted, shutdown) writes nothing: the
/// object is gone, or the next start sees the run as interrupted and retries it.
async fn run(
    ctx: Arc<Context>,
    backup: EtcdBackup,
    plan: BackupPlan,
    prev: EtcdBackupStatus,
    started: DateTime<Utc>,
    guard: RunGuard,
) {
    let name = backup.name_any();
    let namespace = backup.namespace().unwrap_or_default();
    let uid = backup.uid().unwrap_or_default();
    let token = guard.token.clone();
    let drilled = prev
        .last_successful_drill
        .as_ref()
        .map(|d| d.object_key.clone());
    let mut retried: Vec<BackupFailure> = Vec::new();
    let work = async {
        let _slot = ctx.runs.slot().await;
        let _in_flight = InFlight::new(&ctx.metrics.running);
        let secrets_api: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
        let mut attempt = 1;
        let run_started = std::time::Instant::now();
        let run_deadline = plan.deadline;
        loop {
            // `timeoutInSecond` bounds the whole run, retries included.
            let mut this_attempt = plan.clone();
            this_attempt.deadline = plan
                .deadline
                .map(|d| d.saturating_sub(run_started.elapsed()));
            let plan = &this_attempt;
            let result = async {
                let location = execute::location(plan, &namespace, ctx.local_volume.as_ref())?;
                let resolved =
                    secrets::resolve(&secrets_api, plan, ctx.allow_ambient_credentials).await?;
                let snapshot_lock = ctx.runs.snapshot_lock(&uid);
                let _one_snapshot_at_a_time = snapshot_lock.lock().await;
                execute::run_backup(plan, &location, resolved, &uid, drilled.as_deref()).await
            }
            .await;
            let pause = ctx.run_retry_backoff * 2u32.pow(attempt - 1);
            let time_left = run_deadline.is_none_or(|d| run_started.elapsed() + pause < d);
            match result {
                Err(e) if e.is_transient() && attempt < RUN_ATTEMPTS && time_left => {
                    tracing::warn!(%namespace, %name, attempt, reason = e.reason(), error = %e, ?pause, "backup attempt failed; trying again");
                    retried.push(BackupFailure {
                        time: Some(status::time(truncate((ctx.clock)()))),
                        reason: e.reason().to_string(),
                        message: Some(e.to_string()),
                    });
                    tokio::time::sleep(pause).await;
                    attempt += 1;
                }
                result => return result,
            }
        }
    };
    let result = tokio::select! {
        result = work => result,
        () = token.cancelled() => {
            tracing::info!(%namespace, %name, "backup cancelled; the partial upload is aborted");
            return;
        }
    };
    let now = truncate((ctx.clock)());
    let next = schedule::next_after_run(&plan.trigger, started);
    let elapsed = (now - started).to_std().unwrap_or_default().as_secs_f64();
    let labels = ObjectLabels {
        namespace: namespace.clone(),
        name: name.clone(),
    };
    let (new_status, event) = match &result {
        Ok(outcome) => {
            record_success(&ctx.metrics, &labels, outcome);
            tracing::info!(%namespace, %name, object = %outcome.report.url, bytes = outcome.report.manifest.stored_bytes, "backup succeeded");
            (
                status::succeeded(
                    &prev,
                    backup.meta().generation,
                    outcome,
                    local::record(&outcome.report.url, ctx.local_volume.as_ref()),
                    next,
                    now,
                ),
                success_event(outcome),
            )
        }
        Err(e) => {
            ctx.metrics
                .last_failure
                .get_or_create(&labels)
                .set(now.timestamp_millis() as f64 / 1000.0);
            ctx.metrics.failed(&labels, e.reason());
            ctx.metrics
                .duration
                .get_or_create(&ResultLabels {
                    result: "failure".into(),
                })
                .observe(elapsed);
            tracing::warn!(%namespace, %name, reason = e.reason(), error = %e, "backup failed");
            (
                status::failed(
                    &prev,
                    backup.meta().generation,
                    e.reason(),
                    &e.to_string(),
                    next,
                    now,
                ),
                events::backup_failed(e.reason(), &e.to_string()),
            )
        }
    };
    let mut new_status = new_status;
    new_status.last_run_retries = (!retried.is_empty()).then_some(retried);
    let api = api_for(&backup, &ctx);
    let written = record_result(&ctx, &api, &name, &new_status).await;
    // Whether or not the write went through, this run is over: the cached "running" status
    // must not read as an interrupted run, which would start a duplicate. A result the API
    // server refused is kept for a later reconcile to write.
    ctx.runs
        .mark_finished(&uid, started, (!written).then_some(new_status));
    drop(guard);
    publish(&ctx, &event, &backup.object_ref(&())).await;
    if let Ok(Outcome { pruned: Err(e), .. }) = &result {
        publish(&ctx, &events::prune_failed(e), &backup.object_ref(&())).await;
    }
}

/// Writes a run's result, retrying a few times; false if the API server kept refusing (the
/// caller keeps the result for a later reconcile).
async fn record_result(
    ctx: &Context,
    api: &Api<EtcdBackup>,
    name: &str,
    s: &EtcdBackupStatus,
) -> bool {
    for attempt in 1..=RESULT_WRITE_ATTEMPTS {
        match apply_status(api, name, s).await {
            Ok(()) => return true,
            Err(e) => {
                ctx.metrics.reconcile_errors.inc("ResultNotRecorded");
                tracing::warn!(%name, attempt, error = %e, "could not record the backup result");
                if attempt < RESULT_WRITE_ATTEMPTS {
                    tokio::time::sleep(ctx.result_write_backoff * attempt).await;
                }
            }
        }
    }
    false
}

/// The schedule's period, and the last success and failure recorded in status (so that the "no
/// backup for too long" and "the last backup failed" alerts hold across an operator restart,
/// before this process has run a backup).
fn observe_schedule(
    metrics: &Metrics,
    backup: &EtcdBackup,
    prev: &EtcdBackupStatus,
    plan: &BackupPlan,
    now: DateTime<Utc>,
) {
    let labels = ObjectLabels {
        namespace: backup.namespace().unwrap_or_default(),
        name: backup.name_any(),
    };
    metrics.touch(&labels);
    if let Some(period) = plan.trigger.period(now) {
        metrics
            .schedule_interval
            .get_or_create(&labels)
            .set(period.as_secs_f64());
    }
    let recorded_failure = prev.last_failure.as_ref().and_then(|f| f.time.as_ref());
    for (gauge, recorded) in [
        (&metrics.last_success, prev.last_success_date.as_ref()),
        (&metrics.last_failure, recorded_failure),
    ] {
        if let Some(recorded) = recorded.map(status::chrono_time) {
            let gauge = gauge.get_or_create(&labels);
            let recorded = recorded.timestamp_millis() as f64 / 1000.0;
            if gauge.get() < recorded {
                gauge.set(recorded);
            }
        }
    }
}

fn record_success(metrics: &Metrics, labels: &ObjectLabels, outcome: &Outcome) {
    metrics.touch(labels);
    let m = &outcome.report.manifest;
    metrics
        .last_success
        .get_or_create(labels)
        .set(m.completion_time.timestamp_millis() as f64 / 1000.0);
    metrics
        .last_size
        .get_or_create(labels)
        .set(i64::try_from(m.stored_bytes).unwrap_or(i64::MAX));
    metrics.bytes.inc_by(m.stored_bytes);
    metrics
        .duration
        .get_or_create(&ResultLabels {
            result: "success".into(),
        })
        .observe(m.duration_seconds);
    match &outcome.pruned {
        Ok(deleted) => {
            metrics.pruned.inc_by(deleted.len() as u64);
        }
        Err(_) => {
            metrics.prune_failures.inc();
        }
    }
}

fn success_event(outcome: &Outcome) -> Event {
    let m = &outcome.report.manifest;
    events::backup_succeeded(
        &outcome.report.url,
        m.stored_bytes,
        m.etcd_revision,
        &m.stored_checksum().to_string(),
        m.duration_seconds,
    )
}

async fn report_invalid_spec(
    backup: &EtcdBackup,
    prev: &EtcdBackupStatus,
    error: &InvalidSpec,
    api: &Api<EtcdBackup>,
    ctx: &Context,
    now: DateTime<Utc>,
) -> Result<Action, Error> {
    let generation = backup.meta().generation;
    let new = status::invalid(prev, generation, error.reason(), &error.to_string(), now);
    if !same_status(prev, &new) {
        apply_status(api, &backup.name_any(), &new).await?;
        let event = events::invalid_spec(error.reason(), error.to_string());
        publish(ctx, &event, &backup.object_ref(&())).await;
    }
    Ok(Action::await_change())
}

/// An object that does not even parse (e.g. an unknown `storageType` under a schemaless CRD):
/// coreos crashed; here it gets a condition and a Warning event.
async fn report_invalid_object(invalid: &InvalidObject, ctx: &Context) -> Result<Action, Error> {
    let meta = &invalid.metadata;
    let uid = meta.uid.clone().unwrap_or_default();
    let name = meta.name.clone().unwrap_or_default();
    let namespace = meta.namespace.clone().unwrap_or_default();
    let reference = ObjectReference {
        api_version: Some(etcd_api::API_VERSION.into()),
        kind: Some("EtcdBackup".into()),
        name: Some(name.clone()),
        namespace: Some(namespace.clone()),
        uid: Some(uid.clone()),
        ..Default::default()
    };
    if meta.deletion_timestamp.is_some() {
        if has_finalizer(meta) {
            publish(ctx, &backups_kept(&invalid.error.to_string()), &reference).await;
            set_finalizer(meta, false, &ctx.client).await?;
        }
        return Ok(Action::await_change());
    }
    {
        let mut seen = ctx
            .reported_invalid
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if seen.get(&uid) == Some(&meta.generation) {
            return Ok(Action::await_change());
        }
        seen.insert(uid.clone(), meta.generation);
    }
    let message = format!("the EtcdBackup cannot be read: {}", invalid.error);
    let now = truncate((ctx.clock)());
    let new = status::invalid(
        &Default::default(),
        meta.generation,
        "InvalidObject",
        &message,
        now,
    );
    let api: Api<EtcdBackup> = Api::namespaced(ctx.client.clone(), &namespace);
    apply_status(&api, &name, &new).await?;
    publish(ctx, &events::invalid_object(message), &reference).await;
    Ok(Action::await_change())
}

fn api_for(backup: &EtcdBackup, ctx: &Context) -> Api<EtcdBackup> {
    Api::namespaced(ctx.client.clone(), &backup.namespace().unwrap_or_default())
}

/// The reply is read through a `DeserializeGuard`, so writing the status of an object that
/// does not parse works too.
async fn apply_status(
    api: &Api<EtcdBackup>,
    name: &str,
    s: &EtcdBackupStatus,
) -> Result<(), Error> {
    let client = api.clone().into_client();
    let api: Api<DeserializeGuard<EtcdBackup>> = match api.namespace() {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    api.patch_status(
        name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(status::apply_body(s)),
    )
    .await?;
    Ok(())
}

async fn apply_if_changed(
    api: &Api<EtcdBackup>,
    backup: &EtcdBackup,
    prev: &EtcdBackupStatus,
    new: EtcdBackupStatus,
) -> Result<(), Error> {
    if !same_status(prev, &new) {
        apply_status(api, &backup.name_any(), &new).await?;
    }
    Ok(())
}

/// Compares as stored, so a write that changes nothing is skipped (and does not come back
/// as a watch event, which would loop).
fn same_status(a: &EtcdBackupStatus, b: &EtcdBackupStatus) -> bool {
    serde_json::to_value(a).ok() == serde_json::to_value(b).ok()
}

/// Status times have whole seconds (metav1.Time); computing with the same precision keeps
/// decisions stable across a status round trip.
fn truncate(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(t.timestamp(), 0).unwrap_or(t)
}
