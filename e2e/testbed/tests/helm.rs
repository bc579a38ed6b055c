//! The Helm chart renders what the kustomize overlays render for the same settings (so a user
//! gets the same operators whichever way they install), passes `helm lint`, keeps its copies of
//! the shipped files equal to them, and its values do what values.yaml says.

use std::collections::BTreeMap;

use serde_json::Value;
use testbed::helm::{self, chart};
use testbed::kustomize::{render, root};

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Objects by (kind, namespace, name).
fn by_identity(docs: Vec<Value>) -> BTreeMap<(String, String, String), Value> {
    docs.into_iter()
        .map(|d| {
            let key = (
                d["kind"].as_str().unwrap_or_default().to_string(),
                d["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                d["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            );
            (key, d)
        })
        .collect()
}

/// The chart's CRDs carry `helm.sh/resource-policy: keep`, which kustomize's have no use for.
fn without_keep(mut doc: Value) -> Value {
    if let Some(annotations) = doc["metadata"]
        .get_mut("annotations")
        .and_then(Value::as_object_mut)
    {
        annotations.remove("helm.sh/resource-policy");
        if annotations.is_empty() {
            doc["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("annotations");
        }
    }
    doc
}

/// The chart names the namespaced operator's cluster-scoped grant after the release's namespace
/// (`etcd-operator-nodes-etcd`); the overlay has the bare name.
fn without_namespace_suffix(doc: Value) -> Value {
    let text = serde_json::to_string(&doc).unwrap();
    serde_json::from_str(&text.replace("\"etcd-operator-nodes-etcd\"", "\"etcd-operator-nodes\""))
        .unwrap()
}

fn assert_same(helm: Vec<Value>, kustomize: Vec<Value>, what: &str) {
    let helm = by_identity(
        helm.into_iter()
            .map(without_keep)
            .map(without_namespace_suffix)
            .collect(),
    );
    let kustomize = by_identity(kustomize);
    assert_eq!(
        helm.keys().collect::<Vec<_>>(),
        kustomize.keys().collect::<Vec<_>>(),
        "{what}: the objects differ"
    );
    for (key, object) in &helm {
        if let Some(difference) = first_difference(object, &kustomize[key], "") {
            panic!("{what}: {key:?} differs: {difference}");
        }
    }
}

/// Where two JSON values first differ, as `path: helm's <> kustomize's`.
fn first_difference(helm: &Value, kustomize: &Value, path: &str) -> Option<String> {
    match (helm, kustomize) {
        (Value::Object(h), Value::Object(k)) => {
            let keys: std::collections::BTreeSet<&String> = h.keys().chain(k.keys()).collect();
            keys.into_iter().find_map(|key| {
                let (a, b) = (h.get(key), k.get(key));
                let at = format!("{path}.{key}");
                match (a, b) {
                    (Some(a), Some(b)) => first_difference(a, b, &at),
                    _ => Some(format!("{at}: helm {a:?} <> kustomize {b:?}")),
                }
            })
        }
        (Value::Array(h), Value::Array(k)) if h.len() == k.len() => h
            .iter()
            .zip(k)
            .enumerate()
            .find_map(|(i, (a, b))| first_difference(a, b, &format!("{path}[{i}]"))),
        // The CRD files say `minimum: 0.0`, which kustomize re-renders as 0: one number.
        (Value::Number(h), Value::Number(k)) if h.as_f64() == k.as_f64() => None,
        _ if helm == kustomize => None,
        _ => Some(format!("{path}: helm {helm} <> kustomize {kustomize}")),
    }
}

#[test]
fn the_chart_renders_what_the_kustomize_overlays_render() {
    for (scope, overlay) in [
        ("namespaced", "namespaced"),
        ("clusterWide", "cluster-wide"),
    ] {
        let scope_value = format!("scope={scope}");
        let helm = helm::render("etcd", "etcd", &[&scope_value]).unwrap();
        // The overlay's Namespace is the release's, which helm does not make
        // (`helm install --namespace etcd --create-namespace`).
        let kustomize: Vec<Value> = render(&root().join("deploy").join(overlay))
            .unwrap()
            .into_iter()
            .filter(|d| d["kind"] != "Namespace")
            .collect();
        assert_eq!(helm.len(), kustomize.len(), "{scope}");
        assert_same(helm, kustomize, scope);
    }
    let helm = helm::render(
        "etcd",
        "etcd",
        &[
            "monitoring.prometheusRule=true",
            "monitoring.dashboard=true",
            "etcdOperator.enabled=false",
            "backupOperator.enabled=false",
            "restoreOperator.enabled=false",
            "crds.install=false",
        ],
    )
    .unwrap();
    let kustomize = render(&root().join("deploy/monitoring")).unwrap();
    assert_same(helm, kustomize, "monitoring");
}

#[test]
fn the_charts_copies_of_shipped_files_are_equal_to_them() {
    let mut pairs = vec![];
    for crd in ["etcdclusters", "etcdbackups", "etcdrestores"] {
        pairs.push((format!("crds/{crd}.yaml"), format!("files/crds/{crd}.yaml")));
    }
    for operator in [
        "etcd-operator",
        "etcd-backup-operator",
        "etcd-restore-operator",
    ] {
        for scope in ["namespaced", "cluster-wide"] {
            pairs.push((
                format!("operators/{operator}/deploy/{scope}/rbac.yaml"),
                format!("files/rbac/{operator}-{scope}.yaml"),
            ));
        }
    }
    for file in ["prometheus-rule.yaml", "grafana-dashboard.json"] {
        pairs.push((
            format!("deploy/monitoring/{file}"),
            format!("files/monitoring/{file}"),
        ));
    }
    let mut stale = vec![];
    for (source, copy) in &pairs {
        let source_text = std::fs::read_to_string(root().join(source)).unwrap();
        let copy_text = std::fs::read_to_string(chart().join(copy)).unwrap_or_default();
        if source_text != copy_text {
            stale.push(format!("cp {source} deploy/helm/etcd-backup-suite/{copy}"));
        }
    }
    assert!(
        stale.is_empty(),
        "the chart's copies are stale:\n{}",
        stale.join("\n")
    );
    // Nothing else in files/: every copy is checked.
    let mut listed: Vec<String> = pairs.into_iter().map(|(_, copy)| copy).collect();
    listed.sort();
    let mut found = vec![];
    for dir in ["crds", "rbac", "monitoring"] {
        for entry in std::fs::read_dir(chart().join("files").join(dir)).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            found.push(format!("files/{dir}/{name}"));
        }
    }
    found.sort();
    assert_eq!(found, listed);
}

#[test]
fn helm_lint_passes_for_both_scopes() {
    let chart = chart();
    for scope in ["namespaced", "clusterWide"] {
        let scope_value = format!("scope={scope}");
        let output = helm::run(
            &[
                "lint",
                "--strict",
                "--kube-version",
                helm::KUBE_VERSION,
                "--set",
                &scope_value,
                chart.to_str().unwrap(),
            ],
            None,
        )
        .unwrap_or_else(|e| panic!("{scope}: {e:#}"));
        let said = String::from_utf8_lossy(&output.stdout);
        assert!(said.contains("0 chart(s) failed"), "{said}");
    }
}

/// The image of the first container of Deployment `name`, and its environment as a map.
fn deployment(docs: &[Value], name: &str) -> (String, BTreeMap<String, Value>) {
    let d = docs
        .iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no Deployment {name}"));
    let container = &d["spec"]["template"]["spec"]["containers"][0];
    let env = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap().to_string(), e.clone()))
        .collect();
    (container["image"].as_str().unwrap().to_string(), env)
}

