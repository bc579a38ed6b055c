//! The drill side's steps against the mock API server: the intent is recorded before the pod
//! is made, a pod never made (the operator stopped in between) is made after a restart, and a
//! verdict is recorded before the pod goes.

use std::sync::Arc;
use std::time::Duration;

use http::{Method, StatusCode};
use kube::core::DeserializeGuard;
use kube::runtime::controller::Action;
use serde_json::{Value, json};

use crate::controller::reconcile;
use crate::fixtures::*;

const PODS: &str = "/api/v1/namespaces/ns/pods";

fn drilled_spec() -> Value {
    let mut spec = one_shot_spec();
    spec["drill"] = json!({"etcdRepository": "localhost/etcd"});
    spec
}

/// The finished one-shot whose backup is to be drilled, with `drill` as `lastDrill`.
fn status(drill: Option<Value>) -> Value {
    let mut status = json!({
        "succeeded": true, "observedGeneration": 2, "lastSuccessDate": "2026-03-01T11:00:01Z",
        "lastBackup": {"objectKey": "s3://mybucket/etcd.backup", "etcdVersion": "3.5.33",
            "number": 1, "contents": {"revision": 40, "keyCount": 12, "hashKv": 99}},
    });
    if let Some(drill) = drill {
        status["lastDrill"] = drill;
    }
    status
}

async fn reconciled(
    obj: etcd_api::EtcdBackup,
    ctx: &Arc<crate::context::Context>,
) -> tokio::task::JoinHandle<Action> {
    let ctx = ctx.clone();
    tokio::spawn(async move {
        reconcile(Arc::new(DeserializeGuard(Ok(obj))), ctx)
            .await
            .expect("reconcile failed")
    })
}

