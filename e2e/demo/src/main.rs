//! The whole product on this machine (`e2e/demo.sh`): the kubelet bed, Garage S3 on the bridge,
//! the three operators from their images with their shipped manifests, then a 3-member
//! EtcdCluster with keys, a scheduled EtcdBackup, a disaster, an EtcdRestore, and every key back
//! in a cluster the EtcdCluster operator runs again. Prints what it does with timings.
//!
//! `demo [--keep]`: with `--keep` the namespace and the bed stay up until Ctrl-C, and it prints
//! how to connect. Exits 3 when the bed cannot start (the script then runs the CLI walk-through).

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use etcd_api::{EtcdBackup, EtcdCluster, EtcdRestore};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use testbed::Garage;
use testbed::cluster::{converged, deploy_manifests, host_address, kubectl};
use testbed::kube::{KubeTestbed, wait_until};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
const CLUSTER: &str = "example-etcd-cluster";
const BACKUP: &str = "example-etcd-cluster-periodic-backup";
const KEYS: usize = 1000;
/// Tells `e2e/demo.sh` the bed could not start.
const NO_BED: u8 = 3;

fn example(name: &str) -> Result<Value> {
    let path = format!("{ROOT}/examples/coreos/{name}");
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    Ok(serde_saphyr::from_str(&text)?)
}

/// Prints a step and keeps its duration for the summary.
struct Steps {
    started: Instant,
    current: Option<(String, Instant)>,
    done: Vec<(String, f64)>,
}

impl Steps {
    fn next(&mut self, title: &str) {
        self.finish();
        println!("\n\x1b[1m== {title}\x1b[0m");
        self.current = Some((title.to_string(), Instant::now()));
    }

    fn finish(&mut self) {
        if let Some((title, at)) = self.current.take() {
            self.done.push((title, at.elapsed().as_secs_f64()));
        }
    }
}

fn show(kube: &KubeTestbed, ns: &str, what: &str) {
    let _ = kubectl(&kube.kubeconfig)
        .args(["--namespace", ns, "get", what])
        .status();
}

async fn member_pods(kube: &KubeTestbed, ns: &str) -> Result<Vec<Pod>> {
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    let selector = format!("etcd_cluster={CLUSTER}");
    let mut pods = pods
        .list(&ListParams::default().labels(&selector))
        .await?
        .items;
    // Old members' pods can stay Terminating for a while after the disaster.
    pods.retain(|p| p.metadata.deletion_timestamp.is_none());
    Ok(pods)
}

/// The number of keys under `/demo/`, read from a member pod over the pod network.
async fn count_keys(kube: &KubeTestbed, ns: &str) -> Result<usize> {
    let pods = member_pods(kube, ns).await?;
    let ip = pods
        .iter()
        .find_map(|p| p.status.as_ref()?.pod_ip.clone())
        .context("no member pod has an IP")?;
    let mut etcd = etcd_client::Client::connect([format!("http://{ip}:2379")], None).await?;
    let options = etcd_client::GetOptions::new()
        .with_prefix()
        .with_count_only();
    Ok(etcd.get("/demo/", Some(options)).await?.count() as usize)
}

