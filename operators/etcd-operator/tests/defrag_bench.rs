//! Benchmark, run by hand (not a timed test): what a client writing throughout sees while a
//! 3-member cluster on the kubelet bed, whose files hold live data and as much free space, is
//! defragmented
//!   (a) by `etcdctl defrag --cluster` run in a member pod, as the CronJobs users run today do
//!       (every member in turn, the leader whenever its turn comes), and
//!   (b) by the operator's scheduled round (one member at a time, followers first, leadership
//!       handed over before the former leader's turn).
//! Same cluster, same data and free space before each, in one run. Reported per method: the
//! longest stretch without a successful write, the writes made (a write every 50 ms when
//! nothing stalls) and their rate, the wall time, the file sizes before and after; then the
//! ratio of the longest stretches (operator / etcdctl). Figures:
//! docs/benchmarks/defragmentation.md.
//!
//!   cargo test -p etcd-operator --test defrag_bench -- --ignored --nocapture
//!
//! BENCH_DEFRAG_LIVE_MIB (default 256) of live data stays; BENCH_DEFRAG_FREE_MIB (default 256) is
//! written, deleted and compacted before each method.

mod common;

use std::time::{Duration, Instant};

use common::*;
use testbed::kube::KubeTestbed;

fn mib(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Sum of the members' file sizes, in MiB.
async fn total_mib(kube: &KubeTestbed, ns: &str) -> f64 {
    let mut total = 0;
    for member in member_pods(kube, ns).await {
        total += db_sizes(kube, ns, &member).await.0;
    }
    total as f64 / (1024.0 * 1024.0)
}

struct Figures {
    longest: Duration,
    writes: u32,
    wall: Duration,
    before_mib: f64,
    after_mib: f64,
}

impl Figures {
    fn print(&self, method: &str) {
        println!(
            "{method}: longest stretch without a write {:.2} s, {} writes ({:.1}/s), {:.1} s, files {:.0} -> {:.0} MiB (3 members)",
            self.longest.as_secs_f64(),
            self.writes,
            f64::from(self.writes) / self.wall.as_secs_f64(),
            self.wall.as_secs_f64(),
            self.before_mib,
            self.after_mib
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run by hand with --ignored --nocapture"]
async fn bench_operator_round_against_etcdctl_defrag_cluster() {
    let (live, free) = (
        mib("BENCH_DEFRAG_LIVE_MIB", 256),
        mib("BENCH_DEFRAG_FREE_MIB", 256),
    );
    let Running {
        kube,
        ns,
        clusters,
        _report,
        _operator,
    } = running_cluster_at("defrag-bench", "3.7.3").await;
    let members = member_pods(&kube, &ns).await;
    let mut client = member_client(&kube, &ns, &members[0]).await;
    write_values(&mut client, "/live/", live * 10).await;

    // (a) etcdctl defrag --cluster, from a member pod.
    fragment(&kube, &ns, &mut client, "/free-a/", free * 10).await;
    let before_mib = total_mib(&kube, &ns).await;
    let writer = Writer::start(&kube, &ns, "during-defrag").await;
    let started = Instant::now();
    // Async: the writer runs on this runtime meanwhile.
    let output = tokio::process::Command::from(testbed::cluster::kubectl(&kube.kubeconfig))
        .args(["--namespace", &ns, "exec", &members[0], "--"])
        .args(["etcdctl", "--command-timeout", "5m", "defrag", "--cluster"])
        .output()
        .await
        .unwrap();
    let wall = started.elapsed();
    let (longest, writes) = writer.stop().await;
    assert!(
        output.status.success(),
        "etcdctl defrag --cluster: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let etcdctl = Figures {
        longest,
        writes,
        wall,
        before_mib,
        after_mib: total_mib(&kube, &ns).await,
    };

    // (b) the operator's round, the same free space made again.
    fragment(&kube, &ns, &mut client, "/free-b/", free * 10).await;
    let before_mib = total_mib(&kube, &ns).await;
    let writer = Writer::start(&kube, &ns, "during-defrag").await;
    let started = Instant::now();
    let round = scheduled_round(&clusters, 600).await;
    let wall = started.elapsed();
    let (longest, writes) = writer.stop().await;
    assert_eq!(round.result, "Succeeded", "{round:?}");
    let operator = Figures {
        longest,
        writes,
        wall,
        before_mib,
        after_mib: total_mib(&kube, &ns).await,
    };

    println!(
        "defragmentation, 3 members of etcd 3.7.3, {live} MiB live and {free} MiB free in each file:"
    );
    etcdctl.print("etcdctl defrag --cluster");
    operator.print("operator round          ");
    println!(
        "longest stretch without a write, operator / etcdctl: {:.2}",
        operator.longest.as_secs_f64() / etcdctl.longest.as_secs_f64()
    );
}
