//! Reconcile against a mock API server (`mock_api`): the calls, their order and their
//! bodies, for a restore resumed at each step after an operator restart. The order is the point:
//! the plan, the verified snapshot and the hand-over are recorded before they are acted on, and
//! nothing of the cluster is touched before every member's fetch verified the backup. Real pods
//! are in `e2e.rs`.

use std::sync::Arc;

use etcd_api::EtcdRestore;
use etcd_members::claims::Claims;
use etcd_members::origin::{PROOF_ANNOTATION, ProofKey, UNPROVEN_GATE};
use etcd_restore_operator::context::{self, Context};
use etcd_restore_operator::controller;
use etcd_restore_operator::metrics::Metrics;
use http::{Method, StatusCode};
use kube::core::DeserializeGuard;
use kube::runtime::controller::Action;
use kube::runtime::watcher::Event;
use mock_api::{self, MockApi};
use serde_json::{Value, json};

const NS: &str = "/api/v1/namespaces/ns";
const RESTORE: &str = "/apis/etcd.database.coreos.com/v1beta2/namespaces/ns/etcdrestores/c";
const CLUSTER: &str = "/apis/etcd.database.coreos.com/v1beta2/namespaces/ns/etcdclusters/c";

fn context() -> (Arc<Context>, MockApi) {
    let (client, api) = mock_api::pair();
    let metrics = Arc::new(Metrics::default());
    // A claim cache whose watch never ran: every claim read is a list (the calls below).
    let (claims, _unfed) = Claims::new(client.clone(), std::time::Duration::ZERO);
    let ctx = Context::new(
        client,
        Some("test-pod".into()),
        metrics,
        "backup:dev".into(),
        test_key(),
        claims,
    );
    (Arc::new(ctx), api)
}

/// The coreos restore, with `status` as recorded.
fn restore(status: Value) -> Value {
    json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdRestore",
        "metadata": {"name": "c", "namespace": "ns", "uid": "r-uid", "generation": 1},
        "spec": {"etcdCluster": {"name": "c"}, "backupStorageType": "S3",
                 "s3": {"path": "bucket/etcd.backup", "awsSecret": "aws", "endpoint": "http://s3:3900"}},
        "status": status,
    })
}

/// The cluster, paused (from running) and held by the restore, its operator having reported the
/// pause.
fn held_cluster() -> Value {
    json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "metadata": {"name": "c", "namespace": "ns", "uid": "c-uid", "generation": 4,
                     "annotations": {"etcd.database.coreos.com/restore": "r-uid",
                                     "etcd.database.coreos.com/paused-by-restore": "true"}},
        "spec": {"size": 3, "version": "3.5.16", "repository": "localhost/etcd", "paused": true,
                 "pod": {"persistentVolumeClaimSpec": {"accessModes": ["ReadWriteOnce"],
                         "resources": {"requests": {"storage": "1Gi"}}}}},
        "status": {"controlPaused": true, "observedGeneration": 4, "phase": "Running"},
    })
}

/// The same cluster running: not paused, not held.
fn running_cluster() -> Value {
    let mut cluster = held_cluster();
    cluster["metadata"]["annotations"] = json!({});
    cluster["spec"]["paused"] = json!(false);
    cluster
}

/// The status as recorded, plus `extra`.
fn recorded(extra: Value) -> Value {
    let mut status = json!({"phase": "Preparing", "startTime": "2026-11-24T03:00:00Z"});
    for (k, v) in extra.as_object().unwrap() {
        status[k] = v.clone();
    }
    status
}

fn plan(handed_over: Option<bool>) -> Value {
    json!({"members": ["c-3", "c-4", "c-5"], "token": "restore-r-uid", "version": "3.5.16",
           "detachedClaims": ["c-0"], "handedOver": handed_over})
}

/// The snapshot the members' fetches verified, as recorded.
fn verified() -> Value {
    json!({"revision": 500, "sha256": "ab"})
}

fn claim(name: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "ns", "labels": {"app": "etcd", "etcd_cluster": "c"}},
           "spec": {"accessModes": ["ReadWriteOnce"]}})
}

/// A replaced member's claim, detached from the cluster by an earlier step of this restore.
fn detached_claim(name: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "ns",
                        "labels": {"app": "etcd", "etcd.database.coreos.com/detached-from": "c"},
                        "annotations": {"etcd.database.coreos.com/restore": "r-uid"}},
           "spec": {"accessModes": ["ReadWriteOnce"]}})
}

/// A claim made for the restore, not yet given to the cluster.
fn staged_claim(name: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "ns",
                        "labels": {"app": "etcd-restore", "etcd_restore": "c"}},
           "spec": {"accessModes": ["ReadWriteOnce"]}})
}

/// A pod of the restore, with `status`.
fn own_pod(name: &str, status: Value) -> Value {
    json!({"metadata": {"name": name, "namespace": "ns",
                        "ownerReferences": [{"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdRestore",
                                             "name": "c", "uid": "r-uid", "controller": true}]},
           "status": status})
}

fn finished_pod(name: &str) -> Value {
    own_pod(name, json!({"phase": "Succeeded"}))
}

/// Its fetch log: JSON log lines, then the report on stdout.
const FETCH_LOG: &str = "{\"level\":\"INFO\",\"fields\":{\"message\":\"fetching\"}}\n\
    {\"object\":\"s3://bucket/etcd.backup\",\"sha256\":\"ab\",\"revision\":500,\"dbBytes\":1048576}\n";

/// What one reconcile reads before it acts, answered from the given world.
struct World {
    restore: Value,
    cluster: Value,
    member_pods: Vec<Value>,
    claims: Vec<Value>,
    /// The namespace's other claims (here: detached ones).
    others: Vec<Value>,
    staged: Vec<Value>,
    own_pods: Vec<Value>,
}

/// The `aws` Secret with `files` (its data: `credentials`, `config`), as the API returns it.
fn aws_secret(files: &[(&str, &str)]) -> Value {
    let data: serde_json::Map<String, Value> = files
        .iter()
        .map(|(k, v)| (k.to_string(), json!(base64(v))))
        .collect();
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "aws"}, "data": data})
}

fn base64(text: &str) -> String {
    use std::fmt::Write;
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in text.as_bytes().chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            let c = if i <= chunk.len() {
                ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char
            } else {
                '='
            };
            let _ = write!(out, "{c}");
        }
    }
    out
}

const STATIC_KEYS: &str = "[default]\naws_access_key_id = GKtest\naws_secret_access_key = secret\n";

impl World {
    fn every_claim(&self) -> Vec<Value> {
        [&self.claims, &self.others, &self.staged]
            .into_iter()
            .flatten()
            .cloned()
            .collect()
    }

    async fn serve(&self, api: &mut MockApi) {
        self.serve_with_aws(api, aws_secret(&[("credentials", STATIC_KEYS)]))
            .await;
    }

    /// Serves the observation with `aws` as the restore's `awsSecret`.
    async fn serve_with_aws(&self, api: &mut MockApi, aws: Value) {
        self.serve_from(api, None, aws, true).await;
    }

    /// Serves the observation with the claims read from the claim cache (no list).
    async fn serve_claims_from_cache(&self, api: &mut MockApi) {
        let aws = aws_secret(&[("credentials", STATIC_KEYS)]);
        self.serve_from(api, None, aws, false).await;
    }

    /// Serves the observation of a `backupRef` restore, its EtcdBackup being `backup`.
    async fn serve_with_backup(&self, api: &mut MockApi, backup: Value) {
        let aws = aws_secret(&[("credentials", STATIC_KEYS)]);
        self.serve_from(api, Some(backup), aws, true).await;
    }

