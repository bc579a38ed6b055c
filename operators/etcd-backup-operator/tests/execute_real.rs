//! The controller's backup execution against real etcd and a real S3 server (Garage):
//! exact one-shot names, coreos suffixes, verified objects, retention limited to our own
//! objects, failures that leave nothing behind, and the Delete policy.

use std::collections::BTreeMap;

use backup_storage::Location;
use etcd_api::EtcdBackupSpec;
use etcd_backup_operator::execute::{self, delete_backups, run_backup};
use etcd_backup_operator::local::LocalVolume;
use etcd_backup_operator::retention::OWNER_METADATA_KEY;
use etcd_backup_operator::secrets::{self, Resolved, SecretData};
use etcd_backup_operator::validate::{self, BackupPlan, Target};
use k8s_openapi::ByteString;
use serde_json::json;
use testbed::{Etcd, Garage};

mod common;
use common::{aws_files, keys, store};

const UID: &str = "0b6f1f6e-uid-ours";

/// The Secret a coreos user creates from `~/.aws/credentials` and `~/.aws/config`.
fn aws_secret(garage: &Garage) -> SecretData {
    aws_files(garage)
        .into_iter()
        .map(|(k, v)| (k.to_string(), ByteString(v.into_bytes())))
        .collect::<BTreeMap<_, _>>()
}

fn plan(etcd: &Etcd, garage: &Garage, path: &str, policy: serde_json::Value) -> BackupPlan {
    let spec: EtcdBackupSpec = serde_json::from_value(json!({
        "etcdEndpoints": [etcd.endpoint],
        "storageType": "S3",
        "backupPolicy": policy,
        "s3": {"path": format!("{}/{path}", garage.bucket), "awsSecret": "aws",
               "endpoint": garage.endpoint, "forcePathStyle": true}
    }))
    .unwrap();
    validate::build(&spec).unwrap()
}

/// Where an S3 plan writes (the namespace only matters for Local).
fn location(plan: &BackupPlan) -> Location {
    execute::location(plan, "default", None).unwrap()
}

fn resolved(plan: &BackupPlan, garage: &Garage) -> Resolved {
    let secret = aws_secret(garage);
    Resolved {
        storage: (&secrets::s3_options(plan.s3().unwrap(), Some(("aws", &secret)), None, false)
            .unwrap())
            .into(),
        tls: None,
        recipients: None,
    }
}

#[tokio::test]
async fn one_shot_writes_exactly_the_path_verified_and_tagged() {
    let (etcd, garage) = (Etcd::start().await.unwrap(), Garage::start().await.unwrap());
    etcd.put("/hello", "world").await.unwrap();
    let plan = plan(&etcd, &garage, "etcd.backup", json!({}));
    let outcome = run_backup(&plan, &location(&plan), resolved(&plan, &garage), UID, None)
        .await
        .unwrap();

    assert_eq!(outcome.report.key, "etcd.backup");
    assert_eq!(
        outcome.report.url,
        format!("s3://{}/etcd.backup", garage.bucket)
    );
    let store = store(&garage).await;
    // Read back independently: the trailer and the manifest match what status will say.
    let verified = etcd_snapshot::verify(&store, "etcd.backup", None)
        .await
        .unwrap();
    assert_eq!(verified.stored, outcome.report.manifest.stored_checksum());
    assert_eq!(verified.stored_bytes, outcome.report.manifest.stored_bytes);
    let head = store.head("etcd.backup").await.unwrap().unwrap();
    assert_eq!(
        head.metadata.get(OWNER_METADATA_KEY).map(String::as_str),
        Some(UID)
    );
    assert!(outcome.report.manifest.etcd_revision >= 2);
    // What a drill compares with is recorded: the key count and HashKV at the revision.
    let contents = outcome.report.manifest.contents.clone().unwrap();
    assert_eq!(contents.key_count, 1);
    assert!(contents.hash_kv.is_some(), "{contents:?}");

    // recordHashKV: false (very large clusters) records the count only, and says why.
    let mut without = plan.clone();
    without.hash_kv = etcd_snapshot::HashKv::Skip;
    let outcome = run_backup(
        &without,
        &location(&without),
        resolved(&without, &garage),
        UID,
        None,
    )
    .await
    .unwrap();
    let contents = outcome.report.manifest.contents.unwrap();
    assert_eq!((contents.key_count, contents.hash_kv), (1, None));
    assert_eq!(contents.hash_skipped.as_deref(), Some("turned off"));
}

