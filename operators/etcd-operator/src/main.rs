//! `etcd-operator`: manages EtcdCluster objects (coreos `etcd.database.coreos.com/v1beta2`).
//! Runs in-cluster or out-of-cluster with `KUBECONFIG`.

use std::sync::Arc;

use anyhow::Result;
use clap::Parser;
use command_line::LogFormat;
use etcd_members::claims::{CATCH_UP_WAIT, Claims};
use etcd_members::origin::{KEY_REFRESH, ProofKey};
use etcd_operator::context::{Context, MANAGER};
use etcd_operator::metrics::Metrics;
use etcd_operator::runner;
use etcd_operator::scope::Scope;
use operator_runtime::process::{self, RuntimeArgs};

#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    #[command(flatten)]
    runtime: RuntimeArgs,
    /// Manage only EtcdClusters annotated `etcd.database.coreos.com/scope: clusterwide`, in
    /// every namespace (coreos `--cluster-wide`). Without it, only those not so annotated.
    #[arg(long, env = "CLUSTER_WIDE", default_value_t = false)]
    cluster_wide: bool,
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    command_line::init_logging(args.log_format, "info");
    let namespace = args.runtime.watch_namespace();
    if args.cluster_wide && namespace.is_some() {
        anyhow::bail!("--cluster-wide manages EtcdClusters in every namespace; drop --namespace");
    }
    let metrics = Arc::new(Metrics::default());
    let encode = {
        let metrics = metrics.clone();
        Arc::new(move || metrics.encode())
    };
    let Some(process) = process::start(MANAGER, &args.runtime, encode).await? else {
        return Ok(());
    };
    let client = process.client.clone();
    let scope = Scope::new(args.cluster_wide);
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
    let ctx = Arc::new(Context::new(
        client, identity, metrics, scope, proof, claims,
    ));
    tracing::info!(
        namespace = namespace.unwrap_or("<all>"),
        cluster_wide = args.cluster_wide,
        "operator started"
    );
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
