//! The CronJob example (`examples/cronjob/etcd-backup-cronjob.yaml`), scheduled backups without
//! the operator, run by the kubelet bed's CronJob controller: its `save` stores a verified backup
//! of an etcd in the cluster to Garage under a scheduled name, then its `prune` keeps the newest
//! ones. The spec is the shipped one; the test changes only the schedule (every minute), the
//! image (this build's), the S3 endpoint (Garage, by environment), `--keep` (2) and, on an API
//! server older than 1.21, the apiVersion (batch/v1beta1 serves the same spec).

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};
use testbed::Garage;
use testbed::cluster::host_address;
use testbed::kube::wait_until;

const EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/cronjob/etcd-backup-cronjob.yaml"
);
const BASE: &str = "s3://etcd-backups/example-etcd-cluster/etcd.backup";

/// One etcd member behind the Service name the example uses.
fn etcd_pod_and_service() -> (Pod, Value) {
    let mut pod = json!({
        "metadata": {"name": "etcd", "labels": {"app": "etcd"}},
        "spec": {
            "containers": [{
                "name": "etcd", "image": "localhost/etcd:v3.5.33", "imagePullPolicy": "Never",
                "command": ["/usr/local/bin/etcd", "--name=etcd", "--data-dir=/var/etcd/data",
                    "--listen-client-urls=http://0.0.0.0:2379",
                    "--advertise-client-urls=http://example-etcd-cluster-client:2379",
                    "--listen-peer-urls=http://127.0.0.1:2380",
                    "--initial-advertise-peer-urls=http://127.0.0.1:2380",
                    "--initial-cluster=etcd=http://127.0.0.1:2380"],
                "readinessProbe": {"httpGet": {"path": "/health", "port": 2379}, "periodSeconds": 2},
                "volumeMounts": [{"name": "data", "mountPath": "/var/etcd"}],
            }],
            "volumes": [{"name": "data", "emptyDir": {}}],
        }
    });
    // The namespace enforces Pod Security "restricted".
    testbed::cluster::restricted(&mut pod["spec"]);
    let pod = serde_json::from_value(pod).unwrap();
    let service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "example-etcd-cluster-client"},
        "spec": {"selector": {"app": "etcd"}, "ports": [{"name": "client", "port": 2379, "protocol": "TCP"}]}
    });
    (pod, service)
}

/// The backups under the base name, oldest (lowest revision) first (`etcd-backup list`).
async fn listed(flags: &[String], env: &[(String, String)]) -> Vec<Value> {
    let mut list = vec!["list", BASE, "--output", "json"];
    list.extend(strs(flags));
    let mut objects: Vec<Value> = run(&list, env)
        .await
        .ok()
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    objects.sort_by_key(|o| o["manifest"]["etcdRevision"].as_i64().unwrap());
    objects
}

