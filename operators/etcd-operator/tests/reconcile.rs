//! Reconcile flows against a mock API server (`mock_api`): the calls, their order and
//! their bodies. The order is the point for crash safety: a membership change's intent is
//! recorded before anything is created. Real member pods are in `e2e.rs`.

use std::sync::Arc;
use std::time::Duration;

use etcd_api::EtcdCluster;
use etcd_members::claims::Claims;
use etcd_members::origin::{PROOF_ANNOTATION, ProofKey, UNPROVEN_GATE};
use etcd_operator::context::{self, Context};
use etcd_operator::controller;
use etcd_operator::metrics::Metrics;
use etcd_operator::scope::Scope;
use http::{Method, StatusCode};
use kube::core::DeserializeGuard;
use kube::runtime::controller::Action;
use mock_api::{self, MockApi};
use serde_json::{Value, json};

const CLUSTER: &str = "/apis/etcd.database.coreos.com/v1beta2/namespaces/ns/etcdclusters/c";

fn context(scope: Scope) -> (Arc<Context>, MockApi) {
    let (client, api) = mock_api::pair();
    let metrics = Arc::new(Metrics::default());
    // A claim cache whose watch never ran: every claim read is a list (the calls below).
    let (claims, _unfed) = Claims::new(client.clone(), Duration::ZERO);
    let ctx = Context::new(
        client,
        Some("test-pod".into()),
        metrics,
        scope,
        test_key(),
        claims,
    );
    (Arc::new(ctx), api)
}

fn test_key() -> ProofKey {
    ProofKey::new(vec![3; 32], Some("2026-01-01T00:00:00Z".parse().unwrap()))
}

/// An EtcdCluster as the API server returns it: 3 members with claims, on the bed's image.
fn cluster(spec: Value, status: Option<Value>) -> EtcdCluster {
    let mut spec_base = json!({
        "size": 3, "version": "3.5.33", "repository": "localhost/etcd",
        "pod": {"persistentVolumeClaimSpec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}},
    });
    for (k, v) in spec.as_object().unwrap() {
        spec_base[k] = v.clone();
    }
    let mut obj = json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "metadata": {"name": "c", "namespace": "ns", "uid": "uid-1", "generation": 2, "resourceVersion": "7"},
        "spec": spec_base,
    });
    if let Some(status) = status {
        obj["status"] = status;
    }
    serde_json::from_value(obj).unwrap()
}

/// A cluster as the watch hands it over: readable.
fn guarded(cluster: EtcdCluster) -> Arc<DeserializeGuard<EtcdCluster>> {
    Arc::new(DeserializeGuard(Ok(cluster)))
}

fn run(cluster: EtcdCluster, ctx: &Arc<Context>) -> tokio::task::JoinHandle<Action> {
    let ctx = ctx.clone();
    tokio::spawn(async move {
        controller::reconcile(guarded(cluster), ctx)
            .await
            .expect("reconcile")
    })
}

/// The cluster read fresh, as the API server has it now.
async fn expect_fresh_read(api: &mut MockApi, obj: &Value) {
    let obj = obj.clone();
    api.expect_call(
        Method::GET,
        &format!("{CLUSTER}/status"),
        StatusCode::OK,
        |_| obj,
    )
    .await;
}

/// The cluster read fresh (its recorded change), the Services and the disruption budget,
/// then the (empty) pod and claim lists.
async fn expect_observation_of_an_empty_world(api: &mut MockApi, obj: &EtcdCluster) {
    expect_fresh_read(api, &serde_json::to_value(obj).unwrap()).await;
    let peer = api
        .expect_apply("/api/v1/namespaces/ns/services/c", "etcd-operator")
        .await;
    assert_eq!(peer["spec"]["clusterIP"], "None");
    api.expect_apply("/api/v1/namespaces/ns/services/c-client", "etcd-operator")
        .await;
    let budget = api
        .expect_apply(
            "/apis/policy/v1/namespaces/ns/poddisruptionbudgets/c",
            "etcd-operator",
        )
        .await;
    assert_eq!(budget["spec"]["minAvailable"], 2);
    let pods = api
        .expect_list("/api/v1/namespaces/ns/pods", Vec::new())
        .await;
    assert!(pods.query.contains("etcd_cluster%3Dc"), "{}", pods.query);
    api.expect_list("/api/v1/namespaces/ns/persistentvolumeclaims", Vec::new())
        .await;
    // Which nodes are up (members on lost nodes are replaced).
    api.expect_list("/api/v1/nodes", Vec::new()).await;
}

