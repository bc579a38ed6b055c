//! Encrypted backups (age): ours open with the reference `age` tool and `age`'s files restore
//! with ours; only the identity reads them, and bad keys are refused with one line each.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use testbed::{Etcd, Garage};

/// A key pair made by the reference tool: (identity file, recipient).
fn age_keygen(dir: &Path, name: &str) -> (PathBuf, String) {
    let identity = dir.join(name);
    let made = Command::new("age-keygen")
        .arg("-o")
        .arg(&identity)
        .output()
        .expect("age-keygen runs (Debian package age)");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let public = Command::new("age-keygen")
        .arg("-y")
        .arg(&identity)
        .output()
        .unwrap();
    assert!(public.status.success());
    (
        identity,
        String::from_utf8(public.stdout).unwrap().trim().to_string(),
    )
}

fn age(args: &[&str]) -> Vec<u8> {
    let out = Command::new("age").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "age {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[tokio::test]
async fn an_encrypted_backup_opens_with_the_age_tool_and_restores_with_its_identity() {
    let etcd = Etcd::start().await.unwrap();
    let expected = write_sample_keys(&etcd).await;
    let dir = tempfile::tempdir().unwrap();
    let (identity, recipient) = age_keygen(dir.path(), "key.txt");
    let (break_glass, break_glass_recipient) = age_keygen(dir.path(), "break-glass.txt");
    let (stranger, _) = age_keygen(dir.path(), "stranger.txt");
    let recipients = dir.path().join("recipients.txt");
    std::fs::write(&recipients, format!("# the restore key\n{recipient}\n")).unwrap();
    let object = dir.path().join("backups/etcd.backup");
    let url = format!("file://{}", object.display());
    let saved = run(
        &[
            "save",
            "--endpoints",
            &etcd.endpoint,
            "--to",
            &url,
            "--encrypt-to-file",
            recipients.to_str().unwrap(),
            "--encrypt-to",
            &break_glass_recipient,
            "--output",
            "json",
        ],
        &[],
    )
    .await
    .ok()
    .json();
    assert_eq!(
        saved["encryption"]["recipients"],
        serde_json::json!([recipient, break_glass_recipient])
    );
    // Nothing of the key space is readable in the stored object or its manifest.
    let stored = std::fs::read(&object).unwrap();
    assert!(stored.starts_with(b"age-encryption.org/v1\n"));
    assert!(!stored.windows(9).any(|w| w == b"value-101"));
    let manifest = std::fs::read_to_string(format!("{}.manifest.json", object.display())).unwrap();
    assert!(!manifest.contains("AGE-SECRET-KEY"), "{manifest}");

    // The reference tool decrypts it with either key, to exactly what fetch writes.
    let out = dir.path().join("fetched.db");
    let fetched = run(
        &[
            "fetch",
            &url,
            "--out",
            out.to_str().unwrap(),
            "--identity",
            identity.to_str().unwrap(),
            "--output",
            "json",
        ],
        &[],
    )
    .await
    .ok()
    .json();
    assert_eq!(fetched["encrypted"], true);
    assert_eq!(fetched["dbSha256"], saved["dbSha256"]);
    let fetched_bytes = std::fs::read(&out).unwrap();
    for key in [&identity, &break_glass] {
        let decrypted = age(&[
            "--decrypt",
            "-i",
            key.to_str().unwrap(),
            object.to_str().unwrap(),
        ]);
        assert!(
            decrypted == fetched_bytes,
            "age --decrypt differs from fetch"
        );
    }

    // verify: all of it with the identity; without it, what it can, and it says so.
    let full = run(
        &[
            "verify",
            &url,
            "--identity",
            identity.to_str().unwrap(),
            "--output",
            "json",
        ],
        &[],
    )
    .await
    .ok()
    .json();
    assert_eq!(full["contentChecked"], true);
    // An encrypted object's manifest records the CRC32C of the stored bytes (age authenticates
    // the content; the plaintext's sha256 is dbSha256), not a sha256 of the ciphertext.
    assert!(saved.get("sha256").is_none(), "{saved}");
    assert_eq!(saved["crc32c"].as_str().map(str::len), Some(8), "{saved}");
    assert_eq!(full["crc32c"], saved["crc32c"]);
    let partial = run(&["verify", &url], &[]).await.ok();
    assert!(
        partial.stdout.contains("was NOT checked")
            && partial.stdout.contains(&format!(
                "stored crc32c {}",
                saved["crc32c"].as_str().unwrap()
            )),
        "{}",
        partial.stdout
    );
    let listed = run(
        &[
            "list",
            &format!("file://{}/", object.parent().unwrap().display()),
        ],
        &[],
    )
    .await
    .ok();
    assert!(listed.stdout.contains(" age "), "{}", listed.stdout);

    // A key that is not a recipient: refused at the header, naming the key, nothing written.
    let refused_dir = tempfile::tempdir().unwrap();
    let refused_out = refused_dir.path().join("x.db");
    let refused = run(
        &[
            "fetch",
            &url,
            "--out",
            refused_out.to_str().unwrap(),
            "--identity",
            stranger.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    // Exit 4: the key is wrong, not the backup (a restore reports it so).
    assert_eq!(refused.code, 4, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("not among its recipients"),
        "{}",
        refused.stderr
    );
    assert_eq!(std::fs::read_dir(refused_dir.path()).unwrap().count(), 0);
    let no_key = run(
        &["fetch", &url, "--out", refused_out.to_str().unwrap()],
        &[],
    )
    .await;
    assert_eq!(no_key.code, 4, "{}", no_key.stderr);
    assert!(
        no_key.stderr.contains("no identity was given"),
        "{}",
        no_key.stderr
    );
    assert_eq!(std::fs::read_dir(refused_dir.path()).unwrap().count(), 0);

    drop(etcd);
    assert_eq!(restore_and_read(&out).await, expected);
}

#[tokio::test]
async fn a_compressed_encrypted_s3_backup_restores() {
    let garage = Garage::start().await.unwrap();
    let (flags, env) = garage.cli_args();
    let etcd = Etcd::start().await.unwrap();
    let expected = write_sample_keys(&etcd).await;
    let dir = tempfile::tempdir().unwrap();
    let (identity, recipient) = age_keygen(dir.path(), "key.txt");
    let url = format!("s3://{}/etcd.backup", garage.bucket);
    let mut save = vec![
        "save",
        "--endpoints",
        &etcd.endpoint,
        "--to",
        &url,
        "--compress",
        "zstd",
        "--encrypt-to",
        &recipient,
        "--output",
        "json",
    ];
    save.extend(strs(&flags));
    let saved = run(&save, &env).await.ok().json();
    assert_eq!(saved["compression"], "zstd");
    // Compressed before it was encrypted: smaller than the database.
    assert!(saved["bytes"].as_u64().unwrap() < saved["dbBytes"].as_u64().unwrap() / 2);
    let out = dir.path().join("fetched.db");
    let mut fetch = vec![
        "fetch",
        &url,
        "--out",
        out.to_str().unwrap(),
        "--identity",
        identity.to_str().unwrap(),
    ];
    fetch.extend(strs(&flags));
    run(&fetch, &env).await.ok();
    drop(etcd);
    assert_eq!(restore_and_read(&out).await, expected);
}

#[tokio::test]
async fn a_snapshot_encrypted_by_the_age_tool_restores_with_ours() {
    let etcd = Etcd::start().await.unwrap();
    let expected = write_sample_keys(&etcd).await;
    let dir = tempfile::tempdir().unwrap();
    let (identity, recipient) = age_keygen(dir.path(), "key.txt");
    let plain = dir.path().join("etcdctl.db");
    etcdctl_snapshot_save(&etcd, &plain);
    let encrypted = dir.path().join("etcdctl.db.age");
    age(&[
        "-r",
        &recipient,
        "-o",
        encrypted.to_str().unwrap(),
        plain.to_str().unwrap(),
    ]);

    let out = dir.path().join("fetched.db");
    let fetched = run(
        &[
            "fetch",
            encrypted.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--identity",
            identity.to_str().unwrap(),
            "--output",
            "json",
        ],
        &[],
    )
    .await
    .ok()
    .json();
    assert_eq!(fetched["encrypted"], true);
    assert_eq!(fetched["manifest"], false);
    assert!(std::fs::read(&out).unwrap() == std::fs::read(&plain).unwrap());
    drop(etcd);
    assert_eq!(restore_and_read(&out).await, expected);
}

#[tokio::test]
async fn bad_keys_get_one_line_and_nothing_is_written() {
    let etcd = Etcd::start().await.unwrap();
    write_sample_keys(&etcd).await;
    let dir = tempfile::tempdir().unwrap();
    let backups = dir.path().join("backups");
    let url = format!("file://{}/etcd.backup", backups.display());
    let empty = dir.path().join("empty.txt");
    std::fs::write(&empty, "# no keys yet\n").unwrap();
    let cases: [(&[&str], &str); 3] = [
        (
            &["--encrypt-to", "age1notakey"],
            "--encrypt-to (number 1), line 1: not an age X25519 recipient",
        ),
        (
            &["--encrypt-to-file", empty.to_str().unwrap()],
            "holds no age recipient",
        ),
        (
            &["--encrypt-to-file", "/nonexistent/recipients.txt"],
            "cannot read /nonexistent/recipients.txt",
        ),
    ];
    for (flags, message) in cases {
        let mut save = vec!["save", "--endpoints", &etcd.endpoint, "--to", &url];
        save.extend(flags);
        let result = run(&save, &[]).await;
        assert_eq!(result.code, 1, "{flags:?}: {}", result.stderr);
        result.assert_one_error_line(message);
        assert!(!backups.exists(), "{flags:?} wrote to storage");
    }

    // A public key where the identity belongs: named, not quoted back.
    let (_, recipient) = age_keygen(dir.path(), "key.txt");
    run(
        &[
            "save",
            "--endpoints",
            &etcd.endpoint,
            "--to",
            &url,
            "--encrypt-to",
            &recipient,
        ],
        &[],
    )
    .await
    .ok();
    let wrong = dir.path().join("wrong-identity.txt");
    std::fs::write(&wrong, format!("{recipient}\n")).unwrap();
    let out = dir.path().join("out/fetched.db");
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    // Each an identity problem: exit 4, one line, nothing written.
    for (identity, message) in [
        (
            wrong.to_str().unwrap(),
            "line 1: not an age X25519 identity",
        ),
        (empty.to_str().unwrap(), "holds no age identity"),
        (
            "/nonexistent/identity.txt",
            "cannot read /nonexistent/identity.txt",
        ),
    ] {
        let result = run(
            &[
                "fetch",
                &url,
                "--out",
                out.to_str().unwrap(),
                "--identity",
                identity,
            ],
            &[],
        )
        .await;
        assert_eq!(result.code, 4, "{identity}: {}", result.stderr);
        result.assert_one_error_line(message);
        assert_eq!(std::fs::read_dir(out.parent().unwrap()).unwrap().count(), 0);
    }
}

/// S3 server-side encryption with a customer key (SSE-C, which Garage implements): the
/// backup is written, verified and fetched with the key file; without it S3 refuses to serve
/// the object.
#[tokio::test]
async fn an_sse_c_backup_reads_back_only_with_its_key() {
    let garage = Garage::start().await.unwrap();
    let (flags, env) = garage.cli_args();
    let etcd = Etcd::start().await.unwrap();
    let expected = write_sample_keys(&etcd).await;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("sse-c.key");
    std::fs::write(&key, [7u8; 32]).unwrap();
    let key = key.to_str().unwrap();
    let url = format!("s3://{}/etcd.backup", garage.bucket);
    let mut save = vec![
        "save",
        "--endpoints",
        &etcd.endpoint,
        "--to",
        &url,
        "--s3-sse-c-key-file",
        key,
    ];
    save.extend(strs(&flags));
    run(&save, &env).await.ok();

    let mut verify = vec!["verify", &url];
    verify.extend(strs(&flags));
    let refused = run(&verify, &env).await;
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    verify.extend(["--s3-sse-c-key-file", key]);
    run(&verify, &env).await.ok();
    let out = dir.path().join("fetched.db");
    let mut fetch = vec![
        "fetch",
        &url,
        "--out",
        out.to_str().unwrap(),
        "--s3-sse-c-key-file",
        key,
    ];
    fetch.extend(strs(&flags));
    run(&fetch, &env).await.ok();
    drop(etcd);
    assert_eq!(restore_and_read(&out).await, expected);
}
