//! `etcd-backup drill`: a backup restored into a throw-away etcd on loopback serves what its
//! manifest recorded (revision, key count, HashKV), plain, zstd and encrypted; a damaged backup
//! and one whose content is another cluster's fail with exit code 3.

mod common;

use std::path::Path;

use common::*;
use serde_json::Value;
use testbed::Etcd;

/// The etcd programs of the testbed's version, for `--etcd-bin-dir`.
fn bin_dir() -> String {
    testbed::etcd_tool("etcd")
        .parent()
        .unwrap()
        .display()
        .to_string()
}

async fn save(etcd: &Etcd, url: &str, extra: &[&str]) -> Value {
    let mut args = vec![
        "save",
        "--endpoints",
        &etcd.endpoint,
        "--to",
        url,
        "--output",
        "json",
    ];
    args.extend(extra);
    run(&args, &[]).await.ok().json()
}

async fn drill(url: &str, scratch: &Path, extra: &[&str]) -> testbed::cli::Run {
    let bin = bin_dir();
    let scratch = scratch.to_str().unwrap();
    let mut args = vec![
        "drill",
        url,
        "--etcd-bin-dir",
        &bin,
        "--scratch-dir",
        scratch,
        "--output",
        "json",
    ];
    args.extend(extra);
    run(&args, &[]).await
}

