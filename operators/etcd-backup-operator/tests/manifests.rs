//! The deploy manifests parse, and their RBAC grants exactly the API calls the operator makes
//! (`src/rbac.rs`): nothing missing, nothing extra, no wildcards, a comment on every rule.

use std::path::{Path, PathBuf};

use etcd_backup_operator::rbac::{LEASE_CALLS, NAMESPACED_CALLS};
use repo_checks::rbac::{self, grants, of_kind, set};
use serde_json::Value;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

const ACCOUNT: &str = "etcd-backup-operator";

fn docs(variant: &str) -> Vec<Value> {
    rbac::docs(&deploy_dir(), variant)
}

fn bound_role<'a>(docs: &'a [Value], binding_kind: &str, role_kind: &str) -> Vec<&'a Value> {
    rbac::bound_roles(docs, ACCOUNT, binding_kind, role_kind)
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
    assert_eq!(lease[0]["metadata"]["namespace"], "etcd");
}

#[test]
fn every_rule_has_a_comment() {
    for variant in ["namespaced", "cluster-wide"] {
        rbac::assert_every_rule_commented(&deploy_dir(), variant);
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
        let env = c["env"].as_array().unwrap();
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
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert!(args.contains(&"--leader-election"), "{args:?}");
    }
}

#[test]
fn all_in_one_overlays_grant_exactly_the_calls() {
    rbac::assert_all_in_one_grants("etcd-backup-operator", NAMESPACED_CALLS, LEASE_CALLS, &[]);
}
