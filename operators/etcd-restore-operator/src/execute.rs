//! Carries out the one step the restore's planner chose.

use std::collections::{BTreeMap, BTreeSet};

use etcd_api::{EtcdCluster, EtcdRestore, RestorePlan};
use etcd_cluster::EtcdVersion;
use etcd_cluster::quorum_loss::{MADE_FOR_ANNOTATION, MADE_FOR_QUORUM_LOSS};
use etcd_members::build::{self, Bootstrap};
use etcd_members::labels::{ABANDONED_RESTORE_ANNOTATION, RESTORED_BY_ANNOTATION};
use etcd_members::origin;
use etcd_members::spread::MemberData;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use operator_runtime::pod_security::RunAs;
use serde_json::json;

use crate::api::{
    apply_records, create, create_claim, delete, delete_claim, detach, force_delete, release,
};
use crate::context::{Context, Error, MANAGER};
use crate::finalizer::hold_until_released;
use crate::pods;
use crate::status::{self, PAUSED_BY_RESTORE_ANNOTATION, RESTORE_ANNOTATION};
use etcd_cluster::restore_plan::RestoreStep;
use fetch_pod::source::Source;

/// Executes one step.
/// `restore_nodes`: the nodes each member's restore is tied to ([`pods::restore_nodes`]).
pub(crate) async fn execute(
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
    let claim_api = ctx.claims.api(&ns);
    let cluster_name = restore.spec.etcd_cluster.name.clone();
    let merge = |value: serde_json::Value| Patch::Merge(value);
    // The cluster a step acts on: the planner plans those steps only with one.
    let the_cluster = || cluster.ok_or_else(|| not_as_planned("a step on a cluster that is gone"));
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
        RestoreStep::Succeed { plan, .. } => {
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
                delete_claim(&claim_api, claim).await?;
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
                .ok_or_else(|| not_as_planned("a cluster to create without spec.newCluster"))?;
            let cluster = pods::new_cluster(&cluster_name, &uid, &new);
            create(&clusters, &cluster).await?;
        }
        RestoreStep::PauseCluster => {
            let cluster = the_cluster()?;
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
                expected_backup: source.and_then(|s| s.expected.clone()),
                ..status::Records::of(restore)
            };
            apply_records(&restores, &name, &records).await?;
        }
        // A recovery from a survivor, or any restore made for a lost quorum, deletes the old
        // members' pods at once: most sit on nodes that are down, which would never confirm a
        // graceful deletion, and the EtcdCluster operator would count them as its members for
        // ever. Safe: the restored cluster has a new cluster ID, so etcd refuses an old member
        // that comes back with its node (and its kubelet stops a pod the API no longer has).
        RestoreStep::DeleteOldPods(pods) if answers_nodes_down(restore) => {
            for pod in pods {
                force_delete(&pod_api, pod).await?;
            }
        }
        RestoreStep::ForceDeletePods(pods) => {
            for pod in pods {
                force_delete(&pod_api, pod).await?;
            }
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
        RestoreStep::RestoreMembers {
            plan,
            version,
            members,
        } => {
            let cluster = the_cluster()?;
            let source = source.ok_or_else(|| not_as_planned("a fetch without a source"))?;
            for member in members {
                if let Some(claim) = pods::staged_claim(restore, cluster, member, &plan.version) {
                    create_claim(&claim_api, &claim).await?;
                }
                let sibling_nodes = pods::sibling_nodes(restore_nodes, member);
                let (pod, _) = pods::restore_pod(
                    restore,
                    cluster,
                    member,
                    plan,
                    version,
                    &ctx.backup_image,
                    source,
                    &sibling_nodes,
                );
                create(&pod_api, &pod).await?;
            }
        }
        RestoreStep::JoinClaims { plan, members } => {
            let cluster = the_cluster()?;
            for member in members {
                if let Some(patch) = pods::join_patch(cluster, member, &plan.version) {
                    claim_api.patch(member, &merge(patch)).await?;
                }
            }
        }
        RestoreStep::StartMembers { plan, members } => {
            let cluster = the_cluster()?;
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
                // On the claim this restore made and filled: the non-root user's data, which
                // fixes the member's node as a claim of its own does.
                let pod = build::pod(
                    cluster,
                    member,
                    &bootstrap,
                    &plan.version,
                    RunAs::NonRoot,
                    MemberData::OnItsClaim,
                );
                origin::make_member_pod(&pod_api, &ctx.proof, &pod).await?;
            }
        }
        RestoreStep::HandOver {
            plan,
            revision,
            contents,
        } => {
            // Recorded first: once handed over, the cluster is the operator's and is never
            // paused again by this restore.
            let plan = RestorePlan {
                handed_over: Some(true),
                ..plan.clone()
            };
            let recorded = status::Records::of(restore);
            let records = status::Records {
                plan: Some(plan),
                restored_revision: Some(*revision),
                restored_contents: contents.clone().or(recorded.restored_contents.clone()),
                ..recorded
            };
            apply_records(&restores, &name, &records).await?;
            // One patch: unpaused and marked as this restore's data at once, so the cluster
            // operator never acts on a membership change it recorded before the disaster (it
            // drops a record that names another restore; its status is its own to write).
            let patch = json!({
                "metadata": {"annotations": {
                    RESTORE_ANNOTATION: null, PAUSED_BY_RESTORE_ANNOTATION: null,
                    RESTORED_BY_ANNOTATION: uid,
                }},
                "spec": {"paused": false},
            });
            clusters
                .patch(&cluster_name, &PatchParams::default(), &merge(patch))
                .await?;
        }
        RestoreStep::DeleteOldClaims(old) => {
            for claim in old {
                delete_claim(&claim_api, claim).await?;
            }
        }
    }
    Ok(())
}

fn not_as_planned(what: &str) -> Error {
    Error::NotAsPlanned(what.to_string())
}

/// A restore that answers nodes that are down: a recovery from a survivor, or one the
/// EtcdCluster operator made for a lost quorum (`spec.quorumLoss`).
fn answers_nodes_down(restore: &EtcdRestore) -> bool {
    let made_for = restore.annotations().get(MADE_FOR_ANNOTATION);
    restore.spec.from_survivor.is_some()
        || made_for.map(String::as_str) == Some(MADE_FOR_QUORUM_LOSS)
}