/// The status, by server-side apply as the operator's field manager.
async fn expect_status(api: &mut MockApi, obj: &Value) -> Value {
    api.expect_status_apply(&format!("{CLUSTER}/status"), "etcd-operator", obj)
        .await
}

/// The seed: intent recorded, then its claim and pod, an event, the status.
async fn expect_seed(api: &mut MockApi, obj: &EtcdCluster) {
    let obj = serde_json::to_value(obj).unwrap();
    // By the one status writer: an apply of the whole status under the operator's manager.
    let record = expect_status(api, &obj).await;
    assert_eq!(
        record["status"]["membershipChange"]["action"], "Seed",
        "{record}"
    );
    assert_eq!(record["status"]["membershipChange"]["member"], "c-0");
    let claim = api
        .expect_call(
            Method::POST,
            "/api/v1/namespaces/ns/persistentvolumeclaims",
            StatusCode::CREATED,
            |c| c.body.clone(),
        )
        .await;
    assert_eq!(claim.body["metadata"]["name"], "c-0");
    assert_eq!(
        claim.body["metadata"]["annotations"]["etcd.version"],
        "3.5.33"
    );
    let pod = api
        .expect_call(
            Method::POST,
            "/api/v1/namespaces/ns/pods",
            StatusCode::CREATED,
            |c| {
                let mut made = c.body.clone();
                made["metadata"]["uid"] = json!("pod-uid");
                made
            },
        )
        .await;
    assert_eq!(pod.body["metadata"]["name"], "c-0");
    // Made gated, then proven (bound to the UID the server gave it) and let go in one patch.
    assert_eq!(
        pod.body["spec"]["schedulingGates"][0]["name"],
        UNPROVEN_GATE
    );
    let proven = api
        .expect_call(
            Method::PATCH,
            "/api/v1/namespaces/ns/pods/c-0",
            StatusCode::OK,
            |c| c.body.clone(),
        )
        .await;
    assert_eq!(
        proven.body["metadata"]["annotations"][PROOF_ANNOTATION],
        test_key().proof("ns", "c-0", "pod-uid")
    );
    assert_eq!(proven.body["metadata"]["uid"], "pod-uid");
    assert_eq!(proven.body["spec"]["schedulingGates"], Value::Null);
    let container = &pod.body["spec"]["containers"][0];
    assert_eq!(container["image"], "localhost/etcd:v3.5.33");
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(args.contains(&"--initial-cluster-state=new"), "{args:?}");
    assert!(
        args.iter()
            .any(|a| a.starts_with("--initial-cluster-token=uid-1-")),
        "{args:?}"
    );
    let event = api.expect_event("ns").await;
    assert_eq!(event["reason"], "SeedCreated");
    let status = expect_status(api, &obj).await;
    assert_eq!(status["status"]["phase"], "Creating");
    assert_eq!(status["status"]["observedGeneration"], 2);
}

#[tokio::test]
async fn a_new_cluster_records_the_seed_before_creating_it() {
    let (ctx, mut api) = context(Scope::new(false));
    let c = cluster(json!({}), None);
    let task = run(c.clone(), &ctx);
    expect_observation_of_an_empty_world(&mut api, &c).await;
    expect_seed(&mut api, &c).await;
    assert_eq!(
        task.await.unwrap(),
        Action::requeue(std::time::Duration::from_millis(500))
    );
    api.expect_silence().await;
}

#[tokio::test]
async fn a_restart_after_the_seed_was_recorded_creates_that_same_seed_not_a_second_one() {
    let (ctx, mut api) = context(Scope::new(false));
    // Recorded by a previous incarnation that died before the pod existed.
    let status = json!({"membershipChange": {"action": "Seed", "member": "c-0", "started": "2026-11-24T00:00:00Z"}});
    let c = cluster(json!({}), Some(status));
    let task = run(c.clone(), &ctx);
    expect_observation_of_an_empty_world(&mut api, &c).await;
    expect_seed(&mut api, &c).await;
    task.await.unwrap();
    api.expect_silence().await;
}

