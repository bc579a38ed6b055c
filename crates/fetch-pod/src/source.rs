//! Where the snapshot is and how a pod reaches it: the EtcdRestore's `s3`/`local` block, or the
//! newest verified backup of an EtcdBackup (an EtcdRestore's `backupRef`, an EtcdBackup's
//! drill). Pure.

use etcd_api::storage::{
    AbsSource, GcsSource, LOCAL_PVC_MOUNT_PATH, LocalSource, S3Path, S3ServerSideEncryption,
    S3Source, StorageType,
};
use etcd_api::{
    BackupRecord, EtcdBackup, EtcdRestoreSpec, ExpectedBackup, KeySpace, PointInTime, SecretKeyRef,
};
use thiserror::Error;

/// A snapshot location as the `etcd-backup` image's `fetch` takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    /// `s3://bucket/key`, `gs://bucket/key`, `azblob://container/key` or
    /// `file:///var/lib/etcd-backup/<path>`.
    pub url: String,
    pub s3: Option<S3Access>,
    /// How to reach Google Cloud Storage or Azure Blob Storage.
    pub cloud: Option<CloudAccess>,
    /// The claim holding a `Local` backup, mounted read-only at `/var/lib/etcd-backup`.
    pub claim: Option<String>,
    /// The Secret key with the age identity for an encrypted backup (`spec.decryption`),
    /// mounted as a file into the fetch only.
    pub identity: Option<SecretKeyRef>,
    /// What the EtcdBackup recorded of it (a `backupRef`): what the fetches and the restored
    /// members must show.
    pub expected: Option<ExpectedBackup>,
    /// A live member's snapshot instead of a stored backup (a recovery from a survivor): `url`
    /// is its client URL.
    pub member: Option<MemberSnapshot>,
    /// A restore to a point (`spec.pointInTime`): `url` is the base name of the scheduled
    /// backups, beside which the continuous archive stores its segments.
    pub point: Option<PointInTime>,
}

/// How a pod reaches a member for its snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberSnapshot {
    /// The cluster's operator Secret (`TLS.static.operatorSecret`, coreos' key names) when the
    /// members serve clients over TLS: its client certificate is mounted into the fetch.
    pub tls_secret: Option<String>,
}

/// The snapshot of the member at `client_url` (a recovery from a survivor).
pub fn from_member(client_url: String, tls_secret: Option<String>) -> Source {
    Source {
        url: client_url,
        s3: None,
        cloud: None,
        claim: None,
        identity: None,
        expected: None,
        member: Some(MemberSnapshot { tls_secret }),
        point: None,
    }
}

/// How to reach S3: the endpoint settings and the Secrets the pod mounts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct S3Access {
    pub endpoint: Option<String>,
    pub force_path_style: bool,
    pub region: Option<String>,
    /// Secret with the AWS shared `credentials` and `config` files.
    pub aws_secret: Option<String>,
    /// Secret with a CA bundle under `ca.crt`.
    pub ca_secret: Option<String>,
    /// `s3.serverSideEncryption` (for SSE-C the fetch mounts the key's Secret).
    pub server_side_encryption: Option<S3ServerSideEncryption>,
    /// The operator was started with `--allow-ambient-credentials`: the pod may use the
    /// node's identity (instance metadata) where the Secret has no keys. Off, the pod is told
    /// not to ask the instance metadata service at all.
    pub ambient: bool,
}

/// How to reach GCS or Azure: the endpoint and the coreos Secret the pod mounts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CloudAccess {
    Gcs {
        endpoint: Option<String>,
        /// Without it, the pod sends no credentials unless `ambient` (GKE workload identity
        /// of the node), which the controller sets from its flag.
        gcp_secret: Option<String>,
        ambient: bool,
    },
    Azure {
        endpoint: Option<String>,
        abs_secret: String,
    },
}

