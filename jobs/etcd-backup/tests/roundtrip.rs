//! save -> verify -> fetch -> stock `snapshot restore` -> etcd starts -> same keys.

mod common;

use common::*;
use testbed::{Azurite, Etcd, FakeGcs, Garage};

async fn roundtrip(url: String, compress: &str, s3: (Vec<String>, Vec<(String, String)>)) {
    let etcd = Etcd::start().await.unwrap();
    let expected = write_sample_keys(&etcd).await;
    let (flags, env) = s3;
    let mut save = vec![
        "save",
        "--endpoints",
        &etcd.endpoint,
        "--to",
        &url,
        "--compress",
        compress,
        "--output",
        "json",
    ];
    save.extend(strs(&flags));
    let saved = run(&save, &env).await.ok().json();
    assert_eq!(saved["object"], url.as_str());
    assert_eq!(saved["compression"], compress);
    assert!(saved["revision"].as_i64().unwrap() >= 200);
    assert_eq!(saved["dbSha256"].as_str().unwrap().len(), 64);

    let mut verify = vec!["verify", &url, "--output", "json"];
    verify.extend(strs(&flags));
    let verified = run(&verify, &env).await.ok().json();
    assert!(saved["sha256"].is_string(), "{saved}");
    assert_eq!(verified["sha256"], saved["sha256"]);
    assert_eq!(verified["dbSha256"], saved["dbSha256"]);
    assert_eq!(verified["manifest"], true);

    let out_dir = tempfile::tempdir().unwrap();
    let out = out_dir.path().join("snapshot.db");
    let out_str = out.to_str().unwrap();
    let mut fetch = vec!["fetch", &url, "--out", out_str];
    fetch.extend(strs(&flags));
    run(&fetch, &env).await.ok();
    // The fetched file is the database plus etcd's 32-byte trailer, uncompressed, and readable
    // by its owner only (it holds every secret the cluster stores).
    let len = std::fs::metadata(&out).unwrap().len();
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&out).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    assert_eq!(len, saved["dbBytes"].as_u64().unwrap() + 32);

    drop(etcd);
    assert_eq!(restore_and_read(&out).await, expected);
}

#[tokio::test]
async fn local_plain() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}/backups/etcd.backup", dir.path().display());
    roundtrip(url, "none", (vec![], vec![])).await;
}

#[tokio::test]
async fn local_zstd() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}/etcd.backup.zst", dir.path().display());
    roundtrip(url, "zstd", (vec![], vec![])).await;
}

#[tokio::test]
async fn s3_plain() {
    let garage = Garage::start().await.unwrap();
    let url = format!("s3://{}/cluster-a/etcd.backup", garage.bucket);
    roundtrip(url, "none", garage.cli_args()).await;
}

#[tokio::test]
async fn s3_zstd() {
    let garage = Garage::start().await.unwrap();
    let url = format!("s3://{}/etcd.backup.zst", garage.bucket);
    roundtrip(url, "zstd", garage.cli_args()).await;
}

#[tokio::test]
async fn gcs_zstd() {
    let gcs = FakeGcs::start().await.unwrap();
    let url = format!("gs://{}/cluster-a/etcd.backup.zst", gcs.bucket);
    roundtrip(url, "zstd", gcs.cli_args()).await;
}

#[tokio::test]
async fn azure_zstd() {
    let azurite = Azurite::start().await.unwrap();
    let url = format!("azblob://{}/cluster-a/etcd.backup.zst", azurite.container);
    roundtrip(url, "zstd", azurite.cli_args()).await;
}

#[tokio::test]
async fn snapshot_from_a_plain_etcdctl_save_verifies_without_manifest() {
    // Backups written by other tools (coreos, etcdctl) have no manifest: the trailer still counts.
    let etcd = Etcd::start().await.unwrap();
    write_sample_keys(&etcd).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("etcdctl.db");
    etcdctl_snapshot_save(&etcd, &file);
    let verified = run(&["verify", file.to_str().unwrap(), "--output", "json"], &[])
        .await
        .ok()
        .json();
    assert_eq!(verified["manifest"], false);
    assert_eq!(verified["compression"], "none");
}
