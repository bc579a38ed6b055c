//! Reads the world: the cluster's member pods and claims from Kubernetes, and etcd's member list
//! with each member's health, asked of the members themselves ([`Access`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use etcd_client::{Client, StatusResponse};
use etcd_cluster::checks::{self, Spelling};
use etcd_cluster::plan::NodeDown;
use etcd_cluster::upgrade::SNAPSHOT_SAVES_METRIC;
use etcd_cluster::{ClusterNames, ContainerFailure, DataRan, Member, PodState};
use k8s_openapi::api::core::v1::{ContainerStatus, Node, PersistentVolumeClaim, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use etcd_members::access::Access;
use etcd_members::build::METRICS_PORT;
use etcd_members::labels::{
    APP_LABEL, CLUSTER_LABEL, MEMBER_LABEL, NOTHING_RAN, UPGRADED_FROM_ANNOTATION,
    VERSION_ANNOTATION, VERSION_RAN_ANNOTATION,
};

/// A member pod with what the planner and the status need.
#[derive(Clone, Debug)]
pub struct MemberPod {
    pub name: String,
    pub state: PodState,
    pub ip: Option<String>,
    /// The etcd version it runs (`etcd.version` annotation).
    pub version: Option<String>,
    /// The image the etcd container runs now (from its status: after an in-place upgrade
    /// patch, the old one until the kubelet has restarted the container).
    pub running_image: Option<String>,
    /// The version an in-place upgrade moved it from (until the upgrade is done).
    pub upgraded_from: Option<String>,
    /// Why the etcd container does not run, if it does not.
    pub failure: Option<ContainerFailure>,
    /// How often the kubelet has restarted the etcd container (over the pod's life).
    pub restarts: i32,
    /// The kubelet's current crash back-off, in seconds: it doubles with each consecutive
    /// crash (10, 20, 40, ...) and starts over once the container has run for 10 minutes.
    pub backoff_seconds: Option<u64>,
    /// How its environment spells the corruption checks (`None`: not ours).
    pub check_spelling: Option<Spelling>,
    /// Its etcd last exited because its initial corruption check found its data differs from
    /// its peers' (its termination message says so).
    pub data_differs: bool,
    /// The version its etcd container has run in this pod, if it has run (it runs, or crashed
    /// after starting) the image of its `etcd.version`.
    pub ran: Option<String>,
    /// The node it is scheduled on.
    pub node: Option<String>,
    /// When the pod was created (seconds since the epoch).
    pub created: Option<i64>,
}

/// A back-off this long means at least three crashes in a row (10 s, 20 s, 40 s), whatever
/// the pod's lifetime restart count (which grows with every in-place upgrade) says.
pub const CRASH_BACKOFF_SECONDS: u64 = 40;

impl MemberPod {
    /// Why this member cannot rejoin, if it keeps crashing outside an upgrade (a failed
    /// upgrade is handled as such, not by replacing the member).
    pub fn crash_loop(&self) -> Option<String> {
        match (&self.failure, self.backoff_seconds) {
            // Not replaced: which copy is wrong is for a human to judge (the status says how).
            _ if self.data_differs => None,
            (Some(ContainerFailure::Crashing(cause)), Some(backoff))
                if backoff >= CRASH_BACKOFF_SECONDS && self.upgraded_from.is_none() =>
            {
                Some(format!(
                    "{cause}; crashing again and again (back-off {backoff} s)"
                ))
            }
            _ => None,
        }
    }
}

/// The kubelet's back-off from a CrashLoopBackOff message (`back-off 1m20s restarting failed
/// container=...`), in seconds.
pub fn backoff_seconds(message: &str) -> Option<u64> {
    let rest = message.split("back-off ").nth(1)?;
    let duration = rest.split_whitespace().next()?;
    let (minutes, seconds) = match duration.split_once('m') {
        Some((m, s)) => (m.parse::<u64>().ok()?, s),
        None => (0, duration),
    };
    let seconds: u64 = seconds.strip_suffix('s')?.parse().ok()?;
    Some(minutes * 60 + seconds)
}

/// The message without the back-off duration, which changes with every crash: the cause
/// stays the same text while the cause is the same.
fn without_backoff(message: &str) -> String {
    match message.split_once("back-off ") {
        Some((before, after)) => {
            let rest = after.split_once(' ').map_or("", |(_, r)| r);
            format!("{before}back-off {rest}").trim().to_string()
        }
        None => message.to_string(),
    }
}

/// The kubelet's waiting reasons that mean the container will not run without help.
fn container_failure(status: &ContainerStatus) -> Option<ContainerFailure> {
    let waiting = status.state.as_ref()?.waiting.as_ref()?;
    let reason = waiting.reason.as_deref()?;
    let cause = match &waiting.message {
        Some(message) => format!("{reason}: {}", without_backoff(message)),
        None => reason.to_string(),
    };
    match reason {
        "ErrImagePull" | "ImagePullBackOff" | "InvalidImageName" | "ErrImageNeverPull" => {
            Some(ContainerFailure::Image(cause))
        }
        "CrashLoopBackOff" | "CreateContainerError" | "RunContainerError" => {
            Some(ContainerFailure::Crashing(cause))
        }
        _ => None,
    }
}

pub fn member_pods(pods: &[Pod]) -> Vec<MemberPod> {
    pods.iter()
        .filter_map(|pod| {
            let name = pod.labels().get(MEMBER_LABEL)?.clone();
            let status = pod.status.as_ref();
            let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
            let ready = status
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let state = if pod.metadata.deletion_timestamp.is_some() {
                PodState::Terminating
            } else {
                match phase {
                    "Running" => PodState::Running { ready },
                    "Failed" | "Succeeded" => PodState::Failed,
                    _ => PodState::Pending,
                }
            };
            let ip = status
                .and_then(|s| s.pod_ip.clone())
                .filter(|ip| !ip.is_empty());
            let version = pod.annotations().get(VERSION_ANNOTATION).cloned();
            let etcd = status
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|c| c.iter().find(|c| c.name == "etcd"));
            let env_names = pod
                .spec
                .iter()
                .flat_map(|s| s.containers.iter().filter(|c| c.name == "etcd"))
                .flat_map(|c| c.env.iter().flatten())
                .map(|e| e.name.as_str());
            let last_words = etcd.and_then(|c| {
                c.last_state
                    .as_ref()?
                    .terminated
                    .as_ref()?
                    .message
                    .as_deref()
            });
            let spec_image = pod
                .spec
                .iter()
                .flat_map(|s| s.containers.iter().filter(|c| c.name == "etcd"))
                .find_map(|c| c.image.clone());
            let started = etcd.and_then(|c| c.state.as_ref()).is_some_and(|s| {
                s.running.is_some()
                    || s.terminated.is_some()
                    || s.waiting.as_ref().and_then(|w| w.reason.as_deref())
                        == Some("CrashLoopBackOff")
            });
            let ran_spec_image = match (etcd, &spec_image) {
                (Some(c), Some(spec)) => same_image(&c.image, spec),
                _ => false,
            };
            Some(MemberPod {
                node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
                created: pod
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| t.0.as_second()),
                ran: version.clone().filter(|_| started && ran_spec_image),
                data_differs: last_words.is_some_and(checks::initial_check_failed),
                check_spelling: Spelling::of_env(env_names),
                running_image: etcd.map(|c| c.image.clone()),
                upgraded_from: pod.annotations().get(UPGRADED_FROM_ANNOTATION).cloned(),
                failure: etcd.and_then(container_failure),
                restarts: etcd.map_or(0, |c| c.restart_count),
                backoff_seconds: etcd
                    .and_then(|c| c.state.as_ref()?.waiting.as_ref()?.message.as_deref())
                    .and_then(backoff_seconds),
                name,
                state,
                ip,
                version,
            })
        })
        .collect()
}

