//! The Helm chart (`deploy/helm/etcd-backup-suite`), run with a real `helm` built from its Go
//! module by `e2e/cluster/build.sh` (version in `e2e/cluster/versions.sh`): rendered for the
//! render tests, linted, and installed and upgraded on the bed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

/// The Kubernetes version `helm template` and `helm lint` render for (the newest the bed runs).
pub const KUBE_VERSION: &str = "1.37.0";

/// The chart's directory.
pub fn chart() -> PathBuf {
    crate::kustomize::root().join("deploy/helm/etcd-backup-suite")
}

/// The `helm` that build.sh built.
pub fn binary() -> PathBuf {
    crate::kube::versions_path("helm_bin").join("helm")
}

/// `helm` with ARGS, its configuration and caches in a directory of this process (never the
/// user's), succeeded or the error with what it said.
pub fn run(args: &[&str], kubeconfig: Option<&Path>) -> Result<Output> {
    let helm = binary();
    if !helm.is_file() {
        bail!(
            "no helm at {}: e2e/cluster/build.sh builds it",
            helm.display()
        );
    }
    let home = std::env::temp_dir().join(format!("testbed-helm-{}", std::process::id()));
    let mut command = Command::new(&helm);
    command
        .args(args)
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env_remove("KUBECONFIG");
    if let Some(kubeconfig) = kubeconfig {
        command.env("KUBECONFIG", kubeconfig);
    }
    let output = command
        .output()
        .with_context(|| format!("cannot run {}", helm.display()))?;
    if !output.status.success() {
        bail!(
            "helm {} failed: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout).trim(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(output)
}

/// The documents `helm template` renders for release `release` in namespace `ns` with the
/// `--set` values `set` (`key=value`; an entry starting with `--`, such as
/// `--set-string=key=true`, is passed as it is).
pub fn render(release: &str, ns: &str, set: &[&str]) -> Result<Vec<Value>> {
    let chart = chart();
    let mut args = vec![
        "template",
        release,
        chart.to_str().context("chart path")?,
        "--namespace",
        ns,
        // helm template assumes an old Kubernetes unless told; the chart needs 1.35 or later.
        "--kube-version",
        KUBE_VERSION,
    ];
    for value in set {
        if value.starts_with("--") {
            args.push(value);
        } else {
            args.extend(["--set", value]);
        }
    }
    let output = run(&args, None)?;
    let text = String::from_utf8(output.stdout)?;
    crate::yaml_documents(&text).context("helm template printed something not YAML")
}
