//! The throw-away etcd member a run-once pod serves on its own loopback (a drill, a restore to
//! a point): the etcd image's restore tool writes its data dir from a snapshot, then etcd
//! serves it as a native sidecar beside the container that uses it.

use k8s_openapi::api::core::v1::{Container, EnvVar, ResourceRequirements, VolumeMount};

/// The container that runs `restore_argv` (the version's restore tool, from
/// `etcd_cluster::restore::drill_restore_command`, found under `/usr/local/bin` of `image`).
pub fn scratch_restore_container(
    name: &str,
    image: &str,
    mut restore_argv: Vec<String>,
    scratch: VolumeMount,
    resources: Option<ResourceRequirements>,
) -> Container {
    restore_argv[0] = format!("/usr/local/bin/{}", restore_argv[0]);
    Container {
        name: name.into(),
        image: Some(image.into()),
        command: Some(restore_argv),
        env: Some(vec![EnvVar {
            name: "ETCDCTL_API".into(),
            value: Some("3".into()),
            ..Default::default()
        }]),
        volume_mounts: Some(vec![scratch]),
        resources,
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    }
}

/// Where and how the scratch member serves: loopback URLs only.
pub struct ScratchMember<'a> {
    pub data_dir: &'a str,
    pub client_url: &'a str,
    pub peer_url: &'a str,
    /// Flags after the member's own (a replay's limits, say).
    pub extra_flags: &'a [&'a str],
}

/// The native sidecar (an init container that keeps running, stopped by the kubelet after
/// the pod's containers) serving `member`'s data dir from `image`.
pub fn scratch_etcd_container(
    name: &str,
    image: &str,
    member: &ScratchMember,
    scratch: VolumeMount,
    resources: Option<ResourceRequirements>,
) -> Container {
    let (client, peer) = (member.client_url, member.peer_url);
    let mut command: Vec<String> = vec![
        "/usr/local/bin/etcd".into(),
        "--name=drill".into(),
        format!("--data-dir={}", member.data_dir),
        format!("--listen-client-urls={client}"),
        format!("--advertise-client-urls={client}"),
        format!("--listen-peer-urls={peer}"),
        format!("--initial-advertise-peer-urls={peer}"),
        format!("--initial-cluster=drill={peer}"),
    ];
    command.extend(member.extra_flags.iter().map(|f| f.to_string()));
    Container {
        name: name.into(),
        image: Some(image.into()),
        command: Some(command),
        restart_policy: Some("Always".into()),
        volume_mounts: Some(vec![scratch]),
        resources,
        ..Default::default()
    }
}
