//! Reconcile: dereference (source, cluster, Secrets) -> observe (pods, claims, members) -> plan
//! one step (`etcd_cluster::restore_plan`, pure) -> execute -> status. Anything the step machine must not
//! forget (the plan, the snapshot the members verified) is written to status before it is acted
//! on.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use backup_api::storage::{AWS_SECRET_CONFIG_KEY, AWS_SECRET_CREDENTIALS_KEY};
use backup_api::{
    EtcdBackup, EtcdCluster, EtcdRestore, EtcdRestoreStatus, RestorePhase, RestorePlan,
};
use etcd_cluster::EtcdVersion;
use etcd_members::build::{self, Bootstrap};
use etcd_members::labels::{self, ABANDONED_RESTORE_ANNOTATION, DETACHED_LABEL};
use etcd_members::origin;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use operator_runtime::pod_security::RunAs;
use operator_runtime::reconcile_errors;
use operator_runtime::status_apply;
use operator_runtime::tenant_credentials;
use serde_json::json;

use crate::context::{Context, Error, MANAGER};
use crate::observe;
use crate::pods;
use crate::status::{self, PAUSED_BY_RESTORE_ANNOTATION, RESTORE_ANNOTATION};
use etcd_cluster::restore_plan;
use etcd_cluster::restore_plan::{RestoreFailure, RestoreStep};
use fetch_pod::source::{self, Source};

/// Look again soon while something runs; at once after a step changed something: its own
/// status write does not wake the controller (spec changes only), and every reconcile reads
/// the world from the API server, not a cache. (500 ms here added 1 to 1.5 s to every
/// restore, between its steps.) 50 ms keeps a step that changed nothing from spinning.
const CHANGED: Duration = Duration::from_millis(50);
const BUSY: Duration = Duration::from_secs(2);

/// The restore a member pod's change may concern: the one named like its cluster.
pub fn restore_of_member(pod: Pod) -> Option<ObjectRef<EtcdRestore>> {
    let cluster = pod.labels().get(labels::CLUSTER_LABEL)?;
    Some(ObjectRef::new(cluster).within(&pod.namespace()?))
}

/// The restore of a cluster (named like it) whose status or spec changed.
pub fn restore_of_cluster(cluster: EtcdCluster) -> Option<ObjectRef<EtcdRestore>> {
    Some(ObjectRef::new(&cluster.name_any()).within(&cluster.namespace()?))
}