#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum SourceError {
    #[error(
        "backupStorageType {0:?} cannot be restored by this controller; use S3, GCS, ABS or Local"
    )]
    Unsupported(StorageType),
    #[error("the {0} block is missing")]
    MissingBlock(&'static str),
    #[error("s3.path {0:?} is not <bucket>/<key>")]
    BadS3Path(String),
    #[error("{field}.path {path:?} is not <bucket>/<object> (<container>/<blob> for abs)")]
    BadObjectPath { field: &'static str, path: String },
    #[error(
        "local.persistentVolumeClaim is not set: the restore pods can only read a Local backup \
         from a claim (set the claim the backups were written to)"
    )]
    LocalWithoutClaim,
    #[error("local.path {0:?} must be a file inside the claim, without '..'")]
    BadLocalPath(String),
    #[error("EtcdBackup {0} has no verified backup yet (status.lastBackup is empty)")]
    NoBackupYet(String),
    #[error(
        "EtcdBackup {name} recorded {url:?}, which is not an s3://, gs://, azblob:// or file:// location"
    )]
    BadRecordedUrl { name: String, url: String },
    #[error(
        "EtcdBackup {name} recorded {url:?}, outside {LOCAL_PVC_MOUNT_PATH} (its operator \
         mounted its claim elsewhere), and not the claim and path (lastBackup.localVolume, \
         recorded by newer operators): restore it with a local block naming the claim and the \
         file's path inside it"
    )]
    OutsideTheClaimMount { name: String, url: String },
    #[error(
        "the newest backup of EtcdBackup {name} is encrypted (to {recipients}) and no \
         identity (private key) is named for it; nothing was touched"
    )]
    IdentityNeeded { name: String, recipients: String },
    #[error(
        "EtcdBackup {0} has no continuous archive (spec.continuous), so no point between its \
         backups can be restored"
    )]
    NotArchived(String),
    #[error(
        "the newest backup of EtcdBackup {name}, {url:?}, is not a scheduled backup \
         (<base>_v<revision>_<time>): it names no base the archive's segments are beside"
    )]
    NotScheduled { name: String, url: String },
}

/// The snapshot named by the restore's own `s3`/`local` block.
pub fn from_spec(spec: &EtcdRestoreSpec) -> Result<Source, SourceError> {
    let mut source = from_storage_blocks(spec)?;
    source.identity = identity(spec);
    Ok(source)
}

fn identity(spec: &EtcdRestoreSpec) -> Option<SecretKeyRef> {
    spec.decryption.as_ref().map(|d| d.identity_secret.clone())
}

fn from_storage_blocks(spec: &EtcdRestoreSpec) -> Result<Source, SourceError> {
    let blocks = ObjectBlocks {
        s3: spec.s3.as_ref(),
        gcs: spec.gcs.as_ref(),
        abs: spec.abs.as_ref(),
    };
    if let Some(source) = blocks.source(spec.backup_storage_type) {
        return source;
    }
    match spec.backup_storage_type {
        StorageType::Local => {
            let local = spec
                .local
                .as_ref()
                .ok_or(SourceError::MissingBlock("local"))?;
            local_source(local, &local.path)
        }
        other => Err(SourceError::Unsupported(other)),
    }
}

/// The object-store blocks of an EtcdRestore's or an EtcdBackup's spec.
struct ObjectBlocks<'a> {
    s3: Option<&'a S3Source>,
    gcs: Option<&'a GcsSource>,
    abs: Option<&'a AbsSource>,
}

