//! The API writes the restore's steps are made of: creating and deleting its objects, giving
//! a cluster back, detaching a claim, and its two status applies.

use etcd_api::{EtcdCluster, EtcdRestore, EtcdRestoreStatus};
use etcd_members::claims::ClaimApi;
use etcd_members::labels::{self, DETACHED_LABEL};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use operator_runtime::status_apply;
use serde_json::json;

use crate::context::{Error, MANAGER};
use crate::status::{self, PAUSED_BY_RESTORE_ANNOTATION, RESTORE_ANNOTATION};

/// Gives an untouched cluster back: the lock goes, and the pause when this restore made it.
/// Nothing happens when another restore holds it.
pub(crate) async fn release(
    clusters: &Api<EtcdCluster>,
    cluster: &EtcdCluster,
    uid: &str,
) -> Result<(), Error> {
    let annotations = cluster.annotations();
    if annotations.get(RESTORE_ANNOTATION).map(String::as_str) != Some(uid) {
        return Ok(());
    }
    let mut patch = json!({"metadata": {"annotations": {
        RESTORE_ANNOTATION: null, PAUSED_BY_RESTORE_ANNOTATION: null,
    }}});
    if annotations
        .get(PAUSED_BY_RESTORE_ANNOTATION)
        .map(String::as_str)
        == Some("true")
    {
        patch["spec"] = json!({"paused": false});
    }
    clusters
        .patch(
            &cluster.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await?;
    Ok(())
}

/// Takes a claim out of the cluster: out of its selector (so its operator does not restart the
/// old member on it) and without the cluster as owner (so deleting the cluster does not delete
/// it). Its data is untouched.
pub(crate) async fn detach(
    claims: &ClaimApi<'_>,
    cluster: &str,
    claim: &str,
    uid: &str,
) -> Result<(), Error> {
    let Some(current) = claims.get_opt(claim).await? else {
        return Ok(());
    };
    let owners: Vec<_> = current
        .owner_references()
        .iter()
        .filter(|o| !(o.kind == "EtcdCluster" && o.name == cluster))
        .cloned()
        .collect();
    let patch = json!({
        "metadata": {
            "labels": {labels::CLUSTER_LABEL: null, DETACHED_LABEL: cluster},
            "annotations": {RESTORE_ANNOTATION: uid},
            "ownerReferences": owners,
        }
    });
    claims.patch(claim, &Patch::Merge(patch)).await?;
    Ok(())
}

/// Creates `claim` through the claim cache (which then waits for it); one made by an earlier
/// run of this step is taken as made.
pub(crate) async fn create_claim(
    claims: &ClaimApi<'_>,
    claim: &PersistentVolumeClaim,
) -> Result<(), Error> {
    created(claim, claims.create(claim).await.map(|_| ()))
}

/// Deletes claim `name` through the claim cache (which then waits for its deletion).
pub(crate) async fn delete_claim(claims: &ClaimApi<'_>, name: &str) -> Result<(), Error> {
    match claims.delete(name, None, &DeleteParams::default()).await {
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        other => Ok(other?),
    }
}

pub(crate) async fn create<K>(api: &Api<K>, object: &K) -> Result<(), Error>
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    created(
        object,
        api.create(&PostParams::default(), object).await.map(|_| ()),
    )
}

/// What the creation of `object` came to.
fn created<K: Resource<DynamicType = ()>>(
    object: &K,
    result: Result<(), kube::Error>,
) -> Result<(), Error> {
    match result {
        Ok(()) => Ok(()),
        // Made by an earlier run of this step (the step is repeated after a restart).
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 403 || e.code == 422 => Err(Error::Refused {
            what: format!("{} {}", K::kind(&()), object.name_any()),
            message: e.message,
        }),
        Err(e) => Err(e.into()),
    }
}

pub(crate) async fn delete<K>(api: &Api<K>, name: &str) -> Result<(), Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    delete_with(api, name, &DeleteParams::default()).await
}

/// Deletes `name` at once (grace period 0): for a pod on a node that may be down, which could
/// never confirm a graceful deletion.
pub(crate) async fn force_delete<K>(api: &Api<K>, name: &str) -> Result<(), Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    delete_with(api, name, &now).await
}

async fn delete_with<K>(api: &Api<K>, name: &str, params: &DeleteParams) -> Result<(), Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Applies the report (server-side, typed), under the controller's own field manager.
pub(crate) async fn apply_report(
    api: &Api<EtcdRestore>,
    name: &str,
    report: &EtcdRestoreStatus,
) -> Result<(), Error> {
    let body = status_apply::body::<EtcdRestore, _>(report);
    api.patch_status(
        name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(body),
    )
    .await?;
    Ok(())
}

/// Applies the records (server-side, typed), under their own field manager: every record, so
/// none is dropped.
pub(crate) async fn apply_records(
    api: &Api<EtcdRestore>,
    name: &str,
    records: &status::Records,
) -> Result<(), Error> {
    let body = status_apply::body::<EtcdRestore, _>(records);
    let params = PatchParams::apply(status::RECORDS_MANAGER).force();
    api.patch_status(name, &params, &Patch::Apply(body)).await?;
    Ok(())
}