/// The cluster `cached` reconciled while the API server has `fresh`, whose spec is invalid:
/// a Warning and a condition that name `problem`, then nothing else.
async fn expect_invalid_spec_reported(cached: EtcdCluster, fresh: Value, problem: &str) {
    let (ctx, mut api) = context(Scope::new(false));
    let task = run(cached, &ctx);
    expect_fresh_read(&mut api, &fresh).await;
    let event = api.expect_event("ns").await;
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["reason"], "InvalidSpec");
    assert!(event["note"].as_str().unwrap().contains(problem), "{event}");
    let status = expect_status(&mut api, &fresh).await;
    assert_eq!(status["status"]["phase"], "");
    let condition = &status["status"]["conditions"][0];
    assert_eq!(condition["reason"], "InvalidSpec");
    assert_eq!(condition["observedGeneration"], 2);
    assert_eq!(task.await.unwrap(), Action::await_change());
    // No Service, pod or claim call: the reconcile has returned and nothing else came.
    api.expect_silence().await;
}

#[tokio::test]
async fn an_invalid_spec_is_reported_and_nothing_else_is_touched() {
    let c = cluster(json!({"size": 9}), None);
    expect_invalid_spec_reported(c.clone(), serde_json::to_value(c).unwrap(), "size 9").await;
}

/// coreos's example names 3.2.13: it applies, and is refused with the way to a supported version.
#[tokio::test]
async fn a_coreos_era_version_is_refused_with_the_way_out() {
    let c = cluster(json!({"version": "3.2.13"}), None);
    let fresh = serde_json::to_value(&c).unwrap();
    expect_invalid_spec_reported(c, fresh, "etcd 3.2.13 is not supported").await;
}

/// The cache validated a spec that has changed since: the spec read fresh is the one checked
/// (a reconcile once planned from the fresh object after validating the cached one, and
/// panicked on `version: latest`).
#[tokio::test]
async fn a_spec_made_invalid_after_the_cache_saw_it_is_reported_not_planned() {
    let cached = cluster(json!({}), None);
    let fresh = serde_json::to_value(cluster(json!({"version": "latest"}), None)).unwrap();
    expect_invalid_spec_reported(cached, fresh, "latest").await;
}

/// The status apply `body` says there is no membership change: as null, not left out (an
/// earlier version's merge patch may still own the field, so an apply that left it out would
/// leave it as it was).
fn written_as_none(body: &Value) -> bool {
    body["status"]
        .as_object()
        .is_some_and(|s| s.get("membershipChange") == Some(&Value::Null))
}

/// A paused reconcile writes its status from the cluster read fresh, and only if it did not
/// change since: never the cache's old record (one a restore's hand-over made stale).
#[tokio::test]
async fn a_paused_status_never_writes_back_a_membership_change_a_hand_over_cleared() {
    let (ctx, mut api) = context(Scope::new(false));
    let before = json!({"membershipChange": {"action": "Seed", "member": "c-0", "started": "2026-11-24T00:00:00Z"}});
    let cached = cluster(json!({"paused": true}), Some(before));
    let mut fresh = serde_json::to_value(cluster(json!({"paused": true}), None)).unwrap();
    fresh["metadata"]["resourceVersion"] = json!("8");
    let task = run(cached, &ctx);
    expect_fresh_read(&mut api, &fresh).await;
    let status = expect_status(&mut api, &fresh).await;
    assert!(written_as_none(&status), "{status}");
    assert_eq!(status["metadata"]["resourceVersion"], "8", "{status}");
    assert_eq!(task.await.unwrap(), Action::await_change());
    api.expect_silence().await;
}

