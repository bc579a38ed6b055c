//! Wires the controller and the claim cache's watch: EtcdClusters (one namespace or all, optionally only those matching a
//! label selector; spec changes only, so the operator's own status writes do not trigger
//! reconciles) and their member pods feed reconcile; a deleted cluster's retry state and series
//! go with it.

use std::sync::Arc;

use etcd_api::EtcdCluster;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::core::DeserializeGuard;
use kube::runtime::{Controller, watcher};
use operator_runtime::process;
use tokio_util::sync::CancellationToken;

use crate::context::Context;
use crate::controller::{error_policy, reconcile};
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
    // Guarded: an object this operator cannot read is handed to reconcile as such, rather than
    // failing the watch of every cluster.
    let (clusters, pods): (Api<DeserializeGuard<EtcdCluster>>, Api<Pod>) = match namespace {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client, ns),
        ),
        None => (Api::all(client.clone()), Api::all(client)),
    };
    let forget = |ctx: Arc<Context>| {
        move |gone: process::Gone<'_, DeserializeGuard<EtcdCluster>>| {
            ctx.claims.forget(&gone);
            process::forget_gone(gone, &ctx.backoff, &*ctx.metrics)
        }
    };
    let (reader, spec_changes) = process::spec_changes(clusters, selector, forget(ctx.clone()));
    let store = reader.clone();
    let forget_deleted = forget(ctx.clone());
    // Member pods, the periodic requeue and errors trigger reconciles too.
    Controller::for_stream(spec_changes, reader)
        .owns(pods, watcher::Config::default().labels("app=etcd"))
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
