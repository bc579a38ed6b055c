//! Benchmark, run by hand (not a timed test): the binlog archive and restores to a point, with
//! a real MariaDB and Garage (S3) on this machine. Figures: docs/benchmarks/mysql-backup.md.
//!
//!   cargo test --release -p mysql-backup --test archive_bench -- --ignored --nocapture
//!
//! (1) **Lag.** A client commits a row every 20 ms (50 transactions/s) for BENCH_LAG_SECONDS
//!     (120) while three `archive-binlogs` (zstd, age) follow the same server into three
//!     prefixes: `--interval 1`, the default 5, and 60 (the upload interval of Percona's binlog
//!     collector, `timeBetweenUploads`, by default). A transaction's lag is the `archivedAt` of
//!     the piece holding it (set once its object is stored) minus its commit time (the server's
//!     `NOW(6)` right after it committed). Reported: p50, p99, max per interval, and each p99
//!     against the 60 s one.
//! (2) **Restore to a point.** After a full backup, BENCH_PITR_TRANSACTIONS (180,000: an hour
//!     at 50/s) single-row transactions, archived; then `restore --until-gtid` of a marker
//!     transaction written after them against `restore` of the backup alone (what a user without
//!     the archive does, losing those transactions): both times and their ratio.

mod common;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use chrono::{DateTime, NaiveDateTime, Utc};
use common::*;
use mysql_backup::binlog_archive::Archive;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A `mariadb` session on `server`: statements in, result lines out, unbuffered.
struct Session {
    child: tokio::process::Child,
    input: tokio::process::ChildStdin,
    output: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Session {
    fn open(server: &Mariadb) -> Session {
        let mut child = tokio::process::Command::new("mariadb")
            .arg("--no-defaults")
            .arg("-uroot")
            .arg(format!("--socket={}", server.socket.display()))
            .args(["--batch", "--skip-column-names", "--unbuffered"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let input = child.stdin.take().unwrap();
        let output = BufReader::new(child.stdout.take().unwrap()).lines();
        Session {
            child,
            input,
            output,
        }
    }

    /// Runs `statement` (ending in a SELECT of one row) and returns that row's fields.
    async fn row(&mut self, statement: &str) -> Vec<String> {
        self.input
            .write_all(format!("{statement}\n").as_bytes())
            .await
            .unwrap();
        let line = self.output.next_line().await.unwrap().unwrap();
        line.split('\t').map(String::from).collect()
    }
}

/// Commits one row and returns its GTID sequence number and the server's time right after.
async fn commit(session: &mut Session, id: u64) -> (u64, DateTime<Utc>) {
    let row = session
        .row(&format!(
            "INSERT INTO bench.t VALUES ({id}, REPEAT(SHA2('{id}', 256), 4)); SELECT @@last_gtid, NOW(6);"
        ))
        .await;
    let seq = row[0].rsplit('-').next().unwrap().parse().unwrap();
    let time = NaiveDateTime::parse_from_str(&row[1], "%Y-%m-%d %H:%M:%S%.f")
        .unwrap()
        .and_utc();
    (seq, time)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at]
}

/// Each archived transaction's lag (seconds) in the archive under `prefix`.
async fn lags(
    store: &backup_storage::Store,
    prefix: &str,
    commits: &BTreeMap<u64, DateTime<Utc>>,
) -> Vec<f64> {
    let archive = Archive::read(store, prefix).await.unwrap();
    let mut lags = Vec::new();
    for file in &archive.files {
        for piece in &file.pieces {
            let m = &piece.manifest;
            let from = m.state_at_start().last_seq(0).unwrap_or(0);
            let to = m.state_at_end().last_seq(0).unwrap_or(0);
            for seq in from + 1..=to {
                if let Some(committed) = commits.get(&seq) {
                    lags.push((m.archived_at - *committed).as_seconds_f64());
                }
            }
        }
    }
    lags.sort_by(f64::total_cmp);
    lags
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run by hand"]
async fn archive_lag_and_restore_to_a_point() {
    let lag_seconds = env_number("BENCH_LAG_SECONDS", 120);
    let transactions = env_number("BENCH_PITR_TRANSACTIONS", 180_000);
    let garage = testbed::Garage::start()
        .await
        .expect("garage (e2e/install-deps.sh)");
    let (s3_args, env) = garage.cli_args();
    let dir = tempfile::tempdir().unwrap();
    let (identity, recipients) = age_key_files(dir.path());
    let bucket = format!("s3://{}/bench", garage.bucket);

    let server = Mariadb::fresh(1);
    server.sql("CREATE DATABASE bench; CREATE TABLE bench.t (id BIGINT PRIMARY KEY, v TEXT);");

    // (1) Lag: three archivers on the same server, one workload.
    let intervals = [1u64, 5, 60];
    let mut archivers = Vec::new();
    for interval in intervals {
        let mut a = args(&[
            "archive-binlogs",
            "--to",
            &format!("{bucket}/lag-{interval}/"),
            "--datadir",
            server.datadir.to_str().unwrap(),
            "--interval",
            &interval.to_string(),
            "--compress",
            "zstd",
            "--encrypt-to-file",
            recipients.to_str().unwrap(),
        ]);
        a.extend(s3_args.clone());
        archivers.push(
            command(&a, &env)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
    }
    let mut session = Session::open(&server);
    let mut commits = BTreeMap::new();
    let started = Instant::now();
    let mut id = 0;
    while started.elapsed() < Duration::from_secs(lag_seconds) {
        let tick = Instant::now();
        let (seq, time) = commit(&mut session, id).await;
        commits.insert(seq, time);
        id += 1;
        tokio::time::sleep(Duration::from_millis(20).saturating_sub(tick.elapsed())).await;
    }
    // Every archiver has looked again after the last commit.
    tokio::time::sleep(Duration::from_secs(65)).await;
    for mut archiver in archivers {
        archiver.kill().await.unwrap();
    }
    let location = backup_storage::Location::parse(&format!("{bucket}/")).unwrap();
    let options = backup_storage::S3Options::s3_compatible(
        &garage.endpoint,
        &garage.region,
        &garage.access_key,
        &garage.secret_key,
    );
    let store = backup_storage::Store::open(&location, &options)
        .await
        .unwrap();
    println!(
        "\n(1) lag, {} transactions at 50/s over {lag_seconds} s",
        commits.len()
    );
    println!("| --interval | archived | p50 | p99 | max | p99 / p99 at 60 s |");
    println!("|---|---|---|---|---|---|");
    let mut p99s = Vec::new();
    for interval in intervals {
        let lags = lags(
            &store,
            &format!("{}lag-{interval}/", location.key()),
            &commits,
        )
        .await;
        assert_eq!(
            lags.len(),
            commits.len(),
            "--interval {interval}: not every transaction archived"
        );
        p99s.push((
            interval,
            percentile(&lags, 0.50),
            percentile(&lags, 0.99),
            lags[lags.len() - 1],
        ));
    }
    let baseline = p99s[p99s.len() - 1].2;
    for (interval, p50, p99, max) in &p99s {
        println!(
            "| {interval} s | {} | {p50:.2} s | {p99:.2} s | {max:.2} s | {:.3} |",
            commits.len(),
            p99 / baseline
        );
    }

    // (2) Restore to a point after `transactions` transactions, against the backup alone.
    let mut a = server.backup_to(&format!("{bucket}/backups/full-1"), &["--compress", "zstd"]);
    a.extend(s3_args.clone());
    run(&a, &env).await.ok();
    server.sql("SET GLOBAL innodb_flush_log_at_trx_commit = 2;");
    let load = Instant::now();
    for chunk in (id..id + transactions).collect::<Vec<_>>().chunks(1000) {
        let statements: String = chunk
            .iter()
            .map(|i| format!("INSERT INTO bench.t VALUES ({i}, REPEAT(SHA2('{i}', 256), 4));"))
            .collect();
        server.sql(&statements);
    }
    let load = load.elapsed();
    server.sql("SET GLOBAL innodb_flush_log_at_trx_commit = 1;");
    let marker = session
        .row("INSERT INTO bench.t VALUES (-1, 'marker'); SELECT @@last_gtid;")
        .await[0]
        .clone();
    let mut a = args(&[
        "archive-binlogs",
        "--once",
        "--to",
        &format!("{bucket}/pitr/"),
        "--datadir",
        server.datadir.to_str().unwrap(),
        "--compress",
        "zstd",
        "--encrypt-to-file",
        recipients.to_str().unwrap(),
    ]);
    a.extend(s3_args.clone());
    run(&a, &env).await.ok();
    session.child.kill().await.unwrap();

    let restore = async |extra: &[&str]| {
        let target = tempfile::tempdir().unwrap();
        let datadir = target.path().join("data");
        let mut a = args(&[
            "restore",
            "--datadir",
            datadir.to_str().unwrap(),
            "--use-memory",
            "256M",
        ]);
        a.extend(args(extra));
        a.extend(s3_args.clone());
        let started = Instant::now();
        let report = run(&a, &env).await.ok().json();
        (started.elapsed(), report)
    };
    let (plain, _) = restore(&["--from", &format!("{bucket}/backups/full-1")]).await;
    let (to_point, report) = restore(&[
        "--from",
        &format!("{bucket}/backups/"),
        "--binlogs",
        &format!("{bucket}/pitr/"),
        "--until-gtid",
        &marker,
        "--identity",
        identity.to_str().unwrap(),
    ])
    .await;
    // The lag phase's transactions are in the backup: only the load is replayed.
    assert_eq!(
        report["transactionsApplied"].as_u64().unwrap(),
        transactions,
        "{report}"
    );
    println!(
        "\n(2) {transactions} transactions after the backup (written in {:.0} s), then a restore",
        load.as_secs_f64()
    );
    println!(
        "| restore of the backup alone | restore to the point (backup + {} transactions) | ratio | replayed per second |",
        report["transactionsApplied"]
    );
    println!("|---|---|---|---|");
    let replay = to_point.as_secs_f64() - plain.as_secs_f64();
    println!(
        "| {:.1} s | {:.1} s | {:.2} | {:.0} |",
        plain.as_secs_f64(),
        to_point.as_secs_f64(),
        to_point.as_secs_f64() / plain.as_secs_f64(),
        report["transactionsApplied"].as_f64().unwrap() / replay.max(0.001)
    );
}
