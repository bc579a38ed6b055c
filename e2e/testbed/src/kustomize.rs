//! The shipped Kustomize bases and overlays, rendered by a real `kustomize` (`kubectl kustomize`),
//! for the render tests and for installing the operators on the bed exactly as users do.
//!
//! Needs kustomize v4 or later (kubectl 1.21+, which can take a directory as a resource): the
//! bed's own `kubectl` (built by `e2e/cluster/build.sh`), else the one on `PATH`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// The images the Dockerfile builds, one per target; the bed has each as `localhost/<name>:dev`.
pub const IMAGES: [&str; 4] = [
    "etcd-operator",
    "etcd-backup-operator",
    "etcd-restore-operator",
    "etcd-backup",
];

/// The documents `kustomize build dir` renders.
pub fn render(dir: &Path) -> Result<Vec<Value>> {
    let output = Command::new(kubectl()?)
        .arg("kustomize")
        .arg(dir)
        .output()
        .context("cannot run kubectl kustomize")?;
    if !output.status.success() {
        bail!(
            "kubectl kustomize {} failed: {}",
            dir.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let text = String::from_utf8(output.stdout)?;
    crate::yaml_documents(&text).context("kustomize printed something not YAML")
}

/// `dir` (a base or overlay of this repository) as the bed runs it: an overlay of users' kind
/// that moves everything to namespace `ns` and points the images at this build's
/// (`localhost/<name>:dev`, never pulled). Nothing else is changed.
pub fn render_for_bed(dir: &Path, ns: &str) -> Result<Vec<Value>> {
    let root = root();
    let dir = dir
        .canonicalize()
        .with_context(|| format!("{}", dir.display()))?;
    let inside = dir
        .strip_prefix(&root)
        .with_context(|| format!("{} is not in this repository", dir.display()))?;
    let scratch_parent = root.join("target/kustomize-overlays");
    std::fs::create_dir_all(&scratch_parent)?;
    let scratch = tempfile::tempdir_in(&scratch_parent)?;
    let images: String = IMAGES
        .iter()
        .map(|name| format!("  - {{name: {name}, newName: localhost/{name}, newTag: dev}}\n"))
        .collect();
    let kustomization = format!(
        "resources:\n  - ../../../{resource}\nnamespace: {ns}\nimages:\n{images}\
         patches:\n\
         \x20 - target: {{kind: Deployment}}\n\
         \x20   patch: |-\n\
         \x20     - {{op: add, path: /spec/template/spec/containers/0/imagePullPolicy, value: Never}}\n\
         \x20 - target: {{kind: Deployment, name: etcd-restore-operator}}\n\
         \x20   patch: |-\n\
         \x20     apiVersion: apps/v1\n\
         \x20     kind: Deployment\n\
         \x20     metadata: {{name: etcd-restore-operator}}\n\
         \x20     spec:\n\
         \x20       template:\n\
         \x20         spec:\n\
         \x20           containers:\n\
         \x20             - name: operator\n\
         \x20               env:\n\
         \x20                 - {{name: BACKUP_IMAGE, value: localhost/etcd-backup:dev}}\n\
         \x20 - target: {{kind: Deployment, name: etcd-backup-operator}}\n\
         \x20   patch: |-\n\
         \x20     apiVersion: apps/v1\n\
         \x20     kind: Deployment\n\
         \x20     metadata: {{name: etcd-backup-operator}}\n\
         \x20     spec:\n\
         \x20       template:\n\
         \x20         spec:\n\
         \x20           containers:\n\
         \x20             - name: operator\n\
         \x20               env:\n\
         \x20                 - {{name: BACKUP_IMAGE, value: localhost/etcd-backup:dev}}\n",
        resource = inside.display(),
    );
    std::fs::write(scratch.path().join("kustomization.yaml"), kustomization)?;
    render(scratch.path())
}

/// Files of this repository (paths from its root, e.g. `examples/mysql/statefulset.yaml`) as the
/// bed runs them: an overlay that moves them to namespace `ns` and renames the images per
/// `images` (`(name in the file, bed image name, bed tag)`). Nothing else is changed.
pub fn render_files_for_bed(
    files: &[&str],
    ns: &str,
    images: &[(&str, &str, &str)],
) -> Result<Vec<Value>> {
    let scratch_parent = root().join("target/kustomize-overlays");
    std::fs::create_dir_all(&scratch_parent)?;
    let scratch = tempfile::tempdir_in(&scratch_parent)?;
    // Copied byte for byte: kustomize loads no single file from outside the overlay's directory.
    let mut resources = String::new();
    for (i, file) in files.iter().enumerate() {
        let copy = format!("{i}-{}", file.rsplit('/').next().unwrap_or(file));
        std::fs::copy(root().join(file), scratch.path().join(&copy))
            .with_context(|| file.to_string())?;
        resources.push_str(&format!("  - {copy}\n"));
    }
    let images: String = images
        .iter()
        .map(|(name, new_name, tag)| {
            format!("  - {{name: {name}, newName: {new_name}, newTag: \"{tag}\"}}\n")
        })
        .collect();
    let kustomization = format!("resources:\n{resources}namespace: {ns}\nimages:\n{images}");
    std::fs::write(scratch.path().join("kustomization.yaml"), kustomization)?;
    render(scratch.path())
}

/// A `kubectl` whose kustomize is v4 or later: the bed's when built, else the one on `PATH`.
fn kubectl() -> Result<&'static Path> {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let found = FOUND.get_or_init(|| {
        let bed = crate::kube::bin_dir().join("kubectl");
        let kubectl = if bed.is_file() {
            bed
        } else {
            PathBuf::from("kubectl")
        };
        let output = Command::new(&kubectl)
            .args(["version", "--client"])
            .output()
            .map_err(|e| format!("cannot run {} ({e})", kubectl.display()))?;
        let text = String::from_utf8_lossy(&output.stdout);
        let version = text
            .lines()
            .find_map(|l| l.strip_prefix("Kustomize Version: v"))
            .unwrap_or("none");
        match version
            .split('.')
            .next()
            .and_then(|m| m.parse::<u32>().ok())
        {
            Some(major) if major >= 4 => Ok(kubectl),
            _ => Err(format!(
                "{} has kustomize {version}; the render needs v4 or later (kubectl 1.21+)",
                kubectl.display()
            )),
        }
    });
    match found {
        Ok(kubectl) => Ok(kubectl),
        Err(why) => bail!("{why}"),
    }
}
