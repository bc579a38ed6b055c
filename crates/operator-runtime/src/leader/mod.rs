//! Leader election on a `coordination.k8s.io/v1` Lease, with fencing: only the holder
//! reconciles, and a holder that cannot renew stops before anyone else may take over.
//!
//! The algorithm is client-go's: every `retry` period a standby tries to take the Lease and the
//! holder renews it, both by an optimistic-concurrency update. Times, for a lease duration `D`
//! (15 s by default):
//! - the holder renews every `retry` = 2D/15 (2 s);
//! - a holder that has not renewed for the `renew deadline` = 2D/3 (10 s) counts its
//!   leadership as lost: it stops the controller (no new backups or prunes; runs in flight are
//!   cancelled and their uploads aborted) and exits, to restart as a standby;
//! - a standby takes over a Lease only one duration `D` after it last saw the Lease change, on
//!   its own clock, counted from the end of the read that saw it; the holder's last renewal was
//!   made before that. So the holder has been told to stop `D/3` (5 s) before a standby can
//!   act, whatever the nodes' clocks say. (Told: its backups are cancelled then, and their
//!   aborts may still be under way.) A Lease deleted under a holder is waited out the same way.
//! - A clean shutdown releases the Lease once the controller has wound down, so a standby takes
//!   over within `retry` instead of waiting out `D` (a rollout).
//!
//! kube-lease-manager, used before, exposed no renewal times and kept reporting leadership
//! while renewals failed, so a cut-off holder went on acting.

mod record;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use thiserror::Error;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::http::Health;
use record::Observed;

#[derive(Debug, Error)]
pub enum LeaderError {
    #[error(
        "the leader-election Lease {name} in {namespace} cannot be read or written: {source}; check the RBAC for leases"
    )]
    Lease {
        name: String,
        namespace: String,
        source: kube::Error,
    },
}

/// Where and as whom to hold the Lease.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    pub name: String,
    pub namespace: String,
    pub identity: String,
    /// Seconds the Lease is held without renewal.
    pub duration_seconds: u64,
}

impl LeaseConfig {
    fn duration(&self) -> Duration {
        Duration::from_secs(self.duration_seconds.max(3))
    }

    /// How long a holder goes on without a successful renewal before it stops.
    pub fn renew_deadline(&self) -> Duration {
        self.duration() * 2 / 3
    }

    /// How often the holder renews and a standby tries.
    pub fn retry_period(&self) -> Duration {
        self.duration() * 2 / 15
    }
}

/// What one try at the Lease found.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    /// This replica holds the Lease (taken or renewed).
    Holds,
    /// Another replica holds it and its hold has not expired.
    HeldByOther,
    /// Another write got in first (409): read it again on the next try.
    LostRace,
}

/// One replica's side of the election.
struct Elector {
    api: Api<Lease>,
    config: LeaseConfig,
    observed: Observed,
}

impl Elector {
    /// Takes or renews the Lease.
    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, kube::Error> {
        let (name, me) = (&self.config.name, &self.config.identity);
        let found = self.api.get_opt(name).await?;
        // After the read: a renewal the read saw was made before this instant.
        let now = Instant::now();
        let Some(mut lease) = found else {
            // Deleted under a holder that may still act: wait out its hold, as for an expiry.
            if self
                .observed
                .other_holder_within(me, self.config.duration(), now)
            {
                return Ok(Attempt::HeldByOther);
            }
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(record::taken(
                    None,
                    me,
                    self.config.duration(),
                    Timestamp::now(),
                )),
            };
            return written(self.api.create(&PostParams::default(), &lease).await);
        };
        let spec = lease.spec.clone().unwrap_or_default();
        self.observed.saw(
            lease
                .metadata
                .resource_version
                .as_deref()
                .unwrap_or_default(),
            spec.holder_identity.as_deref(),
            now,
        );
        if let Some(holder) = self
            .observed
            .held_by_other(&spec, me, self.config.duration(), now)
        {
            tracing::debug!(%holder, "the Lease is held by another replica");
            return Ok(Attempt::HeldByOther);
        }
        lease.spec = Some(record::taken(
            Some(&spec),
            me,
            self.config.duration(),
            Timestamp::now(),
        ));
        // The resourceVersion read above makes the update conditional.
        written(self.api.replace(name, &PostParams::default(), &lease).await)
    }

    /// Gives the Lease up if this replica still holds it.
    async fn release(&mut self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.config.name).await? else {
            return Ok(());
        };
        let spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        lease.spec = Some(record::released(&spec, Timestamp::now()));
        written(
            self.api
                .replace(&self.config.name, &PostParams::default(), &lease)
                .await,
        )
        .map(|_| ())
    }
}

fn written<T>(result: Result<T, kube::Error>) -> Result<Attempt, kube::Error> {
    match result {
        Ok(_) => Ok(Attempt::Holds),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(Attempt::LostRace),
        Err(e) => Err(e),
    }
}

