//! `etcd-backup archive` and `point-in-time` against real etcd (every line the members run)
//! and real S3 (Garage; the compressed, encrypted archive also in GCS and Azure Blob, on
//! fake-gcs-server and Azurite): puts, updates, deletes, leases, multi-key transactions and range
//! deletes are archived while they happen; a snapshot file written for a revision (or a time)
//! and restored with stock `etcdutl` serves exactly the key space the cluster served at that
//! revision (`etcdctl get --rev`, the keys' revisions, versions and leases, and the leases'
//! TTLs). The archiver resumes after SIGKILL mid-segment and after a lost manifest with no gap
//! and no duplicate, stores its open segment on SIGTERM, and says when the cluster compacted
//! past it, then goes on after a snapshot.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::*;
use etcd_client::{Client, PutOptions, Txn, TxnOp};
use serde_json::Value;
use testbed::{Azurite, Etcd, FakeGcs, Garage};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout};

/// A running `etcd-backup archive`, its JSON lines read as they come.
struct Archiver {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
    seen: Vec<Value>,
}

impl Archiver {
    async fn start(
        endpoint: &str,
        base: &str,
        extra: &[&str],
        env: &[(String, String)],
    ) -> Archiver {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_etcd-backup"));
        let mut args = vec![
            "archive",
            "--endpoints",
            endpoint,
            "--to",
            base,
            "--output",
            "json",
        ];
        args.extend(extra);
        testbed::cli::without_ambient_aws(command.args(&args))
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Archiver {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Starts an archive with segments of `seconds` and waits until it says where it starts.
    async fn started(endpoint: &str, base: &str, seconds: &str) -> (Archiver, Value) {
        let mut archiver =
            Archiver::start(endpoint, base, &["--segment-seconds", seconds], &[]).await;
        let started = archiver
            .wait_for("the start", |l| l["event"] == "started")
            .await;
        (archiver, started)
    }

    /// Waits (up to a minute) for a line that `wanted` accepts, and returns it.
    async fn wait_for(&mut self, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
        let read = async {
            loop {
                let line = self.lines.next_line().await.unwrap();
                let Some(line) = line else {
                    panic!("the archiver ended before {what}; it said: {:?}", self.seen)
                };
                let value: Value = serde_json::from_str(&line).unwrap();
                self.seen.push(value.clone());
                if wanted(&value) {
                    return value;
                }
            }
        };
        match tokio::time::timeout(Duration::from_secs(60), read).await {
            Ok(value) => value,
            Err(_) => panic!(
                "no {what} within a minute; the archiver said: {:?}",
                self.seen
            ),
        }
    }

    /// Waits until a stored segment reaches `revision`.
    async fn archived_through(&mut self, revision: i64) {
        self.wait_for(&format!("a segment through revision {revision}"), |l| {
            l["event"] == "segment" && l["lastRevision"].as_i64().unwrap() >= revision
        })
        .await;
    }

    async fn signal(&mut self, signal: &str) -> i32 {
        let pid = self.child.id().unwrap().to_string();
        std::process::Command::new("kill")
            .args(["-s", signal, &pid])
            .status()
            .unwrap();
        // The rest of its lines, then its exit.
        while let Ok(Some(line)) = self.lines.next_line().await {
            self.seen.push(serde_json::from_str(&line).unwrap());
        }
        let status = self.child.wait().await.unwrap();
        status.code().unwrap_or(-1)
    }
}

/// What `etcdctl get --rev` says about every key at `revision` (or now): key, value,
/// revisions, version and lease.
fn key_space(etcdctl: &Path, endpoint: &str, revision: Option<i64>) -> Vec<Value> {
    let mut command = std::process::Command::new(etcdctl);
    command.args([
        "--endpoints",
        endpoint,
        "get",
        "",
        "--from-key",
        "-w",
        "json",
    ]);
    if let Some(revision) = revision {
        command.args(["--rev", &revision.to_string()]);
    }
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
    answer["kvs"].as_array().cloned().unwrap_or_default()
}

fn granted_ttl(etcdctl: &Path, endpoint: &str, lease: i64) -> i64 {
    let output = std::process::Command::new(etcdctl)
        .args([
            "--endpoints",
            endpoint,
            "lease",
            "timetolive",
            &format!("{lease:x}"),
            "-w",
            "json",
        ])
        .output()
        .unwrap();
    let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
    answer["granted-ttl"].as_i64().unwrap_or(-1)
}

/// A restored etcd, stopped when dropped.
struct Restored(std::process::Child);

impl Drop for Restored {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Restores `snapshot` with stock etcdutl of `bin`, starts that etcd on it, and returns it.
async fn restore_with_stock_tools(bin: &Path, snapshot: &Path, dir: &Path) -> (Restored, String) {
    let peer = format!("http://127.0.0.1:{}", testbed::free_port());
    let client = format!("http://127.0.0.1:{}", testbed::free_port());
    let data = dir.join("restored");
    let restored = std::process::Command::new(bin.join("etcdutl"))
        .args(["snapshot", "restore"])
        .arg(snapshot)
        .arg("--data-dir")
        .arg(&data)
        .args([
            "--name",
            "r",
            "--initial-cluster",
            &format!("r={peer}"),
            "--initial-advertise-peer-urls",
            &peer,
        ])
        .output()
        .unwrap();
    assert!(
        restored.status.success(),
        "{}",
        String::from_utf8_lossy(&restored.stderr)
    );
    let child = Restored(
        std::process::Command::new(bin.join("etcd"))
            .args([
                "--name",
                "r",
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("r={peer}")])
            .arg("--data-dir")
            .arg(&data)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    for _ in 0..100 {
        if Client::connect([client.as_str()], None).await.is_ok()
            && std::process::Command::new(bin.join("etcdctl"))
                .args(["--endpoints", &client, "endpoint", "health"])
                .output()
                .unwrap()
                .status
                .success()
        {
            return (child, client);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the restored etcd did not serve");
}

/// Writes every kind of change and returns the revisions after each step, with what the
/// step did. With `archiver`, the short lease is revoked only once the archive has stored its
/// keys: the archive asks each lease's granted TTL when it meets the lease's first key, and a
/// lease revoked before that is restored with the default TTL (`UNKNOWN_LEASE_TTL`), which
/// `check_points` would rightly call a different lease.
async fn write_history(
    client: &mut Client,
    archiver: Option<&mut Archiver>,
) -> Vec<(i64, &'static str)> {
    let mut points = Vec::new();
    let mut revision = 0;
    for i in 0..20 {
        revision = client
            .put(format!("/plain/{i:02}"), format!("v{i}"), None)
            .await
            .unwrap()
            .header()
            .unwrap()
            .revision();
    }
    points.push((revision, "20 puts"));
    let long = client.lease_grant(600, None).await.unwrap().id();
    let short = client.lease_grant(30, None).await.unwrap().id();
    for i in 0..3 {
        client
            .put(
                format!("/leased/long/{i}"),
                "l",
                Some(PutOptions::new().with_lease(long)),
            )
            .await
            .unwrap();
        revision = client
            .put(
                format!("/leased/short/{i}"),
                "s",
                Some(PutOptions::new().with_lease(short)),
            )
            .await
            .unwrap()
            .header()
            .unwrap()
            .revision();
    }
    points.push((revision, "keys on two leases"));
    if let Some(archiver) = archiver {
        archiver.archived_through(revision).await;
    }
    let txn = Txn::new().and_then([
        TxnOp::put("/txn/a", "1", None),
        TxnOp::put("/plain/00", "changed in a txn", None),
        TxnOp::delete("/plain/01", None),
    ]);
    revision = client.txn(txn).await.unwrap().header().unwrap().revision();
    points.push((revision, "a multi-key transaction"));
    for i in 0..10 {
        client
            .put(format!("/range/{i}"), vec![b'x'; 2000], None)
            .await
            .unwrap();
    }
    revision = client
        .delete(
            "/range/",
            Some(etcd_client::DeleteOptions::new().with_prefix()),
        )
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    points.push((revision, "a range delete"));
    revision = client
        .lease_revoke(short)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    points.push((revision, "a lease revoked"));
    for i in 0..5 {
        revision = client
            .put(format!("/plain/{i:02}"), format!("second {i}"), None)
            .await
            .unwrap()
            .header()
            .unwrap()
            .revision();
    }
    points.push((revision, "updates"));
    points
}

/// For each point: `point-in-time` writes a file, stock tools restore it, and it serves what
/// the cluster served at that revision.
async fn check_points(
    etcd: &Etcd,
    bin: &Path,
    base: &str,
    points: &[(i64, &'static str)],
    extra: &[&str],
    env: &[(String, String)],
) {
    let etcdctl = bin.join("etcdctl");
    let bin_dir = bin.display().to_string();
    for (revision, what) in points {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("at.db");
        let out_str = out.display().to_string();
        let revision_str = revision.to_string();
        let mut args = vec![
            "point-in-time",
            base,
            "--revision",
            &revision_str,
            "--out",
            &out_str,
            "--etcd-bin-dir",
            &bin_dir,
            "--output",
            "json",
        ];
        args.extend(extra);
        let report = run(&args, env).await.ok().json();
        assert_eq!(report["revision"], *revision, "{what}: {report}");
        let expected = key_space(&etcdctl, &etcd.endpoint, Some(*revision));
        let (restored, endpoint) = restore_with_stock_tools(bin, &out, dir.path()).await;
        let served = key_space(&etcdctl, &endpoint, None);
        assert_eq!(served, expected, "after {what} (revision {revision})");
        assert_eq!(report["contents"]["keyCount"], expected.len(), "{what}");
        // Leased keys keep their lease with the TTL `write_history` granted it (the cluster
        // may have revoked it since).
        for kv in served
            .iter()
            .filter(|kv| kv["lease"].as_i64().unwrap_or(0) != 0)
        {
            let lease = kv["lease"].as_i64().unwrap();
            let key =
                String::from_utf8(testbed::base64_decode(kv["key"].as_str().unwrap()).unwrap())
                    .unwrap();
            let granted = if key.starts_with("/leased/long/") {
                600
            } else {
                30
            };
            assert_eq!(
                granted_ttl(&etcdctl, &endpoint, lease),
                granted,
                "{what}: lease of {key}"
            );
        }
        drop(restored);
    }
}

/// The restore pods' path to `revision` (`prepare-point`, the scratch member restored from its
/// snapshot with stock etcdutl and started apart, `replay-point` into it) writes a file that
/// serves the same key space as `point-in-time`'s for that revision, as the cluster had it.
async fn check_the_split_path(etcd: &Etcd, bin: &Path, version: &str, base: &str, revision: i64) {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().display().to_string();
    let revision_str = revision.to_string();
    let prepared = run(
        &[
            "prepare-point",
            base,
            "--revision",
            &revision_str,
            "--dir",
            &work,
            "--etcd-version",
            version,
            "--output",
            "json",
        ],
        &[],
    )
    .await
    .ok()
    .json();
    assert_eq!(prepared["revision"], revision, "{prepared}");
    // An etcd of an older minor than the snapshot's is refused before anything is fetched.
    let refused = run(
        &[
            "prepare-point",
            base,
            "--revision",
            &revision_str,
            "--dir",
            &work,
            "--etcd-version",
            "3.4.35",
        ],
        &[],
    )
    .await;
    assert!(
        refused.stderr.contains("newer minor version"),
        "{}",
        refused.stderr
    );
    let (scratch, endpoint) =
        restore_with_stock_tools(bin, &dir.path().join("snapshot.db"), dir.path()).await;
    let out = dir.path().join("at.db");
    let out_str = out.display().to_string();
    let report = run(
        &[
            "replay-point",
            base,
            "--dir",
            &work,
            "--endpoint",
            &endpoint,
            "--out",
            &out_str,
            "--output",
            "json",
        ],
        &[],
    )
    .await
    .ok()
    .json();
    drop(scratch);
    assert_eq!(report["revision"], revision, "{report}");
    let etcdctl = bin.join("etcdctl");
    let expected = key_space(&etcdctl, &etcd.endpoint, Some(revision));
    let restore_dir = tempfile::tempdir().unwrap();
    let (restored, at_point) = restore_with_stock_tools(bin, &out, restore_dir.path()).await;
    assert_eq!(key_space(&etcdctl, &at_point, None), expected);
    drop(restored);
    assert_eq!(report["contents"]["keyCount"], expected.len());
}

#[tokio::test]
async fn every_recorded_revision_is_restored_exactly_on_each_etcd_line() {
    let releases = testbed::etcd_releases();
    assert_eq!(releases.len(), 3, "{releases:?}");
    for (version, bin) in releases {
        eprintln!("etcd {version}");
        let etcd = Etcd::start_release(&bin, &[]).await.unwrap();
        let mut client = Client::connect([etcd.endpoint.as_str()], None)
            .await
            .unwrap();
        etcd.put("/before/archive", "x").await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let base = format!("file://{}/etcd.backup", dir.path().display());
        let (mut archiver, _) = Archiver::started(&etcd.endpoint, &base, "1").await;
        let mut points = write_history(&mut client, Some(&mut archiver)).await;
        let last = points.last().unwrap().0;
        archiver.archived_through(last).await;
        assert_eq!(archiver.signal("TERM").await, 0);
        // The snapshot it started from is a point too.
        let snapshot = archiver
            .seen
            .iter()
            .find(|l| l["event"] == "snapshot")
            .unwrap()["revision"]
            .as_i64()
            .unwrap();
        points.insert(0, (snapshot, "the snapshot"));
        let segments = archiver
            .seen
            .iter()
            .filter(|l| l["event"] == "segment")
            .count();
        assert!(segments >= 1, "{:?}", archiver.seen);
        check_points(&etcd, &bin, &base, &points, &[], &[]).await;
        let middle = points[points.len() / 2].0;
        check_the_split_path(&etcd, &bin, &version, &base, middle).await;
    }
}

#[tokio::test]
async fn a_time_is_the_last_revision_the_archive_saw_at_or_before_it() {
    let Fixture {
        bin,
        etcd,
        base,
        mut client,
        ..
    } = Fixture::start().await;
    let (mut archiver, _) = Archiver::started(&etcd.endpoint, &base, "1").await;
    let before = client
        .put("/t", "before", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let time = chrono::Utc::now();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after = client
        .put("/t", "after", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    archiver.archived_through(after).await;
    let out_dir = tempfile::tempdir().unwrap();
    let out = out_dir.path().join("at.db");
    let time = time.to_rfc3339();
    let bin_dir = bin.display().to_string();
    let report = run(
        &[
            "point-in-time",
            &base,
            "--time",
            &time,
            "--out",
            out.to_str().unwrap(),
            "--etcd-bin-dir",
            &bin_dir,
            "--output",
            "json",
        ],
        &[],
    )
    .await
    .ok()
    .json();
    assert_eq!(report["revision"], before, "{report}");
    // A time past the newest archived change is refused: nothing proves what happened since.
    let later = (chrono::Utc::now() + chrono::Duration::minutes(10)).to_rfc3339();
    let refused = run(
        &[
            "point-in-time",
            &base,
            "--time",
            &later,
            "--out",
            out.to_str().unwrap(),
            "--etcd-bin-dir",
            &bin_dir,
        ],
        &[],
    )
    .await;
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("not archived yet"),
        "{}",
        refused.stderr
    );
    archiver.signal("TERM").await;
}

#[tokio::test]
async fn compressed_and_encrypted_archive_in_s3() {
    let garage = Garage::start().await.unwrap();
    let base = format!("s3://{}/pitr/etcd.backup", garage.bucket);
    compressed_and_encrypted_archive(&base, garage.cli_args()).await;
}

#[tokio::test]
async fn compressed_and_encrypted_archive_in_gcs() {
    let gcs = FakeGcs::start().await.unwrap();
    let base = format!("gs://{}/pitr/etcd.backup", gcs.bucket);
    compressed_and_encrypted_archive(&base, gcs.cli_args()).await;
}

#[tokio::test]
async fn compressed_and_encrypted_archive_in_azure_blob() {
    let azurite = Azurite::start().await.unwrap();
    let base = format!("azblob://{}/pitr/etcd.backup", azurite.container);
    compressed_and_encrypted_archive(&base, azurite.cli_args()).await;
}

/// An archive to the object store at `base` (its flags and environment), compressed and
/// encrypted; every recorded point restored from it; without the identity, refused.
async fn compressed_and_encrypted_archive(
    base: &str,
    (flags, env): (Vec<String>, Vec<(String, String)>),
) {
    let (_, bin) = testbed::etcd_releases().pop().unwrap();
    let etcd = Etcd::start_release(&bin, &[]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (secret, public) = backup_storage::encryption::Identity::generate();
    let identity = dir.path().join("key.txt");
    std::fs::write(&identity, secret).unwrap();
    let mut archive_flags = vec![
        "--segment-seconds",
        "1",
        "--compress",
        "zstd",
        "--encrypt-to",
        public.as_str(),
    ];
    archive_flags.extend(strs(&flags));
    let mut archiver = Archiver::start(&etcd.endpoint, base, &archive_flags, &env).await;
    archiver
        .wait_for("the start", |l| l["event"] == "started")
        .await;
    let mut client = Client::connect([etcd.endpoint.as_str()], None)
        .await
        .unwrap();
    let points = write_history(&mut client, Some(&mut archiver)).await;
    archiver.archived_through(points.last().unwrap().0).await;
    assert_eq!(archiver.signal("TERM").await, 0);
    let mut extra = vec!["--identity", identity.to_str().unwrap()];
    extra.extend(strs(&flags));
    check_points(&etcd, &bin, base, &points[2..4], &extra, &env).await;
    // Without the identity, nothing is written and the exit code says why.
    let out = dir.path().join("no-key.db");
    let mut args = vec![
        "point-in-time",
        base,
        "--revision",
        "3",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend(strs(&flags));
    let refused = run(&args, &env).await;
    assert_eq!(refused.code, 4, "{}", refused.stderr);
    assert!(!out.exists());
}

/// The newest etcd line on loopback, a client and a local archive's base.
struct Fixture {
    bin: PathBuf,
    etcd: Etcd,
    dir: tempfile::TempDir,
    base: String,
    client: Client,
}

impl Fixture {
    async fn start() -> Fixture {
        let (_, bin) = testbed::etcd_releases().pop().unwrap();
        let etcd = Etcd::start_release(&bin, &[]).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let base = format!("file://{}/etcd.backup", dir.path().display());
        let client = Client::connect([etcd.endpoint.as_str()], None)
            .await
            .unwrap();
        Fixture {
            bin,
            etcd,
            dir,
            base,
            client,
        }
    }
}

/// Segment manifests in a local archive, in revision order.
fn local_segments(dir: &Path) -> Vec<(PathBuf, Value)> {
    let mut found = Vec::new();
    let archive = dir.join("etcd.backup.changes");
    for cluster in std::fs::read_dir(&archive).unwrap() {
        for entry in std::fs::read_dir(cluster.unwrap().path()).unwrap() {
            let path = entry.unwrap().path();
            if path.to_string_lossy().ends_with(".manifest.json") {
                found.push((
                    path.clone(),
                    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap(),
                ));
            }
        }
    }
    found.sort_by_key(|(_, m): &(PathBuf, Value)| m["firstRevision"].as_i64().unwrap());
    found
}

fn assert_contiguous(segments: &[(PathBuf, Value)]) {
    for pair in segments.windows(2) {
        assert_eq!(
            pair[1].1["firstRevision"].as_i64().unwrap(),
            pair[0].1["lastRevision"].as_i64().unwrap() + 1,
            "segments follow each other with no gap and no duplicate: {:?}",
            segments
                .iter()
                .map(|(_, m)| (m["firstRevision"].clone(), m["lastRevision"].clone()))
                .collect::<Vec<_>>()
        );
    }
}

#[tokio::test]
async fn the_archiver_resumes_after_sigkill_mid_segment_and_a_lost_manifest_with_no_gap() {
    let Fixture {
        bin,
        etcd,
        dir,
        base,
        mut client,
    } = Fixture::start().await;

    // A first segment stored, then SIGTERM stores the open one at once (a segment of an hour).
    let (mut archiver, _) = Archiver::started(&etcd.endpoint, &base, "3600").await;
    let first = write_history(&mut client, None).await.last().unwrap().0;
    // SIGTERM comes once the archiver has the last change: give the watch time to deliver it
    // (if it has not, the check below fails; it cannot pass wrongly).
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(archiver.signal("TERM").await, 0, "{:?}", archiver.seen);
    let stored = archiver
        .seen
        .iter()
        .rfind(|l| l["event"] == "segment")
        .cloned()
        .unwrap();
    assert_eq!(
        stored["lastRevision"], first,
        "SIGTERM stored the open segment: {:?}",
        archiver.seen
    );

    // SIGKILL mid-segment: the open segment is lost, not half-visible.
    let (mut archiver, started) = Archiver::started(&etcd.endpoint, &base, "3600").await;
    assert_eq!(started["afterRevision"], first, "{started}");
    let second = write_history(&mut client, None).await.last().unwrap().0;
    tokio::time::sleep(Duration::from_secs(1)).await;
    archiver.signal("KILL").await;
    let segments = local_segments(dir.path());
    assert_eq!(
        segments.last().unwrap().1["lastRevision"],
        first,
        "nothing of the killed segment is visible"
    );

    // Killed between the segment's commit and its manifest: the pending copy its writer left
    // becomes the manifest, nothing is read; then it archives again what the killed one lost.
    let newest = segments.last().unwrap().0.clone();
    let pending = PathBuf::from(format!("{}.pending", newest.display()));
    std::fs::rename(&newest, &pending).unwrap();
    let (mut archiver, started) = Archiver::started(&etcd.endpoint, &base, "1").await;
    assert_eq!(started["afterRevision"], first, "{started}");
    assert!(newest.exists() && !pending.exists());
    archiver.archived_through(second).await;
    assert_eq!(archiver.signal("TERM").await, 0);

    // The newest manifest lost without a pending copy: rebuilt by reading the segment.
    let segments = local_segments(dir.path());
    assert_eq!(segments.last().unwrap().1["lastRevision"], second);
    std::fs::remove_file(&segments.last().unwrap().0).unwrap();
    let (mut archiver, started) = Archiver::started(&etcd.endpoint, &base, "1").await;
    assert_eq!(
        started["afterRevision"], second,
        "rebuilt from the segment itself: {started}"
    );
    let third = write_history(&mut client, None).await.last().unwrap().0;
    archiver.archived_through(third).await;
    assert_eq!(archiver.signal("TERM").await, 0);
    let segments = local_segments(dir.path());
    assert_contiguous(&segments);
    check_points(
        &etcd,
        &bin,
        &base,
        &[
            (second, "the changes of the killed segment"),
            (third, "after"),
        ],
        &[],
        &[],
    )
    .await;
}

#[tokio::test]
async fn a_cluster_that_compacts_past_the_archive_is_a_gap_said_and_bridged_by_a_snapshot() {
    let Fixture {
        bin,
        etcd,
        dir,
        base,
        mut client,
    } = Fixture::start().await;
    let (mut archiver, _) = Archiver::started(&etcd.endpoint, &base, "1").await;
    let archived = write_history(&mut client, None).await.last().unwrap().0;
    archiver.archived_through(archived).await;
    assert_eq!(archiver.signal("TERM").await, 0);

    // While no archiver runs, the cluster changes and compacts its history away.
    let in_gap = write_history(&mut client, None).await[0].0;
    let compacted = write_history(&mut client, None).await.last().unwrap().0;
    client.compact(compacted, None).await.unwrap();

    let mut archiver =
        Archiver::start(&etcd.endpoint, &base, &["--segment-seconds", "1"], &[]).await;
    let gap = archiver.wait_for("the gap", |l| l["event"] == "gap").await;
    assert_eq!(gap["archivedThrough"], archived, "{gap}");
    assert_eq!(gap["compacted"], compacted, "{gap}");
    // The snapshot it took (before it could say where it resumes) is past the compaction.
    let snapshot = archiver
        .seen
        .iter()
        .find(|l| l["event"] == "snapshot")
        .cloned();
    let snapshot = snapshot.expect("a snapshot taken after the gap");
    assert!(
        snapshot["revision"].as_i64().unwrap() >= compacted,
        "{snapshot}"
    );
    assert_eq!(gap["resumedAfter"], snapshot["revision"], "{gap}");
    let after = write_history(&mut client, None).await.last().unwrap().0;
    archiver.archived_through(after).await;
    assert_eq!(archiver.signal("TERM").await, 0);

    // A point in the gap is refused, naming it; a point after it is restored.
    let out_dir = tempfile::tempdir().unwrap();
    let out = out_dir.path().join("gap.db");
    let bin_dir = bin.display().to_string();
    let in_gap = in_gap.to_string();
    let refused = run(
        &[
            "point-in-time",
            &base,
            "--revision",
            &in_gap,
            "--out",
            out.to_str().unwrap(),
            "--etcd-bin-dir",
            &bin_dir,
        ],
        &[],
    )
    .await;
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert!(refused.stderr.contains("gap"), "{}", refused.stderr);
    assert!(!out.exists());
    // The cluster compacted: only what it still serves can be compared.
    check_points(&etcd, &bin, &base, &[(after, "after the gap")], &[], &[]).await;

    // Retention keeping the newest snapshot deletes the segments before it, and only those.
    let before = local_segments(dir.path());
    let pruned = run(&["prune", &base, "--keep", "1", "--output", "json"], &[])
        .await
        .ok()
        .json();
    let deleted: Vec<&str> = pruned["deleted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    let left = local_segments(dir.path());
    assert!(!left.is_empty() && left.len() < before.len(), "{deleted:?}");
    for (_, manifest) in &before {
        let first = manifest["firstRevision"].as_i64().unwrap();
        let gone = !left.iter().any(|(_, m)| m["firstRevision"] == first);
        assert_eq!(gone, first <= archived, "segment from {first}: {deleted:?}");
    }
    check_points(&etcd, &bin, &base, &[(after, "after retention")], &[], &[]).await;
}

/// The real case: a Kubernetes API server's etcd is archived, a namespace with objects is
/// deleted (by the namespace controller, as `kubectl delete namespace` does), and a restore to
/// the revision before the deletion brings its objects back, read through a Kubernetes API
/// server started on the restored data.
#[tokio::test]
async fn a_deleted_namespace_comes_back_through_an_api_server_on_the_restored_data() {
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
    use kube::api::{Api, DeleteParams, PostParams};

    let (kube, etcd_endpoint) = testbed::kube::own_control_plane(None).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let base = format!("file://{}/etcd.backup", dir.path().display());
    let (mut archiver, _) = Archiver::started(&etcd_endpoint, &base, "1").await;

    let namespaces: Api<Namespace> = Api::all(kube.client.clone());
    let namespace: Namespace = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "shop"}
    }))
    .unwrap();
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    let config_maps: Api<ConfigMap> = Api::namespaced(kube.client.clone(), "shop");
    let mut written = std::collections::BTreeMap::new();
    for i in 0..5 {
        let data =
            serde_json::json!({ "orders": format!("order-{i}"), "size": "x".repeat(i * 100) });
        let config_map: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("config-{i}")}, "data": data
        }))
        .unwrap();
        config_maps
            .create(&PostParams::default(), &config_map)
            .await
            .unwrap();
        written.insert(format!("config-{i}"), config_map.data.unwrap());
    }
    let secrets: Api<Secret> = Api::namespaced(kube.client.clone(), "shop");
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "payment"}, "stringData": {"token": "s3cr3t"}
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();

    let mut etcd = Client::connect([etcd_endpoint.as_str()], None)
        .await
        .unwrap();
    let before = etcd.status().await.unwrap().header().unwrap().revision();
    namespaces
        .delete("shop", &DeleteParams::default())
        .await
        .unwrap();
    let gone = async {
        while namespaces.get_opt("shop").await.unwrap().is_some() {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(120), gone)
        .await
        .expect("the namespace controller deleted the namespace");
    assert!(
        config_maps
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let after = etcd.status().await.unwrap().header().unwrap().revision();
    archiver.archived_through(after).await;
    assert_eq!(archiver.signal("TERM").await, 0);

    // The snapshot file at the revision before the deletion, restored by stock etcdutl.
    let bin = testbed::control_plane_etcd_bin();
    let out = dir.path().join("before-the-deletion.db");
    let before_str = before.to_string();
    let bin_dir = bin.display().to_string();
    run(
        &[
            "point-in-time",
            &base,
            "--revision",
            &before_str,
            "--out",
            out.to_str().unwrap(),
            "--etcd-bin-dir",
            &bin_dir,
        ],
        &[],
    )
    .await
    .ok();
    let (_restored, restored_endpoint) = restore_with_stock_tools(&bin, &out, dir.path()).await;
    let (restored, _) = testbed::kube::own_control_plane(Some(&restored_endpoint))
        .await
        .unwrap();
    let config_maps: Api<ConfigMap> = Api::namespaced(restored.client.clone(), "shop");
    let mut served = std::collections::BTreeMap::new();
    for config_map in config_maps.list(&Default::default()).await.unwrap().items {
        if config_map.metadata.name.as_deref() == Some("kube-root-ca.crt") {
            continue;
        }
        served.insert(config_map.metadata.name.unwrap(), config_map.data.unwrap());
    }
    assert_eq!(served, written);
    let secret = Api::<Secret>::namespaced(restored.client.clone(), "shop")
        .get("payment")
        .await
        .unwrap();
    assert_eq!(secret.data.unwrap()["token"].0, b"s3cr3t");
    let namespace = Api::<Namespace>::all(restored.client)
        .get("shop")
        .await
        .unwrap();
    assert!(
        namespace.metadata.deletion_timestamp.is_none(),
        "{namespace:?}"
    );
}
