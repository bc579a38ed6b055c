//! Rolling upgrades: what each member pod runs (for the pure planner in
//! `etcd_cluster::upgrade`), and executing its one step: move a member's pod to the target
//! version, move a member whose new image never ran back, or report a refused or failed upgrade.
//! A member moves in place (only the image changes) unless its corruption checks are spelled
//! for another version and its data is on a claim: then it gets a new pod on that claim, made
//! for the version (see `etcd_cluster::checks`).

use std::collections::BTreeMap;

use etcd_api::EtcdCluster;
use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use etcd_cluster::checks::Spelling;
use etcd_cluster::upgrade::must_flush_log;
use etcd_cluster::{ContainerFailure, DataRan, EtcdVersion, PodState, PodVersion, UpgradeStep};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::context::{Context, Error, event, ignore_missing, warn};
use crate::observe::{self, ClaimRecord, MemberPod, same_image};
use etcd_members::access::Access;
use etcd_members::build;
use etcd_members::labels::{UPGRADED_FROM_ANNOTATION, VERSION_ANNOTATION, VERSION_RAN_ANNOTATION};

/// Each member pod's version and state as the upgrade planner needs them, with what has run on
/// its data (its claim's record, and what the pod has run; for a member without a claim, what
/// its pod has run and the version an upgrade moved it from).
pub fn pod_versions(
    cluster: &EtcdCluster,
    pods: &[MemberPod],
    claims: &BTreeMap<String, ClaimRecord>,
) -> BTreeMap<String, PodVersion> {
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
                saved_snapshot: None,
                data_ran: data_ran(p, claims.get(&p.name)),
            };
            (p.name.clone(), pod)
        })
        .collect()
}

/// The newest version that has run on `pod`'s data.
fn data_ran(pod: &MemberPod, claim: Option<&ClaimRecord>) -> DataRan {
    let own = pod.ran.clone().map_or(DataRan::Nothing, DataRan::Version);
    match claim {
        Some(claim) => claim.data_ran.clone().and(own),
        None => pod
            .upgraded_from
            .clone()
            .map_or(DataRan::Nothing, DataRan::Version)
            .and(own),
    }
}

/// Records on each member's claim the version its pod has run, where that is newer than the
/// claim's record (or the claim has none): what the data has run is known from then on, also
/// once the pod is gone.
pub async fn record_ran(
    ctx: &Context,
    cluster: &EtcdCluster,
    pods: &[MemberPod],
    claims: &mut BTreeMap<String, ClaimRecord>,
) -> Result<(), Error> {
    let api = ctx.claims.api(&namespace(cluster));
    for pod in pods {
        let (Some(ran), Some(claim)) = (&pod.ran, claims.get_mut(&pod.name)) else {
            continue;
        };
        // A claim without a record gets one from what runs on it now.
        let updated = match &claim.data_ran {
            DataRan::Unknown => DataRan::Version(ran.clone()),
            known => known.clone().and(DataRan::Version(ran.clone())),
        };
        if updated == claim.data_ran {
            continue;
        }
        let patch = json!({"metadata": {"annotations": {VERSION_RAN_ANNOTATION: ran}}});
        ignore_missing(
            api.patch(&claim.name, &Patch::Merge(patch))
                .await
                .map(|_| ()),
        )?;
        claim.data_ran = DataRan::Version(ran.clone());
    }
    Ok(())
}

/// Asks the members that must have saved a snapshot before their next move (see
/// `etcd_cluster::upgrade::must_flush_log`) whether they have.
pub async fn ask_snapshots(
    target: &EtcdVersion,
    pods: &[MemberPod],
    versions: &mut BTreeMap<String, PodVersion>,
) {
    for pod in pods {
        let Some(version) = versions.get_mut(&pod.name) else {
            continue;
        };
        let from = EtcdVersion::parse(&version.version);
        if let (Ok(from), Some(ip)) = (from, &pod.ip)
            && must_flush_log(&from, target)
        {
            version.saved_snapshot = observe::snapshots_saved(ip).await.map(|n| n > 0);
        }
    }
}

/// etcd's default `--snapshot-count` from 3.6: a member saves a snapshot once it has applied
/// this many entries since its last one.
const DEFAULT_SNAPSHOT_COUNT: u64 = 10_000;

