//! The replicated MySQL StatefulSet of `examples/mysql`, with its backup CronJob and restore Job,
//! as shipped, on the kubelet bed: the overlay (testbed::kustomize::render_files_for_bed)
//! renames the images and the namespace and changes nothing else; the site settings a user
//! replaces (S3 endpoint, bucket, credentials, the age recipients) get the test's values. The
//! namespace enforces Pod Security `restricted`. Images: `localhost/mysql-backup:dev` is the
//! Dockerfile's mysql-backup target with this build's binary; `localhost/mariadb-fixture:10.11`
//! stands in for the official `mariadb:10.11` image, which the bed cannot pull
//! (e2e/cluster/mariadb-fixture/ says what it provides). S3 is Garage.
//!
//! One StatefulSet through its life, each step checked by what MariaDB serves:
//! 1. 3 replicas: mysql-0 initialises as primary, mysql-1 and mysql-2 clone from the previous
//!    ordinal through `serve`/`clone` (encrypted, token-authenticated) and replicate; rows
//!    written on mysql-0 are read from every server through the `mysql-read` Service.
//! 2. Scale to 4: mysql-3 clones and catches up. mysql-2's pod deleted: it comes back on its
//!    claim without cloning (the marker) and still replicates. mysql-2's pod and claim deleted:
//!    it clones afresh.
//! 3. The backup CronJob, its schedule set to every minute (the one change: the test cannot
//!    wait for 02:30), writes two encrypted backups, rows written between them, that
//!    `mysql-backup list` shows: a full backup, then an incremental on it; the example's
//!    retention keeps both. Then the same CronJob's job to Google Cloud Storage
//!    (fake-gcs-server) and Azure Blob Storage (Azurite), each switched by the ConfigMap and
//!    Secret only, as `secrets.yaml` says.
//!    The incident: the primary's pod deleted while its `binlogs` sidecar archives, rows
//!    written, the sidecar's archiver SIGKILLed, more rows, a `DROP TABLE`, archived. The
//!    restore Job as shipped (`--newest`) fills a claim of its own beside the running
//!    StatefulSet: a server on it has the newest backup's rows, row by row (the newest backup is
//!    the incremental: its chain is applied).
//! 4. Disaster and restore to a point, as docs/operations/mysql-point-in-time-restore.md tells
//!    it (docs/operations/mysql-disaster-recovery.md with the restore Job's `--newest` replaced
//!    by `--binlogs` and `--until-gtid` of the drop): the StatefulSet and its claims deleted
//!    (their volumes retained), the Job restores the incremental's chain and replays the
//!    archive into a new claim, the StatefulSet applied again: mysql-0 has, row by row, every
//!    row committed before the drop (and the table), the replicas clone from it and replicate.
//! 5. The token in the Secret replaced, then scale to 4: mysql-3's clone is refused by
//!    mysql-2's `serve` (which holds the old token), the pod stays in init with the reason in
//!    its log, and its data dir stays empty.

#[path = "statefulset/clouds.rs"]
mod clouds;
mod common;
#[path = "statefulset/point_in_time.rs"]
mod point_in_time;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::sql;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, Secret};
use kube::Api;
use kube::api::{DeleteParams, ListParams, LogParams, Patch, PatchParams};
use serde_json::{Value, json};
use testbed::Garage;
use testbed::cluster::host_address;
use testbed::kube::{KubeTestbed, wait_until};

const STATEFULSET: &str = "examples/mysql/statefulset.yaml";
const FILES: [&str; 3] = [
    "examples/mysql/secrets.yaml",
    STATEFULSET,
    "examples/mysql/backup-cronjob.yaml",
];
const RESTORE: [&str; 2] = [
    "examples/mysql/restore-claim.yaml",
    "examples/mysql/restore-job.yaml",
];
const IMAGES: [(&str, &str, &str); 2] = [
    ("mariadb", "localhost/mariadb-fixture", "10.11"),
    ("example.com/mysql-backup", "localhost/mysql-backup", "dev"),
];
/// Each replica initialises or clones, then starts: generous for a loaded 2-core bed.
const PER_REPLICA_SECONDS: u64 = 240;