/// Read fresh just after a restore's hand-over: the record from before the disaster names no
/// restore while the cluster now says `restored-by`: it is written as null, not kept (the
/// restore operator does not write this status; the record's restore tells it apart).
#[tokio::test]
async fn a_membership_change_recorded_before_a_restore_handed_the_cluster_over_is_dropped() {
    let (ctx, mut api) = context(Scope::new(false));
    let before = json!({"membershipChange": {"action": "Seed", "member": "c-0", "started": "2026-11-24T00:00:00Z"}});
    let mut fresh = serde_json::to_value(cluster(json!({"paused": true}), Some(before))).unwrap();
    fresh["metadata"]["annotations"] =
        json!({"etcd.database.coreos.com/restored-by": "restore-uid-2"});
    let task = run(serde_json::from_value(fresh.clone()).unwrap(), &ctx);
    expect_fresh_read(&mut api, &fresh).await;
    let status = expect_status(&mut api, &fresh).await;
    assert!(written_as_none(&status), "{status}");
    assert_eq!(task.await.unwrap(), Action::await_change());
    api.expect_silence().await;
}

/// An object this operator cannot read (here: a recovery named by a newer operator, after a
/// downgrade) is handed over by the watch as such: a Warning that says why, no status written
/// (its phase and records are not known), and nothing else; the other clusters go on.
#[tokio::test]
async fn a_cluster_that_cannot_be_read_gets_a_warning_and_nothing_else() {
    let (ctx, mut api) = context(Scope::new(false));
    let mut raw = serde_json::to_value(cluster(json!({}), None)).unwrap();
    raw["spec"]["quorumLoss"] = json!({"recovery": "FromTheFuture"});
    let unreadable: DeserializeGuard<EtcdCluster> = serde_json::from_value(raw).unwrap();
    assert!(unreadable.0.is_err());
    let task = tokio::spawn(controller::reconcile(Arc::new(unreadable), ctx.clone()));
    let event = api.expect_event("ns").await;
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["reason"], "InvalidObject");
    assert_eq!(event["regarding"]["name"], "c");
    assert!(
        event["note"].as_str().unwrap().contains("FromTheFuture"),
        "{event}"
    );
    assert_eq!(task.await.unwrap().unwrap(), Action::await_change());
    api.expect_silence().await;
}

/// Unreadable, and another operator's (the scope annotation) or being deleted: not a word from
/// this one (the operator that manages it, perhaps a newer one, may read it).
#[tokio::test]
async fn an_unreadable_cluster_of_another_scope_or_being_deleted_is_left_alone() {
    for (annotations, deleted) in [
        (
            json!({"etcd.database.coreos.com/scope": "clusterwide"}),
            None,
        ),
        (json!({}), Some("2026-11-30T00:00:00Z")),
    ] {
        let (ctx, mut api) = context(Scope::new(false));
        let mut raw = serde_json::to_value(cluster(json!({}), None)).unwrap();
        raw["spec"]["quorumLoss"] = json!({"recovery": "FromTheFuture"});
        raw["metadata"]["annotations"] = annotations;
        raw["metadata"]["deletionTimestamp"] = json!(deleted);
        let unreadable: DeserializeGuard<EtcdCluster> = serde_json::from_value(raw).unwrap();
        assert!(unreadable.0.is_err());
        let reconcile = controller::reconcile(Arc::new(unreadable), ctx.clone());
        assert_eq!(reconcile.await.unwrap(), Action::await_change());
        api.expect_silence().await;
    }
}

/// Changed between the read and the write: a conflict, retried from a new read, never forced.
#[tokio::test]
async fn a_paused_status_write_that_conflicts_is_retried_not_forced() {
    let (ctx, mut api) = context(Scope::new(false));
    let c = serde_json::to_value(cluster(json!({"paused": true}), None)).unwrap();
    let task = {
        let (c, ctx) = (serde_json::from_value(c.clone()).unwrap(), ctx.clone());
        tokio::spawn(async move { controller::reconcile(guarded(c), ctx).await })
    };
    expect_fresh_read(&mut api, &c).await;
    let conflict = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409,
        "message": "the object has been modified; please apply your changes to the latest version and try again"});
    api.expect_call(
        Method::PATCH,
        &format!("{CLUSTER}/status"),
        StatusCode::CONFLICT,
        |_| conflict,
    )
    .await;
    assert!(task.await.unwrap().is_err());
    api.expect_silence().await;
}

