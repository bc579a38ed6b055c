//! The StatefulSet test's backups to Google Cloud Storage and Azure Blob Storage.

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::DeleteParams;
use serde_json::{Value, json};
use testbed::cluster::host_address;
use testbed::kube::KubeTestbed;

use super::{job_succeeded, list_with};

/// Runs the CronJob's job once against fake-gcs-server and once against Azurite, each
/// configured as the example's comments say, checks that each stored one complete encrypted
/// backup, then puts the S3 settings of `manifests` back.
pub async fn clouds_backup_in_pods(kube: &KubeTestbed, ns: &str, manifests: &[Value]) {
    let gcs = testbed::FakeGcs::start_on(&host_address()).await.unwrap();
    let azurite = testbed::Azurite::start_on(&host_address()).await.unwrap();
    let store_dir = "/etc/mysql-backup-store";
    let gcs_prefix = format!("gs://{}/mysql/nightly-", gcs.bucket);
    let azure_prefix = format!("azblob://{}/mysql/nightly-", azurite.container);
    let clouds = [
        (
            "gcs",
            json!({"BACKUP_PREFIX": gcs_prefix, "GCS_SECRET_DIR": store_dir,
                "BINLOG_PREFIX": format!("gs://{}/mysql/binlogs/", gcs.bucket),
                "STORAGE_EMULATOR_HOST": gcs.endpoint}),
            // A coreos gcpSecret's token (fake-gcs-server checks none).
            vec![("access-token", "emulator")],
            gcs_prefix.clone(),
            gcs.cli_args().0,
        ),
        (
            "azure",
            json!({"BACKUP_PREFIX": azure_prefix, "AZURE_SECRET_DIR": store_dir,
                "BINLOG_PREFIX": format!("azblob://{}/mysql/binlogs/", azurite.container),
                "AZURE_BLOB_ENDPOINT": azurite.endpoint}),
            azurite.coreos_secret().to_vec(),
            azure_prefix.clone(),
            azurite.cli_args().0,
        ),
    ];
    let secrets: Api<Secret> = Api::namespaced(kube.client.clone(), ns);
    let jobs: Api<Job> = Api::namespaced(kube.client.clone(), ns);
    let crons: Api<CronJob> = Api::namespaced(kube.client.clone(), ns);
    let template = crons.get("mysql-backup-nightly").await.unwrap();
    let job_spec = template.spec.unwrap().job_template.spec.unwrap();
    for (cloud, settings, secret, prefix, flags) in clouds {
        let mut storage = manifests
            .iter()
            .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "mysql-backup-storage")
            .unwrap()
            .clone();
        storage["data"] = settings;
        kube.apply(&[storage], ns).await.unwrap();
        secrets
            .delete("mysql-backup-store", &DeleteParams::default())
            .await
            .unwrap();
        testbed::kube::create_secret(&kube.client, ns, "mysql-backup-store", &secret)
            .await
            .unwrap();
        let name = format!("mysql-backup-{cloud}");
        let job = Job {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            spec: Some(job_spec.clone()),
            status: None,
        };
        jobs.create(&Default::default(), &job).await.unwrap();
        job_succeeded(&jobs, &name, 300).await;
        let command = tokio::process::Command::new(env!("CARGO_BIN_EXE_mysql-backup"));
        let listed = list_with(command, &prefix, &flags).await;
        assert_eq!(listed.len(), 1, "{cloud}: {listed:?}");
        assert_eq!(listed[0]["encrypted"], true, "{cloud}: {listed:?}");
    }
    // Back to S3 for the restore.
    secrets
        .delete("mysql-backup-store", &DeleteParams::default())
        .await
        .unwrap();
    let s3: Vec<Value> = manifests
        .iter()
        .filter(|d| {
            d["metadata"]["name"] == "mysql-backup-storage"
                || d["metadata"]["name"] == "mysql-backup-store"
        })
        .cloned()
        .collect();
    assert_eq!(s3.len(), 2);
    kube.apply(&s3, ns).await.unwrap();
}
