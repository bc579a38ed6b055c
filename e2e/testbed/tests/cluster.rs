//! The kubelet bed does what the cluster tests rely on: pods run from the `localhost/` images,
//! find each other by headless-Service DNS names (a 3-member etcd cluster forms), reach Services
//! by ClusterIP and short names, claims bind to volumes that outlive pods and go with their claim,
//! and the script refuses a second bed or a non-root user with one clear line.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::Api;
use kube::api::{DeleteParams, LogParams};
use kube::runtime::wait::await_condition;
use serde_json::{Value, json};
use testbed::cluster::{pod_phase as phase, pod_ready as ready};
use testbed::kube::{KubeTestbed, wait_until};

const UP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../cluster/up.sh");

/// Waits until pod `name` satisfies `done` (phase or readiness), `seconds` at most.
async fn wait_pod(
    kube: &KubeTestbed,
    ns: &str,
    name: &str,
    seconds: u64,
    done: fn(&Pod) -> bool,
) -> Pod {
    let api: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    wait_until(&api, name, "pod state", seconds, done)
        .await
        .unwrap()
}

fn succeeded(pod: &Pod) -> bool {
    phase(pod) == "Succeeded"
}

/// A pod that runs `script` in `/bin/sh` from the etcd 3.4 image once, as the restricted
/// namespace demands.
fn shell_pod(name: &str, script: &str, volumes: Value, mounts: Value) -> Value {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "sh", "image": "localhost/etcd:v3.4.23", "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", script], "volumeMounts": mounts,
            }],
            "volumes": volumes,
        }
    });
    testbed::cluster::restricted(&mut pod["spec"]);
    pod
}

async fn logs(kube: &KubeTestbed, ns: &str, pod: &str) -> String {
    Api::<Pod>::namespaced(kube.client.clone(), ns)
        .logs(pod, &LogParams::default())
        .await
        .unwrap()
}

/// Whether `kubectl exec POD -- ARGS` succeeds.
fn try_exec(kube: &KubeTestbed, ns: &str, pod: &str, args: &[&str]) -> bool {
    testbed::cluster::exec_in_pod(&kube.kubeconfig, ns, pod, args).0
}

