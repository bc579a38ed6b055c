//! Reconcile: observe the world, let the planner pick one step, record its intent, execute it,
//! report. Every reconcile starts again from the world, so a restart at any point resumes.

use std::sync::Arc;
use std::time::Duration;

use etcd_api::{EtcdCluster, EtcdClusterStatus};

use etcd_cluster::arbitration::{self, NextLook};
use etcd_cluster::{
    MembershipObserved, MembershipStep, failed_upgrade, plan, plan_upgrade, settled,
};
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::core::DeserializeGuard;
use kube::core::error_boundary::InvalidObject;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use operator_runtime::reconcile_errors;

use crate::adopt;
use crate::context::warn;
use crate::context::{Context, Error, MANAGER};
use crate::defrag;
use crate::execute::execute;
use crate::observe::{self};
use crate::quorum_loss;
use crate::status;
use crate::status_writer::StatusWriter;
use crate::upgrade;
use crate::validate;
use etcd_members::access::Access;
use etcd_members::build::{self};
use etcd_members::labels;
use etcd_members::origin;
use etcd_members::tls::{self, Dereferenced, TlsSecrets};

/// Requeue at once after a step that changed something (the next one often can follow), soon
/// while waiting for the world, slowly once converged.
const CHANGED: Duration = Duration::from_millis(500);
const BUSY: Duration = Duration::from_secs(2);
const IDLE: Duration = Duration::from_secs(30);
/// A Secret the spec names may be created after the cluster: look again soon.
const MISSING_SECRET: Duration = Duration::from_secs(10);

/// The watch hands over every object, readable or not (`DeserializeGuard`): one that cannot be
/// read is reported, and the others go on.
pub async fn reconcile(
    object: Arc<DeserializeGuard<EtcdCluster>>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    // Another operator's cluster (scope annotation), or on its way out: hands off, read or not.
    if !ctx.scope.manages(&*object) || object.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let result = match &object.0 {
        Ok(cluster) => reconcile_once(Arc::new(cluster.clone()), ctx.clone()).await,
        Err(invalid) => Ok(report_unreadable(&object, invalid, &ctx).await),
    };
    if result.is_ok() {
        ctx.backoff.forget(&object.uid().unwrap_or_default());
    }
    result
}

/// A Warning (counted in its series when repeated), and nothing written to the status: its
/// phase, recorded membership change and defragmentation round are not known, and a status
/// written without them would lose them (a `Running` cluster read as never created).
async fn report_unreadable(
    object: &DeserializeGuard<EtcdCluster>,
    invalid: &InvalidObject,
    ctx: &Context,
) -> Action {
    let message = validate::unreadable(invalid);
    tracing::warn!(name = %object.name_any(), %message, "unreadable EtcdCluster");
    ctx.events
        .warning(&object.object_ref(&()), "InvalidObject", &message)
        .await;
    Action::await_change()
}

