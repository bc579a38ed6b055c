//! The Garage fixture against an independent S3 client, the aws CLI.

use std::time::Instant;

use testbed::Garage;

/// Runs `aws ARGS` against `garage`; its stdout.
async fn aws(garage: &Garage, args: &[&str]) -> String {
    let out = tokio::process::Command::new("aws")
        .envs(garage.env())
        .arg(format!("--endpoint-url={}", garage.endpoint))
        .args(args)
        .output()
        .await
        .expect("run aws (e2e/install-deps.sh installs it)");
    assert!(
        out.status.success(),
        "aws {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn objects_survive_kill_and_restart() {
    let started = Instant::now();
    let mut garage = Garage::start().await.unwrap();
    eprintln!("Garage started in {:?}", started.elapsed());
    assert_eq!(garage.bucket, "backups");
    assert_eq!(garage.region, "garage");

    let file = garage.dir().join("small.txt");
    std::fs::write(&file, "hello garage").unwrap();
    let url = format!("s3://{}/dir/small.txt", garage.bucket);
    aws(&garage, &["s3", "cp", file.to_str().unwrap(), &url]).await;
    let bucket = format!("s3://{}/", garage.bucket);
    assert!(
        aws(&garage, &["s3", "ls", "--recursive", &bucket])
            .await
            .contains("dir/small.txt")
    );

    garage.kill();
    let port = garage.endpoint.rsplit(':').next().unwrap();
    assert!(std::net::TcpStream::connect(format!("127.0.0.1:{port}")).is_err());

    let started = Instant::now();
    garage.restart().await.unwrap();
    eprintln!("Garage restarted in {:?}", started.elapsed());
    assert!(
        aws(&garage, &["s3", "ls", "--recursive", &bucket])
            .await
            .contains("dir/small.txt")
    );
    assert_eq!(aws(&garage, &["s3", "cp", &url, "-"]).await, "hello garage");
}

#[tokio::test]
async fn create_bucket_grants_the_test_key() {
    let garage = Garage::start().await.unwrap();
    garage.create_bucket("second").await.unwrap();
    let file = garage.dir().join("f");
    std::fs::write(&file, "x").unwrap();
    aws(
        &garage,
        &["s3", "cp", file.to_str().unwrap(), "s3://second/f"],
    )
    .await;
    assert!(
        aws(&garage, &["s3", "ls", "s3://second/"])
            .await
            .contains(" f\n")
    );
    let uploads = aws(
        &garage,
        &["s3api", "list-multipart-uploads", "--bucket", "second"],
    )
    .await;
    assert!(!uploads.contains("UploadId"), "{uploads}");
}
