//! Reconcile: observe the world, let the planner pick one step, record its intent, execute it,
//! report. Every reconcile starts again from the world, so a restart at any point resumes.

use std::sync::Arc;
use std::time::Duration;

use backup_api::{EtcdCluster, EtcdClusterStatus};
use etcd_client::MemberAddOptions;
use std::collections::BTreeMap;

use etcd_cluster::{
    EtcdVersion, Intent, MembershipObserved, MembershipStep, UpgradeStep, failed_upgrade, plan,
    plan_upgrade, settled, starting_version,
};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use operator_runtime::reconcile_errors;
use operator_runtime::status_apply;

use crate::adopt;
use crate::context::{Context, Error, MANAGER};
use crate::context::{event, ignore_missing, warn};
use crate::defrag;
use crate::observe::{self, ClaimRecord, MemberPod};
use crate::status;
use crate::upgrade;
use etcd_members::access::Access;
use etcd_members::build::{self, Bootstrap};
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

pub async fn reconcile(cluster: Arc<EtcdCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    let result = reconcile_once(cluster.clone(), ctx.clone()).await;
    if result.is_ok() {
        ctx.backoff.forget(&cluster.uid().unwrap_or_default());
    }
    result
}

async fn reconcile_once(cluster: Arc<EtcdCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let clusters: Api<EtcdCluster> = Api::namespaced(ctx.client.clone(), &ns);
    // Another operator's cluster (scope annotation), or on its way out: hands off.
    if !ctx.scope.manages(&cluster) || cluster.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    // Everything below works on the cluster read fresh, not on the cache: the cache may not
    // have this process's own last write yet (planning without it would repeat or undo that
    // change), nor a restore's hand-over (a status written from it would bring back the
    // membership change the hand-over cleared), nor a spec changed since it was validated.
    let cluster = Arc::new(clusters.get_status(&name).await?);
    if cluster.spec.is_paused() {
        let status = status::paused(&cluster);
        patch_status(&clusters, &name, Some(&cluster), &status).await?;
        return Ok(Action::await_change());
    }
    // Validate, then dereference the TLS Secrets: bad input gets a condition and a Warning,
    // and nothing running is touched. A missing Secret is looked at again shortly (it may be
    // created after the cluster), an invalid spec only when the spec changes.
    if let Err(problem) = validate(&cluster) {
        return report_invalid(&ctx, &cluster, &problem, Action::await_change()).await;
    }
    let secrets = Api::<Secret>::namespaced(ctx.client.clone(), &ns);
    let client_tls = match tls::dereference(&secrets, &ns, &TlsSecrets::of(&cluster.spec)).await? {
        Dereferenced::Ready(client_tls) => client_tls,
        Dereferenced::Missing(problem) => {
            return report_invalid(&ctx, &cluster, &problem, Action::requeue(MISSING_SECRET)).await;
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
    // new members must not take.
    let claims = Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), &ns)
        .list(&ListParams::default())
        .await?
        .items;
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
        intent: status::intent(&cluster),
        intent_age_seconds: status::intent_age_seconds(&cluster),
        persistent: build::persistent(&cluster.spec),
        bootstrapped: status::bootstrapped(&cluster),
        foreign_pods,
    };

    // Plan one step, execute it, report. A failed upgrade is looked at first: its member
    // holds everything else up until it runs again.
    let target = EtcdVersion::parse(cluster.spec.version()).expect("validated");
    let mut versions = upgrade::pod_versions(&cluster, &pods, &live_claims);
    upgrade::ask_snapshots(&target, &pods, &mut versions).await;
    let settled = settled(&target, &versions);
    if !settled.is_empty() {
        upgrade::settle(&ctx, &cluster, &settled).await?;
    }
    // Nothing moves while a foreign pod passes for a member (the planner waits, see origin.rs).
    let failed = failed_upgrade(&target, &versions).filter(|_| observed.foreign_pods.is_empty());
    let planned = plan(&names, cluster.spec.size as usize, &observed);
    // While an upgrade is paused only restarts on claims go on (they delete nothing).
    let step = match (&failed, planned) {
        (None, step) => step,
        (
            Some(_),
            step @ (MembershipStep::StartMember { .. } | MembershipStep::DeletePod { .. }),
        ) => step,
        (Some(_), _) => MembershipStep::Wait {
            reason: "the upgrade is paused".into(),
        },
    };
    tracing::debug!(cluster = %name, ?step, ?failed, "planned");
    let mut outcome = execute(&ctx, &cluster, &access, &pods, &live_claims, &step).await;
    // Otherwise upgrades only once membership has converged.
    let upgrade = match (failed, &step, &observed.members) {
        (Some(failed), _, _) => Some(failed),
        (None, MembershipStep::Converged, Some(members)) => {
            Some(match plan_upgrade(&target, &versions, members) {
                // No member moves while etcd reports an alarm.
                UpgradeStep::Upgrade { .. } | UpgradeStep::FlushLog { .. }
                    if !observed.member_errors.is_empty() =>
                {
                    UpgradeStep::Wait {
                        reason: "etcd reports an alarm (see Degraded); the upgrade waits".into(),
                    }
                }
                step => step,
            })
        }
        _ => None,
    };
    if let Some(upgrade) = &upgrade {
        outcome = upgrade::execute(&ctx, &cluster, &access, &pods, upgrade).await;
        ctx.metrics.observe_upgrade(&ns, &name, upgrade);
    }
    // Defragmentation only once membership has converged and no upgrade is under way.
    let may_defragment = matches!(step, MembershipStep::Converged)
        && matches!(upgrade, None | Some(UpgradeStep::Done))
        && outcome.is_ok();
    let view = observe::EtcdView {
        members: observed.members.clone(),
        leader_list: observed.leader_list,
        errors: observed.member_errors.clone(),
        databases,
    };
    let now = chrono::Utc::now();
    let defrag =
        defrag::reconcile(&ctx, &cluster, &access, &pods, &view, may_defragment, now).await;
    let mut report = status::report(
        &cluster,
        &observed,
        &pods,
        &step,
        upgrade.as_ref(),
        &outcome,
    );
    let last_round = defrag.status.as_ref().and_then(|d| d.last_round.as_ref());
    if let Some(condition) = status::defragmented(&cluster, last_round) {
        report.conditions.get_or_insert_default().push(condition);
    }
    ctx.metrics
        .observe(&ns, &name, cluster.spec.size, &observed, &step);
    announce(&ctx, &cluster, &report).await;
    patch_status(&clusters, &name, None, &report).await?;
    outcome?;
    defrag.result?;
    Ok(match step {
        // A defragmentation round under way: its next step soon.
        MembershipStep::Converged if defrag.busy => Action::requeue(BUSY),
        _ if matches!(upgrade, Some(UpgradeStep::Failed { .. })) => Action::requeue(IDLE),
        MembershipStep::Converged
            if matches!(
                upgrade,
                Some(
                    UpgradeStep::Upgrade { .. }
                        | UpgradeStep::Wait { .. }
                        | UpgradeStep::FlushLog { .. }
                )
            ) =>
        {
            Action::requeue(BUSY)
        }
        MembershipStep::Converged => Action::requeue(IDLE),
        MembershipStep::QuorumLost { .. } => Action::requeue(IDLE),
        MembershipStep::Wait { .. } => Action::requeue(BUSY),
        _ => Action::requeue(CHANGED),
    })
}

