//! The cluster operator manages members; it never touches backup storage, so it links neither
//! the storage crate nor the AWS SDK (the layout shows the architecture).

#[test]
fn the_cluster_operator_links_no_storage_and_no_aws_sdk() {
    let output = std::process::Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "--locked",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .args(["-p", "etcd-operator", "--format", "{p}"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let tree = String::from_utf8(output.stdout).unwrap();
    assert!(tree.contains("backup-cli"), "{tree}");
    for forbidden in [
        "backup-storage",
        "aws-sdk-s3",
        "aws-config",
        "etcd-snapshot",
    ] {
        assert!(
            !tree.lines().any(|l| l.starts_with(forbidden)),
            "etcd-operator depends on {forbidden}:\n{tree}"
        );
    }
}
