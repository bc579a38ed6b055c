//! The shipped Kustomize bases and overlays render with a real kustomize, and what they render is
//! what users expect: the CRDs as shipped, every namespaced object in the operators' namespace,
//! each operator's image at this release's tag under the name of its Dockerfile target, and the
//! restore operator's run-once image of the same release. Each operator's `tests/manifests.rs`
//! checks the rendered RBAC against the calls its code makes.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;
use testbed::image::Dockerfile;
use testbed::kustomize::{IMAGES, render, render_for_bed, root};

const VERSION: &str = env!("CARGO_PKG_VERSION");
const OPERATORS: [&str; 3] = [
    "etcd-operator",
    "etcd-backup-operator",
    "etcd-restore-operator",
];
const VARIANTS: [&str; 2] = ["namespaced", "cluster-wide"];

fn kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn bases() -> Vec<PathBuf> {
    let mut dirs = vec![root().join("crds"), root().join("deploy/namespace")];
    for op in OPERATORS {
        for variant in VARIANTS {
            dirs.push(root().join(format!("operators/{op}/deploy/{variant}")));
        }
    }
    dirs
}

/// The value of environment variable `name` of a Deployment's first container.
fn env(deployment: &Value, name: &str) -> Option<Value> {
    deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .map(|e| e["value"].clone())
}

#[test]
fn every_base_renders_every_file_in_its_directory() {
    for dir in bases() {
        let docs = render(&dir).unwrap_or_else(|e| panic!("{e:#}"));
        // Each YAML file beside the kustomization is one of its resources: nothing shipped in a
        // base is left out of what `kubectl apply -k` installs.
        let mut expected = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap().to_string();
            if name.ends_with(".yaml") && name != "kustomization.yaml" {
                let text = std::fs::read_to_string(&path).unwrap();
                expected += testbed::yaml_documents(&text).unwrap().len();
            }
        }
        assert_eq!(docs.len(), expected, "{}", dir.display());
    }
}

#[test]
fn all_in_one_overlays_install_the_crds_the_namespace_and_this_release_s_operators() {
    let dockerfile = Dockerfile::read(&root().join("Dockerfile")).unwrap();
    let shipped_crds: BTreeSet<String> = render(&root().join("crds"))
        .unwrap()
        .iter()
        .map(|c| serde_json::to_string(c).unwrap())
        .collect();
    assert_eq!(shipped_crds.len(), 3);
    for variant in VARIANTS {
        let docs = render(&root().join("deploy").join(variant)).unwrap();
        let crds: BTreeSet<String> = kind(&docs, "CustomResourceDefinition")
            .iter()
            .map(|c| serde_json::to_string(c).unwrap())
            .collect();
        assert_eq!(
            crds, shipped_crds,
            "{variant}: the CRDs are the shipped ones"
        );
        let namespaces = kind(&docs, "Namespace");
        assert_eq!(namespaces.len(), 1);
        assert_eq!(namespaces[0]["metadata"]["name"], "etcd");
        let cluster_scoped = [
            "CustomResourceDefinition",
            "Namespace",
            "ClusterRole",
            "ClusterRoleBinding",
        ];
        for doc in &docs {
            if !cluster_scoped.iter().any(|k| doc["kind"] == *k) {
                assert_eq!(doc["metadata"]["namespace"], "etcd", "{variant}: {doc}");
            }
            for subject in doc["subjects"].as_array().into_iter().flatten() {
                assert_eq!(subject["namespace"], "etcd", "{variant}: {doc}");
            }
        }

        let deployments = kind(&docs, "Deployment");
        assert_eq!(deployments.len(), 3, "{variant}");
        let accounts: Vec<&Value> = kind(&docs, "ServiceAccount")
            .into_iter()
            .map(|a| &a["metadata"]["name"])
            .collect();
        let mut images = BTreeSet::new();
        for deployment in &deployments {
            let pod = &deployment["spec"]["template"]["spec"];
            assert!(
                accounts.contains(&&pod["serviceAccountName"]),
                "{variant}: {} runs as a ServiceAccount the overlay does not create",
                deployment["metadata"]["name"]
            );
            let image = pod["containers"][0]["image"].as_str().unwrap();
            let (name, tag) = image.split_once(':').unwrap();
            assert_eq!(tag, VERSION, "{variant}: {image}");
            // The name is a Dockerfile target, so `docker build --target <name> -t <name>:<tag>`
            // makes the image the overlay runs.
            dockerfile.stage(name).unwrap();
            images.insert(name.to_string());
        }
        assert_eq!(
            images,
            OPERATORS.iter().map(|s| s.to_string()).collect(),
            "{variant}"
        );
        // The run-once pods (restores, drills) run the etcd-backup image of the release.
        for operator in ["etcd-restore-operator", "etcd-backup-operator"] {
            let deployment = deployments
                .iter()
                .find(|d| d["metadata"]["name"] == operator)
                .unwrap();
            let backup_image = format!("etcd-backup:{VERSION}");
            assert_eq!(
                env(deployment, "BACKUP_IMAGE"),
                Some(Value::from(backup_image)),
                "{operator}"
            );
        }
    }
}

/// What the bed (and every in-cluster test) runs: the same documents, moved to one namespace
/// (RBAC subjects too) and pointed at this build's images, nothing else changed.
#[test]
fn the_bed_overlay_moves_the_namespace_and_the_images_and_nothing_else() {
    for variant in VARIANTS {
        let dir = root().join("deploy").join(variant);
        let shipped = render(&dir).unwrap();
        let bed = render_for_bed(&dir, "elsewhere").unwrap();
        assert_eq!(shipped.len(), bed.len());
        for (mut shipped, bed) in shipped.into_iter().zip(bed) {
            if shipped["kind"] == "Namespace" {
                shipped["metadata"]["name"] = "elsewhere".into();
            } else if shipped["metadata"]["namespace"].is_string() {
                shipped["metadata"]["namespace"] = "elsewhere".into();
            }
            if let Some(subjects) = shipped.get_mut("subjects").and_then(|s| s.as_array_mut()) {
                subjects
                    .iter_mut()
                    .for_each(|s| s["namespace"] = "elsewhere".into());
            }
            if shipped["kind"] == "Deployment" {
                let container = &mut shipped["spec"]["template"]["spec"]["containers"][0];
                let image = container["image"].as_str().unwrap().to_string();
                let name = image.split(':').next().unwrap();
                assert!(IMAGES.contains(&name));
                container["image"] = format!("localhost/{name}:dev").into();
                container["imagePullPolicy"] = "Never".into();
                for var in container["env"].as_array_mut().unwrap() {
                    if var["name"] == "BACKUP_IMAGE" {
                        var["value"] = "localhost/etcd-backup:dev".into();
                    }
                }
            }
            assert_eq!(shipped, bed, "{variant}");
        }
    }
}

#[test]
fn a_directory_outside_the_repository_is_refused() {
    let error = render_for_bed(Path::new("/tmp"), "x").unwrap_err();
    assert!(
        format!("{error:#}").contains("not in this repository"),
        "{error:#}"
    );
}
