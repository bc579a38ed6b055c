//! Graceful shutdown: one token every task watches.

use tokio_util::sync::CancellationToken;

/// Cancels `stop` on SIGTERM (Kubernetes stopping the pod) or Ctrl-C.
pub async fn stop_on_signal(stop: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("shutting down");
    stop.cancel();
}
