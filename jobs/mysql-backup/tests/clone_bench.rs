//! Benchmark, run by hand (not a timed test): the time for a new replica of the example
//! StatefulSet to clone and catch up with a primary holding about 1 GiB, on the kubelet bed,
//!   (a) through `serve`/`clone` as `examples/mysql/statefulset.yaml` does it (the StatefulSet
//!       scaled from 1 to 2: the stream encrypted and authenticated, checked while it flows), and
//!   (b) the Kubernetes tutorial's way, on the same primary: `mariadb-backup --stream=xbstream |
//!       ncat` beside it, `ncat | mbstream -x` then `mariadb-backup --prepare` in the new pod's
//!       init container, then the server started and `CHANGE MASTER` from the backup's GTID
//!       (plain TCP, no authentication, no check of the stream).
//! Each from its creation (the scale, the pod) until the new server serves every row and
//! replicates. Reported: both times and their ratio (a) / (b). Figures:
//! docs/benchmarks/mysql-backup.md.
//!
//!   cargo test -p mysql-backup --test clone_bench -- --ignored --nocapture
//!
//! The bed's mysql-backup image holds the binary of the build the bed was given (a debug build
//! by default): the docs page says how to measure the release build, as shipped.
//!
//! BENCH_CLONE_MIB (default 1024): the data set's size. The bench's own changes to the example
//! (for (b) only): a sidecar streaming `mariadb-backup` through ncat on port 3308 of mysql-0.

mod common;

use std::time::{Duration, Instant};

use common::sql;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
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
const TOOLS: &str = "localhost/ncat-clone:bench";

/// A container's part of Pod Security "restricted".
fn restricted() -> Value {
    json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}})
}