/// Polls `statement` on POD until it prints `expected` (replication is asynchronous).
async fn eventually(kube: &KubeTestbed, ns: &str, pod: &str, statement: &str, expected: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let last = sql(kube, ns, pod, "", statement).await;
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
    .await
    .unwrap();
}

const COUNT: &str = "SELECT COUNT(*) FROM demo.t";
/// Every row of demo.t, in order: what `rows_before` must equal, row by row.
const ROWS: &str = "SELECT GROUP_CONCAT(CONCAT(id, ':', v) ORDER BY id) FROM demo.t";

/// The rows `insert_rows` wrote with ids below `end`, as [`ROWS`] prints them.
fn rows_before(end: u32) -> String {
    (0..end)
        .map(|i| format!("{i}:row {i}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The document of `kind` named `name` among `manifests`.
fn doc<'a>(manifests: &'a mut [Value], kind: &str, name: &str) -> &'a mut Value {
    manifests
        .iter_mut()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in the example"))
}

/// What a user replaces in secrets.yaml: the token (the placeholder is refused), where the
/// backups go, the S3 key, the recipients.
fn site_settings(manifests: &mut [Value], garage: &Garage, prefix: &str, recipient: &str) {
    doc(manifests, "Secret", "mysql-backup")["stringData"]["token"] = json!("0a".repeat(32));
    let storage = &mut doc(manifests, "ConfigMap", "mysql-backup-storage")["data"];
    storage["BACKUP_PREFIX"] = json!(prefix);
    storage["BINLOG_PREFIX"] = json!(binlog_prefix(garage));
    storage["AWS_ENDPOINT_URL"] = json!(garage.endpoint);
    storage["AWS_REGION"] = json!(garage.region);
    doc(manifests, "Secret", "mysql-backup-store")["stringData"]["credentials"] = json!(format!(
        "[default]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
        garage.access_key, garage.secret_key
    ));
    doc(manifests, "Secret", "mysql-backup-recipients")["stringData"]["recipients.txt"] =
        json!(format!("{recipient}\n"));
}

/// Where the primary's sidecar archives its binary logs.
fn binlog_prefix(garage: &Garage) -> String {
    format!("s3://{}/mysql/binlogs/", garage.bucket)
}

/// `mysql-backup list PREFIX --output json`, run here against the same bucket.
async fn list_backups(garage: &Garage, prefix: &str) -> Vec<Value> {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_mysql-backup"));
    testbed::cli::without_ambient_aws(&mut command)
        .envs(garage.env())
        .env("S3_FORCE_PATH_STYLE", "true");
    list_with(command, prefix, &[]).await
}

/// `mysql-backup list PREFIX --output json` with `flags`, run here.
async fn list_with(
    mut command: tokio::process::Command,
    prefix: &str,
    flags: &[String],
) -> Vec<Value> {
    command
        .args(["list", prefix, "--output", "json"])
        .args(flags);
    let output = command.output().await.unwrap();
    assert!(
        output.status.success(),
        "mysql-backup list: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let listed: Value = serde_json::from_slice(&output.stdout).unwrap();
    listed.as_array().unwrap().clone()
}

/// The Jobs the CronJob made so far.
async fn backup_jobs(jobs: &Api<Job>) -> Vec<Job> {
    let list = jobs.list(&ListParams::default()).await.unwrap();
    list.items
        .into_iter()
        .filter(|j| {
            j.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == "CronJob")
        })
        .collect()
}

/// Waits until a Job the CronJob made, other than those in `seen`, has succeeded, and returns
/// its name; a failed backup Job panics.
async fn new_backup_succeeded(jobs: &Api<Job>, seen: &BTreeSet<String>) -> String {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        for job in backup_jobs(jobs).await {
            let status = job.status.clone().unwrap_or_default();
            assert_eq!(
                status.failed.unwrap_or(0),
                0,
                "backup Job failed: {status:?}"
            );
            let name = job.metadata.name.unwrap();
            if status.succeeded == Some(1) && !seen.contains(&name) {
                return name;
            }
        }
        assert!(Instant::now() < deadline, "no new backup Job succeeded");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Waits until Job `name` has ended and asserts that it succeeded.
async fn job_succeeded(jobs: &Api<Job>, name: &str, seconds: u64) {
    let ended = wait_until(jobs, name, "the Job ended", seconds, |j: &Job| {
        j.status
            .as_ref()
            .is_some_and(|s| s.succeeded == Some(1) || s.failed.unwrap_or(0) > 0)
    })
    .await
    .unwrap();
    assert_eq!(
        ended.status.unwrap().succeeded,
        Some(1),
        "Job {name} failed"
    );
}

#[tokio::test]
async fn the_example_statefulset_clones_replicates_heals_is_backed_up_restored_and_refuses_a_wrong_token()
 {
    let (kube, ns, _report) = testbed::cluster::test_namespace("mysql-sts").await;
    let garage = Garage::start_on(&host_address()).await.unwrap();
    let prefix = format!("s3://{}/mysql/nightly-", garage.bucket);
    let (identity, recipient) = backup_storage::encryption::Identity::generate();
    let mut manifests = testbed::kustomize::render_files_for_bed(&FILES, &ns, &IMAGES).unwrap();
    site_settings(&mut manifests, &garage, &prefix, &recipient);
    kube.apply(&manifests, &ns).await.unwrap();
    let sets: Api<StatefulSet> = Api::namespaced(kube.client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(kube.client.clone(), &ns);

    // 1. Three replicas: a primary and two clones that replicate.
    ready(&sets, 3).await;
    sql(
        &kube,
        &ns,
        "mysql-0",
        "",
        "CREATE DATABASE demo; CREATE TABLE demo.t (id INT PRIMARY KEY, v VARCHAR(64))",
    )
    .await
    .unwrap();
    insert_rows(&kube, &ns, 0, 100).await;
    for replica in ["mysql-1", "mysql-2"] {
        let log = clone_log(&pods, replica).await;
        assert!(
            log.contains("receiving backup"),
            "{replica} did not clone: {log}"
        );
        eventually(&kube, &ns, replica, COUNT, "100").await;
        let read_only = sql(&kube, &ns, replica, "", "SELECT @@read_only")
            .await
            .unwrap();
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
        )
        .await
            && let Some(("100" | "101" | "102", "100")) = line.split_once('\t')
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
    // mysql-1 (the CronJob's source) has every row before the backups start.
    eventually(&kube, &ns, "mysql-1", COUNT, "200").await;

    // 3. The backup CronJob on a schedule of every minute: two runs, both kept.
    let crons: Api<CronJob> = Api::namespaced(kube.client.clone(), &ns);
    let jobs: Api<Job> = Api::namespaced(kube.client.clone(), &ns);
    let every_minute = Patch::Merge(json!({"spec": {"schedule": "* * * * *"}}));
    crons
        .patch(
            "mysql-backup-nightly",
            &PatchParams::default(),
            &every_minute,
        )
        .await
        .unwrap();
    new_backup_succeeded(&jobs, &BTreeSet::new()).await;
    // Rows the second backup has and the first has not: the restore must take the newest.
    insert_rows(&kube, &ns, 200, 210).await;
    eventually(&kube, &ns, "mysql-1", COUNT, "210").await;
    let made_before: BTreeSet<String> = backup_jobs(&jobs)
        .await
        .into_iter()
        .map(|j| j.metadata.name.unwrap())
        .collect();
    new_backup_succeeded(&jobs, &made_before).await;
    let suspend = Patch::Merge(json!({"spec": {"suspend": true}}));
    crons
        .patch("mysql-backup-nightly", &PatchParams::default(), &suspend)
        .await
        .unwrap();
    let listed = list_backups(&garage, &prefix).await;
    assert!(listed.len() >= 2, "the retention kept {listed:?}");
    assert!(listed.iter().all(|b| b["encrypted"] == true), "{listed:?}");
    // The CronJob's first run is a full backup, the next ones incrementals on it (mysql-1's data
    // dir is the same); the newest builds on the one before.
    assert_eq!(listed.last().unwrap()["type"], "full", "{listed:?}");
    assert_eq!(listed[0]["type"], "incremental", "{listed:?}");
    assert_eq!(listed[0]["base"], listed[1]["url"], "{listed:?}");
    // The same CronJob to Google Cloud Storage and to Azure Blob Storage, switched as
    // secrets.yaml's comments say: the ConfigMap's BACKUP_PREFIX and GCS_SECRET_DIR or
    // AZURE_SECRET_DIR, the store Secret's keys (plus the emulators' endpoints). One Job of each,
    // made from the CronJob as `kubectl create job --from=cronjob/...` makes it.
    clouds::clouds_backup_in_pods(&kube, &ns, &manifests).await;
    // Written after the backups: a restore of the newest must not have them.
    insert_rows(&kube, &ns, 210, 250).await;

    // 3b. Restore to a point (docs/operations/mysql-point-in-time-restore.md). The primary's
    // pod deleted while its sidecar archives (server and archiver killed): both come back, the
    // server in a new binlog file. Rows after it, then the incident: a DROP TABLE.
    let old = pods.get("mysql-0").await.unwrap().metadata.uid.unwrap();
    pods.delete("mysql-0", &DeleteParams::default())
        .await
        .unwrap();
    recreated_ready(&pods, "mysql-0", old).await;
    insert_rows(&kube, &ns, 250, 255).await;
    // The sidecar's archiver SIGKILLed between two transactions: restarted, it resumes.
    point_in_time::kill_archiver(&pods).await;
    insert_rows(&kube, &ns, 255, 260).await;
    let drop_gtid = sql(
        &kube,
        &ns,
        "mysql-0",
        "",
        "DROP TABLE demo.t; SELECT @@gtid_binlog_pos",
    )
    .await
    .unwrap();
    point_in_time::archived_through(&garage, &binlog_prefix(&garage), &drop_gtid).await;
    // The restore Job as shipped, into a claim of its own: the newest backup's rows.
    point_in_time::restore_newest_into_own_claim(&kube, &ns, &identity, 210).await;

    // 4. Disaster: the StatefulSet and every claim gone (their volumes kept, as the runbook
    // says), then the restore Job and the StatefulSet again.
    let volumes: Api<PersistentVolume> = Api::all(kube.client.clone());
    let mut kept = Vec::new();
    // As the runbook does it: by the label the StatefulSet gives its claims.
    let members = ListParams::default().labels("app=mysql");
    for claim in claims.list(&members).await.unwrap() {
        let volume = claim.spec.unwrap().volume_name.unwrap();
        let retain = Patch::Merge(json!({"spec": {"persistentVolumeReclaimPolicy": "Retain"}}));
        volumes
            .patch(&volume, &PatchParams::default(), &retain)
            .await
            .unwrap();
        kept.push(volume);
    }
    assert_eq!(kept.len(), 4, "claims labelled app=mysql: {kept:?}");
    sets.delete("mysql", &DeleteParams::foreground())
        .await
        .unwrap();
    claims
        .delete_collection(&DeleteParams::default(), &members)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(180);
    while !pods.list(&members).await.unwrap().items.is_empty()
        || !claims.list(&members).await.unwrap().items.is_empty()
    {
        assert!(Instant::now() < deadline, "pods or claims still there");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    for volume in &kept {
        let phase = volumes
            .get(volume)
            .await
            .unwrap()
            .status
            .and_then(|s| s.phase);
        assert_eq!(phase.as_deref(), Some("Released"), "{volume}");
    }
    let key = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "mysql-restore-key"},
        "stringData": {"identity.txt": identity}});
    kube.apply(&[key], &ns).await.unwrap();
    // Restored to the transaction before the DROP, as the point-in-time runbook says: the
    // disaster runbook with the restore Job's `--newest` replaced by the point.
    let mut restore = testbed::kustomize::render_files_for_bed(&RESTORE, &ns, &IMAGES).unwrap();
    point_in_time::to_the_point(&mut restore, &drop_gtid);
    kube.apply(&restore, &ns).await.unwrap();
    job_succeeded(&jobs, "mysql-restore", 600).await;
    let report = point_in_time::job_report(&kube, &ns, "mysql-restore").await;
    assert_eq!(report["stoppedBefore"], drop_gtid, "{report}");
    assert!(report["chain"].as_array().unwrap().len() >= 2, "{report}");
    let secrets: Api<Secret> = Api::namespaced(kube.client.clone(), &ns);
    secrets
        .delete("mysql-restore-key", &DeleteParams::default())
        .await
        .unwrap();
    let statefulset =
        testbed::kustomize::render_files_for_bed(&[STATEFULSET], &ns, &IMAGES).unwrap();
    kube.apply(&statefulset, &ns).await.unwrap();
    ready(&sets, 3).await;
    // Row by row: every row committed before the DROP (the backup's and the archive's), and
    // the table itself.
    assert_eq!(
        sql(&kube, &ns, "mysql-0", "", ROWS).await.unwrap(),
        rows_before(260)
    );
    assert!(
        clone_log(&pods, "mysql-1")
            .await
            .contains("receiving backup")
    );
    // The replicas cloned from the restored primary and follow its new history.
    insert_rows(&kube, &ns, 260, 270).await;
    for replica in ["mysql-1", "mysql-2"] {
        eventually(&kube, &ns, replica, ROWS, &rows_before(270)).await;
    }

    // 5. Another token in the Secret; mysql-2's serve holds the one it started with.
    secrets
        .patch(
            "mysql-backup",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"token": "0f".repeat(32)}})),
        )
        .await
        .unwrap();
    scale(&sets, 4).await;
    // Positive signal: the clone container ended with a failure (at least once).
    let refused = wait_until(
        &pods,
        "mysql-3",
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
    assert_eq!(phase.as_deref(), Some("Pending"), "mysql-3 left init");
    let mut log = String::new();
    for previous in [true, false] {
        let params = LogParams {
            container: Some("clone".into()),
            previous,
            ..LogParams::default()
        };
        log.push_str(&pods.logs("mysql-3", &params).await.unwrap_or_default());
    }
    assert!(
        log.contains("does not hold the same token"),
        "mysql-3's clone log: {log}"
    );
    // Its data dir, read by a pod of its own on the same claim: empty.
    // As mysql (999), like the StatefulSet's pods: another fsGroup would change the claim's files.
    let look: Value = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "look-at-data-mysql-3"},
        "spec": {"restartPolicy": "Never",
            "securityContext": {"runAsUser": 999, "runAsGroup": 999, "fsGroup": 999},
            "containers": [{"name": "ls", "image": "localhost/mysql-backup:dev",
                "imagePullPolicy": "Never", "command": ["bash", "-ec",
                "n=$(ls -A /var/lib/mysql | grep -v '^lost+found$' | wc -l); test \"$n\" = 0"],
                "volumeMounts": [{"name": "data", "mountPath": "/var/lib/mysql"}]}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-mysql-3"}}]}});
    testbed::cluster::run_once(&pods, look, 120).await;

    kube.delete_namespace(&ns).await.unwrap();
    // Released volumes given back to the provisioner, which deletes their directories.
    let delete = Patch::Merge(json!({"spec": {"persistentVolumeReclaimPolicy": "Delete"}}));
    for volume in &kept {
        volumes
            .patch(volume, &PatchParams::default(), &delete)
            .await
            .ok();
    }
}