#[test]
fn values_set_images_replicas_and_the_local_backup_claim() {
    let docs = helm::render(
        "suite",
        "team-a",
        &[
            "image.repository=registry.example/etcd/",
            "image.tag=1.2.3",
            "image.pullPolicy=Always",
            "backupOperator.replicas=1",
            "backupOperator.localVolumeClaim=etcd-backups",
        ],
    )
    .unwrap();
    for name in [
        "etcd-operator",
        "etcd-backup-operator",
        "etcd-restore-operator",
    ] {
        let (image, _) = deployment(&docs, name);
        assert_eq!(image, format!("registry.example/etcd/{name}:1.2.3"));
    }
    let (_, env) = deployment(&docs, "etcd-restore-operator");
    assert_eq!(
        env["BACKUP_IMAGE"]["value"],
        "registry.example/etcd/etcd-backup:1.2.3"
    );
    let backup = docs
        .iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "etcd-backup-operator")
        .unwrap();
    assert_eq!(backup["spec"]["replicas"], 1);
    let pod = &backup["spec"]["template"]["spec"];
    assert_eq!(pod["containers"][0]["imagePullPolicy"], "Always");
    assert_eq!(
        pod["volumes"][0]["persistentVolumeClaim"]["claimName"],
        "etcd-backups"
    );
    assert_eq!(
        pod["containers"][0]["volumeMounts"][0]["mountPath"],
        "/var/lib/etcd-backup"
    );
    let (_, env) = deployment(&docs, "etcd-backup-operator");
    assert_eq!(
        env["LOCAL_VOLUME_CLAIM"]["value"],
        "$(POD_NAMESPACE)/etcd-backups"
    );
    // Every namespaced object is in the release's namespace, subjects of bindings too.
    for doc in &docs {
        if let Some(ns) = doc["metadata"]["namespace"].as_str() {
            assert_eq!(ns, "team-a", "{}", doc["metadata"]["name"]);
        }
        for subject in doc["subjects"].as_array().into_iter().flatten() {
            assert_eq!(subject["namespace"], "team-a");
        }
    }
    // The default tag is the chart's appVersion, this release's.
    let docs = helm::render("suite", "etcd", &[]).unwrap();
    assert_eq!(
        deployment(&docs, "etcd-operator").0,
        format!("etcd-operator:{VERSION}")
    );
}

