//! Every Kubernetes API call the restore controller makes, in one place. The manifests test
//! checks the RBAC rules under `deploy/` grant exactly these; add a line here with any new call.

pub use operator_runtime::rbac::ApiCall;

/// Calls in the watched namespace(s).
pub const NAMESPACED_CALLS: &[ApiCall] = &[
    // main.rs: the watch behind the controller; controller.rs: the fresh read of the recorded
    // plan, and status by merge patch.
    ("etcd.database.coreos.com", "etcdrestores", "list"),
    ("etcd.database.coreos.com", "etcdrestores", "watch"),
    // controller.rs: the finalizer, added before the cluster is first held, removed (read
    // again first) once the restore holds nothing.
    ("etcd.database.coreos.com", "etcdrestores", "get"),
    ("etcd.database.coreos.com", "etcdrestores", "patch"),
    ("etcd.database.coreos.com", "etcdrestores/status", "get"),
    ("etcd.database.coreos.com", "etcdrestores/status", "patch"),
    // controller.rs: the cluster restored: read, created from spec.newCluster, paused and
    // unpaused (spec.paused, the restore annotation, the restored-by annotation at hand-over;
    // never its status, which is the EtcdCluster operator's alone).
    // main.rs: watched, so the restore goes on as soon as its operator reports the pause.
    ("etcd.database.coreos.com", "etcdclusters", "get"),
    ("etcd.database.coreos.com", "etcdclusters", "list"),
    ("etcd.database.coreos.com", "etcdclusters", "watch"),
    ("etcd.database.coreos.com", "etcdclusters", "create"),
    ("etcd.database.coreos.com", "etcdclusters", "patch"),
    // source: backupRef reads the EtcdBackup's newest verified backup.
    ("etcd.database.coreos.com", "etcdbackups", "get"),
    // controller.rs: the restore pods (created, listed, their fetch logs) and the member
    // pods (listed, old ones deleted, restored ones created). main.rs: both watched (owns(),
    // and member pods turning ready).
    ("", "pods", "list"),
    ("", "pods", "watch"),
    ("", "pods", "create"),
    ("", "pods", "delete"),
    // origin.rs: a restored member pod is proven (patched) once made; one found under its
    // name is read to see whose it is.
    ("", "pods", "get"),
    ("", "pods", "patch"),
    ("", "pods/log", "get"),
    // etcd_members::claims: member claims, watched for the cache and listed when it is behind
    // or the restore's step changed; execute.rs writes them only through it: new ones created
    // (the restore's), joined to the cluster, old ones read and detached (patch); staged ones
    // deleted when a failed restore gives the cluster back, old ones after success (policy
    // Delete).
    ("", "persistentvolumeclaims", "list"),
    ("", "persistentvolumeclaims", "watch"),
    ("", "persistentvolumeclaims", "get"),
    ("", "persistentvolumeclaims", "create"),
    ("", "persistentvolumeclaims", "patch"),
    ("", "persistentvolumeclaims", "delete"),
    // controller.rs: the cluster's Services by server-side apply (the paused operator does not
    // make them for a cluster the restore created).
    ("", "services", "patch"),
    ("", "services", "create"),
    // controller.rs: the restore's S3 Secrets are checked to exist; the cluster's TLS Secrets
    // are read to ask the restored members for their health.
    ("", "secrets", "get"),
    // kube Recorder: creates events and patches them into series.
    ("events.k8s.io", "events", "create"),
    ("events.k8s.io", "events", "patch"),
];

/// Calls in the operator's own namespace: the EtcdCluster operator's (leader election, and
/// the member pods' proof key the two share).
pub use etcd_members::rbac::OWN_NAMESPACE_CALLS;