/// Waits until POD serves `rows` rows and its replication threads run; the time it took.
async fn caught_up(
    kube: &KubeTestbed,
    ns: &str,
    pod: &str,
    rows: &str,
    since: Instant,
) -> Duration {
    let deadline = since + Duration::from_secs(1800);
    loop {
        let count = sql(kube, ns, pod, "", "SELECT COUNT(*) FROM bench.t").await;
        let replicating = sql(
            kube,
            ns,
            pod,
            "",
            "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'SLAVE_RUNNING'",
        )
        .await;
        if count.as_deref() == Ok(rows) && replicating.as_deref() == Ok("ON") {
            return since.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "{pod}: {count:?} {replicating:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Where a pod's time went: each init container's run, and when its containers started.
fn phases(pod: &Pod) -> String {
    let status = pod.status.clone().unwrap_or_default();
    let created = pod.metadata.creation_timestamp.clone().unwrap().0;
    let at = |t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time| {
        format!("{:.0}", (t.0 - created).get_seconds())
    };
    let mut out = format!("{}:", pod.metadata.name.clone().unwrap_or_default());
    for c in status.init_container_statuses.iter().flatten() {
        if let Some(t) = c.state.as_ref().and_then(|s| s.terminated.as_ref()) {
            out.push_str(&format!(
                " {} {}-{} s,",
                c.name,
                t.started_at.as_ref().map(at).unwrap_or_default(),
                t.finished_at.as_ref().map(at).unwrap_or_default()
            ));
        }
    }
    for c in status.container_statuses.iter().flatten() {
        if let Some(t) = c.state.as_ref().and_then(|s| s.running.as_ref()) {
            out.push_str(&format!(
                " {} from {} s,",
                c.name,
                t.started_at.as_ref().map(at).unwrap_or_default()
            ));
        }
    }
    out
}

/// The tutorial's sender, beside mysql-0's server: one backup stream per connection on 3308.
fn ncat_sender() -> Value {
    json!({
        "name": "ncat-sender", "image": TOOLS, "imagePullPolicy": "Never",
        "command": ["bash", "-ec", r#"
printf '[client]\nuser=root\npassword=%s\nhost=127.0.0.1\n' "$(cat /etc/mysql-backup/root-password)" >/tmp/my.cnf
exec ncat --listen --keep-open --send-only --max-conns=1 3308 \
  -c 'mariadb-backup --defaults-extra-file=/tmp/my.cnf --backup --slave-info --stream=xbstream --datadir=/var/lib/mysql --target-dir=/tmp'
"#],
        "securityContext": restricted(),
        "volumeMounts": [
            {"name": "data", "mountPath": "/var/lib/mysql"},
            {"name": "run", "mountPath": "/run/mysqld"},
            {"name": "secret", "mountPath": "/etc/mysql-backup", "readOnly": true},
        ],
    })
}

/// The tutorial's new replica: receive, prepare, serve, replicate from mysql-0.
fn ncat_replica(ns: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "ncat-replica", "namespace": ns},
        "spec": {
            "securityContext": {"runAsNonRoot": true, "runAsUser": 999, "runAsGroup": 999, "fsGroup": 999,
                "seccompProfile": {"type": "RuntimeDefault"}},
            "initContainers": [{
                "name": "receive", "image": TOOLS, "imagePullPolicy": "Never",
                "command": ["bash", "-ec", r#"
printf '[mysqld]\nserver-id=150\nlog-bin=bin\nlog-slave-updates\nread-only=1\n' >/mnt/conf.d/replica.cnf
ncat --recv-only mysql-0.mysql 3308 | mbstream -x -C /var/lib/mysql
mariadb-backup --prepare --use-memory=256M --target-dir=/var/lib/mysql
"#],
                "securityContext": restricted(),
                "volumeMounts": [{"name": "data", "mountPath": "/var/lib/mysql"}, {"name": "conf", "mountPath": "/mnt/conf.d"}],
            }],
            "containers": [{
                "name": "mysql", "image": "localhost/mariadb-fixture:10.11", "imagePullPolicy": "Never",
                "securityContext": restricted(),
                "env": [{"name": "MARIADB_ROOT_PASSWORD_FILE", "value": "/etc/mysql-backup/root-password"}],
                "volumeMounts": [
                    {"name": "data", "mountPath": "/var/lib/mysql"}, {"name": "conf", "mountPath": "/etc/mysql/conf.d"},
                    {"name": "run", "mountPath": "/run/mysqld"}, {"name": "secret", "mountPath": "/etc/mysql-backup", "readOnly": true},
                ],
            }, {
                "name": "replicate", "image": TOOLS, "imagePullPolicy": "Never",
                "command": ["bash", "-ec", r#"
export MYSQL_PWD=$(cat /etc/mysql-backup/root-password)
until mariadb -uroot -e 'SELECT 1' >/dev/null 2>&1; do sleep 0.2; done
gtid=$(cut -f3 /var/lib/mysql/xtrabackup_binlog_info)
repl=$(cat /etc/mysql-backup/replication-password)
mariadb -uroot -e "SET GLOBAL gtid_slave_pos='$gtid'; CHANGE MASTER TO MASTER_HOST='mysql-0.mysql', MASTER_USER='repl', MASTER_PASSWORD='$repl', MASTER_USE_GTID=slave_pos; START SLAVE;"
exec sleep infinity
"#],
                "securityContext": restricted(),
                "volumeMounts": [
                    {"name": "data", "mountPath": "/var/lib/mysql"}, {"name": "run", "mountPath": "/run/mysqld"},
                    {"name": "secret", "mountPath": "/etc/mysql-backup", "readOnly": true},
                ],
            }],
            "volumes": [
                {"name": "data", "ephemeral": {"volumeClaimTemplate": {"spec": {
                    "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}}}}},
                {"name": "conf", "emptyDir": {}}, {"name": "run", "emptyDir": {}},
                {"name": "secret", "secret": {"secretName": "mysql-backup", "defaultMode": 288}},
            ],
        },
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run by hand with --ignored --nocapture"]
async fn bench_clone_against_the_tutorial_s_ncat() {
    let mib: u64 = std::env::var("BENCH_CLONE_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let (kube, ns, _report) = testbed::cluster::test_namespace("mysql-bench").await;
    let mut manifests = testbed::kustomize::render_files_for_bed(&FILES, &ns, &IMAGES).unwrap();
    // A token of its own, as a user must set (the example's placeholder is refused).
    for doc in manifests
        .iter_mut()
        .filter(|d| d["kind"] == "Secret" && d["metadata"]["name"] == "mysql-backup")
    {
        doc["stringData"]["token"] = json!("0a".repeat(32));
    }
    for doc in manifests.iter_mut().filter(|d| d["kind"] == "StatefulSet") {
        doc["spec"]["replicas"] = json!(1);
        let containers = doc["spec"]["template"]["spec"]["containers"]
            .as_array_mut()
            .unwrap();
        containers.push(ncat_sender());
    }
    kube.apply(&manifests, &ns).await.unwrap();
    let sets: Api<StatefulSet> = Api::namespaced(kube.client.clone(), &ns);
    wait_until(&sets, "mysql", "mysql-0 ready", 300, |s: &StatefulSet| {
        s.status.as_ref().and_then(|s| s.ready_replicas) == Some(1)
    })
    .await
    .unwrap();

    // About `mib` MiB of rows of 1 KiB of random hex: doubled until large enough.
    let rows = mib * 1024;
    sql(
        &kube,
        &ns,
        "mysql-0",
        "",
        "CREATE DATABASE bench; CREATE TABLE bench.t (id BIGINT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(1024)); \
         INSERT INTO bench.t (v) SELECT CONCAT(SHA2(RAND(),512),SHA2(RAND(),512),SHA2(RAND(),512),SHA2(RAND(),512),\
         SHA2(RAND(),512),SHA2(RAND(),512),SHA2(RAND(),512),SHA2(RAND(),512)) FROM bench.seq_1_to_1024",
    )
    .await
    .unwrap();
    let mut have = 1024;
    while have < rows {
        let add = (rows - have).min(have);
        sql(
            &kube,
            &ns,
            "mysql-0",
            "",
            &format!(
                "INSERT INTO bench.t (v) SELECT CONCAT(SHA2(RAND(),512),SHA2(RAND(),512),SHA2(RAND(),512),SHA2(RAND(),512),\
                 SHA2(RAND(),512),SHA2(RAND(),512),SHA2(RAND(),512),SHA2(RAND(),512)) FROM bench.t LIMIT {add}"
            ),
        )
        .await
        .unwrap();
        have += add;
    }
    sql(
        &kube,
        &ns,
        "mysql-0",
        "",
        "ANALYZE TABLE bench.t PERSISTENT FOR ALL",
    )
    .await
    .unwrap();
    let count = sql(&kube, &ns, "mysql-0", "", "SELECT COUNT(*) FROM bench.t")
        .await
        .unwrap();
    let size = sql(
        &kube,
        &ns,
        "mysql-0",
        "",
        "SELECT ROUND(SUM(data_length + index_length) / 1048576) FROM information_schema.TABLES WHERE table_schema = 'bench'",
    )
    .await
    .unwrap();

    // (a) serve/clone: the StatefulSet scaled to 2.
    let started = Instant::now();
    sets.patch(
        "mysql",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 2}})),
    )
    .await
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    wait_until(&pods, "mysql-1", "mysql-1 made", 60, |_: &Pod| true)
        .await
        .unwrap();
    let clone = caught_up(&kube, &ns, "mysql-1", &count, started).await;

    // (b) the tutorial's ncat: a new pod of its own.
    let started = Instant::now();
    let pod: Pod = serde_json::from_value(ncat_replica(&ns)).unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let ncat = caught_up(&kube, &ns, "ncat-replica", &count, started).await;

    for name in ["mysql-1", "ncat-replica"] {
        println!("{}", phases(&pods.get(name).await.unwrap()));
    }
    println!("a new replica from {count} rows ({size} MiB of tables) on the bed:");
    println!(
        "serve/clone (encrypted, authenticated, checked): {:.1} s",
        clone.as_secs_f64()
    );
    println!(
        "the tutorial's mariadb-backup | ncat:            {:.1} s",
        ncat.as_secs_f64()
    );
    println!(
        "serve/clone / ncat: {:.2}",
        clone.as_secs_f64() / ncat.as_secs_f64()
    );
    kube.delete_namespace(&ns).await.unwrap();
}
