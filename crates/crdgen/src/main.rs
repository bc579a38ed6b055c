//! Writes `crds/<plural>.yaml` from the API types, and the Helm chart's copies of them
//! (`deploy/helm/etcd-backup-suite/files/crds/`).
//!
//! Usage: `cargo run -p crdgen [-- [--check] [DIR]]`. DIR defaults to the workspace's `crds/`
//! and the chart's copies (a DIR given: only DIR). With `--check` nothing is written; the exit
//! code is 1 if a file differs.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut check = false;
    let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let mut dirs = vec![
        root.join("crds"),
        root.join("deploy/helm/etcd-backup-suite/files/crds"),
    ];
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--check" => check = true,
            "-h" | "--help" => {
                eprintln!("usage: crdgen [--check] [DIR]");
                return ExitCode::SUCCESS;
            }
            _ => dirs = vec![PathBuf::from(arg)],
        }
    }
    let mut stale = false;
    let files = crdgen::crd_files();
    for (dir, (name, yaml)) in dirs.iter().flat_map(|d| files.iter().map(move |f| (d, f))) {
        let path = dir.join(name);
        let current = std::fs::read_to_string(&path).unwrap_or_default();
        if current == *yaml {
            continue;
        }
        if check {
            eprintln!("{} is out of date", path.display());
            stale = true;
        } else if let Err(e) =
            std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, yaml))
        {
            eprintln!("cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        } else {
            eprintln!("wrote {}", path.display());
        }
    }
    if stale {
        eprintln!("run `cargo run -p crdgen` and commit crds/ and the chart's files/crds/");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
