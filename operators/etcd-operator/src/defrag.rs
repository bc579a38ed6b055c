//! Scheduled defragmentation (`spec.defragmentation`), one member at a time: a round starts on
//! the cron schedule (or at once on a `NOSPACE` alarm), and each reconcile takes one step of it
//! ([`etcd_cluster::defrag::next_step`], pure). The round lives in `status.defragmentation`:
//! the member about to be defragmented is recorded there before the call, and the call's answer
//! right after it (defragmented, or failed, which stops the round). A member still recorded
//! when the next reconcile comes had its answer lost (the call outlived the member timeout, or
//! the operator restarted mid-call): it counts as done only once it serves reads again (a
//! defragmenting member may answer `Status`, but serves no read), and the round stops when it
//! does not in time. While a round runs, every member is asked for a serializable read
//! ([`probe_reads`]), so no member starts while another may still be defragmenting. Rounds run
//! only while membership has converged and no upgrade is under way (a restore pauses the
//! cluster, and a paused cluster is not reconciled at all). After a round
//! that leaves every member's file below its quota, a `NOSPACE` alarm is disarmed.

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use croner::Cron;
use etcd_api::{DefragMember, DefragRound, DefragRoundResult, DefragStatus, EtcdCluster};
use etcd_client::{AlarmAction, AlarmOptions, AlarmType};
use etcd_cluster::defrag::{
    DEFRAGMENTED, DefragStep, FAILED, MemberDb, ROUND_FAILED, RoundState, Thresholds, UNCONFIRMED,
    next_step,
};
use kube::{Resource, ResourceExt};

use crate::context::{Context, Error, event};
use crate::metrics::MemberLabels;
use crate::observe::{self, Database, EtcdView, MemberPod};
use crate::status_writer::StatusWriter;
use etcd_members::access::Access;

/// etcd's default backend quota (`--quota-backend-bytes`), for members that do not report theirs.
pub const DEFAULT_QUOTA: i64 = 2 * 1024 * 1024 * 1024;
/// A `NOSPACE` alarm starts a round at once, but not again sooner than this after the last.
const NOSPACE_RETRY: chrono::TimeDelta = chrono::TimeDelta::minutes(10);

/// What a reconcile did to the round: the round as it leaves it (recorded through the status
/// writer when it changed), and whether to look again soon.
pub struct Outcome {
    status: Option<DefragStatus>,
    pub busy: bool,
    pub result: Result<(), Error>,
}

/// One step of the defragmentation of `cluster`, and its record in status. `may_run`:
/// membership has converged and no upgrade is under way.
#[allow(clippy::too_many_arguments)]
pub async fn reconcile(
    ctx: &Context,
    writer: &StatusWriter,
    cluster: &EtcdCluster,
    access: &Access,
    pods: &[MemberPod],
    view: &EtcdView,
    may_run: bool,
    now: DateTime<Utc>,
) -> Outcome {
    let mut outcome = step_round(ctx, writer, cluster, access, pods, view, may_run, now).await;
    // Written when it changed since the last write (the round's record before a member, or
    // the status as read).
    if outcome.status != writer.defragmentation()
        && let Some(status) = &outcome.status
        && let Err(e) = writer.record_defragmentation(status.clone()).await
    {
        outcome.result = outcome.result.and(Err(e));
    }
    outcome
}

