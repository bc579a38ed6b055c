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
    obj: backup_api::EtcdBackup,
    ctx: &Arc<crate::context::Context>,
) -> tokio::task::JoinHandle<Action> {
    let ctx = ctx.clone();
    tokio::spawn(async move {
        reconcile(Arc::new(DeserializeGuard(Ok(obj))), ctx)
            .await
            .expect("reconcile failed")
    })
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
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "b-drill-1772366340", "namespace": "ns"},
                "status": {"phase": "Succeeded", "containerStatuses": [{"name": "check", "image": "i",
                    "imageID": "i", "ready": false, "restartCount": 0,
                    "state": {"terminated": {"exitCode": 0, "message": report}}}]}})
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
    api.mock()
        .expect_call(Method::DELETE, &pod, StatusCode::OK, |c| {
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": c.path.rsplit('/').next().unwrap()}})
        })
        .await;
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
