//! The S3 backend against a real Garage server on loopback.

use std::time::Duration;

use aws_sdk_s3::Client;
use backup_storage::{
    Download, Location, S3Credentials, S3Options, StorageError, Store, UploadOptions,
};
use futures::StreamExt;
use testbed::Garage;

const MIB: usize = 1024 * 1024;

fn options(garage: &Garage) -> S3Options {
    S3Options {
        max_attempts: 2,
        abort_retry_window: Duration::from_secs(30),
        ..S3Options::s3_compatible(
            &garage.endpoint,
            &garage.region,
            &garage.access_key,
            &garage.secret_key,
        )
    }
}

async fn open(garage: &Garage) -> Store {
    let location = Location::S3 {
        bucket: garage.bucket.clone(),
        key: String::new(),
    };
    Store::open(&location, &options(garage)).await.unwrap()
}

/// A raw SDK client, to look at the server without going through the code under test.
async fn raw_client(garage: &Garage) -> Client {
    match open(garage).await {
        Store::S3(s3) => s3.client().clone(),
        _ => unreachable!("an s3:// location opens an S3 store"),
    }
}

async fn multipart_uploads(garage: &Garage) -> usize {
    let out = raw_client(garage)
        .await
        .list_multipart_uploads()
        .bucket(&garage.bucket)
        .send()
        .await
        .unwrap();
    out.uploads().len()
}

async fn read_all(store: &Store, key: &str) -> Vec<u8> {
    let mut download = store.download(key).await.unwrap();
    let mut out = Vec::new();
    while let Some(chunk) = download.next_chunk().await.unwrap() {
        out.extend_from_slice(&chunk);
    }
    out
}

#[tokio::test]
async fn multipart_upload_is_invisible_until_commit_and_roundtrips() {
    let garage = Garage::start().await.unwrap();
    let store = open(&garage).await;
    let data = testbed::pattern(20 * MIB + 123, 1);
    let mut upload = store
        .upload("big/object", UploadOptions::default())
        .await
        .unwrap();
    for chunk in data.chunks(32 * 1024) {
        upload.write(chunk).await.unwrap();
    }
    // Two 8 MiB parts are on the server, but the object does not exist yet.
    assert_eq!(store.head("big/object").await.unwrap(), None);
    assert_eq!(multipart_uploads(&garage).await, 1);
    let info = upload.commit().await.unwrap();
    assert_eq!(info.size, data.len() as u64);
    assert_eq!(
        store.head("big/object").await.unwrap().unwrap().size,
        data.len() as u64
    );
    assert_eq!(read_all(&store, "big/object").await, data);
    assert_eq!(multipart_uploads(&garage).await, 0);
}

#[tokio::test]
async fn small_stream_uses_one_put_with_metadata() {
    let garage = Garage::start().await.unwrap();
    let store = open(&garage).await;
    let mut options = UploadOptions::default();
    options.metadata.insert("etcd-revision".into(), "42".into());
    let mut upload = store.upload("small", options).await.unwrap();
    upload.write(b"hello").await.unwrap();
    assert_eq!(store.head("small").await.unwrap(), None);
    upload.commit().await.unwrap();
    let head = store.head("small").await.unwrap().unwrap();
    assert_eq!(head.size, 5);
    assert_eq!(
        head.metadata.get("etcd-revision").map(String::as_str),
        Some("42")
    );
}

