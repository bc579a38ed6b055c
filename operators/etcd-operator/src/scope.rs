//! Which EtcdClusters this operator manages, with coreos's semantics: an operator started with
//! `--cluster-wide` manages only clusters annotated `etcd.database.coreos.com/scope:
//! clusterwide` (in every namespace); any other operator only clusters without that annotation.
//! Two deployments can so share a namespace without acting on the same cluster.

use kube::ResourceExt;

pub const SCOPE_ANNOTATION: &str = "etcd.database.coreos.com/scope";
pub const CLUSTER_WIDE: &str = "clusterwide";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scope {
    cluster_wide: bool,
}

impl Scope {
    pub fn new(cluster_wide: bool) -> Scope {
        Scope { cluster_wide }
    }

    /// Whether this operator manages `cluster` (read or not: the annotation is metadata).
    pub fn manages(&self, cluster: &impl kube::Resource) -> bool {
        let annotated = cluster
            .annotations()
            .get(SCOPE_ANNOTATION)
            .is_some_and(|v| v == CLUSTER_WIDE);
        annotated == self.cluster_wide
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_api::EtcdCluster;

    fn cluster(annotation: Option<&str>) -> EtcdCluster {
        let mut c = EtcdCluster::new("a", Default::default());
        if let Some(value) = annotation {
            c.annotations_mut()
                .insert(SCOPE_ANNOTATION.into(), value.into());
        }
        c
    }

    #[test]
    fn namespaced_and_cluster_wide_operators_split_clusters_by_the_annotation() {
        let (namespaced, wide) = (Scope::new(false), Scope::new(true));
        assert!(namespaced.manages(&cluster(None)));
        assert!(!wide.manages(&cluster(None)));
        assert!(!namespaced.manages(&cluster(Some("clusterwide"))));
        assert!(wide.manages(&cluster(Some("clusterwide"))));
        // Only the exact value counts, as in coreos.
        assert!(namespaced.manages(&cluster(Some("ClusterWide"))));
        assert!(!wide.manages(&cluster(Some("ClusterWide"))));
    }
}
