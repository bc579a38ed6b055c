//! The restore's step machine, pure: from what status recorded and what the world shows, the
//! one next step. Every step is safe to repeat, and nothing that holds data is deleted before
//! the restored cluster is proven healthy: old member pods are deleted (their claims keep the
//! data), old claims are only detached from the cluster, and removed (by policy) last.

use std::collections::{BTreeMap, BTreeSet};

use backup_api::{RestorePhase, RestorePlan, VerifiedSnapshot};
use etcd_cluster::ClusterNames;
use etcd_cluster::restore::REVISION_BUMP;

/// How a run-once pod (verify, restore) is doing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodRun {
    Running,
    /// Exited 0; its stdout (the verify pod's JSON line).
    Succeeded {
        output: String,
    },
    /// Why it failed (its termination message or the kubelet's reason).
    Failed {
        message: String,
    },
}

/// The EtcdCluster as the restore needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterView {
    pub paused: bool,
    /// The operator reported the pause (`status.controlPaused`) for the current generation: it
    /// no longer acts on the cluster.
    pub pause_seen: bool,
    /// The restore holding the cluster (annotation [`crate::status::RESTORE_ANNOTATION`]).
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
}

#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// This restore's uid (its lock on the cluster).
    pub uid: String,
    /// Recorded in status.
    pub phase: Option<RestorePhase>,
    pub snapshot: Option<VerifiedSnapshot>,
    pub plan: Option<RestorePlan>,
    pub revision_bumped: Option<bool>,
    pub restored_revision: Option<i64>,
    /// Where the snapshot is, and why it cannot be read when it cannot.
    pub source_url: String,
    pub source_problem: Option<String>,
    /// The world.
    pub verify_pod: Option<PodRun>,
    pub cluster: Option<ClusterView>,
    /// The cluster's member pods (`app=etcd,etcd_cluster=<name>`), with whether they are ready.
    pub member_pods: BTreeMap<String, bool>,
    /// Its claims attached to it (same labels), not being deleted.
    pub claims: BTreeSet<String>,
    /// Claims detached from it earlier (by this or an earlier restore): their names stay taken.
    pub detached_claims: BTreeSet<String>,
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
}

#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Nothing more to do (succeeded or failed before).
    Done,
    Fail {
        reason: String,
        message: String,
    },
    CreateVerifyPod,
    RecordSnapshot(VerifiedSnapshot),
    /// Create the EtcdCluster from `spec.newCluster`, paused and held by this restore.
    CreateCluster,
    /// `spec.paused: true` and this restore's annotation on the cluster.
    PauseCluster,
    Wait {
        reason: String,
    },
    /// Record the plan in status (before any member is touched).
    RecordPlan(RestorePlan),
    /// Delete old member pods (their claims keep the data).
    DeleteOldPods(Vec<String>),
    /// Take old claims out of the cluster's selector (kept, labelled `detached-from`).
    DetachClaims(Vec<String>),
    /// Create the claim and restore pod of each member.
    RestoreMembers(Vec<String>),
    /// Create the member pods (and Services) on the restored claims.
    StartMembers(Vec<String>),
    /// Record the hand-over and the revision served, then unpause the cluster, clear its
    /// stale membership record and release the lock.
    HandOver {
        revision: i64,
    },
    /// Delete the detached claims of the replaced members (policy `Delete`).
    DeleteOldClaims(Vec<String>),
    Succeed {
        revision: i64,
    },
}

/// The revision every restored member must serve at least: the snapshot's, plus the bump when
/// the restore tool moved it forward.
pub fn expected_revision(snapshot: &VerifiedSnapshot, bumped: bool) -> i64 {
    let base = snapshot.revision.unwrap_or(0);
    if bumped {
        base + REVISION_BUMP as i64
    } else {
        base
    }
}