#[allow(clippy::too_many_arguments)]
async fn step_round(
    ctx: &Context,
    writer: &StatusWriter,
    cluster: &EtcdCluster,
    access: &Access,
    pods: &[MemberPod],
    view: &EtcdView,
    may_run: bool,
    now: DateTime<Utc>,
) -> Outcome {
    observe_metrics(ctx, cluster, view);
    let previous = cluster
        .status
        .as_ref()
        .and_then(|s| s.defragmentation.clone());
    let Some(spec) = cluster.spec.defragmentation.clone() else {
        // Turned off: a round under way ends here (a member being defragmented finishes on
        // its own); the last round stays on record.
        let status = previous.map(|mut p| {
            p.round = None;
            p
        });
        return Outcome {
            status,
            busy: false,
            result: Ok(()),
        };
    };
    let mut status = previous.unwrap_or_default();
    let nospace = has_alarm(view, "NOSPACE");
    let thresholds = Thresholds {
        min_free_percent: i64::from(spec.min_free_percent()),
        min_free_bytes: spec.min_free_bytes(),
    };
    let mut members = member_dbs(view, configured_quota(cluster));
    // Out of space with room to return (compaction freed pages): at once, again if need be.
    let room = nospace && members.iter().any(|m| thresholds.worth_it(m));
    if status.round.is_none() {
        match due(cluster, &spec.schedule, &status, nospace, room, now) {
            Some(trigger) => {
                status.round = Some(DefragRound {
                    started: now.to_rfc3339(),
                    trigger: trigger.into(),
                    ..Default::default()
                });
                let note = format!("defragmentation round started ({trigger})");
                event(ctx, cluster, "DefragmentationStarted", &note).await;
            }
            None => {
                return Outcome {
                    status: Some(status),
                    busy: false,
                    result: Ok(()),
                };
            }
        }
    }
    if !may_run {
        return Outcome {
            status: Some(status),
            busy: true,
            result: Ok(()),
        };
    }
    // Only while a round runs: whether each member's database serves (is not being
    // defragmented).
    let serving = probe_reads(access, pods).await;
    for member in &mut members {
        member.serves_reads = serving.get(&member.name).copied().unwrap_or(false);
    }
    let round = status.round.clone().unwrap_or_default();
    let state = RoundState {
        done: round.done.iter().map(|m| m.member.clone()).collect(),
        current: round.current.clone(),
        current_for: since(round.current_started.as_deref(), now),
    };
    let timeout = Duration::from_secs(spec.member_timeout_seconds().unsigned_abs());
    let size = cluster.spec.size as usize;
    let step = next_step(&state, &members, size, thresholds, timeout);
    tracing::debug!(cluster = %cluster.name_any(), ?step, "defragmentation");
    let db = |name: &str| view.databases.get(name).copied().unwrap_or_default();
    let mut round = round;
    // A member's defragmentation failed: the round ends with it.
    let mut call_failed = false;
    let result = match &step {
        DefragStep::Wait(_) => Ok(()),
        DefragStep::Finished { member } => {
            // Its call's answer was lost: it serves reads again, so it is no longer blocked,
            // but whether the defragmentation succeeded is not known.
            let seconds = member_done(&mut round, member, UNCONFIRMED, db(member).size, now);
            record_metrics(ctx, cluster, member, seconds, now);
            Ok(())
        }
        DefragStep::Skip { member } => {
            round.done.push(DefragMember {
                member: member.clone(),
                result: "Skipped".into(),
                size_before: Some(db(member).size),
                ..Default::default()
            });
            Ok(())
        }
        DefragStep::Defragment { member, .. } => {
            round.current = Some(member.clone());
            round.current_started = Some(now.to_rfc3339());
            round.current_size_before = Some(db(member).size);
            status.round = Some(round.clone());
            match defragment(writer, cluster, access, pods, &status, member, timeout).await {
                // The member was not recorded (nor asked): it is not left as under way.
                Err(e) => {
                    round.current = None;
                    round.current_started = None;
                    round.current_size_before = None;
                    Err(e)
                }
                // Cut short: the member may still be at it; the next reconcile looks.
                Ok(None) => Ok(()),
                Ok(Some(Ok(size))) => {
                    let finished = Utc::now();
                    let seconds = member_done(&mut round, member, DEFRAGMENTED, size, finished);
                    record_metrics(ctx, cluster, member, seconds, finished);
                    event(
                        ctx,
                        cluster,
                        "MemberDefragmented",
                        &format!("defragmented {member}"),
                    )
                    .await;
                    Ok(())
                }
                Ok(Some(Err(why))) => {
                    let reason = format!("defragmenting {member} failed: {why}; the round stops");
                    let failed =
                        failed_round(&mut round, member, &reason, db(member).size, Utc::now());
                    // The Defragmented condition turns False with it (and its Warning).
                    status.last_round = Some(failed);
                    call_failed = true;
                    Ok(())
                }
            }
        }
        DefragStep::MoveLeader { member, to } => {
            move_leader(ctx, cluster, access, pods, member, *to).await
        }
        DefragStep::Complete => {
            let freed: i64 = round
                .done
                .iter()
                .filter_map(|m| Some(m.size_before? - m.size_after?))
                .sum();
            status.last_round = Some(DefragRoundResult {
                started: round.started.clone(),
                finished: now.to_rfc3339(),
                trigger: round.trigger.clone(),
                result: "Succeeded".into(),
                reason: None,
                members: std::mem::take(&mut round.done),
            });
            let note = format!(
                "defragmentation round done: {} MiB freed",
                freed / (1024 * 1024)
            );
            event(ctx, cluster, "DefragmentationDone", &note).await;
            if nospace {
                disarm_if_room(ctx, cluster, access, pods, view).await
            } else {
                Ok(())
            }
        }
        DefragStep::Stop { reason, .. } => {
            status.last_round = Some(DefragRoundResult {
                started: round.started.clone(),
                finished: now.to_rfc3339(),
                trigger: round.trigger.clone(),
                result: "Stopped".into(),
                reason: Some(reason.clone()),
                members: std::mem::take(&mut round.done),
            });
            Ok(())
        }
    };
    status.round = match step {
        DefragStep::Complete | DefragStep::Stop { .. } => None,
        _ if call_failed => None,
        _ => Some(round),
    };
    Outcome {
        // Out of space, the next look comes soon too: a member may have room to return.
        busy: status.round.is_some() || nospace,
        status: Some(status),
        result,
    }
}

