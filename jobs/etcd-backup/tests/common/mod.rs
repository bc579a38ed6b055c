//! Running the real `etcd-backup` binary against real etcd and Garage.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;

use testbed::{Etcd, Garage};

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    #[track_caller]
    pub fn ok(self) -> Self {
        assert_eq!(
            self.code, 0,
            "etcd-backup failed:\n{}\n{}",
            self.stdout, self.stderr
        );
        self
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(self.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", self.stdout))
    }
}

/// Runs `etcd-backup` with a clean AWS environment plus `env`.
pub async fn run(args: &[&str], env: &[(String, String)]) -> Run {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_etcd-backup"));
    command
        .args(args)
        // Never pick up the machine's AWS files or instance metadata.
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env_remove("AWS_ENDPOINT_URL")
        .env_remove("AWS_PROFILE")
        .env("AWS_CONFIG_FILE", "/nonexistent")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
        .env("AWS_EC2_METADATA_DISABLED", "true");
    for (k, v) in env {
        command.env(k, v);
    }
    let Output {
        status,
        stdout,
        stderr,
    } = command.output().await.unwrap();
    Run {
        code: status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

/// `--s3-*` flags and credentials for a Garage instance.
pub fn s3_args(garage: &Garage) -> (Vec<String>, Vec<(String, String)>) {
    let args = vec![
        "--s3-endpoint".into(),
        garage.endpoint.clone(),
        "--s3-region".into(),
        garage.region.clone(),
        "--s3-force-path-style".into(),
    ];
    let env = vec![
        ("AWS_ACCESS_KEY_ID".into(), garage.access_key.clone()),
        ("AWS_SECRET_ACCESS_KEY".into(), garage.secret_key.clone()),
    ];
    (args, env)
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
