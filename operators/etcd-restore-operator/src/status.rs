//! The EtcdRestore's status, built from the step just taken (pure). coreos's `succeeded` and
//! `reason`, the phase, and `Ready`/`Progressing` conditions with `observedGeneration`.

use etcd_api::condition::{self, PROGRESSING, READY};
use etcd_api::{
    EtcdRestore, EtcdRestoreStatus, ExpectedBackup, KeySpace, RestorePhase, RestorePlan,
    VerifiedSnapshot,
};
use etcd_cluster::EtcdVersion;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use etcd_cluster::restore_plan::RestoreStep;

/// The annotation by which a restore holds its EtcdCluster (the restore's uid). A second
/// restore of a cluster cannot exist at the same time (an EtcdRestore is named like its
/// cluster); one re-created under the same name takes the cluster over.
pub const RESTORE_ANNOTATION: &str = "etcd.database.coreos.com/restore";
/// Set with the pause when the restore paused a running cluster: a restore that fails before
/// touching any member unpauses it again (one the user had paused, or the restore created,
/// stays paused).
pub const PAUSED_BY_RESTORE_ANNOTATION: &str = "etcd.database.coreos.com/paused-by-restore";
/// On an EtcdRestore from the moment it first holds its cluster: deleting the restore lets go
/// of what it held first (see `controller::abandon`).
pub const FINALIZER: &str = "etcd.database.coreos.com/restore-release";

/// Said when the restore tool of the cluster's version cannot move the revision forward.
const NOT_BUMPED: &str = "; the revision is not bumped (this etcd version's restore tool cannot; \
    3.4.27+ and 3.5.10+ can): restart the clients that watch this cluster (e.g. Kubernetes API \
    servers) after the restore, or their caches may miss changes";

/// What a step means to the user: the `Progressing` reason and message.
pub fn describe(step: &RestoreStep) -> (&'static str, String) {
    match step {
        RestoreStep::Done => ("Done", String::new()),
        RestoreStep::Fail { message, .. } => ("Failed", message.clone()),
        RestoreStep::RecordSnapshot(s) => (
            "BackupVerified",
            format!(
                "every member's fetch verified the backup (revision {:?}); stopping the old members",
                s.revision
            ),
        ),
        RestoreStep::Discard {
            reason, message, ..
        } => (
            "Discarding",
            format!(
                "{reason}: {message}; removing the restore's claims and running pods before \
                 giving the cluster back"
            ),
        ),
        RestoreStep::CreateCluster => {
            ("CreatingCluster", "creating the EtcdCluster, paused".into())
        }
        RestoreStep::PauseCluster => ("PausingCluster", "pausing the EtcdCluster".into()),
        RestoreStep::Wait { reason } => ("Waiting", reason.clone()),
        RestoreStep::RecordPlan(p) => {
            let bumps = EtcdVersion::parse(&p.version).is_ok_and(|v| v.restore_can_bump_revision());
            let note = if bumps { "" } else { NOT_BUMPED };
            (
                "Planned",
                format!("restoring into new members {}{note}", p.members.join(", ")),
            )
        }
        RestoreStep::DeleteOldPods(p) => (
            "StoppingOldMembers",
            format!(
                "deleting old member pods {} (their volumes are kept)",
                p.join(", ")
            ),
        ),
        RestoreStep::ForceDeletePods(p) => (
            "DeletingStuckPods",
            format!(
                "deleting member pods {} at once: their graceful deletion is overdue (their \
                 node does not confirm it: down?); the restored cluster's new ID keeps them out",
                p.join(", ")
            ),
        ),
        RestoreStep::DetachClaims(c) => (
            "DetachingOldVolumes",
            format!(
                "detaching old volumes {} from the cluster (kept)",
                c.join(", ")
            ),
        ),
        RestoreStep::RestoreMembers { members: m, .. } => (
            "RestoringMembers",
            format!(
                "fetching, verifying and restoring the snapshot into {} (the old members still run)",
                m.join(", ")
            ),
        ),
        RestoreStep::JoinClaims { members: c, .. } => (
            "JoiningVolumes",
            format!(
                "giving the restored volumes {} to the cluster",
                c.join(", ")
            ),
        ),
        RestoreStep::StartMembers { members: m, .. } => {
            ("StartingMembers", format!("starting {}", m.join(", ")))
        }
        RestoreStep::RestartMembers(m) => (
            "RestartingMembers",
            format!(
                "member pods {} will not run again (evicted, or their node shut down): starting \
                 them again on their restored volumes",
                m.join(", ")
            ),
        ),
        RestoreStep::MembersUnhealthy(message) => ("MembersUnhealthy", message.clone()),
        RestoreStep::HandOver { .. } => (
            "HandingOver",
            "every member is healthy; unpausing the EtcdCluster".into(),
        ),
        RestoreStep::DeleteOldClaims(c) => (
            "DeletingOldVolumes",
            format!("deleting the replaced members' volumes {}", c.join(", ")),
        ),
        RestoreStep::Succeed { revision, .. } => (
            "Succeeded",
            format!("every member is healthy and serves revision {revision} or above"),
        ),
    }
}

