//! Reconcile flows against the mock API server.

use std::sync::Arc;
use std::time::Duration;

use http::{Method, StatusCode};
use kube::core::DeserializeGuard;
use kube::runtime::controller::Action;
use serde_json::json;

use crate::controller::{error_policy, reconcile};
use crate::finalizer::FINALIZER;
use crate::fixtures::*;

fn guard(obj: etcd_api::EtcdBackup) -> Arc<DeserializeGuard<etcd_api::EtcdBackup>> {
    Arc::new(DeserializeGuard(Ok(obj)))
}

/// A reconcile that must finish without any API call: one left unanswered fails the test.
async fn without_calls(task: tokio::task::JoinHandle<Action>) -> Action {
    tokio::time::timeout(Duration::from_secs(2), task)
        .await
        .expect("reconcile made an API call")
        .unwrap()
}

/// Reconciles in a task of its own, so the test can answer its API calls meanwhile.
fn start(
    obj: Arc<DeserializeGuard<etcd_api::EtcdBackup>>,
    ctx: &Arc<crate::context::Context>,
) -> tokio::task::JoinHandle<Action> {
    let ctx = ctx.clone();
    tokio::spawn(async move { reconcile(obj, ctx).await.expect("reconcile failed") })
}

#[tokio::test]
async fn one_shot_failure_lands_in_status_with_a_warning_event() {
    let (ctx, mut api) = context();
    let obj = backup(one_shot_spec(), None);
    let task = start(guard(obj.clone()), &ctx);
    // Before any data moves: Progressing and the start time, so a restart knows.
    let running = api.expect_status_apply(&obj).await;
    assert_eq!(
        task.await.unwrap(),
        Action::requeue(Duration::from_secs(300))
    );
    assert_eq!(running["lastScheduleTime"], NOW);
    assert_eq!(running["conditions"][0]["type"], "Progressing");
    assert_eq!(running["conditions"][0]["status"], "True");
    assert_eq!(running["succeeded"], false);

    // The run reads the Secret at run time; it is missing.
    api.expect_secret_missing("aws").await;
    let failed = api.expect_status_apply(&obj).await;
    assert_eq!(failed["succeeded"], false);
    assert_eq!(failed["Reason"], r#"Secret "aws" not found"#);
    assert_eq!(failed["lastFailure"]["reason"], "SecretNotFound");
    let metrics = ctx.metrics.encode();
    let line = "etcd_backup_last_failure_timestamp_seconds{namespace=\"ns\",name=\"b\"}";
    assert!(metrics.contains(line), "{metrics}");
    assert!(
        failed.get("nextScheduleTime").is_none(),
        "a one-shot has no next run"
    );
    let ready = failed["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap();
    assert_eq!(
        (
            ready["status"].as_str(),
            ready["observedGeneration"].as_i64()
        ),
        (Some("False"), Some(2))
    );
    let event = api.expect_event().await;
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["reason"], "BackupFailed");
    assert!(event["note"].as_str().unwrap().contains("SecretNotFound"));
    assert_eq!(event["regarding"]["name"], "b");

    // The failed one-shot is final: reconciling the recorded status starts nothing.
    wait_until_idle(&ctx).await;
    let done = backup(one_shot_spec(), Some(failed));
    let action = without_calls(start(guard(done), &ctx)).await;
    assert_eq!(action, Action::await_change());
    api.expect_silence().await;
}

/// A run whose first attempts fail for a cause that may pass (the API server refusing the
/// Secret read with a 500) is tried again, and the status lists those attempts; a cause that
/// will not pass (the Secret missing) ends the run at once, as its result.
#[tokio::test]
async fn transient_failures_are_retried_within_the_run_and_listed() {
    let (ctx, mut api) = context();
    let obj = backup(one_shot_spec(), None);
    let task = start(guard(obj.clone()), &ctx);
    api.expect_status_apply(&obj).await;
    task.await.unwrap();
    for _ in 0..2 {
        let refused = api.expect_refused().await;
        assert_eq!(refused.path, "/api/v1/namespaces/ns/secrets/aws");
    }
    api.expect_secret_missing("aws").await;
    let failed = api.expect_status_apply(&obj).await;
    assert_eq!(failed["lastFailure"]["reason"], "SecretNotFound");
    let retries = failed["lastRunRetries"].as_array().unwrap();
    assert_eq!(retries.len(), 2, "{failed}");
    for retry in retries {
        assert_eq!(retry["reason"], "SecretInvalid");
        assert!(
            retry["message"]
                .as_str()
                .unwrap()
                .contains("request timed out"),
            "{retry}"
        );
    }
    let event = api.expect_event().await;
    assert!(event["note"].as_str().unwrap().contains("SecretNotFound"));
}

/// A recipients Secret without a valid key fails the run before etcd or S3 is reached, with a
/// reason of its own (the keys are the user's to fix) that names the line.
#[tokio::test]
async fn bad_recipients_fail_the_run_as_invalid_encryption_keys() {
    let (ctx, mut api) = context();
    let mut spec = one_shot_spec();
    spec["encryption"] = json!({"recipientsSecret": {"name": "keys", "key": "recipients.txt"}});
    let obj = backup(spec, None);
    let task = start(guard(obj.clone()), &ctx);
    api.expect_status_apply(&obj).await;
    task.await.unwrap();

    // "# rotated 2026-11\nage1notakey\n"
    let keys = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "keys", "namespace": "ns"},
        "data": {"recipients.txt": "IyByb3RhdGVkIDIwMjYtMTEKYWdlMW5vdGFrZXkK"}});
    let read = api.expect(StatusCode::OK, |_| keys).await;
    assert_eq!(read.path, "/api/v1/namespaces/ns/secrets/keys");
    let failed = api.expect_status_apply(&obj).await;
    assert_eq!(failed["lastFailure"]["reason"], "EncryptionKeysInvalid");
    let message = failed["Reason"].as_str().unwrap();
    assert!(
        message.contains(r#"Secret "keys" key "recipients.txt""#)
            && message.contains("line 2: not an age X25519 recipient"),
        "{message}"
    );
    let event = api.expect_event().await;
    assert_eq!(event["type"], "Warning");
    assert!(
        event["note"]
            .as_str()
            .unwrap()
            .contains("EncryptionKeysInvalid")
    );
}

