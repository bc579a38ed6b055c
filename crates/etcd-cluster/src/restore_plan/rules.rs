//! The restore's rules: each looks at the world (what status recorded, what the cluster shows)
//! and either answers with the next step or says "not mine" (`None`). [`RULES`] asks them in
//! order and the first answer is the step; when none answers, the restored cluster is handed
//! over ([`hand_over`]). The order is the safety argument, read top to bottom:
//!
//! 1. A finished restore does nothing; a failure being recorded, a source that cannot be read,
//!    a missing or unfit cluster, or a version the operators do not run fail before anything
//!    is touched; a recovery from a survivor is refused while the cluster has quorum.
//! 2. Once the snapshot is recorded, a member pod whose deletion its node never confirms (the
//!    node is down) is deleted at once, before and after the hand-over: it would hold its
//!    claim and its name for ever.
//! 3. After the hand-over, only the old volumes go (by policy), then success.
//! 4. A member that could not be restored, or whose claim or restore pod was lost, fails the
//!    restore; fetches that do not prove the backup fail it before the old members stop.
//! 5. The cluster is held (paused by this restore, its operator let go) before a plan is
//!    recorded, and the plan is recorded before any claim or pod is made.
//! 6. Every member fetches, verifies and restores while the old members still run; only a
//!    snapshot every fetch verified is recorded, and only then do the old members stop.
//! 7. The restored members start; they must all be healthy voters at the snapshot's revision,
//!    serving the recorded key space, before the hand-over.

use std::collections::BTreeSet;

use super::{
    ClusterView, MemberProblem, NOT_STARTED, PodRun, RestoreFailure, RestoreObserved, RestorePlan,
    RestoreStep, ToolExit, expected_revision, fail, key_space_to_check, new_plan, survivor,
    verified_snapshot, wait,
};
use crate::{ClusterNames, EtcdVersion};

/// What every rule looks at.
pub struct Situation<'a> {
    pub names: &'a ClusterNames,
    pub observed: &'a RestoreObserved,
}

impl Situation<'_> {
    fn cluster(&self) -> Option<&ClusterView> {
        self.observed.cluster.as_ref()
    }

    fn plan(&self) -> Option<&RestorePlan> {
        self.observed.plan.as_ref()
    }

    fn fail(&self, reason: RestoreFailure, message: &str) -> Option<RestoreStep> {
        Some(fail(self.observed, reason, message))
    }

    /// The cluster is paused and held by this restore.
    fn held(&self) -> bool {
        self.cluster()
            .is_some_and(|c| c.paused && c.restore.as_deref() == Some(self.observed.uid.as_str()))
    }

    /// The restored member's pod exists.
    fn started(&self, member: &str) -> bool {
        self.observed.member_pods.contains_key(member)
    }

    /// The member's restore pod fetched, verified and restored.
    fn restored(&self, member: &str) -> bool {
        matches!(
            self.observed.restore_pods.get(member),
            Some(PodRun::Succeeded { .. })
        )
    }

    fn has_claim(&self, member: &str) -> bool {
        self.observed.claims.contains(member) || self.observed.staged_claims.contains(member)
    }

    fn waiting(&self, member: &str) -> bool {
        self.observed.restore_pods.get(member) == Some(&PodRun::Waiting)
    }

    /// The member's restore cannot finish any more: its claim went under a restore pod that
    /// has run, or (once the snapshot is recorded) its restore pod went before it started.
    fn lost(&self, member: &str) -> bool {
        !self.started(member)
            && match self.observed.restore_pods.get(member) {
                None => self.observed.snapshot.is_some(),
                Some(PodRun::Waiting) => false,
                Some(_) => !self.has_claim(member),
            }
    }

    /// The planned members that satisfy `keep`, in plan order.
    fn members_where(&self, keep: impl Fn(&str) -> bool) -> Vec<String> {
        self.plan()
            .into_iter()
            .flat_map(|p| &p.members)
            .filter(|m| keep(m))
            .cloned()
            .collect()
    }
}

type Rule = fn(&Situation) -> Option<RestoreStep>;

