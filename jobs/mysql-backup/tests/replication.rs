//! serve/pull and serve/clone over loopback, then configure-replication and a replica that
//! follows new writes on the source.

mod common;

use std::time::{Duration, Instant};

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_from_serve_stores_a_restorable_backup() {
    let source = Mariadb::fresh(1);
    source.write_sample();
    let expected = source.sample_digest();
    let (_serve, addr) = serve(&source, &[]);
    wait_listening(&addr).await;
    let store = tempfile::tempdir().unwrap();
    let url = format!("file://{}/pulled.xbstream", store.path().display());
    let manifest = run(
        &args(&["pull", "--from", &addr, "--to", &url, "--compress", "zstd"]),
        &[],
    )
    .await
    .ok()
    .json();
    assert_eq!(manifest["source"], format!("serve {addr}"));
    assert_eq!(restore_and_digest(&url, &[], &[]).await, expected);

    // A wrong token is refused before any backup runs.
    let wrong = run(
        &args(&["pull", "--from", &addr, "--to", &url]),
        &[(
            "MYSQL_BACKUP_TOKEN".into(),
            "not-the-right-token-at-all".into(),
        )],
    )
    .await;
    assert_eq!(wrong.code, 1);
    assert!(
        wrong.error_line().contains("does not hold the same token"),
        "{}",
        wrong.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clone_then_configure_replication_follows_the_source() {
    let source = Mariadb::fresh(1);
    source.write_sample();
    let (_serve, addr) = serve(&source, &[]);
    wait_listening(&addr).await;

    let dir = tempfile::tempdir().unwrap();
    let datadir = dir.path().join("replica");
    std::fs::create_dir(&datadir).unwrap();
    std::fs::create_dir(datadir.join("lost+found")).unwrap();
    let clone = args(&[
        "clone",
        "--from",
        &addr,
        "--datadir",
        datadir.to_str().unwrap(),
    ]);
    let out = run(&clone, &[]).await.ok().json();
    assert_eq!(out["cloned"], true);
    // Writes after the backup must arrive through replication.
    source.sql("INSERT INTO shop.orders VALUES (200000, 'after-clone', 'x'); UPDATE shop.notes SET note = 'changed';");

    // Init containers rerun on every pod restart: the second clone must not touch the data.
    let again = run(&clone, &[]).await.ok().json();
    assert_eq!(again["cloned"], false);

    let replica = Mariadb::start_on(&datadir, 2);
    // The replication password holds quotes and backslashes: its literal must hold under
    // NO_BACKSLASH_ESCAPES too (new sessions take the global mode).
    replica.sql("SET GLOBAL sql_mode = CONCAT(@@GLOBAL.sql_mode, ',NO_BACKSLASH_ESCAPES');");
    let configure = args(&[
        "configure-replication",
        "--datadir",
        datadir.to_str().unwrap(),
        "--source-host",
        "127.0.0.1",
        "--source-port",
        &source.port.to_string(),
        "--socket",
        replica.socket.to_str().unwrap(),
        "--user",
        "root",
    ]);
    // root logs in through unix_socket auth; no password.
    let env = [("MYSQL_BACKUP_PASSWORD".to_string(), String::new())];
    let result = run(&configure, &env).await.ok().json();
    assert_eq!(result["configured"], true, "{result}");
    assert!(result["binlog"]["gtid"].is_string());

    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if replica.sample_digest() == source.sample_digest() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "replica did not catch up:\n{}\n{}",
            replica.sql("SHOW SLAVE STATUS\\G"),
            replica.error_log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    source.sql("INSERT INTO shop.orders VALUES (200001, 'later', 'y');");
    let deadline = Instant::now() + Duration::from_secs(30);
    while replica.sql("SELECT COUNT(*) FROM shop.orders WHERE id = 200001") != "1" {
        assert!(Instant::now() < deadline, "replica stopped following");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Idempotent: a restarted sidecar does not reconfigure (which would rewind the position).
    assert_eq!(run(&configure, &env).await.ok().json()["configured"], false);
}
