//! The restore's step machine, pure: from what status recorded and what the world shows, the
//! one next step. Every step is safe to repeat, and nothing that holds data is deleted before
//! the restored cluster is proven healthy: old member pods are deleted (their claims keep the
//! data), old claims are only detached from the cluster, and removed (by policy) last.
//!
//! The backup is verified by the members' own fetches: every new member fetches the snapshot
//! (sha256 trailer and manifest checked while streaming) and restores it onto a claim of its
//! own while the old members still run. Only once every fetch has verified the same snapshot
//! is it recorded, and only then are the old members stopped. A backup that fails verification
//! therefore leaves every member and volume of the cluster as it was, and the cluster is given
//! back to its operator.

use std::collections::BTreeSet;

use crate::restore::REVISION_BUMP;
use crate::{ClusterNames, EtcdVersion};

pub mod failure;
pub mod fetch_report;
pub mod observed;
/// What a restore records in its status: API types (`etcd_api`), used here.
pub use etcd_api::restore_record as recorded;
pub mod rules;
pub mod step;
pub mod survivor;

pub use failure::RestoreFailure;
use fetch_report::parse_verified;
pub use observed::{
    ClusterView, DELETION_OVERDUE_SECONDS, Health, MemberProblem, MemberStatus, NOT_STARTED,
    PodRun, RestoreObserved, SourceProblem, ToolExit,
};
pub use recorded::{
    ExpectedBackup, KeySpace, RestorePhase, RestorePlan, Survivor, VerifiedSnapshot,
};
pub use step::RestoreStep;

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

/// The next step: the answer of the first of [`rules::RULES`] that answers, else the
/// hand-over.
pub fn plan(names: &ClusterNames, observed: &RestoreObserved) -> RestoreStep {
    let situation = rules::Situation { names, observed };
    rules::RULES
        .iter()
        .find_map(|(_, rule)| rule(&situation))
        .unwrap_or_else(|| rules::hand_over(&situation))
}

/// The recorded key space the restored members must serve, and the revision to read it at;
/// `None` when it cannot be compared: no record (a restore of an object named directly, a
/// backup recorded before contents were), or the snapshot holds a later revision than the
/// record describes (the cluster was written to while the snapshot was taken: the record's
/// revision is compacted away on the restored members, and the checksums compared before
/// anything was touched proved the snapshot is the recorded one), or the restore tool did not
/// say the snapshot's revision (it did not move it forward).
pub fn key_space_to_check(
    expected: Option<&ExpectedBackup>,
    snapshot: &VerifiedSnapshot,
    bumped: bool,
) -> Option<(KeySpace, i64)> {
    // A restore to a point: its replays made a file holding exactly the point's revision
    // (checked after the snapshot was written), read there, or at the bump above it.
    if let Some(replayed) = &snapshot.key_space {
        let at = match bumped {
            true => replayed.revision + REVISION_BUMP as i64,
            false => replayed.revision,
        };
        return Some((replayed.clone(), at));
    }
    let recorded = expected?.contents.clone()?;
    if !bumped || snapshot.latest_revision != Some(recorded.revision) {
        return None;
    }
    // The bumped revision holds the snapshot's key space (the bump adds no key) and is the
    // compaction point, the one revision of it that can still be read.
    let at = recorded.revision + REVISION_BUMP as i64;
    Some((recorded, at))
}

/// How the snapshot the fetches verified differs from what the EtcdBackup recorded: every
/// checksum and the revision both have must agree, and they must share at least one checksum.
fn not_as_recorded(expected: &ExpectedBackup, snapshot: &VerifiedSnapshot) -> Vec<String> {
    let mut differences = Vec::new();
    let mut shared = 0;
    for (what, recorded, fetched) in [
        ("sha256", &expected.sha256, &snapshot.sha256),
        ("CRC32C", &expected.crc32c, &snapshot.crc32c),
        ("snapshot sha256", &expected.db_sha256, &snapshot.db_sha256),
    ] {
        if let (Some(recorded), Some(fetched)) = (recorded, fetched) {
            shared += 1;
            if recorded != fetched {
                differences.push(format!("{what} {recorded} recorded, {fetched} fetched"));
            }
        }
    }
    if shared == 0 {
        differences.push(
            "no checksum the EtcdBackup recorded is one the fetch reported, so nothing proves \
             it is the same backup"
                .to_string(),
        );
    }
    if let (Some(recorded), Some(fetched)) = (expected.revision, snapshot.revision)
        && recorded != fetched
    {
        differences.push(format!("revision {recorded} recorded, {fetched} fetched"));
    }
    differences
}

/// The snapshot every member's fetch verified, or why there is none: a fetch without a report,
/// or members that fetched different snapshots (the object was replaced meanwhile).
fn verified_snapshot(observed: &RestoreObserved, plan: &RestorePlan) -> RestoreStep {
    let url = &observed.source_url;
    let mut reports = Vec::new();
    for member in &plan.members {
        let output = match observed.restore_pods.get(member) {
            Some(PodRun::Succeeded { output }) => output,
            _ => "",
        };
        match parse_verified(output) {
            Some(report) => reports.push(report),
            None => {
                return fail(
                    observed,
                    RestoreFailure::BackupInvalid,
                    &format!("member {member}'s fetch printed no report for {url}: {output:?}"),
                );
            }
        }
    }
    if reports.windows(2).any(|w| !same_snapshot(&w[0], &w[1])) {
        return fail(
            observed,
            RestoreFailure::BackupChanged,
            &format!(
                "the members fetched different snapshots from {url} (it was replaced during \
                 the restore); no member or volume of the cluster was touched"
            ),
        );
    }
    let Some(snapshot) = reports.into_iter().next() else {
        return fail(
            observed,
            RestoreFailure::BadPlan,
            "the recorded plan has no members",
        );
    };
    // A backupRef's backup is the one its EtcdBackup recorded (not another valid snapshot
    // put in its place).
    if let Some(expected) = &observed.expected {
        let differences = not_as_recorded(expected, &snapshot);
        if !differences.is_empty() {
            return fail(
                observed,
                RestoreFailure::BackupNotAsRecorded,
                &format!(
                    "the backup at {url} is not the one its EtcdBackup recorded ({}); no member \
                     or volume of the cluster was touched",
                    differences.join("; ")
                ),
            );
        }
    }
    if let Some(problem) = newer_minor(&snapshot, &plan.version) {
        return fail(observed, RestoreFailure::BackupTooNew, &problem);
    }
    RestoreStep::RecordSnapshot(snapshot)
}

/// Whether two members' fetches verified the same snapshot: every checksum both report agrees,
/// and they report at least one in common (for a restore to a point: the same key space at
/// the same revision). (Fetches of different versions may report different
/// stored checksums of one encrypted object, a sha256 or a CRC32C; the snapshot's own sha256 is
/// the same.)
fn same_snapshot(a: &VerifiedSnapshot, b: &VerifiedSnapshot) -> bool {
    // Restores to a point: each member replayed into its own file; the key spaces must agree.
    if a.key_space.is_some() || b.key_space.is_some() {
        return a.key_space == b.key_space && a.revision == b.revision;
    }
    let pairs = [
        (&a.sha256, &b.sha256),
        (&a.crc32c, &b.crc32c),
        (&a.db_sha256, &b.db_sha256),
    ];
    let mut shared = 0;
    for pair in pairs {
        if let (Some(x), Some(y)) = pair {
            if x != y {
                return false;
            }
            shared += 1;
        }
    }
    shared > 0
}