#[tokio::test]
async fn a_finished_one_shot_is_never_redone() {
    let (ctx, mut api) = context();
    let done = backup(
        one_shot_spec(),
        Some(
            json!({"succeeded": true, "etcdRevision": 5, "lastSuccessDate": "2026-03-01T11:00:01Z",
                    "observedGeneration": 2}),
        ),
    );
    assert_eq!(
        without_calls(start(guard(done), &ctx)).await,
        Action::await_change()
    );
    api.expect_silence().await;
}

#[tokio::test]
async fn scheduled_object_requeues_for_its_next_run() {
    let (ctx, mut api) = context();
    let spec = json!({
        "etcdEndpoints": ["http://127.0.0.1:1"], "storageType": "S3",
        "backupPolicy": {"backupIntervalInSecond": 125, "maxBackups": 2},
        "s3": {"path": "mybucket/etcd.backup", "awsSecret": "aws"}
    });
    let obj = backup(
        spec.clone(),
        Some(
            json!({"succeeded": true, "lastScheduleTime": "2026-03-01T11:59:50Z",
            "lastSuccessDate": "2026-03-01T11:59:52Z",
            "lastFailure": {"time": "2026-03-01T11:57:52Z", "reason": "UploadFailed"}}),
        ),
    );
    let task = start(guard(obj.clone()), &ctx);
    let status = api.expect_status_apply(&obj).await;
    assert_eq!(
        task.await.unwrap(),
        Action::requeue(Duration::from_secs(115))
    );
    // A process that has run no backup yet (a restart) exposes the recorded success and failure
    // and the schedule's period, which the "no backup for too long" and "the last backup
    // failed" alerts compare.
    let metrics = ctx.metrics.encode();
    for line in [
        "etcd_backup_last_success_timestamp_seconds{namespace=\"ns\",name=\"b\"} 1772366392.0",
        "etcd_backup_last_failure_timestamp_seconds{namespace=\"ns\",name=\"b\"} 1772366272.0",
        "etcd_backup_schedule_interval_seconds{namespace=\"ns\",name=\"b\"} 125.0",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in {metrics}");
    }
    assert_eq!(status["nextScheduleTime"], "2026-03-01T12:01:55Z");
    assert_eq!(status["observedGeneration"], 2);

    // Once recorded, the same reconcile writes nothing (no write-event loop).
    let recorded = backup(spec, Some(status));
    let action = without_calls(start(guard(recorded), &ctx)).await;
    assert_eq!(action, Action::requeue(Duration::from_secs(115)));
    api.expect_silence().await;
}