async fn reconcile_once(cluster: Arc<EtcdCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let clusters: Api<EtcdCluster> = Api::namespaced(ctx.client.clone(), &ns);
    // Everything below works on the cluster read fresh, not on the cache: the cache may not
    // have this process's own last write yet (planning without it would repeat or undo that
    // change), nor a restore's hand-over (its `restored-by` annotation, which makes a change
    // recorded before it stale), nor a spec changed since it was validated.
    let cluster = Arc::new(clusters.get_status(&name).await?);
    let writer = StatusWriter::new(ctx.client.clone(), &cluster);
    if cluster.spec.is_paused() {
        let status = status::paused(&cluster);
        writer.report(status, Some(&cluster)).await?;
        return Ok(Action::await_change());
    }
    // Validate, then dereference the TLS Secrets: bad input gets a condition and a Warning,
    // and nothing running is touched. A missing Secret is looked at again shortly (it may be
    // created after the cluster), an invalid spec only when the spec changes.
    let target = match validate::spec(&cluster) {
        Ok(target) => target,
        Err(problem) => {
            return report_invalid(&ctx, &writer, &cluster, &problem, Action::await_change()).await;
        }
    };
    let secrets = Api::<Secret>::namespaced(ctx.client.clone(), &ns);
    let client_tls = match tls::dereference(&secrets, &ns, &TlsSecrets::of(&cluster.spec)).await? {
        Dereferenced::Ready(client_tls) => client_tls,
        Dereferenced::Missing(problem) => {
            let then = Action::requeue(MISSING_SECRET);
            return report_invalid(&ctx, &writer, &cluster, &problem, then).await;
        }
    };

    // Observe.
    let names = build::names(&cluster);
    let apply = PatchParams::apply(MANAGER).force();
    for service in build::services(&cluster) {
        let services: Api<Service> = Api::namespaced(ctx.client.clone(), &ns);
        services
            .patch(&service.name_any(), &apply, &Patch::Apply(&service))
            .await?;
    }
    let budget = build::disruption_budget(&cluster);
    Api::<PodDisruptionBudget>::namespaced(ctx.client.clone(), &ns)
        .patch(&name, &apply, &Patch::Apply(&budget))
        .await?;
    let selector = ListParams::default().labels(&labels::label_selector(&name));
    let pod_api = Api::<Pod>::namespaced(ctx.client.clone(), &ns);
    let labelled = pod_api.list(&selector).await?.items;
    // Only the pods the operators made are members (see origin.rs).
    let (pods, foreign_pods) = origin::members_by_origin(&pod_api, &ctx.proof, labelled).await?;
    // Every claim of the namespace: this cluster's, and the names of the others named like its
    // members (detached by a restore, left by an earlier cluster of this name, a user's), which
    // new members must not take. From the cache once it shows this operator's own writes (see
    // claims.rs); live after the spec or a restore's hand-over changed.
    let claims = ctx.claims_of(&cluster).await?;
    let (claims, taken) = observe::split_claims(&names, claims);
    adopt::adopt(&ctx, &cluster, &pods, &claims).await?;
    let pods = observe::member_pods(&pods);
    let access = Access {
        names: names.clone(),
        tls: client_tls,
    };
    let mut etcd = observe::members(&access, &pods).await;
    let databases = std::mem::take(&mut etcd.databases);
    let mut live_claims = observe::live_claims(&claims);
    upgrade::record_ran(&ctx, &cluster, &pods, &mut live_claims).await?;
    let nodes = observe::nodes(&ctx.client).await?;
    let nodes_down = observe::nodes_down(&pods, &live_claims, nodes.as_deref(), chrono::Utc::now());
    let observed = MembershipObserved {
        pods: pods.iter().map(|p| (p.name.clone(), p.state)).collect(),
        claims: live_claims.keys().cloned().collect(),
        reserved: observe::terminating_claims(&claims)
            .into_iter()
            .chain(taken)
            .collect(),
        crashing: pods
            .iter()
            .filter_map(|p| Some((p.name.clone(), p.crash_loop()?)))
            .collect(),
        members: etcd.members,
        leader_list: etcd.leader_list,
        member_errors: etcd.errors,
        nodes_down,
        replace_after_seconds: cluster.spec.replace_after_seconds(),
        intent: status::intent(&cluster),
        intent_age_seconds: status::intent_age_seconds(&cluster),
        persistent: build::persistent(&cluster.spec),
        bootstrapped: status::bootstrapped(&cluster),
        foreign_pods,
    };

    // Plan one step, execute it, report. A failed upgrade is looked at first: its member
    // holds everything else up until it runs again.
    let mut versions = upgrade::pod_versions(&cluster, &pods, &live_claims);
    upgrade::ask_snapshots(&target, &pods, &mut versions).await;
    let settled = settled(&target, &versions);
    if !settled.is_empty() {
        upgrade::settle(&ctx, &cluster, &settled).await?;
    }
    // Nothing moves while a foreign pod passes for a member (the planner waits, see origin.rs).
    let failed = failed_upgrade(&target, &versions).filter(|_| observed.foreign_pods.is_empty());
    let planned = plan(&names, cluster.spec.size as usize, &observed);
    let step = arbitration::membership_turn(failed.is_some(), planned);
    tracing::debug!(cluster = %name, ?step, ?failed, "planned");
    let mut outcome = execute(
        &ctx,
        &writer,
        &cluster,
        &target,
        &access,
        &pods,
        &live_claims,
        &step,
    )
    .await;
    let planned_upgrade = observed
        .members
        .as_ref()
        .map(|members| plan_upgrade(&target, &versions, members));
    let alarms = !observed.member_errors.is_empty();
    let upgrade = arbitration::upgrade_turn(failed, &step, planned_upgrade, alarms);
    if let Some(upgrade) = &upgrade {
        outcome = upgrade::execute(&ctx, &cluster, &access, &pods, upgrade).await;
        ctx.metrics.observe_upgrade(&ns, &name, upgrade);
    }
    let may_defragment = arbitration::may_defragment(&step, upgrade.as_ref(), outcome.is_ok());
    let view = observe::EtcdView {
        members: observed.members.clone(),
        leader_list: observed.leader_list,
        errors: observed.member_errors.clone(),
        databases,
    };
    let now = chrono::Utc::now();
    let defrag = defrag::reconcile(
        &ctx,
        &writer,
        &cluster,
        &access,
        &pods,
        &view,
        may_defragment,
        now,
    )
    .await;
    // A lost quorum: recovered automatically when spec.quorumLoss says so (its rules decide).
    // An API error here is said in the condition, not allowed to stop the report.
    let recovery = match &step {
        MembershipStep::QuorumLost { .. } => Some(
            match quorum_loss::reconcile(&ctx, &cluster, &observed).await {
                Ok(said) => said,
                Err(e) => {
                    tracing::warn!(cluster = %name, error = %e, "quorum-loss recovery could not act");
                    format!("could not act: {e}")
                }
            },
        ),
        _ => None,
    };
    let mut report = status::report(
        &cluster,
        &observed,
        &pods,
        &step,
        upgrade.as_ref(),
        &outcome,
    );
    if let Some(recovery) = recovery {
        status::add_to_available(&mut report, &recovery);
    }
    let round = writer.defragmentation();
    let last_round = round.as_ref().and_then(|d| d.last_round.as_ref());
    if let Some(condition) = status::defragmented(&cluster, last_round) {
        report.conditions.get_or_insert_default().push(condition);
    }
    ctx.metrics
        .observe(&ns, &name, cluster.spec.size, &observed, &step);
    announce(&ctx, &cluster, &report).await;
    writer.report(report, None).await?;
    outcome?;
    defrag.result?;
    Ok(Action::requeue(
        match arbitration::next_look(&step, upgrade.as_ref(), defrag.busy) {
            NextLook::Soon => CHANGED,
            NextLook::Busy => BUSY,
            NextLook::Idle => IDLE,
        },
    ))
}

