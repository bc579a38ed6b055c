//! Failures give one clear line, the right exit code, and leave no object behind.

mod common;

use common::*;
use testbed::{Etcd, Garage, TlsFiles};

#[tokio::test]
async fn wrong_credentials_missing_bucket_and_unreachable_endpoints() {
    let garage = Garage::start().await.unwrap();
    let etcd = Etcd::start().await.unwrap();
    let (flags, env) = garage.cli_args();
    let save = |url: String, endpoint: String, flags: Vec<String>, env: Vec<(String, String)>| async move {
        let mut args = vec![
            "save".to_string(),
            "--endpoints".into(),
            endpoint,
            "--to".into(),
            url,
        ];
        args.extend(flags);
        run(&strs(&args), &env).await
    };
    let url = format!("s3://{}/etcd.backup", garage.bucket);

    let wrong_key = vec![
        (
            "AWS_ACCESS_KEY_ID".to_string(),
            "GK0123456789abcdef01234567".to_string(),
        ),
        ("AWS_SECRET_ACCESS_KEY".to_string(), "0".repeat(64)),
    ];
    let r = save(url.clone(), etcd.endpoint.clone(), flags.clone(), wrong_key).await;
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("S3 rejected the credentials"),
        "{}",
        r.stderr
    );

    let r = save(
        "s3://missing-bucket/etcd.backup".into(),
        etcd.endpoint.clone(),
        flags.clone(),
        env.clone(),
    )
    .await;
    assert_eq!(r.code, 1);
    assert!(
        r.stderr
            .contains("bucket \"missing-bucket\" does not exist"),
        "{}",
        r.stderr
    );

    let mut dead_s3 = flags.clone();
    dead_s3[1] = format!("http://127.0.0.1:{}", testbed::free_port());
    let r = save(url.clone(), etcd.endpoint.clone(), dead_s3, env.clone()).await;
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains("cannot reach S3 endpoint"),
        "{}",
        r.stderr
    );

    let dead_etcd = format!("http://127.0.0.1:{}", testbed::free_port());
    let r = save(url.clone(), dead_etcd, flags.clone(), env.clone()).await;
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("cannot reach etcd"), "{}", r.stderr);

    // None of these left an object behind.
    let mut list = vec!["list", &url, "--output", "json"];
    list.extend(strs(&flags));
    assert_eq!(run(&list, &env).await.ok().stdout.trim(), "");
}

#[tokio::test]
async fn usage_errors_exit_2() {
    let r = run(&["save", "--to", "/tmp/x"], &[]).await;
    assert_eq!(r.code, 2, "{}", r.stderr);
    let r = run(&["verify", "wasb://container/key"], &[]).await;
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("unsupported scheme"), "{}", r.stderr);
}

#[tokio::test]
async fn the_reachable_member_is_used_when_another_is_down() {
    let etcd = Etcd::start().await.unwrap();
    write_sample_keys(&etcd).await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}/b", dir.path().display());
    let endpoints = format!(
        "http://127.0.0.1:{},{}",
        testbed::free_port(),
        etcd.endpoint
    );
    let saved = run(
        &[
            "save",
            "--endpoints",
            &endpoints,
            "--to",
            &url,
            "--output",
            "json",
        ],
        &[],
    )
    .await
    .ok()
    .json();
    assert_eq!(saved["endpoint"], etcd.endpoint.as_str());
}

#[tokio::test]
async fn tls_with_client_certificates() {
    let tls = TlsFiles::generate().unwrap();
    let etcd = Etcd::start_tls(&tls).await.unwrap();
    etcd.put("/secure", "yes").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}/tls.backup", dir.path().display());
    let (ca, cert, key) = (
        tls.ca_cert.to_str().unwrap(),
        tls.client_cert.to_str().unwrap(),
        tls.client_key.to_str().unwrap(),
    );

    let with_certs = [
        "save",
        "--endpoints",
        &etcd.endpoint,
        "--to",
        &url,
        "--cacert",
        ca,
        "--cert",
        cert,
        "--key",
        key,
    ];
    run(&with_certs, &[]).await.ok();
    run(&["verify", &url], &[]).await.ok();

    // Without a client certificate the server refuses the handshake.
    let other = format!("file://{}/refused.backup", dir.path().display());
    let r = run(
        &[
            "save",
            "--endpoints",
            &etcd.endpoint,
            "--to",
            &other,
            "--cacert",
            ca,
        ],
        &[],
    )
    .await;
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("etcd"), "{}", r.stderr);
    // Without the CA the server certificate is not trusted.
    let r = run(
        &["save", "--endpoints", &etcd.endpoint, "--to", &other],
        &[],
    )
    .await;
    assert_eq!(r.code, 1);
    assert!(!dir.path().join("refused.backup").exists());
}