#[tokio::test]
async fn abort_and_drop_leave_nothing_behind() {
    let garage = Garage::start().await.unwrap();
    let store = open(&garage).await;
    let data = testbed::pattern(9 * MIB, 2);

    let mut upload = store
        .upload("aborted", UploadOptions::default())
        .await
        .unwrap();
    upload.write(&data).await.unwrap();
    upload.abort().await.unwrap();

    let mut dropped = store
        .upload("dropped", UploadOptions::default())
        .await
        .unwrap();
    dropped.write(&data).await.unwrap();
    drop(dropped);
    // The drop aborts in the background.
    for _ in 0..50 {
        if multipart_uploads(&garage).await == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(multipart_uploads(&garage).await, 0);
    assert_eq!(store.list("").await.unwrap(), vec![]);
}

#[tokio::test]
async fn server_killed_mid_upload_leaves_no_object_and_no_parts() {
    let mut garage = Garage::start().await.unwrap();
    let store = open(&garage).await;
    let mut upload = store
        .upload("victim", UploadOptions::default())
        .await
        .unwrap();
    // Two parts sent; then the server dies.
    upload.write(&testbed::pattern(16 * MIB, 3)).await.unwrap();
    garage.kill();
    let restarted = tokio::spawn(async move {
        // Stay down long enough for the part retries (2 attempts) to give up, then come back so
        // the abort, which keeps retrying, reaches the server.
        tokio::time::sleep(Duration::from_secs(4)).await;
        garage.restart().await.unwrap();
        garage
    });
    let mut result = Ok(());
    // The pipeline holds 3 parts: a write fails at the latest once it must wait for one.
    for _ in 0..8 {
        result = upload.write(&testbed::pattern(8 * MIB, 4)).await;
        if result.is_err() {
            break;
        }
    }
    let err = result.expect_err("a write fails while the server is down");
    assert!(
        matches!(err, StorageError::Unreachable { .. }),
        "expected an unreachable-endpoint error, got: {err}"
    );
    let garage = restarted.await.unwrap();
    // With the server back, neither a further write nor a commit can turn the aborted upload
    // into an object (a commit would otherwise store what was left in the part buffer).
    let again = upload.write(&testbed::pattern(MIB, 5)).await.unwrap_err();
    assert!(
        matches!(again, StorageError::UploadFailed { .. }),
        "{again}"
    );
    let commit = upload.commit().await.unwrap_err();
    assert!(
        matches!(commit, StorageError::UploadFailed { .. }),
        "{commit}"
    );
    assert!(
        commit.to_string().contains("cannot go on or be committed"),
        "{commit}"
    );
    let store = open(&garage).await;
    assert_eq!(store.head("victim").await.unwrap(), None);
    assert_eq!(
        multipart_uploads(&garage).await,
        0,
        "the failed upload was not aborted"
    );
}

/// Stores 24 MiB under `key` and starts downloading it: returns the data, the download and the
/// first MiB or more it read.
async fn download_underway(garage: &Garage, key: &str) -> (Vec<u8>, Download, Vec<u8>) {
    let store = open(garage).await;
    let data = testbed::pattern(24 * MIB, 5);
    let mut upload = store.upload(key, UploadOptions::default()).await.unwrap();
    upload.write(&data).await.unwrap();
    upload.commit().await.unwrap();
    let mut download = store.download(key).await.unwrap();
    let mut got = Vec::new();
    while got.len() < MIB {
        got.extend_from_slice(&download.next_chunk().await.unwrap().unwrap());
    }
    (data, download, got)
}

#[tokio::test]
async fn download_resumes_after_the_server_restarts() {
    let garage = Garage::start().await.unwrap();
    let (data, mut download, mut got) = download_underway(&garage, "resume").await;
    let restarted = garage.crash_and_restart(Duration::from_secs(2));
    while let Some(chunk) = download.next_chunk().await.unwrap() {
        got.extend_from_slice(&chunk);
    }
    let _garage = restarted.await.unwrap();
    assert_eq!(got.len(), data.len());
    assert!(got == data, "resumed download differs from the object");
}

/// The object is rewritten while a download is cut off: the resume does not splice two
/// versions together, it fails naming the change.
#[tokio::test]
async fn a_download_resumed_after_a_rewrite_fails_instead_of_mixing_versions() {
    let mut garage = Garage::start().await.unwrap();
    let (_, mut download, _) = download_underway(&garage, "rewritten").await;
    let store = open(&garage).await;
    store
        .put_small(
            "rewritten",
            testbed::pattern(24 * MIB, 6).into(),
            "application/octet-stream",
        )
        .await
        .unwrap();
    garage.kill();
    garage.restart().await.unwrap();
    let err = loop {
        match download.next_chunk().await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the download ended as if nothing had changed"),
            Err(e) => break e,
        }
    };
    assert!(
        matches!(err, StorageError::ChangedWhileReading { .. }),
        "{err}"
    );
}

/// The server dies for good mid-download: after the resumes, the error says where the download
/// stopped and why the resumes failed (the endpoint refuses connections), not merely that the
/// connection closed.
#[tokio::test]
async fn download_from_a_dead_server_names_the_real_cause() {
    let mut garage = Garage::start().await.unwrap();
    let (data, mut download, first) = download_underway(&garage, "dead").await;
    let mut got = first.len();
    garage.kill();
    let err = loop {
        match download.next_chunk().await {
            Ok(Some(chunk)) => got += chunk.len(),
            Ok(None) => panic!("the download ended without error after {got} bytes"),
            Err(e) => break e.to_string(),
        }
    };
    assert!(
        err.contains(&format!("stopped at byte {got} of {}", data.len())),
        "{err}"
    );
    assert!(
        err.contains(&format!("cannot reach S3 endpoint {}", garage.endpoint)),
        "{err}"
    );
    assert!(!err.contains("connection closed early"), "{err}");
}

