//! The mock API server (`mock_api`) with EtcdBackup fixtures: each test states the
//! calls it expects, in order, with their bodies checked.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use etcd_api::EtcdBackup;
use http::{Method, StatusCode};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::context::{Clock, Context};
use crate::in_flight::Runs;
use crate::metrics::Metrics;

pub const NOW: &str = "2026-03-01T12:00:00Z";

pub fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(NOW).unwrap().to_utc()
}

/// A context whose client talks to the returned mock server, with the clock fixed at [`NOW`].
pub fn context() -> (Arc<Context>, ApiServer) {
    let (client, api) = mock_api::pair();
    let clock: Clock = Arc::new(now);
    let runs = Runs::new(2, CancellationToken::new());
    let mut ctx = Context::new(
        client,
        Some("test-pod".into()),
        Arc::new(Metrics::default()),
        runs,
        clock,
    );
    ctx.result_write_backoff = std::time::Duration::from_millis(1);
    ctx.run_retry_backoff = std::time::Duration::from_millis(1);
    (Arc::new(ctx), ApiServer(api))
}

/// An EtcdBackup as the API server would return it.
pub fn backup(spec: Value, status: Option<Value>) -> EtcdBackup {
    let mut obj = json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2",
        "kind": "EtcdBackup",
        "metadata": {
            "name": "b", "namespace": "ns", "uid": "uid-1", "generation": 2,
            "resourceVersion": "7", "creationTimestamp": "2026-03-01T11:00:00Z"
        },
        "spec": spec,
    });
    if let Some(status) = status {
        obj["status"] = status;
    }
    serde_json::from_value(obj).unwrap()
}

/// The coreos one-shot example (no backupPolicy).
pub fn one_shot_spec() -> Value {
    json!({
        "etcdEndpoints": ["http://127.0.0.1:1"],
        "storageType": "S3",
        "s3": {"path": "mybucket/etcd.backup", "awsSecret": "aws"}
    })
}

pub use mock_api::Call;
use mock_api::MockApi;

/// The mock API server with the EtcdBackup helpers.
pub struct ApiServer(MockApi);

impl ApiServer {
    /// Waits for the next request and answers it with `status` and `reply`.
    pub async fn expect(&mut self, status: StatusCode, reply: impl FnOnce(&Call) -> Value) -> Call {
        self.0.expect(status, reply).await
    }

    /// A status server-side apply; answers with the object carrying that status.
    pub async fn expect_status_apply(&mut self, obj: &EtcdBackup) -> Value {
        let path = "/apis/etcd.database.coreos.com/v1beta2/namespaces/ns/etcdbackups/b/status";
        let obj = serde_json::to_value(obj).unwrap();
        let applied = self
            .0
            .expect_status_apply(path, "etcd-backup-operator", &obj)
            .await;
        applied["status"].clone()
    }

    /// A status server-side apply by the drill side's field manager.
    pub async fn expect_drill_status_apply(&mut self, obj: &EtcdBackup) -> Value {
        let path = "/apis/etcd.database.coreos.com/v1beta2/namespaces/ns/etcdbackups/b/status";
        let obj = serde_json::to_value(obj).unwrap();
        let applied = self
            .0
            .expect_status_apply(path, crate::drill::MANAGER, &obj)
            .await;
        applied["status"].clone()
    }

    /// The mock server itself, for calls without a helper here.
    pub fn mock(&mut self) -> &mut MockApi {
        &mut self.0
    }

    /// An events.k8s.io/v1 Event creation; returns the event.
    pub async fn expect_event(&mut self) -> Value {
        self.0.expect_event("ns").await
    }

    /// The next call, refused by the API server (500, as when etcd behind it times out).
    pub async fn expect_refused(&mut self) -> Call {
        let refused = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "etcdserver: request timed out", "reason": "InternalError", "code": 500});
        self.0
            .expect(StatusCode::INTERNAL_SERVER_ERROR, |_| refused)
            .await
    }

    /// A Secret read answered with 404.
    pub async fn expect_secret_missing(&mut self, name: &str) {
        let path = format!("/api/v1/namespaces/ns/secrets/{name}");
        self.0.expect_not_found(Method::GET, &path).await;
    }

    /// No further call within a short while.
    pub async fn expect_silence(&mut self) {
        self.0.expect_silence().await
    }
}