/// This replica's leadership, from [`acquire`] until [`Leadership::release`].
pub struct Leadership {
    /// Cancelled when leadership is lost (another holder, or the renew deadline passed); the
    /// caller's `stop` is cancelled with it.
    pub lost: CancellationToken,
    done: CancellationToken,
    holder: JoinHandle<()>,
}

impl Leadership {
    /// Stops renewing and gives the Lease up (unless it was lost), so a standby takes over
    /// at once. Call it after the controller has wound down.
    pub async fn release(self) {
        self.done.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.holder).await;
    }
}

/// Waits until this replica holds the Lease, ready meanwhile. Returns `None` when `stop` is
/// cancelled first. Afterwards the Lease is renewed in the background; if a renewal does not
/// succeed within the renew deadline, or another replica holds the Lease, `Leadership::lost`
/// and `stop` are cancelled, so the process winds down instead of acting without the Lease.
pub async fn acquire(
    client: kube::Client,
    config: &LeaseConfig,
    health: &Arc<Health>,
    stop: &CancellationToken,
) -> Result<Option<Leadership>, LeaderError> {
    let mut elector = Elector {
        api: Api::namespaced(client, &config.namespace),
        config: config.clone(),
        observed: Observed::default(),
    };
    let retry = config.retry_period();
    health.set_ready(true);
    tracing::info!(identity = %config.identity, lease = %config.name, "waiting for leadership");
    let renewed_at = loop {
        let started = Instant::now();
        match tokio::time::timeout(retry, elector.try_acquire_or_renew()).await {
            Ok(Ok(Attempt::Holds)) => break started,
            Ok(Ok(Attempt::HeldByOther | Attempt::LostRace)) => {}
            // A standby that may not read its Lease would wait forever: say so.
            Ok(Err(kube::Error::Api(status))) if status.code == 403 => {
                return Err(LeaderError::Lease {
                    name: config.name.clone(),
                    namespace: config.namespace.clone(),
                    source: kube::Error::Api(status),
                });
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot take the Lease; trying again"),
            Err(_) => tracing::warn!("the API server did not answer in time; trying again"),
        }
        tokio::select! {
            () = tokio::time::sleep(retry) => {}
            () = stop.cancelled() => return Ok(None),
        }
    };
    health.set_ready(false);
    tracing::info!(identity = %config.identity, "became leader");
    let (lost, done) = (CancellationToken::new(), CancellationToken::new());
    let holder = tokio::spawn(hold(
        elector,
        renewed_at,
        lost.clone(),
        stop.clone(),
        done.clone(),
    ));
    Ok(Some(Leadership { lost, done, holder }))
}

/// Renews the Lease until `done`; on losing it, cancels `lost` and `stop`.
async fn hold(
    mut elector: Elector,
    mut renewed_at: Instant,
    lost: CancellationToken,
    stop: CancellationToken,
    done: CancellationToken,
) {
    let (retry, deadline) = (
        elector.config.retry_period(),
        elector.config.renew_deadline(),
    );
    let why = loop {
        let left = deadline.saturating_sub(renewed_at.elapsed());
        tokio::select! {
            () = tokio::time::sleep(retry.min(left)) => {}
            () = done.cancelled() => {
                if let Err(e) = tokio::time::timeout(retry, elector.release()).await.unwrap_or(Ok(())) {
                    tracing::warn!(error = %e, "could not release the Lease; a standby takes over when it expires");
                }
                return;
            }
        }
        let started = Instant::now();
        let left = deadline.saturating_sub(renewed_at.elapsed());
        match tokio::time::timeout(retry.min(left), elector.try_acquire_or_renew()).await {
            Ok(Ok(Attempt::Holds)) => renewed_at = started,
            Ok(Ok(Attempt::HeldByOther)) => break "another replica holds the Lease".to_string(),
            // Perhaps our own renewal that timed out, landing late: read again next time.
            Ok(Ok(Attempt::LostRace)) => tracing::warn!("a Lease renewal lost a write race"),
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot renew the Lease"),
            Err(_) => tracing::warn!("the API server did not answer the Lease renewal in time"),
        }
        if renewed_at.elapsed() >= deadline {
            break format!(
                "the Lease was not renewed for {} s (renew deadline)",
                deadline.as_secs_f64()
            );
        }
    };
    tracing::error!(reason = %why, "lost leadership; stopping before another replica may take over");
    lost.cancel();
    stop.cancel();
}

/// The Lease calls [`acquire`] makes, for the operators' RBAC lists: `(apiGroup, resource,
/// verb)`.
pub const LEASE_CALLS: &[crate::rbac::ApiCall] = &[
    ("coordination.k8s.io", "leases", "get"),
    ("coordination.k8s.io", "leases", "create"),
    ("coordination.k8s.io", "leases", "update"),
];
