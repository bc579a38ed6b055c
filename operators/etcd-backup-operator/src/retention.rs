//! Retention (`maxBackups`) and the `Delete` deletion policy.
//!
//! Every object the operator writes carries the EtcdBackup's UID as S3 user metadata, so both
//! touch only objects this EtcdBackup wrote, even when other objects share the key prefix.
//! Ordering is by the time and revision parsed from the name (etcd-snapshot's naming), never
//! by string order.

use backup_storage::{ObjectInfo, StorageError, Store};
use etcd_snapshot::naming::{parse_scheduled, select_for_deletion};
use etcd_snapshot::{MANIFEST_SUFFIX, manifest_key, read_manifest};

/// S3 user metadata naming the EtcdBackup (by UID) that wrote an object.
pub const OWNER_METADATA_KEY: &str = "etcd-backup-uid";

/// A listed backup object and the owner recorded on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub key: String,
    pub owner: Option<String>,
}

/// Keys to delete so that the newest `keep` backups written by `owner` remain. `protect` is
/// never deleted: the backup just written (even if a skewed clock made its name sort older)
/// and the newest backup a drill proved, however old. Manifests go with their backup.
pub fn select_prunable(
    base: &str,
    candidates: &[Candidate],
    owner: &str,
    keep: u32,
    protect: &[&str],
) -> Vec<String> {
    let ours: Vec<String> = candidates
        .iter()
        .filter(|c| c.owner.as_deref() == Some(owner) && parse_scheduled(base, &c.key).is_some())
        .flat_map(|c| [c.key.clone(), manifest_key(&c.key)])
        .collect();
    let protected: Vec<String> = protect
        .iter()
        .flat_map(|k| [k.to_string(), manifest_key(k)])
        .collect();
    select_for_deletion(base, ours.iter().map(String::as_str), keep as usize)
        .into_iter()
        .filter(|k| !protected.contains(k))
        .collect()
}

/// Backups of `base` in `store`, with their owner read by HEAD (listings carry no metadata).
/// `scheduled` selects `<base>_v<rev>_<time>` objects; otherwise only `base` itself.
pub async fn candidates(
    store: &Store,
    base: &str,
    scheduled: bool,
) -> Result<Vec<Candidate>, StorageError> {
    let keys: Vec<String> = if scheduled {
        store
            .list(&format!("{base}_v"))
            .await?
            .into_iter()
            .map(|o| o.key)
            .filter(|k| !k.ends_with(MANIFEST_SUFFIX) && parse_scheduled(base, k).is_some())
            .collect()
    } else {
        vec![base.to_string()]
    };
    let mut out = Vec::with_capacity(keys.len());
    for key in keys {
        let Some(info) = store.head(&key).await? else {
            continue;
        };
        let owner = recorded_owner(store, &info).await?;
        out.push(Candidate { owner, key });
    }
    Ok(out)
}

/// The EtcdBackup (by UID) that wrote `object`: the S3 user metadata on it or, since local
/// files carry none, the manifest written for this very object. An unreadable or stale manifest
/// names nobody, so such an object is never taken for ours.
pub async fn recorded_owner(
    store: &Store,
    object: &ObjectInfo,
) -> Result<Option<String>, StorageError> {
    if let Some(owner) = object.metadata.get(OWNER_METADATA_KEY) {
        return Ok(Some(owner.clone()));
    }
    match read_manifest(store, object).await {
        Ok(manifest) => Ok(manifest.and_then(|m| m.labels.get(OWNER_METADATA_KEY).cloned())),
        Err(etcd_snapshot::Error::Storage(e)) => Err(e),
        Err(_) => Ok(None),
    }
}

/// Applies `maxBackups` after a successful scheduled run; returns the deleted keys. `written`:
/// the key just written; `drilled`: the location (`status.lastSuccessfulDrill.objectKey`) of
/// the newest backup a drill proved.
pub async fn prune(
    store: &Store,
    base: &str,
    owner: &str,
    keep: u32,
    written: &str,
    drilled: Option<&str>,
) -> Result<Vec<String>, StorageError> {
    let found = candidates(store, base, true).await?;
    let drilled = found
        .iter()
        .map(|c| c.key.as_str())
        .find(|key| drilled.is_some_and(|url| store.location(key).to_string() == url));
    let protect: Vec<&str> = [Some(written), drilled].into_iter().flatten().collect();
    let mut delete = select_prunable(base, &found, owner, keep, &protect);
    for key in &delete {
        store.delete(key).await?;
    }
    // The continuous archive's segments that no kept backup of ours needs go too.
    let kept: Vec<String> = found
        .iter()
        .filter(|c| c.owner.as_deref() == Some(owner) && !delete.contains(&c.key))
        .map(|c| c.key.clone())
        .collect();
    let segments = match etcd_snapshot::changes::segments_to_prune(store, base, &kept).await {
        Ok(segments) => segments,
        Err(etcd_snapshot::Error::Storage(e)) => return Err(e),
        Err(e) => {
            tracing::warn!(error = %e, "archive segments not pruned this time");
            Vec::new()
        }
    };
    // Only segments this EtcdBackup wrote (its UID in their manifest), as for backups.
    let mut ours = Vec::new();
    for key in segments.iter().filter(|k| !k.ends_with(MANIFEST_SUFFIX)) {
        if segment_owner(store, key).await.as_deref() == Some(owner) {
            ours.extend([manifest_key(key), key.clone()]);
        }
    }
    for key in &ours {
        store.delete(key).await?;
    }
    delete.extend(ours);
    Ok(delete)
}