/// The rules, in the order they are asked (see the module's documentation).
pub const RULES: [(&str, Rule); 29] = [
    ("finished", finished),
    ("a_failure_is_being_recorded", a_failure_is_being_recorded),
    ("the_source_cannot_be_read", the_source_cannot_be_read),
    ("the_cluster_is_missing", the_cluster_is_missing),
    ("the_cluster_keeps_no_data", the_cluster_keeps_no_data),
    ("the_version_is_not_run", the_version_is_not_run),
    ("the_quorum_is_not_lost", the_quorum_is_not_lost),
    ("a_pod_deletion_is_overdue", a_pod_deletion_is_overdue),
    ("handed_over", handed_over),
    (
        "a_member_could_not_be_restored",
        a_member_could_not_be_restored,
    ),
    ("a_members_restore_was_lost", a_members_restore_was_lost),
    (
        "the_fetches_do_not_prove_the_backup",
        the_fetches_do_not_prove_the_backup,
    ),
    (
        "the_cluster_was_let_go_before_verification",
        the_cluster_was_let_go_before_verification,
    ),
    ("the_cluster_is_not_held", the_cluster_is_not_held),
    ("the_pause_is_not_seen", the_pause_is_not_seen),
    ("no_plan_yet", no_plan_yet),
    ("members_to_restore", members_to_restore),
    ("members_restoring", members_restoring),
    ("snapshot_not_recorded", snapshot_not_recorded),
    ("old_member_pods_run", old_member_pods_run),
    ("old_claims_attached", old_claims_attached),
    ("restored_claims_staged", restored_claims_staged),
    ("an_old_pod_is_going", an_old_pod_is_going),
    ("members_to_start", members_to_start),
    ("members_ended", members_ended),
    ("members_not_ready", members_not_ready),
    ("health_not_read", health_not_read),
    ("members_behind", members_behind),
    ("key_space_not_as_recorded", key_space_not_as_recorded),
];

/// The name of the rule that answers `situation` (`None`: the hand-over).
pub fn answered_by(situation: &Situation) -> Option<&'static str> {
    RULES
        .iter()
        .find(|(_, rule)| rule(situation).is_some())
        .map(|(name, _)| *name)
}

/// When the restore succeeded or failed, then nothing more is done.
pub fn finished(s: &Situation) -> Option<RestoreStep> {
    s.observed
        .phase
        .is_some_and(|p| p.is_terminal())
        .then_some(RestoreStep::Done)
}

/// When a failure was recorded (before the restore's pods and claims went) and no snapshot
/// was, then the failure is carried out.
pub fn a_failure_is_being_recorded(s: &Situation) -> Option<RestoreStep> {
    match (&s.observed.failing, &s.observed.snapshot) {
        (Some((reason, message)), None) => s.fail(*reason, message),
        _ => None,
    }
}

/// When the source cannot be read and no snapshot was recorded, then the restore fails
/// before anything is touched.
pub fn the_source_cannot_be_read(s: &Situation) -> Option<RestoreStep> {
    match (&s.observed.snapshot, &s.observed.source_problem) {
        (None, Some((reason, problem))) => s.fail(*reason, problem),
        _ => None,
    }
}

/// When the cluster does not exist, then it is made from `spec.newCluster`, or the restore
/// fails (deleted during the restore: the detached volumes are kept).
pub fn the_cluster_is_missing(s: &Situation) -> Option<RestoreStep> {
    if s.cluster().is_some() {
        return None;
    }
    if s.plan().is_some() {
        return s.fail(
            RestoreFailure::ClusterDeleted,
            "the EtcdCluster was deleted during the restore; detached volumes are kept",
        );
    }
    if s.observed.can_create_cluster {
        return Some(RestoreStep::CreateCluster);
    }
    s.fail(
        RestoreFailure::ClusterNotFound,
        "the EtcdCluster does not exist; create it, or set spec.newCluster",
    )
}

