//! Adoption: member pods and claims that carry this cluster's labels but no controller (made by
//! hand, by the restore controller without an owner, or orphaned when an earlier EtcdCluster of
//! the same name was deleted with `propagationPolicy: Orphan`) get this EtcdCluster as their
//! controller, so that they are garbage-collected with it like the members it made itself.
//! Nothing else about them changes: they are not restarted.

use etcd_api::EtcdCluster;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::context::{Context, Error, event};

/// The owner references an object should get to be adopted, or `None` when it already has a
/// controller (this cluster or another owner it is not ours to take from).
pub fn adopted_owners(
    meta: &ObjectMeta,
    controller: &OwnerReference,
) -> Option<Vec<OwnerReference>> {
    let owners = meta.owner_references.clone().unwrap_or_default();
    if owners.iter().any(|o| o.controller == Some(true)) {
        return None;
    }
    Some(owners.into_iter().chain([controller.clone()]).collect())
}

/// Adopts the cluster's orphaned member pods and claims; returns the names adopted.
pub async fn adopt(
    ctx: &Context,
    cluster: &EtcdCluster,
    pods: &[Pod],
    claims: &[PersistentVolumeClaim],
) -> Result<Vec<String>, Error> {
    let Some(controller) = cluster.controller_owner_ref(&()) else {
        return Ok(Vec::new());
    };
    let ns = cluster.namespace().unwrap_or_default();
    let mut adopted = Vec::new();
    let patch = |owners: Vec<OwnerReference>| json!({"metadata": {"ownerReferences": owners}});
    let pod_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    for pod in pods {
        if let Some(owners) = adopted_owners(&pod.metadata, &controller) {
            let name = pod.name_any();
            pod_api
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(&patch(owners)),
                )
                .await?;
            adopted.push(format!("pod {name}"));
        }
    }
    let claim_api = ctx.claims.api(&ns);
    for claim in claims {
        if let Some(owners) = adopted_owners(&claim.metadata, &controller) {
            let name = claim.name_any();
            claim_api.patch(&name, &Patch::Merge(patch(owners))).await?;
            adopted.push(format!("claim {name}"));
        }
    }
    if !adopted.is_empty() {
        let note = format!(
            "adopted {} (made outside this EtcdCluster)",
            adopted.join(", ")
        );
        event(ctx, cluster, "Adopted", &note).await;
    }
    Ok(adopted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(uid: &str, controller: bool) -> OwnerReference {
        OwnerReference {
            api_version: "v1".into(),
            kind: "Thing".into(),
            name: uid.into(),
            uid: uid.into(),
            controller: Some(controller),
            block_owner_deletion: None,
        }
    }

    #[test]
    fn only_objects_without_a_controller_are_adopted_keeping_other_owners() {
        let ours = owner("cluster", true);
        let orphan = ObjectMeta::default();
        assert_eq!(adopted_owners(&orphan, &ours), Some(vec![ours.clone()]));
        let shared = ObjectMeta {
            owner_references: Some(vec![owner("other", false)]),
            ..Default::default()
        };
        assert_eq!(
            adopted_owners(&shared, &ours),
            Some(vec![owner("other", false), ours.clone()])
        );
        let controlled = ObjectMeta {
            owner_references: Some(vec![owner("someone", true)]),
            ..Default::default()
        };
        assert_eq!(adopted_owners(&controlled, &ours), None);
    }
}