#[tokio::test]
async fn scheduled_runs_keep_coreos_names_and_prune_only_our_oldest() {
    let (etcd, garage) = (Etcd::start().await.unwrap(), Garage::start().await.unwrap());
    let store = store(&garage).await;
    let plan = plan(
        &etcd,
        &garage,
        "etcd.backup",
        json!({"backupIntervalInSecond": 125, "maxBackups": 2}),
    );
    // Not ours, though they share the prefix: another EtcdBackup's backup (older than all of
    // ours) and an object put by hand.
    let other_plan = plan.clone();
    etcd.put("/k", "0").await.unwrap();
    let theirs = run_backup(
        &other_plan,
        &location(&other_plan),
        resolved(&other_plan, &garage),
        "someone-else",
        None,
    )
    .await
    .unwrap()
    .report
    .key;
    store
        .put_small(
            "etcd.backup_v1_2000-01-01-00:00:00",
            "x".into(),
            "text/plain",
        )
        .await
        .unwrap();

    let mut ours: Vec<String> = Vec::new();
    for i in 1..=3 {
        // Names have one-second resolution; distinct revisions and seconds keep them apart.
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
        etcd.put("/k", &i.to_string()).await.unwrap();
        let outcome = run_backup(&plan, &location(&plan), resolved(&plan, &garage), UID, None)
            .await
            .unwrap();
        let parsed = etcd_snapshot::naming::parse_scheduled("etcd.backup", &outcome.report.key)
            .unwrap_or_else(|| panic!("not a coreos name: {}", outcome.report.key));
        assert_eq!(parsed.revision, outcome.report.manifest.etcd_revision);
        let expected_pruned = if i == 3 {
            vec![ours[0].clone(), format!("{}.manifest.json", ours[0])]
        } else {
            vec![]
        };
        assert_eq!(
            outcome.pruned.as_ref().unwrap(),
            &expected_pruned,
            "run {i}"
        );
        ours.push(outcome.report.key);
    }
    let left = keys(&store, "etcd.backup").await;
    for key in [&ours[1], &ours[2], &theirs] {
        assert!(left.contains(key), "{key} missing from {left:?}");
    }
    assert!(left.contains(&"etcd.backup_v1_2000-01-01-00:00:00".to_string()));
    assert!(!left.contains(&ours[0]));

    // The newest backup a drill proved is kept beyond maxBackups: the fourth run would prune
    // ours[1], which status names as drilled (by its URL).
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    etcd.put("/k", "4").await.unwrap();
    let drilled = store.location(&ours[1]).to_string();
    let outcome = run_backup(
        &plan,
        &location(&plan),
        resolved(&plan, &garage),
        UID,
        Some(&drilled),
    )
    .await
    .unwrap();
    assert_eq!(outcome.pruned.as_ref().unwrap(), &Vec::<String>::new());
    let left = keys(&store, "etcd.backup").await;
    assert!(left.contains(&ours[1]), "{left:?}");
    ours.push(outcome.report.key);

    // Delete policy: only what this EtcdBackup wrote goes.
    let deleted = delete_backups(&location(&plan), &resolved(&plan, &garage).storage, UID)
        .await
        .unwrap();
    assert_eq!(deleted.len(), 6, "{deleted:?}");
    let left = keys(&store, "etcd.backup").await;
    assert!(
        left.contains(&theirs) && !left.contains(&ours[2]),
        "{left:?}"
    );
}