/// `etcdctl endpoint health` from `pod` against `endpoint` succeeds within 30 s (tried every
/// 500 ms), or a panic.
async fn healthy_through(kube: &KubeTestbed, ns: &str, pod: &str, endpoint: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let args = [
        "etcdctl",
        "--endpoints",
        endpoint,
        "--command-timeout",
        "2s",
        "endpoint",
        "health",
    ];
    while !try_exec(kube, ns, pod, &args) {
        assert!(
            std::time::Instant::now() < deadline,
            "{endpoint} never answered healthy from {pod}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// `kubectl exec POD -- ARGS`: stdout and stderr (etcdctl 3.4 reports health on stderr), or a
/// panic with both.
fn exec(kube: &KubeTestbed, ns: &str, pod: &str, args: &[&str]) -> String {
    let (ok, text) = testbed::cluster::exec_in_pod(&kube.kubeconfig, ns, pod, args);
    assert!(ok, "kubectl exec {pod} {args:?}: {text}");
    text
}

#[tokio::test]
async fn etcd_pods_form_a_cluster_by_headless_dns_names() {
    let kube = KubeTestbed::with_kubelet().await.unwrap();
    let ns = kube.namespace("bed-etcd").await.unwrap();
    let _report = kube.report_on_failure(&ns);
    let peer = |i: usize| format!("etcd-{i}.etcd.{ns}.svc.cluster.local");
    let initial: Vec<String> = (0..3)
        .map(|i| format!("etcd-{i}=http://{}:2380", peer(i)))
        .collect();
    let mut manifests = vec![
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "etcd"},
               "spec": {"clusterIP": "None", "publishNotReadyAddresses": true, "selector": {"app": "etcd"},
                        "ports": [{"name": "peer", "port": 2380, "protocol": "TCP"}, {"name": "client", "port": 2379, "protocol": "TCP"}]}}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "etcd-client"},
               "spec": {"selector": {"app": "etcd"}, "ports": [{"name": "client", "port": 2379, "protocol": "TCP"}]}}),
    ];
    for i in 0..3 {
        let mut pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("etcd-{i}"), "labels": {"app": "etcd"}},
            "spec": {
                "hostname": format!("etcd-{i}"), "subdomain": "etcd",
                // Service link variables (ETCD_CLIENT_PORT, ...) would be read as etcd flags.
                "enableServiceLinks": false,
                "containers": [{
                    "name": "etcd", "image": "localhost/etcd:v3.4.23", "imagePullPolicy": "Never",
                    "command": ["etcd", "--name", format!("etcd-{i}"), "--data-dir", "/tmp/data",
                        "--listen-client-urls", "http://0.0.0.0:2379",
                        "--advertise-client-urls", format!("http://{}:2379", peer(i)),
                        "--listen-peer-urls", "http://0.0.0.0:2380",
                        "--initial-advertise-peer-urls", format!("http://{}:2380", peer(i)),
                        "--initial-cluster", initial.join(","),
                        "--initial-cluster-token", ns.clone(), "--initial-cluster-state", "new"],
                    "readinessProbe": {"httpGet": {"path": "/health", "port": 2379}, "periodSeconds": 1},
                }],
            }
        });
        testbed::cluster::restricted(&mut pod["spec"]);
        manifests.push(pod);
    }
    kube.apply(&manifests, &ns).await.unwrap();
    let mut ips = Vec::new();
    for i in 0..3 {
        let pod = wait_pod(&kube, &ns, &format!("etcd-{i}"), 120, ready).await;
        ips.push(pod.status.unwrap().pod_ip.unwrap());
    }

    // Host -> pod: the members agree on a 3-member cluster; a write through one is read back
    // through another.
    let endpoints: Vec<String> = ips.iter().map(|ip| format!("http://{ip}:2379")).collect();
    let mut client = etcd_client::Client::connect([&endpoints[0]], None)
        .await
        .unwrap();
    assert_eq!(client.member_list().await.unwrap().members().len(), 3);
    client.put("bed-key", "bed-value", None).await.unwrap();
    let mut other = etcd_client::Client::connect([&endpoints[2]], None)
        .await
        .unwrap();
    let kvs = other.get("bed-key", None).await.unwrap();
    assert_eq!(kvs.kvs()[0].value_str().unwrap(), "bed-value");

    // Pod -> pod by the headless name, and pod -> ClusterIP Service by its short name (DNS
    // search path), through `kubectl exec` (API server -> kubelet -> containerd).
    // Bounded retries: on this loaded 2-core bed a member's first commit can miss etcdctl's
    // deadline ("failed to commit proposal") although the name resolved and the member answered.
    healthy_through(&kube, &ns, "etcd-0", &format!("http://{}:2379", peer(2))).await;
    // The ClusterIP answers once its endpoints list the three ready pods and kube-proxy has
    // programmed them (an endpoints update can conflict and come a moment after readiness):
    // wait for the endpoints, then for the first read through the Service, bounded.
    let endpoints: Api<Endpoints> = Api::namespaced(kube.client.clone(), &ns);
    wait_until(&endpoints, "etcd-client", "3 ready endpoints", 60, |e| {
        let ready = e
            .subsets
            .iter()
            .flatten()
            .flat_map(|s| s.addresses.iter().flatten());
        ready.count() == 3
    })
    .await
    .unwrap();
    healthy_through(&kube, &ns, "etcd-1", "http://etcd-client:2379").await;
    let value = exec(
        &kube,
        &ns,
        "etcd-1",
        &[
            "etcdctl",
            "--endpoints",
            "http://etcd-client:2379",
            "get",
            "bed-key",
            "--print-value-only",
        ],
    );
    assert_eq!(value.trim(), "bed-value", "{value}");
    kube.delete_namespace(&ns).await.unwrap();
}

/// Each etcd line's image (built from etcd's Go modules) has its own etcdutl, which restores
/// with `--bump-revision` and `--mark-compacted`.
#[tokio::test]
async fn each_etcd_image_restores_with_bump_revision() {
    let kube = KubeTestbed::with_kubelet().await.unwrap();
    let ns = kube.namespace("bed-etcd-images").await.unwrap();
    let _report = kube.report_on_failure(&ns);
    let versions = ["3.5.33", "3.6.16", "3.7.3"];
    let pods: Vec<Value> = versions
        .iter()
        .map(|version| {
            let mut pod = shell_pod(
                &format!("etcdutl-{}", version.replace('.', "-")),
                "etcdutl version && etcd --version && etcdutl snapshot restore --help",
                json!([]),
                json!([]),
            );
            pod["spec"]["containers"][0]["image"] = json!(format!("localhost/etcd:v{version}"));
            pod
        })
        .collect();
    kube.apply(&pods, &ns).await.unwrap();
    for version in versions {
        let name = format!("etcdutl-{}", version.replace('.', "-"));
        wait_pod(&kube, &ns, &name, 120, |p| {
            matches!(phase(p), "Succeeded" | "Failed")
        })
        .await;
        let out = logs(&kube, &ns, &name).await;
        assert!(
            out.contains(&format!("etcdutl version: {version}")),
            "{out}"
        );
        assert!(out.contains(&format!("etcd Version: {version}")), "{out}");
        assert!(
            out.contains("--bump-revision") && out.contains("--mark-compacted"),
            "{out}"
        );
    }
    kube.delete_namespace(&ns).await.unwrap();
}

