//! The StatefulSet test's restores beside the disaster: the primary's `binlogs` sidecar
//! archives the binary logs (SIGKILLed once mid-archive: it resumes with no gap, which the replay
//! checks transaction by transaction); the example's restore Job as shipped (`--newest`) fills a
//! claim of its own while the StatefulSet runs on; and the Job's command changed to a point as
//! docs/operations/mysql-point-in-time-restore.md says (used by the disaster step).

use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ContainerStatus, PersistentVolumeClaim, Pod, Secret};
use kube::Api;
use kube::api::{DeleteParams, ListParams, LogParams};
use serde_json::{Value, json};
use testbed::Garage;
use testbed::kube::KubeTestbed;

use super::{COUNT, IMAGES, RESTORE, ROWS, doc, eventually, job_succeeded, rows_before};

/// The status of mysql-0's `binlogs` container, as the API server has it now.
async fn archiver_status(pods: &Api<Pod>) -> Option<ContainerStatus> {
    let pod = pods.get("mysql-0").await.unwrap();
    pod.status
        .and_then(|s| s.container_statuses)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.name == "binlogs")
}

/// mysql-0's `binlogs` container: its restarts so far and its container ID (without the
/// runtime's `containerd://`).
async fn archiver_container(pods: &Api<Pod>) -> (i32, String) {
    let status = archiver_status(pods)
        .await
        .expect("mysql-0 has a binlogs container");
    let id = status.container_id.unwrap_or_default();
    let id = id.rsplit("://").next().unwrap_or_default().to_string();
    assert!(!id.is_empty(), "the binlogs container has no ID yet");
    (status.restart_count, id)
}

/// SIGKILLs the `binlogs` sidecar's archiver on mysql-0, then waits until the kubelet has
/// restarted it. Nothing lets it finish a piece or say goodbye. The process is found on this
/// machine (the bed's kubelet runs its containers here) by the container's ID in its cgroup,
/// so no other pod's archiver is touched.
pub async fn kill_archiver(pods: &Api<Pod>) {
    let (before, id) = archiver_container(pods).await;
    let mut killed = 0;
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cgroup = std::fs::read_to_string(entry.path().join("cgroup")).unwrap_or_default();
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if cgroup.contains(&id) && args.contains(&&b"archive-binlogs"[..]) {
            let status = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status()
                .unwrap();
            assert!(status.success(), "kill -KILL {pid}");
            killed += 1;
        }
    }
    assert_eq!(
        killed, 1,
        "one archiver process in container {id} on this machine (the bed's kubelet runs here)"
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let running = archiver_status(pods)
            .await
            .is_some_and(|c| c.restart_count > before && c.state.and_then(|s| s.running).is_some());
        if running {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the binlogs sidecar was not restarted"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

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

/// The restore Job's command changed as the point-in-time runbook says: `--newest` replaced
/// by the archive and the point (the transaction `gtid` and all after it are not restored).
pub fn to_the_point(restore: &mut [Value], gtid: &str) {
    let job = doc(restore, "Job", "mysql-restore");
    let args = job["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array_mut()
        .unwrap();
    let at = args.iter().position(|a| a == "--newest").unwrap();
    args.splice(
        at..=at,
        ["--binlogs", "$(BINLOG_PREFIX)", "--until-gtid", gtid].map(|a| json!(a)),
    );
}

/// The JSON report a restore Job's pod printed last.
pub async fn job_report(kube: &KubeTestbed, ns: &str, job: &str) -> Value {
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    let of_job = ListParams::default().labels(&format!("job-name={job}"));
    let ran = pods.list(&of_job).await.unwrap().items;
    let log = pods
        .logs(
            ran[0].metadata.name.as_deref().unwrap(),
            &LogParams::default(),
        )
        .await
        .unwrap();
    serde_json::from_str(log.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("the restore's last line is not its report ({e}): {log}"))
}

/// The example's restore Job, as shipped (`--newest`), into the claim `mysql-pitr` of its own
/// while the StatefulSet runs on, then a server on it: the rows before `rows`, row by row.
/// Everything it made is deleted afterwards.
pub async fn restore_newest_into_own_claim(
    kube: &KubeTestbed,
    ns: &str,
    identity: &str,
    rows: u32,
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
    kube.apply(&restore, ns).await.unwrap();
    let jobs: Api<Job> = Api::namespaced(kube.client.clone(), ns);
    job_succeeded(&jobs, "mysql-restore-pitr", 600).await;
    let report = job_report(kube, ns, "mysql-restore-pitr").await;
    // The newest backup is the CronJob's incremental: restored with its chain.
    assert!(report["chain"].as_array().unwrap().len() >= 2, "{report}");
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), ns);

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
    eventually(kube, ns, "mysql-pitr", COUNT, &rows.to_string()).await;
    // Row by row: the newest backup's, none written after it.
    eventually(kube, ns, "mysql-pitr", ROWS, &rows_before(rows)).await;

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
