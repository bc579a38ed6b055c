//! Pure builders: the member pods, their claims and the two Services of an EtcdCluster, from its
//! spec. Unit-tested from YAML; the controller only applies what these return.

use std::collections::BTreeMap;

use etcd_api::{EtcdCluster, EtcdClusterSpec};
use etcd_cluster::checks::{self, Spelling};
use etcd_cluster::naming::{CLIENT_PORT, PEER_PORT};
use etcd_cluster::{ClusterNames, EtcdVersion};
use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, HTTPGetAction,
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, PodAffinityTerm,
    PodAntiAffinity, PodSpec, Probe, Service, ServicePort, ServiceSpec, Volume,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::ObjectMeta;
use kube::{Resource, ResourceExt};
use operator_runtime::pod_security::{self, RunAs};
use operator_runtime::volumes::{mount, secret_volume};

use crate::labels::{
    NOTHING_RAN, POD_SECURITY_ANNOTATION, RESTRICTED, VERSION_ANNOTATION, VERSION_RAN_ANNOTATION,
    member_labels, selector,
};
use crate::spread::{MemberData, member_spread};
use crate::tls::{PEER_DIR, SERVER_DIR, TlsSecrets};

/// Where the data volume is mounted, and etcd's data dir in it (coreos layout).
pub const DATA_MOUNT: &str = "/var/etcd";
pub const DATA_DIR: &str = "/var/etcd/data";
/// etcd's `/health` and `/metrics` listener, used by the readiness probe (works with TLS on
/// the client port and with images without a shell).
pub const METRICS_PORT: u16 = 8080;

/// Every member's readiness: etcd's `/health` every second, because each new member
/// (scaling, healing, a restore) waits for it and a slow probe delays all of them (every 2 s,
/// a restored member turned ready up to 2 s after etcd was healthy); 16 failures in a row
/// (16 s or more) make it unready, as 3 x 5 s did before. A `NOSPACE` alarm does not count
/// (`exclude=NOSPACE`, etcd 3.5 and later, as kubeadm probes): the members still serve reads,
/// deletes and compaction, which is how the cluster gets out of it, and an unready member
/// would also hold up the defragmentation that returns the space.
pub fn readiness_probe() -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some("/health?exclude=NOSPACE".into()),
            port: IntOrString::Int(METRICS_PORT.into()),
            ..Default::default()
        }),
        period_seconds: Some(1),
        failure_threshold: Some(16),
        timeout_seconds: Some(5),
        ..Default::default()
    }
}

/// How the member starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bootstrap {
    /// The first member: `--initial-cluster-state=new` with this cluster token.
    New { token: String },
    /// Joins the members named (itself included) with `--initial-cluster-state=existing`.
    Existing { initial_cluster: Vec<String> },
}

pub fn names(cluster: &EtcdCluster) -> ClusterNames {
    let domain = cluster
        .spec
        .pod
        .as_ref()
        .and_then(|p| p.cluster_domain.as_deref());
    let tls = TlsSecrets::of(&cluster.spec);
    ClusterNames::new(
        &cluster.name_any(),
        &cluster.namespace().unwrap_or_default(),
        domain,
    )
    .with_tls(tls.peer.is_some(), tls.server.is_some())
}

fn owned_meta(cluster: &EtcdCluster, name: &str, labels: BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: cluster.namespace(),
        labels: Some(labels),
        owner_references: cluster.controller_owner_ref(&()).map(|o| vec![o]),
        ..Default::default()
    }
}

/// Whether members keep their data on claims.
pub fn persistent(spec: &EtcdClusterSpec) -> bool {
    spec.pod
        .as_ref()
        .is_some_and(|p| p.persistent_volume_claim_spec.is_some())
}

