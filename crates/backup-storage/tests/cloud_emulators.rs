//! The GCS and Azure Blob backends against real protocol servers: fake-gcs-server and Azurite
//! (see `testbed::emulators`). Every check runs on both; each is a function over an
//! [`Emulator`], called by one test per backend.
//!
//! What the emulators cannot show (said in docs/concepts/design-decisions.md): fake-gcs-server
//! checks no credentials and no `X-Goog-Hash` (the CRC32C check after the commit is ours and
//! runs against it), and Azurite has no workload identity.

use backup_storage::{
    AzureCredentials, AzureOptions, GcsCredentials, GcsOptions, Location, ObjectInfo, Precondition,
    StorageError, Store, UploadOptions,
};
use testbed::{Azurite, FakeGcs};

const MIB: usize = 1024 * 1024;

enum Emulator {
    Gcs(FakeGcs),
    Azure(Azurite),
}

impl Emulator {
    async fn gcs() -> Emulator {
        Emulator::Gcs(FakeGcs::start().await.unwrap())
    }

    async fn azure() -> Emulator {
        Emulator::Azure(Azurite::start().await.unwrap())
    }

    fn location(&self, bucket: &str) -> Location {
        match self {
            Emulator::Gcs(_) => Location::Gcs {
                bucket: bucket.into(),
                key: String::new(),
            },
            Emulator::Azure(_) => Location::Azure {
                container: bucket.into(),
                key: String::new(),
            },
        }
    }

    fn gcs_options(gcs: &FakeGcs) -> GcsOptions {
        GcsOptions {
            endpoint: Some(gcs.endpoint.clone()),
            credentials: GcsCredentials::Anonymous,
            max_attempts: 2,
            ..GcsOptions::default()
        }
    }

    fn azure_options(azurite: &Azurite, key: &str) -> AzureOptions {
        AzureOptions {
            account: azurite.account.clone(),
            endpoint: Some(azurite.endpoint.clone()),
            credentials: AzureCredentials::SharedKey(key.into()),
            max_attempts: 2,
            ..AzureOptions::default()
        }
    }

    async fn open_bucket(&self, bucket: &str) -> Result<Store, StorageError> {
        let location = self.location(bucket);
        match self {
            Emulator::Gcs(gcs) => Store::open(&location, &Emulator::gcs_options(gcs)).await,
            Emulator::Azure(azurite) => {
                Store::open(&location, &Emulator::azure_options(azurite, &azurite.key)).await
            }
        }
    }

    async fn open(&self) -> Store {
        self.open_bucket(testbed::emulators::BUCKET).await.unwrap()
    }

    fn kill(&mut self) {
        match self {
            Emulator::Gcs(s) => s.kill(),
            Emulator::Azure(s) => s.kill(),
        }
    }

    async fn restart(&mut self) {
        match self {
            Emulator::Gcs(s) => s.restart().await.unwrap(),
            Emulator::Azure(s) => s.restart().await.unwrap(),
        }
    }
}

async fn read_all(store: &Store, key: &str) -> Vec<u8> {
    let mut download = store.download(key).await.unwrap();
    let mut out = Vec::new();
    while let Some(chunk) = download.next_chunk().await.unwrap() {
        out.extend_from_slice(&chunk);
    }
    out
}

async fn upload_all(
    store: &Store,
    key: &str,
    data: &[u8],
    options: UploadOptions,
) -> Result<ObjectInfo, StorageError> {
    let mut upload = store.upload(key, options).await?;
    for chunk in data.chunks(64 * 1024) {
        upload.write(chunk).await?;
    }
    upload.commit().await
}

