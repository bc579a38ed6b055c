//! Running the real `etcd-backup` binary against real etcd and Garage.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;

use testbed::Etcd;
use testbed::cli::without_ambient_aws;

pub use testbed::cli::Run;

/// Runs `etcd-backup` with a clean AWS environment plus `env`.
pub async fn run(args: &[&str], env: &[(String, String)]) -> Run {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_etcd-backup"));
    without_ambient_aws(command.args(args)).envs(env.iter().map(|(k, v)| (k, v)));
    command.output().await.unwrap().into()
}

pub fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Sample data with small, empty-ish, binary-safe and large values.
pub async fn write_sample_keys(etcd: &Etcd) -> BTreeMap<String, String> {
    let mut expected = BTreeMap::new();
    for i in 0..200 {
        let value = if i % 50 == 0 {
            "x".repeat(100_000)
        } else {
            format!("value-{i}")
        };
        etcd.put(&format!("/sample/{i:03}"), &value).await.unwrap();
        expected.insert(format!("/sample/{i:03}"), value);
    }
    expected
}

/// Restores `snapshot` with stock etcdutl/etcdctl (hash check on), starts etcd on it and
/// returns every key.
pub async fn restore_and_read(snapshot: &Path) -> BTreeMap<String, String> {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("restored");
    let peer = format!("http://127.0.0.1:{}", testbed::free_port());
    testbed::snapshot_restore(snapshot, &data_dir, "restored", &peer).unwrap();
    let etcd = Etcd::start_on_data_dir(&data_dir, "restored", &peer)
        .await
        .unwrap();
    etcd.get_all().await.unwrap()
}

/// `etcdctl snapshot save` into `file`, as a user without this tool would back up.
pub fn etcdctl_snapshot_save(etcd: &Etcd, file: &Path) {
    let saved = std::process::Command::new(testbed::etcd_tool("etcdctl"))
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", &etcd.endpoint, "snapshot", "save"])
        .arg(file)
        .output()
        .unwrap();
    assert!(
        saved.status.success(),
        "{}",
        String::from_utf8_lossy(&saved.stderr)
    );
}
