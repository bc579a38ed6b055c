//! The security settings of every pod the operators make (etcd members, restore pods), so that
//! they pass the Pod Security Standard "restricted" without any user setting: a namespace
//! labelled `pod-security.kubernetes.io/enforce: restricted` admits them.
//!
//! - Pod level: the user's `pod.securityContext` (EtcdCluster spec) field by field; each field
//!   the user left unset gets the default here: user and group 65532 (distroless' `nonroot`),
//!   `runAsNonRoot`, seccomp `RuntimeDefault`, and `fsGroup` 65532 with `OnRootMismatch`, so a
//!   volume that supports ownership management (most CSI volumes) is made writable for that
//!   group once, not walked at every start.
//! - Container level (every container and init container): no privilege escalation, every
//!   capability dropped, read-only root file system (the pods write only to their volumes).
//! - Data written before these defaults existed was written as the image's user (root, for
//!   etcd's images) and stays readable only by it on volumes without ownership management
//!   (hostPath, local, NFS): pods on such data keep the image's user ([`RunAs::ImageUser`]), with
//!   everything else above.

use k8s_openapi::api::core::v1::{
    Capabilities, PodSecurityContext, SeccompProfile, SecurityContext,
};

/// The user and group the pods run as unless the user chose one: distroless' `nonroot`.
pub const NON_ROOT: i64 = 65532;

/// Whom a pod runs as when the user did not say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunAs {
    /// [`NON_ROOT`], the default.
    NonRoot,
    /// The image's user: for pods on data written before the defaults (see the module doc).
    ImageUser,
}

/// The pod-level security context: `user`'s fields where set, the defaults elsewhere. A user
/// who set `runAsUser: 0` keeps it (and `runAsNonRoot` is then not defaulted to true, which the
/// kubelet would refuse as a contradiction); a restricted namespace refuses such a pod with the
/// reason, which the operators report.
pub fn pod_context(user: Option<&PodSecurityContext>, run_as: RunAs) -> PodSecurityContext {
    let mut context = user.cloned().unwrap_or_default();
    context
        .seccomp_profile
        .get_or_insert_with(|| SeccompProfile {
            type_: "RuntimeDefault".to_string(),
            ..Default::default()
        });
    if run_as == RunAs::ImageUser {
        return context;
    }
    let chose_root = context.run_as_user == Some(0);
    context.run_as_user.get_or_insert(NON_ROOT);
    context.run_as_group.get_or_insert(NON_ROOT);
    if !chose_root {
        context.run_as_non_root.get_or_insert(true);
    }
    if context.fs_group.is_none() {
        context.fs_group = Some(NON_ROOT);
        context
            .fs_group_change_policy
            .get_or_insert_with(|| "OnRootMismatch".to_string());
    }
    context
}

/// The container-level security context every container of these pods gets.
pub fn container_context() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_string()]),
            ..Default::default()
        }),
        read_only_root_filesystem: Some(true),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_pass_restricted() {
        let c = pod_context(None, RunAs::NonRoot);
        assert_eq!(c.run_as_user, Some(NON_ROOT));
        assert_eq!(c.run_as_group, Some(NON_ROOT));
        assert_eq!(c.run_as_non_root, Some(true));
        assert_eq!(c.fs_group, Some(NON_ROOT));
        assert_eq!(c.fs_group_change_policy.as_deref(), Some("OnRootMismatch"));
        assert_eq!(c.seccomp_profile.unwrap().type_, "RuntimeDefault");
        let s = container_context();
        assert_eq!(s.allow_privilege_escalation, Some(false));
        assert_eq!(s.capabilities.unwrap().drop.unwrap(), ["ALL"]);
    }

    #[test]
    fn the_users_fields_win() {
        let user = PodSecurityContext {
            run_as_user: Some(1000),
            fs_group: Some(2000),
            seccomp_profile: Some(SeccompProfile {
                type_: "Localhost".into(),
                localhost_profile: Some("etcd.json".into()),
            }),
            ..Default::default()
        };
        let c = pod_context(Some(&user), RunAs::NonRoot);
        assert_eq!(c.run_as_user, Some(1000));
        assert_eq!(c.run_as_group, Some(NON_ROOT));
        assert_eq!(c.run_as_non_root, Some(true));
        assert_eq!(c.fs_group, Some(2000));
        // The user's fsGroup comes with Kubernetes' own change policy unless they chose one.
        assert_eq!(c.fs_group_change_policy, None);
        assert_eq!(c.seccomp_profile.unwrap().type_, "Localhost");
    }

    #[test]
    fn a_user_who_chose_root_is_not_contradicted() {
        let user = PodSecurityContext {
            run_as_user: Some(0),
            ..Default::default()
        };
        let c = pod_context(Some(&user), RunAs::NonRoot);
        assert_eq!(c.run_as_user, Some(0));
        assert_eq!(c.run_as_non_root, None);
    }

    #[test]
    fn data_of_the_image_user_keeps_it() {
        let c = pod_context(None, RunAs::ImageUser);
        assert_eq!(c.run_as_user, None);
        assert_eq!(c.run_as_non_root, None);
        assert_eq!(c.fs_group, None);
        assert_eq!(c.seccomp_profile.unwrap().type_, "RuntimeDefault");
        let user = PodSecurityContext {
            run_as_user: Some(1000),
            ..Default::default()
        };
        let c = pod_context(Some(&user), RunAs::ImageUser);
        assert_eq!(c.run_as_user, Some(1000));
    }
}
