//! A tower-test mock API server: each test states the calls it expects, in order, with their
//! bodies checked; a missing, extra or different call fails the test.

use std::sync::Arc;
use std::time::Duration;

use backup_api::EtcdBackup;
use chrono::{DateTime, Utc};
use http::{Method, Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::controller::{Clock, Context};
use crate::metrics::Metrics;
use crate::runs::Runs;

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

pub const NOW: &str = "2026-03-01T12:00:00Z";

pub fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(NOW).unwrap().to_utc()
}

/// A context whose client talks to the returned mock server, with the clock fixed at [`NOW`].
pub fn context() -> (Arc<Context>, ApiServer) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let clock: Clock = Arc::new(now);
    let runs = Runs::new(2, CancellationToken::new());
    let ctx = Context::new(
        client,
        Some("test-pod".into()),
        Arc::new(Metrics::default()),
        runs,
        clock,
    );
    (Arc::new(ctx), ApiServer(handle))
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

/// A recorded request.
pub struct Call {
    pub method: Method,
    pub path: String,
    pub query: String,
    pub body: Value,
}

pub struct ApiServer(Handle);

impl ApiServer {
    /// Waits for the next request and answers it with `status` and `reply`.
    pub async fn expect(&mut self, status: StatusCode, reply: impl FnOnce(&Call) -> Value) -> Call {
        let (request, send) = tokio::time::timeout(Duration::from_secs(5), self.0.next_request())
            .await
            .expect("timed out waiting for an API call")
            .expect("the client hung up");
        let (parts, body) = request.into_parts();
        let bytes = body.collect_bytes().await.unwrap();
        let call = Call {
            method: parts.method,
            path: parts.uri.path().to_string(),
            query: parts.uri.query().unwrap_or_default().to_string(),
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        };
        let reply = reply(&call);
        send.send_response(
            Response::builder()
                .status(status)
                .body(Body::from(serde_json::to_vec(&reply).unwrap()))
                .unwrap(),
        );
        call
    }

    /// A status server-side apply; answers with the object carrying that status.
    pub async fn expect_status_apply(&mut self, obj: &EtcdBackup) -> Value {
        let obj = serde_json::to_value(obj).unwrap();
        let call = self
            .expect(StatusCode::OK, |c| {
                let mut o = obj.clone();
                o["status"] = c.body["status"].clone();
                o
            })
            .await;
        assert_eq!(call.method, Method::PATCH);
        assert_eq!(
            call.path,
            "/apis/etcd.database.coreos.com/v1beta2/namespaces/ns/etcdbackups/b/status"
        );
        assert!(
            call.query.contains("fieldManager=etcd-backup-operator"),
            "{}",
            call.query
        );
        assert!(call.query.contains("force=true"), "{}", call.query);
        call.body["status"].clone()
    }

    /// An events.k8s.io/v1 Event creation; returns the event.
    pub async fn expect_event(&mut self) -> Value {
        let call = self.expect(StatusCode::CREATED, |c| c.body.clone()).await;
        assert_eq!(call.method, Method::POST);
        assert_eq!(call.path, "/apis/events.k8s.io/v1/namespaces/ns/events");
        call.body
    }

    /// A Secret read answered with 404.
    pub async fn expect_secret_missing(&mut self, name: &str) {
        let call = self
            .expect(StatusCode::NOT_FOUND, |_| {
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                       "reason": "NotFound", "code": 404, "message": "secrets not found"})
            })
            .await;
        assert_eq!(call.method, Method::GET);
        assert_eq!(call.path, format!("/api/v1/namespaces/ns/secrets/{name}"));
    }

    /// No further call within a short while.
    pub async fn expect_silence(&mut self) {
        let next = tokio::time::timeout(Duration::from_millis(300), self.0.next_request()).await;
        if let Ok(Some((request, _))) = next {
            panic!(
                "unexpected API call: {} {}",
                request.method(),
                request.uri()
            );
        }
    }
}
