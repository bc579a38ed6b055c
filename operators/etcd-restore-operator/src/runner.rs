//! Wires the controller: EtcdRestores (one namespace or all, optionally only those matching a
//! label selector; spec changes only, so the controller's own status writes do not trigger
//! reconciles) feed reconcile, and so do the restore's own pods, the cluster it restores (its
//! operator reporting the pause) and that cluster's member pods (turning ready): an EtcdRestore
//! is named like its cluster, so its waits end when the world changes, not at the next requeue.
//! The claim cache's watch runs beside it. A deleted restore's retry state and series go with
//! it.

use std::sync::Arc;

use etcd_api::{EtcdCluster, EtcdRestore};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::core::DeserializeGuard;
use kube::runtime::{Controller, watcher};
use operator_runtime::process;
use tokio_util::sync::CancellationToken;

use crate::context::Context;
use crate::controller::{error_policy, reconcile, restore_of_cluster, restore_of_member};
use etcd_members::claims::ClaimFeed;

/// Runs the controller until `stop` is cancelled.
pub async fn run(
    ctx: Arc<Context>,
    namespace: Option<&str>,
    selector: Option<&str>,
    claim_feed: ClaimFeed,
    stop: CancellationToken,
) {
    let client = ctx.client.clone();
    // The claim cache's watch, as long as the controller runs.
    let _watching_claims = claim_feed.spawn(client.clone(), namespace.map(String::from));
    // Guarded: an object this operator cannot read is handed over as such, rather than failing
    // the watch of every restore (or every cluster).
    let (restores, pods, clusters): (
        Api<DeserializeGuard<EtcdRestore>>,
        Api<Pod>,
        Api<DeserializeGuard<EtcdCluster>>,
    ) = match namespace {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client, ns),
        ),
        None => (
            Api::all(client.clone()),
            Api::all(client.clone()),
            Api::all(client),
        ),
    };
    let forget = |ctx: Arc<Context>| {
        move |gone: process::Gone<'_, DeserializeGuard<EtcdRestore>>| {
            ctx.claims.forget(&gone);
            process::forget_gone(gone, &ctx.backoff, &*ctx.metrics)
        }
    };
    let (reader, spec_changes) = process::spec_changes(restores, selector, forget(ctx.clone()));
    let store = reader.clone();
    let forget_deleted = forget(ctx.clone());
    Controller::for_stream(spec_changes, reader)
        .owns(
            pods.clone(),
            watcher::Config::default().labels("app=etcd-restore"),
        )
        .watches(
            pods,
            watcher::Config::default().labels("app=etcd"),
            restore_of_member,
        )
        .watches(clusters, watcher::Config::default(), restore_of_cluster)
        .graceful_shutdown_on(async move { stop.cancelled().await })
        .run(reconcile, error_policy, ctx)
        .for_each(|result| {
            process::forget_if_deleted(&store, &result, &forget_deleted);
            if let Err(error) = result {
                tracing::debug!(%error, "reconcile");
            }
            std::future::ready(())
        })
        .await;
}