fn validate(cluster: &EtcdCluster) -> Result<(), String> {
    let size = cluster.spec.size;
    if !(1..=7).contains(&size) {
        return Err(format!("size {size} is outside 1..7"));
    }
    EtcdVersion::parse_supported(cluster.spec.version()).map_err(|e| e.to_string())?;
    if let Some(d) = &cluster.spec.defragmentation {
        defrag::check_schedule(&d.schedule)?;
    }
    TlsSecrets::of(&cluster.spec).validate()
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
    cluster: &EtcdCluster,
    problem: &str,
    then: Action,
) -> Result<Action, Error> {
    let ns = cluster.namespace().unwrap_or_default();
    let clusters: Api<EtcdCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let status = status::invalid(cluster, problem);
    announce(ctx, cluster, &status).await;
    patch_status(&clusters, &cluster.name_any(), Some(cluster), &status).await?;
    Ok(then)
}

/// Executes one step. Steps that change membership record their intent in status first.
/// `claims` are the data claims by member, with what they record about their data.
async fn execute(
    ctx: &Context,
    cluster: &EtcdCluster,
    access: &Access,
    pods: &[MemberPod],
    claims: &BTreeMap<String, ClaimRecord>,
    step: &MembershipStep,
) -> Result<(), Error> {
    // The version a pod is created with (see `starting_version`), and for a member restarting
    // in the middle of an upgrade, the version it came from.
    let version_of = |member: &str| {
        let target = EtcdVersion::parse(cluster.spec.version()).expect("validated");
        let record = claims.get(member).cloned().unwrap_or_default();
        let running = pods.iter().filter_map(|p| p.version.as_deref());
        let version = starting_version(&target, record.version.as_deref(), running).to_string();
        let from = record
            .upgraded_from
            .filter(|_| record.version.as_deref() == Some(&version));
        (version, from)
    };
    let ns = cluster.namespace().unwrap_or_default();
    let clusters: Api<EtcdCluster> = Api::namespaced(ctx.client.clone(), &ns);
    // A merge patch of this one field: a server-side apply of it alone would drop every other
    // status field this manager owns (phase among them) until the report is written.
    let record = |intent: Option<Intent>| {
        let clusters = clusters.clone();
        async move {
            let patch =
                serde_json::json!({"status": {"membershipChange": intent.map(status::change)}});
            clusters
                .patch_status(
                    &cluster.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
                .map(|_| ())
        }
    };
    match step {
        MembershipStep::Seed { member } => {
            record(Some(Intent::Seed {
                member: member.clone(),
            }))
            .await?;
            let token = format!(
                "{}-{:08x}",
                cluster.uid().unwrap_or_default(),
                rand::random::<u32>()
            );
            let (version, _) = version_of(member);
            create_member(
                ctx,
                cluster,
                member,
                &Bootstrap::New { token },
                &version,
                None,
            )
            .await?;
            event(
                ctx,
                cluster,
                "SeedCreated",
                &format!("created seed member {member}"),
            )
            .await;
        }
        MembershipStep::AddLearner { member } => {
            record(Some(Intent::Add {
                member: member.clone(),
            }))
            .await?;
            let mut client = observe::any_member(access, pods)
                .await
                .ok_or(Error::NoMember("the membership change"))?;
            let learner = Some(MemberAddOptions::new().with_is_learner());
            let added = client
                .member_add([access.names.peer_url(member)], learner)
                .await;
            if !etcd_asks_to_wait(added)? {
                let note = format!("added {member} to etcd as a learner");
                event(ctx, cluster, "MemberAdded", &note).await;
            }
        }
        MembershipStep::StartMember {
            member,
            initial_cluster,
        } => {
            let bootstrap = Bootstrap::Existing {
                initial_cluster: initial_cluster.clone(),
            };
            let (version, from) = version_of(member);
            create_member(ctx, cluster, member, &bootstrap, &version, from).await?;
            event(
                ctx,
                cluster,
                "MemberStarted",
                &format!("started pod {member} (etcd {version})"),
            )
            .await;
        }
        MembershipStep::Promote { member, id } => {
            let mut client = observe::any_member(access, pods)
                .await
                .ok_or(Error::NoMember("the membership change"))?;
            client.member_promote(*id).await?;
            event(
                ctx,
                cluster,
                "MemberPromoted",
                &format!("promoted {member} to a voting member"),
            )
            .await;
        }
        MembershipStep::RemoveMember { member, id, reason } => {
            record(Some(Intent::Remove {
                member: member.clone(),
                id: *id,
                reason: reason.clone(),
            }))
            .await?;
            let mut client = observe::any_member(access, pods)
                .await
                .ok_or(Error::NoMember("the membership change"))?;
            if !etcd_asks_to_wait(client.member_remove(*id).await)? {
                let who = member.clone().unwrap_or_else(|| format!("{id:x}"));
                let note = format!("removed {who} from etcd: {reason}");
                event(ctx, cluster, "MemberRemoved", &note).await;
            }
        }
        MembershipStep::DeleteMemberResources { member } => {
            delete_pod(ctx, &ns, member).await?;
            // Only the claim observed as this cluster's, unchanged since (uid and
            // resourceVersion): one detached meanwhile (relabelled by a restore keeping the old
            // volumes) is not touched; the delete fails and the next reconcile sees it detached.
            let deleted = match claims.get(member) {
                Some(claim) => {
                    let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
                    let unchanged = DeleteParams {
                        preconditions: Some(Preconditions {
                            uid: claim.uid.clone(),
                            resource_version: claim.resource_version.clone(),
                        }),
                        ..Default::default()
                    };
                    ignore_missing(api.delete(&claim.name, &unchanged).await.map(|_| ()))?;
                    "pod and claim"
                }
                None => "pod",
            };
            event(
                ctx,
                cluster,
                "MemberDeleted",
                &format!("deleted {deleted} of {member}, no longer a member"),
            )
            .await;
        }
        MembershipStep::DeletePod { member } => {
            delete_pod(ctx, &ns, member).await?;
            event(
                ctx,
                cluster,
                "MemberRestarted",
                &format!("deleted failed pod {member}"),
            )
            .await;
        }
        MembershipStep::ClearIntent => record(None).await?,
        // Reported by the status (and a Warning when newly so), nothing done.
        MembershipStep::QuorumLost { .. }
        | MembershipStep::Wait { .. }
        | MembershipStep::Converged => {}
    }
    Ok(())
}

async fn create_member(
    ctx: &Context,
    cluster: &EtcdCluster,
    member: &str,
    bootstrap: &Bootstrap,
    version: &str,
    upgraded_from: Option<String>,
) -> Result<(), Error> {
    let ns = cluster.namespace().unwrap_or_default();
    // Whom the member runs as follows its claim's data (see build::run_as); no claim: emptyDir.
    let mut claimed = None;
    if let Some(claim) = build::claim(cluster, member, version) {
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
        match claims.create(&PostParams::default(), &claim).await {
            Ok(made) => claimed = Some(made),
            // Made by an earlier run of this step, or not this cluster's: then the member is
            // not started on it (it holds other data: a detached volume, a user's claim).
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let existing = claims.get(member).await?;
                let cluster_label = existing.labels().get(labels::CLUSTER_LABEL);
                if cluster_label != Some(&cluster.name_any()) {
                    return Err(Error::ForeignClaim(member.to_string()));
                }
                claimed = Some(existing);
            }
            Err(e) => return Err(e.into()),
        }
    }
    let run_as = build::run_as(claimed.as_ref());
    let mut pod = build::pod(cluster, member, bootstrap, version, run_as);
    if let Some(from) = upgraded_from {
        pod.annotations_mut()
            .insert(labels::UPGRADED_FROM_ANNOTATION.into(), from);
    }
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    origin::make_member_pod(&pods, &ctx.proof, &pod).await?;
    Ok(())
}

