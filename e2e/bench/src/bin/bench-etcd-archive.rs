//! Benchmark of the continuous archive (`etcd-backup archive`) and of a restore to a point
//! (`etcd-backup point-in-time`), on a real etcd and a real Garage, in one run.
//!
//! etcd is filled first (default 256 MiB, what the archive's first snapshot holds); then a
//! steady load of puts (default 500 a second of 1 KiB values for 60 s), then a burst of large
//! values (default 64 of 1 MiB), is written while the archive runs. It measures:
//! - the lag: for every acknowledged put, the time from its acknowledgement to the archive's
//!   line saying a segment holding its revision is stored (p50, p99, max), for the steady part
//!   and the burst (goal: p99 under `--segment-seconds` + 2 s);
//! - the archiver's CPU-seconds per GiB of changes and its peak RSS (goal: at most 64 MiB);
//! - the S3 requests per minute (Garage's own count, by kind);
//! - the time to write a snapshot file at the newest revision (`point-in-time`: the snapshot
//!   and every change after it replayed) against what a user without the archive does: fetch
//!   the snapshot and restore it with `etcdutl` (which loses every change since), as a ratio.
//!
//! Run it with `e2e/bench-etcd-archive.sh` (builds the release binary first). Not a test:
//! nothing here asserts timings; it prints the figures docs/benchmarks/etcd-archive.md records.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rand::RngCore;
use testbed::{Etcd, Garage};
use tokio::io::AsyncBufReadExt;

struct Args {
    etcd_backup: PathBuf,
    seconds: u64,
    rate: u64,
    value_bytes: usize,
    burst: usize,
    burst_bytes: usize,
    segment_seconds: u64,
    /// MiB written before the archive starts: what its first snapshot holds.
    prefill_mib: u64,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        etcd_backup: PathBuf::from("target/release/etcd-backup"),
        seconds: 60,
        rate: 500,
        value_bytes: 1024,
        burst: 64,
        burst_bytes: 1 << 20,
        segment_seconds: 5,
        prefill_mib: 256,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--etcd-backup" => args.etcd_backup = value()?.into(),
            "--seconds" => args.seconds = value()?.parse()?,
            "--rate" => args.rate = value()?.parse()?,
            "--value-bytes" => args.value_bytes = value()?.parse()?,
            "--burst" => args.burst = value()?.parse()?,
            "--burst-bytes" => args.burst_bytes = value()?.parse()?,
            "--segment-seconds" => args.segment_seconds = value()?.parse()?,
            "--prefill-mib" => args.prefill_mib = value()?.parse()?,
            _ => bail!(
                "usage: bench-etcd-archive [--etcd-backup PATH] [--seconds 60] [--rate 500] [--value-bytes 1024] [--burst 64] [--burst-bytes 1048576] [--segment-seconds 5] [--prefill-mib 256]"
            ),
        }
    }
    if !args.etcd_backup.exists() {
        bail!(
            "{} not found: build it with `cargo build --release -p etcd-backup`",
            args.etcd_backup.display()
        );
    }
    Ok(args)
}

/// Acknowledged puts: (revision, when acknowledged).
type Acks = Vec<(i64, Instant)>;

