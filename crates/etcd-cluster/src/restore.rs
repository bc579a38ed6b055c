//! Restoring members from one snapshot, etcd's documented multi-member restore: every member
//! restores the same verified snapshot into its own data dir, with its own name and peer URL and
//! one `--initial-cluster` and cluster token shared by all, then starts on that data dir. This
//! module builds the restore tool's command line for one member (the tool of the target
//! version: `etcdutl` from 3.5, `etcdctl` before), bumping the revision where the tool can.

use crate::naming::ClusterNames;
use crate::version::EtcdVersion;

/// How far the revision is moved forward on restore: etcd's recommendation for Kubernetes
/// (about a week of writes at 1,500 per second), so that revisions never go backwards and
/// watchers and informer caches see the restore as a compaction and relist.
pub const REVISION_BUMP: u64 = 1_000_000_000;

/// One member's restore: the command and whether it bumps the revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoreCommand {
    pub argv: Vec<String>,
    /// `--bump-revision` and `--mark-compacted` are passed (3.4.27+, 3.5.10+); when false,
    /// status says the restored revision may be below what clients saw.
    pub bumps_revision: bool,
}

/// The restore of `member`, one of `members` (all restored from `snapshot` with `token`),
/// into `data_dir`, with the restore tool of `version`.
///
/// `snapshot` must be a file `etcd-backup fetch` wrote: it checked the sha256 trailer while
/// streaming and made the file durable (fsync) before giving it its name, so the tool's own
/// check of the same trailer is skipped (`--skip-hash-check`): it would read and hash the whole
/// database once more on every member. The tool still cuts the trailer off.
pub fn restore_command(
    version: &EtcdVersion,
    names: &ClusterNames,
    member: &str,
    members: &[String],
    token: &str,
    snapshot: &str,
    data_dir: &str,
) -> RestoreCommand {
    let tool = if version.has_etcdutl() {
        "etcdutl"
    } else {
        "etcdctl"
    };
    let mut argv: Vec<String> = [tool, "snapshot", "restore", snapshot]
        .iter()
        .map(|s| s.to_string())
        .collect();
    argv.extend([
        format!("--name={member}"),
        format!(
            "--initial-cluster={}",
            names.initial_cluster(members.iter().map(String::as_str))
        ),
        format!("--initial-cluster-token={token}"),
        format!("--initial-advertise-peer-urls={}", names.peer_url(member)),
        format!("--data-dir={data_dir}"),
        "--skip-hash-check".into(),
    ]);
    let bumps_revision = version.restore_can_bump_revision();
    if bumps_revision {
        argv.push(format!("--bump-revision={REVISION_BUMP}"));
        argv.push("--mark-compacted".into());
    }
    RestoreCommand {
        argv,
        bumps_revision,
    }
}

/// A drill's restore: a single member named `drill` whose peer URL is `peer` (loopback), as
/// the snapshot was taken: no revision bump and no compaction mark, so the restored member
/// answers at the recorded revision exactly what the source member did.
pub fn drill_restore_command(
    version: &EtcdVersion,
    snapshot: &str,
    data_dir: &str,
    peer: &str,
) -> Vec<String> {
    let tool = if version.has_etcdutl() {
        "etcdutl"
    } else {
        "etcdctl"
    };
    [tool, "snapshot", "restore", snapshot]
        .iter()
        .map(|s| s.to_string())
        .chain([
            "--name=drill".to_string(),
            format!("--initial-cluster=drill={peer}"),
            "--initial-cluster-token=etcd-drill".into(),
            format!("--initial-advertise-peer-urls={peer}"),
            format!("--data-dir={data_dir}"),
            "--skip-hash-check".into(),
        ])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(version: &str) -> RestoreCommand {
        let names = ClusterNames::new("c", "ns", Some("cluster.local"));
        let members = vec!["c-3".to_string(), "c-4".to_string(), "c-5".to_string()];
        restore_command(
            &EtcdVersion::parse(version).unwrap(),
            &names,
            "c-4",
            &members,
            "c-uid-restore-1",
            "/var/etcd/snapshot.db",
            "/var/etcd/data",
        )
    }

    #[test]
    fn every_member_restores_with_the_same_cluster_and_token_and_its_own_name() {
        let c = command("3.5.16");
        assert_eq!(
            c.argv[..4],
            ["etcdutl", "snapshot", "restore", "/var/etcd/snapshot.db"]
        );
        for flag in [
            "--name=c-4",
            "--initial-cluster=c-3=http://c-3.c.ns.svc.cluster.local:2380,c-4=http://c-4.c.ns.svc.cluster.local:2380,c-5=http://c-5.c.ns.svc.cluster.local:2380",
            "--initial-cluster-token=c-uid-restore-1",
            "--initial-advertise-peer-urls=http://c-4.c.ns.svc.cluster.local:2380",
            "--data-dir=/var/etcd/data",
            "--bump-revision=1000000000",
            "--mark-compacted",
            "--skip-hash-check",
        ] {
            assert!(c.argv.contains(&flag.to_string()), "{flag} in {:?}", c.argv);
        }
        assert!(c.bumps_revision);
    }

    #[test]
    fn the_tool_and_the_revision_bump_follow_the_version() {
        // Debian's 3.4.23: etcdctl, too old to bump.
        let old = command("3.4.23");
        assert_eq!(old.argv[0], "etcdctl");
        assert!(!old.bumps_revision);
        assert!(!old.argv.iter().any(|a| a.contains("bump-revision")));
        // 3.4.27 bumps with etcdctl; 3.5.9 has etcdutl but cannot bump yet.
        let bumped = command("3.4.27");
        assert_eq!(bumped.argv[0], "etcdctl");
        assert!(bumped.bumps_revision);
        let early = command("3.5.9");
        assert_eq!(early.argv[0], "etcdutl");
        assert!(!early.bumps_revision);
    }
}