/// Why a snapshot cannot be restored into members of `version`: it was taken from a newer
/// minor version (its manifest says which). etcd does not go back a minor version, through a
/// snapshot neither: the older version may not read what the newer one wrote.
fn newer_minor(snapshot: &VerifiedSnapshot, version: &str) -> Option<String> {
    let taken = EtcdVersion::parse(snapshot.etcd_version.as_deref()?).ok()?;
    let target = EtcdVersion::parse(version).ok()?;
    (taken.minor() > target.minor()).then(|| {
        format!(
            "the backup was taken from etcd {taken} and the cluster runs {target}: etcd does not \
             move data back a minor version, through a snapshot neither; restore it into a \
             cluster of {}.{} or later (spec.version, or spec.newCluster.version); no member or \
             volume of the cluster was touched",
            taken.minor().0,
            taken.minor().1
        )
    })
}

/// The members and token of a new restore: `size` names above every name in use (pods, claims,
/// detached and staged claims), so no restored member reuses an old member's volume or DNS name.
fn new_plan(
    names: &ClusterNames,
    observed: &RestoreObserved,
    size: usize,
    survivor: Option<Survivor>,
) -> RestorePlan {
    let mut used: BTreeSet<String> = observed.member_pods.keys().cloned().collect();
    used.extend(observed.claims.iter().cloned());
    used.extend(observed.detached_claims.iter().cloned());
    used.extend(observed.staged_claims.iter().cloned());
    used.extend(observed.terminating.iter().cloned());
    used.extend(observed.all_claims.iter().cloned());
    let highest = used.iter().filter_map(|n| names.ordinal(n)).max();
    let first = highest.map_or(0, |h| h + 1);
    let members = (0..size as u32).map(|i| names.member(first + i)).collect();
    RestorePlan {
        members,
        token: format!("restore-{}", observed.uid),
        version: cluster_version(observed),
        detached_claims: observed.claims.iter().cloned().collect(),
        survivor,
        handed_over: None,
    }
}

/// The version the restored members run: the cluster's.
fn cluster_version(observed: &RestoreObserved) -> String {
    observed
        .cluster
        .as_ref()
        .map(|c| c.version.clone())
        .unwrap_or_default()
}

