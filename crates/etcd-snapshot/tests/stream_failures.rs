//! The snapshot path against real etcd and Garage when things break mid-stream.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use backup_storage::{Location, S3Options, Store};
use etcd_snapshot::{Error, EtcdConnection, ObjectName, SaveOptions, save};
use testbed::{Etcd, Garage};

/// About `mib` MiB of incompressible values, written with etcd-client (etcdctl is too slow).
async fn fill(etcd: &Etcd, mib: usize) {
    let mut client = etcd_client::Client::connect([etcd.endpoint.as_str()], None)
        .await
        .unwrap();
    let mut x = 0x9e3779b97f4a7c15u64;
    for i in 0..mib {
        let value: Vec<u8> = (0..1024 * 1024)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        client
            .put(format!("/fill/{i:05}"), value, None)
            .await
            .unwrap();
    }
}

fn s3_options(garage: &Garage) -> S3Options {
    S3Options::s3_compatible(
        &garage.endpoint,
        &garage.region,
        &garage.access_key,
        &garage.secret_key,
    )
}

async fn multipart_uploads(store: &Store, bucket: &str) -> usize {
    let Store::S3(s3) = store else { unreachable!() };
    s3.client()
        .list_multipart_uploads()
        .bucket(bucket)
        .send()
        .await
        .unwrap()
        .uploads()
        .len()
}

#[tokio::test]
async fn etcd_killed_mid_stream_stores_nothing() {
    killed_mid_stream(None).await;
}

/// The same with the stream compressed and encrypted: the layers between etcd and the upload
/// do not turn a cut stream into a stored object.
#[tokio::test]
async fn etcd_killed_mid_stream_of_an_encrypted_save_stores_nothing() {
    let (_, public) = backup_storage::encryption::Identity::generate();
    let recipients = backup_storage::encryption::Recipients::parse(&public, "test").unwrap();
    killed_mid_stream(Some(recipients)).await;
}

async fn killed_mid_stream(recipients: Option<backup_storage::encryption::Recipients>) {
    let encrypted = recipients.is_some();
    let mut etcd = Etcd::start().await.unwrap();
    fill(&etcd, 40).await;
    let garage = Garage::start().await.unwrap();
    let location = Location::parse(&format!("s3://{}/killed.backup", garage.bucket)).unwrap();
    let store = Store::open(&location, &s3_options(&garage)).await.unwrap();

    // Kill etcd from the progress callback once 12 MiB arrived: one part is already on the
    // server and the stream is mid-flight.
    let pid = etcd.pid();
    let killed = Arc::new(AtomicBool::new(false));
    let mut options = SaveOptions::new(ObjectName::Exact(location.key()));
    options.stall_timeout = Duration::from_secs(10);
    if encrypted {
        options.compression = etcd_snapshot::Compression::Zstd;
        options.recipients = recipients;
    }
    let flag = killed.clone();
    options.progress = Some(Arc::new(move |p| {
        if p.received > 12 << 20 && !flag.swap(true, Ordering::SeqCst) {
            std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status()
                .unwrap();
        }
    }));
    let err = save(
        &EtcdConnection::new(vec![etcd.endpoint.clone()]),
        &store,
        &options,
    )
    .await
    .unwrap_err();
    assert!(
        killed.load(Ordering::SeqCst),
        "the stream finished before the kill"
    );
    assert!(
        matches!(
            err,
            Error::Stream { .. }
                | Error::MissingTrailer { .. }
                | Error::HashMismatch { .. }
                | Error::Stalled { .. }
        ),
        "unexpected error: {err}"
    );
    etcd.kill();
    assert_eq!(store.head("killed.backup").await.unwrap(), None);
    assert_eq!(
        store.head("killed.backup.manifest.json").await.unwrap(),
        None
    );
    assert_eq!(multipart_uploads(&store, &garage.bucket).await, 0);
}

