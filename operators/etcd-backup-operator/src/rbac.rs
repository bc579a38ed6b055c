//! Every Kubernetes API call the operator makes, in one place. The manifests test checks the
//! RBAC rules under `deploy/` grant each of them; add a line here with any new call.

pub use operator_runtime::rbac::ApiCall;

/// Calls in the watched namespace(s).
pub const NAMESPACED_CALLS: &[ApiCall] = &[
    // controller.rs: the watch behind the controller.
    ("etcd.database.coreos.com", "etcdbackups", "list"),
    ("etcd.database.coreos.com", "etcdbackups", "watch"),
    // controller.rs set_finalizer: merge patch of metadata.finalizers.
    ("etcd.database.coreos.com", "etcdbackups", "patch"),
    // controller.rs apply_status: server-side apply of status.
    ("etcd.database.coreos.com", "etcdbackups/status", "patch"),
    // secrets.rs: awsSecret, s3.caSecret and clientTLSSecret, read at each run.
    ("", "secrets", "get"),
    // drill/mod.rs: the drill pods, created, followed by name, listed (by label) and deleted.
    ("", "pods", "create"),
    ("", "pods", "get"),
    ("", "pods", "list"),
    ("", "pods", "delete"),
    // kube Recorder: creates events and patches them into series.
    ("events.k8s.io", "events", "create"),
    ("events.k8s.io", "events", "patch"),
];

/// Calls in the operator's own namespace: leader election (operator-runtime).
pub use operator_runtime::leader::LEASE_CALLS;
