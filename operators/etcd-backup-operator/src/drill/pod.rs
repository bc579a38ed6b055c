//! The drill pod, pure. One run-once pod, four steps, each from the image that owns it:
//!
//! 1. `fetch` (init, the `etcd-backup` image): the backup is fetched and verified while it
//!    streams (sha256 trailer, manifest, decryption for encrypted backups) into a scratch
//!    volume; a bad backup stops here with exit code 3.
//! 2. `restore` (init, the etcd image of the backup's version): the version's own restore tool
//!    writes a single-member data dir, without a revision bump, so the member answers at the
//!    recorded revision as the source did.
//! 3. `etcd` (a native sidecar: an init container that keeps running): serves that data dir on
//!    the pod's loopback only (no Service, no port exposed).
//! 4. `check` (the `etcd-backup` image): `etcd-backup drill-check` waits until it serves and
//!    compares revision, key count and `HashKV` with what the operator recorded when it took
//!    the backup (not with the bucket's manifest, which a replaced object could bring along),
//!    and writes its verdict to the termination message.
//!
//! When `check` exits the kubelet stops the sidecar, and the pod's phase and the containers'
//! exit codes and messages are the verdict ([`super::verdict`]). Pod Security `restricted`,
//! no service account token, every credential a file, the private key in `fetch` only.

use std::collections::BTreeMap;

use etcd_api::{BackupDrill, BackupRecord, EtcdBackup};
use etcd_cluster::EtcdVersion;
use etcd_cluster::restore::drill_restore_command;
use fetch_pod::scratch::{ScratchMember, scratch_etcd_container, scratch_restore_container};
use fetch_pod::{CloudAccess, FetchMounts, Source, fetch_container};
use k8s_openapi::api::core::v1::{Container, EmptyDirVolumeSource, Pod, PodSpec, Volume};
use kube::api::ObjectMeta;
use kube::{Resource, ResourceExt};
use operator_runtime::pod_security::{self, RunAs};
use operator_runtime::volumes::mount;

/// Labels of drill pods: found by the EtcdBackup's UID (names may be longer than a label).
pub const APP: &str = "etcd-backup-drill";
pub const UID_LABEL: &str = "etcd-backup-uid";
/// The backup a pod drills.
pub const OBJECT_ANNOTATION: &str = "etcd.database.coreos.com/drilled-object";
/// The pod's scratch volume: the fetched snapshot and the restored data dir.
const SCRATCH: &str = "/var/etcd-drill";
/// The member serves on the pod's loopback only.
const CLIENT_URL: &str = "http://127.0.0.1:2379";
const PEER_URL: &str = "http://127.0.0.1:2380";
/// How long `check` waits for the member to serve (a large database takes a while to open).
const START_TIMEOUT_SECONDS: u64 = 600;

/// Why the newest backup cannot be drilled; recorded as a failed drill.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CannotDrill {
    #[error(
        "the backup has no recorded contents (taken by an operator version before drills): there is nothing to compare a restore with"
    )]
    NothingRecorded,
    #[error("the backup's etcd version {0:?} is not a version the drill can restore with")]
    Version(String),
    #[error("{0}")]
    Source(#[from] fetch_pod::SourceError),
    #[error(
        "the EtcdBackup names no s3.awsSecret or gcs.gcpSecret: its backups are written with the \
         operator's own identity (--allow-ambient-credentials), which a drill pod never gets; \
         name a Secret with keys that can read the bucket, or remove spec.drill"
    )]
    NoCredentials,
}

impl CannotDrill {
    pub fn reason(&self) -> &'static str {
        match self {
            CannotDrill::NothingRecorded => "NothingRecorded",
            CannotDrill::Version(_) => "UnknownEtcdVersion",
            CannotDrill::Source(fetch_pod::SourceError::IdentityNeeded { .. }) => {
                "NoUsableIdentity"
            }
            CannotDrill::Source(_) => "CannotReachBackup",
            CannotDrill::NoCredentials => "NoCredentials",
        }
    }
}

pub fn labels(backup: &EtcdBackup) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app".to_string(), APP.to_string()),
        (UID_LABEL.to_string(), backup.uid().unwrap_or_default()),
    ])
}

pub fn label_selector(backup: &EtcdBackup) -> String {
    format!("app={APP},{UID_LABEL}={}", backup.uid().unwrap_or_default())
}

/// The name of the pod of a drill started at `started` (seconds): unique per drill, and
/// derived from what status records, so a restarted operator finds it.
pub fn pod_name(backup: &EtcdBackup, started: i64) -> String {
    // Pod names are DNS subdomains (253); the hostname taken from them is cut at 63 anyway.
    let mut base = backup.name_any();
    base.truncate(200);
    format!("{base}-drill-{started}")
}