    async fn serve_from(
        &self,
        api: &mut MockApi,
        backup: Option<Value>,
        aws: Value,
        claims_listed: bool,
    ) {
        let restore = self.restore.clone();
        api.expect_call(
            Method::GET,
            &format!("{RESTORE}/status"),
            StatusCode::OK,
            |_| restore,
        )
        .await;
        if let Some(backup) = backup {
            let path = "/apis/etcd.database.coreos.com/v1beta2/namespaces/ns/etcdbackups/nightly";
            api.expect_call(Method::GET, path, StatusCode::OK, |_| backup)
                .await;
        }
        api.expect_call(
            Method::GET,
            &format!("{NS}/secrets/aws"),
            StatusCode::OK,
            |_| aws,
        )
        .await;
        let cluster = self.cluster.clone();
        api.expect_call(Method::GET, CLUSTER, StatusCode::OK, |_| cluster)
            .await;
        let pods = api
            .expect_list(&format!("{NS}/pods"), self.member_pods.clone())
            .await;
        assert!(pods.query.contains("etcd_cluster%3Dc"), "{}", pods.query);
        // Every claim of the namespace, in one list: the cluster's, the detached ones and the
        // staged ones are told apart by their labels.
        if claims_listed {
            let every = api
                .expect_list(&format!("{NS}/persistentvolumeclaims"), self.every_claim())
                .await;
            assert!(!every.query.contains("labelSelector"), "{}", every.query);
        }
        let own = api
            .expect_list(&format!("{NS}/pods"), self.own_pods.clone())
            .await;
        assert!(own.query.contains("etcd_restore%3Dc"), "{}", own.query);
    }
}

/// A restore as the watch hands it over: readable.
fn guarded(restore: EtcdRestore) -> Arc<DeserializeGuard<EtcdRestore>> {
    Arc::new(DeserializeGuard(Ok(restore)))
}

fn run(restore: Value, ctx: &Arc<Context>) -> tokio::task::JoinHandle<Action> {
    let ctx = ctx.clone();
    let restore: EtcdRestore = serde_json::from_value(restore).unwrap();
    tokio::spawn(async move {
        controller::reconcile(guarded(restore), ctx)
            .await
            .expect("reconcile")
    })
}

/// The status report (applied under the controller's field manager) and the step's event.
async fn expect_report(api: &mut MockApi, restore: &Value) -> Value {
    let call = expect_status_patch(api, restore).await;
    assert_applied_by(&call, "etcd-restore-operator");
    api.expect_event("ns").await;
    call.body["status"].clone()
}

/// The status report, with no event after it (yet).
async fn expect_report_alone(api: &mut MockApi, restore: &Value) -> Value {
    let call = expect_status_patch(api, restore).await;
    assert_applied_by(&call, "etcd-restore-operator");
    call.body["status"].clone()
}

/// The records applied under their own field manager: each apply carries every record the
/// restore had (the API server would drop the ones it left out).
async fn expect_records(api: &mut MockApi, restore: &Value) -> mock_api::Call {
    let call = expect_status_patch(api, restore).await;
    assert_applied_by(&call, "etcd-restore-operator-records");
    let before = &restore["status"];
    for record in [
        "plan",
        "snapshot",
        "source",
        "revisionBumped",
        "restoredRevision",
        "reason",
        "expectedBackup",
        "restoredContents",
    ] {
        if !before[record].is_null() {
            assert!(
                !call.body["status"][record].is_null(),
                "{record} dropped: {}",
                call.body
            );
        }
    }
    for report in ["phase", "conditions", "startTime", "succeeded"] {
        assert!(
            call.body["status"][report].is_null(),
            "{report} in the records: {}",
            call.body
        );
    }
    call
}

/// A server-side apply of an EtcdRestore's status by `manager`.
fn assert_applied_by(call: &mock_api::Call, manager: &str) {
    assert!(
        call.query.contains(&format!("fieldManager={manager}&"))
            || call.query.ends_with(&format!("fieldManager={manager}")),
        "{}",
        call.query
    );
    assert!(call.query.contains("force=true"), "{}", call.query);
    assert_eq!(call.body["kind"], "EtcdRestore", "{}", call.body);
}

/// Success: the run-once pods go (their scratch volumes hold a copy of the database each),
/// then the report.
async fn expect_success(api: &mut MockApi, restore: &Value) -> Value {
    for pod in ["c-3-restore", "c-4-restore", "c-5-restore"] {
        let path = format!("{NS}/pods/{pod}");
        api.expect_call(Method::DELETE, &path, StatusCode::OK, |_| finished_pod(pod))
            .await;
    }
    expect_report(api, restore).await
}

/// The status report and its event, which must be of `type_` with `reason`.
async fn expect_report_of(api: &mut MockApi, restore: &Value, type_: &str, reason: &str) -> Value {
    let status = expect_report_alone(api, restore).await;
    let event = api.expect_event("ns").await;
    assert_eq!(
        (event["type"].as_str(), event["reason"].as_str()),
        (Some(type_), Some(reason)),
        "{event}"
    );
    status
}

/// A patch of the restore's status, answered with the restore.
async fn expect_status_patch(api: &mut MockApi, restore: &Value) -> mock_api::Call {
    let restore = restore.clone();
    let path = format!("{RESTORE}/status");
    api.expect_call(Method::PATCH, &path, StatusCode::OK, |_| restore)
        .await
}

/// A restore whose hand-over was recorded (revision too), members on their claims, the
/// replaced member's claim c-0 detached; `cluster` as the world shows it.
fn handed_over(cluster: Value) -> World {
    World {
        restore: restore(recorded(
            json!({"plan": plan(Some(true)), "snapshot": verified(),
            "restoredRevision": 1000000500, "phase": "Verifying"}),
        )),
        cluster,
        member_pods: vec![],
        claims: vec![claim("c-3"), claim("c-4"), claim("c-5")],
        others: vec![detached_claim("c-0")],
        staged: vec![],
        own_pods: vec![],
    }
}

#[tokio::test]
async fn the_plan_is_recorded_before_any_member_is_touched() {
    let (ctx, mut api) = context();
    let world = World {
        restore: restore(recorded(json!({}))),
        cluster: held_cluster(),
        member_pods: vec![],
        claims: vec![claim("c-0"), claim("c-2")],
        others: vec![],
        staged: vec![],
        own_pods: vec![],
    };
    let reconcile = run(world.restore.clone(), &ctx);
    world.serve(&mut api).await;
    let call = expect_records(&mut api, &world.restore).await;
    let plan = &call.body["status"]["plan"];
    assert_eq!(
        plan["members"],
        json!(["c-3", "c-4", "c-5"]),
        "above every name in use"
    );
    assert_eq!(plan["detachedClaims"], json!(["c-0", "c-2"]));
    assert_eq!(call.body["status"]["revisionBumped"], true);
    assert_eq!(call.body["status"]["source"], "s3://bucket/etcd.backup");
    let status = expect_report(&mut api, &world.restore).await;
    assert_eq!(status["phase"], "Preparing");
    reconcile.await.unwrap();
    api.expect_silence().await;
}

/// The plan recorded, nothing made yet; old member c-0 still runs on its claim.
fn planned_world() -> World {
    World {
        restore: restore(recorded(
            json!({"plan": plan(None), "revisionBumped": true}),
        )),
        cluster: held_cluster(),
        member_pods: vec![old_member("c-0")],
        claims: vec![claim("c-0")],
        others: vec![],
        staged: vec![],
        own_pods: vec![],
    }
}

