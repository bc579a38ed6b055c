//! What every reconcile of an EtcdRestore is given (the client, events, metrics, the proof
//! key, the deployment's choices) and the errors it can end with.

use std::sync::Arc;
use std::time::Duration;

use etcd_members::claims::Claims;
use etcd_members::origin::ProofKey;
use operator_runtime::backoff::PerObject;
use operator_runtime::events::Events;
use operator_runtime::reconcile_errors::ReconcileError;
use thiserror::Error;

use crate::metrics::Metrics;

/// How long a restore pod may take to start a container (be scheduled, get its volumes
/// attached, pull its images) before the restore fails with the cause, by default: a pod that
/// is never scheduled (no node fits, or the backups' ReadWriteOnce claim is attached on
/// another node) would otherwise hold the cluster paused with no end.
pub const START_DEADLINE: Duration = Duration::from_secs(10 * 60);

pub const MANAGER: &str = "etcd-restore-operator";

#[derive(Debug, Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The API server refused to make an object (Pod Security, a ResourceQuota, an admission
    /// webhook: 403; an invalid object: 422). Retrying the same request cannot help.
    #[error("{what} refused by the API server: {message}")]
    Refused { what: String, message: String },
    #[error(transparent)]
    Origin(#[from] etcd_members::origin::MakeError),
    /// A step was planned without what it acts on, or with a recorded plan that does not hold
    /// (a bug, or a status edited by hand): nothing is done, the reconcile is retried.
    #[error("the step cannot be carried out: {0}")]
    NotAsPlanned(String),
}

impl ReconcileError for Error {
    fn reason(&self) -> &'static str {
        match self {
            Error::Kube(_) => "KubernetesApi",
            Error::Refused { .. } => "Refused",
            Error::Origin(e) => e.reason(),
            Error::NotAsPlanned(_) => "NotAsPlanned",
        }
    }
}

pub struct Context {
    pub client: kube::Client,
    pub events: Events,
    pub metrics: Arc<Metrics>,
    /// The `etcd-backup` image the fetch containers run.
    pub backup_image: String,
    /// Retry delays of restores whose reconcile keeps failing.
    pub backoff: PerObject,
    /// Restores without AWS keys may read S3 with the node's identity (the deployment's
    /// explicit choice, `--allow-ambient-credentials`; off by default).
    pub allow_ambient_credentials: bool,
    /// How long a restore pod may take to start a container (`START_DEADLINE`
    /// unless the deployment says otherwise).
    pub start_deadline: Duration,
    /// Proves the member pods it makes (the EtcdCluster operator takes only proven pods for
    /// members), and checks those it finds.
    pub proof: ProofKey,
    /// The claims, from a watch; every claim write goes through it.
    pub claims: Claims,
}

impl Context {
    pub fn new(
        client: kube::Client,
        instance: Option<String>,
        metrics: Arc<Metrics>,
        backup_image: String,
        proof: ProofKey,
        claims: Claims,
    ) -> Context {
        Context {
            events: Events::new(client.clone(), MANAGER, instance),
            client,
            metrics,
            backup_image,
            backoff: PerObject::default(),
            allow_ambient_credentials: false,
            start_deadline: START_DEADLINE,
            proof,
            claims,
        }
    }
}
