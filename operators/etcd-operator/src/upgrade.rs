//! Rolling upgrades in place: what each member pod runs (for the pure planner in
//! `etcd_cluster::upgrade`), and executing its one step: move a member's pod to the target
//! image, move a member whose new image never ran back, or report a refused or failed upgrade.

use std::collections::BTreeMap;

use backup_api::EtcdCluster;
use etcd_cluster::{EtcdVersion, PodState, PodVersion, UpgradeStep};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use crate::build::{UPGRADED_FROM_ANNOTATION, VERSION_ANNOTATION};
use crate::controller::{Context, Error, event, ignore_missing, warn};
use crate::observe::{ClaimRecord, MemberPod};

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
            let pod = PodVersion {
                version,
                state,
                upgraded_from: p.upgraded_from.clone(),
                failure: p.failure.clone(),
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
    pods: &[MemberPod],
    claims: &BTreeMap<String, ClaimRecord>,
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
            let note = format!("moving {member} back to {to}: its new image never ran");
            event(ctx, cluster, "MemberReverted", &note).await;
        }
        UpgradeStep::Failed {
            member,
            version,
            cause,
        } => {
            let note =
                format!("{member} on {version} does not run ({cause}); the upgrade is paused");
            warn(ctx, cluster, "UpgradeFailed", &note).await;
        }
        UpgradeStep::Refused(e) => {
            let note = format!("{e}; no member was touched");
            warn(ctx, cluster, "UpgradeRefused", &note).await;
        }
        UpgradeStep::Done => {
            // The upgrade is over: nothing to go back to any more.
            let ns = namespace(cluster);
            let forget = json!({"metadata": {"annotations": {UPGRADED_FROM_ANNOTATION: null}}});
            let params = PatchParams::default();
            let pod_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
            for pod in pods.iter().filter(|p| p.upgraded_from.is_some()) {
                pod_api
                    .patch(&pod.name, &params, &Patch::Merge(&forget))
                    .await?;
            }
            let claim_api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
            for (name, _) in claims.iter().filter(|(_, c)| c.upgraded_from.is_some()) {
                claim_api
                    .patch(name, &params, &Patch::Merge(&forget))
                    .await?;
            }
        }
        UpgradeStep::Wait { .. } => {}
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
