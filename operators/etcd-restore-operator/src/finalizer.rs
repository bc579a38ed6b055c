//! The restore's finalizer: held from the moment it first holds its cluster, and what deleting
//! it does (gives an untouched cluster back; leaves a touched one paused, marked and described).

use etcd_api::{EtcdCluster, EtcdRestore};
use etcd_members::labels::ABANDONED_RESTORE_ANNOTATION;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::api::release;
use crate::context::{Context, Error};
use crate::status::{self, PAUSED_BY_RESTORE_ANNOTATION, RESTORE_ANNOTATION};

/// Records, before this restore first holds its cluster, that deleting it must let go of what
/// it holds first (the finalizer). Crash-safe: added again harmlessly.
pub(crate) async fn hold_until_released(
    restores: &Api<EtcdRestore>,
    restore: &EtcdRestore,
) -> Result<(), Error> {
    if restore.finalizers().iter().any(|f| f == status::FINALIZER) {
        return Ok(());
    }
    let mut finalizers = restore.finalizers().to_vec();
    finalizers.push(status::FINALIZER.to_string());
    set_finalizers(restores, restore, finalizers).await
}

/// `restore`'s finalizers set to `finalizers`, if it is unchanged since it was read.
pub(crate) async fn set_finalizers(
    restores: &Api<EtcdRestore>,
    restore: &EtcdRestore,
    finalizers: Vec<String>,
) -> Result<(), Error> {
    let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": restore.resource_version()}});
    restores
        .patch(
            &restore.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await?;
    Ok(())
}

/// Removes the finalizer from `restore`, as read again now (its own status writes move the
/// resource version; the read one is the precondition, so another controller's finalizer added
/// meanwhile is never dropped: that is a conflict, retried).
pub(crate) async fn let_go_of_finalizer(
    restores: &Api<EtcdRestore>,
    restore: &EtcdRestore,
) -> Result<(), Error> {
    // Added before the cluster was first held, so in any read since.
    if !restore.finalizers().iter().any(|f| f == status::FINALIZER) {
        return Ok(());
    }
    let Some(restore) = restores.get_opt(&restore.name_any()).await? else {
        return Ok(());
    };
    if !restore.finalizers().iter().any(|f| f == status::FINALIZER) {
        return Ok(());
    }
    let finalizers = restore
        .finalizers()
        .iter()
        .filter(|f| *f != status::FINALIZER)
        .cloned()
        .collect();
    set_finalizers(restores, &restore, finalizers).await
}

/// A restore being deleted (how a user cancels one) lets go of its cluster, then of its
/// finalizer. Before any member was touched (no snapshot recorded), the cluster is given back as
/// it was. After, nothing is deleted: the cluster stays paused, marked as held by an abandoned
/// restore (its operator reports that with a condition), its lock dropped so that a new restore
/// can take it, and a Warning on it says which claims hold which data and how to go on. The
/// restore's own pods and claims are its: the garbage collector removes them after it.
pub(crate) async fn abandon(ctx: &Context, restore: &EtcdRestore) -> Result<Action, Error> {
    if !restore.finalizers().iter().any(|f| f == status::FINALIZER) {
        return Ok(Action::await_change());
    }
    let ns = restore.namespace().unwrap_or_default();
    let name = restore.name_any();
    let uid = restore.uid().unwrap_or_default();
    let restores: Api<EtcdRestore> = Api::namespaced(ctx.client.clone(), &ns);
    let restore = restores.get_status(&name).await?;
    let recorded = restore.status.clone().unwrap_or_default();
    let clusters: Api<EtcdCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let cluster_name = &restore.spec.etcd_cluster.name;
    if let Some(cluster) = clusters.get_opt(cluster_name).await?
        && cluster.annotations().get(RESTORE_ANNOTATION) == Some(&uid)
    {
        match (&recorded.snapshot, &recorded.plan) {
            (Some(_), Some(plan)) => {
                let patch = json!({
                    "metadata": {"annotations": {
                        RESTORE_ANNOTATION: null, PAUSED_BY_RESTORE_ANNOTATION: null,
                        ABANDONED_RESTORE_ANNOTATION: name,
                    }},
                    "spec": {"paused": true},
                });
                clusters
                    .patch(cluster_name, &PatchParams::default(), &Patch::Merge(patch))
                    .await?;
                let note = format!(
                    "EtcdRestore {name} was deleted after it had begun replacing members: the cluster stays paused and nothing is deleted; the old members' data is on the claims {:?} (detached), the restored data on {:?}; to go on, create an EtcdRestore of this cluster again (it starts over from the backup), or set spec.paused: false to let the cluster's operator manage what runs",
                    plan.detached_claims, plan.members
                );
                let reference = cluster.object_ref(&());
                ctx.events
                    .warning(&reference, "RestoreAbandoned", &note)
                    .await;
            }
            _ => release(&clusters, &cluster, &uid).await?,
        }
    }
    ctx.metrics.abandoned(&ns, &name);
    let_go_of_finalizer(&restores, &restore).await?;
    Ok(Action::await_change())
}
