//! The coreos examples (`examples/coreos/`), as the tests use them: read as they are, and the
//! one-shot backup to Garage that several restore tests start from.

use anyhow::Result;
use etcd_api::EtcdBackup;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use crate::Garage;
use crate::kube::{KubeTestbed, wait_until};

const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/coreos");

/// The coreos example `name` (e.g. `etcd-restore.yaml`), as JSON.
pub fn example(name: &str) -> Result<Value> {
    let text = std::fs::read_to_string(format!("{EXAMPLES}/{name}"))?;
    Ok(serde_saphyr::from_str(&text)?)
}

/// The coreos AWS Secret `aws` for `garage`, then the coreos one-shot EtcdBackup to `key` in
/// its bucket, with the top-level `spec` fields of `spec` set (e.g. `etcdEndpoints`); waits
/// until it succeeded (for at most 180 s) and returns it.
pub async fn one_shot_backup(
    kube: &KubeTestbed,
    ns: &str,
    garage: &Garage,
    key: &str,
    spec: Value,
) -> Result<EtcdBackup> {
    let mut secret = example("aws-secret.yaml")?;
    secret["stringData"] = garage.aws_secret("aws")["stringData"].clone();
    let secret: Secret = serde_json::from_value(secret)?;
    Api::<Secret>::namespaced(kube.client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await?;
    let mut backup = example("etcd-backup-oneshot.yaml")?;
    backup["spec"]["s3"]["path"] = json!(format!("{}/{key}", garage.bucket));
    backup["spec"]["s3"]["endpoint"] = json!(garage.endpoint);
    backup["spec"]["s3"]["forcePathStyle"] = json!(true);
    if let Value::Object(fields) = spec {
        for (field, value) in fields {
            backup["spec"][field] = value;
        }
    }
    let backup: EtcdBackup = serde_json::from_value(backup)?;
    let backups: Api<EtcdBackup> = Api::namespaced(kube.client.clone(), ns);
    backups.create(&PostParams::default(), &backup).await?;
    let succeeded = |b: &EtcdBackup| b.status.as_ref().is_some_and(|s| s.succeeded);
    wait_until(&backups, &backup.name_any(), "the backup", 180, succeeded).await
}