#[tokio::test]
async fn failures_name_their_cause_and_leave_nothing_visible() {
    let (etcd, garage) = (Etcd::start().await.unwrap(), Garage::start().await.unwrap());
    let store = store(&garage).await;

    let mut missing_bucket = plan(&etcd, &garage, "x", json!({}));
    if let Target::S3 { location, .. } = &mut missing_bucket.target {
        location.bucket = "no-such-bucket".into();
    }
    let err = run_backup(
        &missing_bucket,
        &location(&missing_bucket),
        resolved(&missing_bucket, &garage),
        UID,
        None,
    )
    .await
    .unwrap_err();
    assert_eq!(err.reason(), "BucketNotFound", "{err}");

    let mut unreachable = plan(&etcd, &garage, "etcd.down", json!({"timeoutInSecond": 20}));
    unreachable.endpoints = vec![format!("http://127.0.0.1:{}", testbed::free_port())];
    let err = run_backup(
        &unreachable,
        &location(&unreachable),
        resolved(&unreachable, &garage),
        UID,
        None,
    )
    .await
    .unwrap_err();
    assert_eq!(err.reason(), "EtcdUnreachable", "{err}");
    assert!(keys(&store, "etcd.down").await.is_empty());

    let bad_key = plan(&etcd, &garage, "etcd.badkey", json!({}));
    let mut secret = aws_secret(&garage);
    secret.insert(
        "credentials".into(),
        ByteString(
            format!(
                "[default]\naws_access_key_id = {}\naws_secret_access_key = wrong\n",
                garage.access_key
            )
            .into_bytes(),
        ),
    );
    let resolved = Resolved {
        storage: (&secrets::s3_options(bad_key.s3().unwrap(), Some(("aws", &secret)), None, false)
            .unwrap())
            .into(),
        tls: None,
        recipients: None,
    };
    let err = run_backup(&bad_key, &location(&bad_key), resolved, UID, None)
        .await
        .unwrap_err();
    assert!(
        !err.to_string().contains("wrong"),
        "secret value leaked: {err}"
    );
    assert!(keys(&store, "etcd.badkey").await.is_empty());
}

/// `storageType: Local` on the operator's volume: the coreos suffix, files that `verify`
/// accepts, retention by the owner recorded in the manifest (local files have no user
/// metadata), foreign files untouched, and the Delete policy.
#[tokio::test]
async fn local_volume_scheduled_backups_prune_and_delete_only_ours() {
    let etcd = Etcd::start().await.unwrap();
    etcd.put("/local", "yes").await.unwrap();
    let volume_dir = tempfile::tempdir().unwrap();
    let volume = LocalVolume::parse("backups/etcd-backups", volume_dir.path().into()).unwrap();
    let spec: EtcdBackupSpec = serde_json::from_value(json!({
        "etcdEndpoints": [etcd.endpoint],
        "storageType": "Local",
        "backupPolicy": {"backupIntervalInSecond": 60, "maxBackups": 2},
        "local": {"path": "cluster-a/etcd.backup", "persistentVolumeClaim": "etcd-backups"}
    }))
    .unwrap();
    let plan = validate::build(&spec).unwrap();
    let resolved = || Resolved {
        storage: Default::default(),
        tls: None,
        recipients: None,
    };
    // Another EtcdBackup's file with the same base, and a stray file without a manifest.
    let dir = volume_dir.path().join("cluster-a");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("etcd.backup_v1_2000-01-01-00:00:00"), b"stray").unwrap();

    let location = execute::location(&plan, "backups", Some(&volume)).unwrap();
    let mut ours = Vec::new();
    for _ in 0..3 {
        // The coreos suffix has one-second resolution.
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
        let outcome = run_backup(&plan, &location, resolved(), UID, None)
            .await
            .unwrap();
        assert!(outcome.pruned.is_ok(), "{:?}", outcome.pruned);
        assert!(
            outcome
                .report
                .url
                .starts_with(&format!("file://{}/etcd.backup_v", dir.display())),
            "{}",
            outcome.report.url
        );
        ours.push(outcome.report.key);
    }
    let store = backup_storage::Store::open(&location, backup_storage::StoreOptions::default())
        .await
        .unwrap();
    for key in &ours[1..] {
        etcd_snapshot::verify(&store, key, None).await.unwrap();
    }
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files.len(),
        5,
        "two backups, their manifests, the stray: {files:?}"
    );
    assert!(store.head(&ours[0]).await.unwrap().is_none(), "oldest kept");
    assert!(files.contains(&"etcd.backup_v1_2000-01-01-00:00:00".to_string()));

    // Another namespace may not use this claim.
    let err = execute::location(&plan, "team-b", Some(&volume)).unwrap_err();
    assert_eq!(err.reason(), "LocalVolumeUnavailable", "{err}");

    let deleted = delete_backups(&location, &resolved().storage, UID)
        .await
        .unwrap();
    assert_eq!(deleted.len(), 4, "{deleted:?}");
    let left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["etcd.backup_v1_2000-01-01-00:00:00"]);
}

