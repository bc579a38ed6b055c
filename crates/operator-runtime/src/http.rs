//! `/metrics`, `/healthz` and `/readyz`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio_util::sync::CancellationToken;

/// Readiness: a leader is ready once its watch cache has synced; a standby replica is ready
/// as soon as it runs, so rolling updates of two replicas can proceed.
#[derive(Default)]
pub struct Health {
    ready: AtomicBool,
}

impl Health {
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }
}

/// Renders the metrics in the OpenMetrics text format.
pub type EncodeMetrics = Arc<dyn Fn() -> String + Send + Sync>;

#[derive(Clone)]
struct AppState {
    metrics: EncodeMetrics,
    health: Arc<Health>,
}

pub fn router(metrics: EncodeMetrics, health: Arc<Health>) -> Router {
    Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(AppState { metrics, health })
}

async fn metrics_text(State(s): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        (s.metrics)(),
    )
}

async fn readyz(State(s): State<AppState>) -> impl IntoResponse {
    if s.health.is_ready() {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

/// Serves until `shutdown` is cancelled.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}
