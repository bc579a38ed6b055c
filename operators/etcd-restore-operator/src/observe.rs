//! Reading the world: the restore's pods, the cluster's member pods and claims ([`world`]), how
//! a restore pod did (and which container failed), and the restored members' health (asked of
//! each member over its pod IP, as the EtcdCluster operator does).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use etcd_api::{EtcdCluster, EtcdRestore, OldVolumesPolicy, RestorePlan};
use etcd_members::access::Access;
use etcd_members::build;
use etcd_members::labels::{self, DETACHED_LABEL};
use etcd_members::tls::{self, Dereferenced, TlsSecrets};
use fetch_pod::source::Source;
use k8s_openapi::api::core::v1::{ContainerStatus, PersistentVolumeClaim, Pod, PodStatus, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, LogParams};
use kube::core::{Selector, SelectorExt};
use kube::{Resource, ResourceExt};

use crate::context::{Context, Error};
use crate::pods;
use crate::status::{RESTORE_ANNOTATION, Records};
use etcd_cluster::restore_plan::{
    self, ClusterView, DELETION_OVERDUE_SECONDS, Health, KeySpace, MemberProblem, MemberStatus,
    NOT_STARTED, PodRun, RestoreFailure, RestoreObserved, ToolExit,
};

/// Waiting reasons that will not clear up on their own: the pod has failed.
const STUCK: [&str; 5] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
];

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