/// The next step.
pub fn plan(names: &ClusterNames, observed: &Observed) -> Step {
    if observed.phase.is_some_and(RestorePhase::is_terminal) {
        return Step::Done;
    }
    // 1. The backup is verified before anything is touched.
    let url = &observed.source_url;
    let snapshot = match (&observed.snapshot, &observed.source_problem) {
        (Some(snapshot), _) => snapshot,
        (None, Some(problem)) => return fail("BadSource", problem),
        (None, None) => {
            return match &observed.verify_pod {
                None => Step::CreateVerifyPod,
                Some(PodRun::Running) => wait(format!("verifying {url}")),
                Some(PodRun::Failed { message }) => fail(
                    "BackupInvalid",
                    &format!(
                        "the backup {url} failed verification; nothing was touched: {message}"
                    ),
                ),
                Some(PodRun::Succeeded { output }) => match parse_verified(output) {
                    Some(snapshot) => Step::RecordSnapshot(snapshot),
                    None => fail(
                        "BackupInvalid",
                        &format!("the verify pod printed no report for {url}: {output:?}"),
                    ),
                },
            };
        }
    };
    // 2. The cluster is paused and held by this restore, and its operator has let go.
    let Some(cluster) = &observed.cluster else {
        if observed.plan.is_some() {
            return fail(
                "ClusterDeleted",
                "the EtcdCluster was deleted during the restore; detached volumes are kept",
            );
        }
        if observed.can_create_cluster {
            return Step::CreateCluster;
        }
        return fail(
            "ClusterNotFound",
            "the EtcdCluster does not exist; create it, or set spec.newCluster",
        );
    };
    if !cluster.persistent {
        return fail(
            "NotPersistent",
            "the EtcdCluster has no pod.persistentVolumeClaimSpec: restored members need claims \
             (restoring into emptyDir members is not supported)",
        );
    }
    let held = cluster.paused && cluster.restore.as_deref() == Some(observed.uid.as_str());
    // 6. After the hand-over: the old volumes go (by policy), then success.
    if let Some(plan) = observed
        .plan
        .as_ref()
        .filter(|p| p.handed_over == Some(true))
    {
        let revision = observed.restored_revision.unwrap_or(0);
        if held {
            return Step::HandOver { revision };
        }
        let leftovers: Vec<String> = plan
            .detached_claims
            .iter()
            .filter(|c| observed.delete_old_volumes && observed.detached_claims.contains(*c))
            .cloned()
            .collect();
        if !leftovers.is_empty() {
            return Step::DeleteOldClaims(leftovers);
        }
        return Step::Succeed { revision };
    }
    if !held {
        return Step::PauseCluster;
    }
    if !cluster.pause_seen {
        return wait("waiting for the EtcdCluster operator to report the cluster paused".into());
    }
    // 3. The plan is recorded before any member is touched.
    let Some(plan) = &observed.plan else {
        return Step::RecordPlan(new_plan(names, observed, cluster));
    };
    let planned: BTreeSet<&str> = plan.members.iter().map(String::as_str).collect();
    let old_pods: Vec<String> = observed
        .member_pods
        .keys()
        .filter(|p| !planned.contains(p.as_str()))
        .cloned()
        .collect();
    if !old_pods.is_empty() {
        return Step::DeleteOldPods(old_pods);
    }
    let old_claims: Vec<String> = observed
        .claims
        .iter()
        .filter(|c| !planned.contains(c.as_str()))
        .cloned()
        .collect();
    if !old_claims.is_empty() {
        return Step::DetachClaims(old_claims);
    }
    // 4. Every member restored from the snapshot, then started.
    let started = |m: &String| observed.member_pods.contains_key(m);
    if let Some((member, message)) =
        plan.members
            .iter()
            .find_map(|m| match observed.restore_pods.get(m) {
                Some(PodRun::Failed { message }) if !started(m) => Some((m, message)),
                _ => None,
            })
    {
        return fail(
            "RestoreFailed",
            &format!(
                "restoring member {member} failed; the cluster stays paused and the old volumes are kept: {message}"
            ),
        );
    }
    // A member without its restore pod, or whose claim is missing (its pod cannot start).
    let to_restore: Vec<String> = plan
        .members
        .iter()
        .filter(|m| !started(m))
        .filter(|m| !observed.restore_pods.contains_key(*m) || !observed.claims.contains(*m))
        .cloned()
        .collect();
    if !to_restore.is_empty() {
        return Step::RestoreMembers(to_restore);
    }
    let restored =
        |m: &String| matches!(observed.restore_pods.get(m), Some(PodRun::Succeeded { .. }));
    if plan.members.iter().any(|m| !started(m) && !restored(m)) {
        let running = plan
            .members
            .iter()
            .filter(|m| !started(m) && !restored(m))
            .count();
        return wait(format!(
            "{running} of {} members restoring the snapshot",
            plan.members.len()
        ));
    }
    let to_start: Vec<String> = plan
        .members
        .iter()
        .filter(|m| !started(m))
        .cloned()
        .collect();
    if !to_start.is_empty() {
        return Step::StartMembers(to_start);
    }
    // 5. Every member healthy, a voter, serving at least the snapshot's revision.
    let not_ready = plan
        .members
        .iter()
        .filter(|m| observed.member_pods.get(*m) != Some(&true))
        .count();
    if not_ready > 0 {
        return wait(format!(
            "{not_ready} of {} restored members not ready",
            plan.members.len()
        ));
    }
    let Some(health) = &observed.health else {
        return wait("asking the restored members for their status".into());
    };
    let want = expected_revision(snapshot, observed.revision_bumped.unwrap_or(false));
    let unhealthy: Vec<&String> = plan
        .members
        .iter()
        .filter(|m| {
            !health.voters.contains(*m) || health.revisions.get(*m).is_none_or(|r| *r < want)
        })
        .collect();
    if !unhealthy.is_empty() {
        return wait(format!(
            "members {unhealthy:?} not yet voters serving revision {want} or above"
        ));
    }
    let revision = health.revisions.values().copied().min().unwrap_or(want);
    Step::HandOver { revision }
}

