//! The deploy manifests parse, and their RBAC grants exactly the API calls the operator makes
//! (`src/rbac.rs`): nothing missing, nothing extra, no wildcards, a comment on every rule.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use etcd_backup_operator::rbac::{ApiCall, LEASE_CALLS, NAMESPACED_CALLS};
use serde::Deserialize;
use serde_yaml::Value;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

fn docs(variant: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for file in ["rbac.yaml", "deployment.yaml"] {
        let path = deploy_dir().join(variant).join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let value =
                Value::deserialize(doc).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            if !value.is_null() {
                out.push(value);
            }
        }
    }
    out
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn grants(role: &Value) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for rule in role["rules"].as_sequence().unwrap() {
        let list = |k: &str| -> Vec<String> {
            rule[k]
                .as_sequence()
                .unwrap_or_else(|| panic!("rule without {k}: {rule:?}"))
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect()
        };
        for g in list("apiGroups") {
            for r in list("resources") {
                for v in list("verbs") {
                    assert!(g != "*" && r != "*" && v != "*", "wildcard in {rule:?}");
                    out.insert((g.clone(), r.clone(), v));
                }
            }
        }
    }
    out
}

fn set(calls: &[ApiCall]) -> BTreeSet<(String, String, String)> {
    calls
        .iter()
        .map(|(g, r, v)| (g.to_string(), r.to_string(), v.to_string()))
        .collect()
}

/// The role bound to the operator's ServiceAccount by a binding of `binding_kind`.
fn bound_role<'a>(docs: &'a [Value], binding_kind: &str, role_kind: &str) -> Vec<&'a Value> {
    of_kind(docs, binding_kind)
        .into_iter()
        .filter(|b| {
            b["subjects"]
                .as_sequence()
                .unwrap()
                .iter()
                .any(|s| s["kind"] == "ServiceAccount" && s["name"] == "etcd-backup-operator")
        })
        .map(|b| {
            assert_eq!(b["roleRef"]["kind"], role_kind);
            let name = &b["roleRef"]["name"];
            *of_kind(docs, role_kind)
                .iter()
                .find(|r| &r["metadata"]["name"] == name)
                .unwrap_or_else(|| {
                    panic!("{binding_kind} refers to a missing {role_kind} {name:?}")
                })
        })
        .collect()
}

#[test]
fn namespaced_rbac_covers_exactly_the_calls() {
    let docs = docs("namespaced");
    let roles = bound_role(&docs, "RoleBinding", "Role");
    assert_eq!(roles.len(), 1);
    let expected = &set(NAMESPACED_CALLS) | &set(LEASE_CALLS);
    assert_eq!(grants(roles[0]), expected);
    assert!(
        of_kind(&docs, "ClusterRole").is_empty(),
        "the namespaced variant needs no ClusterRole"
    );
}

#[test]
fn cluster_wide_rbac_covers_exactly_the_calls() {
    let docs = docs("cluster-wide");
    let cluster = bound_role(&docs, "ClusterRoleBinding", "ClusterRole");
    assert_eq!(cluster.len(), 1);
    assert_eq!(grants(cluster[0]), set(NAMESPACED_CALLS));
    // Leases only in the operator's namespace, not cluster-wide.
    let lease = bound_role(&docs, "RoleBinding", "Role");
    assert_eq!(lease.len(), 1);
    assert_eq!(grants(lease[0]), set(LEASE_CALLS));
    assert_eq!(lease[0]["metadata"]["namespace"], "etcd-backup");
}

#[test]
fn every_rule_has_a_comment() {
    for variant in ["namespaced", "cluster-wide"] {
        let text = std::fs::read_to_string(deploy_dir().join(variant).join("rbac.yaml")).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if line.trim_start().starts_with("- apiGroups:") {
                assert!(
                    lines[i - 1].trim_start().starts_with('#'),
                    "{variant}/rbac.yaml line {}: rule without a comment",
                    i + 1
                );
            }
        }
    }
}

#[test]
fn deployments_have_probes_downward_api_and_a_locked_down_context() {
    for variant in ["namespaced", "cluster-wide"] {
        let docs = docs(variant);
        let deployment = of_kind(&docs, "Deployment")[0];
        let pod = &deployment["spec"]["template"]["spec"];
        assert_eq!(pod["serviceAccountName"], "etcd-backup-operator");
        assert_eq!(
            of_kind(&docs, "ServiceAccount")[0]["metadata"]["name"],
            "etcd-backup-operator"
        );
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
        let c = &pod["containers"][0];
        assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
        assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
        assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
        let env = c["env"].as_sequence().unwrap();
        let field = |name: &str| {
            env.iter()
                .find(|e| e["name"] == name)
                .map(|e| e["valueFrom"]["fieldRef"]["fieldPath"].clone())
        };
        assert_eq!(field("POD_NAME"), Some(Value::from("metadata.name")));
        assert_eq!(
            field("POD_NAMESPACE"),
            Some(Value::from("metadata.namespace"))
        );
        let args: Vec<&str> = c["args"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert!(args.contains(&"--leader-election"), "{args:?}");
    }
}