/// A one-shot writes exactly its path, but never over an object another EtcdBackup or tool
/// wrote there (a tenant could otherwise replace anyone's backup); its own earlier backup is
/// rewritten.
#[tokio::test]
async fn a_one_shot_never_overwrites_an_object_it_did_not_write() {
    let (etcd, garage) = (Etcd::start().await.unwrap(), Garage::start().await.unwrap());
    etcd.put("/hello", "world").await.unwrap();
    let store = store(&garage).await;
    let one_shot = |path: &str| plan(&etcd, &garage, path, json!({}));

    // Another tool's object.
    let foreign: &[u8] = b"not an etcd backup";
    store
        .put_small(
            "tool.bin",
            foreign.to_vec().into(),
            "application/octet-stream",
        )
        .await
        .unwrap();
    let p = one_shot("tool.bin");
    let err = run_backup(&p, &location(&p), resolved(&p, &garage), UID, None)
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "ObjectNotOwned", "{err}");
    assert!(err.to_string().contains("names an EtcdBackup"), "{err}");
    assert_eq!(store.get_small("tool.bin").await.unwrap().unwrap(), foreign);

    // Another EtcdBackup's backup.
    let p = one_shot("theirs.backup");
    run_backup(
        &p,
        &location(&p),
        resolved(&p, &garage),
        "uid-of-another-team",
        None,
    )
    .await
    .unwrap();
    let theirs = store.head("theirs.backup").await.unwrap().unwrap();
    let err = run_backup(&p, &location(&p), resolved(&p, &garage), UID, None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("uid-of-another-team"), "{err}");
    assert_eq!(
        store.head("theirs.backup").await.unwrap().unwrap().etag,
        theirs.etag
    );

    // Its own earlier backup: rewritten.
    let p = one_shot("ours.backup");
    for _ in 0..2 {
        run_backup(&p, &location(&p), resolved(&p, &garage), UID, None)
            .await
            .unwrap();
    }

    // Replaced behind its manifest by another tool: the manifest still names this EtcdBackup,
    // but it was written for the object before, so it vouches for nothing.
    store
        .put_small(
            "ours.backup",
            foreign.to_vec().into(),
            "application/octet-stream",
        )
        .await
        .unwrap();
    assert!(
        store
            .get_small("ours.backup.manifest.json")
            .await
            .unwrap()
            .is_some()
    );
    let err = run_backup(&p, &location(&p), resolved(&p, &garage), UID, None)
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "ObjectNotOwned", "{err}");
    assert_eq!(
        store.get_small("ours.backup").await.unwrap().unwrap(),
        foreign
    );
}