#[tokio::test]
async fn resumed_with_a_plan_claims_and_restore_pods_are_made_for_every_member() {
    let (ctx, mut api) = context();
    // Old member c-0 still runs on its claim: it is not touched before the backup is verified.
    let world = planned_world();
    let reconcile = run(world.restore.clone(), &ctx);
    world.serve(&mut api).await;
    for member in ["c-3", "c-4", "c-5"] {
        let claim = api
            .expect_call(
                Method::POST,
                &format!("{NS}/persistentvolumeclaims"),
                StatusCode::CREATED,
                |c| c.body.clone(),
            )
            .await;
        assert_eq!(claim.body["metadata"]["name"], member);
        assert_eq!(
            claim.body["metadata"]["annotations"]["etcd.version"],
            "3.5.16"
        );
        // The restore's, out of the cluster's selector until the backup is verified.
        assert_eq!(
            claim.body["metadata"]["labels"],
            json!({"app": "etcd-restore", "etcd_restore": "c"})
        );
        assert_eq!(claim.body["metadata"]["ownerReferences"][0]["uid"], "r-uid");
        let pod = api
            .expect_call(
                Method::POST,
                &format!("{NS}/pods"),
                StatusCode::CREATED,
                |c| c.body.clone(),
            )
            .await;
        assert_eq!(pod.body["metadata"]["name"], format!("{member}-restore"));
        let argv = pod.body["spec"]["containers"][0]["command"].to_string();
        assert!(
            argv.contains("--initial-cluster-token=restore-r-uid"),
            "{argv}"
        );
        assert!(argv.contains("--bump-revision=1000000000"), "{argv}");
    }
    let status = expect_report(&mut api, &world.restore).await;
    assert_eq!(status["phase"], "Restoring");
    reconcile.await.unwrap();
    api.expect_silence().await;
}

#[tokio::test]
async fn a_hand_over_recorded_before_a_crash_is_finished_without_asking_etcd_again() {
    let (ctx, mut api) = context();
    let world = handed_over(held_cluster());
    let reconcile = run(world.restore.clone(), &ctx);
    world.serve(&mut api).await;
    // Recorded again (idempotent), then the cluster unpaused and marked as this restore's data
    // in one patch; never a write to the cluster's status (the cluster operator's alone).
    let record = expect_records(&mut api, &world.restore).await;
    assert_eq!(record.body["status"]["plan"]["handedOver"], true);
    let cluster = held_cluster();
    let unpause = api
        .expect_call(Method::PATCH, CLUSTER, StatusCode::OK, |_| cluster)
        .await;
    assert_eq!(unpause.body["spec"]["paused"], false);
    let uid = &world.restore["metadata"]["uid"];
    assert!(uid.is_string(), "{uid}");
    assert_eq!(
        &unpause.body["metadata"]["annotations"]["etcd.database.coreos.com/restored-by"],
        uid
    );
    assert!(unpause.body["metadata"]["annotations"]["etcd.database.coreos.com/restore"].is_null());
    expect_report(&mut api, &world.restore).await;
    reconcile.await.unwrap();
    api.expect_silence().await;
}

#[tokio::test]
async fn after_the_hand_over_old_volumes_go_then_success() {
    let (ctx, mut api) = context();
    let cluster = running_cluster();
    let world = handed_over(cluster);
    let reconcile = run(world.restore.clone(), &ctx);
    world.serve(&mut api).await;
    api.expect_call(
        Method::DELETE,
        &format!("{NS}/persistentvolumeclaims/c-0"),
        StatusCode::OK,
        |_| claim("c-0"),
    )
    .await;
    let status = expect_report(&mut api, &world.restore).await;
    assert_eq!(status["phase"], "Verifying");
    assert_eq!(status["succeeded"], false);
    reconcile.await.unwrap();
    api.expect_silence().await;

    // The next reconcile, with c-0 gone: success, with the revision recorded at the hand-over.
    let world = World {
        others: vec![],
        ..world
    };
    let reconcile = run(world.restore.clone(), &ctx);
    world.serve(&mut api).await;
    let status = expect_success(&mut api, &world.restore).await;
    assert_eq!(status["succeeded"], true);
    assert_eq!(status["phase"], "Succeeded");
    assert_eq!(status["conditions"][0]["type"], "Ready");
    assert_eq!(status["conditions"][0]["status"], "True");
    reconcile.await.unwrap();
    api.expect_silence().await;
}

/// Planned, every member's claim staged and its restore pod as `runs` says; old member c-0
/// still running on its claim.
fn restoring(runs: [Value; 3]) -> World {
    let [c3, c4, c5] = runs;
    World {
        restore: restore(recorded(
            json!({"plan": plan(None), "revisionBumped": true, "phase": "Restoring"}),
        )),
        cluster: held_cluster(),
        member_pods: vec![old_member("c-0")],
        claims: vec![claim("c-0")],
        others: vec![],
        staged: vec![
            staged_claim("c-3"),
            staged_claim("c-4"),
            staged_claim("c-5"),
        ],
        own_pods: vec![
            own_pod("c-3-restore", c3),
            own_pod("c-4-restore", c4),
            own_pod("c-5-restore", c5),
        ],
    }
}

/// Every member restored and the snapshot they verified recorded; old member c-0 still running.
fn verified_world() -> World {
    let mut world = restoring([
        json!({"phase": "Succeeded"}),
        json!({"phase": "Succeeded"}),
        json!({"phase": "Succeeded"}),
    ]);
    world.restore = restore(recorded(json!({"plan": plan(None), "revisionBumped": true,
        "phase": "Restoring", "snapshot": verified(), "source": "s3://bucket/etcd.backup"})));
    world
}

/// A failure before any member stopped: the restore's own pods, then its claims, are deleted.
async fn expect_restore_objects_deleted(api: &mut MockApi) {
    for path in [
        format!("{NS}/pods/c-3-restore"),
        format!("{NS}/pods/c-4-restore"),
        format!("{NS}/pods/c-5-restore"),
        format!("{NS}/persistentvolumeclaims/c-3"),
        format!("{NS}/persistentvolumeclaims/c-4"),
        format!("{NS}/persistentvolumeclaims/c-5"),
    ] {
        api.expect_call(Method::DELETE, &path, StatusCode::OK, |_| json!({}))
            .await;
    }
}

#[tokio::test]
async fn a_backup_failing_one_members_fetch_gives_the_running_cluster_back_untouched() {
    let (ctx, mut api) = context();
    let bad_fetch = json!({"phase": "Failed", "initContainerStatuses": [{
        "name": "fetch", "image": "backup:dev", "imageID": "", "ready": false, "restartCount": 0,
        "state": {"terminated": {"exitCode": 3, "message": "sha256 trailer mismatch"}}}]});
    let world = restoring([
        json!({"phase": "Running"}),
        bad_fetch.clone(),
        json!({"phase": "Running"}),
    ]);
    let reconcile = run(world.restore.clone(), &ctx);
    world.serve(&mut api).await;
    // First the cause is recorded (the pods that show it are about to go), then the
    // restore's own objects go: its pods, then its claims. Nothing of the cluster is written.
    let record = expect_records(&mut api, &world.restore).await;
    let recorded_reason = record.body["status"]["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        recorded_reason.starts_with("BackupInvalid: ") && recorded_reason.contains("c-4"),
        "{recorded_reason}"
    );
    expect_restore_objects_deleted(&mut api).await;
    let status = expect_report_of(&mut api, &world.restore, "Warning", "BackupInvalid").await;
    assert_eq!(status["phase"], "Restoring");
    assert_eq!(status["conditions"][1]["reason"], "Discarding");
    reconcile.await.unwrap();
    api.expect_silence().await;

    // They are gone, the cause is in status: the only write to the cluster is the release
    // (the lock goes, and the pause this restore made).
    let world = World {
        restore: restore(recorded(json!({"plan": plan(None), "revisionBumped": true,
            "phase": "Restoring", "reason": recorded_reason}))),
        staged: vec![],
        own_pods: vec![],
        ..world
    };
    let reconcile = run(world.restore.clone(), &ctx);
    world.serve(&mut api).await;
    expect_given_back(&mut api).await;
    let status = expect_report_alone(&mut api, &world.restore).await;
    // The same Warning as the discard's: the recorder counts it into that event's series.
    let event = api.expect(StatusCode::OK, |_| json!({})).await;
    assert!(event.path.contains("/events"), "{event:?}");
    assert_eq!(status["phase"], "Failed");
    let reason = status["reason"].as_str().unwrap();
    assert!(reason.starts_with("BackupInvalid"), "{reason}");
    assert!(
        reason.contains("sha256 trailer mismatch") && reason.contains("c-4"),
        "{reason}"
    );
    reconcile.await.unwrap();
    api.expect_silence().await;
}

