//! Benchmark of the EtcdCluster operator on the kubelet bed (or `KUBECONFIG`'s cluster), in one
//! run, on the same images and storage class:
//!
//! 1. creation: the coreos example (3 members with claims) from `create` to 3 ready members
//!    and `Converged`, against what users otherwise deploy, a StatefulSet of 3 etcd pods
//!    bootstrapped statically (parallel pod management, a claim each), from `create` to 3 ready
//!    pods; as a ratio;
//! 2. resize: that cluster from 3 to 5 ready members;
//! 3. memory: the operator's RSS with N EtcdClusters watched (default 100, created paused so
//!    that the machine runs no pods for them; each gets its status written).
//!
//! ```sh
//! cargo build --release -p etcd-operator
//! cargo run --release -p etcd-operator --example cluster_bench -- [clusters]
//! ```
//! `OPERATOR_BIN` overrides the binary (default `target/release/etcd-operator`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use etcd_api::EtcdCluster;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testbed::cluster::converged;
use testbed::kube::{KubeTestbed, wait_until};
use testbed::procstat;

const IMAGE: &str = "localhost/etcd:v3.5.33";
const CLAIM: &str = "64Mi";

#[tokio::main]
async fn main() {
    let clusters_watched: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().unwrap())
        .unwrap_or(100);
    let binary = std::env::var_os("OPERATOR_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/release/etcd-operator")
        });
    assert!(
        binary.exists(),
        "{} missing: cargo build --release -p etcd-operator",
        binary.display()
    );
    let kube = KubeTestbed::with_kubelet().await.expect("the kubelet bed");
    kube.install_crds().await.expect("CRDs");

    // 1a. The StatefulSet baseline.
    let ns = kube.namespace("bench-sts").await.unwrap();
    let started = Instant::now();
    kube.apply(&statefulset(&ns), &ns).await.unwrap();
    let sets: Api<StatefulSet> = Api::namespaced(kube.client.clone(), &ns);
    let ready = |s: &StatefulSet| s.status.as_ref().and_then(|s| s.ready_replicas) == Some(3);
    wait_until(&sets, "etcd", "3 ready StatefulSet pods", 600, ready)
        .await
        .unwrap();
    let statefulset_secs = started.elapsed().as_secs_f64();
    kube.delete_namespace(&ns).await.unwrap();

    // 1b. The operator, same images and claims.
    let ns = kube.namespace("bench-op").await.unwrap();
    let operator = Operator::start(&binary, &kube.kubeconfig, &ns);
    let clusters: Api<EtcdCluster> = Api::namespaced(kube.client.clone(), &ns);
    let started = Instant::now();
    clusters
        .create(&PostParams::default(), &cluster("example", 3, false))
        .await
        .unwrap();
    wait_until(&clusters, "example", "3 ready members", 600, converged(3))
        .await
        .unwrap();
    let operator_secs = started.elapsed().as_secs_f64();

    // 2. Resize to 5.
    let started = Instant::now();
    let patch = json!({"spec": {"size": 5}});
    clusters
        .patch("example", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_until(&clusters, "example", "5 ready members", 600, converged(5))
        .await
        .unwrap();
    let resize_secs = started.elapsed().as_secs_f64();
    let busy = procstat::sample(operator.pid);
    drop(operator);
    kube.delete_namespace(&ns).await.unwrap();

    // 3. Memory with many clusters watched.
    let ns = kube.namespace("bench-rss").await.unwrap();
    let operator = Operator::start(&binary, &kube.kubeconfig, &ns);
    let clusters: Api<EtcdCluster> = Api::namespaced(kube.client.clone(), &ns);
    let started = Instant::now();
    futures::stream::iter(0..clusters_watched)
        .map(|i| {
            let clusters = clusters.clone();
            async move {
                let c = cluster(&format!("c{i:03}"), 3, true);
                clusters.create(&PostParams::default(), &c).await.unwrap();
            }
        })
        .buffer_unordered(8)
        .collect::<()>()
        .await;
    loop {
        let done = clusters
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|c| c.status.as_ref().and_then(|s| s.control_paused) == Some(true))
            .count();
        if done == clusters_watched {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "only {done} reconciled"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let settle_secs = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(30)).await;
    let idle = procstat::sample(operator.pid);
    drop(operator);
    kube.delete_namespace(&ns).await.unwrap();

    println!("| measure | value |");
    println!("|---|---|");
    println!("| StatefulSet, 3 pods: create -> 3 ready | {statefulset_secs:.1} s |");
    println!("| operator, 3 members: create -> 3 ready, Converged | {operator_secs:.1} s |");
    println!(
        "| ratio operator / StatefulSet | {:.2} |",
        operator_secs / statefulset_secs
    );
    println!("| operator: resize 3 -> 5 ready | {resize_secs:.1} s |");
    println!(
        "| operator after create + resize: CPU, peak RSS | {:.2} s, {:.1} MiB |",
        busy.cpu_seconds,
        busy.peak_rss_kib as f64 / 1024.0
    );
    println!("| {clusters_watched} clusters watched: all statuses written | {settle_secs:.1} s |");
    println!(
        "| {clusters_watched} clusters watched: RSS 30 s later, peak RSS, CPU | {:.1} MiB, {:.1} MiB, {:.2} s |",
        idle.rss_kib as f64 / 1024.0,
        idle.peak_rss_kib as f64 / 1024.0,
        idle.cpu_seconds
    );
}