#[tokio::test]
async fn the_cronjob_example_saves_then_prunes_on_the_bed() {
    let (kube, ns, _report) = testbed::cluster::test_namespace("etcd-backup-cronjob").await;
    let garage = Garage::start_on(&host_address()).await.unwrap();
    garage.create_bucket("etcd-backups").await.unwrap();
    let (flags, env) = garage.cli_args();

    let (pod, service) = etcd_pod_and_service();
    let (identity, recipient) = backup_storage::encryption::Identity::generate();
    let recipients = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "etcd-backup-recipients"},
        "stringData": {"recipients.txt": format!("{recipient}\n")}});
    kube.apply(&[garage.aws_secret("aws"), recipients, service], &ns)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let ready = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    };
    let pod = wait_until(&pods, "etcd", "a ready etcd", 120, ready)
        .await
        .unwrap();
    let ip = pod.status.unwrap().pod_ip.unwrap();
    let endpoint = format!("http://{ip}:2379");
    let mut etcd = etcd_client::Client::connect([endpoint.as_str()], None)
        .await
        .unwrap();

    // Two older scheduled backups, each at its own revision, saved from here.
    let mut seeded = Vec::new();
    for i in 0..2 {
        etcd.put(format!("/seed/{i}"), "x", None).await.unwrap();
        let mut save = vec!["save", "--endpoints", &endpoint, "--to", BASE];
        save.extend(["--scheduled-name", "--output", "json"]);
        save.extend(strs(&flags));
        let saved = run(&save, &env).await.ok().json();
        seeded.push(saved["object"].as_str().unwrap().to_string());
    }
    let mut latest = 0;
    for i in 0..100 {
        let put = etcd
            .put(format!("/registry/key-{i}"), "value", None)
            .await
            .unwrap();
        latest = put.header().unwrap().revision();
    }

    // The shipped CronJob, as users apply it, with the test's substitutions only.
    let text = std::fs::read_to_string(EXAMPLE).unwrap();
    let mut cronjob: Value = serde_saphyr::from_str(&text).unwrap();
    let batch_v1 = kube::core::GroupVersionKind::gvk("batch", "v1", "CronJob");
    if kube::discovery::pinned_kind(&kube.client, &batch_v1)
        .await
        .is_err()
    {
        cronjob["apiVersion"] = json!("batch/v1beta1");
    }
    cronjob["spec"]["schedule"] = json!("* * * * *");
    let pod_spec = &mut cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"];
    for list in ["initContainers", "containers"] {
        for container in pod_spec[list].as_array_mut().unwrap() {
            container["image"] = json!("localhost/etcd-backup:dev");
            container["imagePullPolicy"] = json!("Never");
            let vars = container["env"].as_array_mut().unwrap();
            vars.push(json!({"name": "AWS_ENDPOINT_URL", "value": garage.endpoint}));
            vars.push(json!({"name": "S3_FORCE_PATH_STYLE", "value": "true"}));
            for arg in container["args"].as_array_mut().unwrap() {
                if arg == "--keep=7" {
                    *arg = json!("--keep=2");
                }
            }
        }
    }
    kube.apply(&[cronjob], &ns).await.unwrap();

    // The first scheduled Job (within a minute, plus the run).
    let jobs: Api<Job> = Api::namespaced(kube.client.clone(), &ns);
    let job = tokio::time::timeout(Duration::from_secs(180), async {
        loop {
            let list = jobs.list(&ListParams::default()).await.unwrap();
            for job in list.items {
                let status = job.status.clone().unwrap_or_default();
                assert_eq!(status.failed.unwrap_or(0), 0, "the Job failed: {status:?}");
                if status.succeeded.unwrap_or(0) >= 1 {
                    return job;
                }
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    })
    .await
    .expect("a scheduled Job succeeded within 180 s");

    // Its pod ran save, then prune, both to success.
    let job_name = job.metadata.name.unwrap();
    let selector = format!("job-name={job_name}");
    let job_pods = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap();
    let status = job_pods.items[0].status.clone().unwrap();
    let exit = |statuses: Option<Vec<k8s_openapi::api::core::v1::ContainerStatus>>| {
        let s = &statuses.unwrap()[0];
        (
            s.name.clone(),
            s.state
                .as_ref()
                .unwrap()
                .terminated
                .as_ref()
                .unwrap()
                .exit_code,
        )
    };
    assert_eq!(
        exit(status.init_container_statuses),
        ("save".to_string(), 0)
    );
    assert_eq!(exit(status.container_statuses), ("prune".to_string(), 0));
    // The CronJob fires every minute: it goes with its namespace now, not with the bed.
    kube.delete_namespace(&ns).await.unwrap();

    // The oldest seeded backup is gone; the newer one and the CronJob's remain.
    let objects = listed(&flags, &env).await;
    let names: Vec<&str> = objects
        .iter()
        .map(|o| o["object"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{objects:?}");
    assert_eq!(names[0], seeded[1], "{objects:?}");
    let scheduled = names[1];
    assert!(!seeded.iter().any(|s| s == scheduled), "{objects:?}");
    let revision: i64 = scheduled
        .split("_v")
        .nth(1)
        .and_then(|r| r.split('_').next())
        .and_then(|r| r.parse().ok())
        .unwrap();
    assert!(
        revision >= latest,
        "{scheduled} is older than revision {latest}"
    );
    // Encrypted to the Secret's recipient: it verifies whole with the identity only.
    let keys = tempfile::tempdir().unwrap();
    let identity_file = keys.path().join("restore-key.txt");
    std::fs::write(&identity_file, identity).unwrap();
    let mut verify = vec!["verify", scheduled, "--output", "json"];
    verify.extend(strs(&flags));
    let without_key = run(&verify, &env).await.ok().json();
    assert_eq!(without_key["contentChecked"], false, "{without_key}");
    verify.extend(["--identity", identity_file.to_str().unwrap()]);
    let verified = run(&verify, &env).await.ok().json();
    assert_eq!(verified["compression"], "zstd", "{verified}");
    assert_eq!(verified["encrypted"], true, "{verified}");
}
