//! The Helm chart on the kubelet bed, as a user installs it: `helm install` of the chart (CRDs
//! included, the bed's existing CRDs taken over), the three operators from the bed's images; a
//! one-shot EtcdBackup to Garage and an EtcdRestore of it through them; then `helm upgrade` to
//! a newer chart (a CRD changed, a value changed) with the cluster running and its data kept;
//! `helm uninstall` keeps the CRDs and so every EtcdCluster.

use std::path::Path;

use etcd_api::{EtcdBackup, EtcdCluster, EtcdRestore};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};
use testbed::Garage;
use testbed::cluster::{converged, host_address};
use testbed::kube::wait_until;

const CLUSTER: &str = "chart-etcd";
const RELEASE: &str = "suite";
/// A description in the EtcdCluster CRD; the "older" chart of the upgrade has another.
const CURRENT_DESCRIPTION: &str = "Desired etcd cluster.";

/// The chart as a user passes it, with the bed's images (never pulled) and one replica each.
fn helm_args<'a>(command: &'a str, chart: &'a str, ns: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        command,
        RELEASE,
        chart,
        "--namespace",
        ns,
        "--set",
        "image.repository=localhost",
        "--set",
        "image.tag=dev",
        "--set",
        "image.pullPolicy=Never",
        "--set",
        "etcdOperator.replicas=1",
        "--set",
        "backupOperator.replicas=1",
        "--set",
        "restoreOperator.replicas=1",
        // The bed's CRDs were applied by the test harness; a user coming from kustomize has
        // theirs applied by kubectl: the chart takes them over.
        "--take-ownership",
        "--wait",
        "--timeout",
        "5m",
    ];
    args.extend(extra);
    args
}

/// Each operator's Deployment has rolled out its newest template, ready.
async fn operators_ready(deployments: &Api<Deployment>) {
    for name in [
        "etcd-operator",
        "etcd-backup-operator",
        "etcd-restore-operator",
    ] {
        let rolled_out = |d: &Deployment| {
            let generation = d.metadata.generation;
            d.status.as_ref().is_some_and(|s| {
                s.observed_generation == generation
                    && s.updated_replicas == Some(1)
                    && s.ready_replicas == Some(1)
                    && s.replicas == Some(1)
            })
        };
        wait_until(
            deployments,
            name,
            "the operator rolled out",
            300,
            rolled_out,
        )
        .await
        .unwrap();
    }
}

async fn client(pods: &Api<Pod>) -> etcd_client::Client {
    let list = pods
        .list(&ListParams::default().labels(&format!("etcd_cluster={CLUSTER}")))
        .await
        .unwrap();
    let ip = list
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .find_map(|p| p.status.as_ref()?.pod_ip.clone())
        .expect("a member pod with an IP");
    etcd_client::Client::connect([format!("http://{ip}:2379")], None)
        .await
        .unwrap()
}

async fn count(etcd: &mut etcd_client::Client, prefix: &str) -> i64 {
    let options = etcd_client::GetOptions::new()
        .with_prefix()
        .with_count_only();
    etcd.get(prefix, Some(options)).await.unwrap().count()
}

