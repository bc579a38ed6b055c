//! The backups under a prefix, as the store says: what `list` shows, what `restore --newest`
//! takes and what `prune` keeps.
//!
//! An object is a backup only when the manifest beside it parses and records the object's size:
//! the manifest is written after the object committed, so a backup that did not finish (or an
//! object of another tool under the same prefix) is never listed, restored as the newest, or
//! counted as a kept backup. Order is the manifest's completion time (then the key), never the
//! object's name or modification time.

use std::collections::{BTreeSet, HashMap};

use crate::chain;
use crate::error::Result;
use crate::manifest::{Manifest, manifest_key};
use crate::manifest_fetch::fetch_manifests;
use backup_storage::{MANIFEST_SUFFIX, ObjectInfo, Store};

pub use crate::manifest::Backup;

/// The prefix's objects and the manifests that parsed, keyed by the object they describe.
pub struct Catalog {
    pub objects: Vec<ObjectInfo>,
    pub manifests: HashMap<String, Manifest>,
}

impl Catalog {
    /// Lists `prefix` and reads every manifest under it.
    pub async fn read(store: &Store, prefix: &str) -> Result<Catalog> {
        let objects = store.list(prefix).await?;
        let manifests = read_manifests(store, &objects).await?;
        Ok(Catalog { objects, manifests })
    }

    /// The complete backups, newest first.
    pub fn backups(&self) -> Vec<Backup> {
        let mut backups: Vec<Backup> = self
            .objects
            .iter()
            .filter(|o| !o.key.ends_with(MANIFEST_SUFFIX))
            .filter_map(|o| {
                let m = self.manifests.get(&o.key)?;
                (m.stored_bytes == o.size).then(|| Backup {
                    key: o.key.clone(),
                    manifest: m.clone(),
                })
            })
            .collect();
        backups.sort_by(|a, b| {
            (b.manifest.completion_time, &b.key).cmp(&(a.manifest.completion_time, &a.key))
        });
        backups
    }

    /// The complete backups whose chain can be restored (every link holds), newest first: what
    /// `restore --newest` and a restore to a point choose from. The others are logged.
    pub fn restorable(&self) -> Vec<Backup> {
        let backups = self.backups();
        backups
            .iter()
            .filter(|b| match chain::resolve(b, &backups) {
                Ok(_) => true,
                Err(e) => {
                    tracing::warn!(backup = b.key, "not restorable: {e}");
                    false
                }
            })
            .cloned()
            .collect()
    }

    /// What `prune --keep keep` keeps, newest first: the newest `keep` backups (at least 1: the
    /// newest is never deleted) and every backup their chains build on, so that no kept
    /// incremental loses its base. `keep` counts restore points, full or incremental.
    pub fn kept(&self, keep: usize) -> Vec<Backup> {
        let backups = self.backups();
        let mut kept: BTreeSet<&str> = BTreeSet::new();
        for backup in backups.iter().take(keep.max(1)) {
            let mut current = Some(backup);
            while let Some(b) = current {
                if !kept.insert(b.key.as_str()) {
                    break;
                }
                current = b
                    .manifest
                    .base_key(&b.key)
                    .and_then(|key| backups.iter().find(|base| base.key == key));
            }
        }
        backups
            .iter()
            .filter(|b| kept.contains(b.key.as_str()))
            .cloned()
            .collect()
    }

    /// What `prune --keep keep` deletes, in order: each backup not [`Catalog::kept`], newest
    /// first (an incremental before its base, so an interrupted prune never leaves an
    /// incremental without its base), its object first and then its manifest (a manifest whose
    /// object is gone is not a backup, so an interrupted prune leaves nothing that looks
    /// restorable), and manifests left without their object. Objects without a manifest are
    /// never deleted: they may be another tool's.
    pub fn select_for_deletion(&self, keep: usize) -> Vec<String> {
        let kept: BTreeSet<String> = self.kept(keep).into_iter().map(|b| b.key).collect();
        let mut delete = Vec::new();
        for old in self.backups() {
            if kept.contains(&old.key) {
                continue;
            }
            let manifest = manifest_key(&old.key);
            delete.push(old.key);
            delete.push(manifest);
        }
        let present: BTreeSet<&str> = self.objects.iter().map(|o| o.key.as_str()).collect();
        let mut orphans: Vec<String> = self
            .manifests
            .keys()
            .filter(|described| !present.contains(described.as_str()))
            .map(|described| manifest_key(described))
            .collect();
        orphans.sort();
        delete.extend(orphans);
        delete
    }
}

