//! Scale benchmark of the whole operator process: N scheduled EtcdBackups (default 1,000) in a
//! real API server (the test process's own control plane, or `KUBECONFIG`'s cluster), watched by the release
//! `etcd-backup-operator` binary. Complements `scale.rs`, which drives the scheduling core alone.
//!
//! ```sh
//! cargo build --release -p etcd-backup-operator
//! cargo run --release -p etcd-backup-operator --example watch_scale -- [objects] [idle-seconds]
//! ```
//!
//! The objects use cron schedules that are not due during the run (`@daily`, `@weekly`, yearly),
//! so the operator reconciles each once (status with `nextScheduleTime`) and then idles with all
//! of them in its watch cache and timer queue. Prints the time until every object's status was
//! written, then RSS, peak RSS and CPU of the operator process over the idle window.
//! `OPERATOR_BIN` overrides the binary (default `target/release/etcd-backup-operator`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use etcd_api::EtcdBackup;
use futures::StreamExt;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;
use testbed::kube::KubeTestbed;
use testbed::procstat;

const SCHEDULES: [&str; 3] = ["@daily", "@weekly", "0 0 1 1 *"];

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let objects: usize = args.next().map(|a| a.parse().unwrap()).unwrap_or(1000);
    let idle_seconds: u64 = args.next().map(|a| a.parse().unwrap()).unwrap_or(60);
    let binary = std::env::var_os("OPERATOR_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/release/etcd-backup-operator")
        });
    assert!(
        binary.exists(),
        "{} missing: cargo build --release -p etcd-backup-operator",
        binary.display()
    );

    let kube = KubeTestbed::start().await.expect("kube test bed");
    kube.install_crds().await.expect("CRDs");
    let ns = kube.namespace("watch-scale").await.unwrap();
    let api: Api<EtcdBackup> = Api::namespaced(kube.client.clone(), &ns);

    let created = Instant::now();
    futures::stream::iter(0..objects)
        .map(|i| {
            let api = api.clone();
            async move {
                let backup: EtcdBackup = serde_json::from_value(json!({
                    "apiVersion": "etcd.database.coreos.com/v1beta2",
                    "kind": "EtcdBackup",
                    "metadata": {"name": format!("backup-{i:05}")},
                    "spec": {
                        "etcdEndpoints": [format!("http://etcd-{}.example:2379", i % 50)],
                        "storageType": "S3",
                        "backupPolicy": {"schedule": SCHEDULES[i % SCHEDULES.len()], "maxBackups": 7},
                        "s3": {"path": format!("backups/cluster-{i}/etcd.backup"), "awsSecret": "aws"},
                    }
                }))
                .unwrap();
                api.create(&PostParams::default(), &backup).await.unwrap();
            }
        })
        .buffer_unordered(16)
        .collect::<()>()
        .await;
    println!(
        "created {objects} EtcdBackups in {:.1} s",
        created.elapsed().as_secs_f64()
    );

    let port = testbed::free_port();
    let log = std::env::temp_dir().join(format!("watch-scale-{port}.log"));
    let mut child = tokio::process::Command::new(&binary)
        .args(["--namespace", &ns, "--listen", &format!("127.0.0.1:{port}")])
        .args(["--log-format", "json"])
        .env("KUBECONFIG", &kube.kubeconfig)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    let started = Instant::now();

    // Until every object carries the status the operator writes for a scheduled backup.
    loop {
        assert!(
            child.try_wait().unwrap().is_none(),
            "operator exited; see {}",
            log.display()
        );
        let list = api.list(&ListParams::default()).await.unwrap();
        let done = list
            .items
            .iter()
            .filter(|b| {
                b.status
                    .as_ref()
                    .is_some_and(|s| s.next_schedule_time.is_some())
            })
            .count();
        if done == objects {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "only {done} of {objects} reconciled after 600 s"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let settle = started.elapsed().as_secs_f64();
    let after_settle = procstat::sample(pid);

    tokio::time::sleep(Duration::from_secs(idle_seconds)).await;
    let after_idle = procstat::sample(pid);
    let idle_cpu = (after_idle.cpu_seconds - after_settle.cpu_seconds) / idle_seconds as f64;

    println!("objects: {objects}");
    println!(
        "all statuses written after: {settle:.1} s (startup, initial list, one reconcile each)"
    );
    println!(
        "CPU until then: {:.2} s; peak RSS: {:.1} MiB",
        after_settle.cpu_seconds,
        after_idle.peak_rss_kib as f64 / 1024.0
    );
    println!(
        "idle over {idle_seconds} s: RSS {:.1} MiB, CPU {:.2} %",
        after_idle.rss_kib as f64 / 1024.0,
        idle_cpu * 100.0
    );
    let _ = child.kill().await;
    kube.delete_namespace(&ns).await.unwrap();
}
