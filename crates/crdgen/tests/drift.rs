//! The committed `crds/*.yaml`, and the Helm chart's copies, are what the types generate.

use std::path::Path;

use crdgen::crd_files;

const REGENERATE: &str =
    "run `cargo run -p crdgen` and commit crds/ and deploy/helm/etcd-backup-suite/files/crds/";

#[test]
fn committed_crds_match_the_types() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut stale = Vec::new();
    for dir in ["crds", "deploy/helm/etcd-backup-suite/files/crds"] {
        for (name, yaml) in crd_files() {
            let path = root.join(dir).join(&name);
            match std::fs::read_to_string(&path) {
                Ok(committed) if committed == yaml => {}
                Ok(_) => stale.push(format!("{dir}/{name} differs from the types")),
                Err(e) => stale.push(format!("{dir}/{name} cannot be read: {e}")),
            }
        }
    }
    assert!(stale.is_empty(), "{}; {REGENERATE}", stale.join(", "));
    let names: Vec<_> = crd_files().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        ["etcdbackups.yaml", "etcdrestores.yaml", "etcdclusters.yaml"]
    );
}
