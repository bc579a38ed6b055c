//! Typed builders of the `etcd-backup` container that fetches a [`Source`] and of the volumes
//! it mounts. Every Secret is mounted as files; private keys are not world-readable (the pod's
//! user reads them through its fsGroup).

use etcd_api::storage::LOCAL_PVC_MOUNT_PATH;
use etcd_api::{SseMode, client_tls};
use k8s_openapi::api::core::v1::{
    Container, EnvVar, PersistentVolumeClaimVolumeSource, Volume, VolumeMount,
};

use operator_runtime::volumes::secret_volume;

use crate::source::{CloudAccess, MemberSnapshot, Source};

/// Where the Secrets are mounted in the containers that reach the backup.
const AWS_DIR: &str = "/etc/etcd-backup/aws";
/// A coreos `gcpSecret` or `absSecret`.
const GCP_DIR: &str = "/etc/etcd-backup/gcp";
const ABS_DIR: &str = "/etc/etcd-backup/abs";
const CA_DIR: &str = "/etc/etcd-backup/s3-ca";
/// The age identity of an encrypted backup (each Secret key a file).
const IDENTITY_DIR: &str = "/etc/etcd-backup/age";
/// The SSE-C key's Secret.
const SSE_C_DIR: &str = "/etc/etcd-backup/sse-c";
/// The cluster's operator Secret (client TLS to a member), for a member's snapshot.
const ETCD_TLS_DIR: &str = "/etc/etcd-backup/etcd-client";
/// Mode of mounted private keys: owner and group (the pod's fsGroup) only.
const PRIVATE_MODE: i32 = 0o440;

/// The volumes a pod needs to reach `source`, and the mounts of the containers that do.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FetchMounts {
    pub volumes: Vec<Volume>,
    /// For the container that fetches: every volume above.
    pub fetch: Vec<VolumeMount>,
    /// For a container that only reads manifests or lists (no decryption key).
    pub without_identity: Vec<VolumeMount>,
}

impl FetchMounts {
    pub fn of(source: &Source) -> FetchMounts {
        let mut mounts = FetchMounts::default();
        if let Some(s3) = &source.s3 {
            if let Some(secret) = &s3.aws_secret {
                mounts.add(secret_volume("aws", secret, None), AWS_DIR, true);
            }
            if let Some(secret) = &s3.ca_secret {
                mounts.add(secret_volume("s3-ca", secret, None), CA_DIR, true);
            }
            if let Some(key) = s3
                .server_side_encryption
                .as_ref()
                .and_then(|sse| sse.customer_key_secret.as_ref())
            {
                let volume = secret_volume("sse-c", &key.name, Some(PRIVATE_MODE));
                mounts.add(volume, SSE_C_DIR, true);
            }
        }
        match &source.cloud {
            Some(CloudAccess::Gcs {
                gcp_secret: Some(secret),
                ..
            }) => {
                let volume = secret_volume("gcp", secret, Some(PRIVATE_MODE));
                mounts.add(volume, GCP_DIR, true);
            }
            Some(CloudAccess::Azure { abs_secret, .. }) => {
                let volume = secret_volume("abs", abs_secret, Some(PRIVATE_MODE));
                mounts.add(volume, ABS_DIR, true);
            }
            _ => {}
        }
        if let Some(secret) = source.member.as_ref().and_then(|m| m.tls_secret.as_ref()) {
            let volume = secret_volume("etcd-client-tls", secret, Some(PRIVATE_MODE));
            mounts.add(volume, ETCD_TLS_DIR, true);
        }
        if let Some(identity) = &source.identity {
            let volume = secret_volume("age-identity", &identity.name, Some(PRIVATE_MODE));
            mounts.add(volume, IDENTITY_DIR, false);
        }
        if let Some(claim) = &source.claim {
            let volume = Volume {
                name: "backups".into(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: claim.clone(),
                    read_only: Some(true),
                }),
                ..Default::default()
            };
            mounts.add(volume, LOCAL_PVC_MOUNT_PATH, true);
        }
        mounts
    }

    fn add(&mut self, volume: Volume, path: &str, without_identity: bool) {
        let mount = VolumeMount {
            name: volume.name.clone(),
            mount_path: path.into(),
            read_only: Some(true),
            ..Default::default()
        };
        if without_identity {
            self.without_identity.push(mount.clone());
        }
        self.fetch.push(mount);
        self.volumes.push(volume);
    }
}

/// The container named `name` that runs `etcd-backup fetch` of `source` into `out` (a path on
/// `scratch`, which the caller adds to the pod): the snapshot is verified while it streams and
/// gets its name only when whole. Its termination message is its log's end when it fails.
pub fn fetch_container(
    name: &str,
    image: &str,
    source: &Source,
    out: &str,
    scratch: VolumeMount,
) -> Container {
    let command = match &source.member {
        Some(member) => member_snapshot_command(&source.url, member, out),
        None => fetch_command(source, out),
    };
    let mut mounts = FetchMounts::of(source).fetch;
    mounts.push(scratch);
    Container {
        name: name.into(),
        image: Some(image.into()),
        args: Some(tool_args(source, command.iter().map(String::as_str))),
        env: Some(env(source)),
        volume_mounts: Some(mounts),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    }
}

