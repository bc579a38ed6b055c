//! Status, built purely from the observation and the step taken: coreos fields (`phase`,
//! `size`, `members.ready/unready`, `serviceName`, `clientPort`, `currentVersion`,
//! `controlPaused`) plus conditions with `observedGeneration` and the membership change in
//! flight. Written by server-side apply, so every write carries the whole status this manager
//! owns (a field left out would be removed).

use etcd_api::{
    ClusterCondition, ClusterPhase, EtcdCluster, EtcdClusterStatus, MembersStatus, MembershipChange,
};
use std::collections::BTreeMap;

use etcd_cluster::checks;
use etcd_cluster::{
    ContainerFailure, Intent, MembershipObserved, MembershipStep, PodState, PodVersion,
    UpgradeStep, current_version,
};
use etcd_members::labels;
use kube::ResourceExt;

use crate::conditions::{
    Available, ConditionReason, DataPersistent, Defragmented, Degraded, Progressing,
    VersionSupported,
};
use crate::observe::MemberPod;

/// The change recorded in status, as the planner's intent.
pub fn intent(cluster: &EtcdCluster) -> Option<Intent> {
    intent_of(recorded_change(cluster)?)
}

/// The membership change recorded in status, unless a restore handed the cluster over since it
/// was recorded (the data it was about is gone): see [`labels::RESTORED_BY_ANNOTATION`].
pub fn recorded_change(cluster: &EtcdCluster) -> Option<&MembershipChange> {
    let change = cluster.status.as_ref()?.membership_change.as_ref()?;
    (change.restored_by.as_ref() == restored_by(cluster).as_ref()).then_some(change)
}

/// The restore the cluster's data came from (its annotation), if any.
fn restored_by(cluster: &EtcdCluster) -> Option<String> {
    cluster
        .annotations()
        .get(labels::RESTORED_BY_ANNOTATION)
        .cloned()
}

/// Seconds since the recorded change was recorded (its `started` time), when known.
pub fn intent_age_seconds(cluster: &EtcdCluster) -> Option<u64> {
    let started = recorded_change(cluster)?.started.as_deref()?;
    let started = chrono::DateTime::parse_from_rfc3339(started).ok()?;
    let age = chrono::Utc::now()
        .signed_duration_since(started)
        .num_seconds();
    u64::try_from(age).ok()
}

fn intent_of(change: &MembershipChange) -> Option<Intent> {
    let member = change.member.clone();
    match change.action.as_str() {
        "Seed" => Some(Intent::Seed { member: member? }),
        "Add" => Some(Intent::Add { member: member? }),
        "Remove" => Some(Intent::Remove {
            member,
            id: u64::from_str_radix(change.member_id.as_deref()?, 16).ok()?,
            reason: change.reason.clone().unwrap_or_default(),
            keep_claim: change.keep_claim.unwrap_or(false),
        }),
        _ => None,
    }
}

/// The cluster was created before: its seed answered once (phase Running), or the restore
/// controller created it as Running (the coreos adoption contract).
pub fn bootstrapped(cluster: &EtcdCluster) -> bool {
    cluster.status.as_ref().and_then(|s| s.phase) == Some(ClusterPhase::Running)
}

/// The intent in force once `step` has been executed.
fn intent_after(step: &MembershipStep, before: &Option<Intent>) -> Option<Intent> {
    match step {
        MembershipStep::Seed { member } => Some(Intent::Seed {
            member: member.clone(),
        }),
        MembershipStep::AddLearner { member } => Some(Intent::Add {
            member: member.clone(),
        }),
        MembershipStep::RemoveMember {
            member,
            id,
            reason,
            keep_claim,
        } => Some(Intent::Remove {
            member: member.clone(),
            id: *id,
            reason: reason.clone(),
            keep_claim: *keep_claim,
        }),
        MembershipStep::ClearIntent => None,
        _ => before.clone(),
    }
}

/// The membership change recorded for `intent`, keeping the recorded start time of the same
/// change.
fn change_record(cluster: &EtcdCluster, intent: &Option<Intent>) -> Option<MembershipChange> {
    let intent = intent.as_ref()?;
    let previous = recorded_change(cluster).cloned();
    if let Some(previous) = previous.filter(|p| intent_of(p).as_ref() == Some(intent)) {
        return Some(previous);
    }
    Some(change(cluster, intent.clone()))
}