/// The check before the upload is not all: a file another writer puts at the one-shot's path
/// while the backup streams is not replaced either (the commit is conditional; shown on local
/// storage, as Garage ignores S3's conditional writes).
#[tokio::test]
async fn a_one_shot_never_overwrites_what_appeared_while_it_ran() {
    let etcd = Etcd::start().await.unwrap();
    etcd.fill_random(8 << 20, 64 << 10).await.unwrap();
    // etcd's stream at 2 MiB/s: the backup runs for about 4 s.
    let slow_etcd = testbed::proxy::throttled_proxy(
        etcd.endpoint.trim_start_matches("http://").to_string(),
        2 << 20,
    )
    .await;
    let volume_dir = tempfile::tempdir().unwrap();
    let volume = LocalVolume::parse("backups/etcd-backups", volume_dir.path().into()).unwrap();
    let spec: EtcdBackupSpec = serde_json::from_value(json!({
        "etcdEndpoints": [format!("http://{slow_etcd}")],
        "storageType": "Local",
        "local": {"path": "etcd.backup", "persistentVolumeClaim": "etcd-backups"}
    }))
    .unwrap();
    let plan = validate::build(&spec).unwrap();
    let location = execute::location(&plan, "backups", Some(&volume)).unwrap();
    let resolved = Resolved {
        storage: Default::default(),
        tls: None,
        recipients: None,
    };
    let run = tokio::spawn(async move { run_backup(&plan, &location, resolved, UID, None).await });

    // Once the backup is streaming (its hidden temp file exists), another writer's file appears.
    let target = volume_dir.path().join("etcd.backup");
    let streaming = || {
        std::fs::read_dir(volume_dir.path()).unwrap().any(|e| {
            e.unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with(".etcd.backup.part-")
        })
    };
    for _ in 0..200 {
        if streaming() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert!(streaming(), "the backup never started streaming");
    std::fs::write(&target, b"another writer's file").unwrap();

    let err = run.await.unwrap().unwrap_err();
    assert_eq!(err.reason(), "ObjectNotOwned", "{err}");
    assert!(err.to_string().contains("before the commit"), "{err}");
    assert_eq!(std::fs::read(&target).unwrap(), b"another writer's file");
}

/// A scheduled name already taken (another EtcdBackup with the same path, in the same second)
/// is never overwritten: the run fails with the cause and the other object stays as it was.
#[tokio::test]
async fn a_scheduled_name_taken_by_another_writer_is_not_overwritten() {
    let (etcd, garage) = (Etcd::start().await.unwrap(), Garage::start().await.unwrap());
    etcd.put("/k", "v").await.unwrap();
    let store = store(&garage).await;
    let plan = plan(
        &etcd,
        &garage,
        "etcd.taken",
        json!({"backupIntervalInSecond": 60}),
    );
    let connection = etcd_snapshot::EtcdConnection::new(plan.endpoints.clone());
    let revision = etcd_snapshot::select_member(&connection)
        .await
        .unwrap()
        .revision;
    // Every name the run can pick in the next 30 seconds holds another writer's object.
    let now = chrono::Utc::now();
    let taken: Vec<String> = (0..30)
        .map(|s| {
            let at = now + chrono::Duration::seconds(s);
            etcd_snapshot::naming::scheduled_name("etcd.taken", revision, at)
        })
        .collect();
    for key in &taken {
        store
            .put_small(key, "theirs".into(), "text/plain")
            .await
            .unwrap();
    }

    let err = run_backup(&plan, &location(&plan), resolved(&plan, &garage), UID, None)
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "ObjectNotOwned", "{err}");
    for key in &taken {
        let object = store.head(key).await.unwrap().unwrap();
        assert_eq!(object.size, 6, "{key} was overwritten");
    }
    assert_eq!(keys(&store, "etcd.taken").await.len(), taken.len());
}