/// What a member's claim records about its data (annotations).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimRecord {
    /// The claim as observed (name, uid, resourceVersion): a deletion is made on this very
    /// claim, unchanged, only.
    pub name: String,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    /// The etcd version its data was last run with.
    pub version: Option<String>,
    /// The version an unfinished in-place upgrade moved it from.
    pub upgraded_from: Option<String>,
    /// The newest version that has run on its data (`VERSION_RAN_ANNOTATION`).
    pub data_ran: DataRan,
    /// The node the scheduler chose for its volume (node-local volumes stay there).
    pub node: Option<String>,
}

/// The annotation the scheduler puts on a claim it chose a node for (`WaitForFirstConsumer`).
const SELECTED_NODE_ANNOTATION: &str = "volume.kubernetes.io/selected-node";

/// Whether the image a container status reports is `spec` (the runtime may add a registry
/// host such as `docker.io/library/` to short names).
pub fn same_image(running: &str, spec: &str) -> bool {
    running == spec || running.ends_with(&format!("/{spec}"))
}

/// Data claims that are not being deleted, by member name, with what they record.
pub fn live_claims(claims: &[PersistentVolumeClaim]) -> BTreeMap<String, ClaimRecord> {
    claims
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter_map(|c| {
            let member = c.labels().get(MEMBER_LABEL)?.clone();
            let record = ClaimRecord {
                name: c.name_any(),
                uid: c.uid(),
                resource_version: c.resource_version(),
                version: c.annotations().get(VERSION_ANNOTATION).cloned(),
                upgraded_from: c.annotations().get(UPGRADED_FROM_ANNOTATION).cloned(),
                data_ran: match c
                    .annotations()
                    .get(VERSION_RAN_ANNOTATION)
                    .map(String::as_str)
                {
                    None => DataRan::Unknown,
                    Some(NOTHING_RAN) => DataRan::Nothing,
                    Some(version) => DataRan::Version(version.to_string()),
                },
                node: c.annotations().get(SELECTED_NODE_ANNOTATION).cloned(),
            };
            Some((member, record))
        })
        .collect()
}

