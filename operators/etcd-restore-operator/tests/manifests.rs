//! The deploy manifests parse, and their RBAC grants exactly the API calls the restore
//! controller makes (`src/rbac.rs`): nothing missing, nothing extra, a comment on every rule; the
//! Deployment has probes, the downward API, the backup image and a locked-down context.

use std::path::{Path, PathBuf};

use etcd_restore_operator::rbac::{NAMESPACED_CALLS, OWN_NAMESPACE_CALLS};
use repo_checks::rbac::{self, grants, of_kind, set};
use serde_json::Value;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

#[test]
fn namespaced_rbac_covers_exactly_the_calls() {
    let docs = rbac::docs(&deploy_dir(), "namespaced");
    let roles = rbac::bound_roles(&docs, "etcd-restore-operator", "RoleBinding", "Role");
    assert_eq!(roles.len(), 1);
    assert_eq!(
        grants(roles[0]),
        &set(NAMESPACED_CALLS) | &set(OWN_NAMESPACE_CALLS)
    );
    assert!(of_kind(&docs, "ClusterRole").is_empty());
    rbac::assert_every_rule_commented(&deploy_dir(), "namespaced");
}

#[test]
fn deployment_has_probes_downward_api_backup_image_and_a_locked_down_context() {
    let docs = rbac::docs(&deploy_dir(), "namespaced");
    let pod = &of_kind(&docs, "Deployment")[0]["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "etcd-restore-operator");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let c = &pod["containers"][0];
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    let env = c["env"].as_array().unwrap();
    let var = |name: &str| env.iter().find(|e| e["name"] == name).cloned();
    let field = |name: &str| var(name).map(|e| e["valueFrom"]["fieldRef"]["fieldPath"].clone());
    assert_eq!(field("POD_NAME"), Some(Value::from("metadata.name")));
    assert_eq!(
        field("WATCH_NAMESPACE"),
        Some(Value::from("metadata.namespace"))
    );
    assert_eq!(
        var("BACKUP_IMAGE").map(|e| e["value"].clone()),
        Some(Value::from("etcd-backup:latest"))
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
        "etcd-restore-operator",
        NAMESPACED_CALLS,
        OWN_NAMESPACE_CALLS,
        &[],
    );
}

#[test]
fn cluster_wide_rbac_covers_exactly_the_calls() {
    let docs = rbac::docs(&deploy_dir(), "cluster-wide");
    let account = "etcd-restore-operator";
    let cluster = rbac::bound_roles(&docs, account, "ClusterRoleBinding", "ClusterRole");
    assert_eq!(cluster.len(), 1);
    assert_eq!(grants(cluster[0]), set(NAMESPACED_CALLS));
    // Leases only in the operator's own namespace.
    let lease = rbac::bound_roles(&docs, account, "RoleBinding", "Role");
    assert_eq!(lease.len(), 1);
    assert_eq!(grants(lease[0]), set(OWN_NAMESPACE_CALLS));
    rbac::assert_every_rule_commented(&deploy_dir(), "cluster-wide");
    let deployment = &of_kind(&docs, "Deployment")[0];
    let env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap();
    assert!(
        !env.iter().any(|e| e["name"] == "WATCH_NAMESPACE"),
        "cluster-wide watches every namespace"
    );
}
