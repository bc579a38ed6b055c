//! The finalizer of an EtcdBackup with `deletionPolicy: Delete`: its stored backups go before
//! the object (or are kept, said in a Warning, when its S3 Secret stays missing).

use std::time::Duration;

use chrono::{DateTime, Utc};
use etcd_api::{DeletionPolicy, EtcdBackup};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams};
use kube::core::DeserializeGuard;
use kube::runtime::controller::Action;
use kube::{Api, Client, Resource, ResourceExt};

use crate::context::{Context, Error, publish};
use crate::events::{self, backups_kept};
use crate::execute::{self, RunError};
use crate::secrets::SecretError;
use crate::validate::{BackupPlan, InvalidSpec};
use crate::{secrets, status};

/// Set only with `deletionPolicy: Delete`, so that the stored backups go before the object.
pub const FINALIZER: &str = "etcd.database.coreos.com/delete-backups";

/// Deletion: with our finalizer, applies the deletion policy and releases the object.
pub(crate) async fn finalize(
    backup: &EtcdBackup,
    plan: Result<&BackupPlan, &InvalidSpec>,
    ctx: &Context,
) -> Result<Action, Error> {
    if !has_finalizer(backup.meta()) {
        return Ok(Action::await_change());
    }
    let reference = backup.object_ref(&());
    match plan {
        Ok(plan) if plan.deletion_policy == DeletionPolicy::Delete => {
            let namespace = backup.namespace().unwrap_or_default();
            let secrets_api: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
            let uid = backup.uid().unwrap_or_default();
            let deleted = async {
                let location = execute::location(plan, &namespace, ctx.local_volume.as_ref())?;
                let storage =
                    secrets::resolve_storage(&secrets_api, plan, ctx.allow_ambient_credentials)
                        .await?;
                execute::delete_backups(&location, &storage, &uid).await
            }
            .await;
            match deleted {
                Ok(keys) => {
                    tracing::info!(name = %backup.name_any(), deleted = keys.len(), "deletion policy Delete: backups removed")
                }
                // The S3 Secret went first (a namespace being deleted), or the backups can
                // never be reached from here (no credentials, an unusable Secret, the local
                // volume not mounted): waiting longer than the bound would block the deletion,
                // and a namespace's, for good. The backups are kept.
                Err(e)
                    if e.cannot_succeed_by_waiting()
                        && deleting_for(backup, (ctx.clock)()) > ctx.finalizer_timeout =>
                {
                    let why = match &e {
                        RunError::Secret(SecretError::Missing(secret)) => {
                            format!("the S3 Secret {secret:?} is gone")
                        }
                        other => other.to_string(),
                    };
                    let cause = format!(
                        "{why}, so nothing could be deleted (waited {} s)",
                        ctx.finalizer_timeout.as_secs()
                    );
                    tracing::warn!(name = %backup.name_any(), %cause, "deletion policy Delete: backups kept");
                    publish(ctx, &backups_kept(&cause), &reference).await;
                }
                Err(e) => {
                    publish(ctx, &events::delete_backups_failed(&e), &reference).await;
                    return Err(Error::Cleanup(e));
                }
            }
        }
        Ok(_) => {}
        Err(invalid) => {
            let cause = format!("the spec is invalid ({invalid})");
            publish(ctx, &backups_kept(&cause), &reference).await
        }
    }
    set_finalizer(backup.meta(), false, &ctx.client).await?;
    Ok(Action::await_change())
}

/// How long the object has been waiting for its deletion.
pub(crate) fn deleting_for(backup: &EtcdBackup, now: DateTime<Utc>) -> Duration {
    let since = backup
        .meta()
        .deletion_timestamp
        .as_ref()
        .map(status::chrono_time);
    since
        .and_then(|t| (now - t).to_std().ok())
        .unwrap_or_default()
}

pub(crate) fn has_finalizer(meta: &ObjectMeta) -> bool {
    meta.finalizers.iter().flatten().any(|f| f == FINALIZER)
}

/// Adds or removes our finalizer, keeping others. The resourceVersion makes the merge patch
/// fail on a concurrent change instead of dropping someone else's finalizer. The reply is
/// read through a `DeserializeGuard`, so this works on an object that does not parse.
pub(crate) async fn set_finalizer(
    meta: &ObjectMeta,
    present: bool,
    client: &Client,
) -> Result<(), Error> {
    let mut finalizers: Vec<String> = meta
        .finalizers
        .iter()
        .flatten()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    if present {
        finalizers.push(FINALIZER.into());
    }
    let patch = serde_json::json!({
        "metadata": {"finalizers": finalizers, "resourceVersion": meta.resource_version}
    });
    let namespace = meta.namespace.as_deref().unwrap_or_default();
    let api: Api<DeserializeGuard<EtcdBackup>> = Api::namespaced(client.clone(), namespace);
    let name = meta.name.as_deref().unwrap_or_default();
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}
