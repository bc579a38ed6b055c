//! SIGTERM and SIGINT mid-upload: the CLI aborts the multipart upload, waits for the abort,
//! exits with 128 + the signal number, and leaves no object and no pending upload. Mid-fetch:
//! it exits the same way and leaves neither the snapshot nor its `.part` file.

mod common;

use std::process::Stdio;
use std::time::Duration;

use testbed::cli::{StderrLog, without_ambient_aws};
use testbed::proxy::throttled_proxy;
use testbed::{Etcd, Garage};

/// The S3 keys under the bucket that hold an object, and those with an unfinished upload.
fn objects_and_uploads(garage: &Garage) -> (String, String) {
    let objects = garage.aws(&["s3api", "list-objects-v2", "--bucket", &garage.bucket]);
    let uploads = garage.aws(&[
        "s3api",
        "list-multipart-uploads",
        "--bucket",
        &garage.bucket,
    ]);
    assert!(objects.status.success() && uploads.status.success());
    (
        String::from_utf8_lossy(&objects.stdout).into_owned(),
        String::from_utf8_lossy(&uploads.stdout).into_owned(),
    )
}

/// Sends `signal` (`-TERM`, `-INT`) to `child` and waits for it to exit.
async fn interrupt(child: &mut tokio::process::Child, signal: &str) -> std::process::ExitStatus {
    let pid = child.id().unwrap().to_string();
    let kill = std::process::Command::new("kill")
        .args([signal, &pid])
        .status();
    assert!(kill.unwrap().success());
    tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("the CLI exits within 30 s of the signal")
        .unwrap()
}

#[tokio::test]
async fn a_signal_mid_upload_aborts_it_and_stores_nothing() {
    let garage = Garage::start().await.unwrap();
    let (flags, env) = garage.cli_args();
    let etcd = Etcd::start().await.unwrap();
    etcd.fill_random(48 << 20, 64 << 10).await.unwrap();
    // 12 MiB/s from etcd: the 48 MiB snapshot stays in flight for about 4 s.
    let slow = throttled_proxy(etcd.endpoint.trim_start_matches("http://").into(), 12 << 20).await;
    let to = format!("s3://{}/etcd.backup", garage.bucket);

    for (signal, name, code) in [("-TERM", "SIGTERM", 143), ("-INT", "SIGINT", 130)] {
        let mut save = tokio::process::Command::new(env!("CARGO_BIN_EXE_etcd-backup"));
        save.args([
            "save",
            "--endpoints",
            &format!("http://{slow}"),
            "--to",
            &to,
        ])
        .args(["--part-size-mib", "8", "--parts-in-flight", "1"])
        .args(&flags)
        .env("RUST_LOG", "backup_storage=debug")
        .stderr(Stdio::piped());
        without_ambient_aws(&mut save).envs(env.iter().map(|(k, v)| (k, v)));
        let mut child = save.spawn().unwrap();

        // Interrupt once the multipart upload exists on the server.
        let mut log = StderrLog::of(&mut child);
        log.wait_for("multipart upload started", Duration::from_secs(60))
            .await;
        let status = interrupt(&mut child, signal).await;
        let log = log.read_to_end().await;
        assert_eq!(status.code(), Some(code), "{log}");
        assert!(
            log.contains(&format!(
                "interrupted by {name}; any upload in progress was aborted"
            )),
            "{log}"
        );
        // The process waited for the abort: nothing is stored and no upload is pending.
        let (objects, uploads) = objects_and_uploads(&garage);
        assert!(!objects.contains("etcd.backup"), "{objects}");
        assert!(!uploads.contains("etcd.backup"), "{uploads}");
    }
}

#[tokio::test]
async fn a_signal_mid_fetch_leaves_no_partial_file() {
    let garage = Garage::start().await.unwrap();
    let (flags, env) = garage.cli_args();
    let etcd = Etcd::start().await.unwrap();
    etcd.fill_random(48 << 20, 64 << 10).await.unwrap();
    let url = format!("s3://{}/etcd.backup", garage.bucket);
    let mut save = vec!["save", "--endpoints", &etcd.endpoint, "--to", &url];
    save.extend(common::strs(&flags));
    common::run(&save, &env).await.ok();

    // 12 MiB/s from Garage: the 48 MiB download stays in flight for about 4 s.
    let garage_address = garage.endpoint.trim_start_matches("http://");
    let slow = throttled_proxy(garage_address.into(), 12 << 20).await;
    let slow_flags: Vec<String> = flags
        .iter()
        .map(|flag| {
            if flag == &garage.endpoint {
                format!("http://{slow}")
            } else {
                flag.clone()
            }
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("etcd.db");
    let part = dir.path().join("etcd.db.part");

    for (signal, code) in [("-TERM", 143), ("-INT", 130)] {
        let mut fetch = tokio::process::Command::new(env!("CARGO_BIN_EXE_etcd-backup"));
        fetch
            .args(["fetch", &url, "--out", out.to_str().unwrap()])
            .args(&slow_flags)
            .stderr(Stdio::piped());
        without_ambient_aws(&mut fetch).envs(env.iter().map(|(k, v)| (k, v)));
        let mut child = fetch.spawn().unwrap();
        let mut log = StderrLog::of(&mut child);

        // Interrupt once part of the snapshot is on disk.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while std::fs::metadata(&part).map_or(0, |m| m.len()) == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no bytes in {} after 60 s",
                part.display()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let status = interrupt(&mut child, signal).await;
        let log = log.read_to_end().await;
        assert_eq!(status.code(), Some(code), "{log}");
        let name = if signal == "-TERM" {
            "SIGTERM"
        } else {
            "SIGINT"
        };
        assert!(
            log.contains(&format!(
                "interrupted by {name}; any partial download {}.part was removed",
                out.display()
            )),
            "{log}"
        );
        assert!(!part.exists(), "{} left behind\n{log}", part.display());
        assert!(!out.exists(), "{log}");
    }
}