/// When the cluster's members have no claims, then the restore fails: restored members need
/// claims.
pub fn the_cluster_keeps_no_data(s: &Situation) -> Option<RestoreStep> {
    if s.cluster()?.persistent {
        return None;
    }
    s.fail(
        RestoreFailure::NotPersistent,
        "the EtcdCluster has no pod.persistentVolumeClaimSpec: restored members need claims \
         (restoring into emptyDir members is not supported)",
    )
}

/// When the version the restore runs (the recorded plan's, else the cluster's) does not
/// parse or is one the operators do not run, then the restore fails before the cluster is
/// paused: the restore tool and its flags follow the version.
pub fn the_version_is_not_run(s: &Situation) -> Option<RestoreStep> {
    let cluster = s.cluster()?;
    let version = s.plan().map_or(&cluster.version, |p| &p.version);
    let e = EtcdVersion::parse_supported(version).err()?;
    s.fail(
        RestoreFailure::InvalidVersion,
        &format!("{e}; no member or volume of the cluster was touched"),
    )
}

/// When a recovery from a survivor finds a member with a leader before the snapshot is
/// recorded, then it is refused: the cluster has quorum (nothing of it was touched).
pub fn the_quorum_is_not_lost(s: &Situation) -> Option<RestoreStep> {
    if !s.observed.from_survivor || s.observed.snapshot.is_some() {
        return None;
    }
    let why = survivor::quorum_not_lost(&s.observed.member_statuses)?;
    s.fail(RestoreFailure::QuorumNotLost, &why)
}

/// When the cluster was handed over, then the hand-over is repeated until the cluster is
/// released, the old claims this restore detached go (by policy), then success.
pub fn handed_over(s: &Situation) -> Option<RestoreStep> {
    let plan = s.plan().filter(|p| p.handed_over == Some(true))?;
    let revision = s.observed.restored_revision.unwrap_or(0);
    if s.held() {
        // The key space checked stays recorded.
        return Some(RestoreStep::HandOver {
            plan: plan.clone(),
            revision,
            contents: None,
        });
    }
    let observed = s.observed;
    let leftovers: Vec<String> = plan
        .detached_claims
        .iter()
        .filter(|c| observed.delete_old_volumes && observed.detached_by_this.contains(*c))
        .cloned()
        .collect();
    if !leftovers.is_empty() {
        return Some(RestoreStep::DeleteOldClaims(leftovers));
    }
    Some(RestoreStep::Succeed {
        plan: plan.clone(),
        revision,
    })
}

/// When a planned member's restore pod failed before the member started, then the restore
/// fails with the cause its container and exit code say (also when a crash came between
/// giving the cluster back and recording the failure: it is not paused again).
pub fn a_member_could_not_be_restored(s: &Situation) -> Option<RestoreStep> {
    let (member, container, exit, message) =
        s.plan()?
            .members
            .iter()
            .find_map(|m| match s.observed.restore_pods.get(m) {
                Some(PodRun::Failed {
                    container,
                    exit,
                    message,
                }) if !s.started(m) => Some((m, container, *exit, message)),
                _ => None,
            })?;
    let (reason, message) = member_failure(s.observed, member, container, exit, message);
    s.fail(reason, &message)
}

/// Why member `member`'s restore pod failed, from its failed container and exit code: before
/// the snapshot is recorded nothing of the cluster was touched, and the container says which
/// part failed (the point-in-time preparation, the fetch); after it, the old volumes are kept.
fn member_failure(
    observed: &RestoreObserved,
    member: &str,
    container: &str,
    exit: Option<ToolExit>,
    message: &str,
) -> (RestoreFailure, String) {
    let untouched = "no member or volume of the cluster was touched";
    if observed.snapshot.is_some() {
        return (
            RestoreFailure::RestoreFailed,
            format!(
                "restoring member {member} failed; the cluster stays paused and the old volumes \
                 are kept; delete and re-create the EtcdRestore to retry (that deletes its pods: \
                 save their logs first): {message}"
            ),
        );
    }
    let url = &observed.source_url;
    let (failure, what) = match container {
        NOT_STARTED => (
            RestoreFailure::PodNotStarted,
            format!(
                "member {member}'s restore pod did not start, so nothing was fetched or restored"
            ),
        ),
        "prepare" | "replay" | "scratch-restore" | "scratch-etcd" => {
            point_failure(url, member, container, exit)
        }
        "fetch" => fetch_failure(url, member, exit),
        _ => (
            RestoreFailure::RestoreFailed,
            format!("restoring member {member} failed"),
        ),
    };
    (failure, format!("{what}; {untouched}: {message}"))
}

