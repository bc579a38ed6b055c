//! The validate stage: what the restore refuses before it observes or touches anything. The
//! spec's own rules (`EtcdRestoreSpec::validate`, those CEL cannot say), then the source
//! dereferenced: the EtcdBackup a `backupRef` names, the Secrets the fetch will mount (only
//! their existence: a key's data never reaches the operator), and the rules for a tenant's
//! credentials. What is wrong is a failure of the restore (`SourceProblem`), said in its
//! status, not an error of the operator.

use std::collections::BTreeMap;

use etcd_api::storage::{AWS_SECRET_CONFIG_KEY, AWS_SECRET_CREDENTIALS_KEY};
use etcd_api::{EtcdBackup, EtcdCluster, EtcdRestore, RestorePlan};
use etcd_cluster::naming::CLIENT_PORT;
use etcd_cluster::restore_plan::{RestoreFailure, SourceProblem};
use etcd_members::build;
use etcd_members::tls::TlsSecrets;
use fetch_pod::source::{self, Source, SourceError};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::Api;
use operator_runtime::tenant_credentials;

use kube::core::error_boundary::InvalidObject;

use crate::context::{Context, Error};

/// What the Warning about an EtcdRestore that cannot be read says (`deleting`: it is being
/// deleted, and its finalizer stays).
pub(crate) fn unreadable(invalid: &InvalidObject, deleting: bool) -> String {
    let mut message = format!(
        "the EtcdRestore cannot be read by this operator: {}; nothing is done for it until it \
         can (correct the object, or run the operator version that wrote it)",
        invalid.error
    );
    if deleting {
        message.push_str(
            "; its deletion waits: the cluster it holds (named like it) is let go of only once \
             it can be read, or remove the finalizer by hand once that cluster is checked",
        );
    }
    message
}

/// A recovery from a survivor reads the snapshot of the member its plan chose, over the
/// cluster's client URL of that member, with the cluster's operator Secret when its members
/// serve clients over TLS.
pub(crate) fn survivor_source(cluster: Option<&EtcdCluster>, plan: Option<&RestorePlan>) -> Source {
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
pub(crate) async fn source(
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
