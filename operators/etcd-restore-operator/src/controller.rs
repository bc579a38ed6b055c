//! Reconcile: dereference (source, cluster, Secrets) -> observe (pods, claims, members) -> plan
//! one step (`etcd_cluster::restore_plan`, pure) -> execute -> status. Anything the step machine must not
//! forget (the plan, the snapshot the members verified) is written to status before it is acted
//! on.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use etcd_api::storage::{AWS_SECRET_CONFIG_KEY, AWS_SECRET_CREDENTIALS_KEY};
use etcd_api::{
    EtcdBackup, EtcdCluster, EtcdRestore, EtcdRestoreStatus, RestorePhase, RestorePlan,
};
use etcd_members::build::{self};
use etcd_members::labels::{self};
use etcd_members::origin;
use etcd_members::tls::TlsSecrets;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use operator_runtime::reconcile_errors;
use operator_runtime::tenant_credentials;

use crate::api::{apply_records, apply_report, delete};
use crate::context::{Context, Error};
use crate::execute::execute;
use crate::finalizer::{abandon, let_go_of_finalizer};
use crate::observe;
use crate::status::{self, RESTORE_ANNOTATION};
use etcd_cluster::naming::CLIENT_PORT;
use etcd_cluster::restore_plan;
use etcd_cluster::restore_plan::{RestoreFailure, RestoreStep, SourceProblem};
use fetch_pod::source::{self, Source, SourceError};

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

    // Dereference: where the snapshot is and what its EtcdBackup recorded of it (pinned with
    // the plan: a backupRef's newest backup may change meanwhile), the cluster.
    let stored = match restore.spec.from_survivor {
        Some(_) => None,
        None => Some(resolve_source(&ctx, &restore).await?),
    };
    let clusters: Api<EtcdCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let cluster = clusters.get_opt(&cluster_name).await?;
    // A recovery from a survivor reads the member its plan chose (see survivor_source).
    let source = match stored {
        Some(source) => source,
        None => match restore.spec.validate(&restore.name_any()) {
            Err(e) => Err((RestoreFailure::BadSource, e.to_string())),
            Ok(()) => Ok(survivor_source(cluster.as_ref(), recorded.plan.as_ref())),
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
            Ok(survivor_source(cluster.as_ref(), Some(plan)))
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

/// A recovery from a survivor reads the snapshot of the member its plan chose, over the
/// cluster's client URL of that member, with the cluster's operator Secret when its members
/// serve clients over TLS.
fn survivor_source(cluster: Option<&EtcdCluster>, plan: Option<&RestorePlan>) -> Source {
    let survivor = plan.and_then(|p| p.survivor.as_ref());
    let (Some(cluster), Some(survivor)) = (cluster, survivor) else {
        return source::from_member("the surviving member, once chosen".into(), None);
    };
    let names = build::names(cluster);
    let tls = TlsSecrets::of(&cluster.spec)
        .operator
        .filter(|_| names.client_tls);
    // With TLS the name the certificates carry (coreos' `*.<cluster>.<ns>.svc`, without the
    // cluster domain), as the operators' own clients check it.
    let url = match tls {
        Some(_) => format!(
            "https://{}:{CLIENT_PORT}",
            names.server_name(&survivor.member)
        ),
        None => names.client_url(&survivor.member),
    };
    source::from_member(url, tls)
}

fn bad_source(message: String) -> Result<Result<Source, SourceProblem>, Error> {
    Ok(Err((RestoreFailure::BadSource, message)))
}

/// The snapshot's location, or what is wrong with it (a missing EtcdBackup or Secret is a
/// failure of this restore, not an error of the operator).
async fn resolve_source(
    ctx: &Context,
    restore: &EtcdRestore,
) -> Result<Result<Source, SourceProblem>, Error> {
    let ns = restore.namespace().unwrap_or_default();
    if let Err(e) = restore.spec.validate(&restore.name_any()) {
        return bad_source(e.to_string());
    }
    let source = match &restore.spec.backup_ref {
        Some(backup) => {
            let backups: Api<EtcdBackup> = Api::namespaced(ctx.client.clone(), &ns);
            match backups.get_opt(&backup.name).await? {
                None => {
                    return bad_source(format!("EtcdBackup {} not found in {ns}", backup.name));
                }
                Some(b) => source::from_backup(&restore.spec, &b),
            }
        }
        None => source::from_spec(&restore.spec),
    };
    let mut source = match source {
        Ok(s) => s,
        // An encrypted backup without an identity: the key is missing, not the backup.
        Err(e @ SourceError::IdentityNeeded { .. }) => {
            return Ok(Err((RestoreFailure::NoUsableIdentity, e.to_string())));
        }
        Err(e) => return bad_source(e.to_string()),
    };
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    // The identity is a private key: only its Secret's existence is checked (metadata), its
    // data never reaches the operator; the fetch reads it from a mounted file.
    if let Some(identity) = &source.identity
        && secrets.get_metadata_opt(&identity.name).await?.is_none()
    {
        return bad_source(format!(
            "Secret {} (spec.decryption.identitySecret) not found in {ns}",
            identity.name
        ));
    }
    // GCS and Azure: the coreos Secret must exist (its keys are read in the pod, from the
    // mounted files); without a gcpSecret, only an operator that lends identities lets the pod
    // use the node's.
    match source.cloud.as_mut() {
        Some(fetch_pod::CloudAccess::Gcs {
            gcp_secret,
            ambient,
            endpoint,
        }) => {
            *ambient = ctx.allow_ambient_credentials;
            match gcp_secret {
                // The node's token never goes to an endpoint the tenant names.
                None if endpoint.is_some() => {
                    return bad_source(
                        "gcs.gcpSecret is not set and gcs.endpoint is: an ambient identity is never sent to a custom endpoint".into(),
                    );
                }
                Some(name) if secrets.get_metadata_opt(name).await?.is_none() => {
                    return bad_source(format!("Secret {name} (gcs.gcpSecret) not found in {ns}"));
                }
                None if !ctx.allow_ambient_credentials => {
                    return bad_source(
                        "gcs.gcpSecret is not set, and the operator lends no identity (it was not started with --allow-ambient-credentials)".into(),
                    );
                }
                _ => {}
            }
            return Ok(Ok(source));
        }
        Some(fetch_pod::CloudAccess::Azure { abs_secret, .. }) => {
            if secrets.get_metadata_opt(abs_secret).await?.is_none() {
                return bad_source(format!(
                    "Secret {abs_secret} (abs.absSecret) not found in {ns}"
                ));
            }
            return Ok(Ok(source));
        }
        None => {}
    }
    let Some(s3) = source.s3.as_mut() else {
        return Ok(Ok(source));
    };
    s3.ambient = ctx.allow_ambient_credentials;
    let aws = match &s3.aws_secret {
        None => None,
        Some(name) => match secrets.get_opt(name).await? {
            None => return bad_source(format!("Secret {name} not found in {ns}")),
            Some(secret) => Some((name.as_str(), secret.data.unwrap_or_default())),
        },
    };
    for secret in s3.ca_secret.iter() {
        if secrets.get_opt(secret).await?.is_none() {
            return bad_source(format!("Secret {secret} not found in {ns}"));
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
        return bad_source(format!(
            "Secret {} (s3.serverSideEncryption.customerKeySecret) not found in {ns}",
            key.name
        ));
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
        return bad_source(e.to_string());
    }
    Ok(Ok(source))
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