/// A failed container of the restore to a point in time (its preparation from the backups and
/// archive under `url`, or the scratch member the archive is replayed into).
fn point_failure(
    url: &str,
    member: &str,
    container: &str,
    exit: Option<ToolExit>,
) -> (RestoreFailure, String) {
    use ToolExit::{DataBad, NoUsableIdentity};
    match (container, exit) {
        ("scratch-restore" | "scratch-etcd", _) => (
            RestoreFailure::PointNotReached,
            format!("member {member}'s scratch member, into which the archive is replayed, failed"),
        ),
        (_, Some(DataBad)) => (
            RestoreFailure::BackupInvalid,
            format!(
                "a backup or archived segment under {url} failed verification in member \
                 {member}'s restore to the point"
            ),
        ),
        (_, Some(NoUsableIdentity)) => (
            RestoreFailure::NoUsableIdentity,
            format!(
                "member {member}'s restore to the point could not decrypt the backups under \
                 {url} with the identity named (spec.decryption)"
            ),
        ),
        (_, Some(ToolExit::Failed)) => (
            RestoreFailure::PointNotReached,
            format!(
                "member {member}'s restore to the point did not reach it from the backups and \
                 archive under {url}"
            ),
        ),
        (_, None | Some(ToolExit::Other(_))) => (
            RestoreFailure::RestoreFailed,
            format!("restoring member {member} failed"),
        ),
    }
}

/// A failed fetch of the backup `url` in member `member`'s restore pod.
fn fetch_failure(url: &str, member: &str, exit: Option<ToolExit>) -> (RestoreFailure, String) {
    match exit {
        Some(ToolExit::DataBad) => (
            RestoreFailure::BackupInvalid,
            format!("the backup {url} failed verification in member {member}'s fetch"),
        ),
        Some(ToolExit::NoUsableIdentity) => (
            RestoreFailure::NoUsableIdentity,
            format!(
                "member {member}'s fetch could not decrypt the backup {url} with the identity \
                 named (spec.decryption)"
            ),
        ),
        Some(ToolExit::Failed) => (
            RestoreFailure::BackupInvalid,
            format!("member {member}'s fetch could not read the backup {url}"),
        ),
        // Killed (a memory limit, with `scratchMedium: Memory` the snapshot counts against
        // it; an eviction) or stopped: nothing was said about the backup itself.
        None | Some(ToolExit::Other(_)) => (
            RestoreFailure::FetchFailed,
            format!(
                "member {member}'s fetch of {url} was stopped before it finished, so the backup \
                 was neither read whole nor judged"
            ),
        ),
    }
}

/// When a claim was deleted (by hand) under a restore pod that has run, or, once the snapshot
/// is recorded, a restore pod was deleted before its member started, then the restore fails
/// with that cause: running it again could restore a different object (a new fetch is no
/// longer compared), and waiting would wait for a member that can never start.
pub fn a_members_restore_was_lost(s: &Situation) -> Option<RestoreStep> {
    let member = s.plan()?.members.iter().find(|m| s.lost(m))?;
    let touched = match s.observed.snapshot {
        None => "no member or volume of the cluster was touched",
        Some(_) => "the cluster stays paused and the old volumes are kept",
    };
    s.fail(
        RestoreFailure::ClaimLost,
        &format!(
            "the claim or restore pod of member {member} was deleted before the member \
             started; {touched}; delete and re-create the EtcdRestore to retry"
        ),
    )
}

