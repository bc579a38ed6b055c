//! Leader election on a `coordination.k8s.io/v1` Lease (kube-lease-manager): only the holder
//! reconciles; a standby is healthy and ready and only waits.

use std::sync::Arc;

use kube_lease_manager::{LeaseManagerBuilder, LeaseParams};
use thiserror::Error;
use tokio_util::sync::CancellationToken;

use crate::http::Health;

#[derive(Debug, Error)]
pub enum LeaderError {
    #[error("cannot set up the leader-election Lease {name} in {namespace}: {source}")]
    Lease {
        name: String,
        namespace: String,
        source: kube_lease_manager::LeaseManagerError,
    },
}

/// Where and as whom to hold the Lease.
pub struct LeaseConfig {
    pub name: String,
    pub namespace: String,
    pub identity: String,
    /// Seconds the Lease is held without renewal; renewed every third of it.
    pub duration_seconds: u64,
}

/// Holds leadership until dropped.
pub struct Leadership {
    /// Cancelled when leadership is lost (the caller's `stop` is cancelled too).
    pub lost: CancellationToken,
    _task: tokio::task::JoinHandle<kube_lease_manager::Result<kube_lease_manager::LeaseManager>>,
}

/// Waits until this replica holds the Lease, ready meanwhile. Returns `None` when `stop` is
/// cancelled first. On losing the Lease later, `Leadership::lost` and `stop` are cancelled,
/// so the process winds down instead of acting without the Lease.
pub async fn acquire(
    client: kube::Client,
    config: &LeaseConfig,
    health: &Arc<Health>,
    stop: &CancellationToken,
) -> Result<Option<Leadership>, LeaderError> {
    let manager = LeaseManagerBuilder::new(client, &config.name)
        .with_namespace(&config.namespace)
        .with_parameters(LeaseParams::new(
            &config.identity,
            config.duration_seconds,
            (config.duration_seconds / 3).max(1),
        ))
        .build()
        .await
        .map_err(|source| LeaderError::Lease {
            name: config.name.clone(),
            namespace: config.namespace.clone(),
            source,
        })?;
    let (mut leader, task) = manager.watch().await;
    health.set_ready(true);
    tracing::info!(identity = %config.identity, lease = %config.name, "waiting for leadership");
    tokio::select! {
        _ = leader.wait_for(|l| *l) => {}
        () = stop.cancelled() => return Ok(None),
    }
    health.set_ready(false);
    tracing::info!(identity = %config.identity, "became leader");
    let lost = CancellationToken::new();
    let (flag, stop) = (lost.clone(), stop.clone());
    tokio::spawn(async move {
        if leader.wait_for(|l| !*l).await.is_ok() {
            tracing::error!("lost leadership; stopping");
        }
        flag.cancel();
        stop.cancel();
    });
    Ok(Some(Leadership { lost, _task: task }))
}

/// The Lease calls [`acquire`] makes (through kube-lease-manager), for the operators' RBAC
/// lists: `(apiGroup, resource, verb)`.
pub const LEASE_CALLS: &[(&str, &str, &str)] = &[
    ("coordination.k8s.io", "leases", "get"),
    ("coordination.k8s.io", "leases", "create"),
    ("coordination.k8s.io", "leases", "patch"),
];