/// Makes every member save a snapshot: one entry more than the snapshot count (`etcdEnv`'s
/// `ETCD_SNAPSHOT_COUNT`, or etcd's default) goes through the log, each a transaction whose
/// condition is never true (a key's modification revision below 0), so nothing is written and
/// the revision does not move. Several at a time, through the leader.
async fn flush_log(cluster: &EtcdCluster, mut client: etcd_client::Client) -> Result<(), Error> {
    use futures::{StreamExt, TryStreamExt};
    let count = cluster
        .spec
        .pod
        .as_ref()
        .and_then(|p| p.etcd_env.as_ref())
        .and_then(|env| env.iter().find(|e| e.name == "ETCD_SNAPSHOT_COUNT"))
        .and_then(|e| e.value.as_deref()?.parse().ok())
        .unwrap_or(DEFAULT_SNAPSHOT_COUNT);
    let never = Txn::new()
        .when([Compare::mod_revision(FLUSH_KEY, CompareOp::Less, 0)])
        .and_then([TxnOp::put(FLUSH_KEY, "", None)]);
    // A first one alone: an error (no leader, no quorum) is seen once, not 64 times.
    client.txn(never.clone()).await?;
    futures::stream::iter(0..count)
        .map(|_| {
            let (mut client, txn) = (client.clone(), never.clone());
            async move { client.txn(txn).await.map(|_| ()) }
        })
        .buffer_unordered(64)
        .try_collect::<()>()
        .await?;
    Ok(())
}

/// The key the flush's transactions name (and never write).
const FLUSH_KEY: &str = "/etcd-operator/flush-log";

/// Executes one upgrade step. Its claim records the version first, so that a pod deleted
/// meanwhile (or on purpose, see [`move_pod`]) comes back at the version its data is headed for.
pub async fn execute(
    ctx: &Context,
    cluster: &EtcdCluster,
    access: &Access,
    pods: &[MemberPod],
    step: &UpgradeStep,
) -> Result<(), Error> {
    let target = cluster.spec.version();
    let pod = |member: &str| pods.iter().find(|p| p.name == member);
    match step {
        UpgradeStep::Upgrade { member, from } => {
            move_pod(ctx, cluster, pod(member), member, target, json!(from)).await?;
            let note = format!("upgrading {member} from {from} to {target}");
            event(ctx, cluster, "MemberUpgrading", &note).await;
        }
        UpgradeStep::Revert { member, to } => {
            move_pod(ctx, cluster, pod(member), member, to, Value::Null).await?;
            let note = format!("moving {member} to {to}: the image it was given never ran");
            event(ctx, cluster, "MemberReverted", &note).await;
        }
        UpgradeStep::FlushLog { member } => {
            let note = format!(
                "making every member save a snapshot before {member} moves to {target}: 3.7 cannot read the log entries 3.5 wrote"
            );
            event(ctx, cluster, "FlushingLog", &note).await;
            let client = observe::any_member(access, pods)
                .await
                .ok_or(Error::NoMember("the log flush"))?;
            flush_log(cluster, client).await?;
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
    let claims = ctx.claims.api(&ns);
    for member in members {
        ignore_missing(
            claims
                .patch(member, &Patch::Merge(forget.clone()))
                .await
                .map(|_| ()),
        )?;
        pods.patch(member, &params, &Patch::Merge(&forget)).await?;
    }
    Ok(())
}

/// Moves `member`'s claim record and pod to `version`; `from` is what a failure goes back to
/// (null once there is nothing to go back to). In place (same pod, same volume; the kubelet
/// restarts the container), unless the pod's corruption checks are spelled for another version
/// and its data is on a claim: then the pod is deleted, and made again on the claim for
/// `version` by the next reconcile (a restart on a claim). A member without a claim cannot be
/// made again without its data, so it moves in place; a Warning says so if `version` ignores
/// its checks' spelling.
async fn move_pod(
    ctx: &Context,
    cluster: &EtcdCluster,
    pod: Option<&MemberPod>,
    member: &str,
    version: &str,
    from: Value,
) -> Result<(), Error> {
    let ns = namespace(cluster);
    let claims = ctx.claims.api(&ns);
    // Both annotations on the claim too: a pod deleted meanwhile comes back as it was moved.
    let record = json!({"metadata": {"annotations": {VERSION_ANNOTATION: version, UPGRADED_FROM_ANNOTATION: from}}});
    ignore_missing(
        claims
            .patch(member, &Patch::Merge(record))
            .await
            .map(|_| ()),
    )?;
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let spelled = pod.and_then(|p| p.check_spelling);
    // Planned from parsed versions: a version that does not parse is not reached here.
    if let Some(target) = EtcdVersion::parse(version)
        .ok()
        .filter(|target| Spelling::differs(spelled, target))
    {
        if build::persistent(&cluster.spec) {
            return ignore_missing(
                pods.delete(member, &DeleteParams::default())
                    .await
                    .map(|_| ()),
            );
        }
        if spelled.is_some_and(|s| !s.understood_by(&target)) {
            let note = format!(
                "{member} moves in place to {version}, which ignores its corruption checks' spelling: its data is not on a claim, so its pod cannot be made again for {version}; the checks are off for it until its pod is next made"
            );
            warn(ctx, cluster, "CorruptionChecksOff", &note).await;
        }
    }
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
