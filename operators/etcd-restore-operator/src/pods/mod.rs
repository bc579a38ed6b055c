//! Pure builders of the restore's own objects.
//!
//! - One claim per new member: the claim the cluster would make for it, but labelled and owned
//!   as the restore's until the snapshot is verified and the old members stopped; then it is
//!   joined to the cluster ([`join_patch`]). Until then the EtcdCluster operator never sees it,
//!   and deleting a failed EtcdRestore deletes it.
//! - One run-once restore pod per new member (`restartPolicy: Never`, says why it failed in its
//!   termination message): an init container fetches the snapshot with `etcd-backup fetch`
//!   (sha256 trailer and manifest verified while streaming, renamed into place only when whole;
//!   its report is the restore's verification) into a scratch volume, then the etcd image's own
//!   restore tool writes the member's data dir on its claim. The member pod itself is the
//!   EtcdCluster operator's plain pod, started on that claim later. (Restoring in init
//!   containers of the member pod would run the restore again whenever the kubelet recreates
//!   the pod sandbox, over live data.)
//! - Where those pods may run: [`placement`].

mod placement;
mod point_in_time;

use placement::{off_sibling_nodes, restore_affinity};
pub use placement::{restore_nodes, sibling_nodes};
use point_in_time::point_containers;
pub use point_in_time::{POINT_CONTAINERS, REPORT_CONTAINER as POINT_REPORT_CONTAINER};

use std::collections::BTreeMap;

use etcd_api::{
    EtcdCluster, EtcdClusterSpec, EtcdRestore, NewCluster, PodPolicy, RestorePlan, ScratchMedium,
};
use etcd_cluster::EtcdVersion;
use etcd_cluster::restore::{RestoreCommand, restore_command};
use etcd_members::build::{self, DATA_DIR, DATA_MOUNT};
use fetch_pod::{FetchMounts, Source, fetch_container};
use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvVar, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PersistentVolumeClaimVolumeSource, Pod, PodSpec, Volume, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::ObjectMeta;
use kube::{Resource, ResourceExt};
use operator_runtime::pod_security::{self, RunAs};
use operator_runtime::volumes::mount;
use serde_json::{Value, json};

use crate::status::RESTORE_ANNOTATION;

/// Labels of the restore's pods and staged claims (not the members' `app=etcd`, so the
/// EtcdCluster operator never takes them for members).
pub const APP: &str = "etcd-restore";
pub const RESTORE_LABEL: &str = "etcd_restore";
/// Where the fetched snapshot lands (a scratch volume, gone with the pod).
pub const SNAPSHOT_DIR: &str = "/var/etcd-restore";
/// The container of a restore pod whose output reports the verified snapshot.
pub fn report_container(restore: &EtcdRestore) -> &'static str {
    match restore.spec.point_in_time {
        Some(_) => POINT_REPORT_CONTAINER,
        None => "fetch",
    }
}

pub fn restore_pod_name(member: &str) -> String {
    format!("{member}-restore")
}

pub fn label_selector(restore: &str) -> String {
    format!("app={APP},{RESTORE_LABEL}={restore}")
}

/// The claim `member` is restored onto: the cluster's claim for it (spec, size, version
/// annotation), the restore's until joined. `None` when the cluster has no claim spec.
pub fn staged_claim(
    restore: &EtcdRestore,
    cluster: &EtcdCluster,
    member: &str,
    version: &str,
) -> Option<PersistentVolumeClaim> {
    let mut claim = build::claim(cluster, member, version)?;
    claim.metadata.labels = Some(restore_labels(restore));
    claim.metadata.owner_references = restore.controller_owner_ref(&()).map(|o| vec![o]);
    Some(claim)
}