/// Whether a round is due: the cron schedule passed since the last round started (or since
/// the cluster was made), or the cluster is out of space: at once when a member has room to
/// return (`room`: compaction freed pages), else at most every [`NOSPACE_RETRY`].
fn due(
    cluster: &EtcdCluster,
    schedule: &str,
    status: &DefragStatus,
    nospace: bool,
    room: bool,
    now: DateTime<Utc>,
) -> Option<&'static str> {
    let last = status
        .last_round
        .as_ref()
        .and_then(|r| DateTime::parse_from_rfc3339(&r.started).ok())
        .map(|t| t.to_utc());
    if nospace && (room || last.is_none_or(|t| now - t > NOSPACE_RETRY)) {
        return Some("NoSpaceAlarm");
    }
    let from = last.or_else(|| {
        cluster
            .meta()
            .creation_timestamp
            .as_ref()
            .and_then(|t| DateTime::from_timestamp(t.0.as_second(), 0))
    })?;
    let cron = Cron::from_str(schedule).ok()?;
    let next = cron.find_next_occurrence(&from, false).ok()?;
    (next <= now).then_some("Schedule")
}

/// The cron schedule parses (checked with the spec, so a bad one is an input error).
pub fn check_schedule(schedule: &str) -> Result<(), String> {
    operator_runtime::cron::parse("spec.defragmentation.schedule", schedule)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn since(rfc3339: Option<&str>, now: DateTime<Utc>) -> Duration {
    rfc3339
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .and_then(|t| (now - t.to_utc()).to_std().ok())
        .unwrap_or_default()
}

/// The members with their files; `quota` for members that do not report theirs.
fn member_dbs(view: &EtcdView, quota: i64) -> Vec<MemberDb> {
    view.members
        .iter()
        .flatten()
        .filter_map(|m| {
            let name = m.name.clone()?;
            let db = view.databases.get(&name).copied().unwrap_or_default();
            Some(MemberDb {
                id: m.id,
                leader: m.leader,
                learner: m.learner,
                healthy: m.healthy && m.started,
                // Asked separately, only while a round runs (probe_reads).
                serves_reads: false,
                db_size: db.size,
                in_use: db.in_use,
                quota: db.quota.unwrap_or(quota),
                name,
            })
        })
        .collect()
}

fn has_alarm(view: &EtcdView, alarm: &str) -> bool {
    view.errors
        .values()
        .flatten()
        .any(|e| e.contains(&format!("alarm:{alarm}")))
}

/// Records `member` as the one being defragmented, then defragments it, bounded by the member
/// timeout. The call's answer: the member's file size after it, or why it failed (the member
/// could not be reached, or refused); `None` when the call was cut short (the member may still
/// be at it).
async fn defragment(
    writer: &StatusWriter,
    cluster: &EtcdCluster,
    access: &Access,
    pods: &[MemberPod],
    status: &DefragStatus,
    member: &str,
    timeout: Duration,
) -> Result<Option<Result<i64, String>>, Error> {
    writer.record_defragmentation(status.clone()).await?;
    let mut client = match connect(access, pods, member).await {
        Ok(client) => client,
        Err(e) => return Ok(Some(Err(format!("could not reach it: {e}")))),
    };
    tracing::info!(cluster = %cluster.name_any(), %member, "defragmenting");
    let answer = match tokio::time::timeout(timeout, client.defragment()).await {
        Err(_) => return Ok(None),
        Ok(answer) => answer,
    };
    Ok(Some(match answer {
        Err(e) => Err(e.to_string()),
        // The size after, asked of the member itself (0 when it does not say).
        Ok(_) => Ok(client.status().await.map(|s| s.db_size()).unwrap_or(0)),
    }))
}

/// Moves the member under way to the round's `done` with `result`, its file now `size_after`;
/// returns how long it took.
fn member_done(
    round: &mut DefragRound,
    member: &str,
    result: &str,
    size_after: i64,
    now: DateTime<Utc>,
) -> f64 {
    let seconds = since(round.current_started.as_deref(), now).as_secs_f64();
    round.done.push(DefragMember {
        member: member.to_string(),
        result: result.into(),
        size_before: round.current_size_before.take(),
        size_after: Some(size_after).filter(|s| *s > 0),
        seconds: Some(seconds),
    });
    round.current = None;
    round.current_started = None;
    seconds
}

/// The round stopped by `member`'s failed call: recorded as `Failed`, with the member's part.
fn failed_round(
    round: &mut DefragRound,
    member: &str,
    reason: &str,
    size: i64,
    now: DateTime<Utc>,
) -> DefragRoundResult {
    member_done(round, member, FAILED, size, now);
    DefragRoundResult {
        started: round.started.clone(),
        finished: now.to_rfc3339(),
        trigger: round.trigger.clone(),
        result: ROUND_FAILED.into(),
        reason: Some(reason.to_string()),
        members: round.done.clone(),
    }
}

fn record_metrics(
    ctx: &Context,
    cluster: &EtcdCluster,
    member: &str,
    seconds: f64,
    now: DateTime<Utc>,
) {
    let labels = member_labels(ctx, cluster, member);
    ctx.metrics
        .last_defrag
        .get_or_create(&labels)
        .set(now.timestamp() as f64);
    ctx.metrics
        .last_defrag_duration
        .get_or_create(&labels)
        .set(seconds);
}

/// How long a member may take to answer a read before it counts as blocked.
const READ_PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Whether each member that can be reached serves a serializable read in time: a member that
/// defragments blocks every read while it rebuilds its file (it may still answer `Status`).
pub async fn probe_reads(
    access: &Access,
    pods: &[MemberPod],
) -> std::collections::BTreeMap<String, bool> {
    let mut serving = std::collections::BTreeMap::new();
    for (name, ip) in observe::answering(pods) {
        let served = match tokio::time::timeout(READ_PROBE_TIMEOUT, access.connect(name, ip)).await
        {
            Ok(Ok(mut client)) => serves_read(&mut client, READ_PROBE_TIMEOUT).await,
            _ => false,
        };
        serving.insert(name.to_string(), served);
    }
    serving
}

/// Whether `client`'s member answers a serializable read (one key, count only) within
/// `timeout`.
pub async fn serves_read(client: &mut etcd_client::Client, timeout: Duration) -> bool {
    let options = etcd_client::GetOptions::new()
        .with_serializable()
        .with_count_only();
    matches!(
        tokio::time::timeout(timeout, client.get(vec![0u8], Some(options))).await,
        Ok(Ok(_))
    )
}

async fn move_leader(
    ctx: &Context,
    cluster: &EtcdCluster,
    access: &Access,
    pods: &[MemberPod],
    leader: &str,
    to: u64,
) -> Result<(), Error> {
    let mut client = connect(access, pods, leader).await?;
    client.move_leader(to).await?;
    let note =
        format!("moved leadership from {leader} to member {to:x} before defragmenting {leader}");
    event(ctx, cluster, "LeaderMoved", &note).await;
    Ok(())
}

async fn connect(
    access: &Access,
    pods: &[MemberPod],
    member: &str,
) -> Result<etcd_client::Client, Error> {
    let ip = observe::answering(pods)
        .find(|(name, _)| *name == member)
        .map(|(_, ip)| ip.to_string())
        .ok_or(Error::NoMember("the defragmentation"))?;
    Ok(access.connect(member, &ip).await?)
}

/// Disarms `NOSPACE` when every member's file is below its quota again.
async fn disarm_if_room(
    ctx: &Context,
    cluster: &EtcdCluster,
    access: &Access,
    pods: &[MemberPod],
    view: &EtcdView,
) -> Result<(), Error> {
    let mut client = observe::any_member(access, pods)
        .await
        .ok_or(Error::NoMember("disarming the NOSPACE alarm"))?;
    // The sizes after the round, asked now.
    for (name, ip) in observe::answering(pods) {
        let mut member = access.connect(name, ip).await?;
        let status = member.status().await?;
        let quota = Some(status.db_size_quota())
            .filter(|q| *q > 0)
            .or_else(|| view.databases.get(name).and_then(|d| d.quota))
            .unwrap_or_else(|| configured_quota(cluster));
        if status.db_size() >= quota * 9 / 10 {
            return Ok(());
        }
    }
    let alarms = client
        .alarm(AlarmAction::Get, AlarmType::None, None)
        .await?;
    for alarm in alarms.alarms() {
        if alarm.alarm() == AlarmType::Nospace {
            let mut options = AlarmOptions::new();
            options.with_member(alarm.member_id());
            client
                .alarm(AlarmAction::Deactivate, AlarmType::Nospace, Some(options))
                .await?;
        }
    }
    event(
        ctx,
        cluster,
        "AlarmDisarmed",
        "NOSPACE disarmed: every member's database is below 90 % of its quota after defragmentation",
    )
    .await;
    Ok(())
}

/// The quota members run with where they do not report it (before 3.6): `etcdEnv`'s
/// `ETCD_QUOTA_BACKEND_BYTES`, else etcd's default.
fn configured_quota(cluster: &EtcdCluster) -> i64 {
    cluster
        .spec
        .pod
        .as_ref()
        .and_then(|p| p.etcd_env.as_ref())
        .into_iter()
        .flatten()
        .find(|e| e.name == "ETCD_QUOTA_BACKEND_BYTES")
        .and_then(|e| e.value.as_deref()?.trim().parse().ok())
        .filter(|q: &i64| *q > 0)
        .unwrap_or(DEFAULT_QUOTA)
}

fn member_labels(ctx: &Context, cluster: &EtcdCluster, member: &str) -> MemberLabels {
    let namespace = cluster.namespace().unwrap_or_default();
    ctx.metrics
        .member_labels(&namespace, &cluster.name_any(), member)
}

/// Each member's database size, use and quota, and the cluster's alarms.
fn observe_metrics(ctx: &Context, cluster: &EtcdCluster, view: &EtcdView) {
    for (
        member,
        Database {
            size,
            in_use,
            quota,
        },
    ) in &view.databases
    {
        let labels = member_labels(ctx, cluster, member);
        ctx.metrics.db_size.get_or_create(&labels).set(*size);
        ctx.metrics
            .db_size_in_use
            .get_or_create(&labels)
            .set(*in_use);
        ctx.metrics
            .db_quota
            .get_or_create(&labels)
            .set(quota.unwrap_or_else(|| configured_quota(cluster)));
    }
    ctx.metrics.cluster_labels(
        &cluster.namespace().unwrap_or_default(),
        &cluster.name_any(),
    );
    for alarm in crate::metrics::ALARMS {
        let labels = crate::metrics::AlarmLabels {
            namespace: cluster.namespace().unwrap_or_default(),
            name: cluster.name_any(),
            alarm: alarm.into(),
        };
        ctx.metrics
            .alarms
            .get_or_create(&labels)
            .set(i64::from(has_alarm(view, alarm)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn under_way() -> DefragRound {
        DefragRound {
            started: "2026-11-28T04:00:00Z".into(),
            trigger: "Schedule".into(),
            done: vec![DefragMember {
                member: "c-1".into(),
                result: DEFRAGMENTED.into(),
                ..Default::default()
            }],
            current: Some("c-2".into()),
            current_started: Some("2026-11-28T04:01:00Z".into()),
            current_size_before: Some(500),
        }
    }

    fn at(rfc3339: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(rfc3339).unwrap().to_utc()
    }

    #[test]
    fn a_failed_call_is_recorded_as_failed_and_ends_the_round_never_as_defragmented() {
        let mut round = under_way();
        let reason = "defragmenting c-2 failed: etcdserver: request timed out; the round stops";
        let last = failed_round(&mut round, "c-2", reason, 500, at("2026-11-28T04:01:30Z"));
        assert_eq!(last.result, ROUND_FAILED);
        assert_eq!(last.reason.as_deref(), Some(reason));
        let c2 = last.members.iter().find(|m| m.member == "c-2").unwrap();
        assert_eq!(c2.result, FAILED);
        assert_eq!(c2.size_before, Some(500));
        assert_eq!(c2.seconds, Some(30.0));
        assert_eq!(round.current, None);
    }

    #[test]
    fn a_member_whose_answer_was_lost_is_recorded_unconfirmed_with_its_sizes() {
        let mut round = under_way();
        let seconds = member_done(
            &mut round,
            "c-2",
            UNCONFIRMED,
            200,
            at("2026-11-28T04:02:00Z"),
        );
        assert_eq!(seconds, 60.0);
        let c2 = round.done.last().unwrap();
        assert_eq!(
            (c2.result.as_str(), c2.size_before, c2.size_after),
            (UNCONFIRMED, Some(500), Some(200))
        );
        assert_eq!((round.current, round.current_started), (None, None));
    }
}
