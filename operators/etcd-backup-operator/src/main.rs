//! `etcd-backup-operator`: watches EtcdBackup objects and runs their backups in-process.
//! Runs in-cluster or out-of-cluster with `KUBECONFIG`.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use backup_cli::LogFormat;
use clap::Parser;
use etcd_backup_operator::controller::{Clock, Context, MANAGER};
use etcd_backup_operator::local::LocalVolume;
use etcd_backup_operator::metrics::Metrics;
use etcd_backup_operator::runner;
use etcd_backup_operator::runs::Runs;
use kube::Client;
use operator_runtime::http::{self, Health};
use operator_runtime::leader::{self, LeaseConfig};
use operator_runtime::shutdown::stop_on_signal;
use tokio_util::sync::CancellationToken;

/// The AWS SDK logs credential sources at info, access key ID included; keep it quiet.
const DEFAULT_LOG_FILTER: &str = "info,aws_config=warn";

#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Watch EtcdBackups in this namespace only; empty watches all namespaces.
    #[arg(long, env = "WATCH_NAMESPACE", default_value = "")]
    namespace: String,
    /// Watch only EtcdBackups whose labels match this selector (e.g. `team=a`), to split
    /// objects between operator deployments; empty watches all.
    #[arg(long, env = "WATCH_SELECTOR", default_value = "")]
    selector: String,
    /// Backups running at once, across all EtcdBackups.
    #[arg(long, env = "MAX_CONCURRENT_BACKUPS", default_value_t = 4)]
    max_concurrent_backups: usize,
    /// Address of the /metrics, /healthz and /readyz server.
    #[arg(long, env = "LISTEN_ADDRESS", default_value = "0.0.0.0:8080")]
    listen: SocketAddr,
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Elect a leader through a Lease so that replicas never back up the same object twice.
    #[arg(long, env = "LEADER_ELECTION", default_value_t = false)]
    leader_election: bool,
    /// Name of the Lease.
    #[arg(long, env = "LEASE_NAME", default_value = "etcd-backup-operator")]
    lease_name: String,
    /// Namespace of the Lease; defaults to the pod's namespace (downward API).
    #[arg(long, env = "POD_NAMESPACE")]
    lease_namespace: Option<String>,
    /// This replica's identity in the Lease and in events (downward API pod name).
    #[arg(long, env = "POD_NAME")]
    pod_name: Option<String>,
    /// `<namespace>/<claim>` of the PersistentVolumeClaim mounted at --local-volume-dir, for
    /// EtcdBackups with `storageType: Local` in that namespace. Unset: Local is refused.
    #[arg(long, env = "LOCAL_VOLUME_CLAIM")]
    local_volume_claim: Option<String>,
    /// Where that claim is mounted.
    #[arg(long, env = "LOCAL_VOLUME_DIR", default_value = backup_api::storage::LOCAL_PVC_MOUNT_PATH)]
    local_volume_dir: std::path::PathBuf,
    /// Seconds a Lease is held without renewal.
    #[arg(long, env = "LEASE_DURATION_SECONDS", default_value_t = 15)]
    lease_duration_seconds: u64,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    backup_cli::init_logging(args.log_format, DEFAULT_LOG_FILTER);
    let local_volume = match args.local_volume_claim.as_deref().filter(|c| !c.is_empty()) {
        Some(claim) => Some(
            LocalVolume::parse(claim, args.local_volume_dir.clone()).map_err(anyhow::Error::msg)?,
        ),
        None => None,
    };
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
    let selector = Some(args.selector.as_str()).filter(|s| !s.is_empty());
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

    let runs = Runs::new(args.max_concurrent_backups, stop.clone());
    let clock: Clock = Arc::new(chrono::Utc::now);
    let mut ctx = Context::new(client, Some(identity), metrics, runs, clock);
    ctx.local_volume = local_volume;
    let ctx = Arc::new(ctx);
    tracing::info!(
        namespace = namespace.unwrap_or("<all>"),
        selector = selector.unwrap_or("<none>"),
        max_concurrent = args.max_concurrent_backups,
        "operator started"
    );
    runner::run(ctx, namespace, selector, health, stop.clone()).await;
    let _ = server.await;
    if let Some(leadership) = leadership
        && leadership.lost.is_cancelled()
    {
        anyhow::bail!("leadership lost");
    }
    Ok(())
}
