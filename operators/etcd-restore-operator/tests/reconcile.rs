//! Reconcile against a mock API server (`testbed::mock_api`): the calls, their order and their
//! bodies, for a restore resumed at each step after an operator restart. The order is the point:
//! the plan and the hand-over are recorded before they are acted on. Real pods are in `e2e.rs`.

use std::sync::Arc;

use backup_api::EtcdRestore;
use etcd_restore_operator::controller::{self, Context};
use etcd_restore_operator::metrics::Metrics;
use http::{Method, StatusCode};
use kube::runtime::controller::Action;
use serde_json::{Value, json};
use testbed::mock_api::{self, MockApi};

const NS: &str = "/api/v1/namespaces/ns";
const RESTORE: &str = "/apis/etcd.database.coreos.com/v1beta2/namespaces/ns/etcdrestores/c";
const CLUSTER: &str = "/apis/etcd.database.coreos.com/v1beta2/namespaces/ns/etcdclusters/c";

fn context() -> (Arc<Context>, MockApi) {
    let (client, api) = mock_api::pair();
    let metrics = Arc::new(Metrics::default());
    let ctx = Context::new(
        client,
        Some("test-pod".into()),
        metrics,
        "backup:dev".into(),
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

/// The cluster, paused and held by the restore, its operator having reported the pause.
fn held_cluster() -> Value {
    json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "metadata": {"name": "c", "namespace": "ns", "uid": "c-uid", "generation": 4,
                     "annotations": {"etcd.database.coreos.com/restore": "r-uid"}},
        "spec": {"size": 3, "version": "3.5.16", "repository": "localhost/etcd", "paused": true,
                 "pod": {"persistentVolumeClaimSpec": {"accessModes": ["ReadWriteOnce"],
                         "resources": {"requests": {"storage": "1Gi"}}}}},
        "status": {"controlPaused": true, "observedGeneration": 4, "phase": "Running"},
    })
}

fn recorded(extra: Value) -> Value {
    let mut status = json!({
        "phase": "Preparing", "source": "s3://bucket/etcd.backup",
        "snapshot": {"revision": 500, "sha256": "ab"},
        "startTime": "2026-11-24T03:00:00Z",
    });
    for (k, v) in extra.as_object().unwrap() {
        status[k] = v.clone();
    }
    status
}

fn plan(handed_over: Option<bool>) -> Value {
    json!({"members": ["c-3", "c-4", "c-5"], "token": "restore-r-uid", "version": "3.5.16",
           "detachedClaims": ["c-0"], "handedOver": handed_over})
}

fn claim(name: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "ns", "labels": {"app": "etcd", "etcd_cluster": "c"}},
           "spec": {"accessModes": ["ReadWriteOnce"]}})
}

fn finished_pod(name: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "ns",
                        "ownerReferences": [{"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdRestore",
                                             "name": "c", "uid": "r-uid", "controller": true}]},
           "status": {"phase": "Succeeded"}})
}

/// What one reconcile reads before it acts, answered from the given world.
struct World {
    restore: Value,
    cluster: Value,
    member_pods: Vec<Value>,
    claims: Vec<Value>,
    detached: Vec<Value>,
    own_pods: Vec<Value>,
}

impl World {
    async fn serve(&self, api: &mut MockApi) {
        let restore = self.restore.clone();
        api.expect_call(
            Method::GET,
            &format!("{RESTORE}/status"),
            StatusCode::OK,
            |_| restore,
        )
        .await;
        api.expect_call(
            Method::GET,
            &format!("{NS}/secrets/aws"),
            StatusCode::OK,
            |_| json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "aws"}}),
        )
        .await;
        let cluster = self.cluster.clone();
        api.expect_call(Method::GET, CLUSTER, StatusCode::OK, |_| cluster)
            .await;
        let pods = api
            .expect_list(&format!("{NS}/pods"), self.member_pods.clone())
            .await;
        assert!(pods.query.contains("etcd_cluster%3Dc"), "{}", pods.query);
        api.expect_list(&format!("{NS}/persistentvolumeclaims"), self.claims.clone())
            .await;
        let detached = api
            .expect_list(
                &format!("{NS}/persistentvolumeclaims"),
                self.detached.clone(),
            )
            .await;
        assert!(
            detached.query.contains("detached-from"),
            "{}",
            detached.query
        );
        let own = api
            .expect_list(&format!("{NS}/pods"), self.own_pods.clone())
            .await;
        assert!(own.query.contains("etcd_restore%3Dc"), "{}", own.query);
    }
}

