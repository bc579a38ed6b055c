//! The operator as users run it: in the cluster, from its image (`localhost/etcd-backup-operator:dev`,
//! made by the kubelet bed from this build), installed with the shipped `deploy/namespaced/`
//! manifests (namespace and image swapped, nothing else), backing up an etcd that itself runs
//! as a pod, reached by the coreos example's Service name, to Garage on the bridge address.

use etcd_api::EtcdBackup;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};
use testbed::Garage;
use testbed::cluster::host_address;
use testbed::kube::wait_until;

mod common;
use common::{aws_files, store};

const DEPLOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/namespaced");
const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/coreos");

/// One etcd member as a pod behind the coreos example's client Service name.
fn etcd_manifests(ns: &str) -> Vec<Value> {
    let client = format!("http://example-etcd-cluster-client.{ns}.svc.cluster.local:2379");
    vec![
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "example-etcd-cluster-client"},
               "spec": {"selector": {"app": "etcd"}, "ports": [{"name": "client", "port": 2379, "protocol": "TCP"}]}}),
        member_pod(&client),
    ]
}

/// The member, as the restricted test namespace admits it.
fn member_pod(client: &str) -> Value {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "example-etcd-cluster-0", "labels": {"app": "etcd"}},
    "spec": {"containers": [{
        "name": "etcd", "image": "localhost/etcd:v3.5.33", "imagePullPolicy": "Never",
        "command": ["etcd", "--data-dir", "/tmp/data",
            "--listen-client-urls", "http://0.0.0.0:2379", "--advertise-client-urls", client],
        "readinessProbe": {"httpGet": {"path": "/health", "port": 2379}, "periodSeconds": 1},
    }]}});
    testbed::cluster::restricted(&mut pod["spec"]);
    pod
}

fn example(name: &str) -> Value {
    serde_saphyr::from_str(&std::fs::read_to_string(format!("{EXAMPLES}/{name}")).unwrap()).unwrap()
}

async fn wait<K, F>(api: &Api<K>, name: &str, what: &str, seconds: u64, done: F)
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    F: Fn(&K) -> bool + Send + 'static,
{
    wait_until(api, name, what, seconds, done).await.unwrap();
}

#[tokio::test]
async fn operator_image_with_shipped_manifests_backs_up_an_etcd_pod() {
    let (kube, ns, _report) = testbed::cluster::test_namespace("eb-in-cluster").await;
    let garage = Garage::start_on(&host_address()).await.unwrap();

    // etcd in a pod, with data written from the host through the pod network.
    kube.apply(&etcd_manifests(&ns), &ns).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    let ready = |pod: &Pod| {
        pod.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    };
    wait(
        &pods,
        "example-etcd-cluster-0",
        "etcd pod Ready",
        120,
        ready,
    )
    .await;
    let ip = testbed::cluster::pod_ip(&pods, "example-etcd-cluster-0").await;
    let mut etcd = etcd_client::Client::connect([format!("http://{ip}:2379")], None)
        .await
        .unwrap();
    let mut written = 0;
    for i in 0..100 {
        written = etcd
            .put(format!("/registry/key-{i}"), format!("value-{i}"), None)
            .await
            .unwrap()
            .header()
            .unwrap()
            .revision();
    }

    // The operator from its image, two replicas with leader election, probes passing.
    let manifests = testbed::cluster::deploy_manifests(DEPLOY.as_ref(), &ns).unwrap();
    kube.apply(&manifests, &ns).await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(kube.client.clone(), &ns);
    wait(
        &deployments,
        "etcd-backup-operator",
        "2 ready operator replicas",
        180,
        |d: &Deployment| d.status.as_ref().and_then(|s| s.ready_replicas) == Some(2),
    )
    .await;

    // The coreos one-shot example, unchanged but for bucket and endpoint: its etcdEndpoints
    // `http://example-etcd-cluster-client:2379` resolves through cluster DNS in the pod.
    let mut secret = example("aws-secret.yaml");
    for (key, file) in aws_files(&garage) {
        secret["stringData"][key] = json!(file);
    }
    let secret: Secret = serde_json::from_value(secret).unwrap();
    Api::<Secret>::namespaced(kube.client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let mut backup = example("etcd-backup-oneshot.yaml");
    assert_eq!(
        backup["spec"]["etcdEndpoints"],
        json!(["http://example-etcd-cluster-client:2379"])
    );
    backup["spec"]["s3"]["path"] = json!(format!("{}/in-cluster/etcd.backup", garage.bucket));
    backup["spec"]["s3"]["endpoint"] = json!(garage.endpoint);
    backup["spec"]["s3"]["forcePathStyle"] = json!(true);
    let backups: Api<EtcdBackup> = Api::namespaced(kube.client.clone(), &ns);
    let backup: EtcdBackup = serde_json::from_value(backup).unwrap();
    backups
        .create(&PostParams::default(), &backup)
        .await
        .unwrap();
    let name = "example-etcd-cluster-backup";
    wait(
        &backups,
        name,
        "the backup to succeed",
        120,
        |b: &EtcdBackup| b.status.as_ref().is_some_and(|s| s.succeeded),
    )
    .await;

    // What status says is what S3 holds, read back independently and verified.
    let status = backups.get(name).await.unwrap().status.unwrap();
    let last = status.last_backup.unwrap();
    assert_eq!(
        last.object_key,
        format!("s3://{}/in-cluster/etcd.backup", garage.bucket)
    );
    let revision = last.etcd_revision.unwrap();
    assert!(
        revision >= written,
        "backup at revision {revision} < {written}"
    );
    let verified = etcd_snapshot::verify(&store(&garage).await, "in-cluster/etcd.backup", None)
        .await
        .unwrap();
    assert_eq!(Some(verified.stored.hex), last.sha256);
    kube.delete_namespace(&ns).await.unwrap();
}
