//! The bed of three nodes (`e2e/cluster/up.sh --nodes 3`) does what the node-failure tests rely
//! on: nodes in three zones, every image on every node, pods that reach each other across nodes
//! by pod IP, Service and DNS name, node-local claims that pin their pod to their node (and shared
//! ones that do not), a node that goes down turns NotReady by itself and comes back Ready with its
//! volume's data, a node cut off keeps running and comes back, a drain goes through a
//! PodDisruptionBudget, and `--stop`, with a node down and another cut off, leaves the host as it
//! was.
//!
//! Ignored in a plain `cargo test` (one bed runs per machine, and the default run's is of one
//! node): `e2e/test.sh` runs every `three_nodes` test in a second run, `cargo test -- --ignored
//! three_nodes`.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use serde_json::{Value, json};
use testbed::cluster::{pod_phase as phase, pod_ready as ready};
use testbed::kube::{KubeTestbed, wait_until};
use testbed::nodes::NodesBed;

const IMAGE: &str = "localhost/etcd:v3.6.16";

async fn wait_pod(
    kube: &KubeTestbed,
    ns: &str,
    name: &str,
    what: &str,
    done: fn(&Pod) -> bool,
) -> Pod {
    let api: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    wait_until(&api, name, what, 180, done).await.unwrap()
}

/// Waits until node `name` reports Ready `True` (`ready`) or anything else (not ready), for at
/// most `seconds`.
async fn wait_node(bed: &NodesBed, name: &str, ready: bool, seconds: u64) {
    let took = bed.wait_node(name, ready, seconds).await.unwrap();
    let what = if ready { "Ready" } else { "NotReady" };
    eprintln!("{name} {what} after {took:.0?}");
}

/// `etcdctl ARGS` in `pod` until it succeeds (30 s at most, every 500 ms; a loaded bed can miss
/// a deadline once); its output.
async fn etcdctl(kube: &KubeTestbed, ns: &str, pod: &str, args: &[&str]) -> String {
    let mut command = vec!["etcdctl", "--dial-timeout", "2s", "--command-timeout", "3s"];
    command.extend_from_slice(args);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, text) = testbed::cluster::exec_in_pod(&kube.kubeconfig, ns, pod, &command);
        if ok {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "etcdctl {args:?} in {pod}: {text}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until member `pod` holds `key` = `value` in its own data (a serializable read of the
/// member itself), 60 s at most.
async fn caught_up(kube: &KubeTestbed, ns: &str, pod: &str, key: &str, value: &str) {
    let local = [
        "--endpoints",
        "http://127.0.0.1:2379",
        "get",
        "--consistency=s",
        "--print-value-only",
        key,
    ];
    let deadline = Instant::now() + Duration::from_secs(60);
    while etcdctl(kube, ns, pod, &local).await.trim() != value {
        assert!(
            Instant::now() < deadline,
            "{pod} never caught up with {key} = {value}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Whether `endpoint` answers etcd's health check from `pod` (one try, 2 s).
fn answers(kube: &KubeTestbed, ns: &str, pod: &str, endpoint: &str) -> bool {
    let args = [
        "etcdctl",
        "--dial-timeout",
        "2s",
        "--command-timeout",
        "2s",
        "--endpoints",
        endpoint,
        "endpoint",
        "health",
    ];
    testbed::cluster::exec_in_pod(&kube.kubeconfig, ns, pod, &args).0
}

fn kubectl(kube: &KubeTestbed, args: &[&str]) -> (bool, String) {
    let output = testbed::cluster::kubectl(&kube.kubeconfig)
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

fn on_node(node: &str) -> Value {
    json!({"kubernetes.io/hostname": node})
}

fn claim(name: &str, class: Option<&str>) -> Value {
    let mut claim = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}},
    });
    if let Some(class) = class {
        claim["spec"]["storageClassName"] = json!(class);
    }
    claim
}

/// A pod on `node` that runs `script` once with claim `claim` at /data.
fn shell_pod(name: &str, node: &str, claim: &str, script: &str) -> Value {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never", "nodeSelector": on_node(node),
            "containers": [{"name": "sh", "image": IMAGE, "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", script],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        }
    });
    testbed::cluster::restricted(&mut pod["spec"]);
    pod
}