#[tokio::test]
async fn a_paused_cluster_gets_only_its_status() {
    let (ctx, mut api) = context(Scope::new(false));
    let c = serde_json::to_value(cluster(json!({"paused": true}), None)).unwrap();
    let task = run(serde_json::from_value(c.clone()).unwrap(), &ctx);
    expect_fresh_read(&mut api, &c).await;
    let status = expect_status(&mut api, &c).await;
    assert_eq!(status["status"]["controlPaused"], true);
    // Never null: the schema's enum refuses it (a restore creates its cluster paused).
    assert_eq!(status["status"]["phase"], "");
    assert_eq!(status["status"]["conditions"][0]["reason"], "Paused");
    assert_eq!(task.await.unwrap(), Action::await_change());
    api.expect_silence().await;
}

/// Held by a restore deleted after it began replacing members: the paused status says so and
/// how to go on.
#[tokio::test]
async fn a_cluster_held_by_an_abandoned_restore_says_how_to_go_on() {
    let (ctx, mut api) = context(Scope::new(false));
    let mut c = serde_json::to_value(cluster(json!({"paused": true}), None)).unwrap();
    c["metadata"]["annotations"] = json!({"etcd.database.coreos.com/abandoned-restore": "r"});
    let task = run(serde_json::from_value(c.clone()).unwrap(), &ctx);
    expect_fresh_read(&mut api, &c).await;
    let status = expect_status(&mut api, &c).await;
    let condition = &status["status"]["conditions"][0];
    assert_eq!(condition["reason"], "HeldByAbandonedRestore");
    let message = condition["message"].as_str().unwrap();
    assert!(
        message.contains("EtcdRestore r was deleted") && message.contains("spec.paused: false"),
        "{message}"
    );
    assert_eq!(task.await.unwrap(), Action::await_change());
    api.expect_silence().await;
}

#[tokio::test]
async fn a_cluster_of_the_other_scope_is_not_touched_at_all() {
    let (ctx, mut api) = context(Scope::new(true));
    let task = run(cluster(json!({}), None), &ctx);
    assert_eq!(task.await.unwrap(), Action::await_change());
    api.expect_silence().await;
}

#[tokio::test]
async fn a_member_is_never_started_on_an_existing_claim_that_is_not_the_clusters() {
    let (ctx, mut api) = context(Scope::new(false));
    let c = cluster(json!({}), None);
    let obj = serde_json::to_value(&c).unwrap();
    let task = {
        let (c, ctx) = (c.clone(), ctx.clone());
        tokio::spawn(async move { controller::reconcile(guarded(c), ctx).await })
    };
    expect_observation_of_an_empty_world(&mut api, &c).await;
    api.expect_call(
        Method::PATCH,
        &format!("{CLUSTER}/status"),
        StatusCode::OK,
        |_| obj.clone(),
    )
    .await;
    // The seed's claim name is taken (made after the list was read): by a volume a restore
    // detached from an earlier cluster of this name.
    let claim_path = "/api/v1/namespaces/ns/persistentvolumeclaims";
    api.expect_call(Method::POST, claim_path, StatusCode::CONFLICT, |_| {
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 409,
               "reason": "AlreadyExists", "message": "persistentvolumeclaims \"c-0\" already exists"})
    })
    .await;
    api.expect_call(
        Method::GET,
        &format!("{claim_path}/c-0"),
        StatusCode::OK,
        |_| {
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                   "metadata": {"name": "c-0", "namespace": "ns", "uid": "old",
                       "labels": {"app": "etcd", "etcd_node": "c-0",
                                  "etcd.database.coreos.com/detached-from": "c"}}})
        },
    )
    .await;
    // No pod is created on it; a Warning and the status say why.
    let event = api.expect_event("ns").await;
    assert_eq!(event["type"], "Warning");
    assert!(
        event["note"].as_str().unwrap().contains("claim c-0 exists"),
        "{event}"
    );
    let status = expect_status(&mut api, &obj).await;
    assert!(
        status.to_string().contains("is not this cluster's"),
        "{status}"
    );
    let result = task.await.unwrap();
    assert!(
        result
            .as_ref()
            .is_err_and(|e| e.to_string().contains("claim c-0 exists")),
        "{:?}",
        result.map(|_| ())
    );
}

