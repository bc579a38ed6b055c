//! A damaged backup is rejected by `verify` and `fetch` (exit code 3), and `fetch` leaves no file.

mod common;

use backup_storage::{Location, S3Options, Store};
use common::*;
use testbed::{Etcd, Garage};

async fn saved_local_backup(dir: &std::path::Path, compress: &str) -> std::path::PathBuf {
    let etcd = Etcd::start().await.unwrap();
    write_sample_keys(&etcd).await;
    let path = dir.join("etcd.backup");
    let url = format!("file://{}", path.display());
    run(
        &[
            "save",
            "--endpoints",
            &etcd.endpoint,
            "--to",
            &url,
            "--compress",
            compress,
        ],
        &[],
    )
    .await
    .ok();
    path
}

/// `causes`: what stderr may name; any one of them is a correct rejection.
async fn assert_rejected(url: &str, flags: &[String], env: &[(String, String)], causes: &[&str]) {
    let mut verify = vec!["verify", url];
    verify.extend(strs(flags));
    let result = run(&verify, env).await;
    assert_eq!(
        result.code, 3,
        "verify accepted a damaged backup: {}{}",
        result.stdout, result.stderr
    );
    assert!(
        causes.iter().any(|cause| result.stderr.contains(cause)),
        "expected one of {causes:?} in: {}",
        result.stderr
    );

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("fetched.db");
    let mut fetch = vec!["fetch", url, "--out", out.to_str().unwrap()];
    fetch.extend(strs(flags));
    let result = run(&fetch, env).await;
    assert_eq!(
        result.code, 3,
        "fetch accepted a damaged backup: {}",
        result.stderr
    );
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "fetch left files behind: {left:?}");
}

#[tokio::test]
async fn flipped_byte_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let path = saved_local_backup(dir.path(), "none").await;
    let mut bytes = std::fs::read(&path).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    assert_rejected(path.to_str().unwrap(), &[], &[], &["hash mismatch"]).await;
}

#[tokio::test]
async fn truncated_object_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let path = saved_local_backup(dir.path(), "none").await;
    let bytes = std::fs::read(&path).unwrap();
    // Cut at a page boundary plus 32 bytes, so even the size test of etcdutl would pass.
    std::fs::write(&path, &bytes[..4096 * 2 + 32]).unwrap();
    assert_rejected(path.to_str().unwrap(), &[], &[], &["hash mismatch"]).await;
}

#[tokio::test]
async fn truncated_zstd_object_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let path = saved_local_backup(dir.path(), "zstd").await;
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 10]).unwrap();
    assert_rejected(path.to_str().unwrap(), &[], &[], &["truncated object"]).await;
}

#[tokio::test]
async fn object_replaced_behind_the_manifest_is_rejected() {
    // A valid snapshot that is not the one the manifest describes.
    let dir = tempfile::tempdir().unwrap();
    let path = saved_local_backup(dir.path(), "none").await;
    let other = saved_local_backup(&dir.path().join("other"), "none").await;
    std::fs::copy(&other, &path).unwrap();
    assert_rejected(
        path.to_str().unwrap(),
        &[],
        &[],
        &["mismatch with the manifest"],
    )
    .await;
}

/// A backup copied elsewhere (here: another file, so another inode and ETag) with its
/// manifest still verifies: the content matches what the manifest records.
#[tokio::test]
async fn a_copied_backup_with_its_manifest_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let path = saved_local_backup(dir.path(), "none").await;
    let copy = dir.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    let copied = copy.join("etcd.backup");
    std::fs::copy(&path, &copied).unwrap();
    std::fs::copy(
        format!("{}.manifest.json", path.display()),
        format!("{}.manifest.json", copied.display()),
    )
    .unwrap();
    let result = run(&["verify", copied.to_str().unwrap()], &[]).await;
    assert_eq!(result.code, 0, "{}", result.stderr);
    assert!(
        result.stdout.contains("manifest matches"),
        "{}",
        result.stdout
    );
}