/// The cluster's Nodes, or `None` when the operator may not read them (a namespaced install
/// without the `nodes` grant): then no member is taken for lost with its node, and none is
/// replaced for it. Said once in the log.
pub async fn nodes(client: &kube::Client) -> Result<Option<Vec<Node>>, kube::Error> {
    static SAID: std::sync::Once = std::sync::Once::new();
    match Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(list) => Ok(Some(list.items)),
        Err(kube::Error::Api(e)) if e.code == 403 => {
            SAID.call_once(|| {
                tracing::info!(
                    "the operator may not list Nodes: members on lost nodes are not replaced (see docs/install.md)"
                );
            });
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Members whose node is down, by member name: the node their pod is scheduled on, or for a
/// member without a pod the node its claim's volume was placed on. A node is down when its
/// `Ready` condition is not `True` (for as long as since it changed), or when it is gone from
/// the API; and for a member whose pod waits to be scheduled (`Pending`) when the node is
/// cordoned (a drain: for as long as the pod has waited). Nothing when the Nodes could not be
/// read.
pub fn nodes_down(
    pods: &[MemberPod],
    claims: &BTreeMap<String, ClaimRecord>,
    nodes: Option<&[Node]>,
    now: chrono::DateTime<chrono::Utc>,
) -> BTreeMap<String, NodeDown> {
    let Some(nodes) = nodes else {
        return BTreeMap::new();
    };
    let mut placed: BTreeMap<&str, &str> = claims
        .iter()
        .filter_map(|(member, c)| Some((member.as_str(), c.node.as_deref()?)))
        .collect();
    for pod in pods {
        if let Some(node) = &pod.node {
            placed.insert(&pod.name, node);
        }
    }
    let seconds_since = |t: i64| now.timestamp().saturating_sub(t).max(0) as u64;
    placed
        .into_iter()
        .filter_map(|(member, node)| {
            let down = |for_seconds, cordoned, fenced| NodeDown {
                node: node.to_string(),
                for_seconds,
                cordoned,
                fenced,
            };
            let Some(found) = nodes.iter().find(|n| n.name_any() == node) else {
                return Some((member.to_string(), down(None, false, true)));
            };
            let ready = found
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))?;
            if ready.status != "True" {
                let since = ready
                    .last_transition_time
                    .as_ref()
                    .map_or(0, |t| seconds_since(t.0.as_second()));
                return Some((
                    member.to_string(),
                    down(Some(since), false, out_of_service(found)),
                ));
            }
            let cordoned = found
                .spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false);
            let waiting = pods
                .iter()
                .find(|p| p.name == member && p.state == PodState::Pending && p.node.is_none())?;
            let since = waiting.created.map_or(0, seconds_since);
            cordoned.then(|| (member.to_string(), down(Some(since), true, false)))
        })
        .collect()
}

/// The taint of Kubernetes' non-graceful node shutdown: whoever sets it says the node is off.
pub const OUT_OF_SERVICE_TAINT: &str = "node.kubernetes.io/out-of-service";

