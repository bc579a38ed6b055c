//! Scheduled names and `prune` against real storage.

mod common;

use common::*;
use testbed::{Etcd, Garage};

#[tokio::test]
async fn scheduled_saves_then_prune_keeps_the_newest_and_ignores_foreign_objects() {
    let garage = Garage::start().await.unwrap();
    let (flags, env) = garage.cli_args();
    let etcd = Etcd::start().await.unwrap();
    let base = format!("s3://{}/etcd.backup", garage.bucket);

    let mut saved = Vec::new();
    for i in 0..3 {
        // A write between saves gives each backup its own revision, hence its own name.
        etcd.put("/tick", &i.to_string()).await.unwrap();
        let mut save = vec![
            "save",
            "--endpoints",
            &etcd.endpoint,
            "--to",
            &base,
            "--scheduled-name",
            "--output",
            "json",
        ];
        save.extend(strs(&flags));
        saved.push(
            run(&save, &env).await.ok().json()["object"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    for object in &saved {
        assert!(object.starts_with(&format!("{base}_v")), "{object}");
    }
    // Objects that share the prefix but are not ours.
    let foreign = format!("{base}-notes.txt");
    let mut save_foreign = vec!["save", "--endpoints", &etcd.endpoint, "--to", &foreign];
    save_foreign.extend(strs(&flags));
    run(&save_foreign, &env).await.ok();

    let mut prune = vec!["prune", &base, "--keep", "2", "--output", "json"];
    prune.extend(strs(&flags));
    let pruned = run(&prune, &env).await.ok().json();
    let deleted: Vec<String> = serde_json::from_value(pruned["deleted"].clone()).unwrap();
    assert_eq!(
        deleted,
        vec![saved[0].clone(), format!("{}.manifest.json", saved[0])]
    );

    let mut list = vec!["list", &base, "--output", "json"];
    list.extend(strs(&flags));
    let listed: Vec<String> = run(&list, &env)
        .await
        .ok()
        .stdout
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["object"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let mut expected = vec![saved[1].clone(), saved[2].clone(), foreign.clone()];
    expected.sort();
    assert_eq!(listed, expected);
}

#[tokio::test]
async fn prune_orders_by_revision_not_string_when_it_gains_a_digit() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("etcd.backup");
    for name in [
        "_v98_2020-01-01-00:00:00",
        "_v99_2020-01-01-00:01:00",
        "_v100_2020-01-01-00:02:00",
    ] {
        std::fs::write(format!("{}{name}", base.display()), b"x").unwrap();
    }
    let base = base.to_str().unwrap();
    run(&["prune", base, "--keep", "1"], &[]).await.ok();
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, vec!["etcd.backup_v100_2020-01-01-00:02:00"]);
    let r = run(&["prune", base, "--keep", "0"], &[]).await;
    assert_eq!(r.code, 2, "keep 0 must be refused: {}", r.stderr);
}

/// `prune` removes abandoned uploads of the base's backups only: another tool's upload under the
/// same prefix stays.
#[tokio::test]
async fn prune_removes_only_this_base_s_abandoned_uploads() {
    let garage = Garage::start().await.unwrap();
    let (flags, env) = garage.cli_args();
    let base = format!("s3://{}/etcd.backup", garage.bucket);
    let ours = "etcd.backup_v7_2026-11-24-06:00:00";
    let foreign = "etcd.backup-mysql.xbstream";
    garage.start_abandoned_upload(ours);
    garage.start_abandoned_upload(foreign);
    let mut prune = vec!["prune", &base, "--keep", "2", "--output", "json"];
    prune.extend(["--incomplete-older-than", "0"]);
    prune.extend(strs(&flags));
    run(&prune, &env).await.ok();

    let listed = garage.aws(&[
        "s3api",
        "list-multipart-uploads",
        "--bucket",
        &garage.bucket,
    ]);
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let keys: Vec<&str> = listed["Uploads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["Key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, [foreign]);
}
