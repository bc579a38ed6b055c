//! Reading the world: how a restore pod did (and which container failed), and the restored
//! members' health (asked of each member over its pod IP, as the EtcdCluster operator does).

use std::collections::BTreeMap;
use std::time::Duration;

use etcd_members::access::Access;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodStatus};
use k8s_openapi::jiff::Timestamp;

use crate::plan::{Health, MemberProblem, NOT_STARTED, PodRun};

/// Waiting reasons that will not clear up on their own: the pod has failed.
const STUCK: [&str; 5] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
];

/// How long a restore pod may take to start a container (be scheduled, get its volumes
/// attached, pull its images) before the restore fails with the cause, by default: a pod that
/// is never scheduled (no node fits, or the backups' ReadWriteOnce claim is attached on
/// another node) would otherwise hold the cluster paused with no end.
pub const START_DEADLINE: Duration = Duration::from_secs(10 * 60);

/// Why a pod's containers have not started: the scheduler's word when it has not placed the
/// pod, else the first container's waiting reason.
fn not_started_because(status: &PodStatus) -> String {
    let unscheduled = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False");
    if let Some(c) = unscheduled {
        let reason = c.reason.as_deref().unwrap_or("not scheduled");
        return format!("{reason}: {}", c.message.as_deref().unwrap_or_default());
    }
    let waiting = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .find_map(|c| c.state.as_ref()?.waiting.clone());
    match waiting {
        Some(w) => format!(
            "{}: {}",
            w.reason.unwrap_or_default(),
            w.message.unwrap_or_default()
        ),
        None => "it was not scheduled".into(),
    }
}

/// How a `restartPolicy: Never` pod is doing at `now`, given `deadline` to start a container
/// (its stdout is read separately, when needed).
pub fn pod_run(pod: &Pod, now: Timestamp, deadline: Duration) -> PodRun {
    let status = pod.status.clone().unwrap_or_default();
    let containers: Vec<ContainerStatus> = status
        .init_container_statuses
        .clone()
        .unwrap_or_default()
        .into_iter()
        .chain(status.container_statuses.clone().unwrap_or_default())
        .collect();
    let failure = containers.iter().find_map(|c| {
        let state = c.state.as_ref()?;
        if let Some(done) = state.terminated.as_ref().filter(|t| t.exit_code != 0) {
            let why = done.message.clone().unwrap_or_default();
            let why = why.trim();
            let message = format!(
                "{} exited {}: {}",
                c.name,
                done.exit_code,
                if why.is_empty() {
                    done.reason.as_deref().unwrap_or("")
                } else {
                    why
                }
            );
            return Some((c.name.clone(), Some(done.exit_code), message));
        }
        let waiting = state.waiting.as_ref()?;
        let reason = waiting.reason.as_deref()?;
        STUCK.contains(&reason).then(|| {
            let message = format!(
                "{}: {reason}: {}",
                c.name,
                waiting.message.clone().unwrap_or_default()
            );
            (c.name.clone(), None, message)
        })
    });
    let started = containers.iter().any(|c| {
        c.state
            .as_ref()
            .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
    });
    match (status.phase.as_deref(), failure) {
        (_, Some((container, exit_code, message))) => PodRun::Failed {
            container,
            exit_code,
            message,
        },
        (Some("Succeeded"), None) => PodRun::Succeeded {
            output: String::new(),
        },
        (Some("Failed"), None) => PodRun::Failed {
            container: String::new(),
            exit_code: None,
            message: status.message.unwrap_or_else(|| "the pod failed".into()),
        },
        _ if started => PodRun::Running,
        _ => {
            let made = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
            let waited = made.map(|made| now.duration_since(made).unsigned_abs());
            match waited {
                Some(waited) if waited >= deadline => PodRun::Failed {
                    container: NOT_STARTED.into(),
                    exit_code: None,
                    message: format!(
                        "no container started within {} s: {}",
                        deadline.as_secs(),
                        not_started_because(&status)
                    ),
                },
                _ => PodRun::Waiting,
            }
        }
    }
}