fn run(restore: Value, ctx: &Arc<Context>) -> tokio::task::JoinHandle<Action> {
    let ctx = ctx.clone();
    let restore: EtcdRestore = serde_json::from_value(restore).unwrap();
    tokio::spawn(async move {
        controller::reconcile(Arc::new(restore), ctx)
            .await
            .expect("reconcile")
    })
}

/// The status report (merge patch) and the step's event.
async fn expect_report(api: &mut MockApi, restore: &Value) -> Value {
    let call = expect_status_patch(api, restore).await;
    api.expect_event("ns").await;
    call.body["status"].clone()
}

/// A merge patch of the restore's status, answered with the restore.
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
        restore: restore(recorded(json!({"plan": plan(Some(true)),
            "restoredRevision": 1000000500, "phase": "Verifying"}))),
        cluster,
        member_pods: vec![],
        claims: vec![claim("c-3"), claim("c-4"), claim("c-5")],
        detached: vec![claim("c-0")],
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
        detached: vec![],
        own_pods: vec![finished_pod("c-restore-verify")],
    };
    let reconcile = run(world.restore.clone(), &ctx);
    world.serve(&mut api).await;
    let call = expect_status_patch(&mut api, &world.restore).await;
    let plan = &call.body["status"]["plan"];
    assert_eq!(
        plan["members"],
        json!(["c-3", "c-4", "c-5"]),
        "above every name in use"
    );
    assert_eq!(plan["detachedClaims"], json!(["c-0", "c-2"]));
    assert_eq!(call.body["status"]["revisionBumped"], true);
    let status = expect_report(&mut api, &world.restore).await;
    assert_eq!(status["phase"], "Preparing");
    reconcile.await.unwrap();
    api.expect_silence().await;
}

#[tokio::test]
async fn resumed_with_a_plan_claims_and_restore_pods_are_made_for_every_member() {
    let (ctx, mut api) = context();
    let world = World {
        restore: restore(recorded(
            json!({"plan": plan(None), "revisionBumped": true}),
        )),
        cluster: held_cluster(),
        member_pods: vec![],
        claims: vec![],
        detached: vec![claim("c-0")],
        own_pods: vec![],
    };
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
    // Recorded again (idempotent), then the cluster's stale record cleared, then unpaused.
    let record = expect_status_patch(&mut api, &world.restore).await;
    assert_eq!(record.body["status"]["plan"]["handedOver"], true);
    let cluster = held_cluster();
    let clear = api
        .expect_call(
            Method::PATCH,
            &format!("{CLUSTER}/status"),
            StatusCode::OK,
            |_| cluster,
        )
        .await;
    assert_eq!(clear.body, json!({"status": {"membershipChange": null}}));
    let cluster = held_cluster();
    let unpause = api
        .expect_call(Method::PATCH, CLUSTER, StatusCode::OK, |_| cluster)
        .await;
    assert_eq!(unpause.body["spec"]["paused"], false);
    assert!(unpause.body["metadata"]["annotations"]["etcd.database.coreos.com/restore"].is_null());
    expect_report(&mut api, &world.restore).await;
    reconcile.await.unwrap();
    api.expect_silence().await;
}

#[tokio::test]
async fn after_the_hand_over_old_volumes_go_then_success() {
    let (ctx, mut api) = context();
    let mut cluster = held_cluster();
    cluster["spec"]["paused"] = json!(false);
    cluster["metadata"]["annotations"] = json!({});
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
        detached: vec![],
        ..world
    };
    let reconcile = run(world.restore.clone(), &ctx);
    world.serve(&mut api).await;
    // The run-once pods go (their scratch volumes hold a copy of the database each).
    for pod in [
        "c-3-restore",
        "c-4-restore",
        "c-5-restore",
        "c-restore-verify",
    ] {
        let path = format!("{NS}/pods/{pod}");
        api.expect_call(Method::DELETE, &path, StatusCode::OK, |_| finished_pod(pod))
            .await;
    }
    let status = expect_report(&mut api, &world.restore).await;
    assert_eq!(status["succeeded"], true);
    assert_eq!(status["phase"], "Succeeded");
    assert_eq!(status["conditions"][0]["type"], "Ready");
    assert_eq!(status["conditions"][0]["status"], "True");
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
        api.expect_silence().await;
        assert_eq!(reconcile.await.unwrap(), Action::await_change(), "{phase}");
    }
}