/// The report after `step`, in phase `phase`: the status fields the controller applies under
/// [`MANAGER`](crate::context::MANAGER) (the records are [`Records`], under their own manager).
pub fn report(
    restore: &EtcdRestore,
    step: &RestoreStep,
    phase: RestorePhase,
    now: Timestamp,
) -> EtcdRestoreStatus {
    let previous = restore.status.clone().unwrap_or_default();
    let generation = restore.metadata.generation;
    let start = previous.start_time.clone().unwrap_or(Time(now));
    let done = phase.is_terminal();
    let end = match (&previous.completion_time, done) {
        (Some(t), _) => Some(t.clone()),
        (None, true) => Some(Time(now)),
        (None, false) => None,
    };
    let duration = end.as_ref().map_or(now, |t| t.0).duration_since(start.0);
    let (reason, mut message) = describe(step);
    if matches!(step, RestoreStep::Succeed { .. }) && previous.revision_bumped == Some(false) {
        message.push_str(NOT_BUMPED);
    }
    let mut conditions = previous.conditions.clone();
    let now_time = Time(now);
    let ready = match step {
        RestoreStep::Succeed { .. } => condition::new(
            READY,
            true,
            "Succeeded",
            &message,
            generation,
            now_time.clone(),
        ),
        RestoreStep::Fail {
            reason, message, ..
        } => condition::new(
            READY,
            false,
            reason.as_str(),
            message,
            generation,
            now_time.clone(),
        ),
        _ if done => condition::find(&conditions, READY)
            .cloned()
            .unwrap_or_else(|| {
                condition::new(
                    READY,
                    phase == RestorePhase::Succeeded,
                    "Done",
                    "",
                    generation,
                    now_time.clone(),
                )
            }),
        _ => condition::new(
            READY,
            false,
            "InProgress",
            "the restore is not finished",
            generation,
            now_time.clone(),
        ),
    };
    condition::set(&mut conditions, ready);
    if !matches!(step, RestoreStep::Done) {
        let progressing =
            condition::new(PROGRESSING, !done, reason, &message, generation, now_time);
        condition::set(&mut conditions, progressing);
    }
    let failure = match step {
        RestoreStep::Fail {
            reason, message, ..
        }
        | RestoreStep::Discard {
            reason, message, ..
        } => Some(reason.record(message)),
        _ => previous.reason.clone(),
    };
    EtcdRestoreStatus {
        succeeded: phase == RestorePhase::Succeeded,
        reason: failure,
        phase: Some(phase),
        conditions,
        observed_generation: generation,
        start_time: Some(start),
        completion_time: end,
        duration: Some(format_duration(duration.as_secs_f64())),
        ..Default::default()
    }
}

/// Field manager of the restore's records, apart from the report's so that neither apply drops
/// the other's fields.
pub const RECORDS_MANAGER: &str = "etcd-restore-operator-records";

/// What the restore records before it acts on it: where the snapshot is and what its EtcdBackup
/// recorded of it (pinned with the plan), the plan, the snapshot every member verified, the hand-over, the restored revision and key space, and a
/// failure being carried out. Every apply carries all of them (the API server drops the fields
/// a manager owned and leaves out), taken from the status read fresh at the reconcile's start.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Records {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<VerifiedSnapshot>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<RestorePlan>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restored_revision: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision_bumped: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_backup: Option<ExpectedBackup>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restored_contents: Option<KeySpace>,
}