/// The drill pod `b-drill-1772366340` ended in `phase`, its `check` container having exited
/// `exit_code` with `report`.
fn ended_pod(phase: &str, exit_code: i32, report: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "b-drill-1772366340", "namespace": "ns"},
        "status": {"phase": phase, "containerStatuses": [{"name": "check", "image": "i",
            "imageID": "i", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": exit_code, "message": report}}}]}})
}

/// Expects the deletion of the pod at `path`.
async fn expect_pod_deleted(api: &mut ApiServer, path: &str) {
    api.mock()
        .expect_call(Method::DELETE, path, StatusCode::OK, |c| {
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": c.path.rsplit('/').next().unwrap()}})
        })
        .await;
}

#[tokio::test]
async fn a_due_drill_is_recorded_before_its_pod_is_made() {
    let (ctx, mut api) = context();
    let obj = backup(drilled_spec(), Some(status(None)));
    let task = reconciled(obj.clone(), &ctx).await;
    // Earlier drill pods (none here) go first.
    let listed = api.mock().expect_list(PODS, vec![]).await;
    assert!(
        listed.query.contains("etcd-backup-uid%3Duid-1"),
        "{}",
        listed.query
    );
    let recorded = api.expect_drill_status_apply(&obj).await;
    let drill = &recorded["lastDrill"];
    assert_eq!(drill["result"], "Running");
    assert_eq!(drill["objectKey"], "s3://mybucket/etcd.backup");
    assert_eq!(drill["backupNumber"], 1);
    let made = api
        .mock()
        .expect_call(Method::POST, PODS, StatusCode::CREATED, |c| c.body.clone())
        .await;
    assert_eq!(made.body["metadata"]["name"], drill["pod"]);
    assert_eq!(
        made.body["spec"]["initContainers"][1]["image"],
        "localhost/etcd:v3.5.33"
    );
    assert_eq!(
        task.await.unwrap(),
        Action::requeue(Duration::from_secs(10))
    );
    api.expect_silence().await;
}

#[tokio::test]
async fn a_drill_recorded_but_never_made_is_made_after_a_restart() {
    let (ctx, mut api) = context();
    let running = json!({"objectKey": "s3://mybucket/etcd.backup", "backupNumber": 1,
        "result": "Running", "pod": "b-drill-1772366340", "startTime": "2026-03-01T11:59:00Z"});
    let obj = backup(drilled_spec(), Some(status(Some(running))));
    let task = reconciled(obj, &ctx).await;
    api.mock()
        .expect_not_found(Method::GET, &format!("{PODS}/b-drill-1772366340"))
        .await;
    let made = api
        .mock()
        .expect_call(Method::POST, PODS, StatusCode::CREATED, |c| c.body.clone())
        .await;
    assert_eq!(made.body["metadata"]["name"], "b-drill-1772366340");
    assert_eq!(
        task.await.unwrap(),
        Action::requeue(Duration::from_secs(10))
    );
    api.expect_silence().await;
}

#[tokio::test]
async fn a_verdict_is_recorded_before_the_pod_goes() {
    let (ctx, mut api) = context();
    let running = json!({"objectKey": "s3://mybucket/etcd.backup", "backupNumber": 1,
        "result": "Running", "pod": "b-drill-1772366340", "startTime": "2026-03-01T11:59:00Z"});
    let obj = backup(drilled_spec(), Some(status(Some(running))));
    let task = reconciled(obj.clone(), &ctx).await;
    let report = r#"{"passed":true,"etcdVersion":"3.5.33","revision":40,"restoredKeyCount":12,"differences":[],"seconds":1.2}"#;
    let pod = format!("{PODS}/b-drill-1772366340");
    api.mock()
        .expect_call(Method::GET, &pod, StatusCode::OK, |_| {
            ended_pod("Succeeded", 0, report)
        })
        .await;
    let recorded = api.expect_drill_status_apply(&obj).await;
    assert_eq!(recorded["lastDrill"]["result"], "Succeeded");
    assert_eq!(recorded["lastDrill"]["keyCount"], 12);
    assert_eq!(recorded["lastDrill"]["durationSeconds"], 60.0);
    assert_eq!(recorded["lastSuccessfulDrill"], recorded["lastDrill"]);
    assert_eq!(recorded["conditions"][0]["type"], "Drilled");
    assert_eq!(recorded["conditions"][0]["status"], "True");
    let event = api.expect_event().await;
    assert_eq!(event["reason"], "DrillSucceeded");
    expect_pod_deleted(&mut api, &pod).await;
    assert_eq!(task.await.unwrap(), Action::await_change());
    let metrics = ctx.metrics.encode();
    assert!(
        metrics.contains("etcd_backup_last_drill_success_timestamp_seconds{namespace=\"ns\",name=\"b\"} 1772366400"),
        "{metrics}"
    );
    api.expect_silence().await;
}

#[tokio::test]
async fn a_drill_step_the_api_refuses_is_retried_and_holds_no_backup_up() {
    let (ctx, mut api) = context();
    let obj = backup(drilled_spec(), Some(status(None)));
    let task = reconciled(obj, &ctx).await;
    // Listing the earlier drill pods is refused (as to an operator whose RBAC predates drills).
    api.expect_refused().await;
    let event = api.expect_event().await;
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["reason"], "DrillStepFailed");
    // The backup side went on (a finished one-shot: nothing to do), the drill comes back later.
    assert_eq!(
        task.await.unwrap(),
        Action::requeue(Duration::from_secs(30))
    );
    api.expect_silence().await;
}

#[tokio::test]
async fn a_failed_drills_verdict_is_recorded_then_its_pod_and_decrypted_data_go() {
    let (ctx, mut api) = context();
    let running = json!({"objectKey": "s3://mybucket/etcd.backup", "backupNumber": 1,
        "result": "Running", "pod": "b-drill-1772366340", "startTime": "2026-03-01T11:59:00Z"});
    let obj = backup(drilled_spec(), Some(status(Some(running))));
    let task = reconciled(obj.clone(), &ctx).await;
    let report = r#"{"passed":false,"etcdVersion":"3.5.33","revision":40,"restoredKeyCount":11,"differences":["12 keys at revision 40 recorded, the restore has 11"],"seconds":1.2}"#;
    let pod = format!("{PODS}/b-drill-1772366340");
    api.mock()
        .expect_call(Method::GET, &pod, StatusCode::OK, |_| {
            ended_pod("Failed", 1, report)
        })
        .await;
    let recorded = api.expect_drill_status_apply(&obj).await;
    assert_eq!(recorded["lastDrill"]["result"], "Failed");
    assert_eq!(recorded["lastDrill"]["reason"], "ContentMismatch");
    // The words that explain it stay in status and the Warning.
    let message = recorded["lastDrill"]["message"].as_str().unwrap();
    assert!(message.contains("the restore has 11"), "{message}");
    let event = api.expect_event().await;
    assert_eq!(event["reason"], "DrillFailed");
    assert!(
        event["note"]
            .as_str()
            .unwrap()
            .contains("the restore has 11")
    );
    // Then the pod goes: it holds the decrypted snapshot, the restored data and the identity.
    expect_pod_deleted(&mut api, &pod).await;
    assert_eq!(task.await.unwrap(), Action::await_change());
    api.expect_silence().await;
}

#[tokio::test]
async fn when_spec_drill_is_removed_after_a_drill_every_drill_pod_goes() {
    let (ctx, mut api) = context();
    let finished = json!({"objectKey": "s3://mybucket/etcd.backup", "backupNumber": 1,
        "result": "Failed", "reason": "ContentMismatch", "pod": "b-drill-1772366340",
        "startTime": "2026-03-01T11:59:00Z"});
    let obj = backup(one_shot_spec(), Some(status(Some(finished))));
    let task = reconciled(obj, &ctx).await;
    let left = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "b-drill-1772366340", "namespace": "ns"}});
    let listed = api.mock().expect_list(PODS, vec![left]).await;
    assert!(
        listed.query.contains("etcd-backup-uid%3Duid-1"),
        "{}",
        listed.query
    );
    expect_pod_deleted(&mut api, &format!("{PODS}/b-drill-1772366340")).await;
    assert_eq!(task.await.unwrap(), Action::await_change());
    api.expect_silence().await;
}
