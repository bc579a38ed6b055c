//! Reconcile: dereference (source, cluster, Secrets) -> observe (pods, claims, members) -> plan
//! one step (`etcd_cluster::restore_plan`, pure) -> execute -> status. Anything the step machine must not
//! forget (the plan, the snapshot the members verified) is written to status before it is acted
//! on.

use std::sync::Arc;
use std::time::Duration;

use etcd_api::{EtcdCluster, EtcdRestore, EtcdRestoreStatus, RestorePhase};
use etcd_members::build::{self};
use etcd_members::labels::{self};
use etcd_members::origin;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::core::DeserializeGuard;
use kube::core::error_boundary::InvalidObject;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use operator_runtime::reconcile_errors;

use crate::api::{apply_records, apply_report, delete};
use crate::context::{Context, Error};
use crate::execute::execute;
use crate::finalizer::{abandon, let_go_of_finalizer};
use crate::observe;
use crate::status::{self, RESTORE_ANNOTATION};
use crate::validate;
use etcd_cluster::restore_plan;
use etcd_cluster::restore_plan::{RestoreFailure, RestoreStep};

/// Look again soon while something runs; at once after a step changed something: its own
/// status write does not wake the controller (spec changes only), and every reconcile reads
/// the world from the API server, not a cache. (500 ms here added 1 to 1.5 s to every
/// restore, between its steps.) 50 ms keeps a step that changed nothing from spinning.
const CHANGED: Duration = Duration::from_millis(50);
const BUSY: Duration = Duration::from_secs(2);

/// The restore a member pod's change may concern: the one named like its cluster.
pub fn restore_of_member(pod: Pod) -> Option<ObjectRef<DeserializeGuard<EtcdRestore>>> {
    let cluster = pod.labels().get(labels::CLUSTER_LABEL)?;
    Some(ObjectRef::new(cluster).within(&pod.namespace()?))
}

/// The restore of a cluster (named like it) whose status or spec changed; read or not (only its
/// name counts: a cluster this operator cannot read must not stall the watch).
pub fn restore_of_cluster(
    cluster: DeserializeGuard<EtcdCluster>,
) -> Option<ObjectRef<DeserializeGuard<EtcdRestore>>> {
    Some(ObjectRef::new(&cluster.name_any()).within(&cluster.namespace()?))
}

/// The watch hands over every restore, readable or not (`DeserializeGuard`): one that cannot be
/// read is reported, and the others go on.
pub async fn reconcile(
    object: Arc<DeserializeGuard<EtcdRestore>>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let result = match &object.0 {
        Ok(restore) => reconcile_once(Arc::new(restore.clone()), ctx.clone()).await,
        Err(invalid) => Ok(report_unreadable(&object, invalid, &ctx).await),
    };
    if result.is_ok() {
        ctx.backoff.forget(&object.uid().unwrap_or_default());
    }
    result
}

/// A Warning (counted in its series when repeated), and nothing else: its status is not
/// written (the recorded plan and snapshot would be lost with its records), and a deletion
/// keeps its finalizer (which cluster it holds is not known), said in the Warning.
async fn report_unreadable(
    object: &DeserializeGuard<EtcdRestore>,
    invalid: &InvalidObject,
    ctx: &Context,
) -> Action {
    let message = validate::unreadable(invalid, object.meta().deletion_timestamp.is_some());
    tracing::warn!(name = %object.name_any(), %message, "unreadable EtcdRestore");
    ctx.events
        .warning(&object.object_ref(&()), "InvalidObject", &message)
        .await;
    Action::await_change()
}