pub async fn reconcile(restore: Arc<EtcdRestore>, ctx: Arc<Context>) -> Result<Action, Error> {
    let result = reconcile_once(restore.clone(), ctx.clone()).await;
    if result.is_ok() {
        ctx.backoff.forget(&restore.uid().unwrap_or_default());
    }
    result
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

    // Dereference: where the snapshot is (pinned with the plan), the cluster.
    let source = resolve_source(&ctx, &restore).await?;
    let source = source.map(|mut s| {
        if let Some(url) = &recorded.source {
            s.url = url.clone();
        }
        s
    });
    let clusters: Api<EtcdCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let cluster = clusters.get_opt(&cluster_name).await?;

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

/// The snapshot's location, or what is wrong with it (a missing EtcdBackup or Secret is a
/// failure of this restore, not an error of the operator).
async fn resolve_source(
    ctx: &Context,
    restore: &EtcdRestore,
) -> Result<Result<Source, String>, Error> {
    let ns = restore.namespace().unwrap_or_default();
    if let Err(e) = restore.spec.validate(&restore.name_any()) {
        return Ok(Err(e.to_string()));
    }
    let source = match &restore.spec.backup_ref {
        Some(backup) => {
            let backups: Api<EtcdBackup> = Api::namespaced(ctx.client.clone(), &ns);
            match backups.get_opt(&backup.name).await? {
                None => return Ok(Err(format!("EtcdBackup {} not found in {ns}", backup.name))),
                Some(b) => source::from_backup(&restore.spec, &b),
            }
        }
        None => source::from_spec(&restore.spec),
    };
    let mut source = match source {
        Ok(s) => s,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    // The identity is a private key: only its Secret's existence is checked (metadata), its
    // data never reaches the operator; the fetch reads it from a mounted file.
    if let Some(identity) = &source.identity
        && secrets.get_metadata_opt(&identity.name).await?.is_none()
    {
        return Ok(Err(format!(
            "Secret {} (spec.decryption.identitySecret) not found in {ns}",
            identity.name
        )));
    }
    let Some(s3) = source.s3.as_mut() else {
        return Ok(Ok(source));
    };
    s3.ambient = ctx.allow_ambient_credentials;
    let aws = match &s3.aws_secret {
        None => None,
        Some(name) => match secrets.get_opt(name).await? {
            None => return Ok(Err(format!("Secret {name} not found in {ns}"))),
            Some(secret) => Some((name.as_str(), secret.data.unwrap_or_default())),
        },
    };
    for secret in s3.ca_secret.iter() {
        if secrets.get_opt(secret).await?.is_none() {
            return Ok(Err(format!("Secret {secret} not found in {ns}")));
        }
    }
    // Like the identity, the SSE-C key is only mounted: its data never reaches the operator.
    let sse_c = s3
        .server_side_encryption
        .as_ref()
        .and_then(|sse| sse.customer_key_secret.as_ref());
    if let Some(key) = sse_c
        && secrets.get_metadata_opt(&key.name).await?.is_none()
    {
        return Ok(Err(format!(
            "Secret {} (s3.serverSideEncryption.customerKeySecret) not found in {ns}",
            key.name
        )));
    }
    // The backup operator's rules for what a tenant's object may read S3 with.
    let text = |data: &BTreeMap<String, k8s_openapi::ByteString>, key: &str| {
        data.get(key)
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
    };
    let files = aws.as_ref().map(|(name, data)| {
        (
            *name,
            text(data, AWS_SECRET_CREDENTIALS_KEY),
            text(data, AWS_SECRET_CONFIG_KEY),
        )
    });
    let checked = files
        .as_ref()
        .map(|(name, credentials, config)| (*name, credentials.as_deref(), config.as_deref()));
    if let Err(e) = tenant_credentials::check(checked, ctx.allow_ambient_credentials) {
        return Ok(Err(e.to_string()));
    }
    Ok(Ok(source))
}

/// Executes one step.
/// `restore_nodes`: the nodes each member's restore is tied to ([`pods::restore_nodes`]).
async fn execute(
    ctx: &Context,
    restore: &EtcdRestore,
    cluster: Option<&EtcdCluster>,
    source: Option<&Source>,
    restore_nodes: &BTreeMap<String, BTreeSet<String>>,
    step: &RestoreStep,
) -> Result<(), Error> {
    let ns = restore.namespace().unwrap_or_default();
    let name = restore.name_any();
    let uid = restore.uid().unwrap_or_default();
    let restores: Api<EtcdRestore> = Api::namespaced(ctx.client.clone(), &ns);
    let clusters: Api<EtcdCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let pod_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let claim_api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    let cluster_name = restore.spec.etcd_cluster.name.clone();
    let merge = |value: serde_json::Value| Patch::Merge(value);
    match step {
        // A failed restore keeps its pods and staged claims (their logs say what went wrong;
        // deleting the EtcdRestore deletes them).
        RestoreStep::Done
        | RestoreStep::Wait { .. }
        | RestoreStep::MembersUnhealthy(_)
        | RestoreStep::Fail { release: false, .. } => {}
        RestoreStep::Fail { release: true, .. } => {
            if let Some(cluster) = cluster {
                release(&clusters, cluster, &uid).await?;
            }
        }
        // Success: the run-once pods go, and with them the fetched snapshots on the nodes'
        // scratch space (a copy of the database per member).
        RestoreStep::Succeed { .. } => {
            let plan = restore
                .status
                .as_ref()
                .and_then(|s| s.plan.clone())
                .unwrap_or_default();
            for member in &plan.members {
                delete(&pod_api, &pods::restore_pod_name(member)).await?;
            }
        }
        RestoreStep::Discard {
            reason,
            message,
            claims,
            pods,
        } => {
            // Recorded first: the pods that show the cause are about to go.
            let records = status::Records {
                reason: Some(reason.record(message)),
                ..status::Records::of(restore)
            };
            apply_records(&restores, &name, &records).await?;
            for pod in pods {
                delete(&pod_api, &pods::restore_pod_name(pod)).await?;
            }
            for claim in claims {
                delete(&claim_api, claim).await?;
            }
        }
        RestoreStep::RecordSnapshot(snapshot) => {
            // Intent first: from here on old members may be touched, so a failure must leave
            // the cluster paused; without this record a later restore of the same cluster
            // would unpause it on its own failure.
            let patch = json!({"metadata": {"annotations": {PAUSED_BY_RESTORE_ANNOTATION: null}}});
            clusters
                .patch(&cluster_name, &PatchParams::default(), &merge(patch))
                .await?;
            let records = status::Records {
                snapshot: Some(snapshot.clone()),
                source: source.map(|s| s.url.clone()),
                ..status::Records::of(restore)
            };
            apply_records(&restores, &name, &records).await?;
        }
        RestoreStep::CreateCluster => {
            hold_until_released(&restores, restore).await?;
            let new = restore
                .spec
                .new_cluster
                .clone()
                .expect("planned with newCluster");
            let cluster = pods::new_cluster(&cluster_name, &uid, &new);
            create(&clusters, &cluster).await?;
        }
        RestoreStep::PauseCluster => {
            let cluster = cluster.expect("planned with a cluster");
            hold_until_released(&restores, restore).await?;
            // A new restore of a cluster an earlier one abandoned takes it over.
            let mut annotations =
                json!({RESTORE_ANNOTATION: uid, ABANDONED_RESTORE_ANNOTATION: null});
            // A cluster paused already (by the user, or by an earlier restore that recorded
            // this) keeps what it had.
            if !cluster.spec.is_paused() {
                annotations[PAUSED_BY_RESTORE_ANNOTATION] = json!("true");
            }
            let patch = json!({
                "metadata": {"annotations": annotations},
                "spec": {"paused": true},
            });
            clusters
                .patch(&cluster_name, &PatchParams::default(), &merge(patch))
                .await?;
        }
        RestoreStep::RecordPlan(plan) => {
            let version = EtcdVersion::parse(&plan.version);
            let bumped = version.is_ok_and(|v| v.restore_can_bump_revision());
            // The source is pinned with the plan: every member fetches the same object (a
            // backupRef's newest backup may change meanwhile).
            let records = status::Records {
                plan: Some(plan.clone()),
                revision_bumped: Some(bumped),
                source: source.map(|s| s.url.clone()),
                ..status::Records::of(restore)
            };
            apply_records(&restores, &name, &records).await?;
        }
        RestoreStep::DeleteOldPods(pods) | RestoreStep::RestartMembers(pods) => {
            for pod in pods {
                delete(&pod_api, pod).await?;
            }
        }
        RestoreStep::DetachClaims(old) => {
            for claim in old {
                detach(&claim_api, &cluster_name, claim, &uid).await?;
            }
        }
        RestoreStep::RestoreMembers(members) => {
            let cluster = cluster.expect("planned with a cluster");
            let source = source.expect("planned with a source");
            let plan = recorded_plan(restore);
            for member in members {
                if let Some(claim) = pods::staged_claim(restore, cluster, member, &plan.version) {
                    create(&claim_api, &claim).await?;
                }
                let sibling_nodes = pods::sibling_nodes(restore_nodes, member);
                let (pod, _) = pods::restore_pod(
                    restore,
                    cluster,
                    member,
                    &plan,
                    &ctx.backup_image,
                    source,
                    &sibling_nodes,
                );
                create(&pod_api, &pod).await?;
            }
        }
        RestoreStep::JoinClaims(members) => {
            let cluster = cluster.expect("planned with a cluster");
            let plan = recorded_plan(restore);
            for member in members {
                if let Some(patch) = pods::join_patch(cluster, member, &plan.version) {
                    claim_api
                        .patch(member, &PatchParams::default(), &merge(patch))
                        .await?;
                }
            }
        }
        RestoreStep::StartMembers(members) => {
            let cluster = cluster.expect("planned with a cluster");
            let plan = recorded_plan(restore);
            let services: Api<Service> = Api::namespaced(ctx.client.clone(), &ns);
            let apply = PatchParams::apply(MANAGER).force();
            for service in build::services(cluster) {
                services
                    .patch(&service.name_any(), &apply, &Patch::Apply(&service))
                    .await?;
            }
            let bootstrap = Bootstrap::Existing {
                initial_cluster: plan.members.clone(),
            };
            for member in members {
                // On the claim this restore made and filled: the non-root user's data.
                let pod = build::pod(cluster, member, &bootstrap, &plan.version, RunAs::NonRoot);
                origin::make_member_pod(&pod_api, &ctx.proof, &pod).await?;
            }
        }
        RestoreStep::HandOver { revision } => {
            // Recorded first: once handed over, the cluster is the operator's and is never
            // paused again by this restore.
            let mut plan = recorded_plan(restore);
            plan.handed_over = Some(true);
            let records = status::Records {
                plan: Some(plan),
                restored_revision: Some(*revision),
                ..status::Records::of(restore)
            };
            apply_records(&restores, &name, &records).await?;
            // The record of a membership change from before the disaster means nothing now.
            let patch = json!({"status": {"membershipChange": null}});
            clusters
                .patch_status(&cluster_name, &PatchParams::default(), &merge(patch))
                .await?;
            let patch = json!({
                "metadata": {"annotations": {
                    RESTORE_ANNOTATION: null, PAUSED_BY_RESTORE_ANNOTATION: null,
                }},
                "spec": {"paused": false},
            });
            clusters
                .patch(&cluster_name, &PatchParams::default(), &merge(patch))
                .await?;
        }
        RestoreStep::DeleteOldClaims(old) => {
            for claim in old {
                delete(&claim_api, claim).await?;
            }
        }
    }
    Ok(())
}

/// The plan in status: steps after `RecordPlan` are planned only with it.
fn recorded_plan(restore: &EtcdRestore) -> RestorePlan {
    restore
        .status
        .as_ref()
        .and_then(|s| s.plan.clone())
        .expect("planned with a recorded plan")
}

/// Records, before this restore first holds its cluster, that deleting it must let go of what
/// it holds first (the finalizer). Crash-safe: added again harmlessly.
async fn hold_until_released(
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
async fn set_finalizers(
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

/// A restore being deleted (how a user cancels one) lets go of its cluster, then of its
/// finalizer. Before any member was touched (no snapshot recorded), the cluster is given back as
/// it was. After, nothing is deleted: the cluster stays paused, marked as held by an abandoned
/// restore (its operator reports that with a condition), its lock dropped so that a new restore
/// can take it, and a Warning on it says which claims hold which data and how to go on. The
/// restore's own pods and claims are its: the garbage collector removes them after it.
async fn abandon(ctx: &Context, restore: &EtcdRestore) -> Result<Action, Error> {
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

/// Removes the finalizer from `restore`, as read again now (its own status writes move the
/// resource version; the read one is the precondition, so another controller's finalizer added
/// meanwhile is never dropped: that is a conflict, retried).
async fn let_go_of_finalizer(
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

/// Gives an untouched cluster back: the lock goes, and the pause when this restore made it.
/// Nothing happens when another restore holds it.
async fn release(
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
async fn detach(
    claims: &Api<PersistentVolumeClaim>,
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
    claims
        .patch(claim, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    Ok(())
}

async fn create<K>(api: &Api<K>, object: &K) -> Result<(), Error>
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    match api.create(&PostParams::default(), object).await {
        Ok(_) => Ok(()),
        // Made by an earlier run of this step (the step is repeated after a restart).
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 403 || e.code == 422 => Err(Error::Refused {
            what: format!("{} {}", K::kind(&()), object.name_any()),
            message: e.message,
        }),
        Err(e) => Err(e.into()),
    }
}

async fn delete<K>(api: &Api<K>, name: &str) -> Result<(), Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Applies the report (server-side, typed), under the controller's own field manager.
async fn apply_report(
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
async fn apply_records(
    api: &Api<EtcdRestore>,
    name: &str,
    records: &status::Records,
) -> Result<(), Error> {
    let body = status_apply::body::<EtcdRestore, _>(records);
    let params = PatchParams::apply(status::RECORDS_MANAGER).force();
    api.patch_status(name, &params, &Patch::Apply(body)).await?;
    Ok(())
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
pub fn error_policy(restore: Arc<EtcdRestore>, error: &Error, ctx: Arc<Context>) -> Action {
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
        let cluster: EtcdCluster = serde_json::from_value(json!({
            "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
            "metadata": {"name": "c", "namespace": "ns"}, "spec": {"size": 3},
        }))
        .unwrap();
        assert_eq!(
            restore_of_cluster(cluster),
            Some(ObjectRef::new("c").within("ns"))
        );
    }
}
