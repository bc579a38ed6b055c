//! Each etcd fixture against the stock etcd tools.

use std::collections::BTreeMap;

use testbed::{Etcd, TlsFiles, free_port, snapshot_restore};

#[tokio::test]
async fn put_and_get_all() {
    let etcd = Etcd::start().await.unwrap();
    let expected = BTreeMap::from([
        ("-dash".to_string(), "-value".to_string()),
        ("a".to_string(), "1".to_string()),
        (
            "dir/key".to_string(),
            "hello world\nsecond line".to_string(),
        ),
        ("empty".to_string(), String::new()),
    ]);
    for (k, v) in &expected {
        etcd.put(k, v).await.unwrap();
    }
    assert_eq!(etcd.get_all().await.unwrap(), expected);
}

#[tokio::test]
async fn fill_random_writes_the_asked_volume() {
    let etcd = Etcd::start().await.unwrap();
    assert_eq!(etcd.fill_random(2 << 20, 100_000).await.unwrap(), 21);
    let all = etcd.get_all().await.unwrap();
    assert_eq!(all.len(), 21);
    assert!(all.keys().all(|k| k.starts_with("/fill/")));
}

#[tokio::test]
async fn tls_requires_a_client_certificate() {
    let tls = TlsFiles::generate().unwrap();
    let etcd = Etcd::start_tls(&tls).await.unwrap();
    assert!(etcd.endpoint.starts_with("https://127.0.0.1:"));
    etcd.put("k", "v").await.unwrap();

    let get = |with_cert: bool| {
        let mut c = tokio::process::Command::new(testbed::etcd_tool("etcdctl"));
        c.env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", etcd.endpoint))
            .args(["--dial-timeout=2s", "--command-timeout=3s", "--cacert"])
            .arg(&tls.ca_cert);
        if with_cert {
            c.arg("--cert")
                .arg(&tls.client_cert)
                .arg("--key")
                .arg(&tls.client_key);
        }
        c.args(["get", "k", "--print-value-only"]);
        async move { c.output().await.unwrap() }
    };
    let refused = get(false).await;
    assert!(
        !refused.status.success(),
        "etcd served a client without a certificate"
    );
    let accepted = get(true).await;
    assert!(
        accepted.status.success(),
        "{}",
        String::from_utf8_lossy(&accepted.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&accepted.stdout).trim(), "v");

    // The etcd-client connection uses the certificate too.
    let mut client = etcd.client().await.unwrap();
    assert_eq!(client.get("k", None).await.unwrap().kvs()[0].value(), b"v");
}

#[tokio::test]
async fn snapshot_save_restore_start() {
    let etcd = Etcd::start().await.unwrap();
    for i in 0..50 {
        etcd.put(&format!("key/{i}"), &format!("value {i}"))
            .await
            .unwrap();
    }
    etcd.fill_random(1 << 20, 10_000).await.unwrap();
    let before = etcd.get_all().await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let snapshot = dir.path().join("snap.db");
    let save = etcd
        .etcdctl()
        .arg("snapshot")
        .arg("save")
        .arg(&snapshot)
        .output()
        .await
        .unwrap();
    assert!(
        save.status.success(),
        "{}",
        String::from_utf8_lossy(&save.stderr)
    );

    let data_dir = dir.path().join("restored");
    let peer_url = format!("http://127.0.0.1:{}", free_port());
    snapshot_restore(&snapshot, &data_dir, "restored", &peer_url).unwrap();
    let restored = Etcd::start_on_data_dir(&data_dir, "restored", &peer_url)
        .await
        .unwrap();
    assert_eq!(restored.get_all().await.unwrap(), before);
}

#[tokio::test]
async fn snapshot_restore_checks_the_hash() {
    let etcd = Etcd::start().await.unwrap();
    etcd.put("k", "v").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let snapshot = dir.path().join("snap.db");
    let save = etcd
        .etcdctl()
        .arg("snapshot")
        .arg("save")
        .arg(&snapshot)
        .output()
        .await
        .unwrap();
    assert!(
        save.status.success(),
        "{}",
        String::from_utf8_lossy(&save.stderr)
    );

    // One flipped byte in the bolt file must fail the sha256 trailer check.
    let mut bytes = std::fs::read(&snapshot).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&snapshot, bytes).unwrap();
    let peer_url = format!("http://127.0.0.1:{}", free_port());
    let err = snapshot_restore(&snapshot, &dir.path().join("data"), "x", &peer_url)
        .unwrap_err()
        .to_string();
    assert!(err.contains("sha256"), "{err}");
}

#[tokio::test]
async fn killed_member_is_gone() {
    let mut etcd = Etcd::start().await.unwrap();
    etcd.kill();
    let get = etcd
        .etcdctl()
        .args(["--command-timeout=1s", "get", "k"])
        .output()
        .await
        .unwrap();
    assert!(!get.status.success());
}