/// When every member restored but no snapshot is recorded, and their fetches do not prove the
/// backup (no report, different snapshots, not the recorded backup, a newer minor), then the
/// restore fails before the old members stop.
pub fn the_fetches_do_not_prove_the_backup(s: &Situation) -> Option<RestoreStep> {
    let plan = s.plan()?;
    if s.observed.snapshot.is_some() || !plan.members.iter().all(|m| s.restored(m)) {
        return None;
    }
    match verified_snapshot(s.observed, plan) {
        failed @ (RestoreStep::Fail { .. }
        | RestoreStep::Discard { .. }
        | RestoreStep::Wait { .. }) => Some(failed),
        _ => None,
    }
}

/// When a plan is recorded, no snapshot is, and the cluster is no longer held (someone
/// unpaused or took it, or it was given back and the failure not yet recorded), then the
/// restore fails and the cluster is not paused again.
pub fn the_cluster_was_let_go_before_verification(s: &Situation) -> Option<RestoreStep> {
    s.plan()?;
    if s.observed.snapshot.is_some() || s.held() {
        return None;
    }
    s.fail(
        RestoreFailure::ClusterReleased,
        "the EtcdCluster was unpaused or taken over before every member verified the backup; \
         no member or volume of it was touched",
    )
}

/// When the cluster is not paused and held by this restore, then it is paused.
pub fn the_cluster_is_not_held(s: &Situation) -> Option<RestoreStep> {
    (!s.held()).then_some(RestoreStep::PauseCluster)
}

/// When the cluster's operator has not reported the pause, then the restore waits for it to
/// let go.
pub fn the_pause_is_not_seen(s: &Situation) -> Option<RestoreStep> {
    if s.cluster()?.pause_seen {
        return None;
    }
    Some(wait(
        "waiting for the EtcdCluster operator to report the cluster paused".into(),
    ))
}

/// When no plan is recorded, then one is, before any claim or pod is made: the cluster's size
/// of new members, or one member from the most recent survivor (the cluster's operator grows
/// it back), waiting while no survivor answers.
pub fn no_plan_yet(s: &Situation) -> Option<RestoreStep> {
    if s.plan().is_some() {
        return None;
    }
    let observed = s.observed;
    if !observed.from_survivor {
        let size = s.cluster().map_or(0, |c| c.size);
        return Some(RestoreStep::RecordPlan(new_plan(
            s.names, observed, size, None,
        )));
    }
    let asked = observed.survivor_asked.as_deref();
    let Some(chosen) = survivor::most_recent(&observed.member_statuses, asked) else {
        return Some(wait(match asked {
            Some(member) => format!(
                "member {member} (spec.fromSurvivor.member) does not answer its status: waiting \
                 for it"
            ),
            None => "no member of the cluster answers its status: waiting for a surviving \
                     member to recover from"
                .into(),
        }));
    };
    Some(RestoreStep::RecordPlan(new_plan(
        s.names,
        observed,
        1,
        Some(chosen),
    )))
}

/// When planned members have no restore pod yet (or a waiting one whose claim is gone), then
/// their restore pods are made, unless the source cannot be read any more.
pub fn members_to_restore(s: &Situation) -> Option<RestoreStep> {
    let to_restore = s.members_where(|m| {
        !s.started(m)
            && (!s.observed.restore_pods.contains_key(m) || (s.waiting(m) && !s.has_claim(m)))
    });
    if to_restore.is_empty() {
        return None;
    }
    if let Some((reason, problem)) = &s.observed.source_problem {
        return s.fail(*reason, problem);
    }
    let plan = s.plan()?;
    // Parsed by `the_version_is_not_run` before: a version that does not parse failed there.
    let version = EtcdVersion::parse_supported(&plan.version).ok()?;
    Some(RestoreStep::RestoreMembers {
        plan: plan.clone(),
        version,
        members: to_restore,
    })
}

/// When restore pods still run, then the restore waits for them.
pub fn members_restoring(s: &Situation) -> Option<RestoreStep> {
    let plan = s.plan()?;
    let running = s.members_where(|m| !s.started(m) && !s.restored(m)).len();
    (running > 0).then(|| {
        wait(format!(
            "{running} of {} members fetching, verifying and restoring the snapshot",
            plan.members.len()
        ))
    })
}

