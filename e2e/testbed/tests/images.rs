//! What the bed runs is what a user would run: every distroless target of the `Dockerfile` has an
//! image in the bed's containerd whose files are exactly distroless/cc's runtime file set plus
//! the binary at the stage's ENTRYPOINT, byte for byte the binary this build made, with the
//! stage's USER, ENTRYPOINT and distroless' environment. The images are read back from containerd
//! (`ctr images export`), not from the script that made them. The `mysql-backup` target, a
//! Debian image, is checked package by package (see its test for what the bed cannot reproduce).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use testbed::image::{DistrolessCcRoot, Dockerfile};
use testbed::kube::KubeTestbed;
use testbed::kustomize::{IMAGES, root};

fn ctr(args: &[&str]) {
    let socket = testbed::cluster::bed_dir().join("containerd/containerd.sock");
    let output = Command::new(testbed::cluster::ctr_binary())
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

/// An image read back from the bed's containerd (`ctr images export`), unpacked.
struct Exported {
    dir: tempfile::TempDir,
    image: String,
    manifest: Value,
    /// The image config's `config` (User, Entrypoint, Env).
    config: Value,
}

impl Exported {
    fn new(image: &str) -> Exported {
        let dir = tempfile::tempdir().unwrap();
        let tar = dir.path().join("image.tar");
        // `--local`: through the transfer API (the default), containerd 2.2's `ctr` can close
        // the output file while the stream is still being copied into it and exit 0 all the
        // same ("error copying stream ... file already closed"), leaving a truncated archive
        // whenever two exports overlap. `--local` reads the content store itself.
        ctr(&["images", "export", "--local", tar.to_str().unwrap(), image]);
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
        ))["config"]
            .clone();
        Exported {
            dir,
            image: image.to_string(),
            manifest,
            config,
        }
    }

    /// The image's one layer (the bed's images have one).
    fn only_layer(&self) -> PathBuf {
        let layers = self.manifest["layers"].as_array().unwrap();
        assert_eq!(layers.len(), 1, "{}", self.image);
        blob(self.dir.path(), layers[0]["digest"].as_str().unwrap())
    }
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

        let image = format!("localhost/{target}:dev");
        let exported = Exported::new(&image);
        let config = &exported.config;
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

        let layer = exported.only_layer();
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

/// The words after `flag` in `text` up to the next `&&`, options (`-...`) left out.
fn words_after<'a>(text: &'a str, flag: &str) -> Vec<&'a str> {
    let Some(at) = text.find(flag) else {
        return Vec::new();
    };
    text[at + flag.len()..]
        .split("&&")
        .next()
        .unwrap()
        .split_whitespace()
        .filter(|w| !w.starts_with('-') && *w != "\\")
        .collect()
}

/// `Package` -> `Version` of the installed packages in a dpkg status file.
fn installed(status: &str) -> std::collections::BTreeMap<String, String> {
    status
        .split("\n\n")
        .filter(|stanza| stanza.contains("\nStatus: install ok installed"))
        .filter_map(|stanza| {
            let field = |name: &str| {
                stanza
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(str::to_string)
            };
            Some((field("Package: ")?, field("Version: ")?))
        })
        .collect()
}

/// This machine's version of `package` (the tests run its MariaDB tools as processes).
fn host_version(package: &str) -> String {
    let output = Command::new("dpkg-query")
        .args(["-W", "-f=${Version}", package])
        .output()
        .unwrap();
    assert!(output.status.success(), "{package} is not installed here");
    String::from_utf8(output.stdout).unwrap()
}