/// The member's data claim, named like the member, annotated with the etcd version its data
/// was last run with (a member restarting on it keeps that version).
pub fn claim(cluster: &EtcdCluster, member: &str, version: &str) -> Option<PersistentVolumeClaim> {
    let spec = cluster
        .spec
        .pod
        .as_ref()?
        .persistent_volume_claim_spec
        .clone()?;
    let labels = member_labels(&cluster.spec, &cluster.name_any(), member);
    let mut metadata = owned_meta(cluster, member, labels);
    metadata.annotations = Some(BTreeMap::from([
        (VERSION_ANNOTATION.to_string(), version.to_string()),
        (POD_SECURITY_ANNOTATION.to_string(), RESTRICTED.to_string()),
        (VERSION_RAN_ANNOTATION.to_string(), NOTHING_RAN.to_string()),
    ]));
    Some(PersistentVolumeClaim {
        metadata,
        spec: Some(spec),
        status: None,
    })
}

/// Whom a member runs as: the non-root default, unless its claim holds data written as the
/// image's user (a claim made before [`POD_SECURITY_ANNOTATION`]). `None`: no claim (emptyDir).
pub fn run_as(claim: Option<&PersistentVolumeClaim>) -> RunAs {
    match claim {
        Some(c)
            if c.annotations()
                .get(POD_SECURITY_ANNOTATION)
                .map(String::as_str)
                != Some(RESTRICTED) =>
        {
            RunAs::ImageUser
        }
        _ => RunAs::NonRoot,
    }
}

/// The member pod: etcd `version` with coreos's flags, restarted in place by the kubelet, data
/// on the member's claim (or an emptyDir without a claim spec), security settings that pass
/// Pod Security "restricted" (`run_as` says whom it runs as, see [`run_as`]).
/// The member pod of `member`. `data` says whether it starts on new data or returns to a claim
/// that holds its data, which decides how strictly it is kept off nodes with other members
/// ([`crate::spread`]).
pub fn pod(
    cluster: &EtcdCluster,
    member: &str,
    bootstrap: &Bootstrap,
    version: &str,
    run_as: RunAs,
    data: MemberData,
) -> Pod {
    let names = names(cluster);
    let spec = &cluster.spec;
    let policy = spec.pod.clone().unwrap_or_default();
    let mut args = vec![
        format!("--name={member}"),
        format!("--data-dir={DATA_DIR}"),
        format!(
            "--listen-peer-urls={}://0.0.0.0:{PEER_PORT}",
            names.peer_scheme()
        ),
        format!(
            "--listen-client-urls={}://0.0.0.0:{CLIENT_PORT}",
            names.client_scheme()
        ),
        // Plain HTTP on its own port for /health and /metrics: probes work with client TLS.
        format!("--listen-metrics-urls=http://0.0.0.0:{METRICS_PORT}"),
        format!("--advertise-client-urls={}", names.client_url(member)),
        format!("--initial-advertise-peer-urls={}", names.peer_url(member)),
    ];
    // TLS.static: certificates from the mounted Secrets, client certificates required.
    let tls = TlsSecrets::of(spec);
    let mut volumes = vec![data_volume(spec, member)];
    let mut mounts = vec![mount("etcd-data", DATA_MOUNT, false)];
    if let Some(secret) = &tls.peer {
        args.extend([
            format!("--peer-cert-file={PEER_DIR}/peer.crt"),
            format!("--peer-key-file={PEER_DIR}/peer.key"),
            format!("--peer-trusted-ca-file={PEER_DIR}/peer-ca.crt"),
            "--peer-client-cert-auth=true".into(),
        ]);
        volumes.push(secret_volume("member-peer-tls", secret, None));
        mounts.push(mount("member-peer-tls", PEER_DIR, true));
    }
    if let Some(secret) = &tls.server {
        args.extend([
            format!("--cert-file={SERVER_DIR}/server.crt"),
            format!("--key-file={SERVER_DIR}/server.key"),
            format!("--trusted-ca-file={SERVER_DIR}/server-ca.crt"),
            "--client-cert-auth=true".into(),
        ]);
        volumes.push(secret_volume("member-server-tls", secret, None));
        mounts.push(mount("member-server-tls", SERVER_DIR, true));
    }
    match bootstrap {
        Bootstrap::New { token } => {
            args.push(format!(
                "--initial-cluster={}",
                names.initial_cluster([member])
            ));
            args.push("--initial-cluster-state=new".into());
            args.push(format!("--initial-cluster-token={token}"));
        }
        Bootstrap::Existing { initial_cluster } => {
            let all = initial_cluster.iter().map(String::as_str);
            args.push(format!("--initial-cluster={}", names.initial_cluster(all)));
            args.push("--initial-cluster-state=existing".into());
        }
    }
    let mut annotations = policy.annotations.clone().unwrap_or_default();
    annotations.insert(VERSION_ANNOTATION.to_string(), version.to_string());
    let mut metadata = owned_meta(
        cluster,
        member,
        member_labels(spec, &cluster.name_any(), member),
    );
    metadata.annotations = Some(annotations);
    let etcd = Container {
        name: "etcd".into(),
        image: Some(spec.image_of(version)),
        command: Some(vec!["/usr/local/bin/etcd".into()]),
        // etcd's last log lines when it exits: why it stopped (a failed corruption check, say)
        // is then in the pod's status.
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        args: Some(args),
        env: Some(member_env(
            policy.etcd_env.clone().unwrap_or_default(),
            version,
            spec.auto_compaction.as_ref(),
        )),
        ports: Some(vec![
            container_port("client", CLIENT_PORT),
            container_port("peer", PEER_PORT),
            container_port("metrics", METRICS_PORT),
        ]),
        readiness_probe: Some(readiness_probe()),
        volume_mounts: Some(mounts),
        resources: Some(policy.resources.clone().unwrap_or_default()),
        security_context: Some(pod_security::container_context()),
        ..Default::default()
    };
    Pod {
        metadata,
        spec: Some(PodSpec {
            hostname: Some(member.to_string()),
            subdomain: Some(names.peer_service().to_string()),
            restart_policy: Some("Always".into()),
            // Service link variables (ETCD_CLIENT_PORT, ...) would be read as etcd flags.
            enable_service_links: Some(false),
            automount_service_account_token: Some(false),
            containers: vec![etcd],
            volumes: Some(volumes),
            node_selector: policy.node_selector.clone(),
            tolerations: policy.tolerations.clone(),
            affinity: member_affinity(cluster),
            topology_spread_constraints: member_spread(cluster, data),
            security_context: Some(pod_security::pod_context(
                policy.security_context.as_ref(),
                run_as,
            )),
            ..Default::default()
        }),
        status: None,
    }
}

