//! Every Kubernetes API call the operator makes, in one place. The manifests test checks the
//! RBAC rules under `deploy/` grant exactly these; add a line here with any new call.

pub use operator_runtime::rbac::ApiCall;

/// Calls in the watched namespace(s).
pub const NAMESPACED_CALLS: &[ApiCall] = &[
    // main.rs: the watch behind the controller.
    ("etcd.database.coreos.com", "etcdclusters", "list"),
    ("etcd.database.coreos.com", "etcdclusters", "watch"),
    // status_writer.rs: server-side apply of status (its one writer); the fresh read of the
    // recorded change at the start of each reconcile.
    ("etcd.database.coreos.com", "etcdclusters/status", "patch"),
    ("etcd.database.coreos.com", "etcdclusters/status", "get"),
    // quorum_loss.rs: the recovery's EtcdRestore, read first so that only one is made; a
    // finished one of an earlier incident is deleted first (it holds the name).
    ("etcd.database.coreos.com", "etcdrestores", "get"),
    ("etcd.database.coreos.com", "etcdrestores", "create"),
    ("etcd.database.coreos.com", "etcdrestores", "delete"),
    // main.rs owns(): the pod watch; controller.rs: list, create, delete; upgrade.rs and
    // adopt.rs: patch.
    ("", "pods", "list"),
    ("", "pods", "watch"),
    ("", "pods", "create"),
    ("", "pods", "delete"),
    ("", "pods", "patch"),
    // origin.rs: a pod found under the name of a member being made is read to see whose it is.
    ("", "pods", "get"),
    // claims.rs: member claims, watched for the cache, listed when it is behind, written
    // (by execute.rs, upgrade.rs and adopt.rs) only through it; get: whose is a claim that
    // already exists under a new member's name.
    ("", "persistentvolumeclaims", "list"),
    ("", "persistentvolumeclaims", "watch"),
    ("", "persistentvolumeclaims", "get"),
    ("", "persistentvolumeclaims", "create"),
    ("", "persistentvolumeclaims", "delete"),
    ("", "persistentvolumeclaims", "patch"),
    // controller.rs: Services by server-side apply (creates them the first time).
    ("", "services", "patch"),
    ("", "services", "create"),
    // controller.rs: the PodDisruptionBudget by server-side apply; main.rs asks which
    // policy version the server has (discovery needs no grant).
    ("policy", "poddisruptionbudgets", "patch"),
    ("policy", "poddisruptionbudgets", "create"),
    // tls.rs: the Secrets TLS.static names, read by name each reconcile.
    ("", "secrets", "get"),
    // kube Recorder: creates events and patches them into series.
    ("events.k8s.io", "events", "create"),
    ("events.k8s.io", "events", "patch"),
];

/// Cluster-scoped calls, granted by a ClusterRole in both installs. Without them the operator
/// runs on, but cannot tell that a member's node is lost, so it never replaces such a member.
pub const CLUSTER_CALLS: &[ApiCall] = &[
    // observe.rs nodes(): whether a member's node is Ready, or gone.
    ("", "nodes", "list"),
];

pub use etcd_members::rbac::OWN_NAMESPACE_CALLS;