/// A fetch that cannot decrypt with the restore's identity (exit 4) fails the restore as
/// `NoUsableIdentity`, not as an invalid backup: the key is wrong, the backup was not judged.
/// The running cluster is given back untouched, as for any failed fetch.
#[tokio::test]
async fn a_fetch_the_identity_cannot_decrypt_fails_as_no_usable_identity() {
    let (ctx, mut api) = context();
    let wrong_key = json!({"phase": "Failed", "initContainerStatuses": [{
        "name": "fetch", "image": "backup:dev", "imageID": "", "ready": false, "restartCount": 0,
        "state": {"terminated": {"exitCode": 4, "message":
            "error: s3://b/etcd.backup is encrypted to other keys: the identity given (public key age1x) is not among its recipients (age1y)"}}}]});
    let world = restoring([
        wrong_key,
        json!({"phase": "Running"}),
        json!({"phase": "Running"}),
    ]);
    let reconcile = run(world.restore.clone(), &ctx);
    world.serve(&mut api).await;
    let record = expect_records(&mut api, &world.restore).await;
    let recorded_reason = record.body["status"]["reason"].as_str().unwrap();
    assert!(
        recorded_reason.starts_with("NoUsableIdentity: ")
            && recorded_reason.contains("spec.decryption")
            && recorded_reason.contains("not among its recipients (age1y)"),
        "{recorded_reason}"
    );
    expect_restore_objects_deleted(&mut api).await;
    expect_report_of(&mut api, &world.restore, "Warning", "NoUsableIdentity").await;
    reconcile.await.unwrap();
    api.expect_silence().await;
}

#[tokio::test]
async fn a_cluster_the_user_had_paused_stays_paused_when_given_back() {
    let (ctx, mut api) = context();
    let bad_tool = json!({"phase": "Failed", "containerStatuses": [{
        "name": "restore", "image": "etcd", "imageID": "", "ready": false, "restartCount": 0,
        "state": {"terminated": {"exitCode": 1, "message": "no space left on device"}}}]});
    let mut world = restoring([bad_tool.clone(), json!({}), json!({})]);
    world.cluster["metadata"]["annotations"] = json!({"etcd.database.coreos.com/restore": "r-uid"});
    // Its cause recorded, the restore's claims and pods already discarded.
    world.restore = restore(recorded(json!({"plan": plan(None), "phase": "Restoring",
        "reason": "RestoreFailed: restoring member c-3 failed: no space left on device"})));
    world.staged = vec![];
    world.own_pods = vec![];
    let reconcile = run(world.restore.clone(), &ctx);
    world.serve(&mut api).await;
    let cluster = world.cluster.clone();
    let release = api
        .expect_call(Method::PATCH, CLUSTER, StatusCode::OK, |_| cluster)
        .await;
    assert!(release.body.get("spec").is_none(), "{}", release.body);
    let status = expect_report_of(&mut api, &world.restore, "Warning", "RestoreFailed").await;
    assert!(
        status["reason"]
            .as_str()
            .unwrap()
            .starts_with("RestoreFailed")
    );
    reconcile.await.unwrap();
    api.expect_silence().await;
}

#[tokio::test]
async fn while_one_member_still_restores_nothing_is_read_or_touched() {
    let (ctx, mut api) = context();
    let world = restoring([
        json!({"phase": "Succeeded"}),
        json!({"phase": "Succeeded"}),
        json!({"phase": "Running"}),
    ]);
    let reconcile = run(world.restore.clone(), &ctx);
    world.serve(&mut api).await;
    // No log read, no write but the status (a wait sends no event).
    let report = expect_report_alone(&mut api, &world.restore).await;
    assert_eq!(report["phase"], "Restoring");
    assert!(
        report["conditions"][1]["message"]
            .as_str()
            .unwrap()
            .contains("1 of 3 members"),
        "{report}"
    );
    reconcile.await.unwrap();
    api.expect_silence().await;
}

#[tokio::test]
async fn while_a_step_waits_claims_come_from_the_cache_and_a_changed_restore_or_cluster_lists_them()
{
    let (client, mut api) = mock_api::pair();
    let (claims, mut feed) = Claims::new(client.clone(), std::time::Duration::from_millis(300));
    let metrics = Arc::new(Metrics::default());
    let ctx = Context::new(
        client,
        None,
        metrics,
        "backup:dev".into(),
        test_key(),
        claims,
    );
    let ctx = Arc::new(ctx);
    let mut world = restoring([
        json!({"phase": "Succeeded"}),
        json!({"phase": "Succeeded"}),
        json!({"phase": "Running"}),
    ]);
    // The claims as the API server has them (uid, resourceVersion), and the watch shows them.
    for (i, claim) in world.claims.iter_mut().chain(&mut world.staged).enumerate() {
        claim["metadata"]["uid"] = json!(format!("claim-uid-{i}"));
        claim["metadata"]["resourceVersion"] = json!("5");
    }
    feed.apply(&Event::Init);
    for claim in world.every_claim() {
        feed.apply(&Event::InitApply(serde_json::from_value(claim).unwrap()));
    }
    feed.apply(&Event::InitDone);
    let wait = |world: &World, ctx: &Arc<Context>| run(world.restore.clone(), ctx);
    // Its first look lists them.
    let reconcile = wait(&world, &ctx);
    world.serve(&mut api).await;
    expect_report_alone(&mut api, &world.restore).await;
    reconcile.await.unwrap();
    // Still waiting in the same step: from the cache.
    let reconcile = wait(&world, &ctx);
    world.serve_claims_from_cache(&mut api).await;
    let report = expect_report_alone(&mut api, &world.restore).await;
    assert!(report.to_string().contains("1 of 3 members"), "{report}");
    reconcile.await.unwrap();
    // The cluster changed (its operator reported the pause): listed again.
    world.cluster["metadata"]["resourceVersion"] = json!("8");
    let reconcile = wait(&world, &ctx);
    world.serve(&mut api).await;
    expect_report_alone(&mut api, &world.restore).await;
    reconcile.await.unwrap();
    // Its spec changed: listed again.
    world.restore["metadata"]["generation"] = json!(2);
    let reconcile = wait(&world, &ctx);
    world.serve(&mut api).await;
    expect_report_alone(&mut api, &world.restore).await;
    reconcile.await.unwrap();
    api.expect_silence().await;
}

#[tokio::test]
async fn every_fetch_verified_the_snapshot_is_recorded_before_an_old_member_stops() {
    let (ctx, mut api) = context();
    let world = restoring([
        json!({"phase": "Succeeded"}),
        json!({"phase": "Succeeded"}),
        json!({"phase": "Succeeded"}),
    ]);
    let reconcile = run(world.restore.clone(), &ctx);
    world.serve(&mut api).await;
    for member in ["c-3", "c-4", "c-5"] {
        let log = api
            .expect_text(&format!("{NS}/pods/{member}-restore/log"), FETCH_LOG)
            .await;
        assert!(log.query.contains("container=fetch"), "{}", log.query);
        let log = api
            .expect_text(&format!("{NS}/pods/{member}-restore/log"), "")
            .await;
        assert!(log.query.contains("container=restore"), "{}", log.query);
    }
    // Intent first: the cluster is no longer "paused by the restore", so any later failure
    // (or a later restore's) leaves it paused.
    let cluster = held_cluster();
    let intent = api
        .expect_call(Method::PATCH, CLUSTER, StatusCode::OK, |_| cluster)
        .await;
    assert_eq!(
        intent.body,
        json!({"metadata": {"annotations": {"etcd.database.coreos.com/paused-by-restore": null}}})
    );
    let record = expect_records(&mut api, &world.restore).await;
    assert_eq!(
        record.body["status"]["snapshot"],
        json!({"revision": 500, "dbBytes": 1048576, "sha256": "ab"})
    );
    let status = expect_report(&mut api, &world.restore).await;
    assert_eq!(status["phase"], "Restoring");
    reconcile.await.unwrap();
    api.expect_silence().await;

    // Recorded: now old c-0 stops (its claim keeps the data).
    let world = verified_world();
    let reconcile = run(world.restore.clone(), &ctx);
    world.serve(&mut api).await;
    api.expect_call(
        Method::DELETE,
        &format!("{NS}/pods/c-0"),
        StatusCode::OK,
        |_| own_pod("c-0", json!({})),
    )
    .await;
    expect_report(&mut api, &world.restore).await;
    reconcile.await.unwrap();
    api.expect_silence().await;
}