/// `node` carries [`OUT_OF_SERVICE_TAINT`] (with any value and effect).
fn out_of_service(node: &Node) -> bool {
    let taints = node.spec.as_ref().and_then(|s| s.taints.as_ref());
    taints
        .into_iter()
        .flatten()
        .any(|t| t.key == OUT_OF_SERVICE_TAINT)
}

/// Splits a namespace's claims into this cluster's (carrying its selector) and the names of the
/// rest that are named like its members: claims detached from it by a restore (kept volumes of
/// replaced members), left by an earlier cluster of the same name, or anyone's. A new member
/// must never be named after one, or it would start on that volume's data.
pub fn split_claims(
    names: &ClusterNames,
    claims: Vec<PersistentVolumeClaim>,
) -> (Vec<PersistentVolumeClaim>, BTreeSet<String>) {
    let (ours, others): (Vec<_>, Vec<_>) = claims.into_iter().partition(|c| {
        c.labels().get(APP_LABEL).map(String::as_str) == Some("etcd")
            && c.labels().get(CLUSTER_LABEL) == Some(&names.cluster)
    });
    let taken = others
        .iter()
        .map(|c| c.name_any())
        .filter(|n| names.ordinal(n).is_some())
        .collect();
    (ours, taken)
}

/// Member names of claims being deleted: still taken.
pub fn terminating_claims(claims: &[PersistentVolumeClaim]) -> BTreeSet<String> {
    claims
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_some())
        .filter_map(|c| c.labels().get(MEMBER_LABEL).cloned())
        .collect()
}

/// Pods etcd is asked through, by name and IP: not those being deleted, which after a restore
/// are the replaced members, still serving the cluster they belonged to (its member list
/// would make the new members look like leftovers). A member being deleted counts as not
/// healthy meanwhile.
pub fn answering(pods: &[MemberPod]) -> impl Iterator<Item = (&str, &str)> {
    pods.iter()
        .filter(|p| p.state != PodState::Terminating)
        .filter_map(|p| Some((p.name.as_str(), p.ip.as_deref()?)))
}

/// A voting member to carry out a membership change, the leader when it answers: a learner
/// refuses these requests ("rpc not supported for learner"), and after a member with ordinal
/// 10 joins, pods no longer list in ordinal order, so the newest learner may come first.
pub async fn any_member(access: &Access, pods: &[MemberPod]) -> Option<Client> {
    let mut voter = None;
    for (name, ip) in answering(pods) {
        let Ok(mut client) = access.connect(name, ip).await else {
            continue;
        };
        match client.status().await {
            Ok(status) if status.is_learner() => {}
            Ok(status)
                if status
                    .header()
                    .is_some_and(|h| h.member_id() == status.leader()) =>
            {
                return Some(client);
            }
            Ok(_) => voter = voter.or(Some(client)),
            Err(_) => {}
        }
    }
    voter
}