#[tokio::test]
async fn listing_follows_every_page() {
    let garage = Garage::start().await.unwrap();
    let store = open(&garage).await;
    let keys: Vec<String> = (0..1005).map(|i| format!("many/{i:05}")).collect();
    futures::stream::iter(keys.iter())
        .for_each_concurrent(32, |k| {
            let store = store.clone();
            async move { store.put_small(k, "x".into(), "text/plain").await.unwrap() }
        })
        .await;
    store
        .put_small("other/0", "x".into(), "text/plain")
        .await
        .unwrap();
    let listed = store.list("many/").await.unwrap();
    assert_eq!(listed.len(), 1005);
    assert_eq!(
        listed.iter().map(|o| o.key.clone()).collect::<Vec<_>>(),
        keys
    );
    store.delete("many/00000").await.unwrap();
    store.delete("never-existed").await.unwrap();
    assert_eq!(store.list("many/").await.unwrap().len(), 1004);
}

#[tokio::test]
async fn clean_incomplete_removes_only_its_own_orphaned_uploads() {
    let garage = Garage::start().await.unwrap();
    let client = raw_client(&garage).await;
    // Uploads left behind by a process that was killed: one of ours, one of another tool's
    // under the same prefix.
    for key in ["prefix/orphan", "prefix/other-tool"] {
        client
            .create_multipart_upload()
            .bucket(&garage.bucket)
            .key(key)
            .send()
            .await
            .unwrap();
    }
    let store = open(&garage).await;
    let ours = |key: &str| key == "prefix/orphan";
    let clean = |prefix: &'static str, age: u64| {
        let store = &store;
        async move {
            store
                .clean_incomplete(prefix, Duration::from_secs(age), &ours)
                .await
                .unwrap()
        }
    };
    assert_eq!(clean("other/", 0).await, 0);
    assert_eq!(clean("prefix/", 3600).await, 0);
    assert_eq!(clean("prefix/", 0).await, 1);
    assert_eq!(
        multipart_uploads(&garage).await,
        1,
        "the other tool's upload is kept"
    );
    let everything = |_: &str| true;
    store
        .clean_incomplete("prefix/", Duration::ZERO, &everything)
        .await
        .unwrap();
    assert_eq!(multipart_uploads(&garage).await, 0);
}

#[tokio::test]
async fn errors_name_the_cause() {
    let garage = Garage::start().await.unwrap();

    let missing = Location::S3 {
        bucket: "no-such-bucket".into(),
        key: "k".into(),
    };
    let err = Store::open(&missing, &options(&garage)).await.unwrap_err();
    assert!(matches!(err, StorageError::NoSuchBucket { .. }), "{err}");

    let mut wrong = options(&garage);
    wrong.credentials = S3Credentials::Static {
        access_key_id: "GK0123456789abcdef01234567".into(),
        secret_access_key: "0".repeat(64),
        session_token: None,
    };
    let location = Location::S3 {
        bucket: garage.bucket.clone(),
        key: "k".into(),
    };
    let store = Store::open(&location, &wrong).await.unwrap();
    let err = store
        .put_small("k", "x".into(), "text/plain")
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::Credentials { .. }), "{err}");

    let mut unreachable = options(&garage);
    unreachable.endpoint = Some(format!("http://127.0.0.1:{}", testbed::free_port()));
    let err = Store::open(&location, &unreachable).await.unwrap_err();
    assert!(matches!(err, StorageError::Unreachable { .. }), "{err}");
    assert!(
        err.to_string().contains("cannot reach S3 endpoint"),
        "{err}"
    );
}

#[tokio::test]
async fn coreos_secret_files_supply_credentials_and_region() {
    let garage = Garage::start().await.unwrap();
    let mut opts = options(&garage);
    opts.region = None;
    opts.credentials = S3Credentials::SharedFiles {
        credentials: Some(format!(
            "[default]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
            garage.access_key, garage.secret_key
        )),
        config: Some(format!("[default]\nregion = {}\n", garage.region)),
        profile: None,
    };
    let location = Location::S3 {
        bucket: garage.bucket.clone(),
        key: "k".into(),
    };
    let store = Store::open(&location, &opts).await.unwrap();
    store
        .put_small("from-secret", "x".into(), "text/plain")
        .await
        .unwrap();
    assert!(store.head("from-secret").await.unwrap().is_some());
}