#[tokio::main]
async fn main() -> Result<()> {
    let args = parse_args()?;
    let garage = Garage::start().await?;
    let etcd = Etcd::start_with(&["--quota-backend-bytes", "8589934592"]).await?;
    let mut client = etcd.client().await?;
    // The key space the archive's first snapshot holds (a restore of it alone restores this).
    etcd.fill_random(args.prefill_mib << 20, 64 * 1024).await?;
    let base = format!("s3://{}/bench/etcd.backup", garage.bucket);
    let mut env = garage.env();
    env.push(("AWS_EC2_METADATA_DISABLED".into(), "true".into()));

    // The archive, its segment lines timed as they come.
    let mut archiver = tokio::process::Command::new(&args.etcd_backup)
        .args(["archive", "--endpoints", &etcd.endpoint, "--to", &base])
        .args(["--segment-seconds", &args.segment_seconds.to_string()])
        .args([
            "--compress",
            "zstd",
            "--output",
            "json",
            "--s3-force-path-style",
        ])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let pid = archiver.id().context("the archiver has no pid")?;
    let mut lines = tokio::io::BufReader::new(archiver.stdout.take().context("no stdout")?).lines();
    let (stored_tx, mut stored_rx) = tokio::sync::mpsc::unbounded_channel::<(i64, Instant)>();
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let mut started = Some(started_tx);
        while let Ok(Some(line)) = lines.next_line().await {
            let Ok(value) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            match value["event"].as_str() {
                Some("started") => {
                    if let Some(started) = started.take() {
                        let _ = started.send(());
                    }
                }
                Some("segment") => {
                    let last = value["lastRevision"].as_i64().unwrap_or(0);
                    let _ = stored_tx.send((last, Instant::now()));
                }
                _ => {}
            }
        }
    });
    tokio::time::timeout(Duration::from_secs(120), started_rx)
        .await
        .context("the archiver did not start")??;
    let requests_before = garage.s3_requests().await?;
    let cpu_before = testbed::procstat::sample(pid);
    // The archive's own memory, sampled while it runs (its peak so far includes the snapshot
    // it took to start from, reported apart).
    let start_peak_kib = cpu_before.peak_rss_kib;
    let (rss_stop, mut rss_stopped) = tokio::sync::watch::channel(false);
    let rss_sampler = tokio::spawn(async move {
        let mut max_kib = 0;
        loop {
            if let Some(sample) = testbed::procstat::try_sample(pid) {
                max_kib = max_kib.max(sample.rss_kib);
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                _ = rss_stopped.changed() => return max_kib,
            }
        }
    });
    let load_started = Instant::now();

    // The steady load, then the burst.
    let mut random = rand::rng();
    let mut value = vec![0u8; args.value_bytes];
    let mut steady: Acks = Vec::new();
    let mut bytes: u64 = 0;
    let mut ticker = tokio::time::interval(Duration::from_micros(1_000_000 / args.rate.max(1)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let puts = args.seconds * args.rate;
    for i in 0..puts {
        ticker.tick().await;
        random.fill_bytes(&mut value);
        let key = format!("/load/{:05}", i % 10_000);
        bytes += (key.len() + value.len()) as u64;
        let answer = client.put(key, value.clone(), None).await?;
        steady.push((answer.header().map_or(0, |h| h.revision()), Instant::now()));
    }
    let steady_seconds = load_started.elapsed().as_secs_f64();
    let mut burst: Acks = Vec::new();
    let mut large = vec![0u8; args.burst_bytes];
    for i in 0..args.burst {
        random.fill_bytes(&mut large);
        let key = format!("/burst/{i:03}");
        bytes += (key.len() + large.len()) as u64;
        let answer = client.put(key, large.clone(), None).await?;
        burst.push((answer.header().map_or(0, |h| h.revision()), Instant::now()));
    }
    let last = burst.last().or(steady.last()).map_or(0, |a| a.0);

    // Until a segment holds the last revision.
    let mut stored: Vec<(i64, Instant)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    while stored.last().is_none_or(|s| s.0 < last) {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stored_rx.recv()).await {
            Ok(Some(segment)) => stored.push(segment),
            _ => bail!("the archive did not reach revision {last} within 5 minutes"),
        }
    }
    let elapsed_minutes = load_started.elapsed().as_secs_f64() / 60.0;
    let cpu_after = testbed::procstat::sample(pid);
    let _ = rss_stop.send(true);
    let archiving_peak_kib = rss_sampler.await?;
    let requests_after = garage.s3_requests().await?;
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let _ = archiver.wait().await;

    let gib = bytes as f64 / (1u64 << 30) as f64;
    let cpu = cpu_after.cpu_seconds - cpu_before.cpu_seconds;
    println!(
        "load: {puts} puts of {} B in {steady_seconds:.1} s ({:.0}/s), then {} puts of {} B; {:.3} GiB of changes, revisions up to {last}",
        args.value_bytes,
        puts as f64 / steady_seconds,
        args.burst,
        args.burst_bytes,
        gib
    );
    println!(
        "segments stored: {} (every {} s at most)",
        stored.len(),
        args.segment_seconds
    );
    for (what, acks) in [("steady", &steady), ("burst", &burst)] {
        let lags = lags(acks, &stored);
        println!(
            "lag from acknowledgement to segment stored, {what}: p50 {:.2} s, p99 {:.2} s, max {:.2} s (goal: p99 under {} s)",
            percentile(&lags, 0.50),
            percentile(&lags, 0.99),
            percentile(&lags, 1.0),
            args.segment_seconds + 2
        );
    }
    println!(
        "archiver: {cpu:.2} CPU-seconds, {:.2} CPU-seconds per GiB of changes ({:.0} per million changes), peak RSS while archiving {:.1} MiB (goal: at most 64 MiB); peak while taking the snapshot it started from ({} MiB of etcd): {:.1} MiB",
        cpu / gib,
        cpu / ((puts as usize + args.burst) as f64 / 1e6),
        archiving_peak_kib as f64 / 1024.0,
        args.prefill_mib,
        start_peak_kib as f64 / 1024.0
    );
    let mut total = 0;
    let mut kinds = Vec::new();
    for (kind, after) in &requests_after {
        let count = after - requests_before.get(kind).copied().unwrap_or(0);
        if count > 0 {
            total += count;
            kinds.push(format!("{kind} {count}"));
        }
    }
    println!(
        "S3 requests: {total} in {elapsed_minutes:.1} min, {:.1} per minute ({})",
        total as f64 / elapsed_minutes,
        kinds.join(", ")
    );

    point_in_time_against_plain_restore(&args, &base, &env, last, &garage).await?;
    Ok(())
}