/// The `Delete` policy: removes every backup (and manifest) `owner` wrote under `base`.
pub async fn delete_owned(
    store: &Store,
    base: &str,
    scheduled: bool,
    owner: &str,
) -> Result<Vec<String>, StorageError> {
    let mut deleted = Vec::new();
    for c in candidates(store, base, scheduled).await? {
        if c.owner.as_deref() == Some(owner) {
            for key in [manifest_key(&c.key), c.key] {
                store.delete(&key).await?;
                deleted.push(key);
            }
        }
    }
    // The continuous archive's segments this EtcdBackup wrote (its UID on each, as on backups).
    if scheduled {
        let prefix = etcd_snapshot::changes::archive_prefix(base);
        for object in store.list(&prefix).await? {
            if etcd_snapshot::changes::parse_segment_key(base, &object.key).is_none() {
                continue;
            }
            let Some(info) = store.head(&object.key).await? else {
                continue;
            };
            if info.metadata.get(OWNER_METADATA_KEY).map(String::as_str) == Some(owner)
                || segment_owner(store, &object.key).await.as_deref() == Some(owner)
            {
                for key in [manifest_key(&object.key), object.key.clone()] {
                    store.delete(&key).await?;
                    deleted.push(key);
                }
            }
        }
    }
    Ok(deleted)
}

/// The owner a segment's manifest records (local files carry no metadata).
async fn segment_owner(store: &Store, key: &str) -> Option<String> {
    let manifest = etcd_snapshot::changes::SegmentManifest::load(store, key)
        .await
        .ok()??;
    manifest.labels.get(OWNER_METADATA_KEY).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(key: &str) -> Candidate {
        Candidate {
            key: key.into(),
            owner: Some("uid-1".into()),
        }
    }

    #[test]
    fn revision_digit_growth_keeps_the_newest() {
        let found = [
            ours("etcd.backup_v98_2026-01-01-00:00:00"),
            ours("etcd.backup_v99_2026-01-01-00:02:05"),
            ours("etcd.backup_v100_2026-01-01-00:04:10"),
        ];
        let delete = select_prunable(
            "etcd.backup",
            &found,
            "uid-1",
            2,
            &["etcd.backup_v100_2026-01-01-00:04:10"],
        );
        assert_eq!(
            delete,
            vec![
                "etcd.backup_v98_2026-01-01-00:00:00",
                "etcd.backup_v98_2026-01-01-00:00:00.manifest.json"
            ]
        );
    }

    #[test]
    fn objects_of_others_are_never_touched_or_counted() {
        let found = [
            ours("b_v1_2026-01-01-00:00:00"),
            ours("b_v2_2026-01-02-00:00:00"),
            // Same prefix, written by another EtcdBackup or by hand: newer, but not ours.
            Candidate {
                key: "b_v3_2026-01-03-00:00:00".into(),
                owner: Some("uid-2".into()),
            },
            Candidate {
                key: "b_v4_2026-01-04-00:00:00".into(),
                owner: None,
            },
        ];
        let delete = select_prunable("b", &found, "uid-1", 1, &["b_v2_2026-01-02-00:00:00"]);
        assert_eq!(
            delete,
            vec![
                "b_v1_2026-01-01-00:00:00",
                "b_v1_2026-01-01-00:00:00.manifest.json"
            ]
        );
    }

    #[test]
    fn the_backup_just_written_survives_a_skewed_clock() {
        // The operator's clock went back: the new backup's name sorts older than the last one.
        let found = [
            ours("b_v10_2026-01-02-00:00:00"),
            ours("b_v11_2026-01-01-00:00:00"),
        ];
        let delete = select_prunable("b", &found, "uid-1", 1, &["b_v11_2026-01-01-00:00:00"]);
        assert!(delete.is_empty(), "{delete:?}");
    }

    #[test]
    fn the_newest_drilled_backup_is_kept_however_old() {
        let found = [
            ours("b_v1_2026-01-01-00:00:00"),
            ours("b_v2_2026-01-02-00:00:00"),
            ours("b_v3_2026-01-03-00:00:00"),
        ];
        let delete = select_prunable(
            "b",
            &found,
            "uid-1",
            1,
            &["b_v3_2026-01-03-00:00:00", "b_v1_2026-01-01-00:00:00"],
        );
        assert_eq!(
            delete,
            vec![
                "b_v2_2026-01-02-00:00:00",
                "b_v2_2026-01-02-00:00:00.manifest.json"
            ]
        );
    }

    #[test]
    fn nothing_to_prune_within_the_limit() {
        let found = [ours("b_v1_2026-01-01-00:00:00")];
        assert!(select_prunable("b", &found, "uid-1", 4, &["b_v1_2026-01-01-00:00:00"]).is_empty());
    }
}