/// EtcdBackup `nightly` whose newest verified backup is `record`.
fn nightly(record: Value) -> Value {
    json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdBackup",
        "metadata": {"name": "nightly", "namespace": "ns", "uid": "b-uid"},
        "spec": {"etcdEndpoints": ["http://c-client:2379"], "storageType": "S3",
                 "s3": {"path": "bucket/etcd.backup", "awsSecret": "aws", "endpoint": "http://s3:3900"}},
        "status": {"succeeded": true, "lastBackup": record},
    })
}

#[tokio::test]
async fn a_backup_taken_during_a_backup_ref_restore_changes_neither_its_object_nor_what_it_expects()
{
    let (ctx, mut api) = context();
    let pinned = json!({"sha256": "ab", "revision": 500});
    let mut world = restoring([
        json!({"phase": "Succeeded"}),
        json!({"phase": "Succeeded"}),
        json!({"phase": "Succeeded"}),
    ]);
    world.restore["spec"] = json!({"etcdCluster": {"name": "c"}, "backupStorageType": "S3",
        "backupRef": {"name": "nightly"}});
    world.restore["status"]["source"] = json!("s3://bucket/etcd.backup");
    world.restore["status"]["expectedBackup"] = pinned.clone();
    // Meanwhile the EtcdBackup took a newer backup.
    let newer = nightly(
        json!({"objectKey": "s3://bucket/etcd-newer.backup", "sha256": "cd",
        "etcdRevision": 600}),
    );
    let reconcile = run(world.restore.clone(), &ctx);
    world.serve_with_backup(&mut api, newer).await;
    for member in ["c-3", "c-4", "c-5"] {
        api.expect_text(&format!("{NS}/pods/{member}-restore/log"), FETCH_LOG)
            .await;
        api.expect_text(&format!("{NS}/pods/{member}-restore/log"), "")
            .await;
    }
    // The fetches verified the pinned backup: recorded, with the pinned object and record.
    let cluster = held_cluster();
    api.expect_call(Method::PATCH, CLUSTER, StatusCode::OK, |_| cluster)
        .await;
    let record = expect_records(&mut api, &world.restore).await;
    assert_eq!(record.body["status"]["source"], "s3://bucket/etcd.backup");
    assert_eq!(record.body["status"]["expectedBackup"], pinned);
    expect_report(&mut api, &world.restore).await;
    reconcile.await.unwrap();
    api.expect_silence().await;
}

#[tokio::test]
async fn old_claims_are_detached_not_deleted_once_their_pods_are_gone() {
    let (ctx, mut api) = context();
    let mut world = verified_world();
    world.member_pods = vec![];
    let reconcile = run(world.restore.clone(), &ctx);
    world.serve(&mut api).await;
    let path = format!("{NS}/persistentvolumeclaims/c-0");
    let mut owned = claim("c-0");
    owned["metadata"]["ownerReferences"] = json!([{"apiVersion": "etcd.database.coreos.com/v1beta2",
        "kind": "EtcdCluster", "name": "c", "uid": "c-uid", "controller": true}]);
    api.expect_call(Method::GET, &path, StatusCode::OK, |_| owned)
        .await;
    let detach = api
        .expect_call(Method::PATCH, &path, StatusCode::OK, |_| claim("c-0"))
        .await;
    let meta = &detach.body["metadata"];
    assert_eq!(meta["labels"].get("etcd_cluster"), Some(&Value::Null));
    assert_eq!(
        meta["labels"]["etcd.database.coreos.com/detached-from"],
        "c"
    );
    assert_eq!(
        meta["ownerReferences"],
        json!([]),
        "the cluster no longer owns it"
    );
    let status = expect_report(&mut api, &world.restore).await;
    assert_eq!(status["conditions"][1]["reason"], "DetachingOldVolumes");
    reconcile.await.unwrap();
    api.expect_silence().await;
}

#[tokio::test]
async fn the_restored_claims_join_the_cluster_once_the_old_ones_are_detached() {
    let (ctx, mut api) = context();
    let mut world = verified_world();
    world.member_pods = vec![];
    world.claims = vec![];
    world.others = vec![detached_claim("c-0")];
    let reconcile = run(world.restore.clone(), &ctx);
    world.serve(&mut api).await;
    for member in ["c-3", "c-4", "c-5"] {
        let path = format!("{NS}/persistentvolumeclaims/{member}");
        let join = api
            .expect_call(Method::PATCH, &path, StatusCode::OK, |_| claim(member))
            .await;
        let labels = &join.body["metadata"]["labels"];
        assert_eq!(labels["app"], "etcd");
        assert_eq!(labels["etcd_cluster"], "c");
        assert_eq!(labels.get("etcd_restore"), Some(&Value::Null), "{labels}");
        assert_eq!(join.body["metadata"]["ownerReferences"][0]["uid"], "c-uid");
    }
    let status = expect_report(&mut api, &world.restore).await;
    assert_eq!(status["conditions"][1]["reason"], "JoiningVolumes");
    reconcile.await.unwrap();
    api.expect_silence().await;
}

#[tokio::test]
async fn a_finished_restore_woken_by_its_members_asks_nothing() {
    // Member pods of a restored cluster keep changing (readiness, scaling) and wake the
    // restore of the same name; once it has finished, that costs no API call.
    let (ctx, mut api) = context();
    for phase in ["Succeeded", "Failed"] {
        let finished = restore(recorded(json!({"phase": phase})));
        let reconcile = run(finished, &ctx);
        // The reconcile ends first (a call would go unanswered and keep it waiting), then
        // nothing is left asked.
        let done = tokio::time::timeout(std::time::Duration::from_secs(5), reconcile)
            .await
            .expect("the reconcile ended without an API call")
            .unwrap();
        assert_eq!(done, Action::await_change(), "{phase}");
        api.expect_silence().await;
    }
}