#[tokio::test]
async fn good_backups_pass_plain_compressed_and_encrypted() {
    let etcd = Etcd::start().await.unwrap();
    write_sample_keys(&etcd).await;
    // Deleted keys too, so the HashKV covers more than the live keys.
    let mut client = etcd_client::Client::connect([etcd.endpoint.as_str()], None)
        .await
        .unwrap();
    for i in 0..20 {
        client
            .delete(format!("/sample/{i:03}"), None)
            .await
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let (secret, public) = backup_storage::encryption::Identity::generate();
    let identity = dir.path().join("key.txt");
    std::fs::write(&identity, secret).unwrap();
    let identity = identity.to_str().unwrap();
    for (name, save_flags, drill_flags) in [
        ("plain", vec![], vec![]),
        ("zstd", vec!["--compress", "zstd"], vec![]),
        (
            "encrypted",
            vec!["--compress", "zstd", "--encrypt-to", public.as_str()],
            vec!["--identity", identity],
        ),
    ] {
        let url = format!("file://{}/{name}/etcd.backup", dir.path().display());
        let saved = save(&etcd, &url, &save_flags).await;
        assert_eq!(saved["contents"]["keyCount"], 180, "{saved}");
        assert!(saved["contents"]["hashKv"].is_u64(), "{saved}");
        let drilled = drill(&url, scratch.path(), &drill_flags).await.ok().json();
        assert_eq!(drilled["passed"], true, "{name}: {drilled}");
        assert_eq!(drilled["restoredKeyCount"], 180, "{name}");
        assert_eq!(
            drilled["restoredHashKv"], saved["contents"]["hashKv"],
            "{name}"
        );
        // Nothing is left behind in the scratch directory.
        assert_eq!(
            std::fs::read_dir(scratch.path()).unwrap().count(),
            0,
            "{name}"
        );
    }

    // The encrypted backup without its identity, or with another key: exit 4 (the key is
    // wrong, not the backup), one line, nothing left in the scratch directory.
    let (stranger, _) = backup_storage::encryption::Identity::generate();
    let stranger_file = dir.path().join("stranger.txt");
    std::fs::write(&stranger_file, stranger).unwrap();
    let url = format!("file://{}/encrypted/etcd.backup", dir.path().display());
    for (flags, message) in [
        (vec![], "no identity was given"),
        (
            vec!["--identity", stranger_file.to_str().unwrap()],
            "not among its recipients",
        ),
    ] {
        let refused = drill(&url, scratch.path(), &flags).await;
        assert_eq!(refused.code, 4, "{flags:?}: {}", refused.stderr);
        refused.assert_one_error_line(message);
        assert_eq!(std::fs::read_dir(scratch.path()).unwrap().count(), 0);
    }
}

/// A cluster whose history was compacted, below the backup's revision or right at it (a quiet
/// cluster whose periodic compaction caught up), backs up and drills as a good backup: what the
/// drill compares does not depend on how far the history was compacted. (Before the recorded
/// contents held a digest of the key space itself, the compaction at the backup's revision made
/// the drill call this good backup `ContentMismatch`.)
#[tokio::test]
async fn backups_of_compacted_clusters_pass_their_drill() {
    let dir = tempfile::tempdir().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    for (name, compact_below) in [("below", 30), ("at-the-backup-revision", 0)] {
        let etcd = Etcd::start().await.unwrap();
        write_sample_keys(&etcd).await;
        let mut client = etcd_client::Client::connect([etcd.endpoint.as_str()], None)
            .await
            .unwrap();
        for i in 0..40 {
            client
                .delete(format!("/sample/{i:03}"), None)
                .await
                .unwrap();
        }
        let revision = client
            .get("/", None)
            .await
            .unwrap()
            .header()
            .unwrap()
            .revision();
        client
            .compact(revision - compact_below, None)
            .await
            .unwrap();
        let url = format!("file://{}/{name}/etcd.backup", dir.path().display());
        let saved = save(&etcd, &url, &[]).await;
        assert_eq!(saved["contents"]["revision"], revision, "{name}: {saved}");
        assert_eq!(saved["contents"]["keyCount"], 160, "{name}: {saved}");
        let drilled = drill(&url, scratch.path(), &[]).await.ok().json();
        assert_eq!(drilled["passed"], true, "{name}: {drilled}");
        assert_eq!(drilled["restoredKeyCount"], 160, "{name}");
    }

    // Periodic compaction (every second here) catching up with a quiet cluster: first seen
    // compacted at its current revision, then backed up and drilled.
    let etcd = Etcd::start_with(&[
        "--auto-compaction-mode=periodic",
        "--auto-compaction-retention=1s",
    ])
    .await
    .unwrap();
    write_sample_keys(&etcd).await;
    let mut client = etcd_client::Client::connect([etcd.endpoint.as_str()], None)
        .await
        .unwrap();
    let revision = client
        .get("/", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    // Reading the revision before the current one fails once the compaction reached it.
    let previous = etcd_client::GetOptions::new().with_revision(revision - 1);
    while client.get("/", Some(previous.clone())).await.is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "no periodic compaction"
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    let url = format!("file://{}/periodic/etcd.backup", dir.path().display());
    let saved = save(&etcd, &url, &[]).await;
    assert_eq!(saved["contents"]["revision"], revision, "{saved}");
    let drilled = drill(&url, scratch.path(), &[]).await.ok().json();
    assert_eq!(drilled["passed"], true, "periodic: {drilled}");
}

/// Puts the backup in `from` (object and manifest) in `to`'s place, with `to`'s recorded
/// contents in its manifest: every check but a restore passes.
fn plant(from: &Path, to: &Path, contents: &Value) {
    let manifest = "etcd.backup.manifest.json";
    let mut foreign: Value =
        serde_json::from_slice(&std::fs::read(from.join(manifest)).unwrap()).unwrap();
    foreign["contents"] = contents.clone();
    std::fs::copy(from.join("etcd.backup"), to.join("etcd.backup")).unwrap();
    std::fs::write(to.join(manifest), serde_json::to_vec(&foreign).unwrap()).unwrap();
}

#[tokio::test]
async fn a_damaged_backup_and_another_clusters_content_fail_the_drill() {
    let dir = tempfile::tempdir().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let ours = Etcd::start().await.unwrap();
    write_sample_keys(&ours).await;
    let url = format!("file://{}/etcd.backup", dir.path().display());
    let object = dir.path().join("etcd.backup");
    let manifest_path = dir.path().join("etcd.backup.manifest.json");
    save(&ours, &url, &[]).await;
    let original = std::fs::read(&object).unwrap();

    // A flipped byte: the fetch refuses it (exit 3).
    let mut damaged = original.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 1;
    std::fs::write(&object, &damaged).unwrap();
    let result = drill(&url, scratch.path(), &[]).await;
    assert_eq!(result.code, 3, "{}", result.stderr);
    std::fs::write(&object, &original).unwrap();

    // Another cluster's valid snapshot, under a manifest whose sizes and hashes are its own
    // (the trailer and the stored checks pass) but whose recorded contents are ours: only a
    // restore shows the key space is not the one backed up.
    let theirs = Etcd::start().await.unwrap();
    theirs.put("/other", "cluster").await.unwrap();
    let other_dir = tempfile::tempdir().unwrap();
    let other_url = format!("file://{}/etcd.backup", other_dir.path().display());
    save(&theirs, &other_url, &[]).await;
    let ours_manifest: Value =
        serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
    plant(other_dir.path(), dir.path(), &ours_manifest["contents"]);
    let result = drill(&url, scratch.path(), &[]).await;
    assert_eq!(result.code, 3, "{}", result.stderr);
    let report = result.json();
    assert_eq!(report["passed"], false);
    let differences = report["differences"].to_string();
    assert!(differences.contains("below the recorded"), "{differences}");

    // The same with the other cluster written up to our revision: it reaches the revision,
    // and its key count and key space (the digest) there are not ours.
    let mut client = etcd_client::Client::connect([theirs.endpoint.as_str()], None)
        .await
        .unwrap();
    let recorded = ours_manifest["contents"]["revision"].as_i64().unwrap();
    while client
        .put("/other", "more", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision()
        < recorded + 5
    {}
    save(&theirs, &other_url, &[]).await;
    plant(other_dir.path(), dir.path(), &ours_manifest["contents"]);
    let result = drill(&url, scratch.path(), &[]).await;
    assert_eq!(result.code, 3, "{}", result.stderr);
    let differences = result.json()["differences"].to_string();
    assert!(differences.contains("keys at revision"), "{differences}");
    assert!(
        differences.contains("key space at revision"),
        "{differences}"
    );
    assert_eq!(std::fs::read_dir(scratch.path()).unwrap().count(), 0);
}

#[tokio::test]
async fn a_drill_that_cannot_run_says_why_and_exits_1() {
    let etcd = Etcd::start().await.unwrap();
    write_sample_keys(&etcd).await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}/etcd.backup", dir.path().display());
    save(&etcd, &url, &[]).await;
    let empty = tempfile::tempdir().unwrap();
    let result = run(
        &[
            "drill",
            &url,
            "--etcd-bin-dir",
            empty.path().to_str().unwrap(),
        ],
        &[],
    )
    .await;
    assert_eq!(result.code, 1, "{}", result.stderr);
    assert!(result.stderr.contains("no etcd in"), "{}", result.stderr);
    // A backup without recorded contents (etcdctl's, or from an older version).
    let raw = dir.path().join("raw.db");
    etcdctl_snapshot_save(&etcd, &raw);
    let result = run(
        &["drill", raw.to_str().unwrap(), "--etcd-bin-dir", &bin_dir()],
        &[],
    )
    .await;
    assert_eq!(result.code, 1, "{}", result.stderr);
    assert!(
        result.stderr.contains("nothing to compare"),
        "{}",
        result.stderr
    );
}

/// `drill-check`, the drill pods' last step, against a member someone else started: the
/// recorded contents match (exit 0, verdict written to the report file), a record that is
/// not this key space's fails (exit 3, the verdict names it), and a member that never serves
/// is a drill that could not run (exit 1).
#[tokio::test]
async fn drill_check_compares_a_running_member_with_the_record() {
    let etcd = Etcd::start().await.unwrap();
    write_sample_keys(&etcd).await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}/etcd.backup", dir.path().display());
    let saved = save(&etcd, &url, &[]).await;
    let manifest: Value = serde_json::from_slice(
        &std::fs::read(dir.path().join("etcd.backup.manifest.json")).unwrap(),
    )
    .unwrap();
    let contents = manifest["contents"].clone();
    assert!(contents["hashKv"].is_u64(), "{saved}");
    let report = dir.path().join("verdict.json");
    let check = |expect: Value, member: String| {
        let report = report.to_str().unwrap().to_string();
        async move {
            run(
                &[
                    "drill-check",
                    "--member",
                    &member,
                    "--expect",
                    &expect.to_string(),
                    "--object",
                    "s3://b/etcd.backup",
                    "--report-file",
                    &report,
                    "--start-timeout",
                    "3",
                ],
                &[],
            )
            .await
        }
    };
    let passed = check(contents.clone(), etcd.endpoint.clone()).await;
    assert_eq!(passed.code, 0, "{}", passed.stderr);
    let verdict: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(verdict["passed"], true, "{verdict}");
    assert_eq!(verdict["object"], "s3://b/etcd.backup");
    assert_eq!(verdict["restoredKeyCount"], contents["keyCount"]);

    let mut other = contents.clone();
    other["keyCount"] = (contents["keyCount"].as_i64().unwrap() + 1).into();
    let failed = check(other, etcd.endpoint.clone()).await;
    assert_eq!(failed.code, 3, "{}", failed.stderr);
    let verdict: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(verdict["passed"], false);
    assert!(
        verdict["differences"]
            .to_string()
            .contains("keys at revision"),
        "{verdict}"
    );

    let nobody = format!("http://127.0.0.1:{}", free_port());
    let could_not = check(contents, nobody).await;
    assert_eq!(could_not.code, 1, "{}", could_not.stderr);
    assert!(
        could_not.stderr.contains("did not serve"),
        "{}",
        could_not.stderr
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