/// How many raft snapshots member `ip`'s etcd process has saved since it started, from its
/// metrics (plain HTTP on the metrics port; HTTP/1.0, so that the body is not chunked, where a
/// chunk boundary may fall inside the line); `None` if it does not answer in time.
pub async fn snapshots_saved(ip: &str) -> Option<u64> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let saves = format!("{SNAPSHOT_SAVES_METRIC} ");
    let read = async {
        let mut stream = tokio::net::TcpStream::connect((ip, METRICS_PORT))
            .await
            .ok()?;
        let request = format!("GET /metrics HTTP/1.0\r\nHost: {ip}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await.ok()?;
        response
            .lines()
            .find_map(|line| line.strip_prefix(saves.as_str())?.trim().parse().ok())
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .ok()?
}

/// etcd's member list as the planner sees it, or `None` when no member answers. Every member pod
/// is asked for its status (whether it is healthy, who leads); the list comes from the leader,
/// whose view is current (a member cut off from the others may hold an old one).
/// Also says whether the list is the leader's.
pub async fn members(access: &Access, pods: &[MemberPod]) -> EtcdView {
    let names = &access.names;
    let reachable: Vec<(&str, &str)> = answering(pods).collect();
    let statuses: BTreeMap<&str, StatusResponse> =
        futures::future::join_all(reachable.iter().map(|(name, ip)| async move {
            let mut client = access.connect(name, ip).await.ok()?;
            Some((*name, client.status().await.ok()?))
        }))
        .await
        .into_iter()
        .flatten()
        .collect();
    let is_leader = |s: &StatusResponse| s.header().is_some_and(|h| h.member_id() == s.leader());
    let leaders: Vec<&(&str, &str)> = reachable
        .iter()
        .filter(|(name, _)| statuses.get(name).is_some_and(is_leader))
        .collect();
    let mut list = None;
    let mut leader_list = false;
    for (name, ip) in leaders.iter().copied().chain(reachable.iter()) {
        if let Ok(mut client) = access.connect(name, ip).await
            && let Ok(response) = client.member_list().await
        {
            list = Some(response.members().to_vec());
            leader_list = leaders.iter().any(|(leader, _)| leader == name);
            break;
        }
    }
    let leader = statuses.values().map(|s| s.leader()).find(|l| *l != 0);
    let databases = statuses
        .iter()
        .map(|(name, s)| {
            let database = Database {
                size: s.db_size(),
                in_use: s.raft_used_db_size(),
                // Reported from 3.6; before, etcd's default unless etcdEnv set another.
                quota: Some(s.db_size_quota()).filter(|q| *q > 0),
            };
            (name.to_string(), database)
        })
        .collect();
    let errors = statuses
        .iter()
        .filter(|(_, s)| !s.errors().is_empty())
        .map(|(name, s)| (name.to_string(), s.errors().to_vec()))
        .collect();
    let Some(list) = list else {
        return EtcdView {
            errors,
            databases,
            ..EtcdView::default()
        };
    };
    let members = list
        .iter()
        .map(|m| {
            let name = m
                .peer_urls()
                .iter()
                .find_map(|u| names.member_of_peer_url(u));
            let status = name.as_deref().and_then(|n| statuses.get(n));
            Member {
                id: m.id(),
                started: !m.name().is_empty(),
                learner: m.is_learner(),
                // An alarm (NOSPACE, CORRUPT) is the cluster's, reported by every member:
                // reported as such (`errors`), not as members being down.
                healthy: status.is_some_and(|s| s.errors().iter().all(|e| is_alarm(e))),
                leader: leader == Some(m.id()),
                name,
            }
        })
        .collect();
    EtcdView {
        members: Some(members),
        leader_list,
        errors,
        databases,
    }
}

/// Whether a status error is an alarm (`memberID:... alarm:NOSPACE`).
fn is_alarm(error: &str) -> bool {
    error.contains("alarm:")
}

/// What the members say of the cluster.
#[derive(Debug, Default)]
pub struct EtcdView {
    /// etcd's member list, `None` when no member answered.
    pub members: Option<Vec<Member>>,
    /// The list is the leader's.
    pub leader_list: bool,
    /// What members report wrong with themselves (status errors: alarms), by name.
    pub errors: BTreeMap<String, Vec<String>>,
    /// Each answering member's database file, by name.
    pub databases: BTreeMap<String, Database>,
}

/// A member's database file, as its status reports it (bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Database {
    pub size: i64,
    pub in_use: i64,
    /// The backend quota, where the member reports it (3.6 and later).
    pub quota: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubelet_back_off_counts_consecutive_crashes() {
        let message = "back-off 1m20s restarting failed container=etcd pod=c-1_ns(uid)";
        assert_eq!(backoff_seconds(message), Some(80));
        assert_eq!(backoff_seconds("back-off 40s restarting failed"), Some(40));
        assert_eq!(backoff_seconds("something else"), None);
        assert_eq!(
            without_backoff(message),
            "back-off restarting failed container=etcd pod=c-1_ns(uid)"
        );
    }

    #[test]
    fn a_member_is_down_with_the_node_of_its_pod_or_else_of_its_claim() {
        let node = |name: &str, ready: &str, since: &str| -> Node {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name},
                "status": {"conditions": [{"type": "Ready", "status": ready,
                    "lastTransitionTime": since}]},
            }))
            .unwrap()
        };
        let nodes = [
            node("node-a", "True", "2026-11-28T10:00:00Z"),
            node("node-b", "Unknown", "2026-11-28T10:00:00Z"),
        ];
        let pod = |name: &str, on: &str| MemberPod {
            node: Some(on.into()),
            ..member_pods(&[serde_saphyr::from_str(&format!(
                "metadata: {{name: {name}, labels: {{etcd_node: {name}}}}}"
            ))
            .unwrap()])[0]
                .clone()
        };
        let claim = |on: &str| ClaimRecord {
            node: Some(on.into()),
            ..Default::default()
        };
        // c-0 on a Ready node; c-1's pod on node-b, down; c-2 has no pod, its claim's node is
        // gone; c-3's claim was placed on node-b but its pod runs on node-a.
        let pods = [
            pod("c-0", "node-a"),
            pod("c-1", "node-b"),
            pod("c-3", "node-a"),
        ];
        let claims = BTreeMap::from([
            ("c-0".to_string(), claim("node-a")),
            ("c-2".to_string(), claim("node-x")),
            ("c-3".to_string(), claim("node-b")),
        ]);
        let now = chrono::DateTime::parse_from_rfc3339("2026-11-28T10:01:40Z")
            .unwrap()
            .to_utc();
        let down = nodes_down(&pods, &claims, Some(&nodes), now);
        assert_eq!(
            down,
            BTreeMap::from([
                (
                    "c-1".to_string(),
                    NodeDown {
                        node: "node-b".into(),
                        for_seconds: Some(100),
                        cordoned: false,
                        fenced: false,
                    }
                ),
                (
                    "c-2".to_string(),
                    NodeDown {
                        node: "node-x".into(),
                        for_seconds: None,
                        cordoned: false,
                        fenced: true,
                    }
                ),
            ])
        );
        // Nodes not readable: nobody is taken for down.
        assert!(nodes_down(&pods, &claims, None, now).is_empty());

        // node-a cordoned (a drain): a member running there is not down; one whose pod waits
        // unscheduled with its claim on node-a is, for as long as its pod has waited.
        let mut drained = nodes.clone();
        drained[0].spec = Some(k8s_openapi::api::core::v1::NodeSpec {
            unschedulable: Some(true),
            ..Default::default()
        });
        let mut waiting = pod("c-0", "node-a");
        waiting.node = None;
        waiting.state = PodState::Pending;
        waiting.created = Some(now.timestamp() - 30);
        let down = nodes_down(&[waiting], &claims, Some(&drained), now);
        assert_eq!(
            down.get("c-0"),
            Some(&NodeDown {
                node: "node-a".into(),
                for_seconds: Some(30),
                cordoned: true,
                fenced: false,
            })
        );
        let down = nodes_down(&pods, &claims, Some(&drained), now);
        assert!(
            !down.contains_key("c-0") && !down.contains_key("c-3"),
            "{down:?}"
        );

        // node-b tainted out-of-service (said to be off): fenced, as the deleted node-x is.
        let mut shut_down = nodes.clone();
        shut_down[1].spec = Some(k8s_openapi::api::core::v1::NodeSpec {
            taints: Some(vec![k8s_openapi::api::core::v1::Taint {
                key: OUT_OF_SERVICE_TAINT.into(),
                value: Some("nodeshutdown".into()),
                effect: "NoExecute".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let down = nodes_down(&pods, &claims, Some(&shut_down), now);
        assert!(down["c-1"].fenced && down["c-2"].fenced, "{down:?}");
    }

    #[test]
    fn claims_detached_from_the_cluster_are_not_its_own_but_their_names_stay_taken() {
        let claim = |name: &str, labels: &str| -> PersistentVolumeClaim {
            serde_saphyr::from_str(&format!(
                "metadata: {{name: {name}, uid: u-{name}, labels: {labels}}}"
            ))
            .unwrap()
        };
        let claims = vec![
            claim("c-3", "{app: etcd, etcd_cluster: c, etcd_node: c-3}"),
            // Anyone's claim named like a member.
            claim("c-7", "{}"),
            // Kept by a restore: detached, same member label.
            claim(
                "c-0",
                "{app: etcd, etcd_node: c-0, etcd.database.coreos.com/detached-from: c}",
            ),
            // Another cluster's members.
            claim("c-x-0", "{app: etcd, etcd_cluster: c-x, etcd_node: c-x-0}"),
        ];
        let (ours, taken) = split_claims(&ClusterNames::new("c", "ns", None), claims);
        let ours = live_claims(&ours);
        assert_eq!(ours.keys().collect::<Vec<_>>(), ["c-3"]);
        assert_eq!(ours["c-3"].uid.as_deref(), Some("u-c-3"));
        assert_eq!(
            taken,
            BTreeSet::from(["c-0".to_string(), "c-7".to_string()])
        );
    }
}