/// A running cluster: first it is paused and held (the restore's UID), nothing else written;
/// resumed before its operator reported the pause, the restore only waits.
#[tokio::test]
async fn a_running_cluster_is_paused_and_held_before_anything_else() {
    let (ctx, mut api) = context();
    let mut running = running_cluster();
    running["status"]["controlPaused"] = json!(false);
    let world = World {
        restore: restore(recorded(json!({}))),
        cluster: running,
        member_pods: vec![],
        claims: vec![claim("c-0"), claim("c-1"), claim("c-2")],
        others: vec![],
        staged: vec![],
        own_pods: vec![],
    };
    let reconcile = run(world.restore.clone(), &ctx);
    world.serve(&mut api).await;
    // First the finalizer: deleting the restore from now on lets go of the cluster first.
    let restore = world.restore.clone();
    let finalizer = api
        .expect_call(Method::PATCH, RESTORE, StatusCode::OK, |_| restore)
        .await;
    assert_eq!(
        finalizer.body["metadata"]["finalizers"],
        json!(["etcd.database.coreos.com/restore-release"])
    );
    let cluster = held_cluster();
    let pause = api
        .expect_call(Method::PATCH, CLUSTER, StatusCode::OK, |_| cluster)
        .await;
    assert_eq!(
        pause.body,
        json!({"metadata": {"annotations": {"etcd.database.coreos.com/restore": "r-uid",
                                            "etcd.database.coreos.com/paused-by-restore": "true",
                                            "etcd.database.coreos.com/abandoned-restore": null}},
               "spec": {"paused": true}})
    );
    let status = expect_report_of(&mut api, &world.restore, "Normal", "PausingCluster").await;
    assert_eq!(status["phase"], "Preparing");
    assert!(status.get("plan").is_none(), "{status}");
    reconcile.await.unwrap();
    api.expect_silence().await;

    // Paused and held, but its operator has not reported the pause: no write but the status.
    let mut not_seen = held_cluster();
    not_seen["status"]["controlPaused"] = json!(false);
    let world = World {
        cluster: not_seen,
        ..world
    };
    let reconcile = run(world.restore.clone(), &ctx);
    world.serve(&mut api).await;
    let status = expect_report_alone(&mut api, &world.restore).await;
    assert_eq!(status["conditions"][1]["reason"], "Waiting", "{status}");
    reconcile.await.unwrap();
    api.expect_silence().await;
}

/// A cluster version the restore tool cannot be chosen for fails the restore before the
/// cluster is paused: the only writes are the restore's status and a Warning.
#[tokio::test]
async fn an_unparsable_cluster_version_fails_without_touching_the_cluster() {
    let (ctx, mut api) = context();
    let mut running = running_cluster();
    running["spec"]["version"] = json!("3.5");
    let world = World {
        restore: restore(recorded(json!({}))),
        cluster: running,
        member_pods: vec![],
        claims: vec![claim("c-0")],
        others: vec![],
        staged: vec![],
        own_pods: vec![],
    };
    let reconcile = run(world.restore.clone(), &ctx);
    world.serve(&mut api).await;
    let status = expect_report_of(&mut api, &world.restore, "Warning", "InvalidVersion").await;
    assert_eq!(status["phase"], "Failed");
    let reason = status["reason"].as_str().unwrap();
    assert!(reason.starts_with("InvalidVersion: "), "{reason}");
    reconcile.await.unwrap();
    api.expect_silence().await;
}

/// A tenant's restore never reads S3 with the node's or the operator's identity: an awsSecret
/// without keys, or one that sources credentials elsewhere, fails the restore before the
/// cluster is touched, with the backup operator's rules and words.
#[tokio::test]
async fn a_restore_without_its_own_keys_fails_before_touching_the_cluster() {
    let role = "[default]\nrole_arn = arn:aws:iam::1:role/all-backups\ncredential_source = Ec2InstanceMetadata\n";
    let cases = [
        (
            aws_secret(&[("config", role)]),
            "does not lend its own AWS identity",
        ),
        (
            aws_secret(&[("credentials", STATIC_KEYS), ("config", role)]),
            "sets \"role_arn\"",
        ),
    ];
    for (secret, why) in cases {
        let (ctx, mut api) = context();
        let world = World {
            restore: restore(json!(null)),
            cluster: running_cluster(),
            member_pods: vec![],
            claims: vec![claim("c-0")],
            others: vec![],
            staged: vec![],
            own_pods: vec![],
        };
        let reconcile = run(world.restore.clone(), &ctx);
        world.serve_with_aws(&mut api, secret).await;
        let status = expect_report_of(&mut api, &world.restore, "Warning", "BadSource").await;
        assert_eq!(status["phase"], "Failed");
        let reason = status["reason"].as_str().unwrap();
        assert!(reason.contains(why), "{reason}");
        reconcile.await.unwrap();
        // Nothing else: the running cluster was neither paused nor annotated.
        api.expect_silence().await;
    }
}

/// The cluster given back as it was: the lock and the pause the restore made go.
async fn expect_given_back(api: &mut MockApi) {
    let released = running_cluster();
    let release = api
        .expect_call(Method::PATCH, CLUSTER, StatusCode::OK, |_| released)
        .await;
    assert_eq!(
        release.body,
        json!({"metadata": {"annotations": {"etcd.database.coreos.com/restore": null,
                                            "etcd.database.coreos.com/paused-by-restore": null}},
               "spec": {"paused": false}})
    );
}

/// A restore being deleted (the finalizer on it), with `status` as recorded.
fn deleted_restore(status: Value) -> Value {
    let mut deleted = restore(status);
    deleted["metadata"]["deletionTimestamp"] = json!("2026-11-24T03:05:00Z");
    deleted["metadata"]["finalizers"] = json!(["etcd.database.coreos.com/restore-release"]);
    deleted["metadata"]["resourceVersion"] = json!("41");
    deleted
}

/// Deleting the restore (a cancel) reads it and its cluster fresh, then lets go.
async fn expect_deletion_read(api: &mut MockApi, restore: &Value, cluster: &Value) {
    let (restore, cluster) = (restore.clone(), cluster.clone());
    api.expect_call(
        Method::GET,
        &format!("{RESTORE}/status"),
        StatusCode::OK,
        |_| restore,
    )
    .await;
    api.expect_call(Method::GET, CLUSTER, StatusCode::OK, |_| cluster)
        .await;
}

/// Then the finalizer goes, on the restore read again (its resource version).
async fn expect_finalizer_removed(api: &mut MockApi, restore: &Value) {
    let again = restore.clone();
    api.expect_call(Method::GET, RESTORE, StatusCode::OK, |_| again)
        .await;
    let restore = restore.clone();
    let call = api
        .expect_call(Method::PATCH, RESTORE, StatusCode::OK, |_| restore)
        .await;
    assert_eq!(
        call.body["metadata"],
        json!({"finalizers": [], "resourceVersion": "41"})
    );
}

/// Deleted before any member was touched: the cluster is given back as it was (unpaused, as
/// the restore paused it), then the finalizer goes.
#[tokio::test]
async fn a_restore_deleted_before_touching_anything_gives_the_cluster_back() {
    let (ctx, mut api) = context();
    let deleted = deleted_restore(recorded(json!({"plan": plan(None)})));
    let reconcile = run(deleted.clone(), &ctx);
    expect_deletion_read(&mut api, &deleted, &held_cluster()).await;
    expect_given_back(&mut api).await;
    expect_finalizer_removed(&mut api, &deleted).await;
    reconcile.await.unwrap();
    api.expect_silence().await;
}

/// Deleted after it began replacing members: nothing is deleted, the cluster stays paused,
/// marked as held by the abandoned restore (its lock dropped for a new one), a Warning names
/// the claims, then the finalizer goes.
#[tokio::test]
async fn a_restore_deleted_after_touching_members_leaves_the_cluster_held_and_says_so() {
    let (ctx, mut api) = context();
    let snapshot = json!({"revision": 500, "dbBytes": 1048576, "sha256": "ab"});
    let deleted = deleted_restore(recorded(json!({"plan": plan(None), "snapshot": snapshot})));
    let reconcile = run(deleted.clone(), &ctx);
    let mut held = held_cluster();
    held["metadata"]["annotations"] = json!({"etcd.database.coreos.com/restore": "r-uid"});
    expect_deletion_read(&mut api, &deleted, &held).await;
    let abandon = api
        .expect_call(Method::PATCH, CLUSTER, StatusCode::OK, |_| held)
        .await;
    assert_eq!(
        abandon.body,
        json!({"metadata": {"annotations": {"etcd.database.coreos.com/restore": null,
                                            "etcd.database.coreos.com/paused-by-restore": null,
                                            "etcd.database.coreos.com/abandoned-restore": "c"}},
               "spec": {"paused": true}})
    );
    let event = api.expect_event("ns").await;
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["reason"], "RestoreAbandoned");
    assert_eq!(event["regarding"]["kind"], "EtcdCluster");
    let note = event["note"].as_str().unwrap();
    assert!(
        note.contains(r#"["c-0"] (detached)"#) && note.contains("spec.paused: false"),
        "{note}"
    );
    expect_finalizer_removed(&mut api, &deleted).await;
    reconcile.await.unwrap();
    api.expect_silence().await;
}

