//! The replicated MySQL StatefulSet of `examples/mysql`, as shipped, on the kubelet bed: the
//! overlay (testbed::kustomize::render_files_for_bed) renames the images and the namespace and
//! changes nothing else. The namespace enforces Pod Security `restricted`. Images:
//! `localhost/mysql-backup:dev` is the Dockerfile's mysql-backup target with this build's binary;
//! `localhost/mariadb-fixture:10.11` stands in for the official `mariadb:10.11` image, which the
//! bed cannot pull (e2e/cluster/mariadb-fixture/ says what it provides).
//!
//! One StatefulSet through its life, each step checked by what MariaDB serves:
//! 1. 3 replicas: mysql-0 initialises as primary, mysql-1 and mysql-2 clone from the previous
//!    ordinal through `serve`/`clone` (encrypted, token-authenticated) and replicate; rows
//!    written on mysql-0 are read from mysql-2 through the `mysql-read` Service.
//! 2. Scale to 4: mysql-3 clones and catches up. mysql-2's pod deleted: it comes back on its
//!    claim without cloning (the marker) and still replicates. mysql-2's pod and claim deleted:
//!    it clones afresh.
//! 3. The token in the Secret replaced, then scale to 5: mysql-4's clone is refused by mysql-3's
//!    `serve` (which holds the old token), the pod stays in init with the reason in its log, and
//!    its data dir stays empty.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use kube::Api;
use kube::api::{DeleteParams, LogParams, Patch, PatchParams};
use serde_json::{Value, json};
use testbed::kube::{KubeTestbed, wait_until};

const FILES: [&str; 2] = [
    "examples/mysql/secrets.yaml",
    "examples/mysql/statefulset.yaml",
];
const IMAGES: [(&str, &str, &str); 2] = [
    ("mariadb", "localhost/mariadb-fixture", "10.11"),
    ("example.com/mysql-backup", "localhost/mysql-backup", "dev"),
];
/// Each replica initialises or clones, then starts: generous for a loaded 2-core bed.
const PER_REPLICA_SECONDS: u64 = 240;

/// `kubectl exec POD -c CONTAINER -- ARGS`: stdout, or stderr as the error.
fn try_exec(
    kube: &KubeTestbed,
    ns: &str,
    pod: &str,
    container: &str,
    args: &[&str],
) -> Result<String, String> {
    let output = testbed::cluster::kubectl(&kube.kubeconfig)
        .args(["--namespace", ns, "exec", pod, "-c", container, "--"])
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).to_string())
    }
}

/// `statement` run by the `mariadb` client in POD's container CONTAINER as root, the password
/// read from the mounted Secret (never an argument); `host` empty for the local socket.
fn sql(
    kube: &KubeTestbed,
    ns: &str,
    pod: &str,
    host: &str,
    statement: &str,
) -> Result<String, String> {
    let script = r#"MYSQL_PWD=$(cat /etc/mysql-backup/root-password) exec mariadb -uroot -N -B ${1:+-h "$1"} -e "$0""#;
    try_exec(
        kube,
        ns,
        pod,
        "mysql",
        &["bash", "-c", script, statement, host],
    )
}