#[test]
fn values_the_chart_cannot_honour_are_refused() {
    for (set, said) in [
        ("scope=everywhere", "scope"),
        (
            "backupOperator.maxConcurrentBackups=0",
            "maxConcurrentBackups",
        ),
    ] {
        let err = helm::render("suite", "etcd", &[set]).unwrap_err();
        assert!(format!("{err:#}").contains(said), "{set}: {err:#}");
    }
    let err = helm::render(
        "suite",
        "etcd",
        &["scope=clusterWide", "backupOperator.localVolumeClaim=c"],
    )
    .unwrap_err();
    assert!(
        format!("{err:#}").contains("needs scope: namespaced"),
        "{err:#}"
    );
}

#[test]
fn the_chart_is_versioned_with_the_workspace() {
    let text = std::fs::read_to_string(chart().join("Chart.yaml")).unwrap();
    let chart = testbed::yaml_documents(&text).unwrap().remove(0);
    assert_eq!(chart["appVersion"], VERSION);
    assert_eq!(chart["version"], VERSION);
}

#[test]
fn releases_in_two_namespaces_share_no_cluster_scoped_object() {
    let cluster_scoped = |docs: Vec<Value>| -> Vec<(String, String)> {
        docs.into_iter()
            .filter(|d| d["metadata"]["namespace"].is_null())
            .map(|d| {
                (
                    d["kind"].as_str().unwrap().to_string(),
                    d["metadata"]["name"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let first = cluster_scoped(helm::render("suite", "team-a", &[]).unwrap());
    let second = cluster_scoped(helm::render("suite", "team-b", &["crds.install=false"]).unwrap());
    assert!(
        first.iter().any(|(kind, _)| kind == "ClusterRoleBinding"),
        "{first:?}"
    );
    assert!(!second.is_empty(), "{second:?}");
    for object in &second {
        assert!(!first.contains(object), "both releases render {object:?}");
    }
    // The binding grants the release's own ServiceAccount.
    let docs = helm::render("suite", "team-b", &["crds.install=false"]).unwrap();
    let binding = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRoleBinding")
        .unwrap();
    assert_eq!(binding["metadata"]["name"], "etcd-operator-nodes-team-b");
    assert_eq!(binding["roleRef"]["name"], "etcd-operator-nodes-team-b");
    assert_eq!(binding["subjects"][0]["namespace"], "team-b");
}

#[test]
fn a_misspelt_value_is_refused_not_ignored() {
    for set in [
        "scpoe=namespaced",
        "backupOperator.localVolumeClam=c",
        "etcdOperator.replica=1",
        "imagePullSecrets[0].nmae=regcred",
        "restoreOperator.serviceAccountAnnotations.a=b",
    ] {
        let err = helm::render("suite", "etcd", &[set]).unwrap_err();
        assert!(format!("{err:#}").contains("additional"), "{set}: {err:#}");
    }
}

#[test]
fn values_place_the_operator_pods_and_give_the_backup_operator_a_cloud_identity() {
    let docs = helm::render(
        "suite",
        "team-a",
        &[
            "imagePullSecrets[0].name=regcred",
            "nodeSelector.kubernetes\\.io/os=linux",
            "tolerations[0].key=dedicated",
            "tolerations[0].operator=Exists",
            "affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight=1",
            "backupOperator.allowAmbientCredentials=true",
            "backupOperator.serviceAccountAnnotations.iam\\.gke\\.io/gcp-service-account=backups@p.iam.gserviceaccount.com",
            "--set-string=backupOperator.podLabels.azure\\.workload\\.identity/use=true",
            "restoreOperator.allowAmbientCredentials=true",
        ],
    )
    .unwrap();
    let pod_spec = |name: &str| -> Value {
        docs.iter()
            .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == name)
            .unwrap()["spec"]["template"]
            .clone()
    };
    for name in [
        "etcd-operator",
        "etcd-backup-operator",
        "etcd-restore-operator",
    ] {
        let spec = &pod_spec(name)["spec"];
        assert_eq!(spec["imagePullSecrets"][0]["name"], "regcred", "{name}");
        assert_eq!(spec["nodeSelector"]["kubernetes.io/os"], "linux", "{name}");
        assert_eq!(spec["tolerations"][0]["key"], "dedicated", "{name}");
        assert_eq!(
            spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
                ["weight"],
            1,
            "{name}"
        );
    }
    for name in ["etcd-backup-operator", "etcd-restore-operator"] {
        let (_, env) = deployment(&docs, name);
        assert_eq!(env["ALLOW_AMBIENT_CREDENTIALS"]["value"], "true", "{name}");
    }
    let (_, env) = deployment(&docs, "etcd-operator");
    assert!(!env.contains_key("ALLOW_AMBIENT_CREDENTIALS"));
    // The pod label is added; the selector's own label stays.
    let labels = &pod_spec("etcd-backup-operator")["metadata"]["labels"];
    assert_eq!(labels["azure.workload.identity/use"], "true");
    assert_eq!(labels["app.kubernetes.io/name"], "etcd-backup-operator");
    let service_account = |name: &str| -> Value {
        docs.iter()
            .find(|d| d["kind"] == "ServiceAccount" && d["metadata"]["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(
        service_account("etcd-backup-operator")["metadata"]["annotations"]["iam.gke.io/gcp-service-account"],
        "backups@p.iam.gserviceaccount.com"
    );
    assert!(service_account("etcd-restore-operator")["metadata"]["annotations"].is_null());
    // Off by default: no ambient identity, nothing placed.
    let docs = helm::render("suite", "etcd", &[]).unwrap();
    for name in ["etcd-backup-operator", "etcd-restore-operator"] {
        let (_, env) = deployment(&docs, name);
        assert!(!env.contains_key("ALLOW_AMBIENT_CREDENTIALS"), "{name}");
    }
    // A label cannot take the selector's away.
    let docs = helm::render(
        "suite",
        "etcd",
        &["backupOperator.podLabels.app\\.kubernetes\\.io/name=other"],
    )
    .unwrap();
    let backup = docs
        .iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "etcd-backup-operator")
        .unwrap();
    assert_eq!(
        backup["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"],
        "etcd-backup-operator"
    );
}
