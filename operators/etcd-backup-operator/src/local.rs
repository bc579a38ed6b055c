//! `storageType: Local`: backups run in the operator process, so they go to the one
//! PersistentVolumeClaim mounted in the operator pod (flag `--local-volume-claim`). Pure: which
//! EtcdBackup may write where is decided here and unit-tested.

use std::path::{Component, Path, PathBuf};

use etcd_api::LocalVolumeRecord;
use etcd_api::storage::{LOCAL_PVC_MOUNT_PATH, LocalSource};

/// The claim mounted in the operator pod, and where (`/var/lib/etcd-backup` in a pod; another
/// directory for out-of-cluster runs and tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalVolume {
    pub namespace: String,
    pub claim: String,
    pub dir: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LocalVolumeError {
    #[error(
        "storageType Local needs a volume in the operator pod: mount a PersistentVolumeClaim at \
         {LOCAL_PVC_MOUNT_PATH} and start the operator with --local-volume-claim <namespace>/<claim>"
    )]
    NotConfigured,
    #[error(
        "the operator has PersistentVolumeClaim {mounted} mounted, not {wanted}; Local backups \
         can only use that claim, from its own namespace"
    )]
    OtherClaim { wanted: String, mounted: String },
    #[error(
        "local.path {0:?} is outside {LOCAL_PVC_MOUNT_PATH}, where the operator's volume is mounted"
    )]
    OutsideVolume(String),
    #[error("local.path {0:?} must name a file inside the volume, without '..' or '.'")]
    BadPath(String),
}

impl LocalVolume {
    /// Parses the flag value `<namespace>/<claim>`.
    pub fn parse(value: &str, dir: PathBuf) -> Result<LocalVolume, String> {
        match value.split_once('/') {
            Some((namespace, claim))
                if !namespace.is_empty() && !claim.is_empty() && !claim.contains('/') =>
            {
                Ok(LocalVolume {
                    namespace: namespace.into(),
                    claim: claim.into(),
                    dir,
                })
            }
            _ => Err(format!(
                "--local-volume-claim {value:?}: expected <namespace>/<claim>"
            )),
        }
    }
}

/// The file that `local` of an EtcdBackup in `namespace` names, on the operator's volume.
/// With `persistentVolumeClaim`, the path is inside that claim, which must be the mounted one;
/// without, it is an absolute path that must lie inside [`LOCAL_PVC_MOUNT_PATH`]. Either way
/// the EtcdBackup must be in the claim's namespace, as a pod mounting it would have to be.
pub fn resolve(
    local: &LocalSource,
    namespace: &str,
    volume: Option<&LocalVolume>,
) -> Result<PathBuf, LocalVolumeError> {
    let volume = volume.ok_or(LocalVolumeError::NotConfigured)?;
    let relative = if local.uses_pvc() {
        let claim = local.persistent_volume_claim.as_deref().unwrap_or_default();
        if namespace != volume.namespace || claim != volume.claim {
            return Err(LocalVolumeError::OtherClaim {
                wanted: format!("{namespace}/{claim}"),
                mounted: format!("{}/{}", volume.namespace, volume.claim),
            });
        }
        Path::new(local.path.trim_start_matches('/'))
    } else {
        if namespace != volume.namespace {
            return Err(LocalVolumeError::OtherClaim {
                wanted: format!("a volume in namespace {namespace}"),
                mounted: format!("{}/{}", volume.namespace, volume.claim),
            });
        }
        Path::new(&local.path)
            .strip_prefix(LOCAL_PVC_MOUNT_PATH)
            .map_err(|_| LocalVolumeError::OutsideVolume(local.path.clone()))?
    };
    let plain = relative.components().count() > 0
        && relative
            .components()
            .all(|c| matches!(c, Component::Normal(_)));
    if !plain || local.path.ends_with('/') {
        return Err(LocalVolumeError::BadPath(local.path.clone()));
    }
    Ok(volume.dir.join(relative))
}

