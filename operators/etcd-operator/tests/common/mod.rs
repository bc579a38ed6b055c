//! What the operator's bed tests and benchmarks share: the operator process, the coreos example
//! cluster on the bed, clients for its members, and a client that writes throughout.
#![allow(dead_code)] // each test file uses its own part

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use etcd_api::EtcdCluster;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use testbed::kube::{KubeTestbed, wait_until};

pub const EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/coreos/example-etcd-cluster.yaml"
);

/// The operator process, watching one namespace; killed on drop.
pub struct Operator(pub Child);

impl Operator {
    pub fn start(kube: &KubeTestbed, ns: &str) -> Operator {
        Operator::start_with(kube, &["--namespace", ns])
    }

    pub fn start_with(kube: &KubeTestbed, args: &[&str]) -> Operator {
        let child = Command::new(env!("CARGO_BIN_EXE_etcd-operator"))
            .args(args)
            .args(["--listen", "127.0.0.1:0"])
            .env("KUBECONFIG", &kube.kubeconfig)
            .env("RUST_LOG", "info,etcd_operator=debug")
            .stdin(Stdio::null())
            .spawn()
            .expect("start etcd-operator");
        Operator(child)
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The coreos example, on the bed's etcd image and with a claim per member.
pub fn example(size: i32) -> EtcdCluster {
    let mut cluster: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(EXAMPLE).unwrap()).unwrap();
    cluster["spec"]["size"] = json!(size);
    cluster["spec"]["repository"] = json!("localhost/etcd");
    cluster["spec"]["version"] = json!("3.4.23");
    cluster["spec"]["pod"] = json!({
        "ClusterDomain": ".cluster.local",
        "persistentVolumeClaimSpec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}},
    });
    serde_json::from_value(cluster).unwrap()
}

pub fn converged(size: usize) -> impl Fn(&EtcdCluster) -> bool + Send + 'static {
    move |c: &EtcdCluster| {
        let Some(status) = &c.status else {
            return false;
        };
        let ready = status
            .members
            .as_ref()
            .and_then(|m| m.ready.as_ref())
            .map_or(0, Vec::len);
        let progressing = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "Progressing")
            .is_some_and(|c| c.status == "False" && c.reason.as_deref() == Some("Converged"));
        ready == size
            && status.size == Some(size as i32)
            && progressing
            && status.membership_change.is_none()
    }
}

/// How the tests' clients reach the members: plain HTTP, or HTTPS with the cluster's static
/// certificates (`testbed::cluster::static_tls`) and the operators' client certificate.
#[derive(Clone, Default)]
pub struct Access {
    tls: Option<etcd_client::ConnectOptions>,
}

impl Access {
    /// Over TLS to the example cluster's members in `ns`: their server certificate names every
    /// member (`*.example-etcd-cluster.<ns>.svc`), so one name checks them all.
    pub fn tls(tls: &testbed::cluster::StaticTls, ns: &str) -> Access {
        let any_member = "member";
        let options = tls.client_options(any_member, "example-etcd-cluster", ns, true);
        Access { tls: Some(options) }
    }

    /// The client URL of the member at `ip`.
    pub fn url(&self, ip: &str) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{ip}:2379")
    }

    /// Connect options with `timeout` for each request.
    pub fn options(&self, timeout: Duration) -> etcd_client::ConnectOptions {
        self.tls.clone().unwrap_or_default().with_timeout(timeout)
    }
}

/// A client for member pod `name`.
pub async fn member_client(kube: &KubeTestbed, ns: &str, name: &str) -> etcd_client::Client {
    member_client_with(kube, ns, name, &Access::default()).await
}

/// A client for member pod `name`, reached as `access` says.
pub async fn member_client_with(
    kube: &KubeTestbed,
    ns: &str,
    name: &str,
    access: &Access,
) -> etcd_client::Client {
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    let ip = testbed::cluster::pod_ip(&pods, name).await;
    let options = access.options(Duration::from_secs(5));
    etcd_client::Client::connect([access.url(&ip)], Some(options))
        .await
        .unwrap()
}

