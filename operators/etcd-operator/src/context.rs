//! What every stage of a reconcile shares: the operator's [`Context`], its [`Error`], and the
//! one path events take.

use std::sync::Arc;

use etcd_api::EtcdCluster;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::{Resource, ResourceExt};
use operator_runtime::backoff::PerObject;
use operator_runtime::events::Events;
use operator_runtime::reconcile_errors::ReconcileError;
use thiserror::Error;

use crate::metrics::Metrics;
use crate::scope::Scope;
use etcd_members::claims::Claims;
use etcd_members::labels::RESTORED_BY_ANNOTATION;
use etcd_members::origin::{self, ProofKey};

pub const MANAGER: &str = "etcd-operator";

#[derive(Debug, Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("etcd: {0}")]
    Etcd(#[from] etcd_client::Error),
    #[error(transparent)]
    Origin(#[from] origin::MakeError),
    #[error("no member answers to carry out {0}")]
    NoMember(&'static str),
    #[error(
        "claim {0} exists but is not this cluster's (no etcd_cluster label for it): the member \
         is not started on data that may belong to something else; rename or delete that claim"
    )]
    ForeignClaim(String),
}

impl ReconcileError for Error {
    fn reason(&self) -> &'static str {
        match self {
            Error::Kube(_) => "KubernetesApi",
            Error::Etcd(_) => "Etcd",
            Error::Origin(e) => e.reason(),
            Error::NoMember(_) => "NoMemberAnswers",
            Error::ForeignClaim(_) => "ForeignClaim",
        }
    }
}

pub struct Context {
    pub client: kube::Client,
    pub events: Events,
    pub metrics: Arc<Metrics>,
    /// Which clusters are this operator's (the coreos scope annotation).
    pub scope: Scope,
    /// Retry delays of clusters whose reconcile keeps failing.
    pub backoff: PerObject,
    /// Proves the member pods it makes, and checks those it finds.
    pub proof: ProofKey,
    /// The claims, from a watch; every claim write goes through it.
    pub claims: Claims,
}

impl Context {
    pub fn new(
        client: kube::Client,
        instance: Option<String>,
        metrics: Arc<Metrics>,
        scope: Scope,
        proof: ProofKey,
        claims: Claims,
    ) -> Context {
        Context {
            events: Events::new(client.clone(), MANAGER, instance),
            client,
            metrics,
            scope,
            backoff: PerObject::default(),
            proof,
            claims,
        }
    }

    /// Every claim of `cluster`'s namespace (see `etcd_members::claims`). Listed live on its
    /// first reconcile and the first after its spec or its restore hand-over changed: another
    /// actor (a restore handing over, a user) may have changed claims just before it changed
    /// the cluster, and the claim watch is not ordered with the cluster's. From the cache
    /// otherwise.
    pub async fn claims_of(
        &self,
        cluster: &EtcdCluster,
    ) -> Result<Vec<PersistentVolumeClaim>, kube::Error> {
        let restored_by = cluster.annotations().get(RESTORED_BY_ANNOTATION);
        let look = format!("{:?} {restored_by:?}", cluster.metadata.generation);
        let uid = cluster.uid().unwrap_or_default();
        let namespace = cluster.namespace().unwrap_or_default();
        self.claims.for_object(&namespace, &uid, look).await
    }
}

pub(crate) fn ignore_missing(result: Result<(), kube::Error>) -> Result<(), Error> {
    match result {
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        other => Ok(other?),
    }
}

pub(crate) async fn event(ctx: &Context, cluster: &EtcdCluster, reason: &str, note: &str) {
    ctx.events
        .normal(&cluster.object_ref(&()), reason, note)
        .await;
}

pub(crate) async fn warn(ctx: &Context, cluster: &EtcdCluster, reason: &str, note: &str) {
    ctx.events
        .warning(&cluster.object_ref(&()), reason, note)
        .await;
}