/// Where a Local backup the operator wrote at `url` lies: its claim and the path inside it,
/// which is how restores and drills reach it wherever the operator mounts the claim.
pub fn record(url: &str, volume: Option<&LocalVolume>) -> Option<LocalVolumeRecord> {
    let volume = volume?;
    let path = Path::new(url.strip_prefix("file://")?);
    let inside = path.strip_prefix(&volume.dir).ok()?;
    Some(LocalVolumeRecord {
        claim: volume.claim.clone(),
        path: inside.to_string_lossy().into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_backup_is_recorded_as_its_claim_and_path_wherever_the_claim_is_mounted() {
        let mounted =
            LocalVolume::parse("backups/etcd-backups", PathBuf::from("/srv/backups")).unwrap();
        assert_eq!(
            record("file:///srv/backups/a/etcd.backup-1", Some(&mounted)),
            Some(LocalVolumeRecord {
                claim: "etcd-backups".into(),
                path: "a/etcd.backup-1".into()
            })
        );
        assert_eq!(record("s3://b/k", Some(&mounted)), None);
        assert_eq!(record("file:///srv/backups/a", None), None);
    }

    fn volume() -> LocalVolume {
        LocalVolume::parse("backups/etcd-backups", PathBuf::from("/mnt/v")).unwrap()
    }

    fn local(path: &str, claim: Option<&str>) -> LocalSource {
        LocalSource {
            path: path.into(),
            persistent_volume_claim: claim.map(String::from),
        }
    }

    #[test]
    fn the_example_resolves_inside_the_mounted_claim() {
        let l = local("example-etcd-cluster/etcd.backup", Some("etcd-backups"));
        assert_eq!(
            resolve(&l, "backups", Some(&volume())).unwrap(),
            Path::new("/mnt/v/example-etcd-cluster/etcd.backup")
        );
        let absolute = local("/var/lib/etcd-backup/a/etcd.backup", None);
        assert_eq!(
            resolve(&absolute, "backups", Some(&volume())).unwrap(),
            Path::new("/mnt/v/a/etcd.backup")
        );
    }

    #[test]
    fn only_the_mounted_claim_from_its_own_namespace() {
        let l = local("etcd.backup", Some("etcd-backups"));
        assert_eq!(
            resolve(&l, "backups", None).unwrap_err(),
            LocalVolumeError::NotConfigured
        );
        let err = resolve(&l, "team-a", Some(&volume())).unwrap_err();
        assert!(matches!(err, LocalVolumeError::OtherClaim { .. }), "{err}");
        assert!(err.to_string().contains("team-a/etcd-backups"), "{err}");
        let other = local("etcd.backup", Some("other"));
        assert!(matches!(
            resolve(&other, "backups", Some(&volume())),
            Err(LocalVolumeError::OtherClaim { .. })
        ));
        let absolute = local("/var/lib/etcd-backup/etcd.backup", None);
        assert!(matches!(
            resolve(&absolute, "team-a", Some(&volume())),
            Err(LocalVolumeError::OtherClaim { .. })
        ));
    }

    #[test]
    fn paths_cannot_leave_the_volume() {
        let v = volume();
        for (path, claim) in [
            ("../../etc/passwd", Some("etcd-backups")),
            ("a/../../x", Some("etcd-backups")),
            ("./x", Some("etcd-backups")),
            ("dir/", Some("etcd-backups")),
            ("", Some("etcd-backups")),
            ("/var/lib/etcd-backup/../x", None),
            ("/var/lib/etcd-backup", None),
        ] {
            assert!(
                matches!(
                    resolve(&local(path, claim), "backups", Some(&v)),
                    Err(LocalVolumeError::BadPath(_))
                ),
                "{path:?} accepted"
            );
        }
        for path in ["/etc/etcd.backup", "/var/lib/etcd-backupX/b", "relative"] {
            assert!(
                matches!(
                    resolve(&local(path, None), "backups", Some(&v)),
                    Err(LocalVolumeError::OutsideVolume(_))
                ),
                "{path:?} accepted"
            );
        }
    }

    #[test]
    fn flag_value_is_namespace_slash_claim() {
        assert_eq!(volume().claim, "etcd-backups");
        for bad in ["", "claim", "/claim", "ns/", "a/b/c"] {
            assert!(
                LocalVolume::parse(bad, PathBuf::from("/x")).is_err(),
                "{bad}"
            );
        }
    }
}