#[tokio::test]
async fn stalled_etcd_hits_the_stall_timeout_and_stores_nothing() {
    let etcd = Etcd::start().await.unwrap();
    fill(&etcd, 24).await;
    let dir = tempfile::tempdir().unwrap();
    let location = Location::parse(dir.path().join("stalled.backup").to_str().unwrap()).unwrap();
    let store = Store::open(&location, &S3Options::default()).await.unwrap();

    // Freeze etcd (SIGSTOP) mid-stream: the connection stays open but no bytes come.
    let pid = etcd.pid();
    let stopped = Arc::new(AtomicBool::new(false));
    let mut options = SaveOptions::new(ObjectName::Exact(location.key()));
    options.stall_timeout = Duration::from_secs(2);
    let flag = stopped.clone();
    options.progress = Some(Arc::new(move |p| {
        if p.received > 4 << 20 && !flag.swap(true, Ordering::SeqCst) {
            std::process::Command::new("kill")
                .args(["-STOP", &pid.to_string()])
                .status()
                .unwrap();
        }
    }));
    let result = save(
        &EtcdConnection::new(vec![etcd.endpoint.clone()]),
        &store,
        &options,
    )
    .await;
    std::process::Command::new("kill")
        .args(["-CONT", &pid.to_string()])
        .status()
        .unwrap();
    let err = result.unwrap_err();
    assert!(
        matches!(err, Error::Stalled { seconds: 2, .. }),
        "unexpected error: {err}"
    );
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "files left behind: {left:?}");
}

/// `deadline` is a total deadline: an S3 server that stops answering mid-upload (SIGSTOP, so
/// the SDK would wait out its attempts for the better part of an hour) fails the backup when
/// the deadline passes, and the upload is aborted once the server answers again.
#[tokio::test]
async fn a_hung_s3_server_fails_the_backup_at_the_total_deadline() {
    let etcd = Etcd::start().await.unwrap();
    fill(&etcd, 40).await;
    let garage = Garage::start().await.unwrap();
    let location = Location::parse(&format!("s3://{}/hung.backup", garage.bucket)).unwrap();
    let store = Store::open(&location, &s3_options(&garage)).await.unwrap();
    let garage_pid = garage.pid().unwrap().to_string();

    let stopped = Arc::new(AtomicBool::new(false));
    let mut options = SaveOptions::new(ObjectName::Exact(location.key()));
    options.deadline = Some(Duration::from_secs(5));
    let flag = stopped.clone();
    let pid = garage_pid.clone();
    options.progress = Some(Arc::new(move |p| {
        // Once the first part is on its way, the server hangs.
        if p.received > 12 << 20 && !flag.swap(true, Ordering::SeqCst) {
            std::process::Command::new("kill")
                .args(["-STOP", &pid])
                .status()
                .unwrap();
        }
    }));
    let started = std::time::Instant::now();
    let result = save(
        &EtcdConnection::new(vec![etcd.endpoint.clone()]),
        &store,
        &options,
    )
    .await;
    let took = started.elapsed();
    std::process::Command::new("kill")
        .args(["-CONT", &garage_pid])
        .status()
        .unwrap();
    assert!(
        stopped.load(Ordering::SeqCst),
        "the server was never stopped"
    );
    let err = result.unwrap_err();
    assert!(
        matches!(err, Error::DeadlineExceeded { seconds: 5, .. }),
        "unexpected error after {took:?}: {err}"
    );
    assert!(took < Duration::from_secs(30), "{took:?}");
    // The dropped upload's abort reaches the server now that it answers.
    assert!(backup_storage::finish_aborts(Duration::from_secs(60)).await);
    assert_eq!(store.head("hung.backup").await.unwrap(), None);
    let Store::S3(s3) = &store else {
        unreachable!()
    };
    let left = s3
        .client()
        .list_multipart_uploads()
        .bucket(&garage.bucket)
        .send()
        .await
        .unwrap();
    let left: Vec<_> = left
        .uploads()
        .iter()
        .map(|u| {
            (
                u.key().map(str::to_string),
                u.upload_id().map(str::to_string),
            )
        })
        .collect();
    let log = std::fs::read_to_string(garage.dir().join("garage.log")).unwrap_or_default();
    let log: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("uploadId") || l.contains("uploads"))
        .collect();
    assert!(left.is_empty(), "{left:?}\n{}", log.join("\n"));
}