/// The operator process, watching one namespace; killed on drop.
struct Operator {
    child: std::process::Child,
    pid: u32,
}

impl Operator {
    fn start(binary: &Path, kubeconfig: &Path, ns: &str) -> Operator {
        let child = std::process::Command::new(binary)
            .args(["--namespace", ns, "--listen", "127.0.0.1:0"])
            .env("KUBECONFIG", kubeconfig)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start the operator");
        let pid = child.id();
        Operator { child, pid }
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn cluster(name: &str, size: i32, paused: bool) -> EtcdCluster {
    serde_json::from_value(json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2",
        "kind": "EtcdCluster",
        "metadata": {"name": name},
        "spec": {
            "size": size, "repository": "localhost/etcd", "version": "3.5.33", "paused": paused,
            "pod": {
                "ClusterDomain": ".cluster.local",
                "persistentVolumeClaimSpec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": CLAIM}}},
            },
        },
    }))
    .unwrap()
}

/// A statically bootstrapped 3-member etcd StatefulSet, as charts deploy it.
fn statefulset(ns: &str) -> Vec<Value> {
    let host = |i: u32| format!("etcd-{i}.etcd.{ns}.svc.cluster.local");
    let initial: Vec<String> = (0..3)
        .map(|i| format!("etcd-{i}=http://{}:2380", host(i)))
        .collect();
    let service = json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "etcd"},
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": true, "selector": {"app": "sts-etcd"},
                 "ports": [{"name": "client", "port": 2379, "protocol": "TCP"}, {"name": "peer", "port": 2380, "protocol": "TCP"}]},
    });
    let set = json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "etcd"},
        "spec": {
            "serviceName": "etcd", "replicas": 3, "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "sts-etcd"}},
            "template": {
                "metadata": {"labels": {"app": "sts-etcd"}},
                "spec": {
                    "enableServiceLinks": false,
                    "containers": [{
                        "name": "etcd", "image": IMAGE, "command": ["/usr/local/bin/etcd"],
                        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                        "args": [
                            "--name=$(POD_NAME)", "--data-dir=/var/etcd/data",
                            "--listen-peer-urls=http://0.0.0.0:2380", "--listen-client-urls=http://0.0.0.0:2379",
                            "--listen-metrics-urls=http://0.0.0.0:8080",
                            format!("--advertise-client-urls=http://$(POD_NAME).etcd.{ns}.svc.cluster.local:2379"),
                            format!("--initial-advertise-peer-urls=http://$(POD_NAME).etcd.{ns}.svc.cluster.local:2380"),
                            format!("--initial-cluster={}", initial.join(",")),
                            "--initial-cluster-state=new", "--initial-cluster-token=bench",
                        ],
                        // The operator's probe, so both ways wait for readiness alike.
                        "readinessProbe": etcd_members::build::readiness_probe(),
                        "securityContext": operator_runtime::pod_security::container_context(),
                        "volumeMounts": [{"name": "data", "mountPath": "/var/etcd"}],
                    }],
                    // The operator's defaults: the namespace enforces Pod Security "restricted".
                    "securityContext": operator_runtime::pod_security::pod_context(None, operator_runtime::pod_security::RunAs::NonRoot),
                },
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": CLAIM}}},
            }],
        },
    });
    vec![service, set]
}