/// A new record of `intent` for `cluster`, started now.
pub fn change(cluster: &EtcdCluster, intent: Intent) -> MembershipChange {
    MembershipChange {
        restored_by: restored_by(cluster),
        ..change_of(intent)
    }
}

fn change_of(intent: Intent) -> MembershipChange {
    let started = Some(chrono::Utc::now().to_rfc3339());
    match intent {
        Intent::Seed { member } => MembershipChange {
            action: "Seed".into(),
            member: Some(member),
            started,
            ..Default::default()
        },
        Intent::Add { member } => MembershipChange {
            action: "Add".into(),
            member: Some(member),
            started,
            ..Default::default()
        },
        Intent::Remove {
            member,
            id,
            reason,
            keep_claim,
        } => MembershipChange {
            action: "Remove".into(),
            member,
            member_id: Some(format!("{id:x}")),
            reason: Some(reason),
            started,
            keep_claim: keep_claim.then_some(true),
            restored_by: None,
        },
    }
}

/// A condition, keeping `lastTransitionTime` while its status holds and `lastUpdateTime` while
/// nothing in it changes, so an unchanged status is a no-op write (no new resourceVersion, no
/// watch event, no reconcile loop).
pub(crate) fn condition<R: ConditionReason>(
    cluster: &EtcdCluster,
    status: bool,
    reason: R,
    message: &str,
) -> ClusterCondition {
    let type_ = R::TYPE;
    let now = chrono::Utc::now().to_rfc3339();
    let status = if status { "True" } else { "False" }.to_string();
    let previous = cluster
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == type_));
    let mut new = ClusterCondition {
        type_: type_.into(),
        status,
        last_update_time: Some(now.clone()),
        last_transition_time: Some(now),
        reason: Some(reason.as_str().into()),
        message: Some(message.into()),
        observed_generation: cluster.metadata.generation,
    };
    if let Some(p) = previous {
        if p.status == new.status {
            new.last_transition_time = p.last_transition_time.clone();
        }
        let same = p.status == new.status
            && p.reason == new.reason
            && p.message == new.message
            && p.observed_generation == new.observed_generation;
        if same {
            new.last_update_time = p.last_update_time.clone();
        }
    }
    new
}

/// Whether the cluster has no quorum now: reported as lost by the planner, none of the members
/// of a created cluster answers, or fewer voters are healthy than a majority (also while
/// members come back on their data: the cluster is down meanwhile).
pub fn quorum_lost(observed: &MembershipObserved, step: &MembershipStep) -> bool {
    let voters: Vec<_> = (observed.members.iter().flatten())
        .filter(|m| !m.learner)
        .collect();
    let healthy = voters.iter().filter(|m| m.healthy).count();
    matches!(step, MembershipStep::QuorumLost { .. })
        || observed.members.is_none() && observed.bootstrapped
        || observed.members.is_some() && healthy < voters.len() / 2 + 1
}