/// `timeoutInSecond` bounds the whole run, also the S3 calls before the snapshot: an S3
/// server that stops answering (SIGSTOP) before the run fails it at the deadline, not after
/// the SDK's 10-minute attempts.
#[tokio::test]
async fn the_deadline_covers_the_calls_before_the_snapshot() {
    let (etcd, garage) = (Etcd::start().await.unwrap(), Garage::start().await.unwrap());
    etcd.put("/k", "v").await.unwrap();
    let plan = plan(&etcd, &garage, "etcd.hung", json!({"timeoutInSecond": 3}));
    let pid = garage.pid().unwrap().to_string();
    let signal = |name: &str| {
        let status = std::process::Command::new("kill")
            .args([name, &pid])
            .status()
            .unwrap();
        assert!(status.success());
    };
    signal("-STOP");
    let started = std::time::Instant::now();
    let target = location(&plan);
    let run = run_backup(&plan, &target, resolved(&plan, &garage), UID, None);
    let result = tokio::time::timeout(std::time::Duration::from_secs(60), run).await;
    signal("-CONT");
    let err = result.expect("the run ended by its deadline").unwrap_err();
    assert_eq!(err.reason(), "Timeout", "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
}

/// `spec.encryption`: the object is encrypted to the Secret's recipients; the operator holds
/// only public keys, and the backup opens with the matching identity alone.
#[tokio::test]
async fn an_encrypted_backup_opens_only_with_its_identity() {
    let (etcd, garage) = (Etcd::start().await.unwrap(), Garage::start().await.unwrap());
    etcd.put("/hello", "world").await.unwrap();
    let (secret, public) = backup_storage::encryption::Identity::generate();
    let identity = backup_storage::encryption::Identity::parse(&secret, "identity").unwrap();
    let mut plan = plan(&etcd, &garage, "etcd.backup", json!({}));
    let key = etcd_api::SecretKeyRef {
        name: "backup-recipients".into(),
        key: "recipients.txt".into(),
    };
    plan.recipients_secret = Some(key.clone());
    let data = BTreeMap::from([(
        "recipients.txt".to_string(),
        ByteString(format!("# restore key\n{public}\n").into_bytes()),
    )]);
    let mut resolved = resolved(&plan, &garage);
    resolved.recipients = Some(secrets::recipients(&key, &data).unwrap());
    let outcome = run_backup(&plan, &location(&plan), resolved, UID, None)
        .await
        .unwrap();
    let encryption = outcome.report.manifest.encryption.clone().unwrap();
    assert_eq!(encryption.recipients, vec![public]);

    let store = store(&garage).await;
    let stored = store.get_small("etcd.backup").await.unwrap().unwrap();
    assert!(stored.starts_with(b"age-encryption.org/v1\n"));
    let err = etcd_snapshot::verify(&store, "etcd.backup", None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no identity was given"), "{err}");
    let verified = etcd_snapshot::verify(&store, "etcd.backup", Some(&identity))
        .await
        .unwrap();
    assert!(verified.encrypted);
    assert_eq!(verified.db_sha256, outcome.report.manifest.db_sha256);
}

/// `s3.serverSideEncryption` SSE-C: the run writes the object and its manifest with the
/// Secret's key; S3 serves them only with it.
#[tokio::test]
async fn an_sse_c_backup_is_written_with_the_secrets_key() {
    let (etcd, garage) = (Etcd::start().await.unwrap(), Garage::start().await.unwrap());
    etcd.put("/hello", "world").await.unwrap();
    let spec: EtcdBackupSpec = serde_json::from_value(json!({
        "etcdEndpoints": [etcd.endpoint],
        "storageType": "S3",
        "s3": {"path": format!("{}/etcd.backup", garage.bucket), "awsSecret": "aws",
               "endpoint": garage.endpoint, "forcePathStyle": true,
               "serverSideEncryption": {"mode": "SSE-C",
                   "customerKeySecret": {"name": "sse-c", "key": "key"}}}
    }))
    .unwrap();
    let plan = validate::build(&spec).unwrap();
    let key = BTreeMap::from([("key".to_string(), ByteString(vec![3; 32]))]);
    let mut resolved = resolved(&plan, &garage);
    resolved.storage.s3.server_side_encryption =
        secrets::server_side_encryption(plan.s3().unwrap(), Some(&key)).unwrap();
    let with_key = resolved.storage.s3.clone();
    run_backup(&plan, &location(&plan), resolved, UID, None)
        .await
        .unwrap();

    let location = location(&plan);
    let plain = store(&garage).await;
    assert!(
        etcd_snapshot::verify(&plain, "etcd.backup", None)
            .await
            .is_err()
    );
    let keyed = backup_storage::Store::open(&location, &with_key)
        .await
        .unwrap();
    let verified = etcd_snapshot::verify(&keyed, "etcd.backup", None)
        .await
        .unwrap();
    assert!(verified.manifest.is_some());
}