/// The merge patch that gives a staged claim to the cluster: the labels and owner its own
/// claims have (so the EtcdCluster operator and its garbage collection treat it as a member's),
/// without the restore's label.
pub fn join_patch(cluster: &EtcdCluster, member: &str, version: &str) -> Option<Value> {
    let claim = build::claim(cluster, member, version)?;
    let mut labels = json!(claim.metadata.labels.unwrap_or_default());
    labels[RESTORE_LABEL] = Value::Null;
    Some(json!({"metadata": {
        "labels": labels,
        "ownerReferences": claim.metadata.owner_references.unwrap_or_default(),
    }}))
}

pub(crate) fn restore_labels(restore: &EtcdRestore) -> BTreeMap<String, String> {
    own_labels(&restore.name_any())
}

/// The labels of the pods and staged claims of restores named `restore`.
pub fn own_labels(restore: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app".to_string(), APP.to_string()),
        (RESTORE_LABEL.to_string(), restore.to_string()),
    ])
}

/// The scratch emptyDir the snapshot is fetched into: on the node's disk unless the restore
/// asks for memory.
fn scratch_volume(restore: &EtcdRestore) -> Volume {
    let medium = match restore.spec.scratch_medium.unwrap_or_default() {
        ScratchMedium::Disk => None,
        ScratchMedium::Memory => Some("Memory".to_string()),
    };
    Volume {
        name: "snapshot".into(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The EtcdCluster a restore with `spec.newCluster` creates when the cluster does not exist:
/// paused (the restore unpauses it once the members are restored) and held by the restore
/// (`uid` in [`RESTORE_ANNOTATION`]), one claim per member of the size and class asked for.
pub fn new_cluster(name: &str, uid: &str, new: &NewCluster) -> EtcdCluster {
    let claim = PersistentVolumeClaimSpec {
        access_modes: Some(vec!["ReadWriteOnce".into()]),
        resources: Some(VolumeResourceRequirements {
            requests: Some(BTreeMap::from([(
                "storage".to_string(),
                Quantity(new.storage.clone()),
            )])),
            ..Default::default()
        }),
        storage_class_name: new.storage_class_name.clone(),
        ..Default::default()
    };
    let mut cluster = EtcdCluster::new(
        name,
        EtcdClusterSpec {
            size: new.size,
            version: Some(new.version.clone()),
            repository: new.repository.clone(),
            paused: Some(true),
            pod: Some(PodPolicy {
                persistent_volume_claim_spec: Some(claim),
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    cluster.metadata.annotations = Some(BTreeMap::from([(
        RESTORE_ANNOTATION.to_string(),
        uid.to_string(),
    )]));
    cluster
}

/// The pod that restores `member` of `plan` onto its claim (which must exist: the pod mounts it
/// by the member's name, as the member pod will), with the restore tool of `version` (the
/// plan's, parsed by the caller). `sibling_nodes`: the nodes this restore's other pods were
/// scheduled to (see [`off_sibling_nodes`]).
#[allow(clippy::too_many_arguments)]
pub fn restore_pod(
    restore: &EtcdRestore,
    cluster: &EtcdCluster,
    member: &str,
    plan: &RestorePlan,
    version: &EtcdVersion,
    image: &str,
    source: &Source,
    sibling_nodes: &[String],
) -> (Pod, RestoreCommand) {
    let snapshot = format!("{SNAPSHOT_DIR}/snapshot.db");
    let command = restore_command(
        version,
        &build::names(cluster),
        member,
        &plan.members,
        &plan.token,
        &snapshot,
        DATA_DIR,
    );
    let mut volumes = FetchMounts::of(source).volumes;
    volumes.push(scratch_volume(restore));
    let etcd_image = cluster.spec.image_of(&plan.version);
    let resources = cluster.spec.pod.as_ref().and_then(|p| p.resources.clone());
    // A plain restore fetches the snapshot; a restore to a point makes it (see point_in_time).
    let init = match &source.point {
        None => vec![fetch_container(
            "fetch",
            image,
            source,
            &snapshot,
            mount("snapshot", SNAPSHOT_DIR, false),
        )],
        Some(point) => {
            let made = point_containers(
                source,
                point,
                image,
                &etcd_image,
                version,
                resources.clone(),
                &snapshot,
                ("snapshot", SNAPSHOT_DIR),
            );
            volumes.push(made.volume);
            made.init
        }
    };
    volumes.push(Volume {
        name: "etcd-data".into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: member.into(),
            ..Default::default()
        }),
        ..Default::default()
    });
    let mut argv = command.argv.clone();
    argv[0] = format!("/usr/local/bin/{}", argv[0]);
    let tool = Container {
        name: "restore".into(),
        image: Some(etcd_image),
        command: Some(argv),
        env: Some(vec![EnvVar {
            name: "ETCDCTL_API".into(),
            value: Some("3".into()),
            ..Default::default()
        }]),
        volume_mounts: Some(vec![
            mount("etcd-data", DATA_MOUNT, false),
            mount("snapshot", SNAPSHOT_DIR, true),
        ]),
        resources,
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    };
    let spec = PodSpec {
        init_containers: Some(init),
        containers: vec![tool],
        volumes: Some(volumes),
        ..Default::default()
    };
    let mut pod = pod(restore, cluster, member, spec, sibling_nodes);
    if let (Some(spec), Some(node)) = (
        pod.spec.as_mut(),
        plan.survivor.as_ref().and_then(|s| s.node.as_deref()),
    ) {
        spec.affinity = Some(placement::on_node(spec.affinity.take(), node));
    }
    (pod, command)
}

/// The run-once pod of `restore` for `member`, scheduled like that member (node selector,
/// tolerations, affinity, security context), owned by the EtcdRestore.
fn pod(
    restore: &EtcdRestore,
    cluster: &EtcdCluster,
    member: &str,
    mut spec: PodSpec,
    sibling_nodes: &[String],
) -> Pod {
    let policy = cluster.spec.pod.clone().unwrap_or_default();
    let affinity = restore_affinity(restore, cluster, member)
        .map(|a| off_sibling_nodes(a, restore, sibling_nodes));
    spec.restart_policy = Some("Never".into());
    spec.automount_service_account_token = Some(false);
    spec.enable_service_links = Some(false);
    spec.node_selector = policy.node_selector.clone();
    spec.tolerations = policy.tolerations.clone();
    spec.affinity = affinity;
    // Pod Security "restricted", like the member it restores; the claim is a fresh one, so its
    // data is the non-root user's (see build::run_as).
    spec.security_context = Some(pod_security::pod_context(
        policy.security_context.as_ref(),
        RunAs::NonRoot,
    ));
    let init = spec.init_containers.iter_mut().flatten();
    for container in spec.containers.iter_mut().chain(init) {
        container.security_context = Some(pod_security::container_context());
    }
    Pod {
        metadata: ObjectMeta {
            name: Some(restore_pod_name(member)),
            namespace: restore.namespace(),
            labels: Some(restore_labels(restore)),
            owner_references: restore.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use fetch_pod::source::from_spec;

    #[test]
    fn a_new_cluster_is_created_paused_held_by_the_restore_with_a_claim_per_member() {
        let new: NewCluster = serde_saphyr::from_str(
            "{size: 3, version: 3.5.16, repository: localhost/etcd, storage: 1Gi, storageClassName: fast}",
        )
        .unwrap();
        let expected: EtcdCluster = serde_saphyr::from_str(
            "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdCluster\n\
             metadata: {name: c, annotations: {etcd.database.coreos.com/restore: r-uid}}\n\
             spec: {size: 3, version: 3.5.16, repository: localhost/etcd, paused: true,\n\
               pod: {persistentVolumeClaimSpec: {accessModes: [ReadWriteOnce],\n\
                 resources: {requests: {storage: 1Gi}}, storageClassName: fast}}}",
        )
        .unwrap();
        assert_eq!(new_cluster("c", "r-uid", &new), expected);
        let default_class = NewCluster {
            storage_class_name: None,
            repository: None,
            ..new
        };
        let built = new_cluster("c", "r-uid", &default_class);
        let pod = built.spec.pod.unwrap();
        let claim = pod.persistent_volume_claim_spec.unwrap();
        assert_eq!(claim.storage_class_name, None);
        assert_eq!(built.spec.repository, None);
    }

    pub(crate) fn restore() -> EtcdRestore {
        serde_saphyr::from_str(
            "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdRestore\n\
             metadata: {name: c, namespace: ns, uid: r-uid}\n\
             spec: {etcdCluster: {name: c}, backupStorageType: S3,\n\
               s3: {path: bucket/etcd.backup, awsSecret: aws, endpoint: 'http://s3:3900', forcePathStyle: true}}",
        )
        .unwrap()
    }

    pub(crate) fn cluster(version: &str) -> EtcdCluster {
        serde_saphyr::from_str(&format!(
            "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdCluster\n\
             metadata: {{name: c, namespace: ns, uid: c-uid}}\n\
             spec: {{size: 3, version: '{version}', repository: localhost/etcd,\n\
               pod: {{persistentVolumeClaimSpec: {{accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 64Mi}}}}}}}}}}"
        ))
        .unwrap()
    }

    pub(crate) fn plan(version: &str) -> RestorePlan {
        RestorePlan {
            members: vec!["c-3".into(), "c-4".into(), "c-5".into()],
            token: "c-uid-r-uid".into(),
            version: version.into(),
            detached_claims: vec!["c-0".into()],
            survivor: None,
            handed_over: None,
        }
    }

    pub(crate) fn yaml(pod: &Pod) -> Value {
        serde_json::to_value(pod).unwrap()
    }

    #[test]
    fn a_survivors_restore_pod_runs_on_the_survivors_node_within_the_clusters_own_terms() {
        let mut cluster = cluster("3.6.16");
        cluster.spec.pod.as_mut().unwrap().affinity = Some(
            serde_json::from_value(serde_json::json!({"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]},
                    {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["nvme"]}]}]}}}))
            .unwrap(),
        );
        let mut plan = plan("3.6.16");
        plan.members = vec!["c-3".into()];
        plan.survivor = Some(etcd_api::Survivor {
            member: "c-2".into(),
            node: Some("node-a".into()),
            ..Default::default()
        });
        let source = fetch_pod::source::from_member("http://c-2.c.ns.svc:2379".into(), None);
        let pod_of = |plan: &RestorePlan| {
            let version = EtcdVersion::parse("3.6.16").unwrap();
            let image = "localhost/etcd-backup:dev";
            restore_pod(
                &restore(),
                &cluster,
                "c-3",
                plan,
                &version,
                image,
                &source,
                &[],
            )
            .0
        };
        let pod = pod_of(&plan);
        let terms = &yaml(&pod)["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"];
        let on_node =
            serde_json::json!([{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]);
        assert_eq!(terms.as_array().unwrap().len(), 2, "{terms}");
        for term in terms.as_array().unwrap() {
            assert_eq!(term["matchFields"], on_node, "{terms}");
            assert!(term["matchExpressions"].is_array(), "{terms}");
        }
        // A restore from a backup is not held to a node.
        plan.survivor = None;
        assert!(!yaml(&pod_of(&plan)).to_string().contains("node-a"));
    }

    /// Member c-4's restore pod, 3.5.16, from `restore`'s own source.
    fn restore_pod_of(restore: &EtcdRestore) -> Value {
        let source = from_spec(&restore.spec).unwrap();
        let (pod, _) = restore_pod(
            restore,
            &cluster("3.5.16"),
            "c-4",
            &plan("3.5.16"),
            &EtcdVersion::parse("3.5.16").unwrap(),
            "localhost/etcd-backup:dev",
            &source,
            &[],
        );
        yaml(&pod)
    }

    #[test]
    fn a_restore_to_a_point_prepares_restores_serves_and_replays_before_the_member_restore() {
        let pod_for = |version: &str| {
            let mut restore = restore();
            restore.spec.point_in_time = Some(etcd_api::PointInTime {
                revision: Some(41),
                time: None,
                cluster_id: Some("cdf818194e3a8c32".into()),
            });
            let mut source = from_spec(&restore.spec).unwrap();
            source.url = "s3://bucket/etcd.backup".into();
            source.point = restore.spec.point_in_time.clone();
            source.identity = Some(etcd_api::SecretKeyRef {
                name: "restore-key".into(),
                key: "identity.txt".into(),
            });
            assert_eq!(report_container(&restore), "replay");
            let (pod, _) = restore_pod(
                &restore,
                &cluster(version),
                "c-4",
                &plan(version),
                &EtcdVersion::parse(version).unwrap(),
                "localhost/etcd-backup:dev",
                &source,
                &[],
            );
            yaml(&pod)
        };
        let pod = pod_for("3.6.16");
        let init = pod["spec"]["initContainers"].as_array().unwrap();
        let names: Vec<&str> = init.iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            ["prepare", "scratch-restore", "scratch-etcd", "replay"]
        );
        let args = |c: &Value, key: &str| -> Vec<String> {
            c[key]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().to_string())
                .collect()
        };
        let prepare = args(&init[0], "args");
        let tail: Vec<&str> = prepare[prepare.len() - 12..]
            .iter()
            .map(String::as_str)
            .collect();
        assert_eq!(
            tail,
            [
                "prepare-point",
                "s3://bucket/etcd.backup",
                "--revision",
                "41",
                "--dir",
                "/var/etcd-point",
                "--etcd-version",
                "3.6.16",
                "--cluster-id",
                "cdf818194e3a8c32",
                "--identity",
                "/etc/etcd-backup/age/identity.txt"
            ]
        );
        // The scratch member: the cluster's image, on loopback, a native sidecar.
        assert_eq!(init[1]["image"], "localhost/etcd:v3.6.16");
        assert_eq!(init[2]["restartPolicy"], "Always");
        let etcd = args(&init[2], "command");
        assert!(etcd.contains(&"--listen-client-urls=http://127.0.0.1:2379".to_string()));
        assert!(etcd.contains(&"--unsafe-no-fsync".to_string()));
        let replay = args(&init[3], "args");
        let out = replay.iter().position(|a| a == "--out").unwrap();
        assert_eq!(replay[out + 1], "/var/etcd-restore/snapshot.db");
        // The private key is mounted where the backups are read, never in etcd's containers.
        let mounts = |c: &Value| c["volumeMounts"].to_string();
        assert!(
            mounts(&init[0]).contains("age-identity") && mounts(&init[3]).contains("age-identity")
        );
        assert!(
            !mounts(&init[1]).contains("age-identity")
                && !mounts(&init[2]).contains("age-identity")
        );
        // The member restore restores the replayed file.
        let restore = args(&pod["spec"]["containers"][0], "command");
        assert!(
            restore.contains(&"/var/etcd-restore/snapshot.db".to_string()),
            "{restore:?}"
        );
        // etcd 3.4 has no --unsafe-no-fsync.
        let old = pod_for("3.4.35");
        let etcd = args(&old["spec"]["initContainers"][2], "command");
        assert!(!etcd.contains(&"--unsafe-no-fsync".to_string()));
    }

    #[test]
    fn a_restore_to_a_point_in_azure_reads_the_archive_with_the_abs_secret() {
        let mut restore: EtcdRestore = serde_saphyr::from_str(
            "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdRestore\n\
             metadata: {name: c, namespace: ns, uid: r-uid}\n\
             spec: {etcdCluster: {name: c}, backupStorageType: ABS, backupRef: {name: nightly}}",
        )
        .unwrap();
        restore.spec.point_in_time = Some(etcd_api::PointInTime {
            revision: Some(41),
            time: None,
            cluster_id: None,
        });
        let backup: etcd_api::EtcdBackup = serde_saphyr::from_str(
            "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdBackup\n\
             metadata: {name: nightly}\n\
             spec: {etcdEndpoints: ['http://c-client:2379'], storageType: ABS,\n\
               abs: {path: container/etcd.backup, absSecret: abs, endpoint: 'http://azurite:10000'},\n\
               backupPolicy: {backupIntervalInSecond: 60}, continuous: {}}\n\
             status: {lastBackup: {objectKey: 'azblob://container/etcd.backup_v42_2026-11-24-03:00:00'}}",
        )
        .unwrap();
        let source = fetch_pod::source::from_backup(&restore.spec, &backup).unwrap();
        assert_eq!(source.url, "azblob://container/etcd.backup");
        let (pod, _) = restore_pod(
            &restore,
            &cluster("3.6.16"),
            "c-4",
            &plan("3.6.16"),
            &EtcdVersion::parse("3.6.16").unwrap(),
            "localhost/etcd-backup:dev",
            &source,
            &[],
        );
        let pod = yaml(&pod);
        let init = pod["spec"]["initContainers"].as_array().unwrap();
        // Both tools that read the archive reach Azure with the Secret mounted as files.
        for tool in [&init[0], &init[3]] {
            let args = tool["args"].to_string();
            assert!(
                args.contains("\"--azure-secret-dir\",\"/etc/etcd-backup/abs\"")
                    && args.contains("\"--azure-endpoint\",\"http://azurite:10000\""),
                "{args}"
            );
            assert!(
                tool["volumeMounts"]
                    .to_string()
                    .contains("/etc/etcd-backup/abs"),
                "{}",
                tool["volumeMounts"]
            );
        }
        let volumes = pod["spec"]["volumes"].to_string();
        assert!(volumes.contains("\"secretName\":\"abs\""), "{volumes}");
    }

    #[test]
    fn an_sse_c_backup_is_fetched_with_its_key_as_a_file() {
        let mut restore = restore();
        restore.spec.s3.as_mut().unwrap().server_side_encryption = Some(
            serde_saphyr::from_str("{mode: SSE-C, customerKeySecret: {name: sse, key: key.b64}}")
                .unwrap(),
        );
        let pod = restore_pod_of(&restore);
        let fetch = &pod["spec"]["initContainers"][0];
        let args = fetch["args"].as_array().unwrap();
        let at = args
            .iter()
            .position(|a| a == "--s3-sse-c-key-file")
            .unwrap();
        assert_eq!(args[at + 1], "/etc/etcd-backup/sse-c/key.b64");
        let volume = pod["spec"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "sse-c")
            .unwrap();
        assert_eq!(volume["secret"]["secretName"], "sse");
        assert!(
            fetch["volumeMounts"]
                .to_string()
                .contains("/etc/etcd-backup/sse-c")
        );
    }

    #[test]
    fn an_encrypted_backup_is_fetched_with_the_identity_as_a_file_only() {
        let mut restore = restore();
        restore.spec.decryption = Some(etcd_api::RestoreDecryption {
            identity_secret: etcd_api::SecretKeyRef {
                name: "restore-key".into(),
                key: "identity.txt".into(),
            },
        });
        let pod = restore_pod_of(&restore);
        let fetch = &pod["spec"]["initContainers"][0];
        let args = fetch["args"].as_array().unwrap();
        let at = args.iter().position(|a| a == "--identity").unwrap();
        assert_eq!(args[at + 1], "/etc/etcd-backup/age/identity.txt");
        let volume = pod["spec"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "age-identity")
            .unwrap();
        assert_eq!(volume["secret"]["secretName"], "restore-key");
        assert_eq!(volume["secret"]["defaultMode"], 0o440);
        assert!(
            fetch["volumeMounts"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["name"] == "age-identity" && m["mountPath"] == "/etc/etcd-backup/age")
        );
        // Only the fetch sees it: not the restore tool. The operator never holds the key, so
        // what could leak it is a reference to its Secret: the volume above is the only one (no
        // env var's secretKeyRef, no envFrom).
        let tool = &pod["spec"]["containers"][0];
        assert!(!tool["volumeMounts"].to_string().contains("age-identity"));
        assert_eq!(
            pod.to_string().matches("\"restore-key\"").count(),
            1,
            "{pod}"
        );
    }

    #[test]
    fn the_fetch_runs_etcd_backup_with_the_secret_and_no_token() {
        let pod = restore_pod_of(&restore());
        assert_eq!(pod["metadata"]["ownerReferences"][0]["uid"], "r-uid");
        assert_eq!(pod["metadata"]["labels"]["app"], "etcd-restore");
        assert_eq!(pod["spec"]["restartPolicy"], "Never");
        assert_eq!(pod["spec"]["automountServiceAccountToken"], false);
        let fetch = &pod["spec"]["initContainers"][0];
        assert_eq!(fetch["image"], "localhost/etcd-backup:dev");
        assert_eq!(
            fetch["args"],
            json!([
                "--output",
                "json",
                "--log-format",
                "json",
                "--s3-endpoint",
                "http://s3:3900",
                "--s3-force-path-style",
                "fetch",
                "s3://bucket/etcd.backup",
                "--out",
                "/var/etcd-restore/snapshot.db"
            ])
        );
        assert_eq!(fetch["env"][0]["value"], "/etc/etcd-backup/aws/credentials");
        assert_eq!(pod["spec"]["volumes"][0]["secret"]["secretName"], "aws");
    }

    #[test]
    fn the_snapshot_is_fetched_to_the_nodes_disk_unless_memory_is_asked_for() {
        let scratch = |medium: Option<ScratchMedium>| {
            let mut restore = restore();
            restore.spec.scratch_medium = medium;
            let pod = restore_pod_of(&restore);
            let volumes = pod["spec"]["volumes"].as_array().unwrap().clone();
            let snapshot = volumes.iter().find(|v| v["name"] == "snapshot").unwrap();
            // Both the fetch and the restore tool see it where the tool reads the snapshot.
            for container in [
                &pod["spec"]["initContainers"][0],
                &pod["spec"]["containers"][0],
            ] {
                let mounts = container["volumeMounts"].as_array().unwrap();
                assert!(
                    mounts
                        .iter()
                        .any(|m| m["name"] == "snapshot" && m["mountPath"] == SNAPSHOT_DIR)
                );
            }
            snapshot["emptyDir"].clone()
        };
        assert_eq!(scratch(None), json!({}));
        assert_eq!(scratch(Some(ScratchMedium::Disk)), json!({}));
        assert_eq!(
            scratch(Some(ScratchMedium::Memory)),
            json!({"medium": "Memory"})
        );
    }

    #[test]
    fn a_staged_claim_is_the_restores_until_joined_to_the_cluster() {
        let cluster = cluster("3.5.16");
        let staged = staged_claim(&restore(), &cluster, "c-4", "3.5.16").unwrap();
        let built = build::claim(&cluster, "c-4", "3.5.16").unwrap();
        assert_eq!(staged.spec, built.spec);
        assert_eq!(staged.metadata.annotations, built.metadata.annotations);
        let staged = serde_json::to_value(&staged).unwrap();
        assert_eq!(staged["metadata"]["name"], "c-4");
        assert_eq!(
            staged["metadata"]["labels"],
            json!({"app": "etcd-restore", "etcd_restore": "c"})
        );
        assert_eq!(staged["metadata"]["ownerReferences"][0]["uid"], "r-uid");
        // Joined: exactly the cluster's labels and owner (the merge patch drops the restore's).
        let mut joined = staged.clone();
        json_patch::merge(&mut joined, &join_patch(&cluster, "c-4", "3.5.16").unwrap());
        assert_eq!(
            joined["metadata"]["labels"],
            serde_json::to_value(&built.metadata.labels).unwrap()
        );
        assert_eq!(joined["metadata"]["ownerReferences"][0]["uid"], "c-uid");
        assert_eq!(
            joined["metadata"]["ownerReferences"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn restore_pods_fetch_then_run_the_versions_own_tool_on_the_members_claim() {
        let restore = restore();
        let source = from_spec(&restore.spec).unwrap();
        let (pod, command) = restore_pod(
            &restore,
            &cluster("3.5.16"),
            "c-4",
            &plan("3.5.16"),
            &EtcdVersion::parse("3.5.16").unwrap(),
            "localhost/etcd-backup:dev",
            &source,
            &[],
        );
        assert!(command.bumps_revision);
        let pod = yaml(&pod);
        assert_eq!(pod["metadata"]["name"], "c-4-restore");
        let fetch = &pod["spec"]["initContainers"][0];
        let args: Vec<&str> = fetch["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(
            &args[args.len() - 4..],
            [
                "fetch",
                "s3://bucket/etcd.backup",
                "--out",
                "/var/etcd-restore/snapshot.db"
            ]
        );
        let tool = &pod["spec"]["containers"][0];
        assert_eq!(tool["image"], "localhost/etcd:v3.5.16");
        assert_eq!(tool["command"][0], "/usr/local/bin/etcdutl");
        let argv: Vec<&str> = tool["command"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert!(argv.contains(&"--name=c-4"));
        assert!(argv.contains(&"--initial-cluster-token=c-uid-r-uid"));
        assert!(argv.contains(&"--data-dir=/var/etcd/data"));
        assert!(
            argv.iter()
                .any(|a| a.starts_with("--initial-cluster=c-3=http://c-3.c.ns.svc"))
        );
        let claim = pod["spec"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "etcd-data")
            .unwrap();
        assert_eq!(claim["persistentVolumeClaim"]["claimName"], "c-4");
        // Pod Security "restricted": the non-root user of the member it restores, every
        // container locked down.
        let context = &pod["spec"]["securityContext"];
        assert_eq!(context["runAsNonRoot"], true);
        assert_eq!(context["runAsUser"], 65532);
        assert_eq!(context["seccompProfile"]["type"], "RuntimeDefault");
        for container in [fetch, tool] {
            assert_eq!(
                container["securityContext"]["allowPrivilegeEscalation"],
                false
            );
            assert_eq!(
                container["securityContext"]["capabilities"]["drop"][0],
                "ALL"
            );
        }

        // 3.4.23 has no --bump-revision and restores with etcdctl.
        let (pod, command) = restore_pod(
            &restore,
            &cluster("3.4.23"),
            "c-4",
            &plan("3.4.23"),
            &EtcdVersion::parse("3.4.23").unwrap(),
            "i",
            &source,
            &[],
        );
        assert!(!command.bumps_revision);
        assert_eq!(
            yaml(&pod)["spec"]["containers"][0]["command"][0],
            "/usr/local/bin/etcdctl"
        );
    }

    #[test]
    fn local_sources_mount_the_backup_claim_read_only() {
        let source = Source {
            url: "file:///var/lib/etcd-backup/b/etcd.db".into(),
            s3: None,
            cloud: None,
            claim: Some("backups".into()),
            identity: None,
            expected: None,
            member: None,
            point: None,
        };
        let (pod, _) = restore_pod(
            &restore(),
            &cluster("3.5.16"),
            "c-4",
            &plan("3.5.16"),
            &EtcdVersion::parse("3.5.16").unwrap(),
            "i",
            &source,
            &[],
        );
        let pod = yaml(&pod);
        assert_eq!(
            pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
            "backups"
        );
        assert_eq!(
            pod["spec"]["volumes"][0]["persistentVolumeClaim"]["readOnly"],
            true
        );
        assert_eq!(pod["spec"]["initContainers"][0]["env"], json!([]));
    }
}