#[tokio::test]
async fn cron_schedule_change_reschedules() {
    let (ctx, mut api) = context();
    let spec = |schedule: &str| {
        json!({
            "etcdEndpoints": ["http://127.0.0.1:1"], "storageType": "S3",
            "backupPolicy": {"schedule": schedule},
            "s3": {"path": "mybucket/etcd.backup"}
        })
    };
    let status = json!({"succeeded": true, "lastScheduleTime": "2026-03-01T11:00:00Z",
                        "nextScheduleTime": "2026-03-02T11:00:00Z"});
    let obj = backup(spec("30 12 * * *"), Some(status));
    let task = start(guard(obj.clone()), &ctx);
    let written = api.expect_status_apply(&obj).await;
    assert_eq!(
        task.await.unwrap(),
        Action::requeue(Duration::from_secs(30 * 60))
    );
    assert_eq!(written["nextScheduleTime"], "2026-03-01T12:30:00Z");
}

#[tokio::test]
async fn first_interval_backup_starts_right_away() {
    let (ctx, mut api) = context();
    let spec = json!({
        "etcdEndpoints": ["http://127.0.0.1:1"], "storageType": "S3",
        "backupPolicy": {"backupIntervalInSecond": 3600},
        "s3": {"path": "mybucket/etcd.backup", "awsSecret": "aws"}
    });
    let obj = backup(spec, None);
    let task = start(guard(obj.clone()), &ctx);
    let running = api.expect_status_apply(&obj).await;
    assert_eq!(running["lastScheduleTime"], NOW);
    task.await.unwrap();
    // A second reconcile while the run is in flight starts nothing (the Secret read below
    // is the first run's, which waits for its answer).
    assert_eq!(
        without_calls(start(guard(obj.clone()), &ctx)).await,
        Action::requeue(Duration::from_secs(300))
    );
    api.expect_secret_missing("aws").await;
    let failed = api.expect_status_apply(&obj).await;
    assert_eq!(failed["nextScheduleTime"], "2026-03-01T13:00:00Z");
    api.expect_event().await;
}

#[tokio::test]
async fn a_refused_result_is_written_by_a_later_reconcile_and_the_schedule_goes_on() {
    let (ctx, mut api) = context();
    let spec = json!({
        "etcdEndpoints": ["http://127.0.0.1:1"], "storageType": "S3",
        "backupPolicy": {"backupIntervalInSecond": 3600},
        "s3": {"path": "mybucket/etcd.backup", "awsSecret": "aws"}
    });
    let obj = backup(spec.clone(), None);
    let task = start(guard(obj.clone()), &ctx);
    let running = api.expect_status_apply(&obj).await;
    task.await.unwrap();
    api.expect_secret_missing("aws").await;
    // The API server refuses every attempt to write the result.
    for _ in 0..3 {
        let call = api.expect_refused().await;
        assert!(call.path.ends_with("/etcdbackups/b/status"), "{call:?}");
    }
    api.expect_event().await;

    // The next reconcile still sees the run in progress (nothing was written): it writes the
    // kept result instead of waiting for good.
    let stale = backup(spec.clone(), Some(running));
    let task = start(guard(stale.clone()), &ctx);
    let result = api.expect_status_apply(&stale).await;
    assert_eq!(task.await.unwrap(), Action::requeue(Duration::from_secs(5)));
    assert_eq!(result["lastFailure"]["reason"], "SecretNotFound");
    assert_eq!(result["nextScheduleTime"], "2026-03-01T13:00:00Z");
    let progressing = result["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Progressing")
        .unwrap();
    assert_eq!(progressing["status"], "False");

    // Once the watch delivers it, the schedule goes on: the next run in an hour, no write.
    let recorded = backup(spec, Some(result));
    let action = without_calls(start(guard(recorded), &ctx)).await;
    assert_eq!(action, Action::requeue(Duration::from_secs(3600)));
}

#[tokio::test]
async fn delete_policy_adds_the_finalizer() {
    let (ctx, mut api) = context();
    let mut spec = one_shot_spec();
    spec["deletionPolicy"] = json!("Delete");
    let obj = backup(spec, None);
    let task = start(guard(obj.clone()), &ctx);
    let call = api
        .expect(StatusCode::OK, |_| serde_json::to_value(&obj).unwrap())
        .await;
    assert_eq!(task.await.unwrap(), Action::await_change());
    assert_eq!(call.method, Method::PATCH);
    assert_eq!(
        call.path,
        "/apis/etcd.database.coreos.com/v1beta2/namespaces/ns/etcdbackups/b"
    );
    assert_eq!(call.body["metadata"]["finalizers"], json!([FINALIZER]));
    assert_eq!(call.body["metadata"]["resourceVersion"], "7");
}

