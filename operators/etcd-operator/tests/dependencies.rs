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
            let cycles =
                repo_checks::module_graph::cycles(&repo_checks::module_graph::of_crate(&src));
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

/// The crate picture in docs/concepts/architecture.md ("## Crates") says what the manifests
/// say: each workspace crate with the workspace crates it depends on (normal dependencies).
#[test]
fn the_architecture_page_shows_the_crates_as_they_depend() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let page = std::fs::read_to_string(root.join("docs/concepts/architecture.md")).unwrap();
    let section = page
        .split("\n## Crates\n")
        .nth(1)
        .expect("a Crates section");
    let picture = section.split("```").nth(1).expect("a picture in it");
    let shown: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> = picture
        .lines()
        .filter_map(|line| line.split_once("->"))
        .map(|(name, deps)| {
            let deps = deps.split('(').next().unwrap_or_default();
            let deps = deps
                .split(',')
                .map(str::trim)
                .filter(|d| !d.is_empty())
                .map(String::from)
                .collect();
            (name.trim().to_string(), deps)
        })
        .collect();
    assert_eq!(shown, workspace_dependencies());
}

/// Each workspace crate and the workspace crates it depends on (normal dependencies).
fn workspace_dependencies() -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>>
{
    let output = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
            "--locked",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let packages = metadata["packages"].as_array().unwrap();
    let ours: std::collections::BTreeSet<&str> =
        packages.iter().filter_map(|p| p["name"].as_str()).collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null())
                .filter_map(|d| d["name"].as_str())
                .filter(|d| ours.contains(d))
                .map(String::from)
                .collect();
            (p["name"].as_str().unwrap().to_string(), deps)
        })
        .collect()
}
