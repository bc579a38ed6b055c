//! Scale benchmark of the scheduling core: N scheduled EtcdBackups (default 1,000) driven the
//! way the controller drives them (one timer queue, as kube-runtime's requeue scheduler, plus
//! `schedule::due`, the per-object guard and the global slot limit), with the backup itself
//! replaced by a short sleep. No API server, etcd or S3.
//!
//! `cargo run --release -p etcd-backup-operator --example scale -- [objects] [seconds] [min-interval]`
//!
//! Intervals are `min-interval` to `min-interval + 59` seconds (default 20); every tenth object
//! uses the cron schedule `* * * * *` instead. A large `min-interval` (e.g. 3600) measures the
//! idle state after the first burst of runs.
//!
//! Prints the lateness of due runs (p50/p99/max), RSS, and CPU use over the whole run and over
//! an idle window.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use etcd_api::BackupSchedule;
use etcd_backup_operator::in_flight::Runs;
use etcd_backup_operator::schedule::{Due, History, Trigger, due};
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::time::DelayQueue;

struct Object {
    trigger: Trigger,
    created: DateTime<Utc>,
    last_run: Option<DateTime<Utc>>,
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let objects: usize = args.next().map(|a| a.parse().unwrap()).unwrap_or(1000);
    let seconds: u64 = args.next().map(|a| a.parse().unwrap()).unwrap_or(120);
    let min_interval: u64 = args.next().map(|a| a.parse().unwrap()).unwrap_or(20);
    let start = Utc::now();
    let mut state: Vec<Object> = (0..objects)
        .map(|i| Object {
            // Mixed: interval schedules, and every tenth object on a one-minute cron.
            trigger: if i % 10 == 0 {
                Trigger::parse(BackupSchedule::Cron("* * * * *")).unwrap()
            } else {
                Trigger::Interval(Duration::from_secs(min_interval + (i as u64 * 7919) % 60))
            },
            created: start,
            last_run: None,
        })
        .collect();
    let runs = Runs::new(4, CancellationToken::new());
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<usize>();
    let mut queue: DelayQueue<usize> = DelayQueue::new();
    let mut lateness_ms: Vec<f64> = Vec::new();
    let mut due_at: Vec<Option<DateTime<Utc>>> = vec![None; objects];
    for i in 0..objects {
        queue.insert(i, Duration::ZERO);
    }
    let began = Instant::now();
    let cpu_start = cpu_seconds();
    let end = tokio::time::Instant::now() + Duration::from_secs(seconds);
    let probe_at = end - Duration::from_secs(10.min(seconds));
    let mut idle_probe: Option<(Instant, f64)> = None;
    let mut peak_rss = 0;
    loop {
        tokio::select! {
            Some(expired) = queue.next() => {
                let i = expired.into_inner();
                let now = Utc::now();
                let o = &state[i];
                let history = History { last_run: o.last_run, ..Default::default() };
                match due(&o.trigger, history, o.created, now) {
                    Due::Now => {
                        if let Some(expected) = due_at[i].take() {
                            lateness_ms.push((now - expected).num_microseconds().unwrap_or(0) as f64 / 1000.0);
                        }
                        let Some(guard) = runs.try_start(&i.to_string()) else { continue };
                        state[i].last_run = Some(now);
                        let runs = runs.clone();
                        let done = done_tx.clone();
                        tokio::spawn(async move {
                            let _slot = runs.slot().await;
                            tokio::time::sleep(Duration::from_millis(20)).await; // the "backup"
                            drop(guard);
                            let _ = done.send(i);
                        });
                    }
                    Due::At(at) => {
                        due_at[i] = Some(at);
                        queue.insert(i, (at - now).to_std().unwrap_or_default());
                    }
                    Due::Never => {}
                }
            }
            Some(i) = done_rx.recv() => {
                // The finished run's status write triggers a reconcile, which requeues.
                queue.insert(i, Duration::ZERO);
            }
            // Measurement window: the last 10 s, long after the first burst.
            () = tokio::time::sleep_until(probe_at), if idle_probe.is_none() => {
                idle_probe = Some((Instant::now(), cpu_seconds()));
            }
            () = tokio::time::sleep_until(end) => break,
        }
        peak_rss = peak_rss.max(rss_kib());
    }
    let total_cpu = (cpu_seconds() - cpu_start) / began.elapsed().as_secs_f64() * 100.0;
    let idle_cpu = idle_probe.map(|(t, c)| (cpu_seconds() - c) / t.elapsed().as_secs_f64() * 100.0);
    lateness_ms.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| {
        lateness_ms
            .get(((lateness_ms.len() as f64 - 1.0) * p) as usize)
            .copied()
            .unwrap_or(0.0)
    };
    println!(
        "objects: {objects}, run: {seconds} s, scheduled runs measured: {}",
        lateness_ms.len()
    );
    println!(
        "lateness of due runs: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        pct(0.5),
        pct(0.99),
        lateness_ms.last().copied().unwrap_or(0.0)
    );
    println!("RSS: now {} KiB, peak {} KiB", rss_kib(), peak_rss);
    println!(
        "CPU: {:.2} % over the run, {:.2} % over the last 10 s",
        total_cpu,
        idle_cpu.unwrap_or(f64::NAN)
    );
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// User + system CPU seconds of this process.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, r)| r.split_whitespace().collect())
        .unwrap_or_default();
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<f64>().ok())
        .sum();
    ticks / 100.0
}