/// The drill pod `name` for `record` (the newest backup), reached through `source`.
pub fn drill_pod(
    backup: &EtcdBackup,
    drill: &BackupDrill,
    record: &BackupRecord,
    source: &Source,
    backup_image: &str,
    name: &str,
    timeout_seconds: i64,
) -> Result<Pod, CannotDrill> {
    let contents = record
        .contents
        .as_ref()
        .ok_or(CannotDrill::NothingRecorded)?;
    // The pod reads with the EtcdBackup's own keys only; without any it could only fail.
    let no_gcp_secret = matches!(
        source.cloud,
        Some(CloudAccess::Gcs {
            gcp_secret: None,
            ..
        })
    );
    if source.s3.as_ref().is_some_and(|s3| s3.aws_secret.is_none()) || no_gcp_secret {
        return Err(CannotDrill::NoCredentials);
    }
    let version_text = record.etcd_version.clone().unwrap_or_default();
    let version = EtcdVersion::parse(&version_text)
        .map_err(|_| CannotDrill::Version(version_text.clone()))?;
    let etcd_image = drill.image_of(&version_text);
    let snapshot = format!("{SCRATCH}/snapshot.db");
    let data_dir = format!("{SCRATCH}/data");

    let mut volumes = FetchMounts::of(source).volumes;
    volumes.push(Volume {
        name: "scratch".into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    });
    let fetch = fetch_container(
        "fetch",
        backup_image,
        source,
        &snapshot,
        mount("scratch", SCRATCH, false),
    );
    let restore = scratch_restore_container(
        "restore",
        &etcd_image,
        drill_restore_command(&version, &snapshot, &data_dir, PEER_URL),
        mount("scratch", SCRATCH, false),
        drill.resources.clone(),
    );
    // A native sidecar: it runs beside `check` and is stopped when `check` is done.
    let etcd = scratch_etcd_container(
        "etcd",
        &etcd_image,
        &ScratchMember {
            data_dir: &data_dir,
            client_url: CLIENT_URL,
            peer_url: PEER_URL,
            extra_flags: &[],
        },
        mount("scratch", SCRATCH, false),
        drill.resources.clone(),
    );
    let expect = serde_json::json!({
        "revision": contents.revision,
        "keyCount": contents.key_count,
        "hashKv": contents.hash_kv,
        "compactRevision": contents.compact_revision,
        "contentSha256": contents.content_sha256,
        "seconds": 0.0,
    });
    let check = Container {
        name: "check".into(),
        image: Some(backup_image.into()),
        args: Some(
            [
                "--output",
                "json",
                "--log-format",
                "json",
                "drill-check",
                "--member",
                CLIENT_URL,
                "--expect",
                &expect.to_string(),
                "--object",
                &record.object_key,
                "--report-file",
                "/dev/termination-log",
                "--start-timeout",
                &START_TIMEOUT_SECONDS.to_string(),
            ]
            .map(str::to_string)
            .to_vec(),
        ),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    };
    let mut spec = PodSpec {
        init_containers: Some(vec![fetch, restore, etcd]),
        containers: vec![check],
        volumes: Some(volumes),
        restart_policy: Some("Never".into()),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        // The kubelet ends a pod that outlives the drill's time (an image that will not pull,
        // a Secret that is missing); the operator's own deadline covers a pod never scheduled.
        active_deadline_seconds: Some(timeout_seconds),
        security_context: Some(pod_security::pod_context(None, RunAs::NonRoot)),
        ..Default::default()
    };
    let init = spec.init_containers.iter_mut().flatten();
    for container in spec.containers.iter_mut().chain(init) {
        container.security_context = Some(pod_security::container_context());
    }
    Ok(Pod {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: backup.namespace(),
            labels: Some(labels(backup)),
            annotations: Some(BTreeMap::from([(
                OBJECT_ANNOTATION.to_string(),
                record.object_key.clone(),
            )])),
            owner_references: backup.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn backup() -> EtcdBackup {
        serde_saphyr::from_str(
            "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdBackup\n\
             metadata: {name: nightly, namespace: ns, uid: b-uid}\n\
             spec: {etcdEndpoints: ['http://c-client:2379'], storageType: S3,\n\
               s3: {path: bucket/etcd.backup, awsSecret: aws, endpoint: 'http://s3:3900'},\n\
               encryption: {recipientsSecret: {name: r, key: k}},\n\
               drill: {etcdRepository: localhost/etcd, identitySecret: {name: drill-key, key: id.txt}}}\n\
             status:\n  lastBackup: {objectKey: 's3://bucket/etcd.backup_v42_x', etcdVersion: 3.6.16,\n\
               encryptedTo: [age1abc], number: 7,\n    contents: {revision: 40, keyCount: 12, hashKv: 99, contentSha256: 'ab12'}}",
        )
        .unwrap()
    }

    fn pod_of(backup: &EtcdBackup) -> Result<Value, CannotDrill> {
        let drill = backup.spec.drill.clone().unwrap();
        let record = backup.status.as_ref().unwrap().last_backup.clone().unwrap();
        let source =
            fetch_pod::source::newest_backup(backup, drill.identity_secret.clone()).unwrap();
        let pod = drill_pod(
            backup,
            &drill,
            &record,
            &source,
            "localhost/etcd-backup:dev",
            "nightly-drill-1",
            1800,
        )?;
        Ok(serde_json::to_value(pod).unwrap())
    }

    #[test]
    fn the_drill_fetches_restores_serves_on_loopback_and_checks_the_record() {
        let pod = pod_of(&backup()).unwrap();
        let spec = &pod["spec"];
        let init = spec["initContainers"].as_array().unwrap();
        let names: Vec<&str> = init.iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["fetch", "restore", "etcd"]);
        assert_eq!(init[1]["image"], "localhost/etcd:v3.6.16");
        assert_eq!(init[1]["command"][0], "/usr/local/bin/etcdutl");
        let restore = init[1]["command"].to_string();
        assert!(!restore.contains("bump-revision"), "{restore}");
        assert_eq!(init[2]["restartPolicy"], "Always");
        let etcd = init[2]["command"].to_string();
        assert!(etcd.contains("--listen-client-urls=http://127.0.0.1:2379"));
        assert!(!etcd.contains("0.0.0.0"));
        let check = &spec["containers"][0];
        let args: Vec<&str> = check["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        let expect = args[args.iter().position(|a| *a == "--expect").unwrap() + 1];
        let expect: Value = serde_json::from_str(expect).unwrap();
        assert_eq!(expect["keyCount"], 12);
        assert_eq!(expect["hashKv"], 99);
        // The digest of the key space is what the check compares first.
        assert_eq!(expect["contentSha256"], "ab12");
        // Only the fetch holds the private key; no container gets a token or runs as root.
        let with_identity: Vec<&str> = init
            .iter()
            .chain(spec["containers"].as_array().unwrap())
            .filter(|c| c["volumeMounts"].to_string().contains("age-identity"))
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(with_identity, ["fetch"]);
        assert_eq!(spec["automountServiceAccountToken"], false);
        assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
        assert_eq!(spec["activeDeadlineSeconds"], 1800);
        assert_eq!(pod["metadata"]["ownerReferences"][0]["name"], "nightly");
        assert_eq!(pod["metadata"]["labels"][UID_LABEL], "b-uid");
    }

    #[test]
    fn etcd_3_4_backups_are_restored_with_etcdctl() {
        let mut backup = backup();
        let record = backup
            .status
            .as_mut()
            .unwrap()
            .last_backup
            .as_mut()
            .unwrap();
        record.etcd_version = Some("3.4.23".into());
        let pod = pod_of(&backup).unwrap();
        assert_eq!(
            pod["spec"]["initContainers"][1]["command"][0],
            "/usr/local/bin/etcdctl"
        );
    }

    #[test]
    fn a_backup_without_recorded_contents_cannot_be_drilled() {
        let mut backup = backup();
        let record = backup
            .status
            .as_mut()
            .unwrap()
            .last_backup
            .as_mut()
            .unwrap();
        record.contents = None;
        assert_eq!(pod_of(&backup), Err(CannotDrill::NothingRecorded));
    }

    /// Backups written with the operator's identity (no awsSecret) cannot be read by a drill
    /// pod: refused before a pod is made, with what to do.
    #[test]
    fn a_backup_without_keys_of_its_own_is_not_drilled() {
        let mut backup = backup();
        backup.spec.s3.as_mut().unwrap().aws_secret = None;
        let refused = pod_of(&backup).unwrap_err();
        assert_eq!(refused, CannotDrill::NoCredentials);
        assert!(refused.to_string().contains("s3.awsSecret"), "{refused}");
    }

    /// An encrypted backup without drill.identitySecret: the key is missing, which the reason
    /// says (not that the backup cannot be reached).
    #[test]
    fn an_encrypted_backup_without_an_identity_fails_as_no_usable_identity() {
        let mut backup = backup();
        let identity = backup.spec.drill.as_ref().unwrap().identity_secret.clone();
        let refused =
            CannotDrill::from(fetch_pod::source::newest_backup(&backup, None).unwrap_err());
        assert_eq!(refused.reason(), "NoUsableIdentity");
        assert!(refused.to_string().contains("age1abc"), "{refused}");
        let status = backup.status.as_mut().unwrap();
        status.last_backup.as_mut().unwrap().object_key = "ftp://elsewhere".into();
        let unreachable =
            CannotDrill::from(fetch_pod::source::newest_backup(&backup, identity).unwrap_err());
        assert_eq!(unreachable.reason(), "CannotReachBackup");
    }
}
