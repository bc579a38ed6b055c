//! The StatefulSet test's restore to a point, as docs/operations/mysql-point-in-time-restore.md
//! tells it: the primary's `binlogs` sidecar archived the binary logs; the restore Job of the
//! example, with `--newest` replaced by the point as its comment says, fills a claim of its own;
//! a server started on that claim shows every row committed before the point.

use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use kube::Api;
use kube::api::{DeleteParams, ListParams, LogParams};
use serde_json::{Value, json};
use testbed::Garage;
use testbed::kube::KubeTestbed;

use super::{COUNT, IMAGES, RESTORE, doc, eventually, job_succeeded};

/// `mysql-backup list-binlogs PREFIX --output json`, run here, until a file's last transaction
/// is `gtid`: the archiver has stored everything up to it.
pub async fn archived_through(garage: &Garage, prefix: &str, gtid: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_mysql-backup"));
        testbed::cli::without_ambient_aws(&mut command)
            .envs(garage.env())
            .env("S3_FORCE_PATH_STYLE", "true")
            .args(["list-binlogs", prefix, "--output", "json"]);
        let output = command.output().await.unwrap();
        assert!(
            output.status.success(),
            "list-binlogs: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let files: Value = serde_json::from_slice(&output.stdout).unwrap();
        let files = files.as_array().unwrap();
        if files.iter().any(|f| f["lastGtid"] == gtid) {
            // The primary's restart began a new file, which continues the history.
            assert!(files.len() >= 2, "{files:?}");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the archive does not reach {gtid}: {files:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The restore Job to just before `gtid` into the claim `mysql-pitr`, then a server on it:
/// `rows` rows in demo.t. Everything it made is deleted afterwards.
pub async fn restore_to_point(
    kube: &KubeTestbed,
    ns: &str,
    identity: &str,
    gtid: &str,
    rows: &str,
) {
    let key = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "mysql-restore-key"},
        "stringData": {"identity.txt": identity}});
    kube.apply(&[key], ns).await.unwrap();
    let mut restore = testbed::kustomize::render_files_for_bed(&RESTORE, ns, &IMAGES).unwrap();
    // A claim of its own, not the StatefulSet's (which still runs on data-mysql-0).
    let claim = &mut doc(&mut restore, "PersistentVolumeClaim", "data-mysql-0")["metadata"];
    claim["name"] = json!("mysql-pitr");
    claim["labels"] = json!({});
    let job = doc(&mut restore, "Job", "mysql-restore");
    job["metadata"]["name"] = json!("mysql-restore-pitr");
    let spec = &mut job["spec"]["template"]["spec"];
    for volume in spec["volumes"].as_array_mut().unwrap() {
        if volume["name"] == "data" {
            volume["persistentVolumeClaim"]["claimName"] = json!("mysql-pitr");
        }
    }
    // As the Job's comment says: `--newest` replaced by the point.
    let args = spec["containers"][0]["args"].as_array_mut().unwrap();
    let at = args.iter().position(|a| a == "--newest").unwrap();
    args.splice(
        at..=at,
        ["--binlogs", "$(BINLOG_PREFIX)", "--until-gtid", gtid].map(|a| json!(a)),
    );
    kube.apply(&restore, ns).await.unwrap();
    let jobs: Api<Job> = Api::namespaced(kube.client.clone(), ns);
    job_succeeded(&jobs, "mysql-restore-pitr", 600).await;
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    let of_job = ListParams::default().labels("job-name=mysql-restore-pitr");
    let ran = pods.list(&of_job).await.unwrap().items;
    let log = pods
        .logs(
            ran[0].metadata.name.as_deref().unwrap(),
            &LogParams::default(),
        )
        .await
        .unwrap();
    let report: Value = serde_json::from_str(log.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("the restore's last line is not its report ({e}): {log}"));
    assert_eq!(report["stoppedBefore"], gtid, "{report}");
    // The newest backup before the point is the CronJob's incremental: applied with its chain.
    assert!(report["chain"].as_array().unwrap().len() >= 2, "{report}");

    // A server on the restored claim, as the StatefulSet's primary would start on it.
    let server = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "mysql-pitr"},
        "spec": {
            "securityContext": {"runAsNonRoot": true, "runAsUser": 999, "runAsGroup": 999,
                "fsGroup": 999, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "mysql", "image": "localhost/mariadb-fixture:10.11",
                "securityContext": {"allowPrivilegeEscalation": false,
                    "capabilities": {"drop": ["ALL"]}},
                "volumeMounts": [
                    {"name": "data", "mountPath": "/var/lib/mysql"},
                    {"name": "run", "mountPath": "/run/mysqld"},
                    {"name": "secrets", "mountPath": "/etc/mysql-backup", "readOnly": true}]}],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "mysql-pitr"}},
                {"name": "run", "emptyDir": {}},
                {"name": "secrets", "secret": {"secretName": "mysql-backup", "defaultMode": 288,
                    "items": [{"key": "root-password", "path": "root-password"}]}}]}});
    kube.apply(&[server], ns).await.unwrap();
    eventually(kube, ns, "mysql-pitr", COUNT, rows).await;

    pods.delete("mysql-pitr", &DeleteParams::default())
        .await
        .unwrap();
    jobs.delete("mysql-restore-pitr", &DeleteParams::background())
        .await
        .unwrap();
    let secrets: Api<Secret> = Api::namespaced(kube.client.clone(), ns);
    secrets
        .delete("mysql-restore-key", &DeleteParams::default())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while pods.get_opt("mysql-pitr").await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "mysql-pitr not deleted");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(kube.client.clone(), ns);
    claims
        .delete("mysql-pitr", &DeleteParams::default())
        .await
        .unwrap();
    while claims.get_opt("mysql-pitr").await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "mysql-pitr's claim not deleted");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
