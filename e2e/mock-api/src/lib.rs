//! A tower-test mock API server for reconcile tests: each test states the calls it expects, in
//! order, with their bodies checked; a missing, extra or different call fails the test. The
//! operators' fixtures add their own object-specific helpers on top.

use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

/// A client whose every request goes to the returned mock server.
pub fn pair() -> (Client, MockApi) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), MockApi(handle))
}

/// A recorded request.
#[derive(Debug)]
pub struct Call {
    pub method: Method,
    pub path: String,
    pub query: String,
    pub body: Value,
}

pub struct MockApi(Handle);

impl MockApi {
    /// Waits for the next request and answers it with `status` and `reply`.
    pub async fn expect(&mut self, status: StatusCode, reply: impl FnOnce(&Call) -> Value) -> Call {
        self.respond(status, |call| serde_json::to_vec(&reply(call)).unwrap())
            .await
    }

    /// The next request must be a GET of `path` (a pod's log), answered with plain `text`.
    pub async fn expect_text(&mut self, path: &str, text: &str) -> Call {
        let call = self
            .respond(StatusCode::OK, |_| text.as_bytes().to_vec())
            .await;
        assert_eq!(
            (&call.method, call.path.as_str()),
            (&Method::GET, path),
            "unexpected call {call:?}"
        );
        call
    }

    /// Waits for the next request and answers it with `status` and the bytes `reply` makes.
    async fn respond(&mut self, status: StatusCode, reply: impl FnOnce(&Call) -> Vec<u8>) -> Call {
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
                .body(Body::from(reply))
                .unwrap(),
        );
        call
    }

    /// The next request must be `method` on `path`; answered with `reply`.
    pub async fn expect_call(
        &mut self,
        method: Method,
        path: &str,
        status: StatusCode,
        reply: impl FnOnce(&Call) -> Value,
    ) -> Call {
        let call = self.expect(status, reply).await;
        assert_eq!(
            (&call.method, call.path.as_str()),
            (&method, path),
            "unexpected call {call:?}"
        );
        call
    }

    /// A server-side apply (PATCH with a field manager, forced) of `path`, answered with the
    /// applied body; returns that body.
    pub async fn expect_apply(&mut self, path: &str, manager: &str) -> Value {
        self.expect_apply_answering(path, manager, |c| c.body.clone())
            .await
    }

    /// A server-side apply of a status subresource, answered with `object` carrying the
    /// applied status; returns the applied body.
    pub async fn expect_status_apply(
        &mut self,
        path: &str,
        manager: &str,
        object: &Value,
    ) -> Value {
        self.expect_apply_answering(path, manager, |c| {
            let mut o = object.clone();
            o["status"] = c.body["status"].clone();
            o
        })
        .await
    }

    async fn expect_apply_answering(
        &mut self,
        path: &str,
        manager: &str,
        reply: impl FnOnce(&Call) -> Value,
    ) -> Value {
        let call = self
            .expect_call(Method::PATCH, path, StatusCode::OK, reply)
            .await;
        assert!(
            call.query.contains(&format!("fieldManager={manager}")),
            "{}",
            call.query
        );
        assert!(call.query.contains("force=true"), "{}", call.query);
        call.body
    }

    /// An events.k8s.io/v1 Event creation in `namespace`; returns the event.
    pub async fn expect_event(&mut self, namespace: &str) -> Value {
        let path = format!("/apis/events.k8s.io/v1/namespaces/{namespace}/events");
        self.expect_call(Method::POST, &path, StatusCode::CREATED, |c| c.body.clone())
            .await
            .body
    }

    /// A list of `path` answered with `items`.
    pub async fn expect_list(&mut self, path: &str, items: Vec<Value>) -> Call {
        self.expect_call(Method::GET, path, StatusCode::OK, |_| {
            json!({"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": items})
        })
        .await
    }

    /// A 404 answer to the next request, which must be `method` on `path`.
    pub async fn expect_not_found(&mut self, method: Method, path: &str) -> Call {
        self.expect_call(method, path, StatusCode::NOT_FOUND, |_| {
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                   "reason": "NotFound", "code": 404, "message": "not found"})
        })
        .await
    }

    /// No further call within a short while (use after the code under test has returned).
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

/// The requeue delay of a reconcile's Action in seconds, for error-policy tests (kube keeps it
/// private; its Debug shows it).
pub fn requeue_seconds(action: &kube::runtime::controller::Action) -> f64 {
    let text = format!("{action:?}");
    let delay = text
        .split("Some(")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap_or_else(|| panic!("no requeue in {text}"));
    let (number, scale) = if let Some(ms) = delay.strip_suffix("ms") {
        (ms, 1e-3)
    } else if let Some(us) = delay.strip_suffix("µs") {
        (us, 1e-6)
    } else {
        (delay.strip_suffix('s').expect("a Duration's Debug"), 1.0)
    };
    number.parse::<f64>().expect("a Duration's Debug") * scale
}

/// Asserts that `retry` (one more failure's requeue delay, in seconds) backs off: the first
/// retry comes soon, and nine failures later the delay has grown to 10 s or more.
pub fn assert_backs_off(mut retry: impl FnMut() -> f64) {
    let first = retry();
    let mut last = first;
    for _ in 0..8 {
        last = retry();
    }
    assert!(first <= 2.0, "first retry after {first} s");
    assert!(last >= 10.0, "after 9 failures still {last} s");
}
