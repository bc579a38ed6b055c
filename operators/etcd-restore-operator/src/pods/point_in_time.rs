//! The init containers of a restore pod that restores to a point (`spec.pointInTime`). They
//! replace the one `fetch` of a plain restore and leave the same thing behind: a verified
//! snapshot file in the pod's scratch volume, which the `restore` container restores onto
//! the member's claim as usual. Each step runs in the image that owns it:
//!
//! 1. `prepare` (the `etcd-backup` image): `etcd-backup prepare-point` decides which snapshot
//!    (the newest at or before the point) and which archived segments reach the point, refuses
//!    a point the archive cannot reach, fetches that snapshot (verified while it streams) and
//!    writes its decision to the work volume.
//! 2. `scratch-restore` (the cluster's etcd image, the plan's version): the version's restore
//!    tool writes a single-member data dir from that snapshot, without a revision bump.
//! 3. `scratch-etcd` (a native sidecar): serves it on the pod's loopback only.
//! 4. `replay` (the `etcd-backup` image): `etcd-backup replay-point` applies the archived
//!    changes one revision per transaction up to the point (each must land at its archived
//!    revision), writes the member's snapshot to the scratch volume and prints its report:
//!    the revision and the key space's digest, which every member must agree on (each pod
//!    replays on its own, so the files differ byte-wise while the key spaces may not).
//!
//! The kubelet stops the sidecar once `restore` is done. The work volume is the node's disk.

use etcd_api::PointInTime;
use etcd_cluster::EtcdVersion;
use etcd_cluster::restore::drill_restore_command;
use etcd_snapshot::changes::REPLAY_MEMBER_FLAGS;
use fetch_pod::container::{env, identity_args};
use fetch_pod::scratch::{ScratchMember, scratch_etcd_container, scratch_restore_container};
use fetch_pod::{FetchMounts, Source, tool_args};
use k8s_openapi::api::core::v1::{Container, EmptyDirVolumeSource, ResourceRequirements, Volume};
use operator_runtime::volumes::mount;

/// The container whose output is the verified snapshot's report (a plain restore's `fetch`).
pub const REPORT_CONTAINER: &str = "replay";
/// The containers that may say the point cannot be reached.
pub const POINT_CONTAINERS: [&str; 2] = ["prepare", "replay"];
/// The work volume: the chosen snapshot, the decision, the scratch member's data.
const WORK: &str = "/var/etcd-point";
const WORK_VOLUME: &str = "point-work";
/// The scratch member serves on the pod's loopback only.
const CLIENT_URL: &str = "http://127.0.0.1:2379";
const PEER_URL: &str = "http://127.0.0.1:2380";
/// How long `replay` waits for the scratch member (a large database takes a while to open).
const START_TIMEOUT_SECONDS: u64 = 600;

/// What a restore to a point adds to a restore pod.
pub struct PointContainers {
    /// In place of `fetch`, in order.
    pub init: Vec<Container>,
    /// The work volume they share.
    pub volume: Volume,
}

/// The init containers and the work volume of a restore to `point` of `source` (its `url` is
/// the backups' base name), writing the snapshot at the point to `out` on `scratch` (the
/// volume name and mount path of the pod's scratch volume). `etcd_image` and `version` are
/// the plan's.
#[allow(clippy::too_many_arguments)]
pub fn point_containers(
    source: &Source,
    point: &PointInTime,
    backup_image: &str,
    etcd_image: &str,
    version: &EtcdVersion,
    resources: Option<ResourceRequirements>,
    out: &str,
    scratch: (&str, &str),
) -> PointContainers {
    let work = || mount(WORK_VOLUME, WORK, false);
    let reaching = || {
        let mut mounts = FetchMounts::of(source).fetch;
        mounts.push(work());
        mounts
    };
    let tool = |name: &str, command: Vec<String>, mounts| Container {
        name: name.into(),
        image: Some(backup_image.into()),
        args: Some(tool_args(source, command.iter().map(String::as_str))),
        env: Some(env(source)),
        volume_mounts: Some(mounts),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    };

    let mut prepare = vec!["prepare-point".to_string(), source.url.clone()];
    match (point.revision, &point.time) {
        (Some(revision), _) => prepare.extend(["--revision".into(), revision.to_string()]),
        (None, Some(time)) => prepare.extend(["--time".into(), time.0.to_string()]),
        // Refused by the schema and by validation before a pod is built.
        (None, None) => {}
    }
    prepare.extend([
        "--dir".into(),
        WORK.into(),
        "--etcd-version".into(),
        version.to_string(),
    ]);
    if let Some(cluster_id) = &point.cluster_id {
        prepare.extend(["--cluster-id".into(), cluster_id.clone()]);
    }
    prepare.extend(identity_args(source));

    let snapshot = format!("{WORK}/snapshot.db");
    let data_dir = format!("{WORK}/data");
    let scratch_restore = scratch_restore_container(
        "scratch-restore",
        etcd_image,
        drill_restore_command(version, &snapshot, &data_dir, PEER_URL),
        work(),
        resources.clone(),
    );
    // 3.4 has no --unsafe-no-fsync (slower, same result).
    let flags: Vec<&str> = REPLAY_MEMBER_FLAGS
        .iter()
        .copied()
        .filter(|f| version.at_least(3, 5, 0) || *f != "--unsafe-no-fsync")
        .collect();
    // A native sidecar: it runs beside `replay` and `restore`, stopped after them.
    let scratch_etcd = scratch_etcd_container(
        "scratch-etcd",
        etcd_image,
        &ScratchMember {
            data_dir: &data_dir,
            client_url: CLIENT_URL,
            peer_url: PEER_URL,
            extra_flags: &flags,
        },
        work(),
        resources,
    );

    let mut replay = vec![
        "replay-point".to_string(),
        source.url.clone(),
        "--dir".into(),
        WORK.into(),
        "--endpoint".into(),
        CLIENT_URL.into(),
        "--out".into(),
        out.into(),
        "--start-timeout".into(),
        START_TIMEOUT_SECONDS.to_string(),
    ];
    replay.extend(identity_args(source));
    let mut replay_mounts = reaching();
    replay_mounts.push(mount(scratch.0, scratch.1, false));

    PointContainers {
        init: vec![
            tool("prepare", prepare, reaching()),
            scratch_restore,
            scratch_etcd,
            tool(REPORT_CONTAINER, replay, replay_mounts),
        ],
        volume: Volume {
            name: WORK_VOLUME.into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        },
    }
}