/// The manifests among `objects` that parse, keyed by the object they describe.
async fn read_manifests(
    store: &Store,
    objects: &[ObjectInfo],
) -> Result<HashMap<String, Manifest>> {
    let mut manifests = HashMap::new();
    for (described, bytes) in fetch_manifests(store, objects, |_| true).await? {
        match Manifest::parse(&bytes) {
            Ok(m) => {
                manifests.insert(described.to_string(), m);
            }
            Err(e) => tracing::warn!(key = described, "not a manifest of ours: {e}"),
        }
    }
    Ok(manifests)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};

    fn manifest(stored_bytes: u64, completed: &str) -> Manifest {
        let time = completed.parse::<DateTime<Utc>>().unwrap();
        Manifest {
            format: crate::manifest::FORMAT.into(),
            stored_bytes,
            stored_sha256: Some(String::new()),
            stored_crc32c: None,
            stored_etag: None,
            compression: Default::default(),
            encryption: None,
            stream_bytes: 0,
            stream_sha256: None,
            payload_bytes: 0,
            file_count: 0,
            tool_family: crate::profile::Family::Mariadb,
            backup: Default::default(),
            source: "local".into(),
            lineage: None,
            incremental: None,
            start_time: time,
            completion_time: time,
            duration_seconds: 0.0,
            runner: String::new(),
        }
    }

    #[test]
    fn a_manifest_records_a_sha256_or_for_an_encrypted_backup_a_crc32c() {
        let plain = manifest(10, "2026-11-25T02:30:00Z");
        assert_eq!(Manifest::parse(&plain.to_json()).unwrap(), plain);
        let encrypted = Manifest {
            stored_sha256: None,
            stored_crc32c: Some("0a0b0c0d".into()),
            encryption: Some(backup_storage::encryption::Encryption {
                scheme: "age".into(),
                recipients: vec!["age1example".into()],
            }),
            ..plain.clone()
        };
        let parsed = Manifest::parse(&encrypted.to_json()).unwrap();
        assert_eq!(parsed.stored_checksum().to_string(), "crc32c 0a0b0c0d");
        let neither = Manifest {
            stored_crc32c: None,
            ..encrypted.clone()
        };
        let err = Manifest::parse(&neither.to_json()).unwrap_err();
        assert!(err.contains("records no checksum"), "{err}");
        let plain_with_a_crc = Manifest {
            encryption: None,
            ..encrypted
        };
        let err = Manifest::parse(&plain_with_a_crc.to_json()).unwrap_err();
        assert!(err.contains("no storedSha256"), "{err}");
    }

    fn object(key: &str, size: u64) -> ObjectInfo {
        ObjectInfo {
            key: key.into(),
            size,
            last_modified: None,
            etag: None,
            metadata: Default::default(),
        }
    }

    /// Three complete backups whose names sort against their times, one upload without a
    /// manifest, one whose manifest records another size, another tool's object, and a
    /// manifest whose object is gone.
    fn catalog() -> Catalog {
        let mut manifests = HashMap::new();
        manifests.insert("m/b".to_string(), manifest(10, "2026-11-25T02:30:00Z"));
        manifests.insert("m/c".to_string(), manifest(10, "2026-11-26T02:30:00Z"));
        manifests.insert("m/a".to_string(), manifest(10, "2026-11-27T02:30:00Z"));
        manifests.insert("m/short".to_string(), manifest(99, "2026-11-28T02:30:00Z"));
        manifests.insert("m/gone".to_string(), manifest(10, "2026-11-20T02:30:00Z"));
        let mut objects = Vec::new();
        for key in ["m/a", "m/b", "m/c", "m/short"] {
            objects.push(object(key, 10));
            objects.push(object(&manifest_key(key), 1));
        }
        objects.push(object("m/unfinished", 10));
        objects.push(object("m/notes.txt", 3));
        objects.push(object(&manifest_key("m/gone"), 1));
        Catalog { objects, manifests }
    }

    /// More manifests than are fetched at once, names that sort against their times, a manifest
    /// that is not ours and an object without one: every manifest of ours is read, and the
    /// backups come newest first.
    #[tokio::test]
    async fn read_fetches_every_manifest_under_the_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}/nightly-", dir.path().display());
        let location = backup_storage::Location::parse(&url).unwrap();
        let store = Store::open(&location, backup_storage::StoreOptions::default())
            .await
            .unwrap();
        let prefix = location.key();
        let put = async |key: &str, body: Vec<u8>| {
            store.put_small(key, body.into(), "").await.unwrap();
        };
        for i in 0..20 {
            let key = format!("{prefix}{:02}", 19 - i);
            put(&key, vec![0; 10]).await;
            let m = manifest(10, &format!("2026-11-27T{i:02}:00:00Z"));
            put(&manifest_key(&key), serde_json::to_vec(&m).unwrap()).await;
        }
        put(&format!("{prefix}other"), vec![0; 10]).await;
        put(&manifest_key(&format!("{prefix}other")), b"{}".to_vec()).await;
        put(&format!("{prefix}unfinished"), vec![0; 10]).await;

        let catalog = Catalog::read(&store, &prefix).await.unwrap();
        assert_eq!(catalog.objects.len(), 43);
        assert_eq!(catalog.manifests.len(), 20);
        let keys: Vec<String> = catalog.backups().into_iter().map(|b| b.key).collect();
        let expected: Vec<String> = (0..20).map(|i| format!("{prefix}{i:02}")).collect();
        assert_eq!(keys, expected);
    }

    #[test]
    fn only_objects_their_manifest_describes_are_backups_newest_first_by_completion() {
        let keys: Vec<String> = catalog().backups().into_iter().map(|b| b.key).collect();
        assert_eq!(keys, ["m/a", "m/c", "m/b"]);
    }

    #[test]
    fn prune_keeps_the_newest_and_deletes_objects_before_their_manifests() {
        let c = catalog();
        assert_eq!(
            c.select_for_deletion(2),
            ["m/b", "m/b.manifest.json", "m/gone.manifest.json"]
        );
        // keep 0 still keeps the newest; other tools' objects and unfinished uploads stay.
        let all = c.select_for_deletion(0);
        assert_eq!(
            all,
            [
                "m/c",
                "m/c.manifest.json",
                "m/b",
                "m/b.manifest.json",
                "m/gone.manifest.json"
            ]
        );
        assert_eq!(c.select_for_deletion(3), ["m/gone.manifest.json"]);
    }

    /// full1 <- inc1a <- inc1b, then full2 <- inc2a (newest). Keeping 2 keeps inc2a and full2;
    /// keeping 3 keeps inc1b, which needs inc1a and full1: a chain is never cut.
    #[test]
    fn prune_keeps_every_base_a_kept_incremental_needs_and_deletes_incrementals_first() {
        let incremental = |base: &str, completed: &str| Manifest {
            format: crate::manifest::FORMAT_INCREMENTAL.into(),
            incremental: Some(crate::manifest::IncrementalOf {
                base: base.into(),
                base_to_lsn: 0,
            }),
            ..manifest(10, completed)
        };
        let mut manifests = HashMap::new();
        manifests.insert("m/full1".to_string(), manifest(10, "2026-11-24T02:30:00Z"));
        manifests.insert(
            "m/inc1a".to_string(),
            incremental("full1", "2026-11-25T02:30:00Z"),
        );
        manifests.insert(
            "m/inc1b".to_string(),
            incremental("inc1a", "2026-11-26T02:30:00Z"),
        );
        manifests.insert("m/full2".to_string(), manifest(10, "2026-11-27T02:30:00Z"));
        manifests.insert(
            "m/inc2a".to_string(),
            incremental("full2", "2026-11-28T02:30:00Z"),
        );
        let mut objects = Vec::new();
        for key in manifests.keys() {
            objects.push(object(key, 10));
            objects.push(object(&manifest_key(key), 1));
        }
        let c = Catalog { objects, manifests };
        let keys = |backups: Vec<Backup>| backups.into_iter().map(|b| b.key).collect::<Vec<_>>();
        assert_eq!(keys(c.kept(1)), ["m/inc2a", "m/full2"]);
        assert_eq!(keys(c.kept(2)), ["m/inc2a", "m/full2"]);
        assert_eq!(
            c.select_for_deletion(2),
            [
                "m/inc1b",
                "m/inc1b.manifest.json",
                "m/inc1a",
                "m/inc1a.manifest.json",
                "m/full1",
                "m/full1.manifest.json"
            ]
        );
        assert_eq!(
            keys(c.kept(3)),
            ["m/inc2a", "m/full2", "m/inc1b", "m/inc1a", "m/full1"]
        );
        assert!(c.select_for_deletion(3).is_empty());
    }
}