#[tokio::test]
async fn finalizer_is_removed_when_no_longer_needed_keeping_others() {
    let (ctx, mut api) = context();
    let mut obj = backup(one_shot_spec(), Some(json!({"succeeded": true})));
    obj.metadata.finalizers = Some(vec!["other/keep".into(), FINALIZER.into()]);
    let task = start(guard(obj.clone()), &ctx);
    let call = api
        .expect(StatusCode::OK, |_| serde_json::to_value(&obj).unwrap())
        .await;
    task.await.unwrap();
    assert_eq!(call.body["metadata"]["finalizers"], json!(["other/keep"]));

    // Deleted object with Retain: the finalizer goes, no storage is touched.
    obj.metadata.deletion_timestamp = Some(crate::status::time(now()));
    let task = start(guard(obj.clone()), &ctx);
    let call = api
        .expect(StatusCode::OK, |_| serde_json::to_value(&obj).unwrap())
        .await;
    assert_eq!(task.await.unwrap(), Action::await_change());
    assert_eq!(call.method, Method::PATCH);
    assert_eq!(call.body["metadata"]["finalizers"], json!(["other/keep"]));
    api.expect_silence().await;
}

/// Deleted with `deletionPolicy: Delete` but a spec that no longer says where the backups
/// are: nothing is deleted, the finalizer goes, and a Warning says the backups were kept.
#[tokio::test]
async fn deleted_with_an_invalid_spec_keeps_the_backups_and_says_so() {
    let (ctx, mut api) = context();
    let spec = json!({"etcdEndpoints": ["http://e:2379"], "storageType": "OSS",
                      "deletionPolicy": "Delete", "abs": {"path": "c/b", "absSecret": "s"}});
    let mut obj = backup(spec, None);
    obj.metadata.finalizers = Some(vec![FINALIZER.into(), "other/keep".into()]);
    obj.metadata.deletion_timestamp = Some(crate::status::time(now()));
    let task = start(guard(obj.clone()), &ctx);
    let event = api.expect_event().await;
    assert_eq!(
        (event["type"].as_str(), event["reason"].as_str()),
        (Some("Warning"), Some("BackupsKept"))
    );
    let note = event["note"].as_str().unwrap();
    assert!(note.contains("stored backups were kept"), "{note}");
    assert!(note.contains("OSS"), "the cause is named: {note}");
    let call = api
        .expect(StatusCode::OK, |_| serde_json::to_value(&obj).unwrap())
        .await;
    assert_eq!(call.method, Method::PATCH);
    assert!(
        call.path.ends_with("/namespaces/ns/etcdbackups/b"),
        "{}",
        call.path
    );
    assert_eq!(call.body["metadata"]["finalizers"], json!(["other/keep"]));
    assert_eq!(task.await.unwrap(), Action::await_change());
    api.expect_silence().await;
}

