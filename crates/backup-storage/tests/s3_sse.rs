//! S3 server-side encryption against Garage: which modes it accepts, and SSE-C end to end
//! (multipart and single-request uploads, ranged resumes, manifests, HEAD), where the object
//! reads back only with its key.

use std::time::Duration;

use backup_storage::{
    CustomerKey, Location, S3Options, ServerSideEncryption, StorageError, Store, UploadOptions,
};
use testbed::Garage;

const MIB: usize = 1024 * 1024;

async fn open(garage: &Garage, sse: ServerSideEncryption) -> Result<Store, StorageError> {
    open_at(garage, &garage.endpoint, sse).await
}

/// Garage's bucket, reached at `endpoint` (Garage itself, or a proxy in front of it).
async fn open_at(
    garage: &Garage,
    endpoint: &str,
    sse: ServerSideEncryption,
) -> Result<Store, StorageError> {
    let options = S3Options {
        max_attempts: 2,
        abort_retry_window: Duration::from_secs(30),
        server_side_encryption: sse,
        ..S3Options::s3_compatible(
            endpoint,
            &garage.region,
            &garage.access_key,
            &garage.secret_key,
        )
    };
    let location = Location::S3 {
        bucket: garage.bucket.clone(),
        key: String::new(),
    };
    Store::open(&location, &options).await
}

async fn upload(store: &Store, key: &str, data: &[u8]) -> Result<(), StorageError> {
    let mut upload = store.upload(key, UploadOptions::default()).await?;
    for chunk in data.chunks(64 * 1024) {
        upload.write(chunk).await?;
    }
    upload.commit().await.map(|_| ())
}

async fn read_all(store: &Store, key: &str) -> Result<Vec<u8>, StorageError> {
    let mut download = store.download(key).await?;
    let mut out = Vec::new();
    while let Some(chunk) = download.next_chunk().await? {
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

fn data(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 253) as u8).collect()
}

#[tokio::test]
async fn sse_c_objects_read_back_only_with_their_key() {
    let garage = Garage::start().await.unwrap();
    let key = CustomerKey::from_file_bytes(&[42u8; 32]).unwrap();
    let other = CustomerKey::from_file_bytes(&[43u8; 32]).unwrap();
    let store = open(&garage, ServerSideEncryption::Customer(key))
        .await
        .unwrap();
    let big = data(17 * MIB + 5);
    upload(&store, "sse-c/big", &big).await.unwrap();
    upload(&store, "sse-c/small", b"hello").await.unwrap();
    store
        .put_small(
            "sse-c/big.manifest.json",
            b"{}".to_vec().into(),
            "application/json",
        )
        .await
        .unwrap();
    assert_eq!(read_all(&store, "sse-c/big").await.unwrap(), big);
    assert_eq!(read_all(&store, "sse-c/small").await.unwrap(), b"hello");
    assert_eq!(
        store
            .get_small("sse-c/big.manifest.json")
            .await
            .unwrap()
            .unwrap(),
        &b"{}"[..]
    );
    assert_eq!(
        store.head("sse-c/big").await.unwrap().unwrap().size,
        big.len() as u64
    );

    // Without the key, or with another: refused by the server.
    let plain = open(&garage, ServerSideEncryption::BucketDefault)
        .await
        .unwrap();
    let wrong = open(&garage, ServerSideEncryption::Customer(other))
        .await
        .unwrap();
    for (what, store) in [("no key", &plain), ("another key", &wrong)] {
        for object in ["sse-c/big", "sse-c/small"] {
            assert!(read_all(store, object).await.is_err(), "{what}: {object}");
        }
    }
}

/// A download cut off by the server's restart resumes with a ranged GET that carries the key
/// too (without it the server refuses the resume). The object is larger than what loopback's
/// socket buffers can hold when the server dies (Linux's defaults: 6 MiB received, 4 MiB
/// sent), so the rest can only come from the resume.
#[tokio::test]
async fn an_sse_c_download_resumes_with_its_key() {
    let garage = Garage::start().await.unwrap();
    let key = CustomerKey::from_file_bytes(&[42u8; 32]).unwrap();
    let store = open(&garage, ServerSideEncryption::Customer(key))
        .await
        .unwrap();
    let big = data(32 * MIB + 3);
    upload(&store, "sse-c/resumed", &big).await.unwrap();
    let mut download = store.download("sse-c/resumed").await.unwrap();
    let mut got = Vec::new();
    while got.len() < MIB {
        got.extend_from_slice(&download.next_chunk().await.unwrap().unwrap());
    }
    let restarted = garage.crash_and_restart(Duration::from_secs(2));
    while let Some(chunk) = download.next_chunk().await.unwrap() {
        got.extend_from_slice(&chunk);
    }
    let _garage = restarted.await.unwrap();
    assert_eq!(got.len(), big.len());
    assert!(got == big, "the resumed download differs from the object");
}

/// SSE-S3 and SSE-KMS are the server's business: Garage 2.5 accepts the headers and stores
/// the object as usual (it has neither mode), so the test checks what is sent, through a
/// recording proxy: the mode on the requests that create an object, nothing on its parts (AWS
/// refuses it there), and the object reads back.
#[tokio::test]
async fn server_managed_encryption_is_asked_on_the_requests_that_create_objects() {
    let garage = Garage::start().await.unwrap();
    let (proxy, record) = testbed::proxy::tampering_proxy(
        garage.endpoint.trim_start_matches("http://").to_string(),
        Default::default(),
    )
    .await;
    for (sse, headers) in [
        (
            ServerSideEncryption::S3Managed,
            &["x-amz-server-side-encryption: aes256"][..],
        ),
        (
            ServerSideEncryption::Kms {
                key_id: Some("backup-key".into()),
            },
            &[
                "x-amz-server-side-encryption: aws:kms",
                "x-amz-server-side-encryption-aws-kms-key-id: backup-key",
            ][..],
        ),
    ] {
        record.requests.lock().unwrap().clear();
        let store = open_at(&garage, &format!("http://{proxy}"), sse.clone())
            .await
            .unwrap();
        let big = data(9 * MIB);
        upload(&store, "sse/big", &big).await.unwrap();
        upload(&store, "sse/small", b"x").await.unwrap();
        assert_eq!(read_all(&store, "sse/big").await.unwrap(), big);
        let requests = record.requests.lock().unwrap().clone();
        let lower: Vec<String> = requests.iter().map(|r| r.to_lowercase()).collect();
        let creating: Vec<&String> = lower
            .iter()
            .filter(|r| {
                r.starts_with("post ") && r.contains("?uploads")
                    || (r.starts_with("put ") && !r.contains("partnumber="))
            })
            .collect();
        assert_eq!(creating.len(), 2, "{sse:?}: {requests:#?}");
        for request in creating {
            for header in headers {
                assert!(request.contains(header), "{sse:?}: {request}");
            }
        }
        let parts: Vec<&String> = lower.iter().filter(|r| r.contains("partnumber=")).collect();
        assert!(!parts.is_empty(), "{requests:#?}");
        for part in parts {
            assert!(!part.contains("x-amz-server-side-encryption"), "{part}");
        }
    }
}