/// Polls `statement` on POD until it prints `expected` (replication is asynchronous).
async fn eventually(kube: &KubeTestbed, ns: &str, pod: &str, statement: &str, expected: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let last = sql(kube, ns, pod, "", statement);
        if last.as_deref() == Ok(expected) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{pod}: {statement:?} printed {last:?}, not {expected:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn scale(sets: &Api<StatefulSet>, replicas: i32) {
    sets.patch(
        "mysql",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": replicas}})),
    )
    .await
    .unwrap();
}

async fn ready(sets: &Api<StatefulSet>, replicas: i32) {
    let what = format!("{replicas} replicas ready");
    wait_until(
        sets,
        "mysql",
        &what,
        PER_REPLICA_SECONDS * replicas as u64,
        move |s: &StatefulSet| {
            s.status.as_ref().is_some_and(|st| {
                st.ready_replicas == Some(replicas) && st.updated_replicas == Some(replicas)
            })
        },
    )
    .await
    .unwrap();
}

async fn clone_log(pods: &Api<Pod>, pod: &str) -> String {
    pods.logs(
        pod,
        &LogParams {
            container: Some("clone".into()),
            ..LogParams::default()
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{pod}'s clone log: {e}"))
}

/// The uid of pod `name` once it exists again after a deletion (a uid other than `old`) and is
/// Ready.
async fn recreated_ready(pods: &Api<Pod>, name: &str, old: String) {
    wait_until(
        pods,
        name,
        "recreated and Ready",
        PER_REPLICA_SECONDS,
        move |p: &Pod| {
            p.metadata.uid.as_deref() != Some(old.as_str())
                && p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        },
    )
    .await
    .unwrap();
}

async fn insert_rows(kube: &KubeTestbed, ns: &str, from: u32, to: u32) {
    let values: Vec<String> = (from..to).map(|i| format!("({i}, 'row {i}')")).collect();
    sql(
        kube,
        ns,
        "mysql-0",
        "",
        &format!("INSERT INTO demo.t VALUES {}", values.join(",")),
    )
    .unwrap();
}

const COUNT: &str = "SELECT COUNT(*) FROM demo.t";

#[tokio::test]
async fn the_example_statefulset_clones_replicates_heals_and_refuses_a_wrong_token() {
    let (kube, ns, _report) = testbed::cluster::test_namespace("mysql-sts").await;
    let manifests = testbed::kustomize::render_files_for_bed(&FILES, &ns, &IMAGES).unwrap();
    kube.apply(&manifests, &ns).await.unwrap();
    let sets: Api<StatefulSet> = Api::namespaced(kube.client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);

    // 1. Three replicas: a primary and two clones that replicate.
    ready(&sets, 3).await;
    sql(
        &kube,
        &ns,
        "mysql-0",
        "",
        "CREATE DATABASE demo; CREATE TABLE demo.t (id INT PRIMARY KEY, v VARCHAR(64))",
    )
    .unwrap();
    insert_rows(&kube, &ns, 0, 100).await;
    for replica in ["mysql-1", "mysql-2"] {
        let log = clone_log(&pods, replica).await;
        assert!(
            log.contains("receiving backup"),
            "{replica} did not clone: {log}"
        );
        eventually(&kube, &ns, replica, COUNT, "100").await;
        let read_only = sql(&kube, &ns, replica, "", "SELECT @@read_only").unwrap();
        assert_eq!(read_only, "1", "{replica} is writable");
    }
    // Through the `mysql-read` Service (from a replica's own client): every server answers with
    // the rows; Service load balancing picks the server, so ask until each has answered.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut answered = BTreeSet::new();
    while answered.len() < 3 {
        assert!(
            Instant::now() < deadline,
            "mysql-read: only {answered:?} answered with 100 rows"
        );
        if let Ok(line) = sql(
            &kube,
            &ns,
            "mysql-1",
            "mysql-read",
            "SELECT @@server_id, COUNT(*) FROM demo.t",
        ) && let Some(("100" | "101" | "102", "100")) = line.split_once('\t')
        {
            answered.insert(line);
        }
    }

    // 2. Scale to 4: mysql-3 clones from mysql-2 and catches up with rows written after.
    scale(&sets, 4).await;
    ready(&sets, 4).await;
    insert_rows(&kube, &ns, 100, 150).await;
    assert!(
        clone_log(&pods, "mysql-3")
            .await
            .contains("receiving backup")
    );
    eventually(&kube, &ns, "mysql-3", COUNT, "150").await;

    // mysql-2's pod deleted: back on its claim, no clone, still replicating.
    let old = pods.get("mysql-2").await.unwrap().metadata.uid.unwrap();
    pods.delete("mysql-2", &DeleteParams::default())
        .await
        .unwrap();
    recreated_ready(&pods, "mysql-2", old).await;
    let log = clone_log(&pods, "mysql-2").await;
    assert!(
        log.contains("already initialised; not cloning") && !log.contains("receiving backup"),
        "mysql-2 cloned again on its own claim: {log}"
    );
    insert_rows(&kube, &ns, 150, 200).await;
    eventually(&kube, &ns, "mysql-2", COUNT, "200").await;

    // mysql-2's pod and claim deleted: a new claim, cloned afresh.
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(kube.client.clone(), &ns);
    let old_claim = claims.get("data-mysql-2").await.unwrap().metadata.uid;
    let old = pods.get("mysql-2").await.unwrap().metadata.uid.unwrap();
    claims
        .delete("data-mysql-2", &DeleteParams::default())
        .await
        .unwrap();
    pods.delete("mysql-2", &DeleteParams::default())
        .await
        .unwrap();
    recreated_ready(&pods, "mysql-2", old).await;
    assert_ne!(
        claims.get("data-mysql-2").await.unwrap().metadata.uid,
        old_claim
    );
    assert!(
        clone_log(&pods, "mysql-2")
            .await
            .contains("receiving backup")
    );
    eventually(&kube, &ns, "mysql-2", COUNT, "200").await;

    // 3. Another token in the Secret; mysql-3's serve holds the one it started with.
    let secrets: Api<Secret> = Api::namespaced(kube.client.clone(), &ns);
    secrets
        .patch(
            "mysql-backup",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"token": "0f".repeat(32)}})),
        )
        .await
        .unwrap();
    scale(&sets, 5).await;
    // Positive signal: the clone container ended with a failure (at least once).
    let refused = wait_until(
        &pods,
        "mysql-4",
        "clone failed",
        PER_REPLICA_SECONDS,
        |p: &Pod| {
            let statuses = p
                .status
                .as_ref()
                .and_then(|s| s.init_container_statuses.as_ref());
            statuses.into_iter().flatten().any(|c| {
                c.name == "clone"
                    && [c.state.as_ref(), c.last_state.as_ref()]
                        .into_iter()
                        .flatten()
                        .filter_map(|s| s.terminated.as_ref())
                        .any(|t| t.exit_code != 0)
            })
        },
    )
    .await
    .unwrap();
    let phase = refused.status.and_then(|s| s.phase);
    assert_eq!(phase.as_deref(), Some("Pending"), "mysql-4 left init");
    let mut log = String::new();
    for previous in [true, false] {
        let params = LogParams {
            container: Some("clone".into()),
            previous,
            ..LogParams::default()
        };
        log.push_str(&pods.logs("mysql-4", &params).await.unwrap_or_default());
    }
    assert!(
        log.contains("does not hold the same token"),
        "mysql-4's clone log: {log}"
    );
    // Its data dir, read by a pod of its own on the same claim: empty.
    // As mysql (999), like the StatefulSet's pods: another fsGroup would change the claim's files.
    let look: Value = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "look-at-data-mysql-4"},
        "spec": {"restartPolicy": "Never",
            "securityContext": {"runAsUser": 999, "runAsGroup": 999, "fsGroup": 999},
            "containers": [{"name": "ls", "image": "localhost/mysql-backup:dev",
                "imagePullPolicy": "Never", "command": ["bash", "-ec",
                "n=$(ls -A /var/lib/mysql | grep -v '^lost+found$' | wc -l); test \"$n\" = 0"],
                "volumeMounts": [{"name": "data", "mountPath": "/var/lib/mysql"}]}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-mysql-4"}}]}});
    testbed::cluster::run_once(&pods, look, 120).await;

    kube.delete_namespace(&ns).await.unwrap();
}