/// The EtcdCluster CRD's description of its spec, as the API server has it.
async fn spec_description(kube: &kube::Client) -> String {
    let crds: Api<CustomResourceDefinition> = Api::all(kube.clone());
    let crd = crds
        .get("etcdclusters.etcd.database.coreos.com")
        .await
        .unwrap();
    let crd = serde_json::to_value(crd).unwrap();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["description"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn the_helm_chart_installs_operators_that_back_up_restore_and_upgrade() {
    let (kube, ns, _report) = testbed::cluster::test_namespace("helm-chart").await;
    let garage = Garage::start_on(&host_address()).await.unwrap();
    let secret: Secret = serde_json::from_value(garage.aws_secret("aws")).unwrap();
    Api::<Secret>::namespaced(kube.client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();

    // The "older" chart: this one with another CRD description, so that the upgrade has a CRD
    // change to make.
    let chart = testbed::helm::chart();
    let older = tempfile::tempdir().unwrap();
    copy_dir(&chart, older.path());
    let crd_copy = older.path().join("files/crds/etcdclusters.yaml");
    let text = std::fs::read_to_string(&crd_copy).unwrap();
    assert!(
        text.contains(CURRENT_DESCRIPTION),
        "the EtcdCluster CRD no longer says {CURRENT_DESCRIPTION:?}: update this test"
    );
    std::fs::write(
        &crd_copy,
        text.replace(CURRENT_DESCRIPTION, "An older description."),
    )
    .unwrap();

    let kubeconfig = Some(kube.kubeconfig.as_path());
    let older_chart = older.path().to_str().unwrap();
    testbed::helm::run(&helm_args("install", older_chart, &ns, &[]), kubeconfig).unwrap();
    let deployments: Api<Deployment> = Api::namespaced(kube.client.clone(), &ns);
    operators_ready(&deployments).await;
    assert_eq!(
        spec_description(&kube.client).await,
        "An older description."
    );

    // A cluster, a backup and a restore, by the operators the chart installed.
    let clusters: Api<EtcdCluster> = Api::namespaced(kube.client.clone(), &ns);
    let cluster: EtcdCluster = serde_json::from_value(json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "metadata": {"name": CLUSTER},
        "spec": {"size": 1, "repository": "localhost/etcd", "version": "3.7.3",
            "pod": {"persistentVolumeClaimSpec": {"accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "64Mi"}}}}},
    }))
    .unwrap();
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    wait_until(&clusters, CLUSTER, "1 ready member", 300, converged(1))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    let mut etcd = client(&pods).await;
    for i in 0..100 {
        etcd.put(format!("/chart/{i:03}"), "v", None).await.unwrap();
    }
    let backups: Api<EtcdBackup> = Api::namespaced(kube.client.clone(), &ns);
    let backup: EtcdBackup = serde_json::from_value(json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdBackup",
        "metadata": {"name": "chart-backup"},
        "spec": {"etcdEndpoints": [format!("http://{CLUSTER}-client.{ns}.svc:2379")],
            "storageType": "S3",
            "s3": {"path": format!("{}/chart/etcd.backup", garage.bucket), "awsSecret": "aws",
                   "endpoint": garage.endpoint, "forcePathStyle": true}},
    }))
    .unwrap();
    backups
        .create(&PostParams::default(), &backup)
        .await
        .unwrap();
    let done = |b: &EtcdBackup| b.status.as_ref().is_some_and(|s| s.succeeded);
    wait_until(&backups, "chart-backup", "the backup", 300, done)
        .await
        .unwrap();
    etcd.put("/chart/after-the-backup", "v", None)
        .await
        .unwrap();

    let restores: Api<EtcdRestore> = Api::namespaced(kube.client.clone(), &ns);
    let restore: EtcdRestore = serde_json::from_value(json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdRestore",
        "metadata": {"name": CLUSTER},
        "spec": {"etcdCluster": {"name": CLUSTER}, "backupStorageType": "S3",
            "backupRef": {"name": "chart-backup"}},
    }))
    .unwrap();
    restores
        .create(&PostParams::default(), &restore)
        .await
        .unwrap();
    let finished = |r: &EtcdRestore| {
        r.status
            .as_ref()
            .is_some_and(|s| s.phase.is_some_and(|p| p.is_terminal()))
    };
    let restored = wait_until(&restores, CLUSTER, "the restore", 300, finished)
        .await
        .unwrap();
    let status = restored.status.unwrap();
    assert!(status.succeeded, "{status:?}");
    wait_until(&clusters, CLUSTER, "1 ready member", 300, converged(1))
        .await
        .unwrap();
    let mut etcd = client(&pods).await;
    assert_eq!(
        count(&mut etcd, "/chart/").await,
        100,
        "the backup's keys, not the later one"
    );

    // The upgrade to this chart: its CRD and a changed value; the cluster keeps serving its data.
    let chart_path = chart.to_str().unwrap();
    testbed::helm::run(
        &helm_args(
            "upgrade",
            chart_path,
            &ns,
            &[
                "--reset-then-reuse-values",
                "--set",
                "backupOperator.maxConcurrentBackups=2",
            ],
        ),
        kubeconfig,
    )
    .unwrap();
    operators_ready(&deployments).await;
    assert_eq!(spec_description(&kube.client).await, CURRENT_DESCRIPTION);
    let backup_operator = deployments.get("etcd-backup-operator").await.unwrap();
    let env = serde_json::to_value(
        &backup_operator
            .spec
            .unwrap()
            .template
            .spec
            .unwrap()
            .containers[0]
            .env,
    )
    .unwrap();
    assert!(
        env.as_array()
            .unwrap()
            .contains(&json!({"name": "MAX_CONCURRENT_BACKUPS", "value": "2"})),
        "{env}"
    );
    wait_until(
        &clusters,
        CLUSTER,
        "1 ready member after the upgrade",
        300,
        converged(1),
    )
    .await
    .unwrap();
    let mut etcd = client(&pods).await;
    assert_eq!(count(&mut etcd, "/chart/").await, 100);

    // Uninstalled: the operators go, the CRDs and so the EtcdCluster stay.
    testbed::helm::run(
        &["uninstall", RELEASE, "--namespace", &ns, "--wait"],
        kubeconfig,
    )
    .unwrap();
    let left: Vec<Value> = deployments
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|d| json!(d.metadata.name))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(clusters.get_opt(CLUSTER).await.unwrap().is_some());
    kube.delete_namespace(&ns).await.unwrap();
}

fn copy_dir(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}
