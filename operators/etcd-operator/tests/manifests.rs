//! The deploy manifests parse, and their RBAC grants exactly the API calls the operator makes
//! (`src/rbac.rs`): nothing missing, nothing extra, no wildcards, a comment on every rule; the
//! Deployment has probes, the downward API and a locked-down security context.

use std::path::{Path, PathBuf};

use etcd_operator::rbac::{CLUSTER_CALLS, NAMESPACED_CALLS, OWN_NAMESPACE_CALLS};
use repo_checks::rbac::{self, grants, of_kind, set};
use serde_json::Value;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

#[test]
fn namespaced_rbac_covers_exactly_the_calls() {
    let docs = rbac::docs(&deploy_dir(), "namespaced");
    let roles = rbac::bound_roles(&docs, "etcd-operator", "RoleBinding", "Role");
    assert_eq!(roles.len(), 1);
    assert_eq!(
        grants(roles[0]),
        &set(NAMESPACED_CALLS) | &set(OWN_NAMESPACE_CALLS)
    );
    // The one cluster-scoped grant: Nodes.
    let nodes = rbac::bound_roles(&docs, "etcd-operator", "ClusterRoleBinding", "ClusterRole");
    assert_eq!(nodes.len(), 1);
    assert_eq!(grants(nodes[0]), set(CLUSTER_CALLS));
    rbac::assert_every_rule_commented(&deploy_dir(), "namespaced");
}

#[test]
fn cluster_wide_rbac_covers_exactly_the_calls() {
    let docs = rbac::docs(&deploy_dir(), "cluster-wide");
    let cluster = rbac::bound_roles(&docs, "etcd-operator", "ClusterRoleBinding", "ClusterRole");
    assert_eq!(cluster.len(), 1);
    assert_eq!(
        grants(cluster[0]),
        &set(NAMESPACED_CALLS) | &set(CLUSTER_CALLS)
    );
    // Leases only in the operator's own namespace.
    let lease = rbac::bound_roles(&docs, "etcd-operator", "RoleBinding", "Role");
    assert_eq!(lease.len(), 1);
    assert_eq!(grants(lease[0]), set(OWN_NAMESPACE_CALLS));
    assert_eq!(lease[0]["metadata"]["namespace"], "etcd");
    rbac::assert_every_rule_commented(&deploy_dir(), "cluster-wide");
}

#[test]
fn cluster_wide_deployment_can_run_beside_the_namespaced_one() {
    let namespaced = rbac::docs(&deploy_dir(), "namespaced");
    let wide = rbac::docs(&deploy_dir(), "cluster-wide");
    let (a, b) = (
        of_kind(&namespaced, "Deployment")[0],
        of_kind(&wide, "Deployment")[0],
    );
    assert_ne!(a["metadata"]["name"], b["metadata"]["name"]);
    assert_ne!(a["spec"]["selector"], b["spec"]["selector"]);
    let c = &b["spec"]["template"]["spec"]["containers"][0];
    assert!(
        c["args"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == "--cluster-wide")
    );
    let env = c["env"].as_array().unwrap();
    let value = |name: &str| {
        env.iter()
            .find(|e| e["name"] == name)
            .map(|e| e["value"].clone())
    };
    assert_eq!(
        value("LEASE_NAME"),
        Some(Value::from("etcd-operator-cluster-wide"))
    );
    assert_eq!(
        value("WATCH_NAMESPACE"),
        None,
        "cluster-wide watches every namespace"
    );
}

#[test]
fn deployment_has_probes_downward_api_and_a_locked_down_context() {
    let docs = rbac::docs(&deploy_dir(), "namespaced");
    let pod = &of_kind(&docs, "Deployment")[0]["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "etcd-operator");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let c = &pod["containers"][0];
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
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
    assert_eq!(
        field("WATCH_NAMESPACE"),
        Some(Value::from("metadata.namespace"))
    );
    assert!(
        c["args"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == "--leader-election")
    );
}

#[test]
fn all_in_one_overlays_grant_exactly_the_calls() {
    rbac::assert_all_in_one_grants(
        "etcd-operator",
        NAMESPACED_CALLS,
        OWN_NAMESPACE_CALLS,
        CLUSTER_CALLS,
    );
}
