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

/// `--encrypt-to-file`: the object is an age file to the recipients (the reference `age` tool
/// opens it); `restore` needs a matching `--identity`, and without one the data dir is not
/// touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encrypted_backup_restores_only_with_its_identity() {
    let source = Mariadb::fresh(1);
    source.write_sample();
    let expected = source.sample_digest();
    let dir = tempfile::tempdir().unwrap();
    let (identity, recipients) = age_key_files(dir.path());
    let public = std::fs::read_to_string(&recipients)
        .unwrap()
        .trim()
        .to_string();
    let (stranger, _) = backup_storage::encryption::Identity::generate();
    let wrong = dir.path().join("stranger.txt");
    std::fs::write(&wrong, stranger).unwrap();
    let object = dir.path().join("nightly/shop.xbstream.zst.age");
    let url = format!("file://{}", object.display());

    let a = source.backup_to(
        &url,
        &[
            "--compress",
            "zstd",
            "--encrypt-to-file",
            recipients.to_str().unwrap(),
        ],
    );
    let manifest = run(&a, &[]).await.ok().json();
    assert_eq!(manifest["encryption"]["recipients"][0], public.as_str());
    let stored = std::fs::read(&object).unwrap();
    assert!(stored.starts_with(b"age-encryption.org/v1\n"));
    // The reference tool decrypts it: a zstd frame (compressed, then encrypted).
    let decrypted = std::process::Command::new("age")
        .args(["--decrypt", "-i", identity.to_str().unwrap()])
        .arg(&object)
        .output()
        .unwrap();
    assert!(decrypted.status.success());
    assert!(decrypted.stdout.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]));

    // Without a key, or with one that is no recipient: refused, the data dir untouched.
    let target = tempfile::tempdir().unwrap();
    let datadir = target.path().join("restored");
    for (extra, message) in [
        (vec![], "no identity was given"),
        (
            args(&["--identity", wrong.to_str().unwrap()]),
            "not among its recipients",
        ),
    ] {
        let mut a = restore_from(&url, &datadir, false);
        a.extend(extra);
        let refused = run(&a, &[]).await;
        // Exit 4: the key is missing or wrong, not the backup.
        assert_eq!(refused.code, 4, "{}", refused.stderr);
        assert!(refused.stderr.contains(message), "{}", refused.stderr);
        assert!(!datadir.exists() || list_files(&datadir).is_empty());
    }

    let with_key = args(&["--identity", identity.to_str().unwrap()]);
    assert_eq!(restore_and_digest(&url, &with_key, &[]).await, expected);

    // The manifest records the plaintext's hash too, and restore checks it after decrypting.
    assert_eq!(manifest["streamSha256"].as_str().unwrap().len(), 64);
    let manifest_path = format!("{}.manifest.json", object.display());
    let recorded = std::fs::read_to_string(&manifest_path).unwrap();
    let other = "0".repeat(64);
    let wrong = recorded.replace(manifest["streamSha256"].as_str().unwrap(), &other);
    std::fs::write(&manifest_path, wrong).unwrap();
    let mut a = restore_from(&url, &datadir, false);
    a.extend(with_key.clone());
    let refused = run(&a, &[]).await;
    assert_eq!(refused.code, 3, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("decrypted stream"),
        "{}",
        refused.stderr
    );
    assert!(!datadir.exists() || list_files(&datadir).is_empty());

    // The stored bytes' checksum is their CRC32C (age authenticates the content); a manifest
    // whose CRC32C is not the object's refuses the restore as bad data.
    assert!(manifest.get("storedSha256").is_none(), "{manifest}");
    let crc = manifest["storedCrc32c"].as_str().unwrap();
    assert_eq!(crc.len(), 8, "{manifest}");
    let other_crc = if crc == "00000000" {
        "00000001"
    } else {
        "00000000"
    };
    std::fs::write(&manifest_path, recorded.replace(crc, other_crc)).unwrap();
    let mut a = restore_from(&url, &datadir, false);
    a.extend(with_key.clone());
    let refused = run(&a, &[]).await;
    assert_eq!(refused.code, 3, "{}", refused.stderr);
    assert!(
        refused.stderr.contains(&format!(
            "crc32c {crc} does not match the manifest's crc32c {other_crc}"
        )),
        "{}",
        refused.stderr
    );
    assert!(!datadir.exists() || list_files(&datadir).is_empty());
    std::fs::write(&manifest_path, recorded).unwrap();

    // One byte flipped in the middle: bad data (exit 3), nothing installed.
    let mut bytes = stored.clone();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 1;
    std::fs::write(&object, &bytes).unwrap();
    let mut a = restore_from(&url, &datadir, false);
    a.extend(with_key);
    let refused = run(&a, &[]).await;
    assert_eq!(refused.code, 3, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("failed to decrypt"),
        "{}",
        refused.stderr
    );
    assert!(!datadir.exists() || list_files(&datadir).is_empty());

    // The other direction: a plain backup encrypted by the reference `age` tool, with no
    // manifest of ours beside it (`--force`), restores with the identity.
    let plain = dir.path().join("nightly/plain.xbstream.zst");
    let plain_url = format!("file://{}", plain.display());
    run(&source.backup_to(&plain_url, &["--compress", "zstd"]), &[])
        .await
        .ok();
    let by_tool = dir.path().join("by-age-tool/shop.xbstream.zst.age");
    std::fs::create_dir_all(by_tool.parent().unwrap()).unwrap();
    let encrypted = std::process::Command::new("age")
        .args(["--encrypt", "--recipient", public.as_str(), "--output"])
        .arg(&by_tool)
        .arg(&plain)
        .status()
        .unwrap();
    assert!(encrypted.success());
    let from_tool = args(&["--force", "--identity", identity.to_str().unwrap()]);
    let by_tool_url = format!("file://{}", by_tool.display());
    assert_eq!(
        restore_and_digest(&by_tool_url, &from_tool, &[]).await,
        expected
    );
}