/// Three etcd members, member i on node i with its data on a node-local claim, found by
/// headless-Service names; and a ClusterIP Service in front of them.
fn etcd_members(ns: &str, nodes: &[String]) -> Vec<Value> {
    let peer = |i: usize| format!("etcd-{i}.etcd.{ns}.svc.cluster.local");
    let initial: Vec<String> = (0..3)
        .map(|i| format!("etcd-{i}=http://{}:2380", peer(i)))
        .collect();
    let mut manifests = vec![
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "etcd"},
               "spec": {"clusterIP": "None", "publishNotReadyAddresses": true, "selector": {"app": "etcd"},
                        "ports": [{"name": "peer", "port": 2380}, {"name": "client", "port": 2379}]}}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "etcd-client"},
               "spec": {"selector": {"app": "etcd"}, "ports": [{"name": "client", "port": 2379}]}}),
    ];
    for (i, node) in nodes.iter().enumerate() {
        manifests.push(claim(&format!("data-{i}"), None));
        let mut pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("etcd-{i}"), "labels": {"app": "etcd"}},
            "spec": {
                "hostname": format!("etcd-{i}"), "subdomain": "etcd", "enableServiceLinks": false,
                "nodeSelector": on_node(node),
                "containers": [{
                    "name": "etcd", "image": IMAGE, "imagePullPolicy": "Never",
                    "command": ["etcd", "--name", format!("etcd-{i}"), "--data-dir", "/data/etcd",
                        "--listen-client-urls", "http://0.0.0.0:2379",
                        "--advertise-client-urls", format!("http://{}:2379", peer(i)),
                        "--listen-peer-urls", "http://0.0.0.0:2380",
                        "--initial-advertise-peer-urls", format!("http://{}:2380", peer(i)),
                        "--initial-cluster", initial.join(","),
                        "--initial-cluster-token", ns, "--initial-cluster-state", "new"],
                    "readinessProbe": {"httpGet": {"path": "/health", "port": 2379}, "periodSeconds": 1},
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": format!("data-{i}")}}],
            }
        });
        testbed::cluster::restricted(&mut pod["spec"]);
        manifests.push(pod);
    }
    manifests
}

/// The node names a PersistentVolume's node affinity allows.
fn affinity_nodes(volume: &PersistentVolume) -> Vec<String> {
    let terms = volume
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
        .map(|r| r.node_selector_terms.clone())
        .unwrap_or_default();
    terms
        .iter()
        .flat_map(|t| t.match_expressions.iter().flatten())
        .flat_map(|e| e.values.iter().flatten().cloned())
        .collect()
}

/// The images in each node's containerd, by node.
fn images_per_node(bed: &NodesBed) -> Vec<(String, Vec<String>)> {
    bed.nodes
        .iter()
        .map(|node| {
            let socket = bed
                .dir
                .join("nodes")
                .join(node)
                .join("containerd/containerd.sock");
            let output = std::process::Command::new(testbed::cluster::ctr_binary())
                .arg("--address")
                .arg(&socket)
                .args(["-n", "k8s.io", "images", "ls", "-q"])
                .output()
                .unwrap();
            let mut images: Vec<String> = String::from_utf8_lossy(&output.stdout)
                .lines()
                .filter(|l| l.starts_with("localhost/"))
                .map(str::to_string)
                .collect();
            images.sort();
            (node.clone(), images)
        })
        .collect()
}

/// Applies `manifests` and waits until their one pod has ended; its phase.
async fn run_to_end(kube: &KubeTestbed, ns: &str, manifests: &[Value]) -> String {
    let pod = manifests
        .iter()
        .find(|m| m["kind"] == "Pod")
        .and_then(|m| m["metadata"]["name"].as_str())
        .expect("a pod among the manifests")
        .to_string();
    kube.apply(manifests, ns).await.unwrap();
    let ended = wait_pod(kube, ns, &pod, "the pod to end", |p| {
        matches!(phase(p), "Succeeded" | "Failed")
    })
    .await;
    phase(&ended).to_string()
}