/// Deleting a Delete-policy EtcdBackup whose S3 Secret is gone (its namespace is being
/// deleted): the finalizer never reads etcd's TLS Secret; within the bound it keeps trying (the
/// Secret may come back), past it the backups are kept and the finalizer released, so the
/// namespace can go.
#[tokio::test]
async fn a_missing_s3_secret_releases_the_finalizer_after_the_bound() {
    let (ctx, mut api) = context();
    let spec = json!({"etcdEndpoints": ["https://e:2379"], "storageType": "S3",
        "deletionPolicy": "Delete", "clientTLSSecret": "etcd-client-tls",
        "s3": {"path": "mybucket/etcd.backup", "awsSecret": "aws"}});
    let deleted = |seconds_ago: i64| deleted_since(&spec, seconds_ago);

    // Just deleted: the Secret may still come back; a Warning, and the reconcile fails (retried
    // with backoff). The TLS Secret is not read: the only call is the S3 Secret's.
    let recent = deleted(10);
    let task = {
        let (obj, ctx) = (guard(recent), ctx.clone());
        tokio::spawn(async move { reconcile(obj, ctx).await })
    };
    api.expect_secret_missing("aws").await;
    let event = api.expect_event().await;
    assert_eq!(event["reason"], "DeleteBackupsFailed");
    assert!(task.await.unwrap().is_err());

    // Past the bound (300 s): kept, said so, released.
    let old = deleted(301);
    let task = start(guard(old.clone()), &ctx);
    api.expect_secret_missing("aws").await;
    kept_and_released(&mut api, &old, r#"the S3 Secret "aws" is gone"#).await;
    assert_eq!(task.await.unwrap(), Action::await_change());
    api.expect_silence().await;
}

/// A Delete-policy EtcdBackup with our finalizer, deleted `seconds_ago`.
fn deleted_since(spec: &serde_json::Value, seconds_ago: i64) -> etcd_api::EtcdBackup {
    let mut obj = backup(spec.clone(), None);
    obj.metadata.finalizers = Some(vec![FINALIZER.into()]);
    let at = now() - chrono::Duration::seconds(seconds_ago);
    obj.metadata.deletion_timestamp = Some(crate::status::time(at));
    obj
}

/// The backups were kept (a `BackupsKept` Warning naming `cause`) and the finalizer released.
async fn kept_and_released(api: &mut ApiServer, obj: &etcd_api::EtcdBackup, cause: &str) {
    let event = api.expect_event().await;
    assert_eq!(
        (event["type"].as_str(), event["reason"].as_str()),
        (Some("Warning"), Some("BackupsKept"))
    );
    let note = event["note"].as_str().unwrap();
    assert!(note.contains(cause), "the cause is named: {note}");
    let call = api
        .expect(StatusCode::OK, |_| serde_json::to_value(obj).unwrap())
        .await;
    assert_eq!(call.method, Method::PATCH);
    assert_eq!(call.body["metadata"]["finalizers"], json!([]));
}

/// A Delete-policy EtcdBackup without `awsSecret`, on an operator that lends no credentials of
/// its own: its backups can never be reached, and waiting does not change that. Within the
/// bound the failure is reported and retried; past it the backups are kept, said so, and the
/// finalizer released (its namespace would otherwise never go).
#[tokio::test]
async fn no_credentials_release_the_finalizer_after_the_bound() {
    let (ctx, mut api) = context();
    assert!(!ctx.allow_ambient_credentials);
    let spec = json!({"etcdEndpoints": ["http://e:2379"], "storageType": "S3",
        "deletionPolicy": "Delete", "s3": {"path": "mybucket/etcd.backup"}});
    let deleted = |seconds_ago: i64| deleted_since(&spec, seconds_ago);

    let task = {
        let (obj, ctx) = (guard(deleted(10)), ctx.clone());
        tokio::spawn(async move { reconcile(obj, ctx).await })
    };
    let event = api.expect_event().await;
    assert_eq!(event["reason"], "DeleteBackupsFailed");
    assert!(task.await.unwrap().is_err());

    let old = deleted(301);
    let task = start(guard(old.clone()), &ctx);
    kept_and_released(&mut api, &old, "no AWS keys").await;
    assert_eq!(task.await.unwrap(), Action::await_change());
    api.expect_silence().await;
}

/// The same for an object that does not parse at all: its deletion is not blocked forever.
#[tokio::test]
async fn a_deleted_object_that_does_not_parse_is_released_with_a_warning() {
    let (ctx, mut api) = context();
    let raw = json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdBackup",
        "metadata": {"name": "b", "namespace": "ns", "uid": "uid-9", "generation": 1,
                     "resourceVersion": "11", "deletionTimestamp": "2026-03-01T11:59:00Z",
                     "finalizers": [FINALIZER]},
        "spec": {"etcdEndpoints": ["http://e:2379"], "storageType": "Floppy"}
    });
    let guarded: DeserializeGuard<etcd_api::EtcdBackup> =
        serde_json::from_value(raw.clone()).unwrap();
    assert!(guarded.0.is_err());
    let task = tokio::spawn(reconcile(Arc::new(guarded), ctx.clone()));
    let event = api.expect_event().await;
    assert_eq!(event["reason"], "BackupsKept");
    assert_eq!(event["regarding"]["uid"], "uid-9");
    assert!(event["note"].as_str().unwrap().contains("Floppy"));
    let call = api.expect(StatusCode::OK, |_| raw.clone()).await;
    assert_eq!(call.method, Method::PATCH);
    assert!(
        call.path.ends_with("/namespaces/ns/etcdbackups/b"),
        "{}",
        call.path
    );
    assert_eq!(call.body["metadata"]["finalizers"], json!([]));
    assert_eq!(call.body["metadata"]["resourceVersion"], "11");
    assert_eq!(task.await.unwrap().unwrap(), Action::await_change());
    api.expect_silence().await;
}