#[tokio::main]
async fn main() -> ExitCode {
    let keep = std::env::args().any(|a| a == "--keep");
    let mut steps = Steps {
        started: Instant::now(),
        current: None,
        done: Vec::new(),
    };
    steps.next("starting the Kubernetes bed (kubelet, containerd, this build's images)");
    let kube = match KubeTestbed::with_kubelet().await {
        Ok(kube) => kube,
        Err(e) => {
            let reason = format!("{e:#}");
            let line = reason.lines().last().unwrap_or_default().to_string();
            eprintln!("demo: the Kubernetes bed could not start: {line}");
            return ExitCode::from(NO_BED);
        }
    };
    match run(&kube, &mut steps, keep).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("demo: FAILED: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(kube: &KubeTestbed, steps: &mut Steps, keep: bool) -> Result<()> {
    kube.install_crds().await?;
    let ns = kube.namespace("etcd-demo").await?;
    let garage = Garage::start_on(&host_address()).await?;
    println!("namespace {ns}; S3 (Garage) at {}", garage.endpoint);

    steps.next("installing the three operators from their images with the shipped manifests");
    // The all-in-one overlay users apply (`kubectl apply -k deploy/namespaced/`), moved to the
    // demo's namespace with this build's images. The bed installed the CRDs and made the
    // namespace, which enforces Pod Security "restricted" for the operators and their pods.
    let mut manifests = deploy_manifests(format!("{ROOT}/deploy/namespaced").as_ref(), &ns)?;
    manifests.retain(|d| d["kind"] != "CustomResourceDefinition" && d["kind"] != "Namespace");
    kube.apply(&manifests, &ns).await?;
    let deployments: Api<Deployment> = Api::namespaced(kube.client.clone(), &ns);
    for name in [
        "etcd-operator",
        "etcd-backup-operator",
        "etcd-restore-operator",
    ] {
        let ready = |d: &Deployment| d.status.as_ref().and_then(|s| s.ready_replicas) >= Some(1);
        wait_until(&deployments, name, "a ready operator", 300, ready).await?;
    }
    show(kube, &ns, "deployments");

    steps.next("1. the coreos example EtcdCluster: 3 members, a claim each, etcd 3.7.3");
    let mut cluster = example("example-etcd-cluster.yaml")?;
    cluster["spec"]["repository"] = json!("localhost/etcd");
    cluster["spec"]["version"] = json!("3.7.3");
    cluster["spec"]["pod"] = json!({"persistentVolumeClaimSpec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}}});
    let cluster: EtcdCluster = serde_json::from_value(cluster)?;
    let clusters: Api<EtcdCluster> = Api::namespaced(kube.client.clone(), &ns);
    clusters.create(&PostParams::default(), &cluster).await?;
    wait_until(&clusters, CLUSTER, "3 ready members", 300, converged(3)).await?;
    let pods = member_pods(kube, &ns).await?;
    let ip = pods[0]
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .context("pod IP")?;
    let mut etcd = etcd_client::Client::connect([format!("http://{ip}:2379")], None).await?;
    for i in 0..KEYS {
        etcd.put(format!("/demo/key-{i:04}"), format!("value-{i}"), None)
            .await?;
    }
    println!("wrote {KEYS} keys under /demo/");
    show(kube, &ns, "etcdclusters,pods,pvc");

    steps
        .next("2. a scheduled EtcdBackup to S3 (cron every minute, maxBackups 2): waiting for two");
    let mut secret = example("aws-secret.yaml")?;
    secret["stringData"] = garage.aws_secret("aws")["stringData"].clone();
    let secret: Secret = serde_json::from_value(secret)?;
    Api::<Secret>::namespaced(kube.client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await?;
    let mut backup = example("etcd-backup-periodic.yaml")?;
    backup["spec"]["backupPolicy"] = json!({"schedule": "* * * * *", "maxBackups": 2});
    backup["spec"]["s3"]["path"] = json!(format!("{}/demo/etcd.backup", garage.bucket));
    backup["spec"]["s3"]["endpoint"] = json!(garage.endpoint);
    backup["spec"]["s3"]["forcePathStyle"] = json!(true);
    let backup: EtcdBackup = serde_json::from_value(backup)?;
    let backups: Api<EtcdBackup> = Api::namespaced(kube.client.clone(), &ns);
    backups.create(&PostParams::default(), &backup).await?;
    let mut seen = BTreeSet::new();
    let newest = loop {
        let last = |b: &EtcdBackup| {
            b.status
                .as_ref()
                .and_then(|s| s.last_backup.as_ref())
                .map(|l| l.object_key.clone())
        };
        let not_seen = {
            let seen = seen.clone();
            move |b: &EtcdBackup| last(b).is_some_and(|k| !seen.contains(&k))
        };
        let found = wait_until(&backups, BACKUP, "a new backup", 180, not_seen).await?;
        let key = last(&found).context("a backup")?;
        println!("backup written and verified: {key}");
        seen.insert(key.clone());
        if seen.len() == 2 {
            break key;
        }
    };
    show(kube, &ns, "etcdbackups");

    steps.next("3. disaster: every member pod and its volume deleted");
    let members = ListParams::default().labels(&format!("etcd_cluster={CLUSTER}"));
    Api::<PersistentVolumeClaim>::namespaced(kube.client.clone(), &ns)
        .delete_collection(&DeleteParams::default(), &members)
        .await?;
    Api::<Pod>::namespaced(kube.client.clone(), &ns)
        .delete_collection(&DeleteParams::default(), &members)
        .await?;
    let lost = wait_until(
        &clusters,
        CLUSTER,
        "QuorumLost",
        180,
        testbed::cluster::quorum_lost,
    )
    .await?;
    let available = lost
        .status
        .and_then(|s| s.conditions)
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "Available");
    if let Some(c) = available {
        println!(
            "EtcdCluster says: Available={} {}: {}",
            c.status,
            c.reason.unwrap_or_default(),
            c.message.unwrap_or_default()
        );
    }

    steps.next("4. EtcdRestore (the coreos example) from the newest backup");
    let mut restore = example("etcd-restore.yaml")?;
    let path = newest.strip_prefix("s3://").context("an s3:// backup")?;
    restore["spec"]["s3"] = json!({"path": path, "awsSecret": "aws",
        "endpoint": garage.endpoint, "forcePathStyle": true});
    let restore: EtcdRestore = serde_json::from_value(restore)?;
    let restores: Api<EtcdRestore> = Api::namespaced(kube.client.clone(), &ns);
    restores.create(&PostParams::default(), &restore).await?;
    let finished = |r: &EtcdRestore| {
        r.status
            .as_ref()
            .is_some_and(|s| s.phase.is_some_and(|p| p.is_terminal()))
    };
    let done = wait_until(&restores, CLUSTER, "the restore", 600, finished).await?;
    let status = done.status.unwrap_or_default();
    if !status.succeeded {
        bail!("the restore failed: {}", status.reason.unwrap_or_default());
    }
    wait_until(&clusters, CLUSTER, "3 ready members", 120, converged(3)).await?;
    let keys = count_keys(kube, &ns).await?;
    let pods = member_pods(kube, &ns).await?;
    let owned = pods.iter().all(|p| {
        p.owner_references()
            .iter()
            .any(|o| o.kind == "EtcdCluster" && o.controller == Some(true))
    });
    println!(
        "{keys} of {KEYS} keys back; {} member pods, all owned by the EtcdCluster: {owned}; \
         revision bumped: {:?}",
        pods.len(),
        status.revision_bumped.unwrap_or(false)
    );
    if keys != KEYS || !owned {
        bail!("the restored cluster is not what was backed up");
    }
    show(kube, &ns, "etcdclusters,etcdbackups,etcdrestores");
    show(kube, &ns, "pods");

    steps.finish();
    println!("\n\x1b[1m== summary\x1b[0m");
    for (title, seconds) in &steps.done {
        println!("{seconds:>7.1} s  {title}");
    }
    println!("{:>7.1} s  in all", steps.started.elapsed().as_secs_f64());
    println!(
        "\nwhere to look: kubectl --kubeconfig {} -n {ns} get etcdclusters,etcdbackups,etcdrestores",
        kube.kubeconfig.display()
    );
    if keep {
        println!(
            "\nkept: export KUBECONFIG={}; kubectl -n {ns} get all; S3 at {} (keys: {} / {}).\n\
             The bed and Garage stay up until Ctrl-C.",
            kube.kubeconfig.display(),
            garage.endpoint,
            garage.access_key,
            garage.secret_key
        );
        tokio::signal::ctrl_c().await?;
    }
    kube.delete_namespace(&ns).await?;
    println!("demo: OK");
    Ok(())
}