async fn a_stream_is_invisible_until_commit_and_roundtrips(emulator: Emulator) {
    let store = emulator.open().await;
    let data = testbed::pattern(20 * MIB + 123, 1);
    let mut options = UploadOptions::default();
    options.metadata.insert("etcd-revision".into(), "42".into());
    options.content_type = Some("application/octet-stream".into());
    let mut upload = store.upload("etcd/big object", options).await.unwrap();
    for chunk in data.chunks(32 * 1024) {
        upload.write(chunk).await.unwrap();
    }
    // Two 8 MiB chunks went out, yet there is no object.
    assert_eq!(upload.bytes_written(), data.len() as u64);
    assert_eq!(store.head("etcd/big object").await.unwrap(), None);
    assert!(store.list("etcd/").await.unwrap().is_empty());
    let info = upload.commit().await.unwrap();
    assert_eq!(info.size, data.len() as u64);
    let head = store.head("etcd/big object").await.unwrap().unwrap();
    assert_eq!(head.size, data.len() as u64);
    assert_eq!(
        head.metadata.get("etcd-revision").map(String::as_str),
        Some("42"),
        "{head:?}"
    );
    assert_eq!(read_all(&store, "etcd/big object").await, data);
    let listed = store.list("etcd/").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].key, "etcd/big object");
    assert_eq!(listed[0].size, data.len() as u64);
    // One ETag whichever way it is read: a manifest records the commit's, and a listing or a
    // head must find the same, or the manifest looks written for another object.
    assert!(info.etag.is_some(), "{info:?}");
    assert_eq!(listed[0].etag, info.etag);
    assert_eq!(head.etag, info.etag);

    // Small objects (manifests), and an empty one.
    store
        .put_small(
            "etcd/m.json",
            bytes::Bytes::from_static(b"{}"),
            "application/json",
        )
        .await
        .unwrap();
    assert_eq!(
        store.get_small("etcd/m.json").await.unwrap().as_deref(),
        Some(&b"{}"[..])
    );
    assert_eq!(store.get_small("etcd/none").await.unwrap(), None);
    upload_all(&store, "etcd/empty", b"", UploadOptions::default())
        .await
        .unwrap();
    assert_eq!(store.head("etcd/empty").await.unwrap().unwrap().size, 0);

    store.delete("etcd/big object").await.unwrap();
    store.delete("etcd/big object").await.unwrap(); // gone already: not an error
    assert_eq!(store.head("etcd/big object").await.unwrap(), None);
    let keys: Vec<String> = store
        .list("etcd/")
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .collect();
    assert_eq!(keys, ["etcd/empty", "etcd/m.json"]);
}

#[tokio::test]
async fn gcs_a_stream_is_invisible_until_commit_and_roundtrips() {
    a_stream_is_invisible_until_commit_and_roundtrips(Emulator::gcs().await).await;
}

#[tokio::test]
async fn azure_a_stream_is_invisible_until_commit_and_roundtrips() {
    a_stream_is_invisible_until_commit_and_roundtrips(Emulator::azure().await).await;
}

async fn abort_and_drop_leave_nothing(emulator: Emulator) {
    let store = emulator.open().await;
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
    assert!(backup_storage::finish_aborts(std::time::Duration::from_secs(10)).await);
    assert_eq!(store.head("aborted").await.unwrap(), None);
    assert_eq!(store.head("dropped").await.unwrap(), None);
    assert!(store.list("").await.unwrap().is_empty());
}

#[tokio::test]
async fn gcs_abort_and_drop_leave_nothing() {
    abort_and_drop_leave_nothing(Emulator::gcs().await).await;
}

#[tokio::test]
async fn azure_abort_and_drop_leave_nothing() {
    abort_and_drop_leave_nothing(Emulator::azure().await).await;
}

async fn a_server_killed_mid_upload_leaves_no_object(mut emulator: Emulator) {
    let store = emulator.open().await;
    let data = testbed::pattern(17 * MIB, 3);
    let mut upload = store.upload("cut", UploadOptions::default()).await.unwrap();
    upload.write(&data[..9 * MIB]).await.unwrap();
    emulator.kill();
    let failed = match upload.write(&data[9 * MIB..]).await {
        Err(e) => Some(e),
        Ok(()) => upload.commit().await.err(),
    };
    let err = failed.expect("an upload to a dead server fails");
    assert!(
        matches!(
            err,
            StorageError::Unreachable { .. } | StorageError::Cloud { .. }
        ),
        "{err}"
    );
    emulator.restart().await;
    let store = emulator.open().await;
    assert_eq!(store.head("cut").await.unwrap(), None);
    // The server works again, for a new upload of the same name.
    upload_all(&store, "cut", &data, UploadOptions::default())
        .await
        .unwrap();
    assert_eq!(read_all(&store, "cut").await, data);
}

