//! `etcd-operator`: manages EtcdCluster objects (coreos `etcd.database.coreos.com/v1beta2`).
//! Runs in-cluster or out-of-cluster with `KUBECONFIG`.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use backup_api::EtcdCluster;
use backup_cli::LogFormat;
use clap::Parser;
use etcd_operator::controller::{self, Context, MANAGER};
use etcd_operator::metrics::Metrics;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{self, reflector};
use kube::runtime::{Controller, WatchStreamExt, predicates, watcher};
use kube::{Api, Client};
use operator_runtime::http::{self, Health};
use operator_runtime::leader::{self, LeaseConfig};
use operator_runtime::shutdown::stop_on_signal;
use tokio_util::sync::CancellationToken;

#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Watch EtcdClusters in this namespace only; empty watches all namespaces.
    #[arg(long, env = "WATCH_NAMESPACE", default_value = "")]
    namespace: String,
    /// Watch only EtcdClusters whose labels match this selector; empty watches all.
    #[arg(long, env = "WATCH_SELECTOR", default_value = "")]
    selector: String,
    /// Address of the /metrics, /healthz and /readyz server.
    #[arg(long, env = "LISTEN_ADDRESS", default_value = "0.0.0.0:8080")]
    listen: SocketAddr,
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Elect a leader through a Lease so that replicas never act on one cluster together.
    #[arg(long, env = "LEADER_ELECTION", default_value_t = false)]
    leader_election: bool,
    #[arg(long, env = "LEASE_NAME", default_value = "etcd-operator")]
    lease_name: String,
    #[arg(long, env = "POD_NAMESPACE")]
    lease_namespace: Option<String>,
    #[arg(long, env = "POD_NAME")]
    pod_name: Option<String>,
    #[arg(long, env = "LEASE_DURATION_SECONDS", default_value_t = 15)]
    lease_duration_seconds: u64,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    backup_cli::init_logging(args.log_format, "info");
    let client = Client::try_default()
        .await
        .context("no Kubernetes configuration: set KUBECONFIG or run in a pod")?;
    let stop = CancellationToken::new();
    tokio::spawn(stop_on_signal(stop.clone()));
    let metrics = Arc::new(Metrics::default());
    let health = Arc::new(Health::default());
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let encode = {
        let metrics = metrics.clone();
        Arc::new(move || metrics.encode())
    };
    let server = tokio::spawn(http::serve(
        listener,
        http::router(encode, health.clone()),
        stop.clone(),
    ));

    let identity = args
        .pod_name
        .clone()
        .unwrap_or_else(|| format!("{MANAGER}-{}", std::process::id()));
    let namespace = Some(args.namespace.as_str()).filter(|n| !n.is_empty());
    let leadership = if args.leader_election {
        let lease = LeaseConfig {
            name: args.lease_name.clone(),
            namespace: args
                .lease_namespace
                .clone()
                .or_else(|| namespace.map(str::to_string))
                .context("leader election needs --lease-namespace (POD_NAMESPACE)")?,
            identity: identity.clone(),
            duration_seconds: args.lease_duration_seconds,
        };
        match leader::acquire(client.clone(), &lease, &health, &stop).await? {
            Some(leadership) => Some(leadership),
            None => return Ok(()),
        }
    } else {
        None
    };

    let (clusters, pods): (Api<EtcdCluster>, Api<Pod>) = match namespace {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
        ),
        None => (Api::all(client.clone()), Api::all(client.clone())),
    };
    let mut config = watcher::Config::default();
    if !args.selector.is_empty() {
        config = config.labels(&args.selector);
    }
    let ctx = Arc::new(Context::new(client, Some(identity), metrics));
    tracing::info!(namespace = namespace.unwrap_or("<all>"), "operator started");
    health.set_ready(true);
    let shutdown = stop.clone();
    // Spec changes only (generation): the operator's own status writes must not trigger
    // reconciles; member pods, the periodic requeue and errors do.
    let (reader, writer) = reflector::store();
    let spec_changes = reflector(writer, watcher(clusters, config))
        .default_backoff()
        .applied_objects()
        .predicate_filter(predicates::generation, Default::default());
    Controller::for_stream(spec_changes, reader)
        .owns(pods, watcher::Config::default().labels("app=etcd"))
        .graceful_shutdown_on(async move { shutdown.cancelled().await })
        .run(controller::reconcile, controller::error_policy, ctx)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "reconcile");
            }
        })
        .await;
    stop.cancel();
    let _ = server.await;
    if let Some(leadership) = leadership
        && leadership.lost.is_cancelled()
    {
        anyhow::bail!("leadership lost");
    }
    Ok(())
}