#[tokio::test]
async fn corrupted_s3_object_is_rejected() {
    let garage = Garage::start().await.unwrap();
    let (flags, env) = garage.cli_args();
    let etcd = Etcd::start().await.unwrap();
    write_sample_keys(&etcd).await;
    let url = format!("s3://{}/etcd.backup", garage.bucket);
    let mut save = vec!["save", "--endpoints", &etcd.endpoint, "--to", &url];
    save.extend(strs(&flags));
    run(&save, &env).await.ok();

    // Overwrite the object with a damaged copy, leaving the manifest as it was.
    let options = S3Options::s3_compatible(
        &garage.endpoint,
        &garage.region,
        &garage.access_key,
        &garage.secret_key,
    );
    let store = Store::open(&Location::parse(&url).unwrap(), &options)
        .await
        .unwrap();
    let mut bytes = store
        .get_small("etcd.backup")
        .await
        .unwrap()
        .unwrap()
        .to_vec();
    bytes[5000] ^= 1;
    store
        .put_small("etcd.backup", bytes.into(), "application/octet-stream")
        .await
        .unwrap();
    assert_rejected(&url, &flags, &env, &["hash mismatch"]).await;
}

/// GCS and Azure: an object replaced by a damaged copy (a byte flipped) or a truncated one,
/// the manifest left as it was, is rejected by `verify`.
#[tokio::test]
async fn corrupted_and_truncated_gcs_and_azure_objects_are_rejected() {
    let gcs = testbed::FakeGcs::start().await.unwrap();
    let azurite = testbed::Azurite::start().await.unwrap();
    let etcd = Etcd::start().await.unwrap();
    write_sample_keys(&etcd).await;
    let stores = [
        (
            format!("gs://{}/etcd.backup", gcs.bucket),
            gcs.cli_args(),
            backup_storage::StoreOptions::from(&backup_storage::GcsOptions {
                endpoint: Some(gcs.endpoint.clone()),
                credentials: backup_storage::GcsCredentials::Anonymous,
                ..Default::default()
            }),
        ),
        (
            format!("azblob://{}/etcd.backup", azurite.container),
            azurite.cli_args(),
            backup_storage::StoreOptions::from(&backup_storage::AzureOptions {
                account: azurite.account.clone(),
                endpoint: Some(azurite.endpoint.clone()),
                credentials: backup_storage::AzureCredentials::SharedKey(azurite.key.clone()),
                ..Default::default()
            }),
        ),
    ];
    for (url, (flags, env), options) in &stores {
        let mut save = vec!["save", "--endpoints", &etcd.endpoint, "--to", url];
        save.extend(strs(flags));
        run(&save, env).await.ok();
        let store = Store::open(&Location::parse(url).unwrap(), options)
            .await
            .unwrap();
        let original = store.get_small("etcd.backup").await.unwrap().unwrap();
        let mut flipped = original.to_vec();
        flipped[5000] ^= 1;
        store
            .put_small("etcd.backup", flipped.into(), "application/octet-stream")
            .await
            .unwrap();
        assert_rejected(url, flags, env, &["hash mismatch"]).await;
        let truncated = original.slice(..original.len() - 100);
        store
            .put_small("etcd.backup", truncated, "application/octet-stream")
            .await
            .unwrap();
        assert_rejected(url, flags, env, &["size", "bytes"]).await;
    }
}

/// An encrypted backup with one byte flipped, in the header, the first chunk or the last:
/// `verify --identity` and `fetch --identity` fail with exit code 3 and leave no file.
#[tokio::test]
async fn a_flipped_byte_in_an_encrypted_backup_is_rejected() {
    let etcd = Etcd::start().await.unwrap();
    write_sample_keys(&etcd).await;
    let dir = tempfile::tempdir().unwrap();
    let (secret, public) = backup_storage::encryption::Identity::generate();
    let identity = dir.path().join("key.txt");
    std::fs::write(&identity, secret).unwrap();
    let path = dir.path().join("etcd.backup");
    let url = format!("file://{}", path.display());
    run(
        &[
            "save",
            "--endpoints",
            &etcd.endpoint,
            "--to",
            &url,
            "--encrypt-to",
            &public,
        ],
        &[],
    )
    .await
    .ok();
    let original = std::fs::read(&path).unwrap();
    let flags = vec!["--identity".to_string(), identity.display().to_string()];
    // Byte 60 is in the recipient stanza's base64: a flipped bit there gives either another
    // valid character (the file key does not unwrap) or an invalid one (the header does not
    // parse), depending on the random key; both are rejections.
    let header = ["failed to decrypt", "is not a readable age file"];
    for (at, causes) in [
        (60, &header[..]),
        (400, &["failed to decrypt"][..]),
        (original.len() - 5, &["failed to decrypt"][..]),
    ] {
        let mut bytes = original.clone();
        bytes[at] ^= 0x01;
        std::fs::write(&path, &bytes).unwrap();
        assert_rejected(path.to_str().unwrap(), &flags, &[], causes).await;
    }
}