impl ObjectBlocks<'_> {
    /// The object its `storage_type` block names; `None` when the type is no object store.
    fn source(&self, storage_type: StorageType) -> Option<Result<Source, SourceError>> {
        Some(match storage_type {
            StorageType::S3 => self.s3_source(),
            StorageType::Gcs => self.gcs_source(),
            StorageType::Abs => self.abs_source(),
            _ => return None,
        })
    }

    fn s3_source(&self) -> Result<Source, SourceError> {
        let s3 = self.s3.ok_or(SourceError::MissingBlock("s3"))?;
        let path = s3
            .location()
            .map_err(|_| SourceError::BadS3Path(s3.path.clone()))?;
        Ok(Source {
            url: format!("s3://{}/{}", path.bucket, path.key),
            s3: Some(s3_access(s3)),
            cloud: None,
            claim: None,
            identity: None,
            expected: None,
            member: None,
            point: None,
        })
    }

    fn gcs_source(&self) -> Result<Source, SourceError> {
        let gcs = self.gcs.ok_or(SourceError::MissingBlock("gcs"))?;
        let path = gcs.location().ok();
        object_of_block(("gcs", &gcs.path), path, "gs", gcs_access(gcs))
    }

    fn abs_source(&self) -> Result<Source, SourceError> {
        let abs = self.abs.ok_or(SourceError::MissingBlock("abs"))?;
        let path = abs.location().ok();
        object_of_block(("abs", &abs.path), path, "azblob", azure_access(abs))
    }
}