#[tokio::test]
async fn gcs_a_server_killed_mid_upload_leaves_no_object() {
    a_server_killed_mid_upload_leaves_no_object(Emulator::gcs().await).await;
}

#[tokio::test]
async fn azure_a_server_killed_mid_upload_leaves_no_object() {
    a_server_killed_mid_upload_leaves_no_object(Emulator::azure().await).await;
}

async fn a_download_resumes_after_the_server_restarts(mut emulator: Emulator) {
    let store = emulator.open().await;
    let data = testbed::pattern(24 * MIB, 4);
    upload_all(&store, "resumed", &data, UploadOptions::default())
        .await
        .unwrap();
    let mut download = store.download("resumed").await.unwrap();
    let mut got = download.next_chunk().await.unwrap().unwrap().to_vec();
    emulator.kill();
    let restarted = async {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        emulator.restart().await;
    };
    let read_rest = async {
        while let Some(chunk) = download.next_chunk().await.unwrap() {
            got.extend_from_slice(&chunk);
        }
    };
    tokio::join!(restarted, read_rest);
    assert_eq!(got.len(), data.len());
    assert!(got == data, "the resumed download has other bytes");
}

#[tokio::test]
async fn gcs_a_download_resumes_after_the_server_restarts() {
    a_download_resumes_after_the_server_restarts(Emulator::gcs().await).await;
}

#[tokio::test]
async fn azure_a_download_resumes_after_the_server_restarts() {
    a_download_resumes_after_the_server_restarts(Emulator::azure().await).await;
}

async fn conditional_commits_refuse_to_overwrite(emulator: Emulator) {
    let store = emulator.open().await;
    let absent = || UploadOptions {
        precondition: Some(Precondition::Absent),
        ..UploadOptions::default()
    };
    let first = upload_all(&store, "once", b"first", absent())
        .await
        .unwrap();
    let err = upload_all(&store, "once", b"second", absent())
        .await
        .unwrap_err();
    assert!(
        matches!(err, StorageError::PreconditionFailed { .. }),
        "{err}"
    );
    assert_eq!(read_all(&store, "once").await, b"first");
    // Unchanged: the tag of the object as first read; a write in between makes it fail.
    let tag = first.etag.clone().unwrap();
    let unchanged = |tag: &str| UploadOptions {
        precondition: Some(Precondition::Unchanged(tag.to_string())),
        ..UploadOptions::default()
    };
    upload_all(&store, "once", b"third", unchanged(&tag))
        .await
        .unwrap();
    let err = upload_all(&store, "once", b"fourth", unchanged(&tag))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StorageError::PreconditionFailed { .. }),
        "{err}"
    );
    assert_eq!(read_all(&store, "once").await, b"third");
}

#[tokio::test]
async fn gcs_conditional_commits_refuse_to_overwrite() {
    conditional_commits_refuse_to_overwrite(Emulator::gcs().await).await;
}

#[tokio::test]
async fn azure_conditional_commits_refuse_to_overwrite() {
    conditional_commits_refuse_to_overwrite(Emulator::azure().await).await;
}

async fn errors_name_the_cause(emulator: Emulator) {
    let err = emulator.open_bucket("no-such-bucket").await.unwrap_err();
    assert!(matches!(err, StorageError::NoSuchBucket { .. }), "{err}");
    let store = emulator.open().await;
    assert!(store.download("missing").await.is_err());
}

#[tokio::test]
async fn gcs_errors_name_the_cause() {
    errors_name_the_cause(Emulator::gcs().await).await;
}

#[tokio::test]
async fn azure_errors_name_the_cause() {
    errors_name_the_cause(Emulator::azure().await).await;
}

#[tokio::test]
async fn azure_a_wrong_key_is_a_credentials_error() {
    let azurite = Azurite::start().await.unwrap();
    let location = Location::parse("azblob://backups/x").unwrap();
    // A valid base64 key of the right length, but not the account's.
    let wrong = "A".repeat(86) + "==";
    let err = Store::open(&location, &Emulator::azure_options(&azurite, &wrong))
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::Credentials { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("Azure Blob rejected the credentials"),
        "{err}"
    );
}