#[tokio::test]
async fn failing_reconciles_back_off_per_cluster_and_start_over_after_a_success() {
    let (ctx, mut api) = context(Scope::new(false));
    let c = cluster(json!({"paused": true}), None);
    let failing = guarded(c.clone());
    let error = context::Error::NoMember("the test");
    let retry = |cluster: &Arc<DeserializeGuard<EtcdCluster>>| {
        mock_api::requeue_seconds(&controller::error_policy(
            cluster.clone(),
            &error,
            ctx.clone(),
        ))
    };
    mock_api::assert_backs_off(|| retry(&failing));
    // Another cluster backs off on its own.
    let mut other = c.clone();
    other.metadata.uid = Some("uid-2".into());
    assert!(retry(&guarded(other)) <= 2.0);
    // A reconcile that succeeds starts this cluster over.
    let value = serde_json::to_value(&c).unwrap();
    let task = run(c, &ctx);
    expect_fresh_read(&mut api, &value).await;
    expect_status(&mut api, &value).await;
    assert_eq!(task.await.unwrap(), Action::await_change());
    assert!(retry(&failing) <= 2.0);
}

/// Issue 28 point 5: a running pod labelled as a member, without a proof of origin (anyone
/// allowed to create pods can make one), is not asked for the member list and holds the
/// cluster with a Warning; a gated pod without a proof (it never ran) is deleted, so that the
/// operator makes its own.
#[tokio::test]
async fn a_pod_that_passes_for_a_member_is_not_trusted_and_holds_the_cluster() {
    let (ctx, mut api) = context(Scope::new(false));
    let c = cluster(json!({}), Some(json!({"phase": "Running"})));
    let obj = serde_json::to_value(&c).unwrap();
    let task = run(c, &ctx);
    expect_fresh_read(&mut api, &obj).await;
    for path in ["services/c", "services/c-client"] {
        api.expect_apply(&format!("/api/v1/namespaces/ns/{path}"), "etcd-operator")
            .await;
    }
    api.expect_apply(
        "/apis/policy/v1/namespaces/ns/poddisruptionbudgets/c",
        "etcd-operator",
    )
    .await;
    let labelled = |name: &str, uid: &str, extra: Value| {
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "uid": uid,
                "creationTimestamp": "2026-11-26T00:00:00Z",
                "labels": {"app": "etcd", "etcd_cluster": "c", "etcd_node": name}},
            "spec": {"containers": [{"name": "etcd", "image": "x"}]},
            "status": {"phase": "Running", "podIP": "10.9.9.9"}});
        for (k, v) in extra.as_object().unwrap() {
            pod["spec"][k] = v.clone();
        }
        pod
    };
    // A fake etcd that would say it is the sole leader, with a proof copied from elsewhere;
    // and a gated one without a proof.
    let copied = test_key().proof("ns", "c-9", "another-uid");
    let mut fake = labelled("c-9", "fake-uid", json!({}));
    fake["metadata"]["annotations"] = json!({PROOF_ANNOTATION: copied});
    let gated = labelled(
        "c-1",
        "gated-uid",
        json!({"schedulingGates": [{"name": UNPROVEN_GATE}]}),
    );
    api.expect_list("/api/v1/namespaces/ns/pods", vec![fake, gated])
        .await;
    let deleted = api
        .expect_call(
            Method::DELETE,
            "/api/v1/namespaces/ns/pods/c-1",
            StatusCode::OK,
            |_| json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
        )
        .await;
    assert_eq!(deleted.body["preconditions"]["uid"], "gated-uid");
    api.expect_list("/api/v1/namespaces/ns/persistentvolumeclaims", Vec::new())
        .await;
    api.expect_list("/api/v1/nodes", Vec::new()).await;
    // Nothing is created or deleted: a Warning, then the status, say why.
    // (No member of its own answers here, so quorum is also reported lost, first.)
    let quorum = api.expect_event("ns").await;
    assert_eq!(quorum["reason"], "QuorumLost");
    let event = api.expect_event("ns").await;
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["reason"], "ForeignPod");
    assert!(event["note"].as_str().unwrap().contains("c-9"), "{event}");
    let status = expect_status(&mut api, &obj).await;
    let degraded = status["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Degraded")
        .cloned()
        .unwrap();
    assert_eq!(degraded["reason"], "ForeignPod", "{status}");
    task.await.unwrap();
    api.expect_silence().await;
}