/// The Dockerfile's `mysql-backup` target is debian:bookworm-slim plus the packages its RUN
/// installs, the user its `useradd` makes and the binary. The bed makes that image from Debian
/// 12's packages with mmdebstrap (e2e/cluster/images.sh). Checked against the image read back
/// from containerd: USER and ENTRYPOINT as the stage says; the binary byte for byte this
/// build's; every package the stage installs is installed, `mariadb-*` at this machine's
/// version (the tools the other tests run); every path those packages ship is in the image
/// except documentation, man pages and locales (bookworm-slim's dpkg configuration leaves
/// those out too); `nonroot` has the stage's uid, gid and shell; apt's lists are gone, as the
/// stage removes them.
///
/// What bookworm-slim brings that the bed does not reproduce (its base image, not this
/// project's choice): debuerreotype's snapshot of the minbase packages on the image's build
/// day (the bed takes the versions of the day it runs), its `/etc/dpkg/dpkg.cfg.d/docker` and
/// `/etc/apt/apt.conf.d/docker-*` files, and the copyright files it keeps in `/usr/share/doc`.
#[tokio::test]
async fn the_bed_runs_the_dockerfile_s_mysql_backup_image_of_this_build() {
    if std::env::var_os("KUBECONFIG").is_some() {
        eprintln!("KUBECONFIG names another cluster: its images are not the bed's; not checked");
        return;
    }
    KubeTestbed::with_kubelet().await.unwrap();
    let dockerfile = Dockerfile::read(&root().join("Dockerfile")).unwrap();
    let stage = dockerfile.stage("mysql-backup").unwrap();
    assert_eq!(stage.base, "debian:bookworm-slim");
    let run = stage.all("RUN").join(" ");
    let packages = words_after(&run, "apt-get install");
    assert!(packages.contains(&"mariadb-backup"), "{run}");
    let user_args: Vec<&str> = run[run.find("useradd").expect("the stage's useradd")..]
        .split_whitespace()
        .collect();
    let after = |flag: &str| {
        let at = user_args.iter().position(|w| *w == flag).unwrap();
        user_args[at + 1]
    };
    let (uid, gid, shell) = (after("--uid"), after("--gid"), after("--shell"));
    let name = user_args[user_args.len() - 1];

    let exported = Exported::new("localhost/mysql-backup:dev");
    assert_eq!(exported.config["User"], stage.user().unwrap());
    let entrypoint = stage.entrypoint().unwrap();
    assert_eq!(exported.config["Entrypoint"], serde_json::json!(entrypoint));
    let layer = exported.only_layer();
    let binary = binaries_dir().join("mysql-backup");
    assert!(
        layer_file(&layer, entrypoint[0].trim_start_matches('/'))
            == std::fs::read(&binary).unwrap(),
        "{} is not this build's {}",
        entrypoint[0],
        binary.display()
    );

    let status = String::from_utf8(layer_file(&layer, "var/lib/dpkg/status")).unwrap();
    let installed = installed(&status);
    let paths = layer_paths(&layer);
    let slim_leaves_out = ["usr/share/doc/", "usr/share/man/", "usr/share/locale/"];
    for package in &packages {
        let version = installed
            .get(*package)
            .unwrap_or_else(|| panic!("{package} is not installed in the image"));
        if package.starts_with("mariadb") {
            assert_eq!(*version, host_version(package), "{package}");
        }
        let list = ["", ":amd64"]
            .iter()
            .map(|arch| format!("var/lib/dpkg/info/{package}{arch}.list"))
            .find(|p| paths.contains(p))
            .unwrap_or_else(|| panic!("no file list of {package}"));
        let list = String::from_utf8(layer_file(&layer, &list)).unwrap();
        let missing: Vec<&str> = list
            .lines()
            .map(|l| l.trim_start_matches('/'))
            .filter(|p| !p.is_empty() && p != &".")
            .filter(|p| !slim_leaves_out.iter().any(|out| p.starts_with(out)))
            .filter(|p| !paths.contains(*p))
            .collect();
        assert!(
            missing.is_empty(),
            "{package}: {missing:?} not in the image"
        );
    }
    let passwd = String::from_utf8(layer_file(&layer, "etc/passwd")).unwrap();
    let entry: Vec<&str> = passwd
        .lines()
        .find(|l| l.starts_with(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in /etc/passwd"))
        .split(':')
        .collect();
    assert_eq!(
        (entry[2], entry[3], entry[6]),
        (uid, gid, shell),
        "{entry:?}"
    );
    // USER names the ids; both have names too, for tools that print them.
    assert_eq!(stage.user().unwrap(), format!("{uid}:{gid}"));
    let group = String::from_utf8(layer_file(&layer, "etc/group")).unwrap();
    assert!(
        group
            .lines()
            .any(|l| l.starts_with(&format!("{name}:x:{gid}:"))),
        "no group {name} with gid {gid}: {group}"
    );
    let lists: Vec<_> = paths
        .iter()
        .filter(|p| {
            p.starts_with("var/lib/apt/lists/") && !p.ends_with("/partial") && !p.ends_with("lock")
        })
        .collect();
    assert!(lists.is_empty(), "apt lists left: {lists:?}");
}
