//! The local directory backend: temp name, fsync, rename on commit; nothing left on abort.

use std::time::Duration;

use backup_storage::{Location, S3Options, Store, UploadOptions};

async fn store_in(dir: &tempfile::TempDir) -> (Store, String) {
    let location = Location::parse(dir.path().to_str().unwrap()).unwrap();
    let store = Store::open(&location, &S3Options::default()).await.unwrap();
    (store, location.key())
}

fn names(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn commit_renames_into_place_and_hides_the_temp_file() {
    let dir = tempfile::tempdir().unwrap();
    let (store, base) = store_in(&dir).await;
    let key = format!("{base}/sub/snap.db");
    let mut upload = store.upload(&key, UploadOptions::default()).await.unwrap();
    upload.write(b"abc").await.unwrap();
    upload.write(&vec![7u8; 3 << 20]).await.unwrap();
    // Only a hidden temp file exists, and listings skip it.
    let sub = dir.path().join("sub");
    assert_eq!(names(&sub).len(), 1);
    assert!(names(&sub)[0].starts_with(".snap.db.part-"));
    assert_eq!(store.list(&format!("{base}/")).await.unwrap(), vec![]);
    assert_eq!(store.head(&key).await.unwrap(), None);

    let info = upload.commit().await.unwrap();
    assert_eq!(info.size, 3 + (3 << 20));
    assert_eq!(names(&sub), vec!["snap.db"]);
    let listed = store.list(&format!("{base}/sub/sn")).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].key, key);
    let bytes = std::fs::read(sub.join("snap.db")).unwrap();
    assert_eq!(&bytes[..3], b"abc");
    // Owner-only: a backup holds secrets.
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(sub.join("snap.db"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");

    let mut download = store.download(&key).await.unwrap();
    let mut total = 0;
    while let Some(chunk) = download.next_chunk().await.unwrap() {
        total += chunk.len();
    }
    assert_eq!(total, bytes.len());
}

#[tokio::test]
async fn abort_and_drop_remove_the_temp_file() {
    let dir = tempfile::tempdir().unwrap();
    let (store, base) = store_in(&dir).await;
    let mut aborted = store
        .upload(&format!("{base}/a"), UploadOptions::default())
        .await
        .unwrap();
    aborted.write(b"data").await.unwrap();
    aborted.abort().await.unwrap();
    let mut dropped = store
        .upload(&format!("{base}/b"), UploadOptions::default())
        .await
        .unwrap();
    dropped.write(b"data").await.unwrap();
    drop(dropped);
    assert_eq!(names(dir.path()), Vec::<String>::new());
}

#[tokio::test]
async fn commit_replaces_an_existing_file_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let (store, base) = store_in(&dir).await;
    let key = format!("{base}/snap");
    store.put_small(&key, "old".into(), "").await.unwrap();
    let mut upload = store.upload(&key, UploadOptions::default()).await.unwrap();
    upload.write(b"new").await.unwrap();
    assert_eq!(store.get_small(&key).await.unwrap().unwrap(), "old");
    upload.commit().await.unwrap();
    assert_eq!(store.get_small(&key).await.unwrap().unwrap(), "new");
    assert_eq!(
        store.get_small(&format!("{base}/missing")).await.unwrap(),
        None
    );
}

#[tokio::test]
async fn clean_incomplete_removes_only_its_own_old_temp_files() {
    let dir = tempfile::tempdir().unwrap();
    let (store, base) = store_in(&dir).await;
    // Ours (becomes `snap`), and another writer's (becomes `other`) in the same directory.
    std::fs::write(dir.path().join(".snap.part-0000000000000001"), b"orphan").unwrap();
    std::fs::write(dir.path().join(".other.part-0000000000000002"), b"foreign").unwrap();
    std::fs::write(dir.path().join("snap"), b"keep").unwrap();
    let prefix = format!("{base}/snap");
    let ours = |key: &str| key == prefix;
    let clean = |age: u64| store.clean_incomplete(&prefix, Duration::from_secs(age), &ours);
    assert_eq!(clean(3600).await.unwrap(), 0);
    assert_eq!(clean(0).await.unwrap(), 1);
    assert_eq!(
        names(dir.path()),
        vec![".other.part-0000000000000002", "snap"]
    );
}

#[tokio::test]
async fn missing_object_is_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let (store, base) = store_in(&dir).await;
    let err = match store.download(&format!("{base}/nope")).await {
        Err(e) => e,
        Ok(_) => panic!("downloaded a missing file"),
    };
    assert!(err.to_string().contains("not found"), "{err}");
    store.delete(&format!("{base}/nope")).await.unwrap();
}

/// A conditional commit never replaces what another writer put there after the caller looked.
#[tokio::test]
async fn conditional_commits_refuse_an_object_written_meanwhile() {
    use backup_storage::{Precondition, StorageError};
    let dir = tempfile::tempdir().unwrap();
    let (store, base) = store_in(&dir).await;
    let key = format!("{base}/snap.db");
    let path = dir.path().join("snap.db");
    let conditional = |precondition| UploadOptions {
        precondition: Some(precondition),
        ..UploadOptions::default()
    };

    // Absent: someone creates the file while the upload runs.
    let mut upload = store
        .upload(&key, conditional(Precondition::Absent))
        .await
        .unwrap();
    upload.write(b"ours").await.unwrap();
    std::fs::write(&path, b"theirs").unwrap();
    let err = upload.commit().await.unwrap_err();
    assert!(
        matches!(err, StorageError::PreconditionFailed { .. }),
        "{err}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), b"theirs");
    assert_eq!(names(dir.path()), vec!["snap.db"], "no temp file left");

    // Unchanged: the file seen before is replaced while the upload runs.
    let seen = store.head(&key).await.unwrap().unwrap().etag.unwrap();
    let mut upload = store
        .upload(&key, conditional(Precondition::Unchanged(seen.clone())))
        .await
        .unwrap();
    upload.write(b"ours").await.unwrap();
    let staged = dir.path().join("staged");
    std::fs::write(&staged, b"replaced").unwrap();
    std::fs::rename(&staged, &path).unwrap();
    let err = upload.commit().await.unwrap_err();
    assert!(
        matches!(err, StorageError::PreconditionFailed { .. }),
        "{err}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), b"replaced");

    // Unchanged and indeed unchanged: the rewrite goes through.
    let seen = store.head(&key).await.unwrap().unwrap().etag.unwrap();
    let mut upload = store
        .upload(&key, conditional(Precondition::Unchanged(seen)))
        .await
        .unwrap();
    upload.write(b"ours").await.unwrap();
    upload.commit().await.unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"ours");
    assert_eq!(names(dir.path()), vec!["snap.db"]);
}