/// The object a `gcs`/`abs` block's `path` names (the field and its text), reached
/// with `access` under `scheme`; an unusable path is named with its field.
fn object_of_block(
    (field, text): (&'static str, &str),
    path: Option<S3Path>,
    scheme: &str,
    access: CloudAccess,
) -> Result<Source, SourceError> {
    let path = path.ok_or_else(|| SourceError::BadObjectPath {
        field,
        path: text.to_string(),
    })?;
    Ok(cloud_source(
        format!("{scheme}://{}/{}", path.bucket, path.key),
        access,
    ))
}

/// The newest verified backup of `backup` (its `status.lastBackup`), reached with the
/// EtcdBackup's own storage settings and credentials, decrypted with `spec`'s identity. A
/// backup recorded as encrypted without an identity is refused here, before anything is done.
pub fn from_backup(spec: &EtcdRestoreSpec, backup: &EtcdBackup) -> Result<Source, SourceError> {
    match &spec.point_in_time {
        Some(point) => to_a_point(backup, identity(spec), point),
        None => newest_backup(backup, identity(spec)),
    }
}

/// A restore of `backup`'s backups and archive to `point`: the base name of its scheduled
/// backups, beside which its archive stores segments. From its newest recorded backup (the
/// name without the scheduled suffix; a Local backup's claim and path), or, before any
/// scheduled run is recorded (the archive takes a snapshot of its own when it starts), from
/// its S3, GCS or ABS block. The identity is checked the same way (the archive is encrypted like the
/// backups).
fn to_a_point(
    backup: &EtcdBackup,
    identity: Option<SecretKeyRef>,
    point: &PointInTime,
) -> Result<Source, SourceError> {
    let name = backup.metadata.name.clone().unwrap_or_default();
    if backup.spec.continuous.is_none() {
        return Err(SourceError::NotArchived(name));
    }
    let recorded = backup.status.as_ref().and_then(|s| s.last_backup.as_ref());
    let mut source = match recorded {
        Some(_) => {
            let mut source = newest_backup(backup, identity)?;
            source.url = scheduled_base(&source.url)
                .ok_or_else(|| SourceError::NotScheduled {
                    name,
                    url: source.url.clone(),
                })?
                .to_string();
            source
        }
        None => {
            let blocks = ObjectBlocks {
                s3: backup.spec.s3.as_ref(),
                gcs: backup.spec.gcs.as_ref(),
                abs: backup.spec.abs.as_ref(),
            };
            let Some(source) = blocks.source(backup.spec.storage_type) else {
                return Err(SourceError::NoBackupYet(name));
            };
            if let (Some(encryption), None) = (&backup.spec.encryption, &identity) {
                return Err(SourceError::IdentityNeeded {
                    name,
                    recipients: format!(
                        "the recipients in Secret {}",
                        encryption.recipients_secret.name
                    ),
                });
            }
            Source {
                identity,
                ..source?
            }
        }
    };
    // What the newest backup recorded says nothing about the point.
    source.expected = None;
    source.point = Some(point.clone());
    Ok(source)
}

/// `<base>` of a scheduled backup's `<base>_v<revision>_<YYYY-MM-DD-HH:MM:SS>`.
fn scheduled_base(url: &str) -> Option<&str> {
    let (base, suffix) = url.rsplit_once("_v")?;
    let (revision, time) = suffix.split_once('_')?;
    let time_like = time.len() == 19
        && time
            .bytes()
            .all(|b| b.is_ascii_digit() || b"-:".contains(&b));
    (revision.parse::<u64>().is_ok() && time_like && !base.ends_with('/')).then_some(base)
}

/// The newest verified backup of `backup` (its `status.lastBackup`), reached with the
/// EtcdBackup's own storage settings and credentials, decrypted with `identity`. A backup
/// recorded as encrypted without an identity is refused here, before anything is done.
pub fn newest_backup(
    backup: &EtcdBackup,
    identity: Option<SecretKeyRef>,
) -> Result<Source, SourceError> {
    let name = backup.metadata.name.clone().unwrap_or_default();
    let record = backup
        .status
        .as_ref()
        .and_then(|s| s.last_backup.as_ref())
        .ok_or_else(|| SourceError::NoBackupYet(name.clone()))?;
    if !record.encrypted_to.is_empty() && identity.is_none() {
        return Err(SourceError::IdentityNeeded {
            name,
            recipients: record.encrypted_to.join(", "),
        });
    }
    let mut source = match &record.local_volume {
        // Where the backup operator recorded it: its claim and its path there.
        Some(local) => claim_source(&local.claim, &local.path)?,
        None => recorded_source(backup, &name, record.object_key.clone())?,
    };
    source.identity = identity;
    source.expected = Some(expected(record));
    Ok(source)
}

/// What a restore of `record`'s backup must find: its checksums, revision and key space.
fn expected(record: &BackupRecord) -> ExpectedBackup {
    ExpectedBackup {
        sha256: record.sha256.clone(),
        crc32c: record.crc32c.clone(),
        db_sha256: record.db_sha256.clone(),
        revision: record.etcd_revision,
        contents: record.contents.as_ref().and_then(|c| {
            Some(KeySpace {
                revision: c.revision,
                key_count: c.key_count,
                content_sha256: c.content_sha256.clone()?,
            })
        }),
    }
}

fn recorded_source(backup: &EtcdBackup, name: &str, url: String) -> Result<Source, SourceError> {
    let name = name.to_string();
    let bad = || SourceError::BadRecordedUrl {
        name: name.clone(),
        url: url.clone(),
    };
    if url.starts_with("s3://") {
        let s3 = backup
            .spec
            .s3
            .as_ref()
            .ok_or(SourceError::MissingBlock("s3"))?;
        return Ok(Source {
            url: url.clone(),
            s3: Some(s3_access(s3)),
            cloud: None,
            claim: None,
            identity: None,
            expected: None,
            member: None,
            point: None,
        });
    }
    if url.starts_with("gs://") {
        let gcs = backup
            .spec
            .gcs
            .as_ref()
            .ok_or(SourceError::MissingBlock("gcs"))?;
        return Ok(cloud_source(url.clone(), gcs_access(gcs)));
    }
    if url.starts_with("azblob://") {
        let abs = backup
            .spec
            .abs
            .as_ref()
            .ok_or(SourceError::MissingBlock("abs"))?;
        return Ok(cloud_source(url.clone(), azure_access(abs)));
    }
    let path = url.strip_prefix("file://").ok_or_else(bad)?;
    let local = backup
        .spec
        .local
        .as_ref()
        .ok_or(SourceError::MissingBlock("local"))?;
    // A record without `localVolume` (an operator version before it): the file where the
    // operator's pod mounted the claim, by default.
    let inside = path
        .strip_prefix(LOCAL_PVC_MOUNT_PATH)
        .filter(|p| p.starts_with('/'))
        .ok_or_else(|| SourceError::OutsideTheClaimMount {
            name: name.clone(),
            url: url.clone(),
        })?;
    local_source(local, inside)
}

fn s3_access(s3: &S3Source) -> S3Access {
    S3Access {
        endpoint: s3.endpoint().map(str::to_string),
        force_path_style: s3.force_path_style.unwrap_or(false),
        region: s3.region.clone().filter(|r| !r.is_empty()),
        aws_secret: s3.aws_secret().map(str::to_string),
        ca_secret: s3.ca_secret.clone().filter(|s| !s.is_empty()),
        server_side_encryption: s3.server_side_encryption.clone(),
        // Set by the controller from its flag.
        ambient: false,
    }
}

fn gcs_access(gcs: &GcsSource) -> CloudAccess {
    CloudAccess::Gcs {
        endpoint: gcs.endpoint().map(str::to_string),
        gcp_secret: gcs.gcp_secret().map(str::to_string),
        // Set by the controller from its flag.
        ambient: false,
    }
}

fn azure_access(abs: &AbsSource) -> CloudAccess {
    CloudAccess::Azure {
        endpoint: abs.endpoint().map(str::to_string),
        abs_secret: abs.abs_secret.clone(),
    }
}

/// An object in GCS or Azure at `url`.
fn cloud_source(url: String, access: CloudAccess) -> Source {
    Source {
        url,
        s3: None,
        cloud: Some(access),
        claim: None,
        identity: None,
        expected: None,
        member: None,
        point: None,
    }
}

fn local_source(local: &LocalSource, path: &str) -> Result<Source, SourceError> {
    let claim = local
        .persistent_volume_claim
        .clone()
        .filter(|c| !c.is_empty())
        .ok_or(SourceError::LocalWithoutClaim)?;
    claim_source(&claim, path)
}

/// The file at `path` inside `claim`, where the restore and drill pods mount it.
fn claim_source(claim: &str, path: &str) -> Result<Source, SourceError> {
    let relative = path.trim_start_matches('/');
    if relative.is_empty() || relative.split('/').any(|p| p == ".." || p == ".") {
        return Err(SourceError::BadLocalPath(path.to_string()));
    }
    Ok(Source {
        url: format!("file://{LOCAL_PVC_MOUNT_PATH}/{relative}"),
        s3: None,
        cloud: None,
        claim: Some(claim.to_string()),
        identity: None,
        expected: None,
        member: None,
        point: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn restore(yaml: &str) -> EtcdRestoreSpec {
        serde_saphyr::from_str(yaml).unwrap()
    }

    /// A restore of `backupRef: nightly` without decryption.
    fn spec() -> EtcdRestoreSpec {
        restore("etcdCluster: {name: c}\nbackupStorageType: S3\nbackupRef: {name: nightly}")
    }

    #[test]
    fn coreos_gcs_and_abs_restores_name_the_object_and_its_secret() {
        let spec = restore(
            "etcdCluster: {name: c}\nbackupStorageType: GCS\n\
             gcs: {path: bucket/dir/etcd.backup, gcpSecret: gcp, endpoint: 'http://fake:4443'}",
        );
        let source = from_spec(&spec).unwrap();
        assert_eq!(source.url, "gs://bucket/dir/etcd.backup");
        assert_eq!(
            source.cloud,
            Some(CloudAccess::Gcs {
                endpoint: Some("http://fake:4443".into()),
                gcp_secret: Some("gcp".into()),
                ambient: false
            })
        );
        let spec = restore(
            "etcdCluster: {name: c}\nbackupStorageType: ABS\nabs: {path: c/etcd.backup, absSecret: abs}",
        );
        let source = from_spec(&spec).unwrap();
        assert_eq!(source.url, "azblob://c/etcd.backup");
        assert!(
            matches!(source.cloud, Some(CloudAccess::Azure { abs_secret, .. }) if abs_secret == "abs")
        );
        let bad = restore(
            "etcdCluster: {name: c}\nbackupStorageType: GCS\ngcs: {path: no-object, gcpSecret: gcp}",
        );
        assert!(matches!(
            from_spec(&bad),
            Err(SourceError::BadObjectPath { field: "gcs", .. })
        ));
    }

    #[test]
    fn coreos_s3_restore_names_the_object_and_its_secret() {
        let spec = restore(
            "etcdCluster: {name: c}\nbackupStorageType: S3\n\
             s3: {path: bucket/dir/etcd.backup, awsSecret: aws, endpoint: '', forcePathStyle: true}",
        );
        let source = from_spec(&spec).unwrap();
        assert_eq!(source.url, "s3://bucket/dir/etcd.backup");
        let s3 = source.s3.unwrap();
        assert_eq!(s3.endpoint, None, "coreos writes an empty endpoint for AWS");
        assert_eq!(s3.aws_secret.as_deref(), Some("aws"));
        assert!(s3.force_path_style);
    }

    #[test]
    fn local_restores_need_a_claim_and_a_path_inside_it() {
        let spec =
            restore("etcdCluster: {name: c}\nbackupStorageType: Local\nlocal: {path: /b/etcd.db}");
        assert_eq!(from_spec(&spec), Err(SourceError::LocalWithoutClaim));
        let spec = restore(
            "etcdCluster: {name: c}\nbackupStorageType: Local\n\
             local: {path: b/etcd.db, persistentVolumeClaim: backups}",
        );
        let source = from_spec(&spec).unwrap();
        assert_eq!(source.url, "file:///var/lib/etcd-backup/b/etcd.db");
        assert_eq!(source.claim.as_deref(), Some("backups"));
        let spec = restore(
            "etcdCluster: {name: c}\nbackupStorageType: Local\n\
             local: {path: ../etc/passwd, persistentVolumeClaim: backups}",
        );
        assert!(matches!(
            from_spec(&spec),
            Err(SourceError::BadLocalPath(_))
        ));
        let spec = restore(
            "etcdCluster: {name: c}\nbackupStorageType: OSS\noss: {path: x/y, ossSecret: s}",
        );
        assert_eq!(
            from_spec(&spec),
            Err(SourceError::Unsupported(StorageType::Oss))
        );
    }

    #[test]
    fn backup_ref_takes_the_newest_verified_backup_with_the_backups_settings() {
        let mut backup: EtcdBackup = serde_saphyr::from_str(
            "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdBackup\n\
             metadata: {name: nightly}\n\
             spec: {etcdEndpoints: ['http://c-client:2379'], storageType: S3,\n\
               s3: {path: bucket/etcd.backup, awsSecret: aws, endpoint: 'http://s3:3900'}}",
        )
        .unwrap();
        assert_eq!(
            from_backup(&spec(), &backup),
            Err(SourceError::NoBackupYet("nightly".into()))
        );
        backup.status = Some(
            serde_saphyr::from_str(
                "lastBackup: {objectKey: 's3://bucket/etcd.backup_v42_2026-11-24-03:00:00'}",
            )
            .unwrap(),
        );
        let source = from_backup(&spec(), &backup).unwrap();
        assert_eq!(
            source.url,
            "s3://bucket/etcd.backup_v42_2026-11-24-03:00:00"
        );
        assert_eq!(
            source.s3.unwrap().endpoint.as_deref(),
            Some("http://s3:3900")
        );

        let local = local_backup(
            "{path: snaps/etcd.db, persistentVolumeClaim: backups}",
            "{objectKey: 'file:///var/lib/etcd-backup/snaps/etcd.db'}",
        );
        let source = from_backup(&spec(), &local).unwrap();
        assert_eq!(source.url, "file:///var/lib/etcd-backup/snaps/etcd.db");
        assert_eq!(source.claim.as_deref(), Some("backups"));
    }

    /// A Local EtcdBackup with this `local` block and this `status.lastBackup`.
    fn local_backup(local: &str, last_backup: &str) -> EtcdBackup {
        let mut backup: EtcdBackup = serde_saphyr::from_str(&format!(
            "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdBackup\n\
             metadata: {{name: local}}\n\
             spec: {{etcdEndpoints: ['http://c-client:2379'], storageType: Local, local: {local}}}"
        ))
        .unwrap();
        backup.status =
            Some(serde_saphyr::from_str(&format!("lastBackup: {last_backup}")).unwrap());
        backup
    }

    /// A Local backup without `persistentVolumeClaim` (on the operator's own claim), written by
    /// an operator that mounts its claim elsewhere: the record says where it lies.
    #[test]
    fn a_recorded_claim_and_path_reach_a_local_backup_wherever_the_operator_wrote_it() {
        let mut local = local_backup(
            "{path: /var/lib/etcd-backup/snaps/etcd.db, persistentVolumeClaim: backups}",
            "{objectKey: 'file:///srv/backups/snaps/etcd.db-1'}",
        );
        // Recorded before localVolume existed, by an operator mounting its claim elsewhere.
        assert!(matches!(
            from_backup(&spec(), &local),
            Err(SourceError::OutsideTheClaimMount { .. })
        ));
        local = local_backup(
            "{path: /var/lib/etcd-backup/snaps/etcd.db}",
            "{objectKey: 'file:///srv/backups/snaps/etcd.db-1',\n\
              localVolume: {claim: operator-backups, path: snaps/etcd.db-1}}",
        );
        let source = from_backup(&spec(), &local).unwrap();
        assert_eq!(source.url, "file:///var/lib/etcd-backup/snaps/etcd.db-1");
        assert_eq!(source.claim.as_deref(), Some("operator-backups"));
        let bad = local.status.as_mut().unwrap().last_backup.as_mut().unwrap();
        bad.local_volume.as_mut().unwrap().path = "../etc/passwd".into();
        assert!(matches!(
            from_backup(&spec(), &local),
            Err(SourceError::BadLocalPath(_))
        ));
    }

    #[test]
    fn an_encrypted_backup_without_an_identity_is_refused_before_anything_is_done() {
        let mut backup: EtcdBackup = serde_saphyr::from_str(
            "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdBackup\n\
             metadata: {name: nightly}\n\
             spec: {etcdEndpoints: ['http://c-client:2379'], storageType: S3,\n\
               s3: {path: bucket/etcd.backup, awsSecret: aws}}\n\
             status: {lastBackup: {objectKey: 's3://bucket/etcd.backup', encryptedTo: [age1abc]}}",
        )
        .unwrap();
        let err = from_backup(&spec(), &backup).unwrap_err();
        assert!(matches!(err, SourceError::IdentityNeeded { .. }));
        assert!(err.to_string().contains("age1abc"), "{err}");
        let with_key = restore(
            "etcdCluster: {name: c}\nbackupStorageType: S3\nbackupRef: {name: nightly}\n\
             decryption: {identitySecret: {name: restore-key, key: identity.txt}}",
        );
        let source = from_backup(&with_key, &backup).unwrap();
        assert_eq!(source.identity.unwrap().key, "identity.txt");
        backup
            .status
            .as_mut()
            .unwrap()
            .last_backup
            .as_mut()
            .unwrap()
            .encrypted_to
            .clear();
        assert!(from_backup(&spec(), &backup).unwrap().identity.is_none());
    }

    #[test]
    fn a_restore_to_a_point_reads_the_base_name_of_the_archived_backups() {
        let to_a_point = restore(
            "etcdCluster: {name: c}\nbackupStorageType: S3\nbackupRef: {name: nightly}\n\
             pointInTime: {revision: 41}",
        );
        let mut backup: EtcdBackup = serde_saphyr::from_str(
            "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdBackup\n\
             metadata: {name: nightly}\n\
             spec: {etcdEndpoints: ['http://c-client:2379'], storageType: S3,\n\
               s3: {path: bucket/dir/etcd.backup, awsSecret: aws},\n\
               backupPolicy: {backupIntervalInSecond: 60}}\n\
             status: {lastBackup: {objectKey: 's3://bucket/dir/etcd.backup_v42_2026-11-24-03:00:00', sha256: ab}}",
        )
        .unwrap();
        // No archive: no point between backups can be reached.
        assert_eq!(
            from_backup(&to_a_point, &backup),
            Err(SourceError::NotArchived("nightly".into()))
        );
        backup.spec.continuous = Some(Default::default());
        // Before its first scheduled run is recorded (the archive has its own snapshot): the
        // base from the S3 block.
        let recorded = backup.status.take();
        let source = from_backup(&to_a_point, &backup).unwrap();
        assert_eq!(source.url, "s3://bucket/dir/etcd.backup");
        backup.spec.encryption =
            Some(serde_saphyr::from_str("{recipientsSecret: {name: r, key: k}}").unwrap());
        assert!(matches!(
            from_backup(&to_a_point, &backup),
            Err(SourceError::IdentityNeeded { .. })
        ));
        backup.spec.encryption = None;
        backup.status = recorded;
        let source = from_backup(&to_a_point, &backup).unwrap();
        assert_eq!(source.url, "s3://bucket/dir/etcd.backup");
        assert_eq!(source.point, to_a_point.point_in_time);
        assert_eq!(source.expected, None, "the newest backup is not the point");
        assert_eq!(source.s3.unwrap().aws_secret.as_deref(), Some("aws"));
        // A name without the scheduled suffix names no base.
        let record = backup
            .status
            .as_mut()
            .unwrap()
            .last_backup
            .as_mut()
            .unwrap();
        record.object_key = "s3://bucket/dir/etcd.backup".into();
        assert!(matches!(
            from_backup(&to_a_point, &backup),
            Err(SourceError::NotScheduled { .. })
        ));
        assert_eq!(
            scheduled_base("file:///var/lib/etcd-backup/a_v1/etcd.db_v7_2026-11-24-03:00:00"),
            Some("file:///var/lib/etcd-backup/a_v1/etcd.db")
        );
        assert_eq!(
            scheduled_base("s3://b/etcd.backup_vX_2026-11-24-03:00:00"),
            None
        );
    }

    #[test]
    fn a_restore_to_a_point_of_a_gcs_or_abs_archive_reads_the_base_before_any_backup() {
        let to_a_point = restore(
            "etcdCluster: {name: c}\nbackupStorageType: GCS\nbackupRef: {name: nightly}\n\
             pointInTime: {revision: 41}",
        );
        let backup = |blocks: &str| -> EtcdBackup {
            serde_saphyr::from_str(&format!(
                "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdBackup\n\
                 metadata: {{name: nightly}}\n\
                 spec: {{etcdEndpoints: ['http://c-client:2379'], {blocks},\n\
                   backupPolicy: {{backupIntervalInSecond: 60}}, continuous: {{}}}}"
            ))
            .unwrap()
        };
        let gcs = backup("storageType: GCS, gcs: {path: bucket/dir/etcd.backup, gcpSecret: gcp}");
        let source = from_backup(&to_a_point, &gcs).unwrap();
        assert_eq!(source.url, "gs://bucket/dir/etcd.backup");
        assert_eq!(source.point, to_a_point.point_in_time);
        assert!(matches!(
            source.cloud,
            Some(CloudAccess::Gcs { gcp_secret: Some(ref s), .. }) if s == "gcp"
        ));
        let abs = backup("storageType: ABS, abs: {path: container/etcd.backup, absSecret: abs}");
        let source = from_backup(&to_a_point, &abs).unwrap();
        assert_eq!(source.url, "azblob://container/etcd.backup");
        assert!(matches!(source.cloud, Some(CloudAccess::Azure { .. })));
        // A Local archive without a recorded backup has no base yet.
        let local = backup("storageType: Local, local: {path: /var/lib/etcd-backup/etcd.db}");
        assert_eq!(
            from_backup(&to_a_point, &local),
            Err(SourceError::NoBackupYet("nightly".into()))
        );
    }
}