/// A store whose requests go through `proxy` (a tampering proxy in front of Garage).
async fn open_through(garage: &Garage, proxy: &str) -> Store {
    open_at(garage, &format!("http://{proxy}"), None).await
}

/// A store of `garage`'s bucket at `endpoint`, trusting `ca` (PEM file) too.
async fn open_at(garage: &Garage, endpoint: &str, ca: Option<&std::path::Path>) -> Store {
    let mut options = options(garage);
    options.endpoint = Some(endpoint.to_string());
    if let Some(ca) = ca {
        options = options.with_ca_file(ca).unwrap();
    }
    let location = Location::S3 {
        bucket: garage.bucket.clone(),
        key: String::new(),
    };
    Store::open(&location, &options).await.unwrap()
}

async fn upload_all(store: &Store, key: &str, data: &[u8]) -> Result<(), StorageError> {
    let mut upload = store.upload(key, UploadOptions::default()).await?;
    for chunk in data.chunks(64 * 1024) {
        upload.write(chunk).await?;
    }
    upload.commit().await.map(|_| ())
}

#[tokio::test]
async fn parts_carry_their_crc32c_and_the_server_keeps_the_composite() {
    let garage = Garage::start().await.unwrap();
    let store = open(&garage).await;
    let data = testbed::pattern(20 * MIB + 5, 7);
    upload_all(&store, "checked/object", &data).await.unwrap();
    let head = raw_client(&garage)
        .await
        .head_object()
        .bucket(&garage.bucket)
        .key("checked/object")
        .checksum_mode(aws_sdk_s3::types::ChecksumMode::Enabled)
        .send()
        .await
        .unwrap();
    // The CRC32C of the three parts' CRC32Cs, then "-3", as S3 defines a composite checksum.
    let parts: Vec<u8> = data
        .chunks(8 * MIB)
        .flat_map(|part| crc_fast::crc32_iscsi(part).to_be_bytes())
        .collect();
    let expected = format!(
        "{}-3",
        aws_smithy_types::base64::encode(crc_fast::crc32_iscsi(&parts).to_be_bytes())
    );
    assert_eq!(head.checksum_crc32_c(), Some(expected.as_str()));
}

#[tokio::test]
async fn a_byte_flipped_in_an_unsigned_part_is_refused_and_nothing_is_stored() {
    let garage = Garage::start().await.unwrap();
    let target = garage.endpoint.trim_start_matches("http://").to_string();
    let plan = testbed::proxy::Tampering {
        flip_body_of: Some("partNumber=2".into()),
        ..Default::default()
    };
    let (proxy, tampered) = testbed::proxy::tampering_proxy(target, plan).await;
    // Over TLS (payloads go unsigned only there), to a front whose far side flips the byte: a
    // load balancer or a disk on the server's side, beyond what TLS protects.
    let tls = testbed::TlsFiles::generate().unwrap();
    let front = testbed::proxy::tls_proxy(proxy, &tls).await;
    let store = open_at(&garage, &format!("https://{front}"), Some(&tls.ca_cert)).await;
    // A first object shows the store that Garage checks CRC32Cs: the big one goes unsigned.
    upload_all(&store, "first", b"small").await.unwrap();

    let data = testbed::pattern(20 * MIB, 3);
    let err = upload_all(&store, "flipped/object", &data)
        .await
        .expect_err("a corrupted part must not be stored");

    let flipped = tampered.flipped_request.lock().unwrap().clone();
    let flipped = flipped.expect("the proxy flipped a byte of part 2");
    assert!(flipped.contains("UNSIGNED-PAYLOAD"), "{flipped}");
    assert!(
        flipped.to_lowercase().contains("x-amz-checksum-crc32c"),
        "{flipped}"
    );
    assert!(err.to_string().contains("UploadPart"), "{err}");
    assert_eq!(store.head("flipped/object").await.unwrap(), None);
    assert_eq!(multipart_uploads(&garage).await, 0);
}

