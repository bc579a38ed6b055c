//! backup -> storage -> restore -> a second server starts on the restored data with the same rows.

mod common;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_backup_restores_to_a_server_with_the_same_rows() {
    let source = Mariadb::fresh(1);
    source.write_sample();
    let expected = source.sample_digest();
    let store = tempfile::tempdir().unwrap();
    let object = store.path().join("nightly/shop.xbstream.zst");
    let url = format!("file://{}", object.display());

    let a = source.backup_to(&url, &["--compress", "zstd"]);
    let run = run(&a, &[]).await.ok();
    let manifest = run.json();
    assert_eq!(manifest["compression"], "zstd");
    assert_eq!(manifest["toolName"], "mariadb-backup");
    assert!(
        manifest["serverVersion"]
            .as_str()
            .unwrap()
            .contains("MariaDB")
    );
    assert!(manifest["binlog"]["gtid"].as_str().is_some(), "{manifest}");
    assert!(manifest["fileCount"].as_u64().unwrap() > 10);
    assert!(manifest["storedBytes"].as_u64().unwrap() < manifest["streamBytes"].as_u64().unwrap());
    assert_eq!(
        manifest["storedBytes"].as_u64().unwrap(),
        std::fs::metadata(&object).unwrap().len()
    );
    assert!(
        !run.stderr.contains(BACKUP_PASSWORD),
        "password leaked into the logs"
    );

    // The source keeps changing; the restore must show the state at backup time.
    source.sql("DELETE FROM shop.orders WHERE id < 10;");
    assert_ne!(source.sample_digest(), expected);
    assert_eq!(restore_and_digest(&url, &[], &[]).await, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_backup_plain_and_zstd_restore_to_a_server_with_the_same_rows() {
    let garage = testbed::Garage::start()
        .await
        .expect("garage (e2e/install-deps.sh)");
    let (s3_args, env) = garage.cli_args();
    // The backups read their keys from a shared credentials file, whose loading the AWS SDK
    // logs at info with the key ID, and log with the runner's own filter (no RUST_LOG).
    let files = tempfile::tempdir().unwrap();
    let credentials = files.path().join("credentials");
    std::fs::write(
        &credentials,
        format!(
            "[default]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
            garage.access_key, garage.secret_key
        ),
    )
    .unwrap();
    let file_env = [(
        "AWS_SHARED_CREDENTIALS_FILE".to_string(),
        credentials.display().to_string(),
    )];
    let source = Mariadb::fresh(1);
    source.write_sample();
    let expected = source.sample_digest();
    for compress in ["none", "zstd"] {
        let url = format!("s3://{}/mysql/shop-{compress}.xbstream", garage.bucket);
        let mut a = source.backup_to(&url, &["--compress", compress]);
        a.extend(s3_args.clone());
        let output = command(&a, &file_env)
            .env_remove("RUST_LOG")
            .output()
            .await
            .unwrap();
        let backup = Run::from(output).ok();
        assert!(
            backup.stderr.contains("INFO"),
            "logs at info:\n{}",
            backup.stderr
        );
        // The log names no credential.
        assert!(
            !backup.stderr.contains(&garage.access_key),
            "the access key ID is in the log:\n{}",
            backup.stderr
        );
        let manifest = backup.json();
        assert_eq!(manifest["compression"], compress);
        assert_eq!(manifest["object"], url);
        assert_eq!(
            restore_and_digest(&url, &s3_args, &env).await,
            expected,
            "{compress}"
        );
    }
}