/// When every fetch finished and no snapshot is recorded, then the snapshot every fetch
/// verified is recorded (the rule before has failed the restore when they do not agree).
pub fn snapshot_not_recorded(s: &Situation) -> Option<RestoreStep> {
    let plan = s.plan()?;
    s.observed
        .snapshot
        .is_none()
        .then(|| verified_snapshot(s.observed, plan))
}

/// The names of the plan's members.
fn planned<'a>(s: &'a Situation) -> BTreeSet<&'a str> {
    s.plan()
        .into_iter()
        .flat_map(|p| &p.members)
        .map(String::as_str)
        .collect()
}

/// When the snapshot is verified and recorded and old member pods still run, then they are
/// deleted (their claims keep the data).
pub fn old_member_pods_run(s: &Situation) -> Option<RestoreStep> {
    let planned = planned(s);
    let old: Vec<String> = s
        .observed
        .member_pods
        .keys()
        .filter(|p| !planned.contains(p.as_str()))
        .cloned()
        .collect();
    (!old.is_empty()).then_some(RestoreStep::DeleteOldPods(old))
}

/// When old claims are still the cluster's, then they are detached (kept, not deleted).
pub fn old_claims_attached(s: &Situation) -> Option<RestoreStep> {
    let planned = planned(s);
    let old: Vec<String> = s
        .observed
        .claims
        .iter()
        .filter(|c| !planned.contains(c.as_str()))
        .cloned()
        .collect();
    (!old.is_empty()).then_some(RestoreStep::DetachClaims(old))
}

/// When restored claims are still staged, then they join the cluster.
pub fn restored_claims_staged(s: &Situation) -> Option<RestoreStep> {
    let to_join = s.members_where(|m| s.observed.staged_claims.contains(m));
    (!to_join.is_empty()).then_some(RestoreStep::JoinClaims {
        plan: s.plan()?.clone(),
        members: to_join,
    })
}

/// When the snapshot is recorded and a member pod's graceful deletion is overdue (its node
/// never confirms it: down, or its kubelet dead, as after a lost zone), then it is deleted at
/// once. Without it the old pod stays for ever: its claim cannot be deleted, its name cannot
/// be reused, and the EtcdCluster operator counts it as a member. Before the snapshot is
/// recorded no pod of the cluster is this restore's to delete.
pub fn a_pod_deletion_is_overdue(s: &Situation) -> Option<RestoreStep> {
    s.observed.snapshot.as_ref()?;
    let overdue: Vec<String> = s.observed.member_pods_overdue.iter().cloned().collect();
    (!overdue.is_empty()).then_some(RestoreStep::ForceDeletePods(overdue))
}

/// When a planned member's old pod is being deleted, then it is made once that pod is gone.
pub fn an_old_pod_is_going(s: &Situation) -> Option<RestoreStep> {
    let going = s.members_where(|m| s.observed.member_pods_going.contains(m));
    let going = going.first()?;
    Some(wait(format!(
        "waiting for the old pod of member {going} to go"
    )))
}

/// When restored members have no pod, then their pods are made.
pub fn members_to_start(s: &Situation) -> Option<RestoreStep> {
    let to_start = s.members_where(|m| !s.started(m));
    (!to_start.is_empty()).then_some(RestoreStep::StartMembers {
        plan: s.plan()?.clone(),
        members: to_start,
    })
}

/// When restored members' pods ended and will not run again, then they are started again on
/// their claims.
pub fn members_ended(s: &Situation) -> Option<RestoreStep> {
    let ended = s.members_where(|m| {
        matches!(
            s.observed.member_problems.get(m),
            Some(MemberProblem::Ended(_))
        )
    });
    (!ended.is_empty()).then_some(RestoreStep::RestartMembers(ended))
}

