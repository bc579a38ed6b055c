//! End to end: the `etcd-backup-operator` binary, run out-of-cluster against a real API server
//! (the test process's own control plane, or `KUBECONFIG`'s cluster), backs up a real etcd to a real S3 server
//! (Garage) from the coreos example manifests, applied with only their placeholders filled in.
//! The operator runs as the ServiceAccount of `deploy/namespaced/rbac.yaml` (by impersonation;
//! one test uses `deploy/cluster-wide/rbac.yaml`), so every test also proves that the shipped
//! least-privilege RBAC is enough.
//!
//! Needs the kube-apiserver binaries from `e2e/cluster/build.sh` (which `e2e/test.sh` runs), or
//! `KUBECONFIG`: `cargo test -p etcd-backup-operator --test e2e`.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use etcd_api::EtcdBackup;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Secret, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::Api;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};
use testbed::cli::without_ambient_aws;
use testbed::kube::KubeTestbed;
use testbed::logs::logged_at;
use testbed::{Etcd, Garage};

mod common;
use backup_storage::{AzureCredentials, AzureOptions, GcsCredentials, GcsOptions, Location, Store};
use common::{aws_files, keys, store};

const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/coreos");
const NAMESPACED_RBAC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/namespaced/rbac.yaml");
const CLUSTER_WIDE_RBAC: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/cluster-wide/rbac.yaml");
/// The ServiceAccount in `deploy/*/rbac.yaml`.
const SERVICE_ACCOUNT: &str = "etcd-backup-operator";

/// The operator process; killed when dropped.
struct Operator {
    child: tokio::process::Child,
    port: u16,
    log: std::path::PathBuf,
}

impl Operator {
    async fn start(namespace: &str) -> Operator {
        Operator::start_with(namespace, "operator", &[]).await
    }

    /// Starts one operator process watching `namespace`, as the ServiceAccount installed there.
    async fn start_with(namespace: &str, tag: &str, extra: &[&str]) -> Operator {
        Operator::start_as(namespace, namespace, tag, extra).await
    }

    /// Starts one operator process watching `watch` (empty: all namespaces) as the
    /// ServiceAccount in `account_namespace`; its log goes to
    /// `$TMPDIR/<tag>-<account_namespace>-<port>.log`.
    async fn start_as(watch: &str, account_namespace: &str, tag: &str, extra: &[&str]) -> Operator {
        let kubeconfig = service_account_kubeconfig(account_namespace);
        Operator::spawn(watch, &kubeconfig, account_namespace, tag, extra).await
    }

    async fn spawn(
        watch: &str,
        kubeconfig: &std::path::Path,
        account_namespace: &str,
        tag: &str,
        extra: &[&str],
    ) -> Operator {
        let port = testbed::free_port();
        let log = std::env::temp_dir().join(format!("{tag}-{account_namespace}-{port}.log"));
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_etcd-backup-operator"));
        command
            .args([
                "--namespace",
                watch,
                "--listen",
                &format!("127.0.0.1:{port}"),
            ])
            .args(["--max-concurrent-backups", "2", "--log-format", "json"])
            // The bed's image of this build, not the release's default.
            .args(["--backup-image", "localhost/etcd-backup:dev"])
            .args(extra)
            .env("KUBECONFIG", kubeconfig);
        // Credentials come from the EtcdBackup's Secret only.
        let child = without_ambient_aws(&mut command)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let op = Operator { child, port, log };
        wait_for("the operator to be ready", 60, || async {
            op.get("/readyz").await.is_some_and(|(code, _)| code == 200)
        })
        .await;
        op
    }

    /// Requests the API server refused (HTTP 403): the RBAC misses a rule. Writes into a
    /// namespace being deleted are refused too, whatever the RBAC; those do not count.
    fn forbidden(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("forbidden") || l.contains("Forbidden"))
            .filter(|l| !l.contains("because it is being terminated"))
            .map(String::from)
            .collect()
    }

    /// Backups this process reports as succeeded.
    fn successes(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .matches("backup succeeded")
            .count()
    }

    /// `(status, body)` of a GET on the operator's HTTP port.
    async fn get(&self, path: &str) -> Option<(u16, String)> {
        testbed::http_get("127.0.0.1", self.port, path).await
    }

    fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

/// Every test's operator must have run without a single refused request.
impl Drop for Operator {
    fn drop(&mut self) {
        let forbidden = self.forbidden();
        if !std::thread::panicking() {
            assert!(
                forbidden.is_empty(),
                "the RBAC misses a rule:\n{}",
                forbidden.join("\n")
            );
        }
    }
}

async fn wait_for<F, Fut>(what: &str, seconds: u64, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("timed out after {seconds} s waiting for {what}");
}

