//! What the bed runs is what a user would run: every distroless target of the `Dockerfile` has an
//! image in the bed's containerd whose files are exactly distroless/cc's runtime file set plus
//! the binary at the stage's ENTRYPOINT, byte for byte the binary this build made, with the
//! stage's USER, ENTRYPOINT and distroless' environment. The images are read back from containerd
//! (`ctr images export`), not from the script that made them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use testbed::image::{DistrolessCcRoot, Dockerfile};
use testbed::kube::KubeTestbed;
use testbed::kustomize::{IMAGES, root};

fn ctr(args: &[&str]) {
    let socket = testbed::cluster::bed_dir().join("containerd/containerd.sock");
    let output = Command::new("ctr")
        .arg("--address")
        .arg(&socket)
        .args(["-n", "k8s.io"])
        .args(args)
        .output()
        .expect("ctr");
    assert!(
        output.status.success(),
        "ctr {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn blob(dir: &Path, digest: &str) -> PathBuf {
    dir.join("blobs/sha256")
        .join(digest.strip_prefix("sha256:").unwrap())
}

fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// `tar` on a (gzip) layer. umoci's layers end without tar's two end-of-archive blocks, which
/// containerd (like Docker) accepts and GNU tar reports as "Unexpected EOF in archive" after
/// reading every entry; that one complaint is tolerated. The binary's bytes are compared in full
/// by the caller, so a truncated binary cannot pass.
fn tar_layer(args: &[&str], layer: &Path) -> Vec<u8> {
    let output = Command::new("tar").args(args).arg(layer).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let tolerated = |l: &str| {
        l.is_empty()
            || l.contains("Removing leading")
            || l.contains("Unexpected EOF in archive")
            || l.contains("Error is not recoverable")
    };
    assert!(
        output.status.success() || stderr.lines().all(tolerated),
        "tar {args:?} {}: {stderr}",
        layer.display()
    );
    output.stdout
}

/// The entries of a layer, normalised like [`DistrolessCcRoot::paths`].
fn layer_paths(layer: &Path) -> BTreeSet<String> {
    String::from_utf8(tar_layer(&["-tz", "-f"], layer))
        .unwrap()
        .lines()
        .map(|l| {
            l.trim_start_matches("./")
                .trim_start_matches('/')
                .trim_end_matches('/')
                .to_string()
        })
        .filter(|l| !l.is_empty() && l != ".")
        .collect()
}

fn layer_file(layer: &Path, path: &str) -> Vec<u8> {
    tar_layer(&["-xzO", path, "-f"], layer)
}

/// Where the bed took its binaries from: this build's `target/<profile>`.
fn binaries_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

#[tokio::test]
async fn the_bed_runs_the_dockerfile_s_distroless_images_of_this_build() {
    if std::env::var_os("KUBECONFIG").is_some() {
        eprintln!("KUBECONFIG names another cluster: its images are not the bed's; not checked");
        return;
    }
    // Starts the bed (and imports the images) if this test runs first.
    KubeTestbed::with_kubelet().await.unwrap();
    let dockerfile = Dockerfile::read(&root().join("Dockerfile")).unwrap();
    let mut checked = Vec::new();
    for target in IMAGES {
        let stage = dockerfile.stage(target).unwrap();
        assert!(
            stage.base.starts_with("gcr.io/distroless/cc-debian12"),
            "{target}: {}",
            stage.base
        );
        let entrypoint = stage.entrypoint().unwrap();

        let dir = tempfile::tempdir().unwrap();
        let tar = dir.path().join("image.tar");
        let image = format!("localhost/{target}:dev");
        ctr(&["images", "export", tar.to_str().unwrap(), &image]);
        let status = Command::new("tar")
            .arg("-xf")
            .arg(&tar)
            .arg("-C")
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(status.success());
        let index = json(&dir.path().join("index.json"));
        let manifest = json(&blob(
            dir.path(),
            index["manifests"][0]["digest"].as_str().unwrap(),
        ));
        let config = json(&blob(
            dir.path(),
            manifest["config"]["digest"].as_str().unwrap(),
        ));
        let config = &config["config"];
        assert_eq!(config["User"], stage.user().unwrap(), "{image}");
        assert_eq!(
            config["Entrypoint"],
            serde_json::json!(entrypoint),
            "{image}"
        );
        let env: Vec<&str> = config["Env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert!(
            env.contains(&"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"),
            "{image}: {env:?}"
        );

        let layers = manifest["layers"].as_array().unwrap();
        assert_eq!(layers.len(), 1, "{image}");
        let layer = blob(dir.path(), layers[0]["digest"].as_str().unwrap());
        let expected = DistrolessCcRoot::build().unwrap();
        let binary = binaries_dir().join(target);
        expected.install(&binary, &entrypoint[0]).unwrap();
        let expected = expected.paths().unwrap();
        let found = layer_paths(&layer);
        let extra: Vec<_> = found.difference(&expected).collect();
        let missing: Vec<_> = expected.difference(&found).collect();
        assert!(
            extra.is_empty() && missing.is_empty(),
            "{image}: not in the Dockerfile's image {extra:?}; missing {missing:?}"
        );
        let inside = layer_file(&layer, entrypoint[0].trim_start_matches('/'));
        assert!(
            inside == std::fs::read(&binary).unwrap(),
            "{image}: {} is not this build's {}",
            entrypoint[0],
            binary.display()
        );
        checked.push(image);
    }
    assert_eq!(checked.len(), 4);
}