pub async fn member_pods(kube: &KubeTestbed, ns: &str) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    let mut names: Vec<String> = pods
        .list(&ListParams::default().labels("etcd_cluster=example-etcd-cluster"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    names.sort();
    names
}

/// A fresh namespace with the operator running and the example cluster converged at 3.
pub struct Running {
    pub kube: KubeTestbed,
    pub ns: String,
    pub clusters: Api<EtcdCluster>,
    pub _report: testbed::cluster::FailureReport,
    pub _operator: Operator,
}

pub async fn running_cluster(prefix: &str) -> Running {
    running_cluster_at(prefix, "3.4.23").await
}

pub async fn running_cluster_at(prefix: &str, version: &str) -> Running {
    let mut cluster = example(3);
    cluster.spec.version = Some(version.into());
    running_cluster_of(prefix, &cluster).await
}

/// `cluster` (3 members) created by the operator in a new namespace, once its members are ready.
pub async fn running_cluster_of(prefix: &str, cluster: &EtcdCluster) -> Running {
    let (kube, ns, _report) = testbed::cluster::test_namespace(prefix).await;
    let _operator = Operator::start(&kube, &ns);
    let clusters: Api<EtcdCluster> = Api::namespaced(kube.client.clone(), &ns);
    clusters
        .create(&PostParams::default(), cluster)
        .await
        .unwrap();
    wait_until(
        &clusters,
        "example-etcd-cluster",
        "3 ready members",
        240,
        converged(3),
    )
    .await
    .unwrap();
    Running {
        kube,
        ns,
        clusters,
        _report,
        _operator,
    }
}

/// Writes `count` values of 100 KiB under `prefix` (`<prefix>000000`, ...).
pub async fn write_values(client: &mut etcd_client::Client, prefix: &str, count: usize) {
    let value = "x".repeat(100 * 1024);
    for i in 0..count {
        client
            .put(format!("{prefix}{i:06}"), value.clone(), None)
            .await
            .unwrap();
    }
}

/// Deletes every key under `prefix` and compacts the history up to that deletion, so the
/// pages the keys used are free in every member's file (what defragmentation returns).
pub async fn delete_and_compact(client: &mut etcd_client::Client, prefix: &str) {
    let deleted = client
        .delete(
            prefix,
            Some(etcd_client::DeleteOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    let revision = deleted.header().unwrap().revision();
    client
        .compact(
            revision,
            Some(etcd_client::CompactionOptions::new().with_physical()),
        )
        .await
        .unwrap();
}

/// The member's database file size and the part in use, from its status.
pub async fn db_sizes(kube: &KubeTestbed, ns: &str, member: &str) -> (i64, i64, bool) {
    let mut client = member_client(kube, ns, member).await;
    let status = client.status().await.unwrap();
    let leader = status
        .header()
        .is_some_and(|h| h.member_id() == status.leader());
    (status.db_size(), status.raft_used_db_size(), leader)
}

/// Writes `count` values of 100 KiB under `prefix`, deletes them and compacts, then waits until
/// every member's file shows more than 10 MiB free (compacted pages count as free once later
/// writes have committed past every reader). Returns each member's (file size, in use) and
/// the leader.
pub async fn fragment(
    kube: &KubeTestbed,
    ns: &str,
    client: &mut etcd_client::Client,
    prefix: &str,
    count: usize,
) -> (BTreeMap<String, (i64, i64)>, String) {
    let members = member_pods(kube, ns).await;
    write_values(client, prefix, count).await;
    delete_and_compact(client, prefix).await;
    let mut sizes = BTreeMap::new();
    for attempt in 0.. {
        client
            .put("/settle", attempt.to_string(), None)
            .await
            .unwrap();
        sizes.clear();
        let mut mostly_free = true;
        let mut leader = None;
        for member in &members {
            let (size, in_use, leads) = db_sizes(kube, ns, member).await;
            mostly_free &= size - in_use > 10 * 1024 * 1024;
            if leads {
                leader = Some(member.clone());
            }
            sizes.insert(member.clone(), (size, in_use));
        }
        if mostly_free && let Some(leader) = leader {
            return (sizes, leader);
        }
        assert!(
            attempt < 100,
            "the files never showed their free space: {sizes:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    unreachable!()
}

/// A client writing a key every 50 ms until stopped, as one that names the members by DNS
/// would: after a failed write it connects again to where the members are now (a member given
/// a new pod has a new address). Each attempt writes a key of its own (`KEY/000042`), so that
/// every acknowledged write can be looked for afterwards. Measures the longest stretch without
/// a successful write.
pub struct Writer {
    stop: tokio_util::sync::CancellationToken,
    writing: tokio::task::JoinHandle<Writes>,
}

/// What a [`Writer`] did.
#[derive(Debug)]
pub struct Writes {
    /// The longest stretch without a successful write.
    pub longest_gap: Duration,
    /// The numbers of the writes etcd acknowledged.
    pub acknowledged: Vec<u32>,
    /// Writes that failed (refused, timed out: they may or may not have been applied).
    pub failed: u32,
}

impl Writer {
    pub async fn start(kube: &KubeTestbed, ns: &str, key: &str) -> Writer {
        Writer::start_with(kube, ns, key, Access::default()).await
    }

    /// A writer that reaches the members as `access` says.
    pub async fn start_with(kube: &KubeTestbed, ns: &str, key: &str, access: Access) -> Writer {
        let connect = {
            let (kube, ns) = (kube.clone(), ns.to_string());
            move || {
                let (kube, ns, access) = (kube.clone(), ns.clone(), access.clone());
                async move {
                    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
                    let mut endpoints = Vec::new();
                    for name in member_pods(&kube, &ns).await {
                        let Ok(pod) = pods.get(&name).await else {
                            continue;
                        };
                        let ready = pod
                            .status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .is_some_and(|c| {
                                c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                            });
                        if let Some(ip) = pod.status.and_then(|s| s.pod_ip).filter(|_| ready) {
                            endpoints.push(access.url(&ip));
                        }
                    }
                    let options = access.options(Duration::from_secs(2));
                    etcd_client::Client::connect(endpoints, Some(options))
                        .await
                        .ok()
                }
            }
        };
        let mut client = connect().await.expect("a client");
        let stop = tokio_util::sync::CancellationToken::new();
        let key = key.to_string();
        // From now, not from the task's first poll: a caller that blocks its runtime must see
        // the whole stretch as one without writes.
        let started = Instant::now();
        let writing = {
            let stop = stop.clone();
            tokio::spawn(async move {
                let (mut last_ok, mut longest) = (started, Duration::ZERO);
                let (mut acknowledged, mut failed) = (Vec::new(), 0u32);
                let mut n = 0u32;
                while !stop.is_cancelled() {
                    let put = client.put(format!("{key}/{n:06}"), n.to_string(), None);
                    if put.await.is_ok() {
                        longest = longest.max(last_ok.elapsed());
                        last_ok = Instant::now();
                        acknowledged.push(n);
                    } else {
                        failed += 1;
                        if let Some(again) = connect().await {
                            client = again;
                        }
                    }
                    n += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Writes {
                    longest_gap: longest.max(last_ok.elapsed()),
                    acknowledged,
                    failed,
                }
            })
        };
        Writer { stop, writing }
    }

    /// Stops writing: the longest stretch without a successful write, and the writes made.
    pub async fn stop(self) -> (Duration, u32) {
        let writes = self.stop_counted().await;
        (writes.longest_gap, writes.acknowledged.len() as u32)
    }

    /// Stops writing: everything it counted.
    pub async fn stop_counted(self) -> Writes {
        self.stop.cancel();
        self.writing.await.unwrap()
    }
}

/// The acknowledged writes of a [`Writer`] under `key` that `client` does not find.
pub async fn missing_writes(
    client: &mut etcd_client::Client,
    key: &str,
    acknowledged: &[u32],
) -> Vec<u32> {
    let options = etcd_client::GetOptions::new()
        .with_prefix()
        .with_keys_only();
    let found: std::collections::BTreeSet<u32> = client
        .get(format!("{key}/"), Some(options))
        .await
        .unwrap()
        .kvs()
        .iter()
        .filter_map(|kv| kv.key_str().ok()?.rsplit('/').next()?.parse().ok())
        .collect();
    acknowledged
        .iter()
        .copied()
        .filter(|n| !found.contains(n))
        .collect()
}

/// Schedules defragmentation every minute (the first round is due at once: its first time
/// since creation has passed) with low thresholds, and waits up to `seconds` for the round's
/// record.
pub async fn scheduled_round(
    clusters: &Api<EtcdCluster>,
    seconds: u64,
) -> etcd_api::DefragRoundResult {
    let patch = json!({"spec": {"defragmentation": {"schedule": "* * * * *", "minFreePercent": 10, "minFreeMiB": 1}}});
    clusters
        .patch(
            "example-etcd-cluster",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();
    round_recorded(clusters, "a defragmentation round", seconds).await
}

/// Waits up to `seconds` until the cluster's status records a defragmentation round; returns it.
pub async fn round_recorded(
    clusters: &Api<EtcdCluster>,
    what: &str,
    seconds: u64,
) -> etcd_api::DefragRoundResult {
    let done = wait_until(
        clusters,
        "example-etcd-cluster",
        what,
        seconds,
        |c: &EtcdCluster| {
            c.status
                .as_ref()
                .and_then(|s| s.defragmentation.as_ref())
                .is_some_and(|d| d.last_round.is_some())
        },
    )
    .await
    .unwrap();
    done.status
        .and_then(|s| s.defragmentation)
        .and_then(|d| d.last_round)
        .unwrap()
}

/// Samples every member's `etcd_disk_defrag_inflight` (1 while etcd defragments it) from its
/// metrics, every 20 ms until stopped: what the members themselves say, independent of the
/// operator's record.
pub struct DefragWatch {
    stop: tokio_util::sync::CancellationToken,
    watching: tokio::task::JoinHandle<DefragSeen>,
}

#[derive(Debug, Default)]
pub struct DefragSeen {
    /// The most members seen defragmenting in one sample.
    pub most_at_once: usize,
    /// Every member seen defragmenting.
    pub members: std::collections::BTreeSet<String>,
    pub samples: u32,
}

impl DefragWatch {
    pub async fn start(kube: &KubeTestbed, ns: &str) -> DefragWatch {
        let pods: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
        let mut members = Vec::new();
        for name in member_pods(kube, ns).await {
            members.push((testbed::cluster::pod_ip(&pods, &name).await, name));
        }
        let stop = tokio_util::sync::CancellationToken::new();
        let watching = {
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut seen = DefragSeen::default();
                while !stop.is_cancelled() {
                    let metrics = futures::future::join_all(
                        members
                            .iter()
                            .map(|(ip, _)| testbed::http_get(ip, 2379, "/metrics")),
                    )
                    .await;
                    let busy: Vec<&String> = members
                        .iter()
                        .zip(&metrics)
                        .filter(|(_, m)| {
                            m.as_ref().is_some_and(|(_, text)| {
                                text.lines().any(|l| l == "etcd_disk_defrag_inflight 1")
                            })
                        })
                        .map(|((_, name), _)| name)
                        .collect();
                    seen.most_at_once = seen.most_at_once.max(busy.len());
                    seen.members.extend(busy.into_iter().cloned());
                    seen.samples += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                seen
            })
        };
        DefragWatch { stop, watching }
    }

    pub async fn stop(self) -> DefragSeen {
        self.stop.cancel();
        self.watching.await.unwrap()
    }
}