async fn delete_pod(ctx: &Context, ns: &str, member: &str) -> Result<(), Error> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    ignore_missing(
        pods.delete(member, &DeleteParams::default())
            .await
            .map(|_| ()),
    )
}

/// Whether etcd turned a membership change down for now: it refuses one until every voter has
/// been connected for its health interval (5 s), so right after a member joined. Not an error:
/// the recorded change is tried again shortly.
fn etcd_asks_to_wait<T>(result: Result<T, etcd_client::Error>) -> Result<bool, Error> {
    match result {
        Ok(_) => Ok(false),
        Err(e) => {
            let text = e.to_string();
            if text.contains("unhealthy cluster") || text.contains("not enough started members") {
                tracing::debug!(reason = %text, "etcd asks to wait before the membership change");
                Ok(true)
            } else {
                Err(e.into())
            }
        }
    }
}

/// Writes the status by server-side apply. With `unchanged_since` (a cluster as read), only if
/// nothing changed the cluster since that read (its resource version is the precondition): a
/// status that repeats the recorded membership change as read must not write it back over a
/// restore's hand-over that cleared it in between; the conflict is retried from a fresh read.
/// Applies `status` (server-side) under [`MANAGER`]: the whole status it owns, so a field it
/// leaves out is removed. `unchanged_since`: only if the cluster is still as read.
async fn patch_status(
    api: &Api<EtcdCluster>,
    name: &str,
    unchanged_since: Option<&EtcdCluster>,
    status: &EtcdClusterStatus,
) -> Result<(), Error> {
    let mut body = status_apply::body::<EtcdCluster, _>(status);
    // The membership change is recorded by a merge patch (see `execute`), whose manager keeps
    // owning the field: left out here it would stay, so a finished change is written as null.
    body["status"]["membershipChange"] =
        serde_json::to_value(&status.membership_change).unwrap_or_default();
    if let Some(read) = unchanged_since {
        body["metadata"] = serde_json::json!({"resourceVersion": read.resource_version()});
    }
    api.patch_status(
        name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await?;
    Ok(())
}

/// Retries a failed reconcile after a delay that grows with each failure of that cluster
/// (kube's default backoff: 0.8 s doubling to 30 s, with jitter), and starts over after a success.
pub fn error_policy(cluster: Arc<EtcdCluster>, error: &Error, ctx: Arc<Context>) -> Action {
    reconcile_errors::retry(
        &*cluster,
        error,
        &ctx.backoff,
        &ctx.metrics.reconcile_errors,
    )
}