#[tokio::test]
async fn unsupported_storage_type_gives_a_condition_and_one_warning() {
    let (ctx, mut api) = context();
    let spec = json!({"etcdEndpoints": ["http://e:2379"], "storageType": "OSS",
                      "oss": {"path": "c/b", "ossSecret": "s"}});
    let obj = backup(spec.clone(), None);
    let task = start(guard(obj.clone()), &ctx);
    let status = api.expect_status_apply(&obj).await;
    assert_eq!(status["conditions"][0]["type"], "Ready");
    assert_eq!(status["conditions"][0]["status"], "False");
    assert_eq!(status["conditions"][0]["reason"], "UnsupportedStorageType");
    let event = api.expect_event().await;
    assert_eq!(
        (event["type"].as_str(), event["reason"].as_str()),
        (Some("Warning"), Some("UnsupportedStorageType"))
    );
    assert_eq!(task.await.unwrap(), Action::await_change());

    // The status write comes back as a watch event: no second write, no second event.
    let again = backup(spec, Some(status));
    without_calls(start(guard(again), &ctx)).await;
    api.expect_silence().await;
}

#[tokio::test]
async fn an_object_that_does_not_parse_is_reported_not_fatal() {
    let (ctx, mut api) = context();
    let raw = json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdBackup",
        "metadata": {"name": "b", "namespace": "ns", "uid": "uid-9", "generation": 1},
        "spec": {"etcdEndpoints": ["http://e:2379"], "storageType": "Floppy"}
    });
    let guarded: DeserializeGuard<etcd_api::EtcdBackup> =
        serde_json::from_value(raw.clone()).unwrap();
    assert!(guarded.0.is_err());
    let guarded = Arc::new(guarded);
    let task = tokio::spawn(reconcile(guarded.clone(), ctx.clone()));
    let call = api.expect(StatusCode::OK, |_| raw.clone()).await;
    assert!(call.path.ends_with("/etcdbackups/b/status"));
    assert_eq!(
        call.body["status"]["conditions"][0]["reason"],
        "InvalidObject"
    );
    assert!(
        call.body["status"]["conditions"][0]["message"]
            .as_str()
            .unwrap()
            .contains("Floppy")
    );
    let event = api.expect_event().await;
    assert_eq!(event["reason"], "InvalidObject");
    assert_eq!(task.await.unwrap().unwrap(), Action::await_change());
    let again = tokio::time::timeout(Duration::from_secs(2), reconcile(guarded, ctx.clone()));
    assert_eq!(
        again.await.expect("reconcile made an API call").unwrap(),
        Action::await_change()
    );
    api.expect_silence().await;
}

#[tokio::test]
async fn an_interrupted_one_shot_is_retried() {
    let (ctx, mut api) = context();
    let interrupted = json!({
        "succeeded": false, "lastScheduleTime": "2026-03-01T11:59:00Z",
        "conditions": [{"type": "Progressing", "status": "True", "reason": "BackupRunning",
                        "message": "taking a snapshot", "lastTransitionTime": "2026-03-01T11:59:00Z"}]
    });
    let obj = backup(one_shot_spec(), Some(interrupted));
    let task = start(guard(obj.clone()), &ctx);
    let running = api.expect_status_apply(&obj).await;
    assert_eq!(running["lastScheduleTime"], NOW);
    // Marked as the retry, so an interruption of it is not retried again.
    assert_eq!(running["conditions"][0]["reason"], "RetryingInterruptedRun");
    task.await.unwrap();
    api.expect_secret_missing("aws").await;
    api.expect_status_apply(&obj).await;
    api.expect_event().await;
}

#[tokio::test]
async fn an_interrupted_retry_is_a_failure_not_retried_on_every_restart() {
    let (ctx, mut api) = context();
    let retry_interrupted = json!({
        "succeeded": false, "lastScheduleTime": "2026-03-01T11:59:00Z",
        "conditions": [{"type": "Progressing", "status": "True",
                        "reason": "RetryingInterruptedRun", "message": "taking a snapshot again",
                        "lastTransitionTime": "2026-03-01T11:59:00Z"}]
    });
    let obj = backup(one_shot_spec(), Some(retry_interrupted));
    let task = start(guard(obj.clone()), &ctx);
    let failed = api.expect_status_apply(&obj).await;
    let event = api.expect_event().await;
    assert_eq!(task.await.unwrap(), Action::requeue(Duration::from_secs(5)));
    assert_eq!(failed["succeeded"], false);
    assert_eq!(failed["lastFailure"]["reason"], "Interrupted");
    assert!(
        failed["Reason"]
            .as_str()
            .unwrap()
            .contains("interrupted twice"),
        "{failed}"
    );
    assert_eq!(event["type"], "Warning");
    assert!(event["note"].as_str().unwrap().starts_with("Interrupted: "));
    // With that result recorded, the one-shot is finished: no run, no write.
    let recorded = backup(one_shot_spec(), Some(failed));
    let action = without_calls(start(guard(recorded), &ctx)).await;
    assert_eq!(action, Action::await_change());
    api.expect_silence().await;
}