impl Records {
    /// The records in `restore`'s status.
    pub fn of(restore: &EtcdRestore) -> Records {
        let status = restore.status.clone().unwrap_or_default();
        Records {
            reason: status.reason,
            source: status.source,
            snapshot: status.snapshot,
            plan: status.plan,
            restored_revision: status.restored_revision,
            revision_bumped: status.revision_bumped,
            expected_backup: status.expected_backup,
            restored_contents: status.restored_contents,
        }
    }
}

/// `1h2m3s`, `4m5s`, `6s`.
pub fn format_duration(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, m, s) => format!("{h}h{m}m{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_cluster::restore_plan::RestoreFailure;
    use serde_json::Value;

    fn value(status: EtcdRestoreStatus) -> Value {
        serde_json::to_value(status).unwrap()
    }

    fn restore() -> EtcdRestore {
        serde_saphyr::from_str(
            "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdRestore\n\
             metadata: {name: c, namespace: ns, generation: 1}\n\
             spec: {etcdCluster: {name: c}, backupStorageType: S3, s3: {path: b/k}}",
        )
        .unwrap()
    }

    #[test]
    fn in_progress_then_failed_with_the_cause() {
        let now: Timestamp = "2026-11-24T03:00:00Z".parse().unwrap();
        let mut r = restore();
        let status = value(report(
            &r,
            &RestoreStep::PauseCluster,
            RestorePhase::Preparing,
            now,
        ));
        assert_eq!(status["succeeded"], false);
        assert_eq!(status["phase"], "Preparing");
        assert_eq!(status["conditions"][0]["type"], "Ready");
        assert_eq!(status["conditions"][0]["reason"], "InProgress");
        assert_eq!(status["conditions"][1]["reason"], "PausingCluster");
        assert_eq!(status["conditions"][1]["observedGeneration"], 1);
        assert!(status["completionTime"].is_null());
        r.status = Some(serde_json::from_value(status).unwrap());
        let later: Timestamp = "2026-11-24T03:01:12Z".parse().unwrap();
        let fail = RestoreStep::Fail {
            reason: RestoreFailure::BackupInvalid,
            message: "sha256 mismatch".into(),
            release: true,
        };
        let status = value(report(&r, &fail, RestorePhase::Failed, later));
        assert_eq!(status["reason"], "BackupInvalid: sha256 mismatch");
        assert_eq!(status["conditions"][0]["reason"], "BackupInvalid");
        assert_eq!(status["conditions"][1]["status"], "False");
        assert_eq!(status["duration"], "1m12s");
        assert_eq!(status["completionTime"], "2026-11-24T03:01:12Z");
    }

    #[test]
    fn succeeded_only_on_the_success_step() {
        let now: Timestamp = "2026-11-24T03:00:00Z".parse().unwrap();
        let status = value(report(
            &restore(),
            &RestoreStep::Succeed {
                plan: RestorePlan::default(),
                revision: 7,
            },
            RestorePhase::Succeeded,
            now,
        ));
        assert_eq!(status["succeeded"], true);
        assert_eq!(status["conditions"][0]["status"], "True");
        let message = status["conditions"][0]["message"].as_str().unwrap();
        assert!(!message.contains("not bumped"), "{message}");
        assert_eq!(format_duration(3723.0), "1h2m3s");
    }

    #[test]
    fn a_revision_that_could_not_be_bumped_is_said() {
        let now: Timestamp = "2026-11-24T03:00:00Z".parse().unwrap();
        let mut r = restore();
        r.status = Some(etcd_api::EtcdRestoreStatus {
            revision_bumped: Some(false),
            ..Default::default()
        });
        let step = RestoreStep::Succeed {
            plan: RestorePlan::default(),
            revision: 7,
        };
        let status = value(report(&r, &step, RestorePhase::Succeeded, now));
        let message = status["conditions"][0]["message"].as_str().unwrap();
        assert!(message.contains("revision is not bumped"), "{message}");
        let plan = |version: &str| etcd_api::RestorePlan {
            members: vec!["c-3".into()],
            token: "t".into(),
            version: version.into(),
            detached_claims: vec![],
            survivor: None,
            handed_over: None,
        };
        let (_, old) = describe(&RestoreStep::RecordPlan(plan("3.4.23")));
        assert!(old.contains("restart the clients"), "{old}");
        let (_, new) = describe(&RestoreStep::RecordPlan(plan("3.5.16")));
        assert!(!new.contains("not bumped"), "{new}");
    }
}
