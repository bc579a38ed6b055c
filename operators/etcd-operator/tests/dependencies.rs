//! The layout shows the architecture: the cluster operator manages members and never touches
//! backup storage, so it links neither the storage crate nor the AWS SDK; no operator depends on
//! another operator's crate; the API crate depends on no domain crate; no crate has an import
//! cycle between its modules.

/// Every crate in `package`'s normal dependency tree, one `name vX.Y.Z` per line.
fn normal_dependencies(package: &str) -> String {
    let output = std::process::Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "--locked",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .args(["-p", package, "--format", "{p}"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn depends_on(tree: &str, package: &str) -> bool {
    tree.lines().any(|l| l.split(' ').next() == Some(package))
}

#[test]
fn the_cluster_operator_links_no_storage_and_no_aws_sdk() {
    let tree = normal_dependencies("etcd-operator");
    assert!(depends_on(&tree, "command-line"), "{tree}");
    for forbidden in [
        "backup-storage",
        "aws-sdk-s3",
        "aws-config",
        "etcd-snapshot",
    ] {
        assert!(
            !depends_on(&tree, forbidden),
            "etcd-operator depends on {forbidden}:\n{tree}"
        );
    }
}

/// Layers point down: the API crate holds types only and depends on no crate of the product's
/// logic (the domain crates use the API's types, never the other way round).
#[test]
fn the_api_crate_depends_on_no_domain_crate() {
    let tree = normal_dependencies("etcd-api");
    for domain in [
        "etcd-cluster",
        "etcd-members",
        "etcd-snapshot",
        "backup-storage",
        "fetch-pod",
        "operator-runtime",
        "command-line",
    ] {
        assert!(
            !depends_on(&tree, domain),
            "etcd-api depends on {domain}:\n{tree}"
        );
    }
}

/// What the operators share lives in library crates (`etcd-members` for the cluster and the
/// restore operator, `operator-runtime` for all three), never in another operator's crate.
#[test]
fn no_operator_depends_on_another_operator() {
    const OPERATORS: [&str; 3] = [
        "etcd-operator",
        "etcd-backup-operator",
        "etcd-restore-operator",
    ];
    for operator in OPERATORS {
        let tree = normal_dependencies(operator);
        assert!(depends_on(&tree, operator), "{tree}");
        for other in OPERATORS.iter().filter(|o| **o != operator) {
            assert!(
                !depends_on(&tree, other),
                "{operator} depends on {other}:\n{tree}"
            );
        }
    }
    let restore = normal_dependencies("etcd-restore-operator");
    assert!(depends_on(&restore, "etcd-members"), "{restore}");
}

/// No module of any crate of the workspace needs, through others, a module that needs it.
#[test]
fn no_crate_has_an_import_cycle_between_its_modules() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut problems = Vec::new();
    for group in ["crates", "operators", "jobs", "e2e"] {
        for entry in std::fs::read_dir(root.join(group)).unwrap().flatten() {
            let src = entry.path().join("src");
            if !src.is_dir() {
                continue;
            }
            let cycles = testbed::module_graph::cycles(&testbed::module_graph::of_crate(&src));
            if !cycles.is_empty() {
                problems.push(format!("{}: {cycles:?}", entry.path().display()));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "import cycles:\n{}",
        problems.join("\n")
    );
}
