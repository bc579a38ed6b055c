//! Rolling upgrades in place: what each member pod runs (for the pure planner in
//! `etcd_cluster::upgrade`), and executing its one step: move a member's pod to the target
//! image, move a member whose new image never ran back, or report a refused or failed upgrade.

use std::collections::BTreeMap;

use backup_api::EtcdCluster;
use etcd_cluster::{ContainerFailure, EtcdVersion, PodState, PodVersion, UpgradeStep};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use crate::build::{UPGRADED_FROM_ANNOTATION, VERSION_ANNOTATION};
use crate::controller::{Context, Error, event, ignore_missing};
use crate::observe::MemberPod;

/// Each member pod's version and state as the upgrade planner needs them.
pub fn pod_versions(cluster: &EtcdCluster, pods: &[MemberPod]) -> BTreeMap<String, PodVersion> {
    let target = cluster.spec.version();
    let image = cluster.spec.image();
    pods.iter()
        .map(|p| {
            // A pod without the annotation (made by someone else and adopted) is taken to run
            // the target rather than guessed at.
            let version = p.version.clone().unwrap_or_else(|| target.to_string());
            // Patched but not yet restarted on the new image: not ready for the next step.
            let pending = EtcdVersion::parse(&version).ok() == EtcdVersion::parse(target).ok()
                && p.running_image
                    .as_deref()
                    .is_some_and(|running| !same_image(running, &image));
            let state = if pending {
                PodState::Running { ready: false }
            } else {
                p.state
            };
            let never_ran =
                matches!(p.failure, Some(ContainerFailure::Image(_))) && p.restarts == 0;
            let pod = PodVersion {
                version,
                state,
                upgraded_from: p.upgraded_from.clone(),
                failure: p.failure.clone(),
                never_ran,
            };
            (p.name.clone(), pod)
        })
        .collect()
}

/// Whether the image a container status reports is `spec` (the runtime may add a registry
/// host such as `docker.io/library/` to short names).
fn same_image(running: &str, spec: &str) -> bool {
    running == spec || running.ends_with(&format!("/{spec}"))
}

/// Executes one upgrade step. A pod moves in place (same pod, same volume; the kubelet restarts
/// the container); its claim records the version first, so that a pod deleted meanwhile comes
/// back at the version its data is headed for.
pub async fn execute(
    ctx: &Context,
    cluster: &EtcdCluster,
    step: &UpgradeStep,
) -> Result<(), Error> {
    let target = cluster.spec.version();
    match step {
        UpgradeStep::Upgrade { member, from } => {
            move_pod(ctx, cluster, member, target, json!(from)).await?;
            let note = format!("upgrading {member} from {from} to {target}");
            event(ctx, cluster, "MemberUpgrading", &note).await;
        }
        UpgradeStep::Revert { member, to } => {
            move_pod(ctx, cluster, member, to, Value::Null).await?;
            let note = format!("moving {member} to {to}: the image it was given never ran");
            event(ctx, cluster, "MemberReverted", &note).await;
        }
        // Reported by the status (and a Warning when newly so), not acted on.
        UpgradeStep::Failed { .. } | UpgradeStep::Refused(_) => {}
        UpgradeStep::Done | UpgradeStep::Wait { .. } => {}
    }
    Ok(())
}

/// Drops the record of where `members` came from on their pods and claims: they run the new
/// version (see `etcd_cluster::settled`), so a later failure is no reason to go back.
pub async fn settle(ctx: &Context, cluster: &EtcdCluster, members: &[String]) -> Result<(), Error> {
    let ns = namespace(cluster);
    let forget = json!({"metadata": {"annotations": {UPGRADED_FROM_ANNOTATION: null}}});
    let params = PatchParams::default();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    for member in members {
        ignore_missing(
            claims
                .patch(member, &params, &Patch::Merge(&forget))
                .await
                .map(|_| ()),
        )?;
        pods.patch(member, &params, &Patch::Merge(&forget)).await?;
    }
    Ok(())
}

/// Moves `member`'s claim record and pod to `version`; `from` is what a failure goes back to
/// (null once there is nothing to go back to).
async fn move_pod(
    ctx: &Context,
    cluster: &EtcdCluster,
    member: &str,
    version: &str,
    from: Value,
) -> Result<(), Error> {
    let ns = namespace(cluster);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    // Both annotations on the claim too: a pod deleted meanwhile comes back as it was moved.
    let record = json!({"metadata": {"annotations": {VERSION_ANNOTATION: version, UPGRADED_FROM_ANNOTATION: from}}});
    ignore_missing(
        claims
            .patch(member, &PatchParams::default(), &Patch::Merge(&record))
            .await
            .map(|_| ()),
    )?;
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let patch = json!({
        "metadata": {"annotations": {VERSION_ANNOTATION: version, UPGRADED_FROM_ANNOTATION: from}},
        "spec": {"containers": [{"name": "etcd", "image": cluster.spec.image_of(version)}]},
    });
    pods.patch(member, &PatchParams::default(), &Patch::Strategic(&patch))
        .await?;
    Ok(())
}

fn namespace(cluster: &EtcdCluster) -> String {
    cluster.namespace().unwrap_or_default()
}