pub fn report(
    cluster: &EtcdCluster,
    observed: &MembershipObserved,
    pods: &[MemberPod],
    step: &MembershipStep,
    upgrade: Option<&UpgradeStep>,
    outcome: &Result<(), impl std::fmt::Display>,
) -> EtcdClusterStatus {
    let members = observed.members.as_deref().unwrap_or(&[]);
    let phase = if observed.members.is_some() || bootstrapped(cluster) {
        ClusterPhase::Running
    } else {
        ClusterPhase::Creating
    };
    let mut ready: Vec<String> = Vec::new();
    let mut unready: Vec<String> = Vec::new();
    for pod in pods {
        match pod.state {
            PodState::Running { ready: true } => ready.push(pod.name.clone()),
            _ => unready.push(pod.name.clone()),
        }
    }
    let healthy = members.iter().filter(|m| m.healthy && !m.learner).count();
    let voters = members.iter().filter(|m| !m.learner).count();
    let healthy_voters = healthy;
    let (available, available_reason, available_message) = match step {
        MembershipStep::QuorumLost { dead, reason } => (
            false,
            Available::QuorumLost,
            format!(
                "{reason}; dead: {}; recover with an EtcdRestore (fromSurvivor while a member survives, else from a backup)",
                dead.join(", ")
            ),
        ),
        // Once created, a cluster none of whose members answers is down (all pods drained,
        // say), however sure it is to come back.
        _ if observed.members.is_none() && observed.bootstrapped => (
            false,
            Available::QuorumLost,
            "no member answers; waiting for members to come back, else restore with an EtcdRestore"
                .to_string(),
        ),
        _ if observed.members.is_none() => (
            false,
            Available::NoMemberAnswers,
            "no member answers yet".to_string(),
        ),
        // Whatever the step (a restart, a paused upgrade), from the voters' health.
        _ if healthy_voters < voters / 2 + 1 => (
            false,
            Available::QuorumLost,
            format!(
                "{healthy_voters} of {voters} voting members healthy; waiting for members to come back, else restore with an EtcdRestore"
            ),
        ),
        _ => (
            true,
            Available::QuorumHealthy,
            format!("{healthy} of {} members healthy", members.len()),
        ),
    };
    let (progressing, progress_reason, progress_message) = match (step, upgrade) {
        (
            _,
            Some(UpgradeStep::Failed {
                member,
                version,
                cause,
            }),
        ) => (
            false,
            Progressing::UpgradeFailed,
            format!("{member} on {version} does not run: {cause}; the upgrade is paused"),
        ),
        (_, Some(UpgradeStep::Revert { member, to })) => (
            true,
            Progressing::RevertingUpgrade,
            format!("moving {member} to {to}: the image it was given never ran"),
        ),
        (MembershipStep::Converged, Some(UpgradeStep::Refused(e))) => (
            false,
            Progressing::UpgradeRefused,
            format!("{e}; no member was touched"),
        ),
        (MembershipStep::Converged, Some(UpgradeStep::Upgrade { member, from })) => (
            true,
            Progressing::Upgrading,
            format!(
                "upgrading {member} from {from} to {}",
                cluster.spec.version()
            ),
        ),
        (MembershipStep::Converged, Some(UpgradeStep::FlushLog { member })) => (
            true,
            Progressing::Upgrading,
            format!(
                "making every member save a snapshot before {member} moves to {}: 3.7 cannot read the log entries 3.5 wrote",
                cluster.spec.version()
            ),
        ),
        (MembershipStep::Converged, Some(UpgradeStep::Wait { reason })) => {
            (true, Progressing::Upgrading, reason.clone())
        }
        (MembershipStep::Converged, _) => (
            false,
            Progressing::Converged,
            format!("{} members, nothing in flight", members.len()),
        ),
        (MembershipStep::QuorumLost { .. }, _) => (
            false,
            Progressing::QuorumLost,
            "waiting for a restore".to_string(),
        ),
        (MembershipStep::Wait { reason }, _) => (true, Progressing::Waiting, reason.clone()),
        (other, _) => (true, step_reason(other), format!("{other:?}")),
    };
    let versions: BTreeMap<String, PodVersion> = pods
        .iter()
        .filter_map(|p| {
            Some((
                p.name.clone(),
                PodVersion::new(p.version.as_deref()?, p.state),
            ))
        })
        .collect();
    let current = current_version(&versions).map(|v| v.to_string());
    let target = cluster.spec.version().to_string();
    let target_version = match &current {
        Some(current) if *current != target => Some(target),
        _ => None,
    };
    let degraded = members.iter().any(|m| !m.healthy) || !unready.is_empty() || outcome.is_err();
    // Why members do not run, as the kubelet says (a missing image, a crash loop).
    let failures: Vec<String> = pods
        .iter()
        .filter_map(|p| {
            let cause = match p.failure.as_ref()? {
                ContainerFailure::Image(cause) | ContainerFailure::Crashing(cause) => cause,
            };
            Some(format!("{}: {cause}", p.name))
        })
        .collect();
    let differs: Vec<&str> = pods
        .iter()
        .filter(|p| p.data_differs)
        .map(|p| p.name.as_str())
        .collect();
    // Alarms are the cluster's: every member reports each (naming the member it is about).
    let alarms: Vec<String> = observed
        .member_errors
        .values()
        .flatten()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .map(|e| checks::explain_member_error(e))
        .collect();
    let nodes_down = nodes_down_message(observed);
    let degraded = degraded
        || !alarms.is_empty()
        || !observed.foreign_pods.is_empty()
        || !nodes_down.is_empty();
    let (degraded_reason, degraded_message) = match outcome {
        Err(e) => (Degraded::MembersUnhealthy, e.to_string()),
        Ok(()) if !observed.foreign_pods.is_empty() => (
            Degraded::ForeignPod,
            format!(
                "pod {} carries this cluster's member labels but was not made by the operators (no proof of origin): it is not taken for a member, and nothing is created, removed or deleted until it is deleted (operators in different namespaces must share the Secret etcd-member-proof-key, or each other's pods look like this)",
                observed
                    .foreign_pods
                    .iter()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        Ok(()) if !differs.is_empty() => (
            Degraded::MemberDataDiffers,
            format!(
                "{}: etcd's initial corruption check found the member's data differs from its peers', so it does not start on it; it is not replaced automatically (its data is kept to be looked at): to replace it from the others, delete its claim, then its pod",
                differs.join(", ")
            ),
        ),
        Ok(()) if !alarms.is_empty() => (Degraded::EtcdAlarm, alarms.join("; ")),
        Ok(()) if !nodes_down.is_empty() => (Degraded::NodeDown, nodes_down.join("; ")),
        Ok(()) if !failures.is_empty() => (Degraded::MembersUnhealthy, failures.join("; ")),
        Ok(()) if degraded => (
            Degraded::MembersUnhealthy,
            format!("unready members: {}", unready.join(", ")),
        ),
        Ok(()) => (Degraded::AllHealthy, "every member is healthy".into()),
    };
    let conditions = vec![
        condition(cluster, available, available_reason, &available_message),
        condition(cluster, progressing, progress_reason, &progress_message),
        persistence(cluster, observed.persistent),
        condition(cluster, degraded, degraded_reason, &degraded_message),
        version_support(cluster),
    ];
    EtcdClusterStatus {
        phase: Some(phase),
        reason: (!available).then(|| available_reason.as_str().to_string()),
        control_paused: Some(false),
        size: Some(members.len() as i32),
        service_name: Some(format!(
            "{}-client",
            cluster.metadata.name.as_deref().unwrap_or_default()
        )),
        client_port: Some(2379),
        members: Some(MembersStatus {
            ready: Some(ready),
            unready: Some(unready),
        }),
        current_version: current,
        target_version,
        observed_generation: cluster.metadata.generation,
        conditions: Some(conditions),
        membership_change: change_record(cluster, &intent_after(step, &observed.intent)),
        defragmentation: None,
    }
}

/// Adds what `spec.quorumLoss` does about a lost quorum to the `Available` condition's message.
pub fn add_to_available(status: &mut EtcdClusterStatus, recovery: &str) {
    let available = status
        .conditions
        .iter_mut()
        .flatten()
        .find(|c| c.type_ == Available::TYPE);
    if let Some(c) = available {
        let message = c.message.get_or_insert_default();
        message.push_str("; automatic recovery: ");
        message.push_str(recovery);
    }
}

/// The Warnings a status calls for that the previous one did not: each condition that went
/// bad, or changed its cause while bad, as `(reason, message)`. Merely unready members (a
/// member starting) are no cause to announce.
pub fn new_warnings(
    previous: Option<&EtcdClusterStatus>,
    new: &EtcdClusterStatus,
) -> Vec<(String, String)> {
    let bad = |c: &ClusterCondition| -> Option<(String, String)> {
        let reason = c.reason.as_deref()?;
        let message = c.message.as_deref()?;
        let warn = match (c.type_.as_str(), c.status.as_str()) {
            (Available::TYPE, "False") => reason == Available::QuorumLost.as_str(),
            (Progressing::TYPE, "False") => [
                Progressing::InvalidSpec,
                Progressing::UpgradeRefused,
                Progressing::UpgradeFailed,
            ]
            .iter()
            .any(|r| r.as_str() == reason),
            (Degraded::TYPE, "True") => !message.starts_with("unready members"),
            (Defragmented::TYPE, "False") => true,
            (VersionSupported::TYPE, "False") => true,
            _ => false,
        };
        // The Degraded causes with a name of their own keep it; the others say Degraded.
        let reason = if c.type_ == Degraded::TYPE && reason == Degraded::MembersUnhealthy.as_str() {
            Degraded::TYPE
        } else {
            reason
        };
        warn.then(|| (reason.to_string(), message.to_string()))
    };
    let conditions = |status: Option<&EtcdClusterStatus>| -> Vec<ClusterCondition> {
        status
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default()
    };
    let before = conditions(previous);
    conditions(Some(new))
        .iter()
        .filter_map(|c| {
            let warning = bad(c)?;
            let was = before.iter().find(|p| p.type_ == c.type_).and_then(bad);
            (was.as_ref() != Some(&warning)).then_some(warning)
        })
        .collect()
}

/// Each member down with its node, and what happens to it. Stable while nothing changes (no
/// running count of seconds), so the Warning is said once.
fn nodes_down_message(observed: &MembershipObserved) -> Vec<String> {
    let then = match observed.replace_after_seconds {
        Some(after) => format!(
            "if it does not answer, it is replaced on another node after {after} s of this (spec.memberReplacement.afterSeconds), while the others keep quorum"
        ),
        None => "it is not replaced (spec.memberReplacement.enabled is false)".to_string(),
    };
    observed
        .nodes_down
        .iter()
        .map(|(member, down)| {
            let state = match (down.cordoned, down.for_seconds) {
                (true, _) => "is cordoned (drained) while the member's pod waits to start there",
                (false, Some(_)) => "is not Ready",
                (false, None) => "is gone from the cluster",
            };
            format!("member {member}'s node {} {state}; {then}", down.node)
        })
        .collect()
}

/// Whether `spec.version` is a supported line or 3.4, which is run only to upgrade from (the
/// spec was validated before: a version that does not parse is not reported here).
fn version_support(cluster: &EtcdCluster) -> ClusterCondition {
    let version = cluster.spec.version();
    let end_of_life = etcd_cluster::EtcdVersion::parse(version).is_ok_and(|v| v.minor() == (3, 4));
    if end_of_life {
        condition(
            cluster,
            false,
            VersionSupported::EndOfLife,
            &format!(
                "etcd {version} is end of life (no security fixes since 3.4's last release): this operator runs 3.4 only to upgrade from it; set spec.version to the newest 3.5 patch, then to 3.6 and 3.7 (the supported lines are 3.5, 3.6 and 3.7)"
            ),
        )
    } else {
        condition(
            cluster,
            true,
            VersionSupported::Supported,
            "a supported etcd line (3.5, 3.6 or 3.7)",
        )
    }
}

/// Where members keep their data: said in status, since emptyDir loses it with the pod.
fn persistence(cluster: &EtcdCluster, persistent: bool) -> ClusterCondition {
    if persistent {
        condition(
            cluster,
            true,
            DataPersistent::PersistentVolumeClaims,
            "each member keeps its data on its own claim",
        )
    } else {
        condition(
            cluster,
            false,
            DataPersistent::EmptyDir,
            "members keep their data in emptyDir: a member whose pod is deleted loses it and is replaced; set pod.persistentVolumeClaimSpec to keep it",
        )
    }
}

fn step_reason(step: &MembershipStep) -> Progressing {
    match step {
        MembershipStep::Seed { .. } => Progressing::CreatingSeed,
        MembershipStep::AddLearner { .. }
        | MembershipStep::StartMember { .. }
        | MembershipStep::Promote { .. } => Progressing::AddingMember,
        MembershipStep::RemoveMember {
            keep_claim: true, ..
        }
        | MembershipStep::DeleteMemberResources {
            keep_claim: true, ..
        } => Progressing::ReplacingLostMember,
        MembershipStep::RemoveMember { .. } | MembershipStep::DeleteMemberResources { .. } => {
            Progressing::RemovingMember
        }
        MembershipStep::DeletePod { .. } => Progressing::RestartingMember,
        MembershipStep::ClearIntent => Progressing::FinishingChange,
        _ => Progressing::Reconciling,
    }
}

/// Status of a paused cluster: hands off, but say so; the recorded change stays.
pub fn paused(cluster: &EtcdCluster) -> EtcdClusterStatus {
    let previous = cluster.status.clone().unwrap_or_default();
    let abandoned = cluster
        .annotations()
        .get(labels::ABANDONED_RESTORE_ANNOTATION);
    let (reason, message) = match abandoned {
        Some(restore) => (
            Progressing::HeldByAbandonedRestore,
            format!(
                "paused: EtcdRestore {restore} was deleted after it had begun replacing members, and nothing was deleted (its Warning event names the claims); create an EtcdRestore of this cluster again, or set spec.paused: false to manage what runs"
            ),
        ),
        None => (
            Progressing::Paused,
            "spec.paused is true: the operator does not touch this cluster".to_string(),
        ),
    };
    EtcdClusterStatus {
        // `""` (not null, which the schema refuses) for a cluster never looked at.
        phase: Some(previous.phase.unwrap_or(ClusterPhase::None)),
        control_paused: Some(true),
        observed_generation: cluster.metadata.generation,
        conditions: Some(vec![condition(cluster, false, reason, &message)]),
        membership_change: recorded_change(cluster).cloned(),
        ..Default::default()
    }
}

/// Status of a cluster whose spec is invalid: nothing is touched.
pub fn invalid(cluster: &EtcdCluster, problem: &str) -> EtcdClusterStatus {
    let previous = cluster.status.clone().unwrap_or_default();
    let message = format!("{problem}; nothing of the running cluster is changed");
    EtcdClusterStatus {
        // `""` (not null, which the schema refuses) for a cluster never looked at.
        phase: Some(previous.phase.unwrap_or(ClusterPhase::None)),
        reason: Some(Progressing::InvalidSpec.as_str().into()),
        observed_generation: cluster.metadata.generation,
        conditions: Some(vec![condition(
            cluster,
            false,
            Progressing::InvalidSpec,
            &message,
        )]),
        membership_change: recorded_change(cluster).cloned(),
        ..Default::default()
    }
}

/// The `Defragmented` condition from the last round: True when it went through, False (a
/// Warning when it turns so) when it stopped.
pub fn defragmented(
    cluster: &EtcdCluster,
    last: Option<&etcd_api::DefragRoundResult>,
) -> Option<ClusterCondition> {
    let last = last?;
    let succeeded = last.result == "Succeeded";
    let (reason, message) = if succeeded {
        (
            Defragmented::RoundSucceeded,
            format!("the round started {} went through", last.started),
        )
    } else if last.result == etcd_cluster::defrag::ROUND_FAILED {
        (
            Defragmented::DefragmentationFailed,
            last.reason.clone().unwrap_or_default(),
        )
    } else {
        (
            Defragmented::DefragmentationStopped,
            last.reason.clone().unwrap_or_default(),
        )
    };
    Some(condition(cluster, succeeded, reason, &message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_cluster::Member;
    use serde_json::json;

    #[test]
    fn quorum_is_lost_while_members_come_back_and_while_none_of_a_created_cluster_answers() {
        let voter = |id: u64, healthy: bool| Member {
            id,
            name: Some(format!("c-{id}")),
            started: true,
            learner: false,
            healthy,
            leader: false,
        };
        let wait = MembershipStep::Wait {
            reason: "restarting".into(),
        };
        let with = |members: Option<Vec<Member>>, bootstrapped: bool| MembershipObserved {
            members,
            bootstrapped,
            ..Default::default()
        };
        let one_of_three = with(
            Some(vec![voter(1, true), voter(2, false), voter(3, false)]),
            true,
        );
        let two_of_three = with(
            Some(vec![voter(1, true), voter(2, true), voter(3, false)]),
            true,
        );
        assert!(quorum_lost(&one_of_three, &wait));
        assert!(!quorum_lost(&two_of_three, &wait));
        assert!(quorum_lost(&with(None, true), &wait));
        // Not created yet: the seed is starting.
        assert!(!quorum_lost(&with(None, false), &wait));
        let lost = MembershipStep::QuorumLost {
            dead: vec![],
            reason: "gone".into(),
        };
        assert!(quorum_lost(&with(None, false), &lost));
    }

    #[test]
    fn a_3_4_cluster_is_told_end_of_life_once_with_the_supported_lines() {
        let cluster = |version: &str| -> EtcdCluster {
            serde_json::from_value(json!({
                "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
                "metadata": {"name": "c", "namespace": "ns", "generation": 1},
                "spec": {"size": 3, "version": version},
            }))
            .unwrap()
        };
        let eol = version_support(&cluster("3.4.23"));
        assert_eq!(
            (eol.status.as_str(), eol.reason.as_deref()),
            ("False", Some("EndOfLife"))
        );
        let message = eol.message.clone().unwrap();
        assert!(message.contains("3.5, 3.6 and 3.7"), "{message}");
        for supported in ["3.5.33", "3.6.16", "3.7.3"] {
            let ok = version_support(&cluster(supported));
            assert_eq!(ok.reason.as_deref(), Some("Supported"), "{supported}");
        }
        // A Warning when it turns so, not again while it stays so.
        let status = |condition: ClusterCondition| EtcdClusterStatus {
            conditions: Some(vec![condition]),
            ..Default::default()
        };
        let first = new_warnings(None, &status(eol.clone()));
        assert_eq!(first, vec![("EndOfLife".to_string(), message)]);
        assert!(new_warnings(Some(&status(eol.clone())), &status(eol)).is_empty());
    }

    #[test]
    fn a_failed_defragmentation_round_says_so_in_the_condition() {
        let cluster: EtcdCluster = serde_json::from_value(json!({
            "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
            "metadata": {"name": "c", "namespace": "ns", "generation": 1},
            "spec": {"size": 3},
        }))
        .unwrap();
        let round = |result: &str| etcd_api::DefragRoundResult {
            started: "2026-11-28T04:00:00Z".into(),
            finished: "2026-11-28T04:02:00Z".into(),
            result: result.into(),
            reason: Some("defragmenting c-2 failed: refused".into()),
            ..Default::default()
        };
        let failed =
            defragmented(&cluster, Some(&round(etcd_cluster::defrag::ROUND_FAILED))).unwrap();
        assert_eq!(
            (failed.status.as_str(), failed.reason.as_deref()),
            ("False", Some("DefragmentationFailed"))
        );
        assert_eq!(
            failed.message.as_deref(),
            Some("defragmenting c-2 failed: refused")
        );
        let stopped = defragmented(&cluster, Some(&round("Stopped"))).unwrap();
        assert_eq!(stopped.reason.as_deref(), Some("DefragmentationStopped"));
        let succeeded = defragmented(&cluster, Some(&round("Succeeded"))).unwrap();
        assert_eq!(
            (succeeded.status.as_str(), succeeded.reason.as_deref()),
            ("True", Some("RoundSucceeded"))
        );
    }

    #[test]
    fn an_unchanged_world_gives_the_same_status_so_the_write_is_a_no_op() {
        let mut cluster: EtcdCluster = serde_json::from_value(json!({
            "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
            "metadata": {"name": "c", "namespace": "ns", "generation": 2},
            "spec": {"size": 1, "version": "3.4.23"},
        }))
        .unwrap();
        let member = Member {
            id: 1,
            name: Some("c-0".into()),
            started: true,
            learner: false,
            healthy: true,
            leader: true,
        };
        let observed = MembershipObserved {
            members: Some(vec![member]),
            ..Default::default()
        };
        let pods = [MemberPod {
            name: "c-0".into(),
            state: PodState::Running { ready: true },
            ip: None,
            version: Some("3.4.23".into()),
            running_image: None,
            upgraded_from: None,
            failure: None,
            restarts: 0,
            backoff_seconds: None,
            check_spelling: None,
            data_differs: false,
            ran: None,
            node: None,
            created: None,
        }];
        let first = report(
            &cluster,
            &observed,
            &pods,
            &MembershipStep::Converged,
            None,
            &Ok::<(), String>(()),
        );
        cluster.status = Some(first.clone());
        let second = report(
            &cluster,
            &observed,
            &pods,
            &MembershipStep::Converged,
            None,
            &Ok::<(), String>(()),
        );
        assert_eq!(first, second);
        let first = serde_json::to_value(first).unwrap();
        assert_eq!(first["phase"], "Running");
        assert_eq!(first["conditions"][0]["observedGeneration"], 2);
        // A change moves lastUpdateTime (and lastTransitionTime when the status flips).
        let third = report(
            &cluster,
            &observed,
            &pods,
            &MembershipStep::Wait { reason: "x".into() },
            None,
            &Ok::<(), String>(()),
        );
        let third = serde_json::to_value(third).unwrap();
        assert_ne!(third["conditions"][1], first["conditions"][1]);
    }

    #[test]
    fn a_member_that_does_not_run_is_the_degraded_cause() {
        let cluster: EtcdCluster = serde_json::from_value(json!({
            "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
            "metadata": {"name": "c", "namespace": "ns", "generation": 1},
            "spec": {"size": 1, "version": "3.4.99"},
        }))
        .unwrap();
        let pods = [MemberPod {
            name: "c-0".into(),
            state: PodState::Pending,
            ip: None,
            version: Some("3.4.99".into()),
            running_image: None,
            upgraded_from: None,
            failure: Some(ContainerFailure::Image("ErrImagePull: not found".into())),
            restarts: 0,
            backoff_seconds: None,
            check_spelling: None,
            data_differs: false,
            ran: None,
            node: None,
            created: None,
        }];
        let step = MembershipStep::Wait {
            reason: "seed member c-0 is starting".into(),
        };
        let report = report(
            &cluster,
            &MembershipObserved::default(),
            &pods,
            &step,
            None,
            &Ok::<(), String>(()),
        );
        let warnings = new_warnings(None, &report);
        assert!(
            warnings.contains(&("Degraded".into(), "c-0: ErrImagePull: not found".into())),
            "{warnings:?}"
        );
        // Announced once: the same cause again is no new warning.
        assert!(new_warnings(Some(&report), &report).is_empty());
        // Merely unready members are no cause to announce.
        let mut starting = pods.clone();
        starting[0].failure = None;
        let report = report_of(&cluster, &starting, &step);
        assert!(
            !new_warnings(None, &report)
                .iter()
                .any(|(reason, _)| reason == "Degraded")
        );
    }

    fn report_of(
        cluster: &EtcdCluster,
        pods: &[MemberPod],
        step: &MembershipStep,
    ) -> EtcdClusterStatus {
        report(
            cluster,
            &MembershipObserved::default(),
            pods,
            step,
            None,
            &Ok::<(), String>(()),
        )
    }

    /// A cluster with `annotation` as its restored-by annotation and a recorded removal made
    /// when the annotation was `recorded_under`.
    fn with_recorded_removal(
        annotation: Option<&str>,
        recorded_under: Option<&str>,
    ) -> EtcdCluster {
        let annotations = match annotation {
            Some(uid) => json!({labels::RESTORED_BY_ANNOTATION: uid}),
            None => json!({}),
        };
        serde_json::from_value(json!({
            "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
            "metadata": {"name": "c", "namespace": "ns", "generation": 1, "annotations": annotations},
            "spec": {"size": 3},
            "status": {"phase": "Running", "membershipChange": {
                "action": "Remove", "member": "c-1", "memberID": "a1", "reason": "scale down",
                "started": "2026-11-30T00:00:00Z", "restoredBy": recorded_under,
            }},
        }))
        .unwrap()
    }

    #[test]
    fn when_a_restore_handed_the_cluster_over_after_a_change_was_recorded_the_change_is_dropped() {
        let stale = with_recorded_removal(Some("restore-2"), None);
        assert_eq!(intent(&stale), None);
        assert_eq!(intent_age_seconds(&stale), None);
        // Nor carried on by the paused or invalid status.
        assert_eq!(paused(&stale).membership_change, None);
        assert_eq!(invalid(&stale, "bad").membership_change, None);
        let older_restore = with_recorded_removal(Some("restore-2"), Some("restore-1"));
        assert_eq!(intent(&older_restore), None);
    }

    #[test]
    fn when_the_change_was_recorded_on_the_same_data_it_is_resumed() {
        let removal = Intent::Remove {
            member: Some("c-1".into()),
            id: 0xa1,
            reason: "scale down".into(),
            keep_claim: false,
        };
        for (annotation, recorded) in [(None, None), (Some("restore-1"), Some("restore-1"))] {
            let cluster = with_recorded_removal(annotation, recorded);
            assert_eq!(intent(&cluster), Some(removal.clone()), "{annotation:?}");
            assert!(paused(&cluster).membership_change.is_some());
        }
    }

    #[test]
    fn a_new_change_names_the_restore_the_data_came_from() {
        let cluster = with_recorded_removal(Some("restore-1"), Some("restore-1"));
        let change = change(
            &cluster,
            Intent::Add {
                member: "c-3".into(),
            },
        );
        assert_eq!(change.restored_by.as_deref(), Some("restore-1"));
        let never_restored = with_recorded_removal(None, None);
        let change = super::change(
            &never_restored,
            Intent::Add {
                member: "c-3".into(),
            },
        );
        assert_eq!(change.restored_by, None);
    }
}