/// Issue: a restore pod refused by the API server (Pod Security, a quota) looped in the error
/// policy with the restore still Restoring. Now the refusal is said (a Warning with the
/// server's words) and recorded as the restore's failure before anything of the cluster was
/// touched: the next reconcile discards what the restore made and gives the cluster back.
#[tokio::test]
async fn a_restore_pod_the_api_server_refuses_fails_the_restore_with_its_words() {
    let (ctx, mut api) = context();
    let world = planned_world();
    let reconcile = run(world.restore.clone(), &ctx);
    world.serve(&mut api).await;
    api.expect_call(
        Method::POST,
        &format!("{NS}/persistentvolumeclaims"),
        StatusCode::CREATED,
        |c| c.body.clone(),
    )
    .await;
    let forbidden = "pods \"c-3-restore\" is forbidden: exceeded quota: pods";
    let refusal = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "reason": "Forbidden", "code": 403, "message": forbidden});
    api.expect_call(
        Method::POST,
        &format!("{NS}/pods"),
        StatusCode::FORBIDDEN,
        |_| refusal,
    )
    .await;
    let event = api.expect_event("ns").await;
    assert_eq!(
        (event["type"].as_str(), event["reason"].as_str()),
        (Some("Warning"), Some("Refused"))
    );
    assert!(
        event["note"].as_str().unwrap().contains("exceeded quota"),
        "{event}"
    );
    let status = expect_records(&mut api, &world.restore).await.body["status"].clone();
    let reason = status["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("Refused: Pod c-3-restore refused by the API server: ")
            && reason.contains("exceeded quota")
            && reason.ends_with("no member or volume of the cluster was touched"),
        "{reason}"
    );
    reconcile.await.unwrap();
    api.expect_silence().await;
}

fn test_key() -> ProofKey {
    ProofKey::new(vec![3; 32], Some("2026-01-01T00:00:00Z".parse().unwrap()))
}

/// A member pod of the cluster made by the operators (its proof of origin fits), with `status`.
fn member_pod(name: &str, status: Value) -> Value {
    let uid = format!("uid-{name}");
    json!({"metadata": {"name": name, "namespace": "ns", "uid": uid,
                        "creationTimestamp": "2026-11-26T00:00:00Z",
                        "labels": {"app": "etcd", "etcd_cluster": "c", "etcd_node": name},
                        "annotations": {PROOF_ANNOTATION: test_key().proof("ns", name, &uid)}},
           "status": status})
}

/// An old member, running, made by an operator from before proofs of origin.
fn old_member(name: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                        "creationTimestamp": "2025-06-01T00:00:00Z",
                        "labels": {"app": "etcd", "etcd_cluster": "c", "etcd_node": name}},
           "status": {"phase": "Running"}})
}

fn ready_member(name: &str) -> Value {
    member_pod(
        name,
        json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}),
    )
}

/// The snapshot verified, the old member stopped and its claim detached, the restored claims
/// joined and every member started: c-3 and c-5 ready, c-4 as `c4` says.
fn started_world(c4: Value) -> World {
    World {
        member_pods: vec![
            ready_member("c-3"),
            member_pod("c-4", c4),
            ready_member("c-5"),
        ],
        claims: vec![claim("c-3"), claim("c-4"), claim("c-5")],
        others: vec![detached_claim("c-0")],
        staged: vec![],
        ..verified_world()
    }
}

#[tokio::test]
async fn an_evicted_member_pod_is_made_again_on_its_restored_claim() {
    let (ctx, mut api) = context();
    let world = started_world(json!({"phase": "Failed", "reason": "Evicted",
                                     "message": "The node was low on resource: memory."}));
    let reconcile = run(world.restore.clone(), &ctx);
    world.serve(&mut api).await;
    // Only the pod goes: its claim, which holds the restored data, stays.
    api.expect_call(
        Method::DELETE,
        &format!("{NS}/pods/c-4"),
        StatusCode::OK,
        |_| json!({}),
    )
    .await;
    let status = expect_report_of(&mut api, &world.restore, "Normal", "RestartingMembers").await;
    assert_eq!(status["phase"], "Verifying");
    reconcile.await.unwrap();
    api.expect_silence().await;

    // Gone: made again from the cluster's own pod template.
    let world = started_world(json!({}));
    let world = World {
        member_pods: vec![ready_member("c-3"), ready_member("c-5")],
        ..world
    };
    let reconcile = run(world.restore.clone(), &ctx);
    world.serve(&mut api).await;
    for service in ["c", "c-client"] {
        let path = format!("{NS}/services/{service}");
        api.expect_call(Method::PATCH, &path, StatusCode::OK, |_| json!({}))
            .await;
    }
    let pod = api
        .expect_call(
            Method::POST,
            &format!("{NS}/pods"),
            StatusCode::CREATED,
            |call| {
                let mut made = call.body.clone();
                made["metadata"]["uid"] = json!("new-uid");
                made
            },
        )
        .await;
    assert_eq!(pod.body["metadata"]["name"], "c-4");
    // Made gated, then proven and let go: the EtcdCluster operator takes it for a member.
    assert_eq!(
        pod.body["spec"]["schedulingGates"][0]["name"],
        UNPROVEN_GATE
    );
    let proven = api
        .expect_call(
            Method::PATCH,
            &format!("{NS}/pods/c-4"),
            StatusCode::OK,
            |call| call.body.clone(),
        )
        .await;
    assert_eq!(
        proven.body["metadata"]["annotations"][PROOF_ANNOTATION],
        test_key().proof("ns", "c-4", "new-uid")
    );
    expect_report_of(&mut api, &world.restore, "Normal", "StartingMembers").await;
    reconcile.await.unwrap();
    api.expect_silence().await;
}

/// Issue 28 point 5: a running pod named like a restored member that the operators did not
/// make is neither counted as the member nor taken for the one the restore makes when its
/// creation meets a 409: a Warning names it, and nothing else is done.
#[tokio::test]
async fn a_pod_that_passes_for_a_restored_member_is_refused() {
    let (ctx, mut api) = context();
    let mut fake = member_pod(
        "c-4",
        json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}),
    );
    fake["metadata"]["annotations"][PROOF_ANNOTATION] = json!("forged");
    let world = started_world(json!({}));
    let world = World {
        member_pods: vec![ready_member("c-3"), fake.clone(), ready_member("c-5")],
        ..world
    };
    let reconcile = {
        let restore: EtcdRestore = serde_json::from_value(world.restore.clone()).unwrap();
        let ctx = ctx.clone();
        tokio::spawn(async move { controller::reconcile(guarded(restore), ctx).await })
    };
    world.serve(&mut api).await;
    for service in ["c", "c-client"] {
        let path = format!("{NS}/services/{service}");
        api.expect_call(Method::PATCH, &path, StatusCode::OK, |_| json!({}))
            .await;
    }
    api.expect_call(
        Method::POST,
        &format!("{NS}/pods"),
        StatusCode::CONFLICT,
        |_| {
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 409,
               "reason": "AlreadyExists", "message": "pods \"c-4\" already exists"})
        },
    )
    .await;
    api.expect_call(
        Method::GET,
        &format!("{NS}/pods/c-4"),
        StatusCode::OK,
        |_| fake,
    )
    .await;
    let warning = api.expect_event("ns").await;
    assert_eq!(
        (warning["type"].as_str(), warning["reason"].as_str()),
        (Some("Warning"), Some("ForeignPod")),
        "{warning}"
    );
    assert!(
        warning["note"].as_str().unwrap().contains("pod c-4"),
        "{warning}"
    );
    expect_report_of(&mut api, &world.restore, "Normal", "StartingMembers").await;
    let result = reconcile.await.unwrap();
    assert!(
        result
            .as_ref()
            .is_err_and(|e| e.to_string().contains("no proof of origin")),
        "{:?}",
        result.map(|_| ())
    );
    api.expect_silence().await;
}

