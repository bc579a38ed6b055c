//! The committed `crds/*.yaml` are what the types generate.

use std::path::Path;

use crdgen::crd_files;

const REGENERATE: &str = "run `cargo run -p crdgen` and commit crds/";

#[test]
fn committed_crds_match_the_types() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crds");
    let mut stale = Vec::new();
    for (name, yaml) in crd_files() {
        let path = dir.join(&name);
        match std::fs::read_to_string(&path) {
            Ok(committed) if committed == yaml => {}
            Ok(_) => stale.push(format!("{name} differs from the types")),
            Err(e) => stale.push(format!("{name} cannot be read: {e}")),
        }
    }
    assert!(stale.is_empty(), "{}; {REGENERATE}", stale.join(", "));
    let names: Vec<_> = crd_files().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        ["etcdbackups.yaml", "etcdrestores.yaml", "etcdclusters.yaml"]
    );
}