/// The member's data: its claim, named like it, or an emptyDir without a claim spec.
fn data_volume(spec: &EtcdClusterSpec, member: &str) -> Volume {
    let mut volume = Volume {
        name: "etcd-data".into(),
        ..Default::default()
    };
    match persistent(spec) {
        true => {
            volume.persistent_volume_claim = Some(PersistentVolumeClaimVolumeSource {
                claim_name: member.to_string(),
                ..Default::default()
            })
        }
        false => volume.empty_dir = Some(EmptyDirVolumeSource::default()),
    }
    volume
}

fn container_port(name: &str, port: u16) -> ContainerPort {
    ContainerPort {
        name: Some(name.into()),
        container_port: port.into(),
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

/// etcd's auto-compaction variables.
const COMPACTION_VARIABLES: [&str; 2] = [
    "ETCD_AUTO_COMPACTION_MODE",
    "ETCD_AUTO_COMPACTION_RETENTION",
];

/// The user's `etcdEnv`; then auto-compaction (`spec.autoCompaction`, default periodic keeping
/// one hour: without it history grows until the quota), unless the user's variables set it;
/// then the variables that turn on etcd's data corruption checks in the spelling of `version`
/// (see `etcd_cluster::checks`), unless the user's name one of them.
fn member_env(
    mut env: Vec<EnvVar>,
    version: &str,
    compaction: Option<&etcd_api::AutoCompaction>,
) -> Vec<EnvVar> {
    let var = |name: &str, value: String| EnvVar {
        name: name.into(),
        value: Some(value),
        ..Default::default()
    };
    if !env
        .iter()
        .any(|e| COMPACTION_VARIABLES.contains(&e.name.as_str()))
    {
        let (mode, retention) = match compaction {
            Some(c) => (c.mode, c.retention.clone()),
            None => (
                etcd_api::CompactionMode::Periodic,
                etcd_api::defrag::DEFAULT_COMPACTION_RETENTION.to_string(),
            ),
        };
        let mode = match mode {
            etcd_api::CompactionMode::Periodic => "periodic",
            etcd_api::CompactionMode::Revision => "revision",
        };
        env.push(var(COMPACTION_VARIABLES[0], mode.into()));
        env.push(var(COMPACTION_VARIABLES[1], retention));
    }
    let users_own = env
        .iter()
        .any(|e| checks::VARIABLES.contains(&e.name.as_str()));
    let Ok(version) = EtcdVersion::parse(version) else {
        return env;
    };
    if !users_own {
        env.extend(
            Spelling::of(&version)
                .env()
                .into_iter()
                .map(|(name, value)| EnvVar {
                    name: name.into(),
                    value: Some(value.into()),
                    ..Default::default()
                }),
        );
    }
    env
}

/// Where members may run: `pod.affinity` as given; else, with coreos's deprecated
/// `antiAffinity: true`, no two members of this cluster on one node (as coreos did: required, by
/// hostname); else anywhere (`None`).
pub fn member_affinity(cluster: &EtcdCluster) -> Option<Affinity> {
    let policy = cluster.spec.pod.as_ref()?;
    if let Some(affinity) = &policy.affinity {
        return Some(affinity.clone());
    }
    if policy.anti_affinity != Some(true) {
        return None;
    }
    let apart = PodAffinityTerm {
        label_selector: Some(LabelSelector {
            match_labels: Some(selector(&cluster.name_any())),
            ..Default::default()
        }),
        topology_key: "kubernetes.io/hostname".to_string(),
        ..Default::default()
    };
    Some(Affinity {
        pod_anti_affinity: Some(PodAntiAffinity {
            required_during_scheduling_ignored_during_execution: Some(vec![apart]),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// The headless peer Service `<cluster>` (publishes members before they are ready, so peers
/// resolve each other while joining) and the client Service `<cluster>-client`.
pub fn services(cluster: &EtcdCluster) -> [Service; 2] {
    let names = names(cluster);
    let name = cluster.name_any();
    let port = |name: &str, port: u16| ServicePort {
        name: Some(name.into()),
        port: port.into(),
        target_port: Some(IntOrString::Int(port.into())),
        protocol: Some("TCP".into()),
        ..Default::default()
    };
    let peer = Service {
        metadata: owned_meta(cluster, names.peer_service(), selector(&name)),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            publish_not_ready_addresses: Some(true),
            selector: Some(selector(&name)),
            ports: Some(vec![port("client", CLIENT_PORT), port("peer", PEER_PORT)]),
            ..Default::default()
        }),
        status: None,
    };
    let client = Service {
        metadata: owned_meta(cluster, &names.client_service(), selector(&name)),
        spec: Some(ServiceSpec {
            selector: Some(selector(&name)),
            ports: Some(vec![port("client", CLIENT_PORT)]),
            ..Default::default()
        }),
        status: None,
    };
    [peer, client]
}

/// The PodDisruptionBudget `<cluster>` that keeps quorum: voluntary evictions (node drains) may
/// take a member only while a majority stays ready, so none for one or two members. `policy/v1`,
/// which every supported Kubernetes serves (from 1.21; `policy/v1beta1` left in 1.25).
pub fn disruption_budget(cluster: &EtcdCluster) -> PodDisruptionBudget {
    let name = cluster.name_any();
    let quorum = cluster.spec.size / 2 + 1;
    PodDisruptionBudget {
        metadata: owned_meta(cluster, &name, selector(&name)),
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(quorum)),
            selector: Some(LabelSelector {
                match_labels: Some(selector(&name)),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(yaml: &str) -> EtcdCluster {
        let mut c: EtcdCluster = serde_saphyr::from_str(yaml).unwrap();
        c.metadata.namespace = Some("prod".into());
        c.metadata.uid = Some("uid-1".into());
        c
    }

    const COREOS: &str = r#"
apiVersion: etcd.database.coreos.com/v1beta2
kind: EtcdCluster
metadata: {name: example}
spec:
  size: 3
  version: "3.4.23"
  repository: localhost/etcd
  pod:
    labels: {team: a, app: mine, etcd_cluster: spoof}
    ClusterDomain: ".cluster.local"
    persistentVolumeClaimSpec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
"#;

    #[test]
    fn member_pod_from_a_coreos_manifest() {
        let c = cluster(COREOS);
        let pod = pod(
            &c,
            "example-1",
            &Bootstrap::Existing {
                initial_cluster: vec!["example-0".into(), "example-1".into()],
            },
            "3.4.22",
            RunAs::NonRoot,
            MemberData::New,
        );
        let labels = pod.metadata.labels.clone().unwrap();
        assert_eq!(labels["app"], "etcd");
        assert_eq!(labels["etcd_cluster"], "example");
        assert_eq!(labels["etcd_node"], "example-1");
        assert_eq!(labels["team"], "a");
        assert_eq!(
            pod.metadata.owner_references.as_ref().unwrap()[0].uid,
            "uid-1"
        );
        let spec = pod.spec.unwrap();
        assert_eq!(spec.hostname.as_deref(), Some("example-1"));
        assert_eq!(spec.subdomain.as_deref(), Some("example"));
        assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
        let etcd = &spec.containers[0];
        // The version it is given (behind the spec's while an upgrade is unfinished).
        assert_eq!(etcd.image.as_deref(), Some("localhost/etcd:v3.4.22"));
        assert_eq!(
            pod.metadata.annotations.as_ref().unwrap()["etcd.version"],
            "3.4.22"
        );
        let args = etcd.args.clone().unwrap();
        assert!(args.contains(&"--initial-cluster-state=existing".to_string()));
        assert!(args.contains(&"--initial-advertise-peer-urls=http://example-1.example.prod.svc.cluster.local:2380".to_string()));
        assert!(args.contains(&"--initial-cluster=example-0=http://example-0.example.prod.svc.cluster.local:2380,example-1=http://example-1.example.prod.svc.cluster.local:2380".to_string()));
        assert!(
            !args
                .iter()
                .any(|a| a.starts_with("--initial-cluster-token"))
        );
        let volume = &spec.volumes.unwrap()[0];
        assert_eq!(
            volume.persistent_volume_claim.as_ref().unwrap().claim_name,
            "example-1"
        );
        let claim = claim(&c, "example-1", "3.4.22").unwrap();
        assert_eq!(claim.metadata.name.as_deref(), Some("example-1"));
        assert_eq!(
            claim.metadata.annotations.unwrap()["etcd.version"],
            "3.4.22"
        );
    }

    #[test]
    fn seed_pod_has_a_token_and_emptydir_without_a_claim_spec() {
        let mut c = cluster(COREOS);
        c.spec.pod.as_mut().unwrap().persistent_volume_claim_spec = None;
        let pod = pod(
            &c,
            "example-0",
            &Bootstrap::New {
                token: "tok".into(),
            },
            "3.4.23",
            RunAs::NonRoot,
            MemberData::New,
        );
        let spec = pod.spec.unwrap();
        let args = spec.containers[0].args.clone().unwrap();
        assert!(args.contains(&"--initial-cluster-state=new".to_string()));
        assert!(args.contains(&"--initial-cluster-token=tok".to_string()));
        assert!(spec.volumes.unwrap()[0].empty_dir.is_some());
        assert!(claim(&c, "example-0", "3.4.23").is_none());
    }

    #[test]
    fn members_get_the_corruption_checks_in_their_versions_spelling_unless_the_user_sets_them() {
        let env_of = |c: &EtcdCluster, version: &str| -> Vec<(String, String)> {
            let pod = pod(
                c,
                "example-0",
                &Bootstrap::New { token: "t".into() },
                version,
                RunAs::NonRoot,
                MemberData::New,
            );
            let env = pod.spec.unwrap().containers[0]
                .env
                .clone()
                .unwrap_or_default();
            env.into_iter()
                .map(|e| (e.name, e.value.unwrap_or_default()))
                .collect()
        };
        let mut c = cluster(COREOS);
        let pair = |k: &str, v: &str| (k.to_string(), v.to_string());
        // Without the compaction variables, which the next test is about.
        let checks_of = |c: &EtcdCluster, version: &str| -> Vec<(String, String)> {
            env_of(c, version)
                .into_iter()
                .filter(|(k, _)| !COMPACTION_VARIABLES.contains(&k.as_str()))
                .collect()
        };
        assert_eq!(
            checks_of(&c, "3.5.33"),
            [
                pair("ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK", "true"),
                pair("ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_ENABLED", "true"),
            ]
        );
        let gates = [pair(
            "ETCD_FEATURE_GATES",
            "InitialCorruptCheck=true,CompactHashCheck=true",
        )];
        assert_eq!(checks_of(&c, "3.7.3"), gates);
        assert_eq!(checks_of(&c, "3.6.16"), gates);
        // The user's own variables first; their choice of a check variable stands alone.
        c.spec.pod.as_mut().unwrap().etcd_env =
            serde_saphyr::from_str("[{name: ETCD_QUOTA_BACKEND_BYTES, value: '1'}]").unwrap();
        assert_eq!(
            env_of(&c, "3.7.3")[0],
            pair("ETCD_QUOTA_BACKEND_BYTES", "1")
        );
        assert_eq!(checks_of(&c, "3.7.3")[1..], gates);
        c.spec.pod.as_mut().unwrap().etcd_env = serde_saphyr::from_str(
            "[{name: ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK, value: 'false'}]",
        )
        .unwrap();
        assert_eq!(
            checks_of(&c, "3.6.16"),
            [pair("ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK", "false")]
        );
    }

    #[test]
    fn members_compact_their_history_by_default_as_the_spec_says_or_as_the_user_set() {
        let compaction_of = |c: &EtcdCluster| -> Vec<(String, String)> {
            let pod = pod(
                c,
                "example-0",
                &Bootstrap::New { token: "t".into() },
                "3.6.16",
                RunAs::NonRoot,
                MemberData::New,
            );
            pod.spec.unwrap().containers[0]
                .env
                .clone()
                .unwrap_or_default()
                .into_iter()
                .filter(|e| e.name.starts_with("ETCD_AUTO_COMPACTION"))
                .map(|e| (e.name, e.value.unwrap_or_default()))
                .collect()
        };
        let pair = |k: &str, v: &str| (k.to_string(), v.to_string());
        let mut c = cluster(COREOS);
        assert_eq!(
            compaction_of(&c),
            [
                pair("ETCD_AUTO_COMPACTION_MODE", "periodic"),
                pair("ETCD_AUTO_COMPACTION_RETENTION", "1h")
            ]
        );
        c.spec.auto_compaction =
            Some(serde_saphyr::from_str("{mode: revision, retention: '10000'}").unwrap());
        assert_eq!(
            compaction_of(&c),
            [
                pair("ETCD_AUTO_COMPACTION_MODE", "revision"),
                pair("ETCD_AUTO_COMPACTION_RETENTION", "10000")
            ]
        );
        c.spec.pod.as_mut().unwrap().etcd_env =
            serde_saphyr::from_str("[{name: ETCD_AUTO_COMPACTION_RETENTION, value: '5m'}]")
                .unwrap();
        assert_eq!(
            compaction_of(&c),
            [pair("ETCD_AUTO_COMPACTION_RETENTION", "5m")]
        );
    }

    #[test]
    fn tls_static_mounts_the_member_secrets_and_speaks_https() {
        let mut c = cluster(COREOS);
        c.spec.tls = serde_saphyr::from_str(
            "static: {member: {peerSecret: peer, serverSecret: server}, operatorSecret: op}",
        )
        .unwrap();
        let pod = pod(
            &c,
            "example-0",
            &Bootstrap::New { token: "t".into() },
            "3.4.23",
            RunAs::NonRoot,
            MemberData::New,
        );
        let spec = pod.spec.unwrap();
        let etcd = &spec.containers[0];
        let args = etcd.args.clone().unwrap();
        for expected in [
            "--listen-peer-urls=https://0.0.0.0:2380",
            "--listen-client-urls=https://0.0.0.0:2379",
            "--listen-metrics-urls=http://0.0.0.0:8080",
            "--initial-advertise-peer-urls=https://example-0.example.prod.svc.cluster.local:2380",
            "--advertise-client-urls=https://example-0.example.prod.svc.cluster.local:2379",
            "--initial-cluster=example-0=https://example-0.example.prod.svc.cluster.local:2380",
            "--peer-cert-file=/etc/etcdtls/member/peer-tls/peer.crt",
            "--peer-trusted-ca-file=/etc/etcdtls/member/peer-tls/peer-ca.crt",
            "--peer-client-cert-auth=true",
            "--cert-file=/etc/etcdtls/member/server-tls/server.crt",
            "--trusted-ca-file=/etc/etcdtls/member/server-tls/server-ca.crt",
            "--client-cert-auth=true",
        ] {
            assert!(
                args.contains(&expected.to_string()),
                "{expected} in {args:?}"
            );
        }
        let volumes = spec.volumes.unwrap();
        let secret = |n: &str| {
            volumes
                .iter()
                .find(|v| v.name == n)
                .and_then(|v| v.secret.as_ref())
                .and_then(|s| s.secret_name.clone())
        };
        assert_eq!(secret("member-peer-tls").as_deref(), Some("peer"));
        assert_eq!(secret("member-server-tls").as_deref(), Some("server"));
        let mounts = etcd.volume_mounts.clone().unwrap();
        assert!(
            mounts
                .iter()
                .any(|m| m.mount_path == "/etc/etcdtls/member/server-tls")
        );
        // The probe stays on the plain metrics port.
        let probe = etcd
            .readiness_probe
            .as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap();
        assert_eq!(probe.scheme, None);
        // Without TLS: no certificate flags, plain URLs.
        c.spec.tls = None;
        let plain = super::pod(
            &c,
            "example-0",
            &Bootstrap::New { token: "t".into() },
            "3.4.23",
            RunAs::NonRoot,
            MemberData::New,
        );
        let args = plain.spec.unwrap().containers[0].args.clone().unwrap();
        assert!(
            !args
                .iter()
                .any(|a| a.contains("https") || a.contains("cert")),
            "{args:?}"
        );
    }

    #[test]
    fn coreos_anti_affinity_keeps_members_apart_unless_affinity_is_given() {
        let mut c = cluster(COREOS);
        c.spec.pod.as_mut().unwrap().anti_affinity = Some(true);
        let bootstrap = Bootstrap::New { token: "t".into() };
        let spec = pod(
            &c,
            "example-0",
            &bootstrap,
            "3.4.23",
            RunAs::NonRoot,
            MemberData::New,
        )
        .spec
        .unwrap();
        let term = &spec
            .affinity
            .unwrap()
            .pod_anti_affinity
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .unwrap()[0];
        assert_eq!(term.topology_key, "kubernetes.io/hostname");
        let labels = term.label_selector.clone().unwrap().match_labels.unwrap();
        assert_eq!(labels["etcd_cluster"], "example");
        // An explicit affinity wins, as in coreos.
        c.spec.pod.as_mut().unwrap().affinity = Some(Affinity {
            node_affinity: Some(Default::default()),
            ..Default::default()
        });
        let spec = pod(
            &c,
            "example-0",
            &bootstrap,
            "3.4.23",
            RunAs::NonRoot,
            MemberData::New,
        )
        .spec
        .unwrap();
        let affinity = spec.affinity.unwrap();
        assert!(affinity.pod_anti_affinity.is_none() && affinity.node_affinity.is_some());
    }

    #[test]
    fn member_pods_pass_pod_security_restricted_unless_their_data_predates_it() {
        let mut c = cluster(COREOS);
        let bootstrap = Bootstrap::New { token: "t".into() };
        let spec = pod(
            &c,
            "example-0",
            &bootstrap,
            "3.5.33",
            RunAs::NonRoot,
            MemberData::New,
        )
        .spec
        .unwrap();
        let context = spec.security_context.unwrap();
        assert_eq!(context.run_as_non_root, Some(true));
        assert_eq!(context.run_as_user, Some(pod_security::NON_ROOT));
        assert_eq!(context.fs_group, Some(pod_security::NON_ROOT));
        assert_eq!(context.seccomp_profile.unwrap().type_, "RuntimeDefault");
        for container in &spec.containers {
            let context = container.security_context.clone().unwrap();
            assert_eq!(context.allow_privilege_escalation, Some(false));
            assert_eq!(context.capabilities.unwrap().drop.unwrap(), ["ALL"]);
        }
        // New claims are marked; a claim without the mark holds data written as the image's
        // user, whose member keeps that user; no claim (emptyDir) is always fresh.
        let new = claim(&c, "example-0", "3.5.33").unwrap();
        assert_eq!(run_as(Some(&new)), RunAs::NonRoot);
        let mut old = new.clone();
        old.annotations_mut().remove(POD_SECURITY_ANNOTATION);
        assert_eq!(run_as(Some(&old)), RunAs::ImageUser);
        assert_eq!(run_as(None), RunAs::NonRoot);
        let spec = pod(
            &c,
            "example-0",
            &bootstrap,
            "3.5.33",
            RunAs::ImageUser,
            MemberData::New,
        )
        .spec
        .unwrap();
        let context = spec.security_context.unwrap();
        assert_eq!((context.run_as_user, context.run_as_non_root), (None, None));
        assert_eq!(context.seccomp_profile.unwrap().type_, "RuntimeDefault");
        // The user's pod.securityContext wins field by field.
        c.spec.pod.as_mut().unwrap().security_context =
            Some(k8s_openapi::api::core::v1::PodSecurityContext {
                run_as_user: Some(1000),
                fs_group: Some(1000),
                ..Default::default()
            });
        let spec = pod(
            &c,
            "example-0",
            &bootstrap,
            "3.5.33",
            RunAs::NonRoot,
            MemberData::New,
        )
        .spec
        .unwrap();
        let context = spec.security_context.unwrap();
        assert_eq!(
            (context.run_as_user, context.fs_group),
            (Some(1000), Some(1000))
        );
        assert_eq!(context.run_as_non_root, Some(true));
    }

    #[test]
    fn disruption_budget_keeps_a_majority() {
        let mut c = cluster(COREOS);
        let pdb = serde_json::to_value(disruption_budget(&c)).unwrap();
        assert_eq!(pdb["apiVersion"], "policy/v1");
        assert_eq!(pdb["metadata"]["name"], "example");
        assert_eq!(pdb["metadata"]["ownerReferences"][0]["uid"], "uid-1");
        assert_eq!(pdb["spec"]["minAvailable"], 2);
        assert_eq!(
            pdb["spec"]["selector"]["matchLabels"]["etcd_cluster"],
            "example"
        );
        for (size, min) in [(1, 1), (2, 2), (4, 3), (5, 3), (7, 4)] {
            c.spec.size = size;
            let spec = disruption_budget(&c).spec.unwrap();
            assert_eq!(spec.min_available, Some(IntOrString::Int(min)));
        }
    }

    #[test]
    fn services_headless_for_peers_and_client() {
        let [peer, client] = services(&cluster(COREOS));
        assert_eq!(peer.metadata.name.as_deref(), Some("example"));
        let spec = peer.spec.unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        assert_eq!(spec.publish_not_ready_addresses, Some(true));
        assert_eq!(client.metadata.name.as_deref(), Some("example-client"));
        assert_eq!(client.spec.unwrap().ports.unwrap()[0].port, 2379);
    }
}