/// Why a member pod (`restartPolicy: Always`) is not running, when the kubelet says: it ended
/// (evicted, or its node shut down) or a container keeps failing or cannot start.
pub fn member_problem(pod: &Pod) -> Option<MemberProblem> {
    let status = pod.status.as_ref()?;
    if status.phase.as_deref() == Some("Failed") {
        let why = [status.reason.as_deref(), status.message.as_deref()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(": ");
        return Some(MemberProblem::Ended(if why.is_empty() {
            "the pod failed".into()
        } else {
            why
        }));
    }
    // Not placed by the scheduler (no node fits, a volume attached elsewhere): said at once,
    // the restore waits with it in its condition.
    let unschedulable = status.conditions.iter().flatten().any(|c| {
        c.type_ == "PodScheduled"
            && c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
    });
    if unschedulable {
        return Some(MemberProblem::Stuck(format!(
            "not scheduled: {}",
            not_started_because(status)
        )));
    }
    let containers = status.init_container_statuses.iter().flatten();
    containers
        .chain(status.container_statuses.iter().flatten())
        .find_map(|c| {
            let waiting = c.state.as_ref()?.waiting.as_ref()?;
            let reason = waiting.reason.as_deref()?;
            (reason == "CrashLoopBackOff" || STUCK.contains(&reason)).then(|| {
                let last = c
                    .last_state
                    .as_ref()
                    .and_then(|s| s.terminated.as_ref())
                    .map(|t| format!(", last exit {}", t.exit_code))
                    .unwrap_or_default();
                MemberProblem::Stuck(format!(
                    "{}: {reason}{last}: {}",
                    c.name,
                    waiting.message.as_deref().unwrap_or("")
                ))
            })
        })
}

/// Each member's revision (when it answers without errors) and the voters in the member list.
pub async fn health(access: &Access, members: &[(String, String)]) -> Health {
    let mut health = Health::default();
    let mut list = None;
    for (name, ip) in members {
        let Ok(mut client) = access.connect(name, ip).await else {
            continue;
        };
        if let Ok(status) = client.status().await
            && status.errors().is_empty()
            && let Some(header) = status.header()
        {
            health.revisions.insert(name.clone(), header.revision());
        }
        if list.is_none() {
            list = client.member_list().await.ok();
        }
    }
    let voters: BTreeMap<String, bool> = list
        .iter()
        .flat_map(|l| l.members())
        .filter_map(|m| {
            let name = m
                .peer_urls()
                .iter()
                .find_map(|u| access.names.member_of_peer_url(u))?;
            Some((name, !m.is_learner()))
        })
        .collect();
    health.voters = voters
        .into_iter()
        .filter(|(_, voter)| *voter)
        .map(|(name, _)| name)
        .collect();
    health
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(status: &str) -> Pod {
        serde_saphyr::from_str(&format!("metadata: {{name: p}}\nstatus: {status}")).unwrap()
    }

    /// Issue 28 point 4: a pod none of whose containers starts is waited for up to its start
    /// deadline, then failed with the scheduler's words; a member pod that is not scheduled is
    /// named at once.
    #[test]
    fn a_pod_that_never_starts_fails_at_its_deadline_with_the_cause() {
        let made: Timestamp = "2026-11-26T03:00:00Z".parse().unwrap();
        let mut pod = pod(
            "{phase: Pending, conditions: [{type: PodScheduled, status: 'False', reason: Unschedulable,\
              message: '0/1 nodes are available: 1 node(s) had volume node affinity conflict.'}]}",
        );
        pod.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(made));
        let within = made + START_DEADLINE - Duration::from_secs(1);
        assert_eq!(pod_run(&pod, within, START_DEADLINE), PodRun::Waiting);
        match pod_run(&pod, made + START_DEADLINE, START_DEADLINE) {
            PodRun::Failed {
                container,
                exit_code: None,
                message,
            } => {
                assert_eq!(container, NOT_STARTED);
                assert!(message.contains("within 600 s"), "{message}");
                assert!(
                    message.contains("Unschedulable: 0/1 nodes are available"),
                    "{message}"
                );
            }
            other => panic!("expected a failure, got {other:?}"),
        }
        assert!(matches!(
            member_problem(&pod),
            Some(MemberProblem::Stuck(m)) if m.contains("volume node affinity conflict")
        ));
    }

    #[test]
    fn a_pod_waits_runs_or_fails_on_a_non_zero_exit_or_a_stuck_container() {
        // Nothing started yet (its claim not even mounted), then its fetch running.
        assert_eq!(
            pod_run(&pod("{phase: Pending}"), Timestamp::now(), START_DEADLINE),
            PodRun::Waiting
        );
        let fetching = pod(
            "{phase: Pending, initContainerStatuses: [{name: fetch, image: i, imageID: '', ready: false,\
              restartCount: 0, state: {running: {}}}]}",
        );
        assert_eq!(
            pod_run(&fetching, Timestamp::now(), START_DEADLINE),
            PodRun::Running
        );
        assert_eq!(
            pod_run(&pod("{phase: Succeeded}"), Timestamp::now(), START_DEADLINE),
            PodRun::Succeeded {
                output: String::new()
            }
        );
        let failed = pod(
            "{phase: Failed, initContainerStatuses: [{name: fetch, image: i, imageID: '', ready: false,\
              restartCount: 0, state: {terminated: {exitCode: 3, message: 'sha256 mismatch'}}}]}",
        );
        assert_eq!(
            pod_run(&failed, Timestamp::now(), START_DEADLINE),
            PodRun::Failed {
                container: "fetch".into(),
                exit_code: Some(3),
                message: "fetch exited 3: sha256 mismatch".into()
            }
        );
        let stuck = pod(
            "{phase: Pending, containerStatuses: [{name: restore, image: i, imageID: '', ready: false,\
              restartCount: 0, state: {waiting: {reason: ErrImagePull, message: 'not found'}}}]}",
        );
        assert!(
            matches!(pod_run(&stuck, Timestamp::now(), START_DEADLINE), PodRun::Failed { container, exit_code: None, message }
                if container == "restore" && message.contains("ErrImagePull"))
        );
    }

    #[test]
    fn a_member_pod_ended_or_stuck_is_told_apart_from_one_still_starting() {
        let evicted = pod("{phase: Failed, reason: Evicted, message: 'low on memory'}");
        assert_eq!(
            member_problem(&evicted),
            Some(MemberProblem::Ended("Evicted: low on memory".into()))
        );
        let crashing = pod(
            "{phase: Running, containerStatuses: [{name: etcd, image: i, imageID: '', ready: false,\
              restartCount: 4, state: {waiting: {reason: CrashLoopBackOff, message: 'back-off 40s'}},\
              lastState: {terminated: {exitCode: 1}}}]}",
        );
        assert_eq!(
            member_problem(&crashing),
            Some(MemberProblem::Stuck(
                "etcd: CrashLoopBackOff, last exit 1: back-off 40s".into()
            ))
        );
        let creating = pod(
            "{phase: Pending, containerStatuses: [{name: etcd, image: i, imageID: '', ready: false,\
              restartCount: 0, state: {waiting: {reason: ContainerCreating}}}]}",
        );
        assert_eq!(member_problem(&creating), None);
        let not_ready = pod(
            "{phase: Running, containerStatuses: [{name: etcd, image: i, imageID: '', ready: false,\
              restartCount: 0, state: {running: {}}}]}",
        );
        assert_eq!(member_problem(&not_ready), None);
    }
}
