//! `etcd-backup-operator`: watches EtcdBackup objects and runs their backups in-process.
//! Runs in-cluster or out-of-cluster with `KUBECONFIG`.

use std::sync::Arc;

use anyhow::Result;
use clap::Parser;
use command_line::LogFormat;
use etcd_backup_operator::context::{Clock, Context, MANAGER};
use etcd_backup_operator::in_flight::Runs;
use etcd_backup_operator::local::LocalVolume;
use etcd_backup_operator::metrics::Metrics;
use etcd_backup_operator::runner;
use operator_runtime::process::{self, RuntimeArgs};

#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    #[command(flatten)]
    runtime: RuntimeArgs,
    /// Backups running at once, across all EtcdBackups.
    #[arg(long, env = "MAX_CONCURRENT_BACKUPS", default_value_t = 4)]
    max_concurrent_backups: usize,
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// `<namespace>/<claim>` of the PersistentVolumeClaim mounted at --local-volume-dir, for
    /// EtcdBackups with `storageType: Local` in that namespace. Unset: Local is refused.
    #[arg(long, env = "LOCAL_VOLUME_CLAIM")]
    local_volume_claim: Option<String>,
    /// Where that claim is mounted.
    #[arg(long, env = "LOCAL_VOLUME_DIR", default_value = etcd_api::storage::LOCAL_PVC_MOUNT_PATH)]
    local_volume_dir: std::path::PathBuf,
    /// Seconds a deleted EtcdBackup with `deletionPolicy: Delete` waits for its missing S3
    /// Secret (e.g. deleted first with its namespace) before its backups are kept and the
    /// finalizer released, so a namespace deletion never hangs.
    #[arg(long, env = "FINALIZER_TIMEOUT_SECONDS", default_value_t = 300)]
    finalizer_timeout_seconds: u64,
    /// Let EtcdBackups without AWS keys of their own use this operator's AWS identity (IRSA,
    /// instance profile, environment). Off: anyone who may create an EtcdBackup could
    /// otherwise write wherever that identity can.
    #[arg(long, env = "ALLOW_AMBIENT_CREDENTIALS", default_value_t = false)]
    allow_ambient_credentials: bool,
    /// Seconds a shutdown waits for cancelled runs' uploads to be aborted on the server; keep
    /// it under the pod's `terminationGracePeriodSeconds` (30 in deploy/).
    #[arg(long, env = "SHUTDOWN_TIMEOUT_SECONDS", default_value_t = 20)]
    shutdown_timeout_seconds: u64,
    /// The `etcd-backup` image whose `fetch` and `drill-check` the drill pods run.
    #[arg(
        long,
        env = "BACKUP_IMAGE",
        default_value = concat!("etcd-backup:", env!("CARGO_PKG_VERSION"))
    )]
    backup_image: String,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    command_line::init_logging(args.log_format, command_line::DEFAULT_LOG_FILTER);
    let local_volume = match args.local_volume_claim.as_deref().filter(|c| !c.is_empty()) {
        Some(claim) => Some(
            LocalVolume::parse(claim, args.local_volume_dir.clone()).map_err(anyhow::Error::msg)?,
        ),
        None => None,
    };
    let metrics = Arc::new(Metrics::default());
    let encode = {
        let metrics = metrics.clone();
        Arc::new(move || metrics.encode())
    };
    let Some(process) = process::start(MANAGER, &args.runtime, encode).await? else {
        return Ok(());
    };
    let (namespace, selector) = (
        args.runtime.watch_namespace(),
        args.runtime.watch_selector(),
    );
    let runs = Runs::new(args.max_concurrent_backups, process.stop.clone());
    let clock: Clock = Arc::new(chrono::Utc::now);
    let client = process.client.clone();
    let mut ctx = Context::new(client, Some(process.identity.clone()), metrics, runs, clock);
    ctx.local_volume = local_volume;
    ctx.finalizer_timeout = std::time::Duration::from_secs(args.finalizer_timeout_seconds);
    ctx.allow_ambient_credentials = args.allow_ambient_credentials;
    ctx.shutdown_timeout = std::time::Duration::from_secs(args.shutdown_timeout_seconds);
    ctx.backup_image = args.backup_image;
    let ctx = Arc::new(ctx);
    tracing::info!(
        namespace = namespace.unwrap_or("<all>"),
        selector = selector.unwrap_or("<none>"),
        max_concurrent = args.max_concurrent_backups,
        "operator started"
    );
    let (health, stop) = (process.health.clone(), process.stop.clone());
    runner::run(ctx, namespace, selector, health, stop).await;
    Ok(process.finish().await?)
}