/// Tests of this binary install the CRDs concurrently; a conflicting apply is retried.
async fn install_crds(kube: &KubeTestbed) {
    for attempt in 1.. {
        match kube.install_crds().await {
            Ok(()) => return,
            Err(e) if attempt < 5 => {
                eprintln!("install_crds attempt {attempt}: {e:#}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("{e:#}"),
        }
    }
}

/// Where [`setup`] writes the kubeconfig that impersonates the operator's ServiceAccount.
fn service_account_kubeconfig(namespace: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("{namespace}-{SERVICE_ACCOUNT}.kubeconfig"))
}

/// A copy of `namespace`'s ServiceAccount kubeconfig whose API server is reached through a
/// proxy the test can cut.
async fn kubeconfig_through_partition(
    namespace: &str,
) -> (std::path::PathBuf, testbed::proxy::Partition) {
    let path = service_account_kubeconfig(namespace);
    let (config, partition) = testbed::kube::partitioned_kubeconfig(&path).await.unwrap();
    let through = path.with_extension("partitioned.kubeconfig");
    std::fs::write(&through, serde_saphyr::to_string(&config).unwrap()).unwrap();
    (through, partition)
}

/// Flags of one replica with leader election on a Lease in `namespace`.
fn election_args(namespace: &str, identity: &str, duration_seconds: u32) -> Vec<String> {
    let duration = duration_seconds.to_string();
    [
        "--leader-election",
        "--lease-namespace",
        namespace,
        "--pod-name",
        identity,
        "--lease-duration-seconds",
        &duration,
    ]
    .map(String::from)
    .to_vec()
}

/// The deploy/ files' kinds, for the dynamic API.
fn api_resource(kind: &str) -> ApiResource {
    match kind {
        "ServiceAccount" => ApiResource::erase::<ServiceAccount>(&()),
        "Role" => ApiResource::erase::<Role>(&()),
        "RoleBinding" => ApiResource::erase::<RoleBinding>(&()),
        "ClusterRole" => ApiResource::erase::<ClusterRole>(&()),
        "ClusterRoleBinding" => ApiResource::erase::<ClusterRoleBinding>(&()),
        "PersistentVolumeClaim" => ApiResource::erase::<PersistentVolumeClaim>(&()),
        other => panic!("unexpected kind {other}"),
    }
}

/// Server-side applies one manifest of the kinds the deploy/ files hold.
async fn apply(kube: &KubeTestbed, doc: &Value) {
    let (kind, name) = (
        doc["kind"].as_str().unwrap(),
        doc["metadata"]["name"].as_str().unwrap(),
    );
    let resource = api_resource(kind);
    let api: Api<DynamicObject> = match doc["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(kube.client.clone(), ns, &resource),
        None => Api::all_with(kube.client.clone(), &resource),
    };
    api.patch(name, &PatchParams::apply("e2e").force(), &Patch::Apply(doc))
        .await
        .unwrap_or_else(|e| panic!("cannot apply {kind} {name}: {e}"));
}

fn documents(path: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    testbed::yaml_documents(&text).unwrap()
}

/// Applies `deploy/namespaced/rbac.yaml` to `ns` and writes the kubeconfig that impersonates
/// its ServiceAccount.
async fn install_namespaced_rbac(kube: &KubeTestbed, ns: &str) {
    install_rbac(kube, NAMESPACED_RBAC, ns).await;
}

/// Applies the RBAC file `path` with the operator's namespace `ns` and writes the kubeconfig
/// that impersonates its ServiceAccount. Cluster-scoped names get `-<ns>` appended so that
/// they cannot clash; they are returned as `(kind, name)`, for removal.
async fn install_rbac(kube: &KubeTestbed, path: &str, ns: &str) -> Vec<(String, String)> {
    let mut cluster_scoped = Vec::new();
    for mut doc in documents(path) {
        let kind = doc["kind"].as_str().unwrap().to_string();
        if kind.starts_with("Cluster") {
            let name = format!("{}-{ns}", doc["metadata"]["name"].as_str().unwrap());
            doc["metadata"]["name"] = json!(name);
            if kind == "ClusterRoleBinding" {
                let role = format!("{}-{ns}", doc["roleRef"]["name"].as_str().unwrap());
                doc["roleRef"]["name"] = json!(role);
            }
            cluster_scoped.push((kind, name));
        } else {
            doc["metadata"]["namespace"] = json!(ns);
        }
        if let Some(subjects) = doc.get_mut("subjects").and_then(Value::as_array_mut) {
            subjects.iter_mut().for_each(|s| s["namespace"] = json!(ns));
        }
        apply(kube, &doc).await;
    }
    kube.write_service_account_kubeconfig(ns, SERVICE_ACCOUNT, &service_account_kubeconfig(ns))
        .unwrap();
    cluster_scoped
}

/// Waits (60 s at most) until status has named `runs` different backups.
async fn wait_for_runs(api: &Api<EtcdBackup>, name: &str, runs: usize) {
    let mut seen = std::collections::BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while seen.len() < runs {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {seen:?} after 60 s"
        );
        let status = api.get(name).await.unwrap().status;
        if let Some(last) = status.and_then(|s| s.last_backup) {
            seen.insert(last.object_key);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn wait_until_succeeded(api: &Api<EtcdBackup>, name: &str) {
    wait_for(&format!("{name} to succeed"), 60, || async {
        let status = api.get(name).await.unwrap().status;
        status.is_some_and(|s| s.succeeded)
    })
    .await;
}

/// A fresh namespace with the CRDs and the operator's namespaced RBAC installed, an etcd, a
/// Garage and the coreos `aws` Secret.
async fn setup(prefix: &str) -> (KubeTestbed, String, Etcd, Garage) {
    let kube = KubeTestbed::start().await.unwrap();
    install_crds(&kube).await;
    let ns = kube.namespace(prefix).await.unwrap();
    install_namespaced_rbac(&kube, &ns).await;
    let (etcd, garage) = (Etcd::start().await.unwrap(), Garage::start().await.unwrap());
    create_aws_secret(&kube, &ns, &garage).await;
    (kube, ns, etcd, garage)
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn example(name: &str) -> Value {
    let text = std::fs::read_to_string(Path::new(EXAMPLES).join(name)).unwrap();
    serde_saphyr::from_str(&text).unwrap()
}

/// The coreos example with its placeholders filled in: our etcd, our bucket, and Garage's
/// endpoint (the examples target AWS, which needs neither).
fn fill(mut manifest: Value, etcd: &Etcd, garage: &Garage) -> Value {
    manifest["spec"]["etcdEndpoints"] = json!([etcd.endpoint]);
    let key = manifest["spec"]["s3"]["path"]
        .as_str()
        .unwrap()
        .split_once('/')
        .unwrap()
        .1
        .to_string();
    manifest["spec"]["s3"]["path"] = json!(format!("{}/{key}", garage.bucket));
    manifest["spec"]["s3"]["endpoint"] = json!(garage.endpoint);
    manifest["spec"]["s3"]["forcePathStyle"] = json!(true);
    manifest
}

async fn create_aws_secret(kube: &KubeTestbed, ns: &str, garage: &Garage) {
    let mut secret = example("aws-secret.yaml");
    for (key, file) in aws_files(garage) {
        secret["stringData"][key] = json!(file);
    }
    let secret: Secret = serde_json::from_value(secret).unwrap();
    Api::<Secret>::namespaced(kube.client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

async fn create(kube: &KubeTestbed, ns: &str, manifest: Value) -> Api<EtcdBackup> {
    let api: Api<EtcdBackup> = Api::namespaced(kube.client.clone(), ns);
    let backup: EtcdBackup = serde_json::from_value(manifest).unwrap();
    api.create(&PostParams::default(), &backup).await.unwrap();
    api
}

async fn events_for(kube: &KubeTestbed, ns: &str, name: &str) -> Vec<Event> {
    Api::<Event>::namespaced(kube.client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .collect()
}

fn ready(backup: &EtcdBackup) -> Option<(String, String, Option<i64>)> {
    let status = backup.status.as_ref()?;
    let c = status.conditions.iter().find(|c| c.type_ == "Ready")?;
    Some((c.status.clone(), c.reason.clone(), c.observed_generation))
}

#[tokio::test]
async fn coreos_one_shot_example_backs_up_once_and_bad_input_is_reported() {
    let (kube, ns, etcd, garage) = setup("eb-oneshot").await;
    etcd.put("/e2e", "one-shot").await.unwrap();
    let mut op = Operator::start(&ns).await;

    let manifest = fill(example("etcd-backup-oneshot.yaml"), &etcd, &garage);
    let name = manifest["metadata"]["name"].as_str().unwrap().to_string();
    let api = create(&kube, &ns, manifest.clone()).await;
    // Bad input beside it: a Secret that does not exist.
    let mut bad = manifest;
    bad["metadata"]["name"] = json!("no-secret");
    bad["spec"]["s3"]["awsSecret"] = json!("missing");
    create(&kube, &ns, bad).await;

    wait_for("the one-shot backup to succeed", 60, || async {
        api.get(&name)
            .await
            .unwrap()
            .status
            .is_some_and(|s| s.succeeded)
    })
    .await;
    let backup = api.get(&name).await.unwrap();
    let status = backup.status.clone().unwrap();
    let last = status.last_backup.clone().unwrap();
    assert_eq!(
        last.object_key,
        format!("s3://{}/etcd.backup", garage.bucket)
    );
    assert_eq!(
        ready(&backup),
        Some((
            "True".into(),
            "BackupSucceeded".into(),
            backup.metadata.generation
        ))
    );
    assert!(status.last_success_date.is_some() && status.etcd_revision.is_some());

    // The object in S3 is exactly what status says, and verifies.
    let store = store(&garage).await;
    let verified = etcd_snapshot::verify(&store, "etcd.backup", None)
        .await
        .unwrap();
    assert_eq!(Some(verified.stored.hex.clone()), last.sha256);
    assert_eq!(Some(verified.stored_bytes as i64), last.size_bytes);
    let modified = store
        .head("etcd.backup")
        .await
        .unwrap()
        .unwrap()
        .last_modified;

    let events = events_for(&kube, &ns, &name).await;
    assert!(
        events.iter().any(|e| e.type_.as_deref() == Some("Normal")
            && e.reason.as_deref() == Some("BackupSucceeded")),
        "{events:?}"
    );

    // Bad input: a condition and a Warning event, and the operator keeps running.
    wait_for("the missing Secret to be reported", 30, || async {
        api.get("no-secret")
            .await
            .ok()
            .and_then(|b| ready(&b))
            .is_some_and(|(s, r, _)| s == "False" && r == "SecretNotFound")
    })
    .await;
    let warnings = events_for(&kube, &ns, "no-secret").await;
    assert!(
        warnings
            .iter()
            .any(|e| e.type_.as_deref() == Some("Warning")),
        "{warnings:?}"
    );
    assert!(op.is_running());
    let (_, metrics) = op.get("/metrics").await.unwrap();
    assert!(
        metrics.contains("etcd_backup_last_success_timestamp_seconds{"),
        "{metrics}"
    );
    assert!(metrics.contains("reason=\"SecretNotFound\""), "{metrics}");

    // A restart does not redo the one-shot. The new process has reconciled it once its
    // /metrics show the success recorded in status, and has done a whole backup once a one-shot
    // created after the restart succeeded: only then is the absence of a second run checked.
    drop(op);
    let op = Operator::start(&ns).await;
    let series =
        format!("etcd_backup_last_success_timestamp_seconds{{namespace=\"{ns}\",name=\"{name}\"}}");
    wait_for(
        "the restarted operator to reconcile the one-shot",
        30,
        || async {
            op.get("/metrics")
                .await
                .is_some_and(|(_, m)| m.contains(&series))
        },
    )
    .await;
    let mut sentinel = fill(example("etcd-backup-oneshot.yaml"), &etcd, &garage);
    sentinel["metadata"]["name"] = json!("after-restart");
    sentinel["spec"]["s3"]["path"] = json!(format!("{}/after-restart.backup", garage.bucket));
    create(&kube, &ns, sentinel).await;
    wait_until_succeeded(&api, "after-restart").await;
    let after = api.get(&name).await.unwrap().status.unwrap();
    assert_eq!(after.last_backup, status.last_backup);
    assert_eq!(
        store
            .head("etcd.backup")
            .await
            .unwrap()
            .unwrap()
            .last_modified,
        modified
    );
    kube.delete_namespace(&ns).await.unwrap();
}

/// A one-shot backup whose etcd is down at its first attempt (a member restarting, as right
/// after a rolling upgrade) is tried again and succeeds once that etcd serves again: the result
/// is final only after the retries, and the status lists the attempt that failed.
#[tokio::test]
async fn a_one_shot_backup_retries_until_its_etcd_returns() {
    let (kube, ns, mut etcd, garage) = setup("eb-retry").await;
    etcd.put("/e2e", "kept across the restart").await.unwrap();
    etcd.kill();
    let op = Operator::start(&ns).await;
    let mut manifest = fill(example("etcd-backup-oneshot.yaml"), &etcd, &garage);
    manifest["metadata"]["name"] = json!("blip");
    let api = create(&kube, &ns, manifest).await;
    wait_for("a failed attempt that is tried again", 60, || async {
        std::fs::read_to_string(&op.log)
            .unwrap_or_default()
            .contains("backup attempt failed; trying again")
    })
    .await;
    etcd.restart().await.unwrap();
    wait_until_succeeded(&api, "blip").await;

    let status = api.get("blip").await.unwrap().status.unwrap();
    let retries = status.last_run_retries.clone().unwrap_or_default();
    assert!(
        !retries.is_empty() && retries.iter().all(|r| r.reason == "EtcdUnreachable"),
        "{retries:?}"
    );
    let mut client = etcd.client().await.unwrap();
    let revision = client.status().await.unwrap().header().unwrap().revision();
    assert_eq!(status.etcd_revision, Some(revision), "{status:?}");
    let store = store(&garage).await;
    let verified = etcd_snapshot::verify(&store, "etcd.backup", None)
        .await
        .unwrap();
    assert_eq!(
        Some(verified.stored.hex),
        status.last_backup.and_then(|b| b.sha256)
    );
    drop(op);
    kube.delete_namespace(&ns).await.unwrap();
}

#[tokio::test]
async fn coreos_periodic_example_keeps_two_and_stops_when_deleted() {
    let (kube, ns, etcd, garage) = setup("eb-periodic").await;
    let op = Operator::start(&ns).await;

    let mut manifest = fill(example("etcd-backup-periodic.yaml"), &etcd, &garage);
    // The example's 125 s and 4, shortened so the test sees pruning within seconds.
    manifest["spec"]["backupPolicy"] = json!({"backupIntervalInSecond": 2, "maxBackups": 2});
    let name = manifest["metadata"]["name"].as_str().unwrap().to_string();
    let api = create(&kube, &ns, manifest).await;
    let store = store(&garage).await;

    let backups = || async {
        store
            .list("etcd.backup_v")
            .await
            .unwrap()
            .into_iter()
            .map(|o| o.key)
            .filter(|k| !k.ends_with(".manifest.json"))
            .collect::<Vec<_>>()
    };
    // The first run is immediate; wait for at least four runs in all.
    wait_for_runs(&api, &name, 4).await;
    let status = api.get(&name).await.unwrap().status.unwrap();
    assert!(status.next_schedule_time.is_some());
    let left = backups().await;
    assert_eq!(left.len(), 2, "maxBackups: 2 keeps two: {left:?}");
    let newest = status.last_backup.unwrap().object_key;
    assert!(
        left.iter().any(|k| newest.ends_with(k.as_str())),
        "{newest} not in {left:?}"
    );

    // Deleting the EtcdBackup stops its runs at once; Retain keeps what was stored.
    api.delete(&name, &DeleteParams::default()).await.unwrap();
    wait_for("the EtcdBackup to go", 30, || async {
        api.get_opt(&name).await.unwrap().is_none()
    })
    .await;
    let at_delete = store.list("etcd.backup").await.unwrap().len();
    // Positive signals before the absence is checked: the operator dropped the object (its
    // metric series are gone), and a scheduled EtcdBackup created afterwards ran twice, so
    // more than one interval of the deleted one passed with the operator at work.
    let series = format!("name=\"{name}\"");
    wait_for(
        "the operator to drop the deleted EtcdBackup",
        30,
        || async {
            op.get("/metrics")
                .await
                .is_some_and(|(_, m)| !m.contains(&series))
        },
    )
    .await;
    let mut sentinel = fill(example("etcd-backup-periodic.yaml"), &etcd, &garage);
    sentinel["metadata"]["name"] = json!("sentinel");
    sentinel["spec"]["backupPolicy"] = json!({"backupIntervalInSecond": 2, "maxBackups": 5});
    sentinel["spec"]["s3"]["path"] = json!(format!("{}/sentinel/etcd.backup", garage.bucket));
    create(&kube, &ns, sentinel).await;
    wait_for_runs(&api, "sentinel", 2).await;
    assert_eq!(
        store.list("etcd.backup").await.unwrap().len(),
        at_delete,
        "runs went on after deletion"
    );
    assert!(at_delete >= 2);
    kube.delete_namespace(&ns).await.unwrap();
}

#[tokio::test]
async fn two_replicas_with_leader_election_back_up_once_and_fail_over() {
    let (kube, ns, etcd, garage) = setup("eb-leader").await;
    let election = |id: &str| election_args(&ns, id, 4);
    let (a_args, b_args) = (election("replica-a"), election("replica-b"));
    let a = Operator::start_with(&ns, "replica-a", &strs(&a_args)).await;
    let b = Operator::start_with(&ns, "replica-b", &strs(&b_args)).await;

    let mut manifest = fill(example("etcd-backup-periodic.yaml"), &etcd, &garage);
    manifest["spec"]["backupPolicy"] = json!({"backupIntervalInSecond": 2});
    let name = manifest["metadata"]["name"].as_str().unwrap().to_string();
    let api = create(&kube, &ns, manifest).await;
    wait_for("three backups", 60, || async {
        a.successes() + b.successes() >= 3
    })
    .await;
    let (leader, standby) = if a.successes() > 0 { (a, b) } else { (b, a) };
    assert_eq!(standby.successes(), 0, "both replicas ran backups");

    // The leader dies without releasing the Lease; the standby takes over once it expires.
    drop(leader);
    wait_for("the standby to take over", 60, || async {
        standby.successes() >= 2
    })
    .await;
    assert!(api.get(&name).await.unwrap().status.unwrap().succeeded);
    kube.delete_namespace(&ns).await.unwrap();
}

/// Fencing: the leader is cut off from the API server mid-backup. It stops within the renew
/// deadline, cancelling the backup and aborting its upload, before the standby may take the
/// Lease; the standby then runs the interrupted one-shot. Never two backups at once.
#[tokio::test]
async fn a_leader_cut_off_from_the_api_server_stops_its_backup_before_the_standby_starts() {
    let (kube, ns, etcd, garage) = setup("eb-fence").await;
    etcd.fill_random(24 << 20, 64 << 10).await.unwrap();
    // etcd's stream at 2 MiB/s: the backup is in flight for about 12 s.
    let slow_etcd = testbed::proxy::throttled_proxy(
        etcd.endpoint.trim_start_matches("http://").to_string(),
        2 << 20,
    )
    .await;
    let election = |id: &str| election_args(&ns, id, 6);
    let (through, partition) = kubeconfig_through_partition(&ns).await;
    let (a_args, b_args) = (election("replica-a"), election("replica-b"));
    let mut leader = Operator::spawn(&ns, &through, &ns, "replica-a", &strs(&a_args)).await;
    let standby = Operator::start_with(&ns, "replica-b", &strs(&b_args)).await;
    wait_for("replica-a to lead", 30, || async {
        !logged_at(&leader.log, "became leader").is_empty()
    })
    .await;

    let mut manifest = fill(example("etcd-backup-oneshot.yaml"), &etcd, &garage);
    manifest["spec"]["etcdEndpoints"] = json!([format!("http://{slow_etcd}")]);
    let name = manifest["metadata"]["name"].as_str().unwrap().to_string();
    let api = create(&kube, &ns, manifest).await;
    wait_for("the leader's backup to be running", 60, || async {
        leader
            .get("/metrics")
            .await
            .is_some_and(|(_, m)| m.contains("etcd_backup_running 1"))
    })
    .await;

    partition.cut();
    let exit = tokio::time::timeout(Duration::from_secs(60), leader.child.wait())
        .await
        .expect("the cut-off leader did not stop")
        .unwrap();
    assert!(
        !exit.success(),
        "a lost leadership exits non-zero: {exit:?}"
    );
    wait_until_succeeded(&api, &name).await;

    let lost = logged_at(&leader.log, "lost leadership");
    let cancelled = logged_at(&leader.log, "backup cancelled");
    let took_over = logged_at(&standby.log, "became leader");
    let standby_started = logged_at(&standby.log, "snapshot started");
    assert_eq!(
        lost.len(),
        1,
        "{}",
        std::fs::read_to_string(&leader.log).unwrap()
    );
    assert_eq!(cancelled.len(), 1, "the leader's backup was cancelled");
    assert!(lost[0] <= cancelled[0]);
    assert!(
        cancelled[0] < took_over[0] && took_over[0] <= standby_started[0],
        "leader cancelled at {}, standby led at {} and started at {}",
        cancelled[0],
        took_over[0],
        standby_started[0]
    );
    assert_eq!(standby.successes(), 1);
    assert_eq!(leader.successes(), 0);
    let store = store(&garage).await;
    etcd_snapshot::verify(&store, "etcd.backup", None)
        .await
        .unwrap();
    assert_eq!(
        store
            .clean_incomplete("etcd.backup", Duration::ZERO, &|_| true)
            .await
            .unwrap(),
        0,
        "the cut-off leader's upload was aborted"
    );
    kube.delete_namespace(&ns).await.unwrap();
}

#[tokio::test]
async fn sigterm_mid_backup_aborts_the_upload_and_the_next_start_retries() {
    let (kube, ns, etcd, garage) = setup("eb-shutdown").await;
    // Large enough that the upload is still running when the signal arrives.
    etcd.fill_random(160 << 20, 64 << 10).await.unwrap();
    let mut op = Operator::start(&ns).await;
    let manifest = fill(example("etcd-backup-oneshot.yaml"), &etcd, &garage);
    let name = manifest["metadata"]["name"].as_str().unwrap().to_string();
    let api = create(&kube, &ns, manifest).await;

    wait_for("the backup to be running", 60, || async {
        op.get("/metrics")
            .await
            .is_some_and(|(_, m)| m.contains("etcd_backup_running 1"))
    })
    .await;
    // S3 stops answering: the abort that the shutdown sends has to wait for it.
    let signal = |name: &str, pid: &str| {
        let kill = std::process::Command::new("kill")
            .args([name, pid])
            .status()
            .unwrap();
        assert!(kill.success());
    };
    // Once the multipart upload exists there is something to abort (before it, a cancelled
    // run leaves nothing on the server and may exit at once).
    let s3 = match store(&garage).await {
        backup_storage::Store::S3(s3) => s3.client().clone(),
        _ => unreachable!("the bed's store is S3"),
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let listed = s3.list_multipart_uploads().bucket(&garage.bucket).send();
        if !listed.await.unwrap().uploads().is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no multipart upload started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let garage_pid = garage.pid().unwrap().to_string();
    signal("-STOP", &garage_pid);
    signal("-TERM", &op.child.id().unwrap().to_string());
    wait_for("the run to be cancelled", 30, || async {
        std::fs::read_to_string(&op.log).is_ok_and(|log| log.contains("backup cancelled"))
    })
    .await;
    // Longer than the fixed 2 s the shutdown used to give the aborts: still waiting for them.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let exited = op.child.try_wait().unwrap();
    signal("-CONT", &garage_pid);
    assert!(
        exited.is_none(),
        "it exited before its abort reached S3: {exited:?}"
    );
    let exit = tokio::time::timeout(Duration::from_secs(30), op.child.wait())
        .await
        .expect("the operator did not stop within 30 s of SIGTERM")
        .unwrap();
    assert!(exit.success(), "{exit:?}");
    let log = std::fs::read_to_string(&op.log).unwrap();
    assert!(log.contains("backup cancelled"), "{log}");

    // Nothing visible, no multipart upload left behind, no result recorded.
    let store = store(&garage).await;
    assert!(store.head("etcd.backup").await.unwrap().is_none());
    assert_eq!(
        store
            .clean_incomplete("etcd.backup", Duration::ZERO, &|_| true)
            .await
            .unwrap(),
        0
    );
    let status = api.get(&name).await.unwrap().status.unwrap();
    assert!(!status.succeeded && status.reason.is_none(), "{status:?}");

    // The next start sees the interrupted one-shot and runs it, once.
    let _op = Operator::start(&ns).await;
    wait_for("the retried backup", 120, || async {
        api.get(&name)
            .await
            .unwrap()
            .status
            .is_some_and(|s| s.succeeded)
    })
    .await;
    etcd_snapshot::verify(&store, "etcd.backup", None)
        .await
        .unwrap();
    kube.delete_namespace(&ns).await.unwrap();
}

#[tokio::test]
async fn deletion_policy_delete_removes_only_this_backups_objects() {
    let (kube, ns, etcd, garage) = setup("eb-delete").await;
    let _op = Operator::start(&ns).await;
    let store = store(&garage).await;
    // An object under the same prefix that this EtcdBackup did not write.
    const FOREIGN: &str = "etcd.backup_v1_2020-01-01-00:00:00";
    store
        .put_small(
            FOREIGN,
            b"not ours".to_vec().into(),
            "application/octet-stream",
        )
        .await
        .unwrap();
    let ours = || async {
        store
            .list("etcd.backup")
            .await
            .unwrap()
            .into_iter()
            .map(|o| o.key)
            .filter(|k| k != FOREIGN && !k.ends_with(".manifest.json"))
            .count()
    };

    let mut manifest = fill(example("etcd-backup-periodic.yaml"), &etcd, &garage);
    manifest["spec"]["backupPolicy"] = json!({"backupIntervalInSecond": 2, "maxBackups": 3});
    manifest["spec"]["deletionPolicy"] = json!("Delete");
    let name = manifest["metadata"]["name"].as_str().unwrap().to_string();
    let api = create(&kube, &ns, manifest).await;
    wait_for("two backups and the finalizer", 60, || async {
        let b = api.get(&name).await.unwrap();
        let finalizer = b
            .metadata
            .finalizers
            .unwrap_or_default()
            .contains(&etcd_backup_operator::finalizer::FINALIZER.to_string());
        finalizer && ours().await >= 2
    })
    .await;

    api.delete(&name, &DeleteParams::default()).await.unwrap();
    wait_for("the EtcdBackup to go", 60, || async {
        api.get_opt(&name).await.unwrap().is_none()
    })
    .await;
    let left: Vec<String> = store
        .list("etcd.backup")
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .collect();
    assert_eq!(left, [FOREIGN], "{left:?}");
    kube.delete_namespace(&ns).await.unwrap();
}

/// The cluster-wide deployment: one operator, as the ServiceAccount of
/// `deploy/cluster-wide/rbac.yaml` with leader election, backs up EtcdBackups in two other
/// namespaces. `--selector` keeps it to this test's objects (the API server is shared).
#[tokio::test]
async fn cluster_wide_rbac_backs_up_selected_objects_in_every_namespace() {
    let kube = KubeTestbed::start().await.unwrap();
    install_crds(&kube).await;
    let operator_ns = kube.namespace("eb-cluster-op").await.unwrap();
    let cluster_scoped = install_rbac(&kube, CLUSTER_WIDE_RBAC, &operator_ns).await;
    let (etcd, garage) = (Etcd::start().await.unwrap(), Garage::start().await.unwrap());
    etcd.put("/cluster-wide", "yes").await.unwrap();
    let selector = format!("e2e-run={operator_ns}");
    let args = ["--selector", &selector, "--leader-election"];
    let args = [&args[..], &["--lease-namespace", &operator_ns]].concat();
    let op = Operator::start_as("", &operator_ns, "cluster-wide", &args).await;

    let one_shot = |ns: &str, name: &str, selected: bool| {
        let mut m = fill(example("etcd-backup-oneshot.yaml"), &etcd, &garage);
        m["metadata"]["name"] = json!(name);
        if selected {
            m["metadata"]["labels"] = json!({"e2e-run": operator_ns});
        }
        m["spec"]["s3"]["path"] = json!(format!("{}/{ns}/{name}.backup", garage.bucket));
        m
    };
    // The object outside the selector is created first: once the selected ones, created after
    // it, have succeeded, the operator's watch has gone past it.
    let mut namespaces = Vec::new();
    for prefix in ["eb-cluster-a", "eb-cluster-b"] {
        let ns = kube.namespace(prefix).await.unwrap();
        create_aws_secret(&kube, &ns, &garage).await;
        namespaces.push(ns);
    }
    let first_ns = &namespaces[0];
    let unselected = create(&kube, first_ns, one_shot(first_ns, "other", false)).await;
    let mut teams = Vec::new();
    for ns in &namespaces {
        teams.push((
            create(&kube, ns, one_shot(ns, "selected", true)).await,
            ns.clone(),
        ));
    }

    let store = store(&garage).await;
    for (api, ns) in &teams {
        wait_until_succeeded(api, "selected").await;
        let key = format!("{ns}/selected.backup");
        let verified = etcd_snapshot::verify(&store, &key, None).await.unwrap();
        let last = api
            .get("selected")
            .await
            .unwrap()
            .status
            .unwrap()
            .last_backup;
        assert_eq!(last.unwrap().sha256, Some(verified.stored.hex));
        let events = events_for(&kube, ns, "selected").await;
        assert!(
            events
                .iter()
                .any(|e| e.reason.as_deref() == Some("BackupSucceeded")),
            "{events:?}"
        );
    }
    // The object outside the selector was never touched.
    assert!(unselected.get("other").await.unwrap().status.is_none());
    assert!(
        store
            .head(&format!("{first_ns}/other.backup"))
            .await
            .unwrap()
            .is_none()
    );

    drop(op); // asserts that no request was refused
    for (_, ns) in &teams {
        kube.delete_namespace(ns).await.unwrap();
    }
    uninstall_cluster_wide(&kube, &operator_ns, cluster_scoped).await;
}

async fn uninstall_cluster_wide(
    kube: &KubeTestbed,
    operator_ns: &str,
    cluster_scoped: Vec<(String, String)>,
) {
    kube.delete_namespace(operator_ns).await.unwrap();
    for (kind, name) in cluster_scoped {
        let api: Api<DynamicObject> = Api::all_with(kube.client.clone(), &api_resource(&kind));
        api.delete(&name, &DeleteParams::default()).await.unwrap();
    }
}

/// Deleting a namespace never hangs on the Delete finalizer. The namespace controller deletes
/// the EtcdBackup and its S3 Secret together: the finalizer deletes the backup if it still
/// reads the Secret, and otherwise keeps it and lets go after `--finalizer-timeout-seconds`.
/// Either way the namespace goes. (A cluster-wide operator, whose RBAC lives elsewhere, as a
/// tenant namespace's deletion requires.)
#[tokio::test]
async fn deleting_a_namespace_holding_a_delete_policy_backup_completes() {
    let kube = KubeTestbed::start().await.unwrap();
    install_crds(&kube).await;
    let operator_ns = kube.namespace("eb-nsdel-op").await.unwrap();
    let cluster_scoped = install_rbac(&kube, CLUSTER_WIDE_RBAC, &operator_ns).await;
    let (etcd, garage) = (Etcd::start().await.unwrap(), Garage::start().await.unwrap());
    etcd.put("/deleted-with-its-namespace", "yes")
        .await
        .unwrap();
    let selector = format!("e2e-run={operator_ns}");
    let args = ["--selector", &selector, "--finalizer-timeout-seconds", "5"];
    let op = Operator::start_as("", &operator_ns, "ns-deletion", &args).await;

    let tenant = kube.namespace("eb-nsdel").await.unwrap();
    create_aws_secret(&kube, &tenant, &garage).await;
    let mut manifest = fill(example("etcd-backup-oneshot.yaml"), &etcd, &garage);
    manifest["metadata"]["labels"] = json!({"e2e-run": operator_ns});
    manifest["spec"]["deletionPolicy"] = json!("Delete");
    let key = format!("{tenant}/etcd.backup");
    manifest["spec"]["s3"]["path"] = json!(format!("{}/{key}", garage.bucket));
    let name = manifest["metadata"]["name"].as_str().unwrap().to_string();
    let api = create(&kube, &tenant, manifest).await;
    wait_until_succeeded(&api, &name).await;

    kube.delete_namespace(&tenant).await.unwrap();
    let namespaces: Api<Namespace> = Api::all(kube.client.clone());
    wait_for("the namespace to be deleted", 120, || async {
        namespaces.get_opt(&tenant).await.unwrap().is_none()
    })
    .await;
    let log = std::fs::read_to_string(&op.log).unwrap();
    let stored = store(&garage).await.head(&key).await.unwrap();
    if log.contains("backups removed") {
        assert!(stored.is_none(), "the finalizer said it deleted {key}");
    } else {
        assert!(log.contains("backups kept"), "{log}");
        assert!(stored.is_some(), "kept backups must still be there");
    }
    drop(op); // asserts that no request was refused
    uninstall_cluster_wide(&kube, &operator_ns, cluster_scoped).await;
}

/// `examples/etcd-backup-local-pvc.yaml`: backups on the claim mounted in the operator's pod
/// (here a directory), pruned to `maxBackups`, removed by `deletionPolicy: Delete`; a file
/// this EtcdBackup did not write stays.
#[tokio::test]
async fn local_pvc_example_prunes_on_the_claim_and_delete_removes_only_its_files() {
    let (kube, ns, etcd, _garage) = setup("eb-local").await;
    etcd.put("/local", "yes").await.unwrap();
    let volume = tempfile::tempdir().unwrap();
    let claim = format!("{ns}/etcd-backups");
    let volume_dir = volume.path().to_str().unwrap();
    let args = [
        "--local-volume-claim",
        &claim,
        "--local-volume-dir",
        volume_dir,
    ];
    let _op = Operator::start_with(&ns, "local", &args).await;
    let dir = volume.path().join("example-etcd-cluster");
    std::fs::create_dir_all(&dir).unwrap();
    const FOREIGN: &str = "etcd.backup_v1_2000-01-01-00:00:00";
    std::fs::write(dir.join(FOREIGN), b"not ours").unwrap();
    let files = || {
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };

    let [mut claim_doc, mut manifest] = <[Value; 2]>::try_from(documents(&format!(
        "{EXAMPLES}/../etcd-backup-local-pvc.yaml"
    )))
    .unwrap();
    claim_doc["metadata"]["namespace"] = json!(ns);
    apply(&kube, &claim_doc).await;
    manifest["spec"]["etcdEndpoints"] = json!([etcd.endpoint]);
    // The example's @hourly and 24, shortened so the test sees pruning within seconds.
    manifest["spec"]["backupPolicy"] = json!({"backupIntervalInSecond": 2, "maxBackups": 2});
    let name = manifest["metadata"]["name"].as_str().unwrap().to_string();
    let api = create(&kube, &ns, manifest).await;
    wait_for_runs(&api, &name, 4).await;

    let status = api.get(&name).await.unwrap().status.unwrap();
    let newest = status.last_backup.unwrap();
    let newest_file = newest.object_key.rsplit('/').next().unwrap().to_string();
    let ours: Vec<String> = files()
        .into_iter()
        .filter(|f| f != FOREIGN && !f.ends_with(".manifest.json"))
        .collect();
    assert_eq!(ours.len(), 2, "maxBackups: 2 keeps two: {ours:?}");
    assert!(ours.contains(&newest_file), "{newest_file} not in {ours:?}");
    // Local keys are the absolute path without its leading '/'.
    let location = backup_storage::Location::Local {
        path: dir.join("etcd.backup"),
    };
    let local = backup_storage::Store::open(&location, backup_storage::StoreOptions::default())
        .await
        .unwrap();
    let newest_path = dir.join(&newest_file);
    let newest_key = newest_path.to_str().unwrap().trim_start_matches('/');
    let verified = etcd_snapshot::verify(&local, newest_key, None)
        .await
        .unwrap();
    assert_eq!(newest.sha256, Some(verified.stored.hex));

    api.delete(&name, &DeleteParams::default()).await.unwrap();
    wait_for("the EtcdBackup to go", 60, || async {
        api.get_opt(&name).await.unwrap().is_none()
    })
    .await;
    assert_eq!(files(), [FOREIGN]);
    kube.delete_namespace(&ns).await.unwrap();
}

/// What the restored file serves: every key and value, read through a member started on it.
async fn restored_keys(snapshot: &Path) -> std::collections::BTreeMap<String, String> {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("restored");
    let peer = format!("http://127.0.0.1:{}", testbed::free_port());
    testbed::snapshot_restore(snapshot, &data_dir, "restored", &peer).unwrap();
    let etcd = Etcd::start_on_data_dir(&data_dir, "restored", &peer)
        .await
        .unwrap();
    etcd.get_all().await.unwrap()
}

/// A snapshot file of `base` at `revision`, made from what the operator archived.
async fn point_in_time(garage: &Garage, base: &str, revision: i64) -> std::path::PathBuf {
    use etcd_snapshot::changes::{PointInTimeOptions, Target, restore_to_point};
    let dir = tempfile::tempdir().unwrap().keep();
    let out = dir.join("at.db");
    let options = PointInTimeOptions {
        scratch: etcd_snapshot::DrillOptions {
            etcd_bin_dir: testbed::etcd_tool("etcd").parent().map(Path::to_path_buf),
            ..Default::default()
        },
        cluster_id: None,
    };
    let store = store(garage).await;
    let report = restore_to_point(
        &store,
        base,
        Target::Revision(revision),
        None,
        &out,
        &options,
    )
    .await
    .unwrap();
    assert_eq!(report.revision, revision);
    out
}

fn continuous_status(backup: &EtcdBackup) -> etcd_api::ArchiveStatus {
    backup
        .status
        .as_ref()
        .and_then(|s| s.continuous.clone())
        .unwrap_or_default()
}

/// A scheduled EtcdBackup `name` of `etcd` to `base` in Garage's bucket, a backup every
/// `interval` seconds, two kept, with the continuous archive (segments of one second).
fn archived_backup(name: &str, etcd: &Etcd, garage: &Garage, base: &str, interval: u64) -> Value {
    json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2",
        "kind": "EtcdBackup",
        "metadata": {"name": name},
        "spec": {
            "etcdEndpoints": [etcd.endpoint],
            "storageType": "S3",
            "backupPolicy": {"backupIntervalInSecond": interval, "maxBackups": 2},
            "s3": {"path": format!("{}/{base}", garage.bucket), "awsSecret": "aws",
                   "endpoint": garage.endpoint, "forcePathStyle": true},
            "continuous": {"segmentSeconds": 1}
        }
    })
}

/// `spec.continuous`: the operator archives every change beside the scheduled backups, says
/// how far in the status and the `Archiving` condition, and a restore to a point made from the
/// archive serves exactly the keys of that revision. Stopped while the cluster compacts, the
/// next operator says the gap (status, Warning event, metric) and goes on after a snapshot.
#[tokio::test]
async fn continuous_archive_reaches_every_revision_and_says_a_gap() {
    let (kube, ns, etcd, garage) = setup("continuous").await;
    let base = "continuous/etcd.backup";
    let manifest = archived_backup("archived", &etcd, &garage, base, 3600);
    let operator = Operator::start(&ns).await;
    let api = create(&kube, &ns, manifest).await;
    // The archive starts from a snapshot; writes made before it started are in that snapshot,
    // not in the archive, so the points asked for below come after the start.
    wait_for("the archive to start", 60, || async {
        let backup = api.get("archived").await.unwrap();
        continuous_status(&backup)
            .archived_through_revision
            .is_some()
    })
    .await;
    let mut client = etcd.client().await.unwrap();
    let mut expected = std::collections::BTreeMap::new();
    for i in 0..20 {
        etcd.put(&format!("/k/{i:02}"), &format!("v{i}"))
            .await
            .unwrap();
        expected.insert(format!("/k/{i:02}"), format!("v{i}"));
    }
    let point = client.put("/k/point", "p", None).await.unwrap();
    let point = point.header().unwrap().revision();
    expected.insert("/k/point".into(), "p".into());
    let deleted = client
        .delete("/k/", Some(etcd_client::DeleteOptions::new().with_prefix()))
        .await
        .unwrap();
    let last = deleted.header().unwrap().revision();
    wait_for("the archive to reach the range delete", 60, || async {
        let backup = api.get("archived").await.unwrap();
        let archiving = backup.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Archiving" && c.status == "True")
        });
        archiving && continuous_status(&backup).archived_through_revision >= Some(last)
    })
    .await;
    let at_point = point_in_time(&garage, base, point).await;
    assert_eq!(restored_keys(&at_point).await, expected);

    // Stopped (killed) while the cluster writes and compacts what was not archived.
    drop(operator);
    for i in 0..10 {
        etcd.put(&format!("/lost/{i}"), "x").await.unwrap();
    }
    let compacted = client.put("/lost/last", "x", None).await.unwrap();
    let compacted = compacted.header().unwrap().revision();
    client.compact(compacted, None).await.unwrap();
    let operator = Operator::start(&ns).await;
    wait_for("the gap in the status", 60, || async {
        let status = continuous_status(&api.get("archived").await.unwrap());
        status.gaps == 1
    })
    .await;
    let status = continuous_status(&api.get("archived").await.unwrap());
    let gap = status.last_gap.clone().unwrap();
    assert_eq!(gap.archived_through, last, "{status:?}");
    assert!(gap.resumed_after >= compacted, "{status:?}");
    let warned = events_for(&kube, &ns, "archived").await;
    assert!(
        warned
            .iter()
            .any(|e| e.reason.as_deref() == Some("ArchiveGap")
                && e.type_.as_deref() == Some("Warning")),
        "{warned:?}"
    );
    let (_, metrics) = operator.get("/metrics").await.unwrap();
    let lost = metrics
        .lines()
        .find(|l| l.starts_with("etcd_backup_archive_gap_revisions_total{"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse::<i64>().ok());
    assert_eq!(
        lost,
        Some(gap.resumed_after - gap.archived_through),
        "{metrics}"
    );

    // After the gap, the archive goes on: a later point is reached again.
    let after = client.put("/after", "gap", None).await.unwrap();
    let after = after.header().unwrap().revision();
    wait_for("the archive to go on after the gap", 60, || async {
        let status = continuous_status(&api.get("archived").await.unwrap());
        status.archived_through_revision >= Some(after)
    })
    .await;
    let at_after = point_in_time(&garage, base, after).await;
    let served = restored_keys(&at_after).await;
    assert_eq!(served.get("/after").map(String::as_str), Some("gap"));
    assert_eq!(
        served.keys().filter(|k| k.starts_with("/lost/")).count(),
        11
    );
}

/// Retention with `spec.continuous`: backups every 3 s, `maxBackups: 2`, while the cluster is
/// written to. The oldest backups go and with them exactly the segments no kept backup needs:
/// every revision from the oldest kept backup on is still restorable, a point before it is
/// refused (not served from a partial history), and no segment that ends before it is left.
#[tokio::test]
async fn continuous_archive_retention_keeps_what_the_kept_backups_need_and_nothing_older() {
    use etcd_snapshot::changes::{SegmentManifest, archive_prefix, parse_segment_key};
    use etcd_snapshot::naming::parse_scheduled;

    let (kube, ns, etcd, garage) = setup("continuous-retention").await;
    let base = "retained/etcd.backup";
    let manifest = archived_backup("retained", &etcd, &garage, base, 3);
    let _operator = Operator::start(&ns).await;
    let api = create(&kube, &ns, manifest).await;
    wait_for("the archive to start", 60, || async {
        continuous_status(&api.get("retained").await.unwrap())
            .archived_through_revision
            .is_some()
    })
    .await;
    let mut client = etcd.client().await.unwrap();
    let first = client.put("/w/first", "x", None).await.unwrap();
    let first = first.header().unwrap().revision();
    // A writer every 100 ms while four backups are taken.
    let writing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let writer = {
        let (mut client, writing) = (client.clone(), writing.clone());
        tokio::spawn(async move {
            let mut i = 0u64;
            while writing.load(std::sync::atomic::Ordering::SeqCst) {
                client.put(format!("/w/{i}"), "v", None).await.unwrap();
                i += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    wait_for_runs(&api, "retained", 4).await;
    writing.store(false, std::sync::atomic::Ordering::SeqCst);
    writer.await.unwrap();
    // The schedule moved an hour on, so that no run changes what is stored while it is
    // checked: the new spec observed, the next run due in an hour, none running.
    let patch = json!({"spec": {"backupPolicy": {"backupIntervalInSecond": 3600}}});
    let patched = api
        .patch("retained", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let generation = patched.metadata.generation;
    wait_for("the schedule an hour on, no run under way", 60, || async {
        let status = api
            .get("retained")
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        let running = status
            .conditions
            .iter()
            .any(|c| c.type_ == "Progressing" && c.status == "True");
        let later = chrono::Utc::now().timestamp() + 30 * 60;
        status.observed_generation == generation
            && !running
            && status
                .next_schedule_time
                .is_some_and(|t| t.0.as_second() > later)
    })
    .await;
    let last = client.put("/w/last", "x", None).await.unwrap();
    let last = last.header().unwrap().revision();
    wait_for("the archive to reach the last write", 60, || async {
        continuous_status(&api.get("retained").await.unwrap()).archived_through_revision
            >= Some(last)
    })
    .await;

    let store = store(&garage).await;
    let mut kept = Vec::new();
    for object in store.list(base).await.unwrap() {
        if parse_scheduled(base, &object.key).is_some() {
            let manifest = etcd_snapshot::Manifest::load(&store, &object.key)
                .await
                .unwrap()
                .unwrap();
            kept.push(manifest.etcd_revision);
        }
    }
    kept.sort();
    assert!(
        (2..=3).contains(&kept.len()),
        "maxBackups: 2 (a run may be under way): {kept:?}"
    );
    let oldest = kept[0];
    assert!(
        oldest > first,
        "the backups from before the writes are gone: {kept:?}"
    );
    let mut segments = Vec::new();
    for object in store.list(&archive_prefix(base)).await.unwrap() {
        if let Some(segment) = parse_segment_key(base, &object.key) {
            let manifest = SegmentManifest::load(&store, &segment.key).await.unwrap();
            segments.push((segment.first_revision, manifest.unwrap().last_revision));
        }
    }
    assert!(!segments.is_empty());
    let older: Vec<_> = segments.iter().filter(|(_, l)| *l < oldest).collect();
    assert!(
        older.is_empty(),
        "segments no kept backup needs: {older:?} (oldest kept {oldest})"
    );

    // Every point from the oldest kept backup on is reachable; a point before it is not.
    for revision in [oldest + 1, (oldest + last) / 2, last] {
        let at = point_in_time(&garage, base, revision).await;
        let served = restored_keys(&at).await;
        assert!(served.contains_key("/w/first"), "revision {revision}");
        assert_eq!(served.contains_key("/w/last"), revision == last);
    }
    let options = etcd_snapshot::changes::PointInTimeOptions {
        scratch: etcd_snapshot::DrillOptions {
            etcd_bin_dir: testbed::etcd_tool("etcd").parent().map(Path::to_path_buf),
            ..Default::default()
        },
        cluster_id: None,
    };
    let out = tempfile::tempdir().unwrap();
    let refused = etcd_snapshot::changes::restore_to_point(
        &store,
        base,
        etcd_snapshot::changes::Target::Revision(first),
        None,
        &out.path().join("at.db"),
        &options,
    )
    .await
    .unwrap_err();
    assert!(
        refused.to_string().contains("no snapshot at or before"),
        "{refused}"
    );
    kube.delete_namespace(&ns).await.unwrap();
}

/// coreos' `storageType: GCS` and `ABS` manifests (with an endpoint, for the emulators): a
/// scheduled EtcdBackup of each keeps its newest two in fake-gcs-server and Azurite, archives
/// every change beside them (`spec.continuous`), and the Delete policy removes backups and
/// segments when the EtcdBackup goes.
#[tokio::test]
async fn gcs_and_abs_backups_are_kept_pruned_and_deleted() {
    let kube = KubeTestbed::start().await.unwrap();
    install_crds(&kube).await;
    let ns = kube.namespace("eb-clouds").await.unwrap();
    install_namespaced_rbac(&kube, &ns).await;
    let etcd = Etcd::start().await.unwrap();
    let gcs = testbed::FakeGcs::start().await.unwrap();
    let azurite = testbed::Azurite::start().await.unwrap();
    // fake-gcs-server checks no token; the Secret is what the operator insists on.
    testbed::kube::create_secret(&kube.client, &ns, "gcp", &[("access-token", "emulator")])
        .await
        .unwrap();
    testbed::kube::create_secret(&kube.client, &ns, "abs", &azurite.coreos_secret())
        .await
        .unwrap();
    let _op = Operator::start(&ns).await;

    let policy = json!({"backupIntervalInSecond": 2, "maxBackups": 2});
    let gcs_backup = json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdBackup",
        "metadata": {"name": "to-gcs"},
        "spec": {"etcdEndpoints": [etcd.endpoint], "storageType": "GCS",
                 "backupPolicy": policy, "deletionPolicy": "Delete",
                 "continuous": {"segmentSeconds": 1},
                 "gcs": {"path": format!("{}/gcs/etcd.backup", gcs.bucket), "gcpSecret": "gcp",
                         "endpoint": gcs.endpoint}}});
    let abs_backup = json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdBackup",
        "metadata": {"name": "to-abs"},
        "spec": {"etcdEndpoints": [etcd.endpoint], "storageType": "ABS",
                 "backupPolicy": policy, "deletionPolicy": "Delete",
                 "continuous": {"segmentSeconds": 1},
                 "abs": {"path": format!("{}/abs/etcd.backup", azurite.container), "absSecret": "abs",
                         "endpoint": azurite.endpoint}}});
    let api = create(&kube, &ns, gcs_backup).await;
    create(&kube, &ns, abs_backup).await;

    let gcs_store = Store::open(
        &Location::parse(&format!("gs://{}/", gcs.bucket)).unwrap(),
        &GcsOptions {
            endpoint: Some(gcs.endpoint.clone()),
            credentials: GcsCredentials::Anonymous,
            ..GcsOptions::default()
        },
    )
    .await
    .unwrap();
    let abs_store = Store::open(
        &Location::parse(&format!("azblob://{}/", azurite.container)).unwrap(),
        &AzureOptions {
            account: azurite.account.clone(),
            endpoint: Some(azurite.endpoint.clone()),
            credentials: AzureCredentials::SharedKey(azurite.key.clone()),
            ..AzureOptions::default()
        },
    )
    .await
    .unwrap();
    for (name, store, prefix) in [
        ("to-gcs", &gcs_store, "gcs/etcd.backup_v"),
        ("to-abs", &abs_store, "abs/etcd.backup_v"),
    ] {
        wait_for_runs(&api, name, 4).await;
        let status = api.get(name).await.unwrap().status.unwrap();
        let newest = status.last_backup.unwrap();
        assert!(
            newest.object_key.starts_with(if name == "to-gcs" {
                "gs://"
            } else {
                "azblob://"
            }),
            "{}",
            newest.object_key
        );
        let left: Vec<String> = keys(store, prefix)
            .await
            .into_iter()
            .filter(|k| !k.ends_with(".manifest.json"))
            .collect();
        assert_eq!(left.len(), 2, "{name}: maxBackups 2 keeps two: {left:?}");
        assert!(
            left.iter().any(|k| newest.object_key.ends_with(k.as_str())),
            "{name}: the newest is kept: {left:?}"
        );
        // Each kept backup has its manifest beside it.
        for key in &left {
            let manifest = store
                .get_small(&backup_storage::manifest_key(key))
                .await
                .unwrap();
            assert!(manifest.is_some(), "{name}: no manifest beside {key}");
        }
    }

    // The continuous archive stores every change in segments beside the backups.
    let written = etcd
        .client()
        .await
        .unwrap()
        .put("/archived", "yes", None)
        .await
        .unwrap();
    let written = written.header().unwrap().revision();
    for (name, store, prefix) in [
        ("to-gcs", &gcs_store, "gcs/etcd.backup.changes/"),
        ("to-abs", &abs_store, "abs/etcd.backup.changes/"),
    ] {
        wait_for(
            &format!("{name}'s archive to reach revision {written}"),
            60,
            || async {
                let backup = api.get(name).await.unwrap();
                let archiving = backup.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == "Archiving" && c.status == "True")
                });
                archiving && continuous_status(&backup).archived_through_revision >= Some(written)
            },
        )
        .await;
        let segments = keys(store, prefix).await;
        assert!(!segments.is_empty(), "{name}: no segment under {prefix}");
    }

    for (name, store, prefix) in [
        ("to-gcs", &gcs_store, "gcs/"),
        ("to-abs", &abs_store, "abs/"),
    ] {
        api.delete(name, &DeleteParams::default()).await.unwrap();
        wait_for(&format!("{name} to go"), 60, || async {
            api.get_opt(name).await.unwrap().is_none()
        })
        .await;
        let left = keys(store, prefix).await;
        assert!(left.is_empty(), "{name}: the Delete policy left {left:?}");
    }
    kube.delete_namespace(&ns).await.unwrap();
}
