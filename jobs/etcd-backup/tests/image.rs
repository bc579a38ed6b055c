//! The `etcd-backup` image (Dockerfile target `etcd-backup`): run as the image runs it, in a root
//! file system with only distroless/cc's libraries and as its non-root user (see
//! `testbed::image`), the binary backs up a real etcd to a real S3 server, and the backup
//! verifies from outside. The Dockerfile's structure is checked by the operator's
//! `tests/image.rs`.

mod common;

use std::path::Path;

use common::*;
use testbed::image::{Dockerfile, run_as_in_image};
use testbed::{Etcd, Garage};

#[tokio::test]
async fn etcd_backup_in_its_image_file_set_backs_up_to_s3() {
    let dockerfile = concat!(env!("CARGO_MANIFEST_DIR"), "/../../Dockerfile");
    let file = Dockerfile::read(Path::new(dockerfile)).unwrap();
    let stage = file.stage("etcd-backup").unwrap();
    let binary = Path::new(env!("CARGO_BIN_EXE_etcd-backup"));

    let (etcd, garage) = (Etcd::start().await.unwrap(), Garage::start().await.unwrap());
    write_sample_keys(&etcd).await;
    let url = format!("s3://{}/image/etcd.backup.zst", garage.bucket);
    let (flags, env) = garage.cli_args();
    let mut save = vec!["save", "--endpoints", &etcd.endpoint, "--to", &url];
    save.extend(["--compress", "zstd", "--output", "json"]);
    save.extend(strs(&flags));
    let saved = run_as_in_image(stage, binary, &save, &env).unwrap();
    assert!(saved.status.success(), "{saved:?}");
    let saved: serde_json::Value = serde_json::from_slice(&saved.stdout).unwrap();

    // Read back by the same binary outside the image.
    let mut verify = vec!["verify", &url, "--output", "json"];
    verify.extend(strs(&flags));
    let verified = run(&verify, &env).await.ok().json();
    assert!(saved["sha256"].is_string(), "{saved}");
    assert_eq!(verified["sha256"], saved["sha256"]);
    assert_eq!(verified["manifest"], true);
}
