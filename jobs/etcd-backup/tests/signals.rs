//! SIGTERM and SIGINT mid-upload: the CLI aborts the multipart upload, waits for the abort,
//! exits with 128 + the signal number, and leaves no object and no pending upload.

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
        let pid = child.id().unwrap().to_string();
        let kill = std::process::Command::new("kill")
            .args([signal, &pid])
            .status();
        assert!(kill.unwrap().success());

        let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
            .await
            .expect("the CLI exits within 30 s of the signal")
            .unwrap();
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