/// `etcd-backup fetch` of a stored backup into `out`, decrypted with the identity's file.
fn fetch_command(source: &Source, out: &str) -> Vec<String> {
    let mut command = vec![
        "fetch".into(),
        source.url.clone(),
        "--out".into(),
        out.into(),
    ];
    command.extend(identity_args(source));
    command
}

/// `--identity <file>` for an encrypted source (the file [`FetchMounts::fetch`] mounts).
pub fn identity_args(source: &Source) -> Vec<String> {
    match &source.identity {
        Some(key) => vec!["--identity".into(), format!("{IDENTITY_DIR}/{}", key.key)],
        None => Vec::new(),
    }
}

/// `etcd-backup save` of the member at `url` into `out` (a file on the scratch volume): the
/// same stream, trailer check and JSON report as a backup, with no key digest (the member's
/// whole key space read once more would only delay the recovery).
fn member_snapshot_command(url: &str, member: &MemberSnapshot, out: &str) -> Vec<String> {
    let mut command: Vec<String> = ["save", "--endpoints", url, "--no-hash-kv", "--to"]
        .map(String::from)
        .into();
    command.push(format!("file://{out}"));
    if member.tls_secret.is_some() {
        for (flag, key) in [
            ("--cacert", client_tls::CA_KEY),
            ("--cert", client_tls::CERT_KEY),
            ("--key", client_tls::KEY_KEY),
        ] {
            command.extend([flag.into(), format!("{ETCD_TLS_DIR}/{key}")]);
        }
    }
    command
}

/// `etcd-backup`'s global flags for `source` (JSON output and logs, the S3 settings and
/// files), then `command`.
pub fn tool_args<'a>(source: &Source, command: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut args = vec![
        "--output".to_string(),
        "json".into(),
        "--log-format".into(),
        "json".into(),
    ];
    if let Some(s3) = &source.s3 {
        if let Some(endpoint) = &s3.endpoint {
            args.extend(["--s3-endpoint".into(), endpoint.clone()]);
        }
        if let Some(region) = &s3.region {
            args.extend(["--s3-region".into(), region.clone()]);
        }
        if s3.force_path_style {
            args.push("--s3-force-path-style".into());
        }
        if s3.ca_secret.is_some() {
            args.extend(["--s3-ca-file".into(), format!("{CA_DIR}/ca.crt")]);
        }
        // Reads need nothing for the server-managed modes; SSE-C needs its key on each.
        if let Some(sse) = &s3.server_side_encryption
            && let (SseMode::SseC, Some(key)) = (sse.mode, &sse.customer_key_secret)
        {
            args.extend([
                "--s3-sse-c-key-file".into(),
                format!("{SSE_C_DIR}/{}", key.key),
            ]);
        }
    }
    match &source.cloud {
        Some(CloudAccess::Gcs {
            endpoint,
            gcp_secret,
            ambient,
        }) => {
            if let Some(endpoint) = endpoint {
                args.extend(["--gcs-endpoint".into(), endpoint.clone()]);
            }
            match (gcp_secret, ambient) {
                (Some(_), _) => args.extend(["--gcs-secret-dir".into(), GCP_DIR.into()]),
                // Never the node's identity unless the operator lends it.
                (None, false) => args.push("--gcs-anonymous".into()),
                (None, true) => {}
            }
        }
        Some(CloudAccess::Azure { endpoint, .. }) => {
            args.extend(["--azure-secret-dir".into(), ABS_DIR.into()]);
            if let Some(endpoint) = endpoint {
                args.extend(["--azure-endpoint".into(), endpoint.clone()]);
            }
        }
        None => {}
    }
    args.extend(command.into_iter().map(str::to_string));
    args
}