#[tokio::test]
async fn claims_bind_outlive_their_pods_and_go_with_their_claim() {
    let kube = KubeTestbed::with_kubelet().await.unwrap();
    let ns = kube.namespace("bed-pvc").await.unwrap();
    let _report = kube.report_on_failure(&ns);
    let claim = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}},
    });
    let volumes = json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]);
    let mounts = json!([{"name": "data", "mountPath": "/data"}]);
    kube.apply(
        &[
            claim,
            shell_pod(
                "writer",
                "echo kept > /data/file",
                volumes.clone(),
                mounts.clone(),
            ),
        ],
        &ns,
    )
    .await
    .unwrap();
    wait_pod(&kube, &ns, "writer", 120, succeeded).await;
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    pods.delete("writer", &DeleteParams::default())
        .await
        .unwrap();
    kube.apply(
        &[shell_pod("reader", "cat /data/file", volumes, mounts)],
        &ns,
    )
    .await
    .unwrap();
    wait_pod(&kube, &ns, "reader", 120, succeeded).await;
    assert_eq!(logs(&kube, &ns, "reader").await.trim(), "kept");

    // The claim was bound by the default StorageClass to a directory volume.
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(kube.client.clone(), &ns);
    let claim = claims.get("data").await.unwrap();
    let spec = claim.spec.unwrap();
    assert_eq!(
        spec.storage_class_name.as_deref(),
        Some(testbed::cluster::STORAGE_CLASS)
    );
    let volume_name = spec.volume_name.unwrap();
    let volumes: Api<PersistentVolume> = Api::all(kube.client.clone());
    let path = volumes
        .get(&volume_name)
        .await
        .unwrap()
        .spec
        .unwrap()
        .host_path
        .map(|h| h.path);

    // Deleting the claim removes the volume (and, on this bed, its directory).
    pods.delete("reader", &DeleteParams::default())
        .await
        .unwrap();
    claims
        .delete("data", &DeleteParams::default())
        .await
        .unwrap();
    let gone = await_condition(
        volumes.clone(),
        &volume_name,
        |v: Option<&PersistentVolume>| v.is_none(),
    );
    tokio::time::timeout(Duration::from_secs(60), gone)
        .await
        .expect("volume still there 60 s after its claim was deleted")
        .unwrap();
    if kube.dir().is_some() {
        let path = path.expect("a hostPath volume");
        assert!(!std::path::Path::new(&path).exists(), "{path} still exists");
    }
    kube.delete_namespace(&ns).await.unwrap();
}

/// Runs up.sh with `args` (as `user` when given); its exit code and stderr.
/// The non-root user runs a copy in a directory it can read: the checkout may sit under one
/// only root can enter (a `mktemp -d` clone is mode 0700).
fn up(args: &[&str], user: Option<&str>) -> (i32, String) {
    use std::os::unix::fs::PermissionsExt as _;
    let copy = tempfile::tempdir().unwrap();
    let mut command = match user {
        Some(user) => {
            let root = copy.path();
            std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).unwrap();
            let here = std::path::Path::new(UP).parent().unwrap();
            for (from, to) in [
                (here.join("up.sh"), root.join("cluster/up.sh")),
                (here.join("versions.sh"), root.join("cluster/versions.sh")),
                (here.join("node.sh"), root.join("cluster/node.sh")),
                (
                    here.join("../lib/processes.sh"),
                    root.join("lib/processes.sh"),
                ),
            ] {
                let dir = to.parent().unwrap();
                std::fs::create_dir_all(dir).unwrap();
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
                std::fs::copy(&from, &to).unwrap();
                std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
            let script = root.join("cluster/up.sh");
            let mut c = std::process::Command::new("setpriv");
            c.args(["--reuid", user, "--regid", user, "--clear-groups"]);
            c.arg(script);
            c
        }
        None => std::process::Command::new(UP),
    };
    let output = command.args(args).output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_second_bed_or_a_non_root_user_is_refused_with_one_line() {
    let kube = KubeTestbed::with_kubelet().await.unwrap();
    if kube.dir().is_none() {
        eprintln!("KUBECONFIG names another cluster: the bed script is not under test");
        return;
    }
    let other = tempfile::tempdir().unwrap();
    let dir = other.path().to_str().unwrap();
    let (code, stderr) = up(&[dir], None);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("another bed runs on this machine"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let (code, stderr) = up(&[dir], Some("65534"));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("the bed needs root"), "{stderr}");
    // The running bed is untouched.
    kube.client.apiserver_version().await.unwrap();
}
