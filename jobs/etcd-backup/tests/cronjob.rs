//! The CronJob example (`examples/cronjob/etcd-backup-cronjob.yaml`), scheduled backups without
//! the operator, run by the kubelet bed's CronJob controller: its `save` stores a verified backup
//! of an etcd in the cluster to Garage under a scheduled name, then its `prune` keeps the newest
//! ones. The spec is the shipped one; the test changes only the schedule (every minute), the
//! image (this build's), the S3 endpoint (Garage, by environment), `--keep` (2) and, on an API
//! server older than 1.21, the apiVersion (batch/v1beta1 serves the same spec). The GCS and
//! Azure variants (`etcd-backup-cronjob-gcs.yaml`, `-azure.yaml`) run as a Job each, made from
//! their job template, against fake-gcs-server and Azurite on the bed.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};
use testbed::cluster::host_address;
use testbed::kube::wait_until;
use testbed::{Azurite, FakeGcs, Garage};

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

/// The etcd member and its Service in `ns`, ready; its client URL by pod IP (for the test).
async fn running_etcd(kube: &testbed::kube::KubeTestbed, ns: &str) -> String {
    let (pod, service) = etcd_pod_and_service();
    kube.apply(&[service], ns).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
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
    format!("http://{}:2379", pod.status.unwrap().pod_ip.unwrap())
}

/// The backups under `base`, oldest (lowest revision) first (`etcd-backup list`).
async fn listed(base: &str, flags: &[String], env: &[(String, String)]) -> Vec<Value> {
    let mut list = vec!["list", base, "--output", "json"];
    list.extend(strs(flags));
    let mut objects: Vec<Value> = run(&list, env)
        .await
        .ok()
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for object in &objects {
        assert!(
            object["manifest"]["etcdRevision"].is_i64(),
            "a backup listed without its manifest: {object}"
        );
    }
    objects.sort_by_key(|o| o["manifest"]["etcdRevision"].as_i64());
    objects
}