/// The AWS shared files from the Secret. No ambient identity: the pod has no service account
/// token (no web identity), and unless the operator was started with
/// `--allow-ambient-credentials` the SDK is told not to ask the node's instance metadata.
pub fn env(source: &Source) -> Vec<EnvVar> {
    let Some(s3) = &source.s3 else {
        return Vec::new();
    };
    let var = |name: &str, value: String| EnvVar {
        name: name.into(),
        value: Some(value),
        ..Default::default()
    };
    let mut env = Vec::new();
    if s3.aws_secret.is_some() {
        env.push(var(
            "AWS_SHARED_CREDENTIALS_FILE",
            format!("{AWS_DIR}/credentials"),
        ));
        env.push(var("AWS_CONFIG_FILE", format!("{AWS_DIR}/config")));
    }
    if !s3.ambient {
        env.push(var("AWS_EC2_METADATA_DISABLED", "true".into()));
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gcs_and_azure_secrets_are_mounted_and_named_by_directory() {
        let mut source = crate::source::from_spec(
            &serde_saphyr::from_str(
                "etcdCluster: {name: c}\nbackupStorageType: GCS\ngcs: {path: b/k, gcpSecret: gcp}",
            )
            .unwrap(),
        )
        .unwrap();
        let mounts = FetchMounts::of(&source);
        assert_eq!(mounts.fetch[0].mount_path, GCP_DIR);
        let args = tool_args(&source, ["fetch"]);
        assert!(
            args.windows(2).any(|w| w == ["--gcs-secret-dir", GCP_DIR]),
            "{args:?}"
        );
        // No Secret: no credentials at all unless the operator lends the node's identity.
        source.cloud = Some(CloudAccess::Gcs {
            endpoint: None,
            gcp_secret: None,
            ambient: false,
        });
        assert!(tool_args(&source, ["fetch"]).contains(&"--gcs-anonymous".to_string()));
        assert!(FetchMounts::of(&source).volumes.is_empty());
        source.cloud = Some(CloudAccess::Azure {
            endpoint: Some("http://azurite:10000/acct".into()),
            abs_secret: "abs".into(),
        });
        let args = tool_args(&source, ["fetch"]);
        assert!(
            args.windows(2)
                .any(|w| w == ["--azure-secret-dir", ABS_DIR]),
            "{args:?}"
        );
        assert!(
            args.windows(2)
                .any(|w| w == ["--azure-endpoint", "http://azurite:10000/acct"])
        );
        let mounts = FetchMounts::of(&source);
        assert_eq!(mounts.fetch[0].mount_path, ABS_DIR);
        assert_eq!(
            mounts.volumes[0].secret.as_ref().unwrap().default_mode,
            Some(PRIVATE_MODE)
        );
    }
    use crate::source::S3Access;
    use etcd_api::SecretKeyRef;

    fn s3_source() -> Source {
        Source {
            url: "s3://bucket/etcd.backup".into(),
            s3: Some(S3Access {
                endpoint: Some("http://s3:3900".into()),
                aws_secret: Some("aws".into()),
                ..Default::default()
            }),
            cloud: None,
            claim: None,
            identity: Some(SecretKeyRef {
                name: "restore-key".into(),
                key: "identity.txt".into(),
            }),
            expected: None,
            member: None,
            point: None,
        }
    }

    fn scratch() -> VolumeMount {
        VolumeMount {
            name: "scratch".into(),
            mount_path: "/scratch".into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_fetch_reads_every_credential_from_a_file() {
        let fetch = fetch_container(
            "fetch",
            "etcd-backup:dev",
            &s3_source(),
            "/scratch/s.db",
            scratch(),
        );
        let args = fetch.args.unwrap();
        let tail = &args[args.len() - 6..];
        assert_eq!(
            tail,
            [
                "fetch",
                "s3://bucket/etcd.backup",
                "--out",
                "/scratch/s.db",
                "--identity",
                "/etc/etcd-backup/age/identity.txt"
            ]
        );
        let env: Vec<_> = fetch.env.unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(
            env,
            [
                "AWS_SHARED_CREDENTIALS_FILE",
                "AWS_CONFIG_FILE",
                "AWS_EC2_METADATA_DISABLED"
            ]
        );
        let mounts: Vec<_> = fetch
            .volume_mounts
            .unwrap()
            .into_iter()
            .map(|m| m.mount_path)
            .collect();
        assert_eq!(
            mounts,
            ["/etc/etcd-backup/aws", "/etc/etcd-backup/age", "/scratch"]
        );
    }

    #[test]
    fn a_survivors_snapshot_is_saved_from_the_member_with_the_client_certificate_as_files() {
        let source = crate::source::from_member(
            "https://c-1.c.ns.svc:2379".into(),
            Some("c-operator-tls".into()),
        );
        let fetch = fetch_container(
            "fetch",
            "etcd-backup:dev",
            &source,
            "/scratch/s.db",
            scratch(),
        );
        let args = fetch.args.unwrap();
        let command: Vec<&str> = args[4..].iter().map(String::as_str).collect();
        assert_eq!(
            command,
            [
                "save",
                "--endpoints",
                "https://c-1.c.ns.svc:2379",
                "--no-hash-kv",
                "--to",
                "file:///scratch/s.db",
                "--cacert",
                "/etc/etcd-backup/etcd-client/etcd-client-ca.crt",
                "--cert",
                "/etc/etcd-backup/etcd-client/etcd-client.crt",
                "--key",
                "/etc/etcd-backup/etcd-client/etcd-client.key"
            ]
        );
        assert_eq!(fetch.env, Some(Vec::new()));
        let tls = FetchMounts::of(&source);
        let volume = &tls.volumes[0];
        assert_eq!(volume.secret.as_ref().unwrap().default_mode, Some(0o440));
        let plain = crate::source::from_member("http://c-1.c.ns.svc:2379".into(), None);
        assert_eq!(FetchMounts::of(&plain), FetchMounts::default());
    }

    #[test]
    fn the_identity_is_private_and_only_for_the_fetch() {
        let mounts = FetchMounts::of(&s3_source());
        let identity = mounts
            .volumes
            .iter()
            .find(|v| v.name == "age-identity")
            .unwrap();
        assert_eq!(identity.secret.as_ref().unwrap().default_mode, Some(0o440));
        assert!(
            mounts
                .without_identity
                .iter()
                .all(|m| m.name != "age-identity")
        );
        assert_eq!(mounts.without_identity.len(), 1);
    }
}