#[tokio::test]
async fn a_crash_looping_member_is_reported_in_a_warning_and_waited_for() {
    let (ctx, mut api) = context();
    let world = started_world(json!({"phase": "Running", "containerStatuses": [{
        "name": "etcd", "image": "etcd", "imageID": "", "ready": false, "restartCount": 5,
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 1m20s"}},
        "lastState": {"terminated": {"exitCode": 1}}}]}));
    let reconcile = run(world.restore.clone(), &ctx);
    world.serve(&mut api).await;
    // Nothing is touched: the status and a Warning only.
    let status = expect_report_of(&mut api, &world.restore, "Warning", "MembersUnhealthy").await;
    assert_eq!(status["phase"], "Verifying");
    let message = status["conditions"][1]["message"].as_str().unwrap();
    assert!(
        message.contains("c-4: etcd: CrashLoopBackOff, last exit 1: back-off 1m20s"),
        "{message}"
    );
    reconcile.await.unwrap();
    api.expect_silence().await;
}

/// Under `oldVolumes: Delete`, only claims this restore detached go: a planned one found
/// detached by another restore (its uid on it) is kept.
#[tokio::test]
async fn only_claims_this_restore_detached_are_deleted() {
    let (ctx, mut api) = context();
    let mut world = handed_over(running_cluster());
    world.others[0]["metadata"]["annotations"]["etcd.database.coreos.com/restore"] =
        json!("another-uid");
    let reconcile = run(world.restore.clone(), &ctx);
    world.serve(&mut api).await;
    let status = expect_success(&mut api, &world.restore).await;
    assert_eq!(status["succeeded"], true);
    reconcile.await.unwrap();
    api.expect_silence().await;
}

#[tokio::test]
async fn failing_reconciles_back_off_per_restore_and_start_over_after_a_success() {
    let (ctx, mut api) = context();
    let finished = restore(json!({"phase": "Succeeded"}));
    let failing = guarded(serde_json::from_value(finished.clone()).unwrap());
    let error = context::Error::Kube(kube::Error::Api(Box::new(kube::core::Status::failure(
        "etcdrestores \"c\" is forbidden",
        "Forbidden",
    ))));
    let retry = |restore: &Arc<DeserializeGuard<EtcdRestore>>| {
        mock_api::requeue_seconds(&controller::error_policy(
            restore.clone(),
            &error,
            ctx.clone(),
        ))
    };
    mock_api::assert_backs_off(|| retry(&failing));
    // Another restore backs off on its own.
    let mut other = finished.clone();
    other["metadata"]["uid"] = json!("r-uid-2");
    assert!(retry(&guarded(serde_json::from_value(other).unwrap())) <= 2.0);
    // A reconcile that succeeds (a finished restore: nothing to do) starts this one over.
    let task = run(finished, &ctx);
    assert_eq!(task.await.unwrap(), Action::await_change());
    api.expect_silence().await;
    assert!(retry(&failing) <= 2.0);
}

/// A reconcile of `world` whose call `method path` the API server refuses (500): the reconcile
/// fails and makes no further call (a status write it made instead would wait for its answer,
/// and the test fails on the timeout).
async fn refused_once(
    world: &World,
    ctx: &Arc<Context>,
    api: &mut MockApi,
    method: Method,
    path: &str,
) {
    let restore: EtcdRestore = serde_json::from_value(world.restore.clone()).unwrap();
    let ctx = ctx.clone();
    let reconcile = tokio::spawn(async move { controller::reconcile(guarded(restore), ctx).await });
    world.serve(api).await;
    let refusal = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "the server is restarting", "reason": "InternalError", "code": 500});
    api.expect_call(method, path, StatusCode::INTERNAL_SERVER_ERROR, |_| refusal)
        .await;
    tokio::time::timeout(std::time::Duration::from_secs(10), reconcile)
        .await
        .expect("the reconcile made a call after the refused one")
        .unwrap()
        .expect_err("the refused call fails the reconcile");
    api.expect_silence().await;
}

#[tokio::test]
async fn a_release_that_fails_is_retried_not_recorded_as_failed() {
    let (ctx, mut api) = context();
    // The failed fetch's cause is recorded and the restore's own pods and claims are gone:
    // what is left is giving the cluster back.
    let reason = "BackupInvalid: member c-4's fetch: sha256 trailer mismatch";
    let world = World {
        restore: restore(recorded(json!({"plan": plan(None), "revisionBumped": true,
            "phase": "Restoring", "reason": reason}))),
        staged: vec![],
        own_pods: vec![],
        ..restoring([
            json!({"phase": "Running"}),
            json!({"phase": "Running"}),
            json!({"phase": "Running"}),
        ])
    };
    // The release is refused; nothing is recorded: the cluster is still held, so the restore
    // must not look finished.
    refused_once(&world, &ctx, &mut api, Method::PATCH, CLUSTER).await;

    // The next reconcile releases it, then records the failure.
    let reconcile = run(world.restore.clone(), &ctx);
    world.serve(&mut api).await;
    let cluster = held_cluster();
    api.expect_call(Method::PATCH, CLUSTER, StatusCode::OK, |_| cluster)
        .await;
    let status = expect_report_alone(&mut api, &world.restore).await;
    assert_eq!(status["phase"], "Failed");
    api.expect(StatusCode::OK, |_| json!({})).await;
    reconcile.await.unwrap();
    api.expect_silence().await;
}

#[tokio::test]
async fn a_success_whose_clean_up_fails_is_retried_not_recorded() {
    let (ctx, mut api) = context();
    let world = World {
        others: vec![],
        ..handed_over(running_cluster())
    };
    // The run-once pods (each holds a copy of the snapshot) cannot be deleted yet.
    let pod = format!("{NS}/pods/c-3-restore");
    refused_once(&world, &ctx, &mut api, Method::DELETE, &pod).await;

    // Retried: the pods go, then the success is recorded.
    let reconcile = run(world.restore.clone(), &ctx);
    world.serve(&mut api).await;
    let status = expect_success(&mut api, &world.restore).await;
    assert_eq!(status["phase"], "Succeeded");
    reconcile.await.unwrap();
    api.expect_silence().await;
}

/// A restore this operator cannot read (a field of a newer version, after a downgrade) is
/// handed over by the watch as such: a Warning that says why and nothing else (its records are
/// not rewritten); being deleted, it keeps its finalizer and the Warning says what to do.
#[tokio::test]
async fn a_restore_that_cannot_be_read_gets_a_warning_and_nothing_else() {
    for deleting in [false, true] {
        let (ctx, mut api) = context();
        let mut raw = restore(json!({}));
        raw["spec"]["oldVolumes"] = json!("Shred");
        if deleting {
            raw["metadata"]["deletionTimestamp"] = json!("2026-11-30T00:00:00Z");
            raw["metadata"]["finalizers"] = json!(["etcd.database.coreos.com/restore-release"]);
        }
        let unreadable: DeserializeGuard<EtcdRestore> = serde_json::from_value(raw).unwrap();
        assert!(unreadable.0.is_err());
        let task = tokio::spawn(controller::reconcile(Arc::new(unreadable), ctx.clone()));
        let event = api.expect_event("ns").await;
        assert_eq!(event["type"], "Warning");
        assert_eq!(event["reason"], "InvalidObject");
        let note = event["note"].as_str().unwrap();
        assert!(note.contains("Shred"), "{note}");
        assert_eq!(note.contains("its deletion waits"), deleting, "{note}");
        assert_eq!(task.await.unwrap().unwrap(), Action::await_change());
        api.expect_silence().await;
    }
}
