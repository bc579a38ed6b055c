//! Every claim the operators write goes through `etcd_members::claims::ClaimApi`, which makes
//! their claim cache wait for the write before a plan is made from it: no source file of an
//! operator makes a claim client of its own.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn the_operators_write_claims_only_through_the_claim_cache() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    for operator in ["etcd-operator", "etcd-restore-operator"] {
        rust_files(
            &root.join("operators").join(operator).join("src"),
            &mut files,
        );
    }
    assert!(files.len() > 20, "operator sources not found: {files:?}");
    let own_clients: Vec<String> = files
        .iter()
        .filter(|path| {
            let text = std::fs::read_to_string(path).unwrap();
            let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
            ["Api<PersistentVolumeClaim>", "Api::<PersistentVolumeClaim>"]
                .iter()
                .any(|client| compact.contains(client))
        })
        .map(|path| path.display().to_string())
        .collect();
    assert!(
        own_clients.is_empty(),
        "claim clients of their own (write claims through ctx.claims.api): {own_clients:?}"
    );
}