/// The phase a step belongs to.
pub fn phase_of(step: &RestoreStep, observed: &RestoreObserved) -> RestorePhase {
    match step {
        RestoreStep::Fail { .. } => RestorePhase::Failed,
        RestoreStep::Succeed { .. } => RestorePhase::Succeeded,
        RestoreStep::Done => observed.phase.unwrap_or(RestorePhase::Pending),
        RestoreStep::RestoreMembers { .. }
        | RestoreStep::Discard { .. }
        | RestoreStep::RecordSnapshot(_)
        | RestoreStep::DeleteOldPods(_)
        | RestoreStep::DetachClaims(_)
        | RestoreStep::JoinClaims { .. }
        | RestoreStep::StartMembers { .. } => RestorePhase::Restoring,
        RestoreStep::HandOver { .. }
        | RestoreStep::DeleteOldClaims(_)
        | RestoreStep::RestartMembers(_)
        | RestoreStep::MembersUnhealthy(_) => RestorePhase::Verifying,
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

/// A failure; the cluster is given back when the snapshot was never verified (nothing of it
/// was touched before that), once the restore's staged claims and running pods are gone.
fn fail(observed: &RestoreObserved, reason: RestoreFailure, message: &str) -> RestoreStep {
    let release = observed.snapshot.is_none();
    if release {
        let planned: Vec<&String> = observed.plan.iter().flat_map(|p| &p.members).collect();
        let claims: Vec<String> = observed.staged_claims.iter().cloned().collect();
        let pods: Vec<String> = planned
            .iter()
            .filter(|m| observed.restore_pods.contains_key(**m))
            .map(|m| m.to_string())
            .collect();
        if !claims.is_empty() || !pods.is_empty() {
            return RestoreStep::Discard {
                reason,
                message: message.into(),
                claims,
                pods,
            };
        }
        if planned.iter().any(|m| observed.terminating.contains(*m)) {
            return wait(format!(
                "{reason}: {message}; waiting for the restore's claims to go before giving the \
                 cluster back"
            ));
        }
    }
    RestoreStep::Fail {
        reason,
        message: message.into(),
        release,
    }
}

fn wait(reason: String) -> RestoreStep {
    RestoreStep::Wait { reason }
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
            crc32c: None,
            db_sha256: None,
            etcd_version: None,
            latest_revision: None,
            key_space: None,
        }
    }

    const REPORT: &str = r#"{"sha256":"ab","revision":500,"dbBytes":1048576}"#;

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

    /// The cluster unpaused and released by the hand-over.
    fn given_back() -> ClusterView {
        ClusterView {
            paused: false,
            restore: None,
            ..cluster()
        }
    }

    /// A restore after a disaster: old member c-1's pod and claim survive, c-0 and c-2 are gone.
    fn start() -> RestoreObserved {
        RestoreObserved {
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
            survivor: None,
            handed_over: None,
        }
    }

    fn members() -> Vec<String> {
        recorded_plan().members
    }

    /// Planned, the cluster held; every member's claim staged and its restore pod `run`.
    fn restoring(run: PodRun) -> RestoreObserved {
        let mut o = start();
        o.cluster = Some(cluster());
        o.plan = Some(recorded_plan());
        for m in members() {
            o.staged_claims.insert(m.clone());
            o.restore_pods.insert(m, run.clone());
        }
        o
    }

    fn fetched(report: &str) -> PodRun {
        PodRun::Succeeded {
            output: format!("{{\"level\":\"INFO\",\"message\":\"fetching\"}}\n{report}\n"),
        }
    }

    fn failed(container: &str, exit: ToolExit, message: &str) -> PodRun {
        PodRun::Failed {
            container: container.into(),
            exit: Some(exit),
            message: message.into(),
        }
    }

    /// A recovery from a survivor after a zone loss: c-1 answers without a leader, held and
    /// paused, nothing planned yet.
    fn survivor_recovery() -> RestoreObserved {
        let mut o = start();
        o.cluster = Some(cluster());
        o.from_survivor = true;
        o.member_statuses = vec![MemberStatus {
            member: "c-1".into(),
            raft_term: 5,
            raft_index: 40,
            revision: 30,
            has_leader: false,
            node: Some("node-a".into()),
        }];
        o
    }

    #[test]
    fn when_recovering_from_a_survivor_then_one_member_is_planned_from_the_most_recent_data() {
        let o = survivor_recovery();
        let RestoreStep::RecordPlan(plan) = plan(&names(), &o) else {
            panic!("{:?}", plan(&names(), &o));
        };
        assert_eq!(plan.members, vec!["c-2".to_string()]);
        assert_eq!(plan.detached_claims, vec!["c-1".to_string()]);
        let survivor = plan.survivor.unwrap();
        assert_eq!(
            (
                survivor.member.as_str(),
                survivor.raft_index,
                survivor.revision
            ),
            ("c-1", 40, 30)
        );
        assert_eq!(survivor.node.as_deref(), Some("node-a"));
    }

    #[test]
    fn when_no_member_answers_then_a_recovery_from_a_survivor_waits_without_planning() {
        let mut o = survivor_recovery();
        o.member_statuses.clear();
        assert!(
            matches!(plan(&names(), &o), RestoreStep::Wait { reason } if reason.contains("no member"))
        );
    }

    #[test]
    fn when_a_member_has_a_leader_then_a_recovery_from_a_survivor_is_refused_and_its_pods_go() {
        let mut o = survivor_recovery();
        o.member_statuses[0].has_leader = true;
        assert!(matches!(
            plan(&names(), &o),
            RestoreStep::Fail {
                reason: RestoreFailure::QuorumNotLost,
                release: true,
                ..
            }
        ));
        // Quorum came back while the member restored the survivor's snapshot: its copy goes,
        // the cluster is given back untouched.
        let mut o = survivor_recovery();
        o.plan = Some(RestorePlan {
            members: vec!["c-2".into()],
            ..recorded_plan()
        });
        o.staged_claims.insert("c-2".into());
        o.restore_pods.insert("c-2".into(), PodRun::Running);
        o.member_statuses[0].has_leader = true;
        assert!(matches!(
            plan(&names(), &o),
            RestoreStep::Discard { reason: RestoreFailure::QuorumNotLost, ref claims, ref pods, .. }
                if claims == &vec!["c-2".to_string()] && pods == &vec!["c-2".to_string()]
        ));
        // Once the snapshot is recorded the old members are being replaced: no longer asked.
        o.snapshot = Some(VerifiedSnapshot::default());
        assert!(!matches!(
            plan(&names(), &o),
            RestoreStep::Fail { .. } | RestoreStep::Discard { .. }
        ));
    }

    #[test]
    fn a_bad_source_fails_at_once_and_a_good_one_pauses_the_cluster_first() {
        let mut o = start();
        assert_eq!(plan(&names(), &o), RestoreStep::PauseCluster);
        o.source_problem = Some((
            RestoreFailure::BadSource,
            "local.persistentVolumeClaim is not set".into(),
        ));
        assert!(matches!(
            plan(&names(), &o),
            RestoreStep::Fail { reason, release: true, .. } if reason == RestoreFailure::BadSource
        ));
        // The source's own reason is kept (an encrypted backup named without an identity).
        o.source_problem = Some((RestoreFailure::NoUsableIdentity, "no identity".into()));
        assert!(matches!(
            plan(&names(), &o),
            RestoreStep::Fail { reason, release: true, .. } if reason == RestoreFailure::NoUsableIdentity
        ));
    }

    #[test]
    fn the_cluster_is_paused_and_released_by_its_operator_before_the_plan() {
        let mut o = start();
        assert_eq!(plan(&names(), &o), RestoreStep::PauseCluster);
        o.cluster = Some(ClusterView {
            pause_seen: false,
            ..cluster()
        });
        assert!(matches!(plan(&names(), &o), RestoreStep::Wait { .. }));
        assert_eq!(phase_of(&plan(&names(), &o), &o), RestorePhase::Preparing);
        // Held by an earlier restore of the same name (deleted and re-created): taken over.
        o.cluster = Some(ClusterView {
            restore: Some("earlier".into()),
            ..cluster()
        });
        assert_eq!(plan(&names(), &o), RestoreStep::PauseCluster);
        o.cluster = Some(cluster());
        // New names above every name in use; the surviving claim is recorded as detached.
        o.detached_claims = ["c-1".to_string()].into();
        o.detached_by_this = o.detached_claims.clone();
        assert_eq!(plan(&names(), &o), RestoreStep::RecordPlan(recorded_plan()));
        // Names of claims still being deleted, or staged by an earlier restore, are in use too.
        o.terminating = ["c-7".to_string()].into();
        o.staged_claims = ["c-9".to_string()].into();
        let RestoreStep::RecordPlan(later) = plan(&names(), &o) else {
            panic!()
        };
        assert_eq!(later.members, ["c-10", "c-11", "c-12"]);
        // So are those of anyone's claims named like members.
        o.all_claims = ["c-12".to_string(), "data".to_string()].into();
        let RestoreStep::RecordPlan(later) = plan(&names(), &o) else {
            panic!()
        };
        assert_eq!(later.members, ["c-13", "c-14", "c-15"]);
        o.all_claims.clear();
        o.terminating.clear();
        o.staged_claims.clear();
        o.cluster = None;
        assert!(
            matches!(plan(&names(), &o), RestoreStep::Fail { reason, .. } if reason == RestoreFailure::ClusterNotFound)
        );
        o.can_create_cluster = true;
        assert_eq!(plan(&names(), &o), RestoreStep::CreateCluster);
        o.cluster = Some(ClusterView {
            persistent: false,
            ..cluster()
        });
        assert!(
            matches!(plan(&names(), &o), RestoreStep::Fail { reason, .. } if reason == RestoreFailure::NotPersistent)
        );
    }

    #[test]
    fn a_version_that_does_not_parse_fails_before_the_cluster_is_paused() {
        let invalid = |step: &RestoreStep| {
            matches!(step, RestoreStep::Fail { reason, message, .. }
                if *reason == RestoreFailure::InvalidVersion && message.contains("MAJOR.MINOR.PATCH"))
        };
        let mut o = start();
        o.cluster.as_mut().unwrap().version = "3.5".into();
        assert!(invalid(&plan(&names(), &o)), "{:?}", plan(&names(), &o));
        // A plan recorded with such a version (by an operator without this check) too, before
        // any restore pod is made from it.
        let mut o = start();
        o.cluster = Some(cluster());
        o.plan = Some(RestorePlan {
            version: "latest".into(),
            ..recorded_plan()
        });
        assert!(invalid(&plan(&names(), &o)), "{:?}", plan(&names(), &o));
    }

    #[test]
    fn when_the_cluster_runs_a_minor_the_operators_do_not_know_the_restore_fails_before_pausing_it()
    {
        for (version, says) in [
            ("3.8.0", "newer than this operator knows"),
            ("3.3.25", "not supported"),
        ] {
            let mut o = start();
            o.cluster.as_mut().unwrap().version = version.into();
            assert!(
                matches!(plan(&names(), &o), RestoreStep::Fail { reason, ref message, release: true }
                    if reason == RestoreFailure::InvalidVersion && message.contains(says)),
                "{version}: {:?}",
                plan(&names(), &o)
            );
        }
    }

    #[test]
    fn every_member_fetches_and_restores_while_the_old_members_still_run() {
        let mut o = start();
        o.cluster = Some(cluster());
        o.plan = Some(recorded_plan());
        // Old member c-1 still runs: the new members are restored first, beside it.
        assert_eq!(
            plan(&names(), &o),
            RestoreStep::RestoreMembers {
                plan: o.plan.clone().unwrap(),
                version: planned_version(&o),
                members: members()
            }
        );
        assert_eq!(phase_of(&plan(&names(), &o), &o), RestorePhase::Restoring);
        let mut o = restoring(PodRun::Running);
        assert!(matches!(plan(&names(), &o), RestoreStep::Wait { .. }));
        // A claim that vanished before its pod started (made while an old one of that name was
        // being deleted) is made again.
        o.restore_pods.insert("c-3".into(), PodRun::Waiting);
        o.staged_claims.remove("c-3");
        assert_eq!(
            plan(&names(), &o),
            RestoreStep::RestoreMembers {
                plan: o.plan.clone().unwrap(),
                version: planned_version(&o),
                members: vec!["c-3".into()]
            }
        );
        // Under a pod that ran, its restore is lost: the restore fails with the cause and gives
        // the cluster back, instead of waiting for a member that cannot start.
        o.restore_pods.insert("c-3".into(), fetched(REPORT));
        let RestoreStep::Discard {
            reason,
            message,
            pods,
            ..
        } = plan(&names(), &o)
        else {
            panic!("a lost claim fails the restore")
        };
        assert_eq!(reason, RestoreFailure::ClaimLost);
        assert!(
            message.contains("no member or volume of the cluster was touched"),
            "{message}"
        );
        assert_eq!(pods, members());
        o.restore_pods.insert("c-3".into(), PodRun::Running);
        assert!(matches!(
            plan(&names(), &o),
            RestoreStep::Discard { reason, .. } if reason == RestoreFailure::ClaimLost
        ));
        o.restore_pods.insert("c-3".into(), PodRun::Running);
        o.staged_claims.insert("c-3".into());
        // The source went bad meanwhile (its Secret deleted): no pod is made without it, and
        // the restore's claims and running pods go before the cluster is given back.
        o.source_problem = Some((
            RestoreFailure::BadSource,
            "Secret aws not found in ns".into(),
        ));
        assert!(matches!(
            plan(&names(), &o),
            RestoreStep::Discard { reason, .. } if reason == RestoreFailure::BadSource
        ));
        // All fetched the same verified snapshot: it is recorded, and nothing stopped before.
        let mut o = restoring(fetched(REPORT));
        assert_eq!(plan(&names(), &o), RestoreStep::RecordSnapshot(snapshot()));
        o.restore_pods.insert(
            "c-4".into(),
            fetched(r#"{"sha256":"cd","revision":600,"dbBytes":1048576}"#),
        );
        assert!(matches!(
            plan(&names(), &o),
            RestoreStep::Discard { reason, pods, .. } if reason == RestoreFailure::BackupChanged && pods == members()
        ));
        // An encrypted backup's fetch reports the object's CRC32C instead of its sha256.
        let encrypted = |crc: &str| {
            fetched(&format!(
                r#"{{"crc32c":"{crc}","revision":500,"dbBytes":1048576}}"#
            ))
        };
        let mut e = restoring(encrypted("0a0b0c0d"));
        assert_eq!(
            plan(&names(), &e),
            RestoreStep::RecordSnapshot(VerifiedSnapshot {
                sha256: None,
                crc32c: Some("0a0b0c0d".into()),
                ..snapshot()
            })
        );
        e.restore_pods.insert("c-4".into(), encrypted("ffffffff"));
        assert!(matches!(
            plan(&names(), &e),
            RestoreStep::Discard { reason, .. } if reason == RestoreFailure::BackupChanged
        ));
        // Fetches of two versions report different stored checksums of one encrypted object
        // (a sha256, a CRC32C) and the same snapshot: the same backup. Another snapshot is not.
        let with_db = |stored: &str, db: &str| {
            fetched(&format!(
                r#"{{{stored},"dbSha256":"{db}","revision":500,"dbBytes":1048576}}"#
            ))
        };
        let mut mixed = restoring(with_db(r#""crc32c":"0a0b0c0d""#, "d1"));
        mixed
            .restore_pods
            .insert("c-4".into(), with_db(r#""sha256":"ab""#, "d1"));
        assert!(matches!(
            plan(&names(), &mixed),
            RestoreStep::RecordSnapshot(_)
        ));
        mixed
            .restore_pods
            .insert("c-4".into(), with_db(r#""crc32c":"0a0b0c0d""#, "d2"));
        assert!(matches!(
            plan(&names(), &mixed),
            RestoreStep::Discard { reason, .. } if reason == RestoreFailure::BackupChanged
        ));
        o.restore_pods.insert("c-4".into(), fetched("no report"));
        assert!(matches!(
            plan(&names(), &o),
            RestoreStep::Discard { reason, .. } if reason == RestoreFailure::BackupInvalid
        ));
        // The cause recorded, the claims and pods gone: the failure is recorded and the cluster
        // given back; with the cluster already given back it is not paused again.
        o.failing = Some((RestoreFailure::BackupInvalid, "no report".into()));
        o.staged_claims.clear();
        o.restore_pods.clear();
        assert!(matches!(
            plan(&names(), &o),
            RestoreStep::Fail { reason, release: true, .. } if reason == RestoreFailure::BackupInvalid
        ));
        o.cluster = Some(ClusterView {
            paused: false,
            restore: None,
            ..cluster()
        });
        assert!(matches!(
            plan(&names(), &o),
            RestoreStep::Fail { reason, release: true, .. } if reason == RestoreFailure::BackupInvalid
        ));
    }

    /// Issue 28 point 4: a restore pod that never starts (never scheduled, a volume attached
    /// elsewhere) fails the restore with the cause once its start deadline passed: what it
    /// made is discarded and the untouched cluster given back.
    #[test]
    fn a_restore_pod_that_never_starts_fails_the_restore_and_gives_the_cluster_back() {
        let not_started = PodRun::Failed {
            container: NOT_STARTED.into(),
            exit: None,
            message: "no container started within 600 s: Unschedulable: 0/1 nodes are available"
                .into(),
        };
        let o = restoring(not_started);
        match plan(&names(), &o) {
            RestoreStep::Discard {
                reason, message, ..
            } => {
                assert_eq!(reason, RestoreFailure::PodNotStarted);
                assert!(
                    message.contains("no member or volume of the cluster was touched"),
                    "{message}"
                );
                assert!(message.contains("0/1 nodes are available"), "{message}");
            }
            other => panic!("expected the restore discarded, got {other:?}"),
        }
        // Still within its deadline it is waited for.
        assert!(matches!(
            plan(&names(), &restoring(PodRun::Waiting)),
            RestoreStep::Wait { .. }
        ));
    }

    /// Issue: a backup without a manifest was checked against revision 0 (anything passed).
    #[test]
    fn a_backup_without_a_manifest_is_checked_against_the_snapshots_own_revision() {
        let fetch = r#"{"object":"s3://b/k","sha256":"ab","dbBytes":1048576,"manifest":false,"revision":null}"#;
        let console = "2026-11-26T21:46:13Z\tinfo\tsnapshot/v3_snapshot.go:397\tbumping latest revision\t{\"latest-revision\": 4321, \"bump-amount\": 1000000000, \"new-latest-revision\": 1000004321}";
        let verified = parse_verified(&format!("{fetch}\n{console}")).unwrap();
        assert_eq!(verified.revision, Some(4321));
        assert_eq!(
            expected_revision(&verified, true),
            4321 + REVISION_BUMP as i64
        );
        let json_log = r#"{"level":"info","msg":"bumping latest revision","latest-revision":77,"bump-amount":1000000000}"#;
        assert_eq!(
            parse_verified(&format!("{fetch}\n{json_log}"))
                .unwrap()
                .revision,
            Some(77)
        );
        // The manifest's revision stands; without either, nothing is known.
        assert_eq!(
            parse_verified(&format!("{REPORT}\n{console}"))
                .unwrap()
                .revision,
            Some(500)
        );
        assert_eq!(parse_verified(fetch).unwrap().revision, None);
    }

    #[test]
    fn a_backup_from_a_newer_minor_is_refused_before_the_cluster_is_touched() {
        // The cluster runs 3.5.16; a 3.7 snapshot is refused, a 3.5 or 3.4 one restored.
        let report = |version: &str| {
            format!(
                r#"{{"sha256":"ab","revision":500,"dbBytes":1048576,"etcdVersion":"{version}"}}"#
            )
        };
        let o = restoring(fetched(&report("3.7.3")));
        let RestoreStep::Discard {
            reason, message, ..
        } = plan(&names(), &o)
        else {
            panic!("{:?}", plan(&names(), &o));
        };
        assert_eq!(reason, RestoreFailure::BackupTooNew);
        assert!(
            message.contains("taken from etcd 3.7.3 and the cluster runs 3.5.16"),
            "{message}"
        );
        assert!(message.contains("cluster of 3.7 or later"), "{message}");
        for older in ["3.5.33", "3.4.23"] {
            let o = restoring(fetched(&report(older)));
            let mut recorded = snapshot();
            recorded.etcd_version = Some(older.into());
            assert_eq!(
                plan(&names(), &o),
                RestoreStep::RecordSnapshot(recorded),
                "{older}"
            );
        }
    }

    #[test]
    fn a_backup_that_fails_any_members_fetch_gives_the_cluster_back_untouched() {
        let mut o = restoring(PodRun::Running);
        o.restore_pods.insert(
            "c-3".into(),
            failed("fetch", ToolExit::DataBad, "sha256 trailer mismatch"),
        );
        // First the cause is recorded and the restore's claims and pods go.
        let RestoreStep::Discard {
            reason,
            message,
            claims,
            pods,
        } = plan(&names(), &o)
        else {
            panic!("a failed fetch discards the restore's claims first")
        };
        assert_eq!(reason, RestoreFailure::BackupInvalid);
        assert!(message.contains("sha256 trailer mismatch") && message.contains("c-3"));
        assert!(message.contains("no member or volume of the cluster was touched"));
        assert_eq!(claims, members());
        assert_eq!(pods, members());
        assert_eq!(phase_of(&plan(&names(), &o), &o), RestorePhase::Restoring);
        // Being deleted: waited for, so no claim of the restore is left under a member name.
        // The recorded cause carries the failure on without the pods.
        o.failing = Some((reason, message));
        o.staged_claims.clear();
        o.restore_pods.clear();
        o.terminating = members().into_iter().collect();
        assert!(matches!(plan(&names(), &o), RestoreStep::Wait { .. }));
        o.terminating.clear();
        let RestoreStep::Fail {
            reason, release, ..
        } = plan(&names(), &o)
        else {
            panic!("then the failure is recorded")
        };
        assert_eq!(reason, RestoreFailure::BackupInvalid);
        assert!(release, "nothing was touched: the cluster is given back");
        // Killed after giving the cluster back, before recording the failure: not paused again.
        o.cluster = Some(ClusterView {
            paused: false,
            restore: None,
            ..cluster()
        });
        assert!(matches!(
            plan(&names(), &o),
            RestoreStep::Fail { reason, release: true, .. } if reason == RestoreFailure::BackupInvalid
        ));
        // A fetch that could not read the backup (exit 1) fails it too, saying so; one that
        // was killed (exit 137: a memory limit, say) said nothing about the backup.
        let fetch_failed = |exit: ToolExit, message: &str| {
            let mut o = restoring(PodRun::Running);
            o.restore_pods
                .insert("c-3".into(), failed("fetch", exit, message));
            match plan(&names(), &o) {
                RestoreStep::Discard {
                    reason, message, ..
                } => (reason, message),
                other => panic!("{other:?}"),
            }
        };
        let (reason, message) = fetch_failed(ToolExit::Failed, "fetch exited 1: NoSuchKey");
        assert_eq!(reason, RestoreFailure::BackupInvalid);
        assert!(message.contains("could not read the backup") && message.contains("NoSuchKey"));
        assert!(!message.contains("failed verification"), "{message}");
        // An identity that opens none of the backup's stanzas (exit 4): the key is wrong, and
        // the reason says so rather than calling the backup invalid.
        let (reason, message) = fetch_failed(
            ToolExit::NoUsableIdentity,
            "is not among its recipients (age1abc)",
        );
        assert_eq!(reason, RestoreFailure::NoUsableIdentity);
        assert!(message.contains("spec.decryption") && message.contains("age1abc"));
        assert!(message.contains("no member or volume of the cluster was touched"));
        let (reason, message) = fetch_failed(ToolExit::Other(137), "fetch exited 137: OOMKilled");
        assert_eq!(reason, RestoreFailure::FetchFailed);
        assert!(message.contains("neither read whole nor judged") && message.contains("OOMKilled"));
        // A restore tool that fails: the same, with its own reason.
        let mut o = restoring(PodRun::Running);
        o.restore_pods.insert(
            "c-3".into(),
            failed("restore", ToolExit::Failed, "no space left on device"),
        );
        assert!(matches!(
            plan(&names(), &o),
            RestoreStep::Discard { reason, .. } if reason == RestoreFailure::RestoreFailed
        ));
    }

    #[test]
    fn a_cluster_unpaused_before_the_backup_was_verified_is_not_paused_again() {
        let mut o = restoring(PodRun::Running);
        o.cluster = Some(ClusterView {
            paused: false,
            ..cluster()
        });
        assert!(matches!(
            plan(&names(), &o),
            RestoreStep::Discard { reason, .. } if reason == RestoreFailure::ClusterReleased
        ));
        o.staged_claims.clear();
        o.restore_pods.clear();
        assert!(matches!(
            plan(&names(), &o),
            RestoreStep::Fail { reason, release: true, .. } if reason == RestoreFailure::ClusterReleased
        ));
        // Once the snapshot is recorded (every member restored) the cluster is the restore's
        // to finish: paused again.
        let mut o = restoring(fetched(REPORT));
        o.cluster = Some(ClusterView {
            paused: false,
            ..cluster()
        });
        o.snapshot = Some(snapshot());
        assert_eq!(plan(&names(), &o), RestoreStep::PauseCluster);
    }

    #[test]
    fn only_a_verified_snapshot_stops_the_old_members_then_the_new_ones_start() {
        let mut o = restoring(PodRun::Succeeded {
            output: String::new(),
        });
        o.snapshot = Some(snapshot());
        assert_eq!(
            plan(&names(), &o),
            RestoreStep::DeleteOldPods(vec!["c-1".into()])
        );
        o.member_pods.clear();
        assert_eq!(
            plan(&names(), &o),
            RestoreStep::DetachClaims(vec!["c-1".into()])
        );
        o.claims.clear();
        o.detached_claims = ["c-1".to_string()].into();
        o.detached_by_this = o.detached_claims.clone();
        assert_eq!(
            plan(&names(), &o),
            RestoreStep::JoinClaims {
                plan: o.plan.clone().unwrap(),
                members: members()
            }
        );
        o.staged_claims.clear();
        o.claims = members().into_iter().collect();
        assert_eq!(
            plan(&names(), &o),
            RestoreStep::StartMembers {
                plan: o.plan.clone().unwrap(),
                members: members()
            }
        );
        // A restored claim, or a restore pod, deleted before its member started: the cluster
        // stays paused.
        o.claims.remove("c-3");
        assert!(matches!(
            plan(&names(), &o),
            RestoreStep::Fail { reason, release: false, .. } if reason == RestoreFailure::ClaimLost
        ));
        o.claims.insert("c-3".into());
        let run = o.restore_pods.remove("c-3").unwrap();
        assert!(matches!(
            plan(&names(), &o),
            RestoreStep::Fail { reason, release: false, .. } if reason == RestoreFailure::ClaimLost
        ));
        o.restore_pods.insert("c-3".into(), run);
        // Restarted after starting one member: only the others are started.
        o.member_pods.insert("c-2".into(), false);
        assert_eq!(
            plan(&names(), &o),
            RestoreStep::StartMembers {
                plan: o.plan.clone().unwrap(),
                members: members()[1..].to_vec()
            }
        );
        // A failure once the old members were stopped keeps the cluster paused.
        o.restore_pods.insert(
            "c-4".into(),
            failed("restore", ToolExit::Other(137), "the pod was evicted"),
        );
        assert!(matches!(
            plan(&names(), &o),
            RestoreStep::Fail { reason, release: false, .. } if reason == RestoreFailure::RestoreFailed
        ));
    }

    #[test]
    fn success_only_once_every_member_is_a_healthy_voter_at_the_snapshots_revision() {
        let mut o = started();
        o.revision_bumped = Some(true);
        o.member_pods = members().into_iter().map(|m| (m, true)).collect();
        o.member_pods.insert("c-4".into(), false);
        assert!(matches!(plan(&names(), &o), RestoreStep::Wait { .. }));
        assert_eq!(phase_of(&plan(&names(), &o), &o), RestorePhase::Verifying);
        o.member_pods.insert("c-4".into(), true);
        assert!(
            matches!(plan(&names(), &o), RestoreStep::Wait { .. }),
            "health not asked yet"
        );
        let bumped = 500 + REVISION_BUMP as i64;
        let mut health = Health {
            voters: ["c-2", "c-3"].iter().map(|m| m.to_string()).collect(),
            revisions: members().into_iter().map(|m| (m, bumped)).collect(),
            contents: None,
        };
        o.health = Some(health.clone());
        assert!(
            matches!(plan(&names(), &o), RestoreStep::Wait { .. }),
            "c-4 is no voter"
        );
        health.voters.insert("c-4".into());
        health.revisions.insert("c-4".into(), 500);
        o.health = Some(health.clone());
        assert!(
            matches!(plan(&names(), &o), RestoreStep::Wait { .. }),
            "c-4 below the bumped revision"
        );
        health.revisions.insert("c-4".into(), bumped + 3);
        o.health = Some(health);
        assert_eq!(
            plan(&names(), &o),
            RestoreStep::HandOver {
                plan: o.plan.clone().unwrap(),
                revision: bumped,
                contents: None
            }
        );
        // Recorded, then the operator was killed before unpausing: the hand-over is repeated.
        o.plan.as_mut().unwrap().handed_over = Some(true);
        o.restored_revision = Some(bumped);
        o.health = None;
        assert_eq!(
            plan(&names(), &o),
            RestoreStep::HandOver {
                plan: o.plan.clone().unwrap(),
                revision: bumped,
                contents: None
            }
        );
        o.cluster = Some(given_back());
        assert_eq!(
            plan(&names(), &o),
            RestoreStep::DeleteOldClaims(vec!["c-1".into()])
        );
        o.delete_old_volumes = false;
        assert_eq!(
            plan(&names(), &o),
            RestoreStep::Succeed {
                plan: o.plan.clone().unwrap(),
                revision: bumped
            }
        );
        o.phase = Some(RestorePhase::Succeeded);
        assert_eq!(plan(&names(), &o), RestoreStep::Done);
    }

    /// What the EtcdBackup recorded of the backup `REPORT` describes.
    fn expected() -> ExpectedBackup {
        ExpectedBackup {
            sha256: Some("ab".into()),
            crc32c: None,
            db_sha256: Some("d1".into()),
            revision: Some(500),
            contents: Some(KeySpace {
                revision: 500,
                key_count: 300,
                content_sha256: "c0".into(),
            }),
        }
    }

    #[test]
    fn when_a_backup_refs_object_is_not_the_recorded_one_the_restore_fails_before_touching_anything()
     {
        let report = |stored: &str, db: &str, revision: i64| {
            fetched(&format!(
                r#"{{{stored},"dbSha256":"{db}","revision":{revision},"dbBytes":1048576}}"#
            ))
        };
        let recorded = |run: PodRun| {
            let mut o = restoring(run);
            o.expected = Some(expected());
            o
        };
        // The recorded backup: verified and recorded.
        let same = recorded(report(r#""sha256":"ab""#, "d1", 500));
        assert!(matches!(
            plan(&names(), &same),
            RestoreStep::RecordSnapshot(_)
        ));
        // Another valid snapshot with its own manifest, in its place: its checksums differ.
        for (run, says) in [
            (
                report(r#""sha256":"cd""#, "d2", 500),
                "sha256 ab recorded, cd fetched",
            ),
            // Encrypted to the same keys, with a CRC32C forged to match: the snapshot's own
            // sha256 still differs.
            (
                report(r#""crc32c":"0a0b0c0d""#, "d2", 500),
                "snapshot sha256 d1 recorded, d2 fetched",
            ),
            (
                report(r#""sha256":"ab""#, "d1", 600),
                "revision 500 recorded, 600 fetched",
            ),
        ] {
            let mut o = recorded(run);
            o.expected.as_mut().unwrap().crc32c = Some("0a0b0c0d".into());
            assert!(
                matches!(
                    plan(&names(), &o),
                    RestoreStep::Discard { reason, ref message, .. }
                        if reason == RestoreFailure::BackupNotAsRecorded
                            && message.contains(says)
                            && message.contains("no member or volume of the cluster was touched")
                ),
                "{says}: {:?}",
                plan(&names(), &o)
            );
            // Once discarded, the cluster is given back as it was.
            o.failing = Some((RestoreFailure::BackupNotAsRecorded, says.into()));
            o.staged_claims.clear();
            o.restore_pods.clear();
            assert!(matches!(
                plan(&names(), &o),
                RestoreStep::Fail { reason, release: true, .. } if reason == RestoreFailure::BackupNotAsRecorded
            ));
        }
        // A fetch that reports none of the recorded checksums proves nothing.
        let mut none_shared = recorded(fetched(r#"{"crc32c":"0a0b0c0d","revision":500}"#));
        none_shared.expected.as_mut().unwrap().db_sha256 = None;
        assert!(matches!(
            plan(&names(), &none_shared),
            RestoreStep::Discard { reason, ref message, .. }
                if reason == RestoreFailure::BackupNotAsRecorded && message.contains("nothing proves")
        ));
        // Without a record (an object named directly) the fetches' agreement is what counts.
        none_shared.expected = None;
        assert!(matches!(
            plan(&names(), &none_shared),
            RestoreStep::RecordSnapshot(_)
        ));
    }

    #[test]
    fn when_the_restored_members_serve_another_key_space_than_recorded_the_restore_fails_keeping_the_old_volumes()
     {
        let bumped = 500 + REVISION_BUMP as i64;
        let mut o = started();
        o.revision_bumped = Some(true);
        o.expected = Some(expected());
        o.snapshot.as_mut().unwrap().latest_revision = Some(500);
        o.member_pods = members().into_iter().map(|m| (m, true)).collect();
        let mut health = Health {
            voters: members().into_iter().collect(),
            revisions: members().into_iter().map(|m| (m, bumped)).collect(),
            contents: None,
        };
        o.health = Some(health.clone());
        assert_eq!(
            plan(&names(), &o),
            RestoreStep::Wait {
                reason: format!(
                    "reading the restored key space at revision {bumped} to compare it with the \
                     backup's record"
                )
            }
        );
        let served = |keys: i64, digest: &str| KeySpace {
            revision: bumped,
            key_count: keys,
            content_sha256: digest.into(),
        };
        for wrong in [served(299, "c0"), served(300, "c1")] {
            health.contents = Some(wrong);
            o.health = Some(health.clone());
            assert!(matches!(
                plan(&names(), &o),
                RestoreStep::Fail { reason, release: false, ref message }
                    if reason == RestoreFailure::RestoredContentMismatch
                        && message.contains("the old volumes are kept")
            ));
        }
        health.contents = Some(served(300, "c0"));
        o.health = Some(health);
        assert_eq!(
            plan(&names(), &o),
            RestoreStep::HandOver {
                plan: o.plan.clone().unwrap(),
                revision: bumped,
                contents: Some(served(300, "c0"))
            }
        );
    }

    /// `replay-point`'s report: the point's revision and key space, and a file of its own.
    fn replayed(content_sha256: &str, db_sha256: &str) -> PodRun {
        fetched(&format!(
            r#"{{"out":"/var/etcd-restore/snapshot.db","revision":500,"dbBytes":1048576,"dbSha256":"{db_sha256}","etcdVersion":"3.5.16","contents":{{"revision":500,"keyCount":50,"contentSha256":"{content_sha256}","seconds":0.1}}}}"#
        ))
    }

    #[test]
    fn when_members_replayed_a_point_into_different_files_with_one_key_space_then_it_is_recorded() {
        let mut o = restoring(replayed("c0", "d1"));
        o.restore_pods.insert("c-4".into(), replayed("c0", "d2"));
        let RestoreStep::RecordSnapshot(snapshot) = plan(&names(), &o) else {
            panic!(
                "the replayed key space is recorded: {:?}",
                plan(&names(), &o)
            )
        };
        let key_space = KeySpace {
            revision: 500,
            key_count: 50,
            content_sha256: "c0".into(),
        };
        assert_eq!(snapshot.key_space, Some(key_space.clone()));
        assert_eq!(snapshot.revision, Some(500));
        // The restored members must then serve it, at the bumped revision.
        let restored = VerifiedSnapshot {
            latest_revision: Some(500),
            ..snapshot
        };
        assert_eq!(
            key_space_to_check(None, &restored, true),
            Some((key_space.clone(), 500 + REVISION_BUMP as i64))
        );
        // A restore tool that does not bump (etcd before 3.4.27 and 3.5.10) logs no latest
        // revision: the members serve the point's revision itself, and are read there.
        let unbumped = VerifiedSnapshot {
            latest_revision: None,
            ..restored
        };
        assert_eq!(
            key_space_to_check(None, &unbumped, false),
            Some((key_space, 500))
        );
    }

    #[test]
    fn when_members_replayed_different_key_spaces_then_the_restore_is_discarded() {
        let mut o = restoring(replayed("c0", "d1"));
        o.restore_pods.insert("c-4".into(), replayed("c1", "d1"));
        assert!(matches!(
            plan(&names(), &o),
            RestoreStep::Discard { reason, .. } if reason == RestoreFailure::BackupChanged
        ));
    }

    #[test]
    fn when_a_point_is_not_reached_then_the_restore_fails_saying_so_before_touching_anything() {
        let not_reached = |container: &str, exit: ToolExit| {
            let mut o = restoring(PodRun::Running);
            o.restore_pods.insert(
                "c-3".into(),
                failed(container, exit, "revision 900 is not archived yet"),
            );
            match plan(&names(), &o) {
                RestoreStep::Discard {
                    reason, message, ..
                } => (reason, message),
                other => panic!("{other:?}"),
            }
        };
        let (reason, message) = not_reached("prepare", ToolExit::Failed);
        assert_eq!(reason, RestoreFailure::PointNotReached);
        assert!(message.contains("not archived yet"), "{message}");
        assert!(message.contains("no member or volume"), "{message}");
        assert_eq!(
            not_reached("replay", ToolExit::Failed).0,
            RestoreFailure::PointNotReached
        );
        assert_eq!(
            not_reached("replay", ToolExit::DataBad).0,
            RestoreFailure::BackupInvalid
        );
        assert_eq!(
            not_reached("prepare", ToolExit::NoUsableIdentity).0,
            RestoreFailure::NoUsableIdentity
        );
        assert_eq!(
            not_reached("scratch-restore", ToolExit::Failed).0,
            RestoreFailure::PointNotReached
        );
    }

    #[test]
    fn the_key_space_is_compared_only_when_the_snapshot_holds_exactly_the_recorded_revision() {
        let expected = expected();
        let snapshot = |latest| VerifiedSnapshot {
            latest_revision: latest,
            ..snapshot()
        };
        let at = 500 + REVISION_BUMP as i64;
        assert_eq!(
            key_space_to_check(Some(&expected), &snapshot(Some(500)), true),
            Some((expected.contents.clone().unwrap(), at))
        );
        // Written to while the snapshot was taken: the recorded revision is compacted away.
        assert_eq!(
            key_space_to_check(Some(&expected), &snapshot(Some(510)), true),
            None
        );
        // Not moved forward: the restore tool did not say the snapshot's revision.
        assert_eq!(
            key_space_to_check(Some(&expected), &snapshot(None), false),
            None
        );
        assert_eq!(key_space_to_check(None, &snapshot(Some(500)), true), None);
        let no_contents = ExpectedBackup {
            contents: None,
            ..expected.clone()
        };
        assert_eq!(
            key_space_to_check(Some(&no_contents), &snapshot(Some(500)), true),
            None
        );
    }

    /// Started members on their restored claims, not ready yet.
    fn started() -> RestoreObserved {
        let mut o = start();
        o.snapshot = Some(snapshot());
        o.cluster = Some(cluster());
        o.plan = Some(recorded_plan());
        o.claims = members().into_iter().collect();
        o.detached_claims = ["c-1".to_string()].into();
        o.detached_by_this = o.detached_claims.clone();
        o.restore_pods = members()
            .into_iter()
            .map(|m| (m, fetched(REPORT)))
            .collect();
        o.member_pods = members().into_iter().map(|m| (m, false)).collect();
        o
    }

    #[test]
    fn when_an_old_pods_deletion_is_overdue_after_the_snapshot_then_it_is_deleted_at_once() {
        // The old members' nodes are down (a lost zone): their pods' graceful deletion is never
        // confirmed. Once the snapshot is recorded they are deleted at once, before and after
        // the hand-over (the old claims' deletion and the cluster's operator wait on them).
        let mut o = started();
        o.member_pods_going.insert("c-0".into());
        o.member_pods_overdue.insert("c-0".into());
        assert_eq!(
            plan(&names(), &o),
            RestoreStep::ForceDeletePods(vec!["c-0".into()])
        );
        o.plan.as_mut().unwrap().handed_over = Some(true);
        assert_eq!(
            plan(&names(), &o),
            RestoreStep::ForceDeletePods(vec!["c-0".into()])
        );
        // Before the snapshot is recorded, no pod of the cluster is the restore's to delete.
        let mut early = restoring(PodRun::Running);
        early.member_pods_overdue.insert("c-0".into());
        assert!(
            !matches!(plan(&names(), &early), RestoreStep::ForceDeletePods(_)),
            "{:?}",
            plan(&names(), &early)
        );
        // Going, not overdue: waited for.
        o.member_pods_overdue.clear();
        assert!(!matches!(
            plan(&names(), &o),
            RestoreStep::ForceDeletePods(_)
        ));
    }

    #[test]
    fn a_member_pod_that_will_not_run_again_is_started_again_on_its_claim() {
        let mut o = started();
        assert!(matches!(plan(&names(), &o), RestoreStep::Wait { .. }));
        o.member_problems.insert(
            "c-3".into(),
            MemberProblem::Ended("Evicted: the node was low on memory".into()),
        );
        assert_eq!(
            plan(&names(), &o),
            RestoreStep::RestartMembers(vec!["c-3".into()])
        );
        assert_eq!(phase_of(&plan(&names(), &o), &o), RestorePhase::Verifying);
        // Being deleted: waited for (a pod of that name cannot be made yet), then made again.
        o.member_problems.clear();
        o.member_pods.remove("c-3");
        o.member_pods_going.insert("c-3".into());
        let RestoreStep::Wait { reason } = plan(&names(), &o) else {
            panic!("waits for the old pod to go")
        };
        assert!(reason.contains("c-3"), "{reason}");
        o.member_pods_going.clear();
        assert_eq!(
            plan(&names(), &o),
            RestoreStep::StartMembers {
                plan: o.plan.clone().unwrap(),
                members: vec!["c-3".into()]
            }
        );
    }

    #[test]
    fn members_that_keep_failing_are_reported_and_waited_for() {
        let mut o = started();
        o.member_pods.insert("c-2".into(), true);
        o.member_problems.insert(
            "c-4".into(),
            MemberProblem::Stuck("etcd: CrashLoopBackOff, last exit 1: back-off 40s".into()),
        );
        let RestoreStep::MembersUnhealthy(message) = plan(&names(), &o) else {
            panic!("a crash loop is reported")
        };
        assert!(
            message.starts_with("2 of 3 restored members not ready (c-4: etcd: CrashLoopBackOff"),
            "{message}"
        );
        assert!(message.contains("the cluster stays paused"), "{message}");
        assert_eq!(phase_of(&plan(&names(), &o), &o), RestorePhase::Verifying);
        // It passed: no report, and on to the health check.
        o.member_problems.clear();
        o.member_pods = members().into_iter().map(|m| (m, true)).collect();
        assert!(
            matches!(plan(&names(), &o), RestoreStep::Wait { reason } if reason.contains("asking"))
        );
    }

    #[test]
    fn claims_detached_by_an_earlier_restore_are_kept_by_a_later_one() {
        let mut o = started();
        // c-0 was detached by a restore before this one, and is not in this plan; c-2, in
        // this plan, was detached by another restore (by hand, say): neither is deleted.
        o.detached_claims.insert("c-0".into());
        o.detached_claims.insert("c-2".into());
        o.plan.as_mut().unwrap().detached_claims.push("c-2".into());
        o.plan.as_mut().unwrap().handed_over = Some(true);
        o.restored_revision = Some(600);
        o.cluster = Some(given_back());
        assert_eq!(
            plan(&names(), &o),
            RestoreStep::DeleteOldClaims(vec!["c-1".into()])
        );
        o.detached_claims.remove("c-1");
        o.detached_by_this.remove("c-1");
        assert_eq!(
            plan(&names(), &o),
            RestoreStep::Succeed {
                plan: o.plan.clone().unwrap(),
                revision: 600
            }
        );
    }

    fn answered_by(o: &RestoreObserved) -> &'static str {
        let names = names();
        let situation = rules::Situation {
            names: &names,
            observed: o,
        };
        rules::answered_by(&situation).unwrap_or("hand_over")
    }

    /// The rules as a specification: one world for each, from the first rule to the
    /// hand-over, each answered by exactly the rule the order gives (the rules before it say
    /// "not mine"), and every rule is some world's answer.
    #[test]
    fn each_world_is_answered_by_the_rule_the_order_gives() {
        let mut worlds: Vec<(&str, RestoreObserved)> = Vec::new();
        let with = |f: &dyn Fn(&mut RestoreObserved), base: RestoreObserved| {
            let mut o = base;
            f(&mut o);
            o
        };
        worlds.push((
            "finished",
            with(&|o| o.phase = Some(RestorePhase::Succeeded), started()),
        ));
        worlds.push((
            "a_failure_is_being_recorded",
            with(
                &|o| o.failing = Some((RestoreFailure::BackupInvalid, "bad".into())),
                start(),
            ),
        ));
        worlds.push((
            "the_source_cannot_be_read",
            with(
                &|o| o.source_problem = Some((RestoreFailure::BadSource, "no Secret".into())),
                start(),
            ),
        ));
        worlds.push((
            "the_cluster_is_missing",
            with(&|o| o.cluster = None, start()),
        ));
        worlds.push((
            "the_cluster_keeps_no_data",
            with(&|o| o.cluster.as_mut().unwrap().persistent = false, start()),
        ));
        worlds.push((
            "the_version_is_not_run",
            with(
                &|o| o.cluster.as_mut().unwrap().version = "latest".into(),
                start(),
            ),
        ));
        worlds.push((
            "the_quorum_is_not_lost",
            with(
                &|o| o.member_statuses[0].has_leader = true,
                survivor_recovery(),
            ),
        ));
        worlds.push((
            "a_pod_deletion_is_overdue",
            with(
                &|o| _ = o.member_pods_overdue.insert("c-0".into()),
                started(),
            ),
        ));
        worlds.push((
            "handed_over",
            with(
                &|o| o.plan.as_mut().unwrap().handed_over = Some(true),
                started(),
            ),
        ));
        worlds.push((
            "a_member_could_not_be_restored",
            restoring(failed("fetch", ToolExit::DataBad, "sha256 mismatch")),
        ));
        worlds.push((
            "a_members_restore_was_lost",
            with(&|o| o.staged_claims.clear(), restoring(fetched(REPORT))),
        ));
        worlds.push((
            "the_fetches_do_not_prove_the_backup",
            restoring(fetched("no report")),
        ));
        worlds.push((
            "the_cluster_was_let_go_before_verification",
            with(
                &|o| o.cluster = Some(given_back()),
                restoring(PodRun::Running),
            ),
        ));
        worlds.push(("the_cluster_is_not_held", start()));
        let held_unseen = with(
            &|o| {
                let c = o.cluster.as_mut().unwrap();
                (c.paused, c.restore) = (true, Some("r".into()));
            },
            start(),
        );
        worlds.push(("the_pause_is_not_seen", held_unseen));
        worlds.push((
            "no_plan_yet",
            with(&|o| o.cluster = Some(cluster()), start()),
        ));
        worlds.push((
            "members_to_restore",
            with(&|o| o.restore_pods.clear(), restoring(PodRun::Running)),
        ));
        worlds.push(("members_restoring", restoring(PodRun::Running)));
        worlds.push(("snapshot_not_recorded", restoring(fetched(REPORT))));
        let verified = with(
            &|o| o.snapshot = Some(snapshot()),
            restoring(fetched(REPORT)),
        );
        worlds.push(("old_member_pods_run", verified.clone()));
        let stopped = with(&|o| o.member_pods.clear(), verified);
        worlds.push(("old_claims_attached", stopped.clone()));
        let detached = with(&|o| o.claims.clear(), stopped);
        worlds.push(("restored_claims_staged", detached.clone()));
        let joined = with(
            &|o| {
                o.staged_claims.clear();
                o.claims = members().into_iter().collect();
            },
            detached,
        );
        worlds.push((
            "an_old_pod_is_going",
            with(
                &|o| _ = o.member_pods_going.insert("c-3".into()),
                joined.clone(),
            ),
        ));
        worlds.push(("members_to_start", joined));
        worlds.push((
            "members_ended",
            with(
                &|o| {
                    _ = o
                        .member_problems
                        .insert("c-3".into(), MemberProblem::Ended("exited".into()))
                },
                started(),
            ),
        ));
        worlds.push(("members_not_ready", started()));
        let ready = with(
            &|o| o.member_pods = members().into_iter().map(|m| (m, true)).collect(),
            started(),
        );
        worlds.push(("health_not_read", ready.clone()));
        let health = |revision: i64| Health {
            voters: members().into_iter().collect(),
            revisions: members().into_iter().map(|m| (m, revision)).collect(),
            contents: None,
        };
        worlds.push((
            "members_behind",
            with(&|o| o.health = Some(health(499)), ready.clone()),
        ));
        let bumped = 500 + REVISION_BUMP as i64;
        let healthy = with(
            &|o| {
                o.revision_bumped = Some(true);
                o.health = Some(health(bumped));
            },
            ready,
        );
        let mut recorded = expected();
        recorded.contents.as_mut().unwrap().revision = 500;
        let to_compare = with(
            &|o| {
                o.expected = Some(recorded.clone());
                o.snapshot.as_mut().unwrap().latest_revision = Some(500);
            },
            healthy.clone(),
        );
        worlds.push(("key_space_not_as_recorded", to_compare));
        worlds.push(("hand_over", healthy));

        for (rule, world) in &worlds {
            assert_eq!(answered_by(world), *rule, "{world:#?}");
        }
        let named: Vec<&str> = worlds.iter().map(|(rule, _)| *rule).collect();
        let ordered: Vec<&str> = rules::RULES
            .iter()
            .map(|(name, _)| *name)
            .chain(["hand_over"])
            .collect();
        assert_eq!(named, ordered, "one world per rule, in the rules' order");
    }

    /// The version of the plan recorded in `o`.
    fn planned_version(o: &RestoreObserved) -> EtcdVersion {
        EtcdVersion::parse_supported(&o.plan.as_ref().unwrap().version).unwrap()
    }
}