/// Backups sharing a prefix: `list` shows the complete ones newest first (by the manifests'
/// completion time, not the names), `restore --newest` restores that one, and `prune --keep 1`
/// deletes the older backup with its manifest and leaves an object without a manifest alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_newest_backup_under_a_prefix_is_listed_restored_and_kept() {
    let source = Mariadb::fresh(1);
    source.write_sample();
    let store = tempfile::tempdir().unwrap();
    let url = |name: &str| format!("file://{}/nightly-{name}", store.path().display());
    // Named so that string order and time order disagree.
    run(&source.backup_to(&url("b"), &[]), &[]).await.ok();
    source.sql("DELETE FROM shop.orders WHERE id < 10;");
    let newest = source.sample_digest();
    run(&source.backup_to(&url("a"), &[]), &[]).await.ok();
    std::fs::write(
        store.path().join("nightly-z"),
        b"an upload that never finished",
    )
    .unwrap();

    let prefix = url("");
    let listed = run(&args(&["list", &prefix, "--output", "json"]), &[])
        .await
        .ok()
        .json();
    let urls: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["url"].as_str().unwrap())
        .collect();
    assert_eq!(urls, [url("a"), url("b")]);

    let newest_restored = restore_and_digest(&prefix, &args(&["--newest"]), &[]).await;
    assert_eq!(newest_restored, newest);

    let pruned = run(&args(&["prune", &prefix, "--keep", "1"]), &[])
        .await
        .ok()
        .json();
    assert_eq!(
        pruned["deleted"],
        serde_json::json!([url("b"), format!("{}.manifest.json", url("b"))])
    );
    let left = list_files(store.path());
    assert!(
        left.iter().any(|f| f.ends_with("nightly-a"))
            && left.iter().any(|f| f.ends_with("nightly-z"))
            && !left.iter().any(|f| f.contains("nightly-b")),
        "{left:?}"
    );
}

/// Google Cloud Storage and Azure Blob (fake-gcs-server, Azurite): backup, list, restore of the
/// newest, prune, as on S3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcs_and_azure_backups_list_restore_and_prune() {
    let gcs = testbed::FakeGcs::start().await.unwrap();
    let azurite = testbed::Azurite::start().await.unwrap();
    let source = Mariadb::fresh(1);
    source.write_sample();
    let first = source.sample_digest();
    let stores = [
        (format!("gs://{}/mysql/shop-", gcs.bucket), gcs.cli_args()),
        (
            format!("azblob://{}/mysql/shop-", azurite.container),
            azurite.cli_args(),
        ),
    ];
    for (prefix, (flags, env)) in &stores {
        let mut a = source.backup_to(&format!("{prefix}1"), &["--compress", "zstd"]);
        a.extend(flags.clone());
        let manifest = run(&a, env).await.ok().json();
        assert_eq!(manifest["object"], format!("{prefix}1"));
        assert_eq!(
            restore_and_digest(&format!("{prefix}1"), flags, env).await,
            first
        );
    }
    source.sql("DELETE FROM shop.orders WHERE id < 10;");
    let second = source.sample_digest();
    for (prefix, (flags, env)) in &stores {
        let mut a = source.backup_to(&format!("{prefix}2"), &[]);
        a.extend(flags.clone());
        run(&a, env).await.ok();
        let mut list = args(&["list", prefix, "--output", "json"]);
        list.extend(flags.clone());
        let listed = run(&list, env).await.ok().json();
        let urls: Vec<&str> = listed
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["url"].as_str().unwrap())
            .collect();
        assert_eq!(
            urls,
            [format!("{prefix}2"), format!("{prefix}1")],
            "{prefix}"
        );
        let mut newest = args(&["--newest"]);
        newest.extend(flags.clone());
        assert_eq!(
            restore_and_digest(prefix, &newest, env).await,
            second,
            "{prefix}"
        );
        let mut prune = args(&["prune", prefix, "--keep", "1"]);
        prune.extend(flags.clone());
        let pruned = run(&prune, env).await.ok().json();
        assert_eq!(
            pruned["deleted"],
            serde_json::json!([format!("{prefix}1"), format!("{prefix}1.manifest.json")]),
            "{prefix}"
        );
    }
}