/// What a container's exit code says, in `etcd-backup`'s exit codes (defined in command-line).
fn tool_exit(code: i32) -> ToolExit {
    match u8::try_from(code) {
        Ok(command_line::EXIT_DATA_BAD) => ToolExit::DataBad,
        Ok(command_line::EXIT_NO_USABLE_IDENTITY) => ToolExit::NoUsableIdentity,
        Ok(command_line::EXIT_FAILED) => ToolExit::Failed,
        _ => ToolExit::Other(code),
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
    // A sidecar (the scratch member of a restore to a point) is stopped by the kubelet once
    // the pod's work is done, with whatever code etcd gives SIGTERM: that says nothing.
    let sidecars: Vec<&str> = pod
        .spec
        .iter()
        .flat_map(|spec| spec.init_containers.iter().flatten())
        .filter(|c| c.restart_policy.as_deref() == Some("Always"))
        .map(|c| c.name.as_str())
        .collect();
    let failure = containers.iter().find_map(|c| {
        let state = c.state.as_ref()?;
        let ended = state
            .terminated
            .as_ref()
            .filter(|t| t.exit_code != 0 && !sidecars.contains(&c.name.as_str()));
        if let Some(done) = ended {
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
            return Some((c.name.clone(), Some(tool_exit(done.exit_code)), message));
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
        (_, Some((container, exit, message))) => PodRun::Failed {
            container,
            exit,
            message,
        },
        (Some("Succeeded"), None) => PodRun::Succeeded {
            output: String::new(),
        },
        (Some("Failed"), None) => PodRun::Failed {
            container: String::new(),
            exit: None,
            message: status.message.unwrap_or_else(|| "the pod failed".into()),
        },
        _ if started => PodRun::Running,
        _ => {
            let made = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
            let waited = made.map(|made| now.duration_since(made).unsigned_abs());
            match waited {
                Some(waited) if waited >= deadline => PodRun::Failed {
                    container: NOT_STARTED.into(),
                    exit: None,
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

/// Each member's revision (when it answers without errors) and the voters in the member list;
/// with `read_at`, the key space at that revision, read from the first member that serves it.
pub async fn health(access: &Access, members: &[(String, String)], read_at: Option<i64>) -> Health {
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
            if let Some(at) = read_at.filter(|at| header.revision() >= *at)
                && health.contents.is_none()
            {
                health.contents = read_key_space(&mut client, name, at).await;
            }
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

/// `pod`'s graceful deletion is overdue at `now`: its deletion timestamp (the end of its grace
/// period) passed more than [`DELETION_OVERDUE_SECONDS`] ago and it is still there.
fn deletion_overdue(pod: &Pod, now: Timestamp) -> bool {
    pod.meta()
        .deletion_timestamp
        .as_ref()
        .is_some_and(|t| now.as_second() - t.0.as_second() > DELETION_OVERDUE_SECONDS)
}

/// What each member answers of its status (a recovery from a survivor): its term, committed
/// index, revision, and whether it knows a leader. Members that do not answer in time (their
/// node is down) are left out.
pub async fn member_statuses(
    access: &Access,
    members: &[(String, String, Option<String>)],
) -> Vec<MemberStatus> {
    // Asked all at once: a member on a node that is down answers nothing until the timeout.
    let asked = members.iter().map(|(name, ip, node)| async move {
        let mut client = access.connect(name, ip).await.ok()?;
        let status = client.status().await.ok()?;
        let header = status.header()?;
        Some(MemberStatus {
            member: name.clone(),
            raft_term: status.raft_term(),
            raft_index: status.raft_index(),
            revision: header.revision(),
            has_leader: status.leader() != 0,
            node: node.clone(),
        })
    });
    futures::future::join_all(asked)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// The key space `member` serves at `at`; `None` (asked again next time) when it could not
/// be read.
async fn read_key_space(
    client: &mut etcd_client::Client,
    member: &str,
    at: i64,
) -> Option<KeySpace> {
    match etcd_snapshot::contents::key_space(client, member, at).await {
        Ok((key_count, content_sha256)) => Some(KeySpace {
            revision: at,
            key_count,
            content_sha256,
        }),
        Err(e) => {
            tracing::warn!(%member, revision = at, error = %e, "could not read the restored key space");
            None
        }
    }
}

/// What one reconcile sees: the restore's recorded status and the world, for the planner.
pub struct World {
    pub observed: RestoreObserved,
    /// The nodes each planned member's restore is tied to ([`pods::restore_nodes`]).
    pub restore_nodes: BTreeMap<String, BTreeSet<String>>,
    /// Pods of an earlier restore of the same name, still there: to be deleted.
    pub stale_pods: Vec<String>,
}

/// Reads the world for `restore` (its status read fresh by the caller): the cluster's member
/// pods (only those the operators made) and claims, claims detached from it, this restore's
/// pods and staged claims, the fetch reports once every restore pod succeeded, and the
/// members' health once all are ready. `source`: where the snapshot is, or what is wrong
/// with it; `cluster`: the EtcdCluster restored, when it exists.
pub async fn world(
    ctx: &Context,
    restore: &EtcdRestore,
    source: &Result<Source, etcd_cluster::restore_plan::SourceProblem>,
    cluster: Option<&EtcdCluster>,
) -> Result<World, Error> {
    let ns = restore.namespace().unwrap_or_default();
    let name = restore.name_any();
    let cluster_name = restore.spec.etcd_cluster.name.clone();
    let recorded = restore.status.clone().unwrap_or_default();
    let pod_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let members = ListParams::default().labels(&labels::label_selector(&cluster_name));
    // Only the pods the operators made count as members (a pod that passes for one is not
    // asked whether the restored data is served).
    let member_pods: Vec<Pod> = pod_api
        .list(&members)
        .await?
        .items
        .into_iter()
        .filter(|p| ctx.proof.origin(p).is_member())
        .collect();
    // Every claim of the namespace, read once (one consistent view): the cluster's, those
    // detached from it earlier, those made for restores of this name and not yet given to the
    // cluster, and the names a new member must not take, whoever's claims they are. Listed
    // live when the restore's spec or recorded step, or the cluster (its operator reporting
    // the pause, after which it writes no claim), changed since the last look; from the claim
    // cache while nothing did (see `etcd_members::claims`).
    let look = format!(
        "{:?} {} {:?}",
        restore.metadata.generation,
        serde_json::to_string(&Records::of(restore)).unwrap_or_default(),
        cluster.map(|c| (c.uid(), c.resource_version())),
    );
    let uid = restore.uid().unwrap_or_default();
    let every_claim = ctx.claims.for_object(&ns, &uid, look).await?;
    let labelled = |labels: BTreeMap<String, String>| {
        let selector = Selector::from_iter(labels);
        every_claim
            .iter()
            .filter(move |c| selector.matches(c.labels()))
    };
    let claims: Vec<&PersistentVolumeClaim> = labelled(labels::selector(&cluster_name)).collect();
    let staged_claims: Vec<&PersistentVolumeClaim> = labelled(pods::own_labels(&name)).collect();
    let uid = restore.uid().unwrap_or_default();
    let detached: Vec<&PersistentVolumeClaim> =
        labelled([(DETACHED_LABEL.to_string(), cluster_name.clone())].into()).collect();
    let detached_claims: BTreeSet<String> = detached.iter().map(|c| c.name_any()).collect();
    // Its detach step writes its uid on each claim it detaches.
    let detached_by_this: BTreeSet<String> = detached
        .iter()
        .filter(|c| c.annotations().get(RESTORE_ANNOTATION) == Some(&uid))
        .map(|c| c.name_any())
        .collect();
    let own = ListParams::default().labels(&pods::label_selector(&name));
    // This restore's pods; those of an earlier restore of the same name (deleted, its pods
    // not yet collected) are not read: the controller deletes them.
    let (own_pods, stale): (Vec<Pod>, Vec<Pod>) = pod_api
        .list(&own)
        .await?
        .items
        .into_iter()
        .partition(|p| p.owner_references().iter().any(|o| o.uid == uid));
    let plan_recorded = recorded.plan.clone();
    let planned_members: Vec<String> = plan_recorded
        .iter()
        .flat_map(|p| p.members.clone())
        .collect();
    // The nodes each member's restore is tied to, pods being deleted included: a pod made late
    // keeps off its siblings' when the pods must be one per node.
    let restore_nodes = pods::restore_nodes(&planned_members, &own_pods, &staged_claims);
    // Pods being deleted count as gone (a discarded restore waits for its claims instead).
    let own_pods: BTreeMap<String, Pod> = own_pods
        .into_iter()
        .filter(|p| p.meta().deletion_timestamp.is_none())
        .map(|p| (p.name_any(), p))
        .collect();
    let mut restore_pods: BTreeMap<String, PodRun> = planned_members
        .iter()
        .filter_map(|m| {
            let pod = own_pods.get(&pods::restore_pod_name(m))?;
            Some((
                m.clone(),
                pod_run(pod, Timestamp::now(), ctx.start_deadline),
            ))
        })
        .collect();
    // The fetches' reports are read once every member's restore succeeded, until the snapshot
    // they verified is recorded.
    let all_restored = !planned_members.is_empty()
        && planned_members
            .iter()
            .all(|m| matches!(restore_pods.get(m), Some(PodRun::Succeeded { .. })));
    if all_restored && recorded.snapshot.is_none() {
        for member in &planned_members {
            let pod = pods::restore_pod_name(member);
            let report = pods::report_container(restore);
            let fetched = pod_api.logs(&pod, &report_log(report)).await?;
            // The restore tool's log says the snapshot's own revision (restore_plan::fetch_report::parse_verified).
            let restored = pod_api.logs(&pod, &report_log("restore")).await?;
            let output = format!("{fetched}\n{restored}");
            restore_pods.insert(member.clone(), PodRun::Succeeded { output });
        }
    }
    let ready: BTreeMap<String, bool> = member_pods
        .iter()
        .filter(|p| p.meta().deletion_timestamp.is_none())
        .map(|p| (p.name_any(), is_ready(p)))
        .collect();
    // The restored key space is read only while the planner compares it with the record.
    let read_at = match (&recorded.snapshot, &plan_recorded) {
        (Some(snapshot), Some(plan)) if plan.handed_over != Some(true) => {
            restore_plan::key_space_to_check(
                recorded.expected_backup.as_ref(),
                snapshot,
                recorded.revision_bumped.unwrap_or(false),
            )
            .map(|(_, at)| at)
        }
        _ => None,
    };
    let health = match (cluster, &plan_recorded) {
        (Some(cluster), Some(plan)) if plan.members.iter().all(|m| ready.get(m) == Some(&true)) => {
            member_health(ctx, cluster, plan, &member_pods, read_at).await?
        }
        _ => None,
    };
    // A recovery from a survivor asks the old members until their snapshot is recorded.
    let from_survivor = restore.spec.from_survivor.is_some();
    let member_statuses = match cluster {
        Some(cluster) if from_survivor && recorded.snapshot.is_none() => {
            let old: Vec<&Pod> = member_pods
                .iter()
                .filter(|p| p.meta().deletion_timestamp.is_none())
                .filter(|p| !planned_members.contains(&p.name_any()))
                .collect();
            old_member_statuses(ctx, cluster, &old).await?
        }
        _ => Vec::new(),
    };
    let observed = RestoreObserved {
        uid: uid.clone(),
        phase: recorded.phase,
        snapshot: recorded.snapshot.clone(),
        expected: recorded.expected_backup.clone(),
        plan: plan_recorded.clone(),
        revision_bumped: recorded.revision_bumped,
        restored_revision: recorded.restored_revision,
        source_url: source.as_ref().map(|s| s.url.clone()).unwrap_or_default(),
        source_problem: source.as_ref().err().cloned(),
        cluster: cluster.map(cluster_view),
        member_pods: ready,
        member_problems: member_pods
            .iter()
            .filter(|p| p.meta().deletion_timestamp.is_none())
            .filter_map(|p| Some((p.name_any(), member_problem(p)?)))
            .collect(),
        member_pods_going: member_pods
            .iter()
            .filter(|p| p.meta().deletion_timestamp.is_some())
            .map(|p| p.name_any())
            .collect(),
        member_pods_overdue: member_pods
            .iter()
            .filter(|p| deletion_overdue(p, Timestamp::now()))
            .map(|p| p.name_any())
            .collect(),
        claims: claims
            .iter()
            .filter(|c| c.meta().deletion_timestamp.is_none())
            .map(|c| c.name_any())
            .collect(),
        detached_by_this,
        detached_claims,
        all_claims: every_claim.iter().map(|c| c.name_any()).collect(),
        staged_claims: staged_claims
            .iter()
            .filter(|c| c.meta().deletion_timestamp.is_none())
            .map(|c| c.name_any())
            .collect(),
        terminating: member_pods
            .iter()
            .map(|p| p.meta())
            .chain(claims.iter().map(|c| c.meta()))
            .chain(staged_claims.iter().map(|c| c.meta()))
            .filter(|m| m.deletion_timestamp.is_some())
            .filter_map(|m| m.name.clone())
            .collect(),
        restore_pods,
        failing: recorded.reason.as_deref().map(RestoreFailure::from_record),
        health,
        // A lost member may hold writes the survivor missed: its volume is never deleted.
        delete_old_volumes: !from_survivor
            && restore.spec.old_volumes.unwrap_or_default() == OldVolumesPolicy::Delete,
        can_create_cluster: !from_survivor && restore.spec.new_cluster.is_some(),
        from_survivor,
        survivor_asked: restore
            .spec
            .from_survivor
            .as_ref()
            .and_then(|s| s.member.clone()),
        member_statuses,
    };
    Ok(World {
        observed,
        restore_nodes,
        stale_pods: stale.iter().map(|p| p.name_any()).collect(),
    })
}

fn cluster_view(cluster: &EtcdCluster) -> ClusterView {
    let status = cluster.status.clone().unwrap_or_default();
    ClusterView {
        paused: cluster.spec.is_paused(),
        pause_seen: status.control_paused == Some(true)
            && status.observed_generation >= cluster.metadata.generation,
        restore: cluster.annotations().get(RESTORE_ANNOTATION).cloned(),
        size: cluster.spec.size.max(1) as usize,
        version: cluster.spec.version().to_string(),
        persistent: build::persistent(&cluster.spec),
    }
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The statuses of the old members `pods`, with the cluster's client TLS when it has it.
async fn old_member_statuses(
    ctx: &Context,
    cluster: &EtcdCluster,
    pods: &[&Pod],
) -> Result<Vec<MemberStatus>, Error> {
    let Some(access) = member_access(ctx, cluster).await? else {
        return Ok(Vec::new());
    };
    let members: Vec<(String, String, Option<String>)> = pods
        .iter()
        .filter_map(|p| {
            let ip = p.status.as_ref()?.pod_ip.clone()?;
            let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
            Some((p.name_any(), ip, node))
        })
        .collect();
    Ok(member_statuses(&access, &members).await)
}

/// How to reach the cluster's members; `None` while its TLS Secrets cannot be read.
async fn member_access(ctx: &Context, cluster: &EtcdCluster) -> Result<Option<Access>, Error> {
    let ns = cluster.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let Dereferenced::Ready(client_tls) =
        tls::dereference(&secrets, &ns, &TlsSecrets::of(&cluster.spec)).await?
    else {
        return Ok(None);
    };
    Ok(Some(Access {
        names: build::names(cluster),
        tls: client_tls,
    }))
}

/// The planned members' health, with the cluster's client TLS when it has it.
async fn member_health(
    ctx: &Context,
    cluster: &EtcdCluster,
    plan: &RestorePlan,
    member_pods: &[Pod],
    read_at: Option<i64>,
) -> Result<Option<Health>, Error> {
    let Some(access) = member_access(ctx, cluster).await? else {
        return Ok(None);
    };
    let members: Vec<(String, String)> = member_pods
        .iter()
        .filter(|p| plan.members.contains(&p.name_any()))
        .filter_map(|p| Some((p.name_any(), p.status.as_ref()?.pod_ip.clone()?)))
        .collect();
    Ok(Some(health(&access, &members, read_at).await))
}

/// How much of a restore pod container's log is read: its last lines, bounded in bytes. The
/// report the restore needs is at the end (the fetch's JSON line, etcdutl's "bumping latest
/// revision" among its last lines), and the container runs the tenant's image, which could
/// otherwise make the operator read hundreds of MiB.
fn report_log(container: &str) -> LogParams {
    LogParams {
        container: Some(container.into()),
        tail_lines: Some(REPORT_LOG_LINES),
        limit_bytes: Some(REPORT_LOG_BYTES),
        ..LogParams::default()
    }
}

/// The last lines of a restore pod container's log that are read, and at most how many bytes.
const REPORT_LOG_LINES: i64 = 200;
const REPORT_LOG_BYTES: i64 = 256 * 1024;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::START_DEADLINE;

    fn pod(status: &str) -> Pod {
        serde_saphyr::from_str(&format!("metadata: {{name: p}}\nstatus: {status}")).unwrap()
    }

    #[test]
    fn a_pods_deletion_is_overdue_30_s_after_its_grace_period_ended() {
        let going = |at: &str| -> Pod {
            serde_saphyr::from_str(&format!("metadata: {{name: p, deletionTimestamp: '{at}'}}"))
                .unwrap()
        };
        let now: Timestamp = "2026-11-30T10:01:00Z".parse().unwrap();
        assert!(!deletion_overdue(&going("2026-11-30T10:00:31Z"), now));
        assert!(deletion_overdue(&going("2026-11-30T10:00:29Z"), now));
        assert!(!deletion_overdue(&pod("{phase: Running}"), now));
    }

    #[test]
    fn a_stopped_sidecar_does_not_fail_a_pod_whose_work_succeeded() {
        let done: Pod = serde_saphyr::from_str(
            "metadata: {name: p}\n\
             spec: {containers: [{name: restore}], initContainers: [{name: scratch-etcd, restartPolicy: Always}]}\n\
             status: {phase: Succeeded, initContainerStatuses: [{name: scratch-etcd, image: i, imageID: '',\
               ready: false, restartCount: 0, state: {terminated: {exitCode: 143}}}]}",
        )
        .unwrap();
        assert_eq!(
            pod_run(&done, Timestamp::now(), START_DEADLINE),
            PodRun::Succeeded {
                output: String::new()
            }
        );
        // The same exit from a container that does the work is a failure.
        let mut failed = done;
        let spec = failed.spec.as_mut().unwrap();
        spec.init_containers.as_mut().unwrap()[0].restart_policy = None;
        assert!(matches!(
            pod_run(&failed, Timestamp::now(), START_DEADLINE),
            PodRun::Failed {
                exit: Some(ToolExit::Other(143)),
                ..
            }
        ));
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
                exit: None,
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
                exit: Some(ToolExit::DataBad),
                message: "fetch exited 3: sha256 mismatch".into()
            }
        );
        let stuck = pod(
            "{phase: Pending, containerStatuses: [{name: restore, image: i, imageID: '', ready: false,\
              restartCount: 0, state: {waiting: {reason: ErrImagePull, message: 'not found'}}}]}",
        );
        assert!(
            matches!(pod_run(&stuck, Timestamp::now(), START_DEADLINE), PodRun::Failed { container, exit: None, message }
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

    #[test]
    fn a_restore_pod_log_is_read_from_its_tail_and_bounded() {
        let params = report_log("fetch");
        assert_eq!(params.container.as_deref(), Some("fetch"));
        assert_eq!(params.tail_lines, Some(REPORT_LOG_LINES));
        assert_eq!(params.limit_bytes, Some(REPORT_LOG_BYTES));
    }
}