async fn reconcile_once(restore: Arc<EtcdRestore>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = restore.namespace().unwrap_or_default();
    let name = restore.name_any();
    // A finished restore stays finished (a retry is a new object): member pods that change
    // later cost no API call here.
    let cached_phase = restore.status.as_ref().and_then(|s| s.phase);
    if restore.meta().deletion_timestamp.is_some() {
        return abandon(&ctx, &restore).await;
    }
    if let Some(phase) = cached_phase.filter(|p| p.is_terminal()) {
        ctx.metrics.ended(&ns, &name, phase);
        return Ok(Action::await_change());
    }
    let restores: Api<EtcdRestore> = Api::namespaced(ctx.client.clone(), &ns);
    // The recorded snapshot and plan are read fresh: the cache may not hold this process's
    // last write, and acting without it would plan twice.
    let restore = restores.get_status(&name).await?;
    let recorded = restore.status.clone().unwrap_or_default();
    if let Some(phase) = recorded.phase.filter(|p| p.is_terminal()) {
        ctx.metrics.ended(&ns, &name, phase);
        return Ok(Action::await_change());
    }
    let cluster_name = restore.spec.etcd_cluster.name.clone();

    // Dereference: where the snapshot is and what its EtcdBackup recorded of it (pinned with
    // the plan: a backupRef's newest backup may change meanwhile), the cluster.
    let stored = match restore.spec.from_survivor {
        Some(_) => None,
        None => Some(validate::source(&ctx, &restore).await?),
    };
    let clusters: Api<EtcdCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let cluster = clusters.get_opt(&cluster_name).await?;
    // A recovery from a survivor reads the member its plan chose (see survivor_source).
    let source = match stored {
        Some(source) => source,
        None => match restore.spec.validate(&restore.name_any()) {
            Err(e) => Err((RestoreFailure::BadSource, e.to_string())),
            Ok(()) => Ok(validate::survivor_source(
                cluster.as_ref(),
                recorded.plan.as_ref(),
            )),
        },
    };
    let source = source.map(|mut s| {
        if let Some(url) = &recorded.source {
            s.url = url.clone();
            s.expected = recorded.expected_backup.clone();
        }
        s
    });

    // Observe.
    let pod_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let world = observe::world(&ctx, &restore, &source, cluster.as_ref()).await?;
    // Pods of an earlier restore of the same name (deleted, its pods not yet collected) are
    // deleted: their names are needed again.
    for pod in &world.stale_pods {
        delete(&pod_api, pod).await?;
    }
    let observed = world.observed;
    let restore_nodes = world.restore_nodes;
    let uid = observed.uid.clone();
    let names = cluster.as_ref().map(build::names);

    // Plan one step, execute it, report.
    let names = names.unwrap_or_else(|| etcd_cluster::ClusterNames::new(&cluster_name, &ns, None));
    let step = restore_plan::plan(&names, &observed);
    let phase = restore_plan::phase_of(&step, &observed);
    tracing::debug!(restore = %name, ?step, ?phase, "planned");
    if let RestoreStep::Done = step {
        return Ok(Action::await_change());
    }
    // The survivor is chosen by the plan this step records: its snapshot is the source.
    let source = match &step {
        RestoreStep::RecordPlan(plan) if plan.survivor.is_some() => {
            Ok(validate::survivor_source(cluster.as_ref(), Some(plan)))
        }
        _ => source,
    };
    let executed = execute(
        &ctx,
        &restore,
        cluster.as_ref(),
        source.as_ref().ok(),
        &restore_nodes,
        &step,
    )
    .await;
    // A terminal phase is recorded only once its step's effects are done (the cluster released,
    // the run-once pods with their copies of the snapshot gone): a terminal phase stops every
    // later reconcile, so a failed release or clean-up recorded as done would stay undone.
    // Unrecorded, the step is planned and tried again.
    let executed = match executed {
        Err(error) if phase.is_terminal() => return Err(error),
        other => other,
    };
    // Refused by the API server: said at once, with the server's words. Before the snapshot is
    // recorded nothing of the cluster was touched: the refusal is recorded as the restore's
    // failure, and the next reconcile discards what the restore made and gives the cluster back.
    // After, the step is retried (backing off) while the Warning says why.
    if let Err(refused @ Error::Refused { .. }) = &executed {
        let reference = restore.object_ref(&());
        ctx.events
            .warning(&reference, "Refused", &refused.to_string())
            .await;
        if observed.snapshot.is_none() {
            let reason = RestoreFailure::Refused.record(&format!(
                "{refused}; no member or volume of the cluster was touched"
            ));
            let records = status::Records {
                reason: Some(reason),
                ..status::Records::of(&restore)
            };
            apply_records(&restores, &name, &records).await?;
            return Ok(Action::requeue(CHANGED));
        }
    }
    // A pod that passes for a restored member holds its name: the members are not started
    // (nor is anything done on its word) until it is gone; the Warning says which.
    if let Err(foreign @ Error::Origin(origin::MakeError::Foreign(_))) = &executed {
        let reference = restore.object_ref(&());
        ctx.events
            .warning(&reference, "ForeignPod", &foreign.to_string())
            .await;
    }
    let report = status::report(&restore, &step, phase, Timestamp::now());
    apply_report(&restores, &name, &report).await?;
    announce(&ctx, &restore, &step).await;
    match phase {
        RestorePhase::Succeeded | RestorePhase::Failed => {
            let seconds = report_seconds(&report);
            let outcome = match (&step, &report.reason) {
                _ if phase == RestorePhase::Succeeded => Ok(()),
                (RestoreStep::Fail { reason, .. }, _) => Err(*reason),
                (_, Some(record)) => Err(RestoreFailure::from_record(record).0),
                (_, None) => Err(RestoreFailure::RestoreFailed),
            };
            ctx.metrics.finish(&ns, &name, outcome, seconds);
        }
        _ => ctx.metrics.running(&ns, &name),
    }
    executed?;
    // Ended and holding nothing (handed over, or given back): nothing left for a deletion to
    // let go of, so deleting it is not held up. A restore that failed after touching members
    // still holds its cluster and keeps the finalizer.
    let still_holds = cluster
        .as_ref()
        .is_some_and(|c| c.annotations().get(RESTORE_ANNOTATION) == Some(&uid));
    let ended = matches!(
        step,
        RestoreStep::Succeed { .. } | RestoreStep::Fail { release: true, .. }
    );
    if ended || (phase.is_terminal() && !still_holds) {
        let_go_of_finalizer(&restores, &restore).await?;
    }
    Ok(match step {
        RestoreStep::Wait { .. }
        | RestoreStep::MembersUnhealthy(_)
        | RestoreStep::Discard { .. } => Action::requeue(BUSY),
        RestoreStep::Fail { .. } | RestoreStep::Succeed { .. } | RestoreStep::Done => {
            Action::await_change()
        }
        _ => Action::requeue(CHANGED),
    })
}