/// A Warning for each condition that newly went bad (quorum lost, an invalid spec, a refused
/// or failed upgrade, a new cause of degradation), once: not again on every reconcile while
/// it stays so.
async fn announce(ctx: &Context, cluster: &EtcdCluster, new_status: &EtcdClusterStatus) {
    for (reason, message) in status::new_warnings(cluster.status.as_ref(), new_status) {
        warn(ctx, cluster, &reason, &message).await;
    }
}

/// Bad input: a condition and a Warning, nothing else touched.
async fn report_invalid(
    ctx: &Context,
    writer: &StatusWriter,
    cluster: &EtcdCluster,
    problem: &str,
    then: Action,
) -> Result<Action, Error> {
    let status = status::invalid(cluster, problem);
    announce(ctx, cluster, &status).await;
    writer.report(status, Some(cluster)).await?;
    Ok(then)
}

/// Retries a failed reconcile after a delay that grows with each failure of that cluster
/// (kube's default backoff: 0.8 s doubling to 30 s, with jitter), and starts over after a success.
pub fn error_policy(
    cluster: Arc<DeserializeGuard<EtcdCluster>>,
    error: &Error,
    ctx: Arc<Context>,
) -> Action {
    reconcile_errors::retry(
        &*cluster,
        error,
        &ctx.backoff,
        &ctx.metrics.reconcile_errors,
    )
}
