//! Checks of an operator's shipped RBAC (`deploy/<variant>/rbac.yaml` and `deployment.yaml`)
//! against the API calls its code lists: exactly those granted, no wildcards, a comment on
//! every rule. Shared by the operators' `tests/manifests.rs`.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

/// `(apiGroup, resource, verb)`.
pub type Grant = (String, String, String);

/// The documents of `deploy_dir/<variant>/{rbac,deployment}.yaml`.
pub fn docs(deploy_dir: &Path, variant: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for file in ["rbac.yaml", "deployment.yaml"] {
        let path = deploy_dir.join(variant).join(file);
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        out.extend(
            testbed::yaml_documents(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        );
    }
    out
}

pub fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

/// What a Role or ClusterRole grants; panics on a wildcard.
pub fn grants(role: &Value) -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    for rule in role["rules"].as_array().expect("rules") {
        let list = |k: &str| -> Vec<String> {
            rule[k]
                .as_array()
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

pub fn set(calls: &[(&str, &str, &str)]) -> BTreeSet<Grant> {
    calls
        .iter()
        .map(|(g, r, v)| (g.to_string(), r.to_string(), v.to_string()))
        .collect()
}

/// The roles bound to ServiceAccount `account` by bindings of `binding_kind`.
pub fn bound_roles<'a>(
    docs: &'a [Value],
    account: &str,
    binding_kind: &str,
    role_kind: &str,
) -> Vec<&'a Value> {
    of_kind(docs, binding_kind)
        .into_iter()
        .filter(|b| {
            b["subjects"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s["kind"] == "ServiceAccount" && s["name"] == account)
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

/// Panics naming the line of any rule in `rbac.yaml` without a comment right above it.
pub fn assert_every_rule_commented(deploy_dir: &Path, variant: &str) {
    let text = std::fs::read_to_string(deploy_dir.join(variant).join("rbac.yaml")).unwrap();
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

/// The all-in-one overlays (`deploy/namespaced/`, `deploy/cluster-wide/`), rendered by
/// kustomize, grant ServiceAccount `account` exactly `calls` (plus `lease_calls` for leader
/// election, and `cluster_calls` on cluster-scoped resources): in a Role (and a ClusterRole with
/// only the cluster-scoped calls) when namespaced; in a ClusterRole, with the Lease in a Role of
/// the operator's namespace only, when cluster-wide.
pub fn assert_all_in_one_grants(
    account: &str,
    calls: &[(&str, &str, &str)],
    lease_calls: &[(&str, &str, &str)],
    cluster_calls: &[(&str, &str, &str)],
) {
    for variant in ["namespaced", "cluster-wide"] {
        let dir = testbed::kustomize::root().join("deploy").join(variant);
        let docs = testbed::kustomize::render(&dir).unwrap_or_else(|e| panic!("{e:#}"));
        let roles = bound_roles(&docs, account, "RoleBinding", "Role");
        let cluster_roles = bound_roles(&docs, account, "ClusterRoleBinding", "ClusterRole");
        assert_eq!(roles.len(), 1, "{variant}: {account}");
        assert_eq!(roles[0]["metadata"]["namespace"], "etcd");
        if variant == "namespaced" {
            let cluster_grants: BTreeSet<_> =
                cluster_roles.iter().flat_map(|r| grants(r)).collect();
            assert_eq!(cluster_grants, set(cluster_calls), "{variant}: {account}");
            assert_eq!(grants(roles[0]), &set(calls) | &set(lease_calls));
        } else {
            assert_eq!(cluster_roles.len(), 1, "{variant}: {account}");
            assert_eq!(
                grants(cluster_roles[0]),
                &set(calls) | &set(cluster_calls),
                "{variant}"
            );
            assert_eq!(grants(roles[0]), set(lease_calls), "{variant}");
        }
    }
}
