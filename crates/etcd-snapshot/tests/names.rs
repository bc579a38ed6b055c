//! A scheduled snapshot (`<base>_v<revision>_<second>`) never overwrites an object of its name:
//! a run and the archive of the same EtcdBackup taking snapshots in the same second at the same
//! revision once left one's object beside the other's manifest (a backup that fails its own
//! verification). Now the second one fails instead, and the archive starts from a run's
//! snapshot instead of taking one beside it.

use std::collections::BTreeMap;

use backup_storage::{Location, S3Options, Store};
use bytes::Bytes;
use etcd_snapshot::naming::scheduled_name;
use etcd_snapshot::{EtcdConnection, ObjectName, SaveOptions, save, select_member, verify};
use testbed::Etcd;

/// A store on a directory of its own and the base name of the snapshots in it (a local store's
/// keys are absolute paths).
async fn local_store(dir: &tempfile::TempDir) -> (Store, String) {
    let location = Location::parse(dir.path().to_str().unwrap()).unwrap();
    let store = Store::open(&location, &S3Options::default()).await.unwrap();
    (store, format!("{}/etcd.backup", location.key()))
}

#[tokio::test]
async fn a_scheduled_snapshot_never_overwrites_an_object_of_its_name() {
    let etcd = Etcd::start().await.unwrap();
    etcd.put("/k", "v").await.unwrap();
    let connection = EtcdConnection::new(vec![etcd.endpoint.clone()]);
    let revision = select_member(&connection).await.unwrap().revision;
    let dir = tempfile::tempdir().unwrap();
    let (store, base) = local_store(&dir).await;

    // Objects under every name of this revision for the next ten seconds.
    let now = chrono::Utc::now();
    let mut taken = BTreeMap::new();
    for second in 0..10 {
        let key = scheduled_name(&base, revision, now + chrono::Duration::seconds(second));
        store
            .put_small(&key, Bytes::from_static(b"another snapshot"), "text/plain")
            .await
            .unwrap();
        taken.insert(key, b"another snapshot".to_vec());
    }

    let options = SaveOptions::new(ObjectName::Scheduled(base.clone()));
    let refused = save(&connection, &store, &options).await.unwrap_err();
    assert!(
        matches!(
            refused,
            etcd_snapshot::Error::Storage(backup_storage::StorageError::PreconditionFailed { .. })
        ),
        "{refused}"
    );
    for (key, body) in &taken {
        let kept = store.get_small(key).await.unwrap().unwrap();
        assert_eq!(kept.as_ref(), body.as_slice(), "{key} changed");
        let manifest = etcd_snapshot::manifest_key(key);
        assert!(
            store.head(&manifest).await.unwrap().is_none(),
            "{manifest} written"
        );
    }
    // A name nobody took is stored.
    let base = format!("{base}-free");
    let options = SaveOptions::new(ObjectName::Scheduled(base.clone()));
    let report = save(&connection, &store, &options).await.unwrap();
    assert!(report.key.starts_with(&base), "{}", report.key);
    verify(&store, &report.key, None).await.unwrap();
}

/// The operator's scheduled run holds the EtcdBackup's snapshot lock while it takes its
/// snapshot; an archive starting meanwhile waits for it and starts after that snapshot instead
/// of taking one of its own beside it (in the same second, at the same revision).
#[tokio::test]
async fn an_archive_starting_during_a_run_starts_after_the_runs_snapshot() {
    use etcd_snapshot::Compression;
    use etcd_snapshot::changes::{ArchiveEvent, ArchiveOptions, SegmentLayers, archive};
    use std::sync::{Arc, Mutex};

    let etcd = Etcd::start().await.unwrap();
    etcd.put("/k", "v").await.unwrap();
    let connection = EtcdConnection::new(vec![etcd.endpoint.clone()]);
    let dir = tempfile::tempdir().unwrap();
    let (store, base) = local_store(&dir).await;

    let snapshot_lock = Arc::new(tokio::sync::Mutex::new(()));
    let run = snapshot_lock.clone().lock_owned().await;
    let started: Arc<Mutex<Option<String>>> = Arc::default();
    let seen = started.clone();
    let options = ArchiveOptions {
        base: base.clone(),
        segment_seconds: std::time::Duration::from_secs(1),
        segment_max_bytes: 1 << 20,
        layers: SegmentLayers {
            compression: Compression::None,
            recipients: None,
            upload: Default::default(),
        },
        snapshot: SaveOptions::new(ObjectName::Scheduled(base.clone())),
        snapshot_lock,
        identity: None,
        report: Arc::new(move |event| {
            if let ArchiveEvent::Started { reason, .. } = event {
                *seen.lock().unwrap() = Some(reason);
            }
        }),
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let archiving = {
        let (connection, store) = (connection.clone(), store.clone());
        tokio::spawn(async move { archive(&connection, &store, &options, stopped).await })
    };
    // Time for an archive that did not wait to look for a snapshot and take its own.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let scheduled = SaveOptions::new(ObjectName::Scheduled(base.clone()));
    let report = save(&connection, &store, &scheduled).await.unwrap();
    drop(run);

    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let reason = loop {
        if let Some(reason) = started.lock().unwrap().clone() {
            break reason;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the archive did not start"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(
        reason,
        format!("after the newest snapshot {}", report.key),
        "the archive took a snapshot of its own"
    );
    stop.send(true).unwrap();
    archiving.await.unwrap().unwrap();
}