/// The members and token of a new restore: `size` names above every name in use (pods, claims,
/// detached claims), so no restored member reuses an old member's volume or DNS name.
fn new_plan(names: &ClusterNames, observed: &Observed, cluster: &ClusterView) -> RestorePlan {
    let mut used: BTreeSet<String> = observed.member_pods.keys().cloned().collect();
    used.extend(observed.claims.iter().cloned());
    used.extend(observed.detached_claims.iter().cloned());
    used.extend(observed.terminating.iter().cloned());
    let highest = used.iter().filter_map(|n| names.ordinal(n)).max();
    let first = highest.map_or(0, |h| h + 1);
    let members = (0..cluster.size as u32)
        .map(|i| names.member(first + i))
        .collect();
    RestorePlan {
        members,
        token: format!("restore-{}", observed.uid),
        version: cluster.version.clone(),
        detached_claims: observed.claims.iter().cloned().collect(),
        handed_over: None,
    }
}

/// `etcd-backup --output json verify`'s report (the last JSON line of its output).
pub fn parse_verified(output: &str) -> Option<VerifiedSnapshot> {
    let line = output
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))?;
    let report: serde_json::Value = serde_json::from_str(line).ok()?;
    report.get("sha256")?;
    Some(VerifiedSnapshot {
        revision: report["revision"].as_i64(),
        db_bytes: report["dbBytes"].as_i64(),
        sha256: report["sha256"].as_str().map(str::to_string),
    })
}

/// The phase a step belongs to.
pub fn phase_of(step: &Step, observed: &Observed) -> RestorePhase {
    match step {
        Step::Fail { .. } => RestorePhase::Failed,
        Step::Succeed { .. } => RestorePhase::Succeeded,
        Step::Done => observed.phase.unwrap_or(RestorePhase::Pending),
        Step::StartMembers(_) | Step::RestoreMembers(_) => RestorePhase::Restoring,
        Step::HandOver { .. } | Step::DeleteOldClaims(_) => RestorePhase::Verifying,
        _ => match &observed.plan {
            None => RestorePhase::Preparing,
            Some(plan)
                if plan
                    .members
                    .iter()
                    .all(|m| observed.member_pods.contains_key(m)) =>
            {
                RestorePhase::Verifying
            }
            Some(_) => RestorePhase::Restoring,
        },
    }
}

fn fail(reason: &str, message: &str) -> Step {
    Step::Fail {
        reason: reason.into(),
        message: message.into(),
    }
}

