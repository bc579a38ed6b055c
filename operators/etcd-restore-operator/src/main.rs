//! `etcd-restore-operator`: runs EtcdRestore objects (coreos `etcd.database.coreos.com/v1beta2`).
//! Runs in-cluster or out-of-cluster with `KUBECONFIG`.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use clap::Parser;
use command_line::LogFormat;
use etcd_members::claims::{CATCH_UP_WAIT, Claims};
use etcd_members::origin::{KEY_REFRESH, ProofKey};
use etcd_restore_operator::context::{Context, MANAGER};
use etcd_restore_operator::metrics::Metrics;
use etcd_restore_operator::runner;
use operator_runtime::process::{self, RuntimeArgs};

#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    #[command(flatten)]
    runtime: RuntimeArgs,
    /// The `etcd-backup` image whose `fetch` the restore pods run.
    #[arg(
        long,
        env = "BACKUP_IMAGE",
        default_value = concat!("etcd-backup:", env!("CARGO_PKG_VERSION"))
    )]
    backup_image: String,
    /// Let restores without AWS keys read S3 with the node's identity (instance metadata).
    /// Off: anyone who may create an EtcdRestore could otherwise read whatever that identity
    /// can (another tenant's backups, and the Secrets in them).
    #[arg(long, env = "ALLOW_AMBIENT_CREDENTIALS", default_value_t = false)]
    allow_ambient_credentials: bool,
    /// Seconds a restore pod may take to start a container (be scheduled, get its volumes,
    /// pull its images) before the restore fails with the cause and gives the cluster back.
    #[arg(
        long,
        env = "RESTORE_POD_START_DEADLINE_SECONDS",
        default_value_t = 600
    )]
    restore_pod_start_deadline_seconds: u64,
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    command_line::init_logging(args.log_format, "info");
    let namespace = args.runtime.watch_namespace();
    let metrics = Arc::new(Metrics::default());
    let encode = {
        let metrics = metrics.clone();
        Arc::new(move || metrics.encode())
    };
    let Some(process) = process::start(MANAGER, &args.runtime, encode).await? else {
        return Ok(());
    };
    let client = process.client.clone();
    let identity = Some(process.identity.clone());
    let own_namespace = args.runtime.own_namespace().ok_or_else(|| {
        anyhow::anyhow!("the member pods' proof key lives in the operator's namespace: set POD_NAMESPACE (downward API) or --namespace")
    })?;
    let proof = ProofKey::load_or_create(client.clone(), &own_namespace).await?;
    // A rotated or recreated key is taken up without a restart.
    tokio::spawn({
        let (proof, client, namespace) = (proof.clone(), client.clone(), own_namespace.clone());
        async move { proof.refresh_forever(client, namespace, KEY_REFRESH).await }
    });
    let (claims, claim_feed) = Claims::new(client.clone(), CATCH_UP_WAIT);
    let mut ctx = Context::new(client, identity, metrics, args.backup_image, proof, claims);
    ctx.allow_ambient_credentials = args.allow_ambient_credentials;
    ctx.start_deadline = Duration::from_secs(args.restore_pod_start_deadline_seconds);
    let ctx = Arc::new(ctx);
    tracing::info!(namespace = namespace.unwrap_or("<all>"), "operator started");
    process.health.set_ready(true);
    let running = runner::run(
        ctx,
        namespace,
        args.runtime.watch_selector(),
        claim_feed,
        process.stop.clone(),
    );
    // On a lost Lease the controller is dropped, reconciles in flight with it, instead of
    // being waited for: a standby may lead once the Lease runs out.
    process.until_leadership_lost(running).await;
    Ok(process.finish().await?)
}