#[tokio::test]
async fn a_stored_size_other_than_the_sent_one_fails_the_commit() {
    let garage = Garage::start().await.unwrap();
    let target = garage.endpoint.trim_start_matches("http://").to_string();
    for (key, len) in [("short/object", 17 * MIB), ("short/small", 1000)] {
        let plan = testbed::proxy::Tampering {
            head_size: Some((key.into(), len as u64 - 1)),
            ..Default::default()
        };
        let (proxy, tampered) = testbed::proxy::tampering_proxy(target.clone(), plan).await;
        let store = open_through(&garage, &proxy).await;
        let err = upload_all(&store, key, &testbed::pattern(len, 5))
            .await
            .expect_err("a size mismatch must fail the commit");
        assert!(
            tampered
                .heads_rewritten
                .load(std::sync::atomic::Ordering::SeqCst)
                > 0
        );
        assert!(
            matches!(err, StorageError::StoredMismatch { .. }),
            "{key}: {err}"
        );
        assert!(err.to_string().contains("stored size"), "{err}");
    }
}

/// A request that makes an object visible: a PutObject, or a CompleteMultipartUpload (a POST
/// naming its upload; the POST that creates one names none).
fn is_commit(head: &str) -> bool {
    let put_object = head.starts_with("PUT ") && !head.contains("x-id=UploadPart");
    let complete = head.starts_with("POST ") && head.contains("uploadId=");
    put_object || complete
}

/// Conditional commits are asked of the server: `If-None-Match: *` when nothing was there,
/// `If-Match: <ETag>` when rewriting the object seen. (Garage 2.5 ignores both, so the refusal
/// itself is shown on local storage, `local_dir.rs`.)
#[tokio::test]
async fn conditional_commits_send_their_precondition() {
    use backup_storage::Precondition;
    let garage = Garage::start().await.unwrap();
    let target = garage.endpoint.trim_start_matches("http://").to_string();
    let (proxy, tampered) =
        testbed::proxy::tampering_proxy(target, testbed::proxy::Tampering::default()).await;
    let store = open_through(&garage, &proxy).await;
    let conditional = |precondition| UploadOptions {
        precondition: Some(precondition),
        ..UploadOptions::default()
    };
    let commits = || -> Vec<String> {
        tampered
            .requests
            .lock()
            .unwrap()
            .iter()
            .filter(|h| is_commit(h))
            .map(|h| h.to_lowercase())
            .collect()
    };
    for (key, len) in [("conditional/small", 1000), ("conditional/big", 17 * MIB)] {
        let data = testbed::pattern(len, 9);
        let mut upload = store
            .upload(key, conditional(Precondition::Absent))
            .await
            .unwrap();
        upload.write(&data).await.unwrap();
        upload.commit().await.unwrap();
        let etag = store.head(key).await.unwrap().unwrap().etag.unwrap();
        let mut upload = store
            .upload(key, conditional(Precondition::Unchanged(etag.clone())))
            .await
            .unwrap();
        upload.write(&data).await.unwrap();
        upload.commit().await.unwrap();
        let signed = tampered
            .requests
            .lock()
            .unwrap()
            .iter()
            .all(|h| !h.contains("x-id=UploadPart") || !h.contains("UNSIGNED-PAYLOAD"));
        assert!(signed, "over plain HTTP every part is signed");
        let sent = commits();
        let [.., absent, unchanged] = &sent[..] else {
            panic!("{sent:?}");
        };
        assert!(absent.contains("if-none-match: *"), "{absent}");
        assert!(
            unchanged.contains(&format!("if-match: {}", etag.to_lowercase())),
            "{unchanged}"
        );
    }
}

/// A writer dropped while its CreateMultipartUpload is in flight (a cancelled backup, a
/// signal) leaves no upload on the server: the request's own task aborts what the server
/// created, and `finish_aborts` waits for it.
#[tokio::test]
async fn an_upload_dropped_while_the_server_starts_it_leaves_nothing() {
    let garage = Garage::start().await.unwrap();
    let target = garage.endpoint.trim_start_matches("http://").to_string();
    let (proxy, gate) = testbed::proxy::gated_proxy(target).await;
    let store = open_through(&garage, &proxy).await;
    let mut upload = store
        .upload("dropped", UploadOptions::default())
        .await
        .unwrap();
    let part = testbed::pattern(8 * MIB, 7);
    gate.shut();
    tokio::select! {
        written = upload.write(&part) => panic!("the write ended before the server answered: {written:?}"),
        // The server has created the upload; its answer is held back.
        () = gate.answered() => {}
    }
    drop(upload);
    gate.open();
    assert!(backup_storage::finish_aborts(Duration::from_secs(30)).await);
    assert_eq!(multipart_uploads(&garage).await, 0);
}
