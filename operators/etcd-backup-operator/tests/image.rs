//! The `Dockerfile`, checked as far as a machine without a container engine can: every documented
//! target exists, each runtime image runs a binary the builder stage builds, as a non-root user,
//! and the operator binary starts in a root file system with only distroless/cc's libraries
//! (see `testbed::image`).

use std::path::Path;

use testbed::image::{Dockerfile, run_as_in_image};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
/// distroless' `nonroot` user.
const NONROOT: &str = "65532:65532";

fn dockerfile() -> Dockerfile {
    Dockerfile::read(&Path::new(ROOT).join("Dockerfile")).unwrap()
}

#[test]
fn every_image_runs_a_binary_the_builder_builds_as_non_root() {
    let file = dockerfile();
    let builder = file.stage("builder").unwrap();
    let build = builder.all("RUN").join("\n");
    assert!(build.contains("--locked"), "{build}");
    let mut targets = 0;
    for line in file.comments.lines() {
        let Some(rest) = line.split("--target").nth(1) else {
            continue;
        };
        let target = rest.split_whitespace().next().unwrap();
        targets += 1;
        let stage = file.stage(target).unwrap();
        assert_eq!(stage.user(), Some(NONROOT), "stage {target}");
        let copies = stage.copies_from_stages();
        let [(from, source, destination)] = &copies[..] else {
            panic!("stage {target} should copy one binary from the builder: {copies:?}");
        };
        assert_eq!(from, "builder");
        assert_eq!(source, &format!("/out/{target}"));
        assert_eq!(stage.entrypoint().unwrap(), [destination.as_str()]);
        // The builder builds that package and puts its binary where the stage takes it.
        assert!(build.contains(&format!("-p {target}")), "{target}: {build}");
        assert!(
            build.contains(&format!("target/release/{target}")),
            "{target}: {build}"
        );
    }
    assert_eq!(targets, 5, "documented targets:\n{}", file.comments);

    // Without this the build context would carry target/ (tens of GB) and .git.
    let ignore = std::fs::read_to_string(Path::new(ROOT).join(".dockerignore")).unwrap();
    assert!(ignore.lines().any(|l| l.trim_end_matches('/') == "target"));
}

#[test]
fn the_operator_starts_in_a_distroless_cc_file_set_as_nonroot() {
    let file = dockerfile();
    let stage = file.stage("etcd-backup-operator").unwrap();
    let binary = Path::new(env!("CARGO_BIN_EXE_etcd-backup-operator"));
    let version = run_as_in_image(stage, binary, &["--version"], &[]).unwrap();
    let stdout = String::from_utf8_lossy(&version.stdout);
    assert!(
        version.status.success() && stdout.starts_with("etcd-backup-operator "),
        "{version:?}"
    );
    // Past argument parsing, logging and the runtime, to the Kubernetes configuration, which
    // this root does not have: the error a user would see in a misconfigured pod.
    let started = run_as_in_image(stage, binary, &["--listen", "127.0.0.1:0"], &[]).unwrap();
    let stderr = String::from_utf8_lossy(&started.stderr);
    assert!(!started.status.success(), "{started:?}");
    assert!(stderr.contains("no Kubernetes configuration"), "{stderr}");
}