/// An event per step that acts, a Warning when the restore fails.
async fn announce(ctx: &Context, restore: &EtcdRestore, step: &RestoreStep) {
    let reference = restore.object_ref(&());
    let (reason, message) = status::describe(step);
    match step {
        RestoreStep::Wait { .. } | RestoreStep::Done => {}
        RestoreStep::Fail {
            reason, message, ..
        }
        | RestoreStep::Discard {
            reason, message, ..
        } => {
            ctx.events
                .warning(&reference, reason.as_str(), message)
                .await
        }
        RestoreStep::MembersUnhealthy(message) => {
            ctx.events
                .warning(&reference, "MembersUnhealthy", message)
                .await
        }
        _ => ctx.events.normal(&reference, reason, &message).await,
    }
}

/// Start to completion of a finished restore's status.
fn report_seconds(report: &EtcdRestoreStatus) -> f64 {
    match (&report.start_time, &report.completion_time) {
        (Some(start), Some(end)) => end.0.duration_since(start.0).as_secs_f64(),
        _ => 0.0,
    }
}

/// Retries a failed reconcile after a delay that grows with each failure of that restore
/// (kube's default backoff: 0.8 s doubling to 30 s, with jitter), and starts over after a success.
pub fn error_policy(
    restore: Arc<DeserializeGuard<EtcdRestore>>,
    error: &Error,
    ctx: Arc<Context>,
) -> Action {
    reconcile_errors::retry(
        &*restore,
        error,
        &ctx.backoff,
        &ctx.metrics.reconcile_errors,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn member_pods_and_clusters_wake_the_restore_named_like_the_cluster() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "c-4", "namespace": "ns",
                         "labels": {"app": "etcd", "etcd_cluster": "c"}},
        }))
        .unwrap();
        assert_eq!(
            restore_of_member(pod),
            Some(ObjectRef::new("c").within("ns"))
        );
        let unlabelled: Pod =
            serde_json::from_value(json!({"metadata": {"name": "x", "namespace": "ns"}})).unwrap();
        assert_eq!(restore_of_member(unlabelled), None);
        let cluster: DeserializeGuard<EtcdCluster> = serde_json::from_value(json!({
            "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
            "metadata": {"name": "c", "namespace": "ns"}, "spec": {"size": 3},
        }))
        .unwrap();
        assert_eq!(
            restore_of_cluster(cluster),
            Some(ObjectRef::new("c").within("ns"))
        );
        // One this operator cannot read wakes its restore all the same.
        let unreadable: DeserializeGuard<EtcdCluster> = serde_json::from_value(json!({
            "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
            "metadata": {"name": "c", "namespace": "ns"}, "spec": {"size": "three"},
        }))
        .unwrap();
        assert!(unreadable.0.is_err());
        assert_eq!(
            restore_of_cluster(unreadable),
            Some(ObjectRef::new("c").within("ns"))
        );
    }
}
