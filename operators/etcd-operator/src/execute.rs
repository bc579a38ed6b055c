//! Carries out one membership step the planner chose: recording intent first for a change of
//! membership, then the member pods, claims and Services, and etcd's member API.

use etcd_api::EtcdCluster;
use etcd_client::MemberAddOptions;
use std::collections::BTreeMap;

use etcd_cluster::{EtcdVersion, Intent, MembershipStep, starting_version};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, Preconditions};

use crate::context::{Context, Error};
use crate::context::{event, ignore_missing, warn};
use crate::observe::{self, ClaimRecord, MemberPod};
use crate::status;
use crate::status_writer::StatusWriter;
use etcd_members::access::Access;
use etcd_members::build::{self, Bootstrap};
use etcd_members::labels;
use etcd_members::origin;
use etcd_members::spread::MemberData;

/// Executes one step. Steps that change membership record their intent in status first.
/// `target` is the version the validated spec names; `claims` are the data claims by member,
/// with what they record about their data.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn execute(
    ctx: &Context,
    writer: &StatusWriter,
    cluster: &EtcdCluster,
    target: &EtcdVersion,
    access: &Access,
    pods: &[MemberPod],
    claims: &BTreeMap<String, ClaimRecord>,
    step: &MembershipStep,
) -> Result<(), Error> {
    // The version a pod is created with (see `starting_version`), and for a member restarting
    // in the middle of an upgrade, the version it came from.
    let version_of = |member: &str| {
        let record = claims.get(member).cloned().unwrap_or_default();
        let running = pods.iter().filter_map(|p| p.version.as_deref());
        let version = starting_version(target, record.version.as_deref(), running).to_string();
        let from = record
            .upgraded_from
            .filter(|_| record.version.as_deref() == Some(&version));
        (version, from)
    };
    let ns = cluster.namespace().unwrap_or_default();
    // Recorded by the one status writer, before etcd is called.
    let record = |intent: Option<Intent>| {
        writer.record_membership_change(intent.map(|intent| status::change(cluster, intent)))
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
        MembershipStep::RemoveMember {
            member,
            id,
            reason,
            keep_claim,
        } => {
            record(Some(Intent::Remove {
                member: member.clone(),
                id: *id,
                reason: reason.clone(),
                keep_claim: *keep_claim,
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
        MembershipStep::DeleteMemberResources {
            member,
            keep_claim: true,
        } => {
            // The claim first: once detached it is no longer the cluster's, whatever happens
            // next. The pod then goes at once: its node does not answer, so a graceful delete
            // would wait for it forever, and etcd no longer has the member, so it cannot serve.
            let kept = match claims.get(member) {
                Some(claim) => {
                    let node = detach_claim(ctx, cluster, claim, pods, member).await?;
                    Some((claim.name.clone(), node))
                }
                None => None,
            };
            force_delete_pod(ctx, &ns, member).await?;
            if let Some((claim, node)) = kept {
                let note = format!(
                    "member {member} was replaced because its node {node} was lost; its claim {claim} is kept, detached from the cluster: delete it once that node is gone for good, or keep it to look at its data"
                );
                warn(ctx, cluster, "LostMemberClaimKept", &note).await;
            }
        }
        MembershipStep::DeleteMemberResources {
            member,
            keep_claim: false,
        } => {
            delete_pod(ctx, &ns, member).await?;
            // Only the claim observed as this cluster's, unchanged since (uid and
            // resourceVersion): one detached meanwhile (relabelled by a restore keeping the old
            // volumes) is not touched; the delete fails and the next reconcile sees it detached.
            let deleted = match claims.get(member) {
                Some(claim) => {
                    let unchanged = DeleteParams {
                        preconditions: Some(Preconditions {
                            uid: claim.uid.clone(),
                            resource_version: claim.resource_version.clone(),
                        }),
                        ..Default::default()
                    };
                    let api = ctx.claims.api(&ns);
                    ignore_missing(
                        api.delete(&claim.name, claim.uid.as_deref(), &unchanged)
                            .await,
                    )?;
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
        let claims = ctx.claims.api(&ns);
        match claims.create(&claim).await {
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
    // A claim bound to a volume holds the member's data, and its volume decides the node; an
    // unbound one (new, or made by an interrupted run of this step) or none is new data.
    let bound = claimed
        .as_ref()
        .and_then(|c| c.spec.as_ref())
        .is_some_and(|s| s.volume_name.as_deref().is_some_and(|v| !v.is_empty()));
    let data = if bound {
        MemberData::OnItsClaim
    } else {
        MemberData::New
    };
    let mut pod = build::pod(cluster, member, bootstrap, version, run_as, data);
    if let Some(from) = upgraded_from {
        pod.annotations_mut()
            .insert(labels::UPGRADED_FROM_ANNOTATION.into(), from);
    }
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    origin::make_member_pod(&pods, &ctx.proof, &pod).await?;
    Ok(())
}

/// Takes a removed member's claim out of the cluster (as a restore that keeps old volumes does):
/// the cluster's label replaced by [`labels::DETACHED_LABEL`], the cluster no longer its owner,
/// and why, in an annotation. Only the claim as observed (its resourceVersion): one changed
/// meanwhile is looked at again by the next reconcile. Returns the node it names.
async fn detach_claim(
    ctx: &Context,
    cluster: &EtcdCluster,
    claim: &ClaimRecord,
    pods: &[MemberPod],
    member: &str,
) -> Result<String, Error> {
    let ns = cluster.namespace().unwrap_or_default();
    let api = ctx.claims.api(&ns);
    let node = pods
        .iter()
        .find(|p| p.name == member)
        .and_then(|p| p.node.clone())
        .or_else(|| claim.node.clone())
        .unwrap_or_default();
    let Some(current) = api.get_opt(&claim.name).await? else {
        return Ok(node);
    };
    let owners: Vec<_> = current
        .owner_references()
        .iter()
        .filter(|o| !(o.kind == "EtcdCluster" && o.name == cluster.name_any()))
        .cloned()
        .collect();
    let patch = serde_json::json!({
        "metadata": {
            "resourceVersion": claim.resource_version,
            "labels": {labels::CLUSTER_LABEL: null, labels::DETACHED_LABEL: cluster.name_any()},
            "annotations": {labels::KEPT_FROM_LOST_NODE_ANNOTATION: node},
            "ownerReferences": owners,
        }
    });
    api.patch(&claim.name, &Patch::Merge(patch)).await?;
    Ok(node)
}

/// Deletes a pod without waiting for its node to confirm (grace period 0).
async fn force_delete_pod(ctx: &Context, ns: &str, member: &str) -> Result<(), Error> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    ignore_missing(
        pods.delete(member, &DeleteParams::default().grace_period(0))
            .await
            .map(|_| ()),
    )
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