#[tokio::test]
async fn the_cronjob_example_saves_then_prunes_on_the_bed() {
    let (kube, ns, _report) = testbed::cluster::test_namespace("etcd-backup-cronjob").await;
    let garage = Garage::start_on(&host_address()).await.unwrap();
    garage.create_bucket("etcd-backups").await.unwrap();
    let (flags, env) = garage.cli_args();

    let (identity, recipient) = backup_storage::encryption::Identity::generate();
    let recipients = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "etcd-backup-recipients"},
        "stringData": {"recipients.txt": format!("{recipient}\n")}});
    kube.apply(&[garage.aws_secret("aws"), recipients], &ns)
        .await
        .unwrap();
    let endpoint = running_etcd(&kube, &ns).await;
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
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
    let objects = listed(BASE, &flags, &env).await;
    let names: Vec<&str> = objects
        .iter()
        .map(|o| o["object"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{objects:?}");
    assert_eq!(names[0], seeded[1], "{objects:?}");
    let scheduled = names[1];
    assert!(!seeded.iter().any(|s| s == scheduled), "{objects:?}");
    let revision = scheduled_revision(scheduled);
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

/// The revision in a scheduled name `<base>_v<revision>_<time>`.
fn scheduled_revision(name: &str) -> i64 {
    name.split("_v")
        .nth(1)
        .and_then(|r| r.split('_').next())
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("{name} is not a scheduled name"))
}

/// The Job `kubectl create job --from=cronjob/...` makes of the example `file`, with this
/// build's image, `bucket` for the example's `etcd-backups`, `extra` added to both containers'
/// args and `--keep=2`.
fn job_from_example(file: &str, name: &str, bucket: &str, extra: &str) -> Job {
    let path = format!(
        "{}/../../examples/cronjob/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    let cronjob: Value = serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut spec = cronjob["spec"]["jobTemplate"]["spec"].clone();
    let pod_spec = &mut spec["template"]["spec"];
    for list in ["initContainers", "containers"] {
        for container in pod_spec[list].as_array_mut().unwrap() {
            container["image"] = json!("localhost/etcd-backup:dev");
            container["imagePullPolicy"] = json!("Never");
            let args = container["args"].as_array_mut().unwrap();
            for arg in args.iter_mut() {
                let text = arg.as_str().unwrap().to_string();
                if text == "--keep=7" {
                    *arg = json!("--keep=2");
                } else if text.contains("://etcd-backups/") {
                    *arg = json!(text.replace("://etcd-backups/", &format!("://{bucket}/")));
                }
            }
            args.push(json!(extra));
        }
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

#[tokio::test]
async fn the_gcs_and_azure_cronjob_examples_save_then_prune_in_pods() {
    let (kube, ns, _report) = testbed::cluster::test_namespace("etcd-backup-cronjob-clouds").await;
    let gcs = FakeGcs::start_on(&host_address()).await.unwrap();
    let azurite = Azurite::start_on(&host_address()).await.unwrap();
    azurite.create_container("etcd-backups").await.unwrap();
    // The coreos Secrets the examples mount (fake-gcs-server checks no token).
    testbed::kube::create_secret(&kube.client, &ns, "gcp", &[("access-token", "emulator")])
        .await
        .unwrap();
    testbed::kube::create_secret(&kube.client, &ns, "abs", &azurite.coreos_secret())
        .await
        .unwrap();
    let endpoint = running_etcd(&kube, &ns).await;
    let mut etcd = etcd_client::Client::connect([endpoint.as_str()], None)
        .await
        .unwrap();
    let jobs: Api<Job> = Api::namespaced(kube.client.clone(), &ns);

    let clouds = [
        (
            "etcd-backup-cronjob-gcs.yaml",
            format!("gs://{}/example-etcd-cluster/etcd.backup", gcs.bucket),
            gcs.bucket.clone(),
            gcs.cli_args(),
            format!("--gcs-endpoint={}", gcs.endpoint),
        ),
        (
            "etcd-backup-cronjob-azure.yaml",
            "azblob://etcd-backups/example-etcd-cluster/etcd.backup".to_string(),
            "etcd-backups".to_string(),
            azurite.cli_args(),
            format!("--azure-endpoint={}", azurite.endpoint),
        ),
    ];
    for (i, (file, base, bucket, (flags, env), endpoint_arg)) in clouds.iter().enumerate() {
        // Two older scheduled backups, saved from here.
        let mut seeded = Vec::new();
        for j in 0..2 {
            etcd.put(format!("/seed/{i}-{j}"), "x", None).await.unwrap();
            let mut save = vec!["save", "--endpoints", &endpoint, "--to", base];
            save.extend(["--scheduled-name", "--output", "json"]);
            save.extend(strs(flags));
            let saved = run(&save, env).await.ok().json();
            seeded.push(saved["object"].as_str().unwrap().to_string());
        }
        let put = etcd.put(format!("/registry/{i}"), "v", None).await.unwrap();
        let latest = put.header().unwrap().revision();

        let name = format!("backup-now-{i}");
        let job = job_from_example(file, &name, bucket, endpoint_arg);
        jobs.create(&PostParams::default(), &job).await.unwrap();
        // Complete, or Failed once its backoffLimit (1: a pod may fail once, e.g. while the
        // Service's new endpoint is being programmed, as a scheduled run may) is spent.
        let ended = |j: &Job| {
            j.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| {
                    c.iter().any(|c| {
                        (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True"
                    })
                })
        };
        let job = wait_until(&jobs, &name, "the Job", 180, ended)
            .await
            .unwrap();
        assert_eq!(
            job.status.unwrap().succeeded,
            Some(1),
            "{file}: the Job failed (its pod's logs are printed below)"
        );

        // prune kept two: the newer seed and the Job's backup, which holds the latest write.
        let objects = listed(base, flags, env).await;
        let names: Vec<&str> = objects
            .iter()
            .map(|o| o["object"].as_str().unwrap())
            .collect();
        assert_eq!(names.len(), 2, "{file}: {objects:?}");
        assert_eq!(names[0], seeded[1], "{file}: {objects:?}");
        assert!(
            scheduled_revision(names[1]) >= latest,
            "{file}: {} is older than revision {latest}",
            names[1]
        );
        let mut verify = vec!["verify", names[1], "--output", "json"];
        verify.extend(strs(flags));
        let verified = run(&verify, env).await.ok().json();
        assert_eq!(verified["compression"], "zstd", "{file}: {verified}");
        assert_eq!(verified["contentChecked"], true, "{file}: {verified}");
    }
    kube.delete_namespace(&ns).await.unwrap();
}