#[tokio::test]
async fn unreachable_endpoints_are_named() {
    let port = testbed::free_port();
    let gcs = GcsOptions {
        endpoint: Some(format!("http://127.0.0.1:{port}")),
        credentials: GcsCredentials::Anonymous,
        max_attempts: 1,
        ..GcsOptions::default()
    };
    let err = Store::open(&Location::parse("gs://b/k").unwrap(), &gcs)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains(&format!(
            "cannot reach GCS endpoint http://127.0.0.1:{port}"
        )),
        "{err}"
    );
    let azure = AzureOptions {
        account: "acct".into(),
        endpoint: Some(format!("http://127.0.0.1:{port}/acct")),
        credentials: AzureCredentials::SharedKey("a2V5".into()),
        max_attempts: 1,
        ..AzureOptions::default()
    };
    let err = Store::open(&Location::parse("azblob://c/k").unwrap(), &azure)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("cannot reach Azure Blob endpoint"),
        "{err}"
    );
}

/// A byte changed on its way to a server that does not check `X-Goog-Hash` (fake-gcs-server;
/// GCS itself refuses such a last chunk): the CRC32C comparison after the commit catches it,
/// and the damaged object does not stay visible.
#[tokio::test]
async fn gcs_a_byte_changed_on_the_way_fails_the_commit_and_leaves_no_object() {
    let port = testbed::free_port();
    let plan = testbed::proxy::Tampering {
        flip_body_of: Some("upload_id=".into()),
        ..Default::default()
    };
    let (proxy, tampered) =
        testbed::proxy::tampering_proxy(format!("127.0.0.1:{port}"), plan).await;
    let proxy_url = format!("http://{proxy}");
    let gcs = FakeGcs::start_at(port, Some(&proxy_url)).await.unwrap();
    let options = GcsOptions {
        endpoint: Some(proxy_url.clone()),
        ..Emulator::gcs_options(&gcs)
    };
    let store = Store::open(&Location::parse("gs://backups/x").unwrap(), &options)
        .await
        .unwrap();
    let data = testbed::pattern(20 * MIB, 6);
    let err = upload_all(&store, "flipped", &data, UploadOptions::default())
        .await
        .expect_err("a changed byte must fail the commit");
    let flipped = tampered.flipped_request.lock().unwrap().clone();
    assert!(
        flipped
            .expect("the proxy changed a chunk")
            .contains("upload_id=")
    );
    assert!(matches!(err, StorageError::StoredMismatch { .. }), "{err}");
    assert!(err.to_string().contains("CRC32C"), "{err}");
    assert_eq!(store.head("flipped").await.unwrap(), None);
}

/// A byte changed in a staged block: Azure (and Azurite) check its Content-MD5 and refuse it,
/// so the upload fails and nothing is stored.
#[tokio::test]
async fn azure_a_byte_changed_in_a_block_is_refused_and_nothing_is_stored() {
    let azurite = Azurite::start().await.unwrap();
    let plan = testbed::proxy::Tampering {
        flip_body_of: Some("comp=block&".into()),
        ..Default::default()
    };
    let (proxy, tampered) =
        testbed::proxy::tampering_proxy(format!("127.0.0.1:{}", azurite.port()), plan).await;
    let options = AzureOptions {
        endpoint: Some(format!("http://{proxy}/{}", azurite.account)),
        ..Emulator::azure_options(&azurite, &azurite.key)
    };
    let store = Store::open(&Location::parse("azblob://backups/x").unwrap(), &options)
        .await
        .unwrap();
    let data = testbed::pattern(20 * MIB, 7);
    let err = upload_all(&store, "flipped", &data, UploadOptions::default())
        .await
        .expect_err("a changed block must not be stored");
    let flipped = tampered.flipped_request.lock().unwrap().clone();
    assert!(
        flipped
            .expect("the proxy changed a block")
            .to_lowercase()
            .contains("content-md5")
    );
    assert!(
        err.to_string().contains("Md5Mismatch") || err.to_string().contains("MD5"),
        "{err}"
    );
    assert_eq!(store.head("flipped").await.unwrap(), None);
}