/// For each acknowledged put, seconds until the first segment holding its revision was stored.
fn lags(acks: &Acks, stored: &[(i64, Instant)]) -> Vec<f64> {
    let mut lags: Vec<f64> = acks
        .iter()
        .filter_map(|(revision, acknowledged)| {
            let (_, at) = stored.iter().find(|(last, _)| last >= revision)?;
            Some(at.saturating_duration_since(*acknowledged).as_secs_f64())
        })
        .collect();
    lags.sort_by(f64::total_cmp);
    lags
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let index = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[index]
}

/// `point-in-time` at `last` against fetching the newest snapshot and restoring it alone.
async fn point_in_time_against_plain_restore(
    args: &Args,
    base: &str,
    env: &[(String, String)],
    last: i64,
    garage: &Garage,
) -> Result<()> {
    let scratch = tempfile::tempdir()?;
    let bin = testbed::etcd_tool("etcd");
    let bin_dir = bin.parent().context("no etcd dir")?.display().to_string();
    let out = scratch.path().join("at.db");
    let started = Instant::now();
    let report = tokio::process::Command::new(&args.etcd_backup)
        .args(["point-in-time", base, "--revision", &last.to_string()])
        .arg("--out")
        .arg(&out)
        .args([
            "--etcd-bin-dir",
            &bin_dir,
            "--output",
            "json",
            "--s3-force-path-style",
        ])
        .arg("--scratch-dir")
        .arg(scratch.path())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .await?;
    let point_seconds = started.elapsed().as_secs_f64();
    if !report.status.success() {
        bail!(
            "point-in-time failed: {}",
            String::from_utf8_lossy(&report.stderr)
        );
    }
    let report: serde_json::Value = serde_json::from_slice(&report.stdout)?;
    let snapshot = report["snapshot"]
        .as_str()
        .context("no snapshot in the report")?;
    let _ = std::fs::remove_file(&out);

    // What a user without the archive does: the snapshot alone, fetched and restored.
    let plain = scratch.path().join("snapshot.db");
    let started = Instant::now();
    let fetched = tokio::process::Command::new(&args.etcd_backup)
        .args(["fetch", &format!("s3://{}/{snapshot}", garage.bucket)])
        .arg("--out")
        .arg(&plain)
        .arg("--s3-force-path-style")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .await?;
    if !fetched.status.success() {
        bail!("fetch failed: {}", String::from_utf8_lossy(&fetched.stderr));
    }
    let peer = format!("http://127.0.0.1:{}", testbed::free_port());
    testbed::snapshot_restore(&plain, &scratch.path().join("restored"), "r", &peer)?;
    let plain_seconds = started.elapsed().as_secs_f64();
    println!(
        "restore to the newest revision: point-in-time {point_seconds:.1} s (snapshot at revision {} and {} revisions, {} changes replayed) against the snapshot alone fetched and restored {plain_seconds:.1} s (which loses those changes): ratio {:.1}",
        report["snapshotRevision"],
        report["revisionsApplied"],
        report["eventsApplied"],
        point_seconds / plain_seconds
    );
    Ok(())
}