fn wait(reason: String) -> Step {
    Step::Wait { reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> ClusterNames {
        ClusterNames::new("c", "ns", None)
    }

    fn snapshot() -> VerifiedSnapshot {
        VerifiedSnapshot {
            revision: Some(500),
            db_bytes: Some(1 << 20),
            sha256: Some("ab".into()),
        }
    }

    fn cluster() -> ClusterView {
        ClusterView {
            paused: true,
            pause_seen: true,
            restore: Some("r".into()),
            size: 3,
            version: "3.5.16".into(),
            persistent: true,
        }
    }

    /// A restore after a disaster: old member c-1's claim survives, c-0 and c-2 are gone.
    fn start() -> Observed {
        Observed {
            uid: "r".into(),
            source_url: "s3://b/k".into(),
            cluster: Some(ClusterView {
                paused: false,
                pause_seen: false,
                restore: None,
                ..cluster()
            }),
            claims: ["c-1".to_string()].into(),
            member_pods: [("c-1".to_string(), false)].into(),
            delete_old_volumes: true,
            ..Default::default()
        }
    }

    /// The plan `start()` leads to.
    fn recorded_plan() -> RestorePlan {
        RestorePlan {
            members: vec!["c-2".into(), "c-3".into(), "c-4".into()],
            token: "restore-r".into(),
            version: "3.5.16".into(),
            detached_claims: vec!["c-1".into()],
            handed_over: None,
        }
    }

    #[test]
    fn verification_comes_first_and_a_bad_backup_touches_nothing() {
        let mut o = start();
        assert_eq!(plan(&names(), &o), Step::CreateVerifyPod);
        o.verify_pod = Some(PodRun::Running);
        assert!(matches!(plan(&names(), &o), Step::Wait { .. }));
        o.verify_pod = Some(PodRun::Failed {
            message: "sha256 trailer mismatch".into(),
        });
        let Step::Fail { reason, message } = plan(&names(), &o) else {
            panic!("a failed verification fails the restore")
        };
        assert_eq!(reason, "BackupInvalid");
        assert!(
            message.contains("sha256 trailer mismatch") && message.contains("nothing was touched")
        );
        o.verify_pod = Some(PodRun::Succeeded {
            output: r#"{"sha256":"ab","revision":500,"dbBytes":1048576}"#.into(),
        });
        assert_eq!(plan(&names(), &o), Step::RecordSnapshot(snapshot()));
        o.source_problem = Some("local.persistentVolumeClaim is not set".into());
        o.verify_pod = None;
        assert!(matches!(plan(&names(), &o), Step::Fail { reason, .. } if reason == "BadSource"));
    }

    #[test]
    fn the_cluster_is_paused_and_released_by_its_operator_before_the_plan() {
        let mut o = start();
        o.snapshot = Some(snapshot());
        assert_eq!(plan(&names(), &o), Step::PauseCluster);
        o.cluster = Some(ClusterView {
            pause_seen: false,
            ..cluster()
        });
        assert!(matches!(plan(&names(), &o), Step::Wait { .. }));
        // Held by an earlier restore of the same name (deleted and re-created): taken over.
        o.cluster = Some(ClusterView {
            restore: Some("earlier".into()),
            ..cluster()
        });
        assert_eq!(plan(&names(), &o), Step::PauseCluster);
        o.cluster = Some(cluster());
        // New names above every name in use; the surviving claim is recorded as detached.
        o.detached_claims = ["c-1".to_string()].into();
        assert_eq!(plan(&names(), &o), Step::RecordPlan(recorded_plan()));
        // Names of claims still being deleted are in use too.
        o.terminating = ["c-7".to_string()].into();
        let Step::RecordPlan(later) = plan(&names(), &o) else {
            panic!()
        };
        assert_eq!(later.members, ["c-8", "c-9", "c-10"]);
        o.terminating.clear();
        o.cluster = None;
        assert!(
            matches!(plan(&names(), &o), Step::Fail { reason, .. } if reason == "ClusterNotFound")
        );
        o.can_create_cluster = true;
        assert_eq!(plan(&names(), &o), Step::CreateCluster);
        o.cluster = Some(ClusterView {
            persistent: false,
            ..cluster()
        });
        assert!(
            matches!(plan(&names(), &o), Step::Fail { reason, .. } if reason == "NotPersistent")
        );
    }

    #[test]
    fn old_members_are_stopped_and_detached_then_all_members_restore_then_start() {
        let mut o = start();
        o.snapshot = Some(snapshot());
        o.cluster = Some(cluster());
        o.plan = Some(recorded_plan());
        assert_eq!(plan(&names(), &o), Step::DeleteOldPods(vec!["c-1".into()]));
        o.member_pods.clear();
        assert_eq!(plan(&names(), &o), Step::DetachClaims(vec!["c-1".into()]));
        o.claims.clear();
        o.detached_claims = ["c-1".to_string()].into();
        let members = vec!["c-2".to_string(), "c-3".into(), "c-4".into()];
        assert_eq!(plan(&names(), &o), Step::RestoreMembers(members.clone()));
        for m in &members {
            o.restore_pods.insert(m.clone(), PodRun::Running);
            o.claims.insert(m.clone());
        }
        assert!(matches!(plan(&names(), &o), Step::Wait { .. }));
        // A claim that vanished (made while an old one of that name was being deleted) is
        // made again.
        o.claims.remove("c-3");
        assert_eq!(plan(&names(), &o), Step::RestoreMembers(vec!["c-3".into()]));
        o.claims.insert("c-3".into());
        assert_eq!(phase_of(&plan(&names(), &o), &o), RestorePhase::Restoring);
        o.restore_pods.insert(
            "c-3".into(),
            PodRun::Failed {
                message: "no space".into(),
            },
        );
        assert!(
            matches!(plan(&names(), &o), Step::Fail { reason, .. } if reason == "RestoreFailed")
        );
        for m in &members {
            o.restore_pods.insert(
                m.clone(),
                PodRun::Succeeded {
                    output: String::new(),
                },
            );
        }
        assert_eq!(plan(&names(), &o), Step::StartMembers(members.clone()));
        // Restarted after starting one member: only the others are started.
        o.member_pods.insert("c-2".into(), false);
        assert_eq!(
            plan(&names(), &o),
            Step::StartMembers(members[1..].to_vec())
        );
    }

    #[test]
    fn success_only_once_every_member_is_a_healthy_voter_at_the_snapshots_revision() {
        let mut o = start();
        o.snapshot = Some(snapshot());
        o.cluster = Some(cluster());
        o.plan = Some(recorded_plan());
        o.claims = ["c-2".to_string(), "c-3".into(), "c-4".into()].into();
        o.detached_claims = ["c-1".to_string()].into();
        o.revision_bumped = Some(true);
        o.member_pods = ["c-2", "c-3", "c-4"]
            .iter()
            .map(|m| (m.to_string(), true))
            .collect();
        o.member_pods.insert("c-4".into(), false);
        assert!(matches!(plan(&names(), &o), Step::Wait { .. }));
        assert_eq!(phase_of(&plan(&names(), &o), &o), RestorePhase::Verifying);
        o.member_pods.insert("c-4".into(), true);
        assert!(
            matches!(plan(&names(), &o), Step::Wait { .. }),
            "health not asked yet"
        );
        let bumped = 500 + REVISION_BUMP as i64;
        let mut health = Health {
            voters: ["c-2", "c-3"].iter().map(|m| m.to_string()).collect(),
            revisions: ["c-2", "c-3", "c-4"]
                .iter()
                .map(|m| (m.to_string(), bumped))
                .collect(),
        };
        o.health = Some(health.clone());
        assert!(
            matches!(plan(&names(), &o), Step::Wait { .. }),
            "c-4 is no voter"
        );
        health.voters.insert("c-4".into());
        health.revisions.insert("c-4".into(), 500);
        o.health = Some(health.clone());
        assert!(
            matches!(plan(&names(), &o), Step::Wait { .. }),
            "c-4 below the bumped revision"
        );
        health.revisions.insert("c-4".into(), bumped + 3);
        o.health = Some(health);
        assert_eq!(plan(&names(), &o), Step::HandOver { revision: bumped });
        // Recorded, then the operator was killed before unpausing: the hand-over is repeated.
        o.plan.as_mut().unwrap().handed_over = Some(true);
        o.restored_revision = Some(bumped);
        o.health = None;
        assert_eq!(plan(&names(), &o), Step::HandOver { revision: bumped });
        o.cluster = Some(ClusterView {
            paused: false,
            restore: None,
            ..cluster()
        });
        assert_eq!(
            plan(&names(), &o),
            Step::DeleteOldClaims(vec!["c-1".into()])
        );
        o.delete_old_volumes = false;
        assert_eq!(plan(&names(), &o), Step::Succeed { revision: bumped });
        o.phase = Some(RestorePhase::Succeeded);
        assert_eq!(plan(&names(), &o), Step::Done);
    }
}