async fn wait_until_idle(ctx: &crate::context::Context) {
    for _ in 0..50 {
        if ctx.runs.count() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the run did not finish");
}

/// The whole one-shot path with real servers behind it: mock API server, real etcd, real S3.
#[tokio::test]
async fn one_shot_success_against_real_etcd_and_s3() {
    let etcd = testbed::Etcd::start().await.unwrap();
    let garage = testbed::Garage::start().await.unwrap();
    etcd.put("/k", "v").await.unwrap();
    let (ctx, mut api) = context();
    let spec = json!({
        "etcdEndpoints": [etcd.endpoint], "storageType": "S3",
        "s3": {"path": format!("{}/etcd.backup", garage.bucket), "awsSecret": "aws",
               "endpoint": garage.endpoint, "forcePathStyle": true}
    });
    let obj = backup(spec, None);
    let task = start(guard(obj.clone()), &ctx);
    api.expect_status_apply(&obj).await;
    task.await.unwrap();

    let b64 = |s: String| serde_json::to_value(k8s_openapi::ByteString(s.into_bytes())).unwrap();
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "aws", "namespace": "ns"},
        "data": {
            "credentials": b64(format!("[default]\naws_access_key_id = {}\naws_secret_access_key = {}\n", garage.access_key, garage.secret_key)),
            "config": b64(format!("[default]\nregion = {}\n", garage.region)),
        }
    });
    let call = api.expect(StatusCode::OK, |_| secret.clone()).await;
    assert_eq!(call.path, "/api/v1/namespaces/ns/secrets/aws");

    let done = api.expect_status_apply(&obj).await;
    assert_eq!(done["succeeded"], true);
    assert!(done.get("Reason").is_none());
    let last = &done["lastBackup"];
    assert_eq!(
        last["objectKey"],
        format!("s3://{}/etcd.backup", garage.bucket)
    );
    // Status says exactly what is stored: check it against an independent read-back.
    let plan = crate::validate::build(&obj.spec).unwrap();
    let data: crate::secrets::SecretData = serde_json::from_value(secret["data"].clone()).unwrap();
    let options =
        crate::secrets::s3_options(plan.s3().unwrap(), Some(("aws", &data)), None, false).unwrap();
    let location = backup_storage::Location::S3 {
        bucket: garage.bucket.clone(),
        key: "etcd.backup".into(),
    };
    let store = backup_storage::Store::open(&location, &options)
        .await
        .unwrap();
    let verified = etcd_snapshot::verify(&store, "etcd.backup", None)
        .await
        .unwrap();
    assert_eq!(last["sha256"], verified.stored.hex);
    assert_eq!(last["sizeBytes"], verified.stored_bytes);
    assert_eq!(done["etcdRevision"], last["etcdRevision"]);
    let event = api.expect_event().await;
    assert_eq!(
        (event["type"].as_str(), event["reason"].as_str()),
        (Some("Normal"), Some("BackupSucceeded"))
    );
    assert!(event["note"].as_str().unwrap().contains("etcd.backup"));
    assert!(!event["note"].as_str().unwrap().contains(&garage.secret_key));
    let metrics = ctx.metrics.encode();
    assert!(
        metrics.contains("etcd_backup_last_success_timestamp_seconds{namespace=\"ns\",name=\"b\"}"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_failing_object_backs_off_until_it_reconciles_and_is_forgotten_when_deleted() {
    let (ctx, mut api) = context();
    let obj = guard(backup(one_shot_spec(), None));
    // The API server refuses the status write that records the run: the reconcile fails.
    let task = {
        let (obj, ctx) = (obj.clone(), ctx.clone());
        tokio::spawn(async move { reconcile(obj, ctx).await })
    };
    api.expect_refused().await;
    let error = task.await.unwrap().unwrap_err();
    error_policy(obj.clone(), &error, ctx.clone());
    assert_eq!(
        ctx.backoff.len(),
        1,
        "the failure is on record for this object"
    );

    // The next reconcile succeeds: the object starts over from the shortest delay.
    let task = start(obj.clone(), &ctx);
    let running = api
        .expect_status_apply(&backup(one_shot_spec(), None))
        .await;
    task.await.unwrap();
    assert!(ctx.backoff.is_empty());
    api.expect_secret_missing("aws").await;
    api.expect_status_apply(&backup(one_shot_spec(), Some(running)))
        .await;
    api.expect_event().await;
    wait_until_idle(&ctx).await;
    let object = crate::metrics::ObjectLabels {
        namespace: "ns".into(),
        name: "b".into(),
    };
    assert!(ctx.metrics.encode().contains(r#"name="b""#));

    // Deleted: nothing about it stays, not even its metric series.
    error_policy(obj, &error, ctx.clone());
    ctx.forget("uid-1", &object);
    assert!(ctx.backoff.is_empty());
    let metrics = ctx.metrics.encode();
    assert!(!metrics.contains(r#"name="b""#), "{metrics}");
}

/// After a relist, what was kept about objects deleted while the watch was down goes (their
/// retry state and unwritten results); what is kept about the others stays.
#[tokio::test]
async fn a_relist_forgets_objects_deleted_meanwhile() {
    let (ctx, _api) = context();
    for uid in ["kept", "gone"] {
        ctx.backoff.next_delay(uid);
        let result = etcd_api::EtcdBackupStatus::default();
        ctx.runs.mark_finished(uid, now(), Some(result));
    }
    ctx.forget_unless(|uid| uid == "kept", |_| true);
    assert_eq!(ctx.backoff.len(), 1);
    assert!(ctx.runs.unwritten("kept").is_some());
    assert!(ctx.runs.unwritten("gone").is_none());
}

/// Which failures of the Delete policy release the finalizer after the bound: those only a
/// person can fix, not those that may pass.
#[test]
fn only_causes_a_person_must_fix_end_the_wait() {
    use crate::execute::RunError;
    use crate::secrets::SecretError;
    use backup_storage::StorageError;
    use operator_runtime::tenant_credentials::CredentialsError;
    let no_keys = StorageError::NoCredentials {
        service: "S3",
        message: "no keys in the profile".into(),
    };
    let no_bucket = StorageError::NoSuchBucket { bucket: "b".into() };
    for permanent in [
        RunError::Secret(SecretError::Missing("aws".into())),
        RunError::Secret(SecretError::Credentials(CredentialsError::NoCredentials(
            "no awsSecret".into(),
        ))),
        RunError::Storage(no_keys),
        RunError::Storage(no_bucket),
    ] {
        assert!(permanent.cannot_succeed_by_waiting(), "{permanent}");
    }
    let unreachable = StorageError::Unreachable {
        service: "S3",
        endpoint: "https://s3".into(),
        message: "connection refused".into(),
    };
    let read = SecretError::Read {
        secret: "aws".into(),
        message: "the API server is down".into(),
        transient: true,
    };
    for passing in [RunError::Storage(unreachable), RunError::Secret(read)] {
        assert!(!passing.cannot_succeed_by_waiting(), "{passing}");
    }
}

/// Which failures a run tries again: those that may pass (etcd or S3 unreachable, a stream cut,
/// the API server failing a Secret read), never bad data, refused keys or a missing Secret.
#[test]
fn only_causes_that_may_pass_are_retried_within_a_run() {
    use crate::execute::RunError;
    use crate::secrets::SecretError;
    use backup_storage::StorageError;
    use etcd_snapshot::Error as E;
    let transient = [
        RunError::Snapshot(E::Unreachable {
            endpoint: "http://c-client:2379".into(),
            message: "connection refused".into(),
        }),
        RunError::Snapshot(E::NoMemberAnswered("leader changed".into())),
        RunError::Snapshot(E::Stream {
            endpoint: "http://c-client:2379".into(),
            bytes: 10,
            message: "etcdserver: leader changed".into(),
        }),
        RunError::Storage(StorageError::Unreachable {
            service: "S3",
            endpoint: "https://s3".into(),
            message: "connection refused".into(),
        }),
        RunError::Secret(SecretError::Read {
            secret: "aws".into(),
            message: "500".into(),
            transient: true,
        }),
    ];
    for e in &transient {
        assert!(e.is_transient(), "{e}");
    }
    let permanent = [
        RunError::Snapshot(E::HashMismatch {
            expected: "a".into(),
            actual: "b".into(),
        }),
        RunError::Storage(StorageError::NoSuchBucket { bucket: "b".into() }),
        RunError::Secret(SecretError::Missing("aws".into())),
        RunError::Secret(SecretError::Read {
            secret: "aws".into(),
            message: "forbidden".into(),
            transient: false,
        }),
        RunError::Snapshot(E::DeadlineExceeded {
            seconds: 60,
            bytes: 0,
        }),
    ];
    for e in &permanent {
        assert!(!e.is_transient(), "{e}");
    }
}