/// The Deployment `web`'s pod that is ready and not being deleted, if any.
async fn ready_web_pod(pods: &Api<Pod>) -> Option<Pod> {
    let list = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    list.items
        .into_iter()
        .find(|p| ready(p) && p.metadata.deletion_timestamp.is_none())
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the bed of three nodes: e2e/test.sh runs it with `-- --ignored three_nodes`"]
async fn three_nodes_bed_pods_claims_faults_drain_and_stop() {
    // One bed per machine: a shared bed of several nodes an earlier test binary of this run
    // left goes first, so that the host is read without any bed.
    NodesBed::stop_shared().await.unwrap();
    let dir = std::env::temp_dir().join("etcd-backup-suite-bed-faults");
    let before = testbed::host_state::read(&dir);
    let started = Instant::now();
    let bed = NodesBed::start(&dir, 3).await.unwrap();
    eprintln!("3 nodes ready in {:.0?}", started.elapsed());
    let kube = &bed.kube;

    // Nodes in three zones, each its own hostname; every image on every node.
    let nodes: Api<Node> = Api::all(kube.client.clone());
    for (i, name) in bed.nodes.iter().enumerate() {
        let node = nodes.get(name).await.unwrap();
        let labels = node.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get("topology.kubernetes.io/zone"),
            Some(&testbed::nodes::zone_of(i))
        );
        assert_eq!(labels.get("kubernetes.io/hostname"), Some(name));
        assert_eq!(testbed::nodes::node_ready(&node), Some("True"), "{name}");
    }
    let images = images_per_node(&bed);
    assert!(
        images[0]
            .1
            .iter()
            .any(|i| i.starts_with("localhost/etcd-operator:")),
        "{images:?}"
    );
    for (node, list) in &images[1..] {
        assert_eq!(list, &images[0].1, "images of {node} and {}", images[0].0);
    }

    let ns = kube.namespace("bed-nodes").await.unwrap();
    let _report = kube.report_on_failure(&ns);
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);

    // An etcd member on each node, its data on a node-local claim made for that node.
    kube.apply(&etcd_members(&ns, &bed.nodes), &ns)
        .await
        .unwrap();
    let mut ips = Vec::new();
    for (i, node) in bed.nodes.iter().enumerate() {
        let pod = wait_pod(kube, &ns, &format!("etcd-{i}"), "member ready", ready).await;
        assert_eq!(
            pod.spec.as_ref().unwrap().node_name.as_deref(),
            Some(node.as_str())
        );
        let ip = pod.status.unwrap().pod_ip.unwrap();
        assert!(
            ip.starts_with(&format!("10.88.{}.", i + 1)),
            "etcd-{i} on {node} has {ip}"
        );
        ips.push(ip);
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(kube.client.clone(), &ns);
        let volume = claims
            .get(&format!("data-{i}"))
            .await
            .unwrap()
            .spec
            .unwrap()
            .volume_name
            .unwrap();
        let volume = Api::<PersistentVolume>::all(kube.client.clone())
            .get(&volume)
            .await
            .unwrap();
        assert_eq!(
            affinity_nodes(&volume),
            vec![node.clone()],
            "volume of data-{i}"
        );
    }

    // Across nodes: the members formed one cluster by DNS names (peer traffic between nodes);
    // pod -> pod IP on another node; from every node through the ClusterIP Service by its short
    // name; host -> pod on every node.
    let peer = |i: usize| format!("http://etcd-{i}.etcd.{ns}.svc.cluster.local:2379");
    for i in 0..3 {
        let other = (i + 1) % 3;
        etcdctl(
            kube,
            &ns,
            &format!("etcd-{i}"),
            &["--endpoints", &peer(other), "endpoint", "health"],
        )
        .await;
        let by_ip = format!("http://{}:2379", ips[other]);
        etcdctl(
            kube,
            &ns,
            &format!("etcd-{i}"),
            &["--endpoints", &by_ip, "endpoint", "health"],
        )
        .await;
        let key = format!("through-service-from-etcd-{i}");
        etcdctl(
            kube,
            &ns,
            &format!("etcd-{i}"),
            &["--endpoints", "http://etcd-client:2379", "put", &key, "ok"],
        )
        .await;
    }
    for ip in &ips {
        let mut client = etcd_client::Client::connect([format!("http://{ip}:2379")], None)
            .await
            .unwrap();
        let listed = client
            .get(
                "through-service-from-",
                Some(etcd_client::GetOptions::new().with_prefix()),
            )
            .await
            .unwrap();
        assert_eq!(listed.kvs().len(), 3, "from the host to {ip}");
    }

    // A node-local claim bound on node-b cannot start a pod on node-a; a shared one follows its
    // pod to another node.
    let pinned_writer = shell_pod("pin-writer", "node-b", "pinned", "echo kept > /data/file");
    let ended = run_to_end(kube, &ns, &[claim("pinned", None), pinned_writer]).await;
    assert_eq!(ended, "Succeeded");
    let on_a = shell_pod("pin-reader", "node-a", "pinned", "cat /data/file");
    kube.apply(&[on_a], &ns).await.unwrap();
    let refused = wait_pod(kube, &ns, "pin-reader", "refused by the scheduler", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter().any(|c| {
                    c.type_ == "PodScheduled"
                        && c.status == "False"
                        && c.message.as_deref().is_some_and(|m| {
                            m.contains("didn't match PersistentVolume's node affinity")
                        })
                })
            })
    })
    .await;
    assert_eq!(phase(&refused), "Pending");
    pods.delete("pin-reader", &DeleteParams::default())
        .await
        .unwrap();
    let shared = claim("shared", Some(testbed::nodes::SHARED_STORAGE_CLASS));
    let shared_writer = shell_pod(
        "shared-writer",
        "node-a",
        "shared",
        "echo shared > /data/file",
    );
    assert_eq!(
        run_to_end(kube, &ns, &[shared, shared_writer]).await,
        "Succeeded"
    );
    let shared_reader = shell_pod(
        "shared-reader",
        "node-c",
        "shared",
        "grep -x shared /data/file",
    );
    assert_eq!(run_to_end(kube, &ns, &[shared_reader]).await, "Succeeded");

    // Node down: node-c's processes are gone at once, the node turns NotReady by itself (the
    // node controller's default timings), its member cannot be reached, the other two serve.
    etcdctl(kube, &ns, "etcd-0", &["put", "before-down", "kept"]).await;
    // What proves the volume itself came back (replication alone would also bring the keys
    // back to an empty member): a file beside the data, and the database file's inode.
    let on_volume = |script: &str| {
        let (ok, text) = testbed::cluster::exec_in_pod(
            &kube.kubeconfig,
            &ns,
            "etcd-2",
            &["/bin/sh", "-c", script],
        );
        assert!(ok, "{script} in etcd-2: {text}");
        text
    };
    let mark = "echo survived > /data/marker && /bin/busybox stat -c %i /data/etcd/member/snap/db";
    let inode = on_volume(mark);
    bed.node_down("node-c").await.unwrap();
    assert_eq!(bed.node_processes("node-c"), Vec::<u32>::new());
    wait_node(&bed, "node-c", false, 180).await;
    let member_c = format!("http://{}:2379", ips[2]);
    assert!(
        !answers(kube, &ns, "etcd-0", &member_c),
        "etcd-2 on node-c still answers"
    );
    etcdctl(kube, &ns, "etcd-0", &["put", "while-down", "written"]).await;

    // Node up: Ready again, the member restarts on its node-local volume and has its data.
    bed.node_up("node-c").await.unwrap();
    wait_node(&bed, "node-c", true, 180).await;
    let back = wait_pod(kube, &ns, "etcd-2", "member ready again", |p| {
        ready(p)
            && p.status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .is_some_and(|c| c[0].restart_count > 0)
    })
    .await;
    assert_eq!(back.spec.unwrap().node_name.as_deref(), Some("node-c"));
    let read = "/bin/busybox cat /data/marker && /bin/busybox stat -c %i /data/etcd/member/snap/db";
    assert_eq!(on_volume(read), format!("survived\n{inode}"));
    // Its own data: what it held before the node went down, and what it missed meanwhile.
    caught_up(kube, &ns, "etcd-2", "before-down", "kept").await;
    caught_up(kube, &ns, "etcd-2", "while-down", "written").await;

    // Partition: node-b is cut off but every process on it runs on; it turns NotReady, its
    // member cannot be reached; healed, it is Ready and reachable again and catches up.
    bed.partition("node-b").await.unwrap();
    assert_eq!(
        bed.node_processes("node-b").len(),
        3,
        "node-b's kubelet, kube-proxy and containerd run on"
    );
    wait_node(&bed, "node-b", false, 180).await;
    assert_eq!(
        bed.node_processes("node-b").len(),
        3,
        "node-b's kubelet, kube-proxy and containerd run on"
    );
    let member_b = format!("http://{}:2379", ips[1]);
    assert!(
        !answers(kube, &ns, "etcd-0", &member_b),
        "etcd-1 on node-b answers through the partition"
    );
    etcdctl(kube, &ns, "etcd-0", &["put", "while-cut", "written"]).await;
    bed.heal("node-b").await.unwrap();
    wait_node(&bed, "node-b", true, 180).await;
    etcdctl(
        kube,
        &ns,
        "etcd-0",
        &["--endpoints", &member_b, "endpoint", "health"],
    )
    .await;
    caught_up(kube, &ns, "etcd-1", "while-cut", "written").await;

    // Drain: plain `kubectl drain` of the node that runs a Deployment's only pod is refused by
    // its PodDisruptionBudget (minAvailable 1), then goes through once the budget allows one pod
    // to go: the pod is evicted, comes back on another node, the node stays cordoned.
    let mut web = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "web", "image": IMAGE, "imagePullPolicy": "Never",
                    "command": ["/bin/sh", "-c", "sleep 100000"]}]}}}});
    testbed::cluster::restricted(&mut web["spec"]["template"]["spec"]);
    let budget = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}});
    kube.apply(&[web, budget], &ns).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let first = loop {
        if let Some(pod) = ready_web_pod(&pods).await {
            break pod;
        }
        assert!(Instant::now() < deadline, "the web pod never became ready");
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let drained = first.spec.as_ref().unwrap().node_name.clone().unwrap();
    let drain = [
        "drain",
        &drained,
        "--pod-selector",
        "app=web",
        "--timeout",
        "15s",
    ];
    let (ok, text) = kubectl(kube, &drain);
    assert!(
        !ok && text.contains("disruption budget"),
        "drain despite the budget: {text}"
    );
    let patch = r#"[{"op": "remove", "path": "/spec/minAvailable"}, {"op": "add", "path": "/spec/maxUnavailable", "value": 1}]"#;
    let (ok, text) = kubectl(
        kube,
        &[
            "--namespace",
            &ns,
            "patch",
            "pdb",
            "web",
            "--type",
            "json",
            "--patch",
            patch,
        ],
    );
    assert!(ok, "{text}");
    let (ok, text) = kubectl(
        kube,
        &[
            "drain",
            &drained,
            "--pod-selector",
            "app=web",
            "--timeout",
            "60s",
        ],
    );
    assert!(ok && text.contains("evicted"), "drain: {text}");
    let deadline = Instant::now() + Duration::from_secs(120);
    let moved = loop {
        if let Some(pod) = ready_web_pod(&pods)
            .await
            .filter(|p| p.metadata.uid != first.metadata.uid)
        {
            break pod;
        }
        assert!(
            Instant::now() < deadline,
            "no web pod ready after the drain"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    assert_ne!(
        moved.spec.unwrap().node_name.as_deref(),
        Some(drained.as_str())
    );
    let cordoned = nodes.get(&drained).await.unwrap();
    assert_eq!(cordoned.spec.unwrap().unschedulable, Some(true));
    let (ok, text) = kubectl(kube, &["uncordon", &drained]);
    assert!(ok, "{text}");

    // Stop with node-c down and node-b cut off: the host is as it was before the bed.
    bed.node_down("node-c").await.unwrap();
    bed.partition("node-b").await.unwrap();
    let stopping = Instant::now();
    bed.stop().await.unwrap();
    eprintln!("3 nodes stopped in {:.0?}", stopping.elapsed());
    let after = testbed::host_state::read(&dir);
    let differences = testbed::host_state::differences(&before, &after);
    assert!(
        differences.is_empty(),
        "the host after --stop differs:\n{differences}"
    );
    // Its files (logs, images) are kept for a failed run only.
    std::fs::remove_dir_all(&dir).unwrap();
}