/// When restored members are not ready, then the restore waits, saying which are stuck and
/// why (the cluster stays paused and the old volumes are kept).
pub fn members_not_ready(s: &Situation) -> Option<RestoreStep> {
    let plan = s.plan()?;
    let not_ready = s.members_where(|m| s.observed.member_pods.get(m) != Some(&true));
    if not_ready.is_empty() {
        return None;
    }
    let progress = format!(
        "{} of {} restored members not ready",
        not_ready.len(),
        plan.members.len()
    );
    let stuck: Vec<String> = not_ready
        .iter()
        .filter_map(|m| match s.observed.member_problems.get(m) {
            Some(MemberProblem::Stuck(why)) => Some(format!("{m}: {why}")),
            _ => None,
        })
        .collect();
    if stuck.is_empty() {
        return Some(wait(progress));
    }
    Some(RestoreStep::MembersUnhealthy(format!(
        "{progress} ({}); still waiting: the cluster stays paused and the old volumes are kept",
        stuck.join("; ")
    )))
}

/// When the restored members' status was not read, then the restore waits for it.
pub fn health_not_read(s: &Situation) -> Option<RestoreStep> {
    s.observed
        .health
        .is_none()
        .then(|| wait("asking the restored members for their status".into()))
}

/// The revision every restored member must serve at least.
fn wanted_revision(observed: &RestoreObserved) -> i64 {
    observed.snapshot.as_ref().map_or(0, |snapshot| {
        expected_revision(snapshot, observed.revision_bumped.unwrap_or(false))
    })
}

/// When a restored member is not a voter or serves less than the snapshot's revision, then
/// the restore waits.
pub fn members_behind(s: &Situation) -> Option<RestoreStep> {
    let health = s.observed.health.as_ref()?;
    let want = wanted_revision(s.observed);
    let behind = s.members_where(|m| {
        !health.voters.contains(m) || health.revisions.get(m).is_none_or(|r| *r < want)
    });
    (!behind.is_empty()).then(|| {
        wait(format!(
            "members {behind:?} not yet voters serving revision {want} or above"
        ))
    })
}

/// When the backup's EtcdBackup recorded its key space and it can be compared, then the
/// restore waits until the restored members' key space is read, and fails (keeping the old
/// volumes) when it is not the recorded one.
pub fn key_space_not_as_recorded(s: &Situation) -> Option<RestoreStep> {
    let observed = s.observed;
    let snapshot = observed.snapshot.as_ref()?;
    let bumped = observed.revision_bumped.unwrap_or(false);
    let (expected, at) = key_space_to_check(observed.expected.as_ref(), snapshot, bumped)?;
    let Some(served) = observed.health.as_ref().and_then(|h| h.contents.as_ref()) else {
        return Some(wait(format!(
            "reading the restored key space at revision {at} to compare it with the backup's \
             record"
        )));
    };
    if served.key_count == expected.key_count && served.content_sha256 == expected.content_sha256 {
        return None;
    }
    s.fail(
        RestoreFailure::RestoredContentMismatch,
        &format!(
            "the restored members serve {} keys (SHA-256 {}) at revision {at}, the backup \
             recorded {} keys (SHA-256 {}) at revision {}; the cluster stays paused and the old \
             volumes are kept",
            served.key_count,
            served.content_sha256,
            expected.key_count,
            expected.content_sha256,
            expected.revision
        ),
    )
}

/// No rule answered: every restored member is a healthy voter at the snapshot's revision and
/// serves the recorded key space (when there is one to compare), so the cluster is handed over.
/// (A plan is recorded by then: the rules before record one. Without one nothing is handed
/// over: the restore waits, saying so.)
pub fn hand_over(s: &Situation) -> RestoreStep {
    let Some(plan) = s.plan() else {
        return wait("no plan is recorded to hand over".into());
    };
    let observed = s.observed;
    let want = wanted_revision(observed);
    let health = observed.health.as_ref();
    let revision = health
        .and_then(|h| h.revisions.values().copied().min())
        .unwrap_or(want);
    let checked = observed.snapshot.as_ref().and_then(|snapshot| {
        let bumped = observed.revision_bumped.unwrap_or(false);
        key_space_to_check(observed.expected.as_ref(), snapshot, bumped)
    });
    RestoreStep::HandOver {
        plan: plan.clone(),
        revision,
        contents: checked.and(health.and_then(|h| h.contents.clone())),
    }
}
