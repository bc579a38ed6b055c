//! Benchmark of a disaster restore on the kubelet bed, in one run, on the same images, storage
//! class and S3 server (Garage on the bridge):
//!
//! 1. by hand, one member: a pod that fetches the snapshot with the `etcd-backup` image and
//!    runs `etcdutl snapshot restore` on a claim (what a user otherwise does per member), from
//!    `create` to the pod's success;
//! 2. the EtcdRestore: `members` (3) restored from the same snapshot into a new cluster (the
//!    EtcdCluster and EtcdRestore operators running here), from `create` to `succeeded` (every
//!    member fetching, verifying and restoring in parallel, started, healthy at the bumped
//!    revision); as a ratio to 1;
//! 3. memory: `etcd-backup fetch` peak RSS for the large and a small snapshot (flat with size).
//!
//! `scratch` (`Disk`, the default, or `Memory`) is where both keep the fetched snapshot: the
//! EtcdRestore's `scratchMedium`, and the medium of the by-hand pod's emptyDir. `members`
//! (default 3) is the restored cluster's size: with 1, the ratio is the restore's own cost
//! beyond one member's fetch and restore (start, health, hand-over), what 3 members on 3 nodes
//! would add to by hand, which this one-node bed cannot run side by side.
//!
//! `version` (default 3.7.3) is the etcd of the by-hand pod and of the restored cluster. The
//! snapshot is taken from the loopback etcd the tests run (`ETCD_TESTBED_VERSION`, the newest
//! line by default), which must not be newer than `version`: the restore refuses a snapshot of
//! a newer minor.
//!
//! ```sh
//! cargo build --release -p etcd-backup -p etcd-operator -p etcd-restore-operator
//! cargo run --release -p etcd-restore-operator --example restore_bench -- \
//!     [size-mib] [small-mib] [scratch] [members] [version] [nodes]
//! ETCD_TESTBED_VERSION=v3.5.33 cargo run --release -p etcd-restore-operator \
//!     --example restore_bench -- 1024 100 Disk 3 3.5.33
//! # each member on a node of its own (the bed of three nodes), by hand also one pod per node
//! cargo run --release -p etcd-restore-operator --example restore_bench -- 1024 100 Disk 3 3.7.3 3
//! ```
//!
//! `nodes` (default 1, the one-node bed): with more, the bed of that many nodes (node-local
//! volumes); the by-hand restore then also runs once per member at the same time, each pod on a
//! node of its own, the fair comparison for a restore whose members are spread one per node.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use etcd_api::EtcdRestore;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use testbed::cluster::host_address;
use testbed::kube::{KubeTestbed, wait_until};
use testbed::nodes::NodesBed;
use testbed::{Etcd, Garage, procstat};

fn release(binary: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/release")
        .join(binary);
    assert!(
        path.exists(),
        "{} missing: cargo build --release -p {binary}",
        path.display()
    );
    path
}

/// A process killed on drop.
struct Process(Child);

impl Process {
    /// Starts an operator with `extra` flags after the common ones.
    fn start(binary: &Path, kubeconfig: &Path, ns: &str, extra: &[&str]) -> Process {
        // Its logs, for when it fails: $TMPDIR/restore_bench-<binary>.log.
        let name = binary.file_name().unwrap().to_string_lossy();
        let log =
            std::fs::File::create(std::env::temp_dir().join(format!("restore_bench-{name}.log")))
                .expect("the operator's log file");
        let child = Command::new(binary)
            .args(["--namespace", ns, "--listen", "127.0.0.1:0"])
            .args(extra)
            .env("KUBECONFIG", kubeconfig)
            .stdin(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start an operator");
        Process(child)
    }
}

impl Process {
    /// Waits until the process has ended (an operator should not): how it ended.
    async fn exited(&self) -> String {
        let pid = self.0.id();
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            // Still running or a zombie (not reaped: `Child` is not polled here).
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = state
                .rsplit(')')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .next();
            if state.is_none_or(|s| s == "Z") {
                return format!(
                    "process {pid} exited: its log is in $TMPDIR/restore_bench-<binary>.log"
                );
            }
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `etcd-backup` with Garage's endpoint flags and keys.
fn etcd_backup(garage: &Garage) -> Command {
    let mut command = Command::new(release("etcd-backup"));
    command
        .args([
            "--s3-endpoint",
            &garage.endpoint,
            "--s3-region",
            &garage.region,
        ])
        .arg("--s3-force-path-style")
        .envs(garage.env())
        .stdout(Stdio::null());
    command
}

/// A snapshot of `mib` MiB of random values, saved to `key`; returns the database size.
async fn snapshot(garage: &Garage, mib: u64, key: &str) -> u64 {
    let etcd = Etcd::start().await.unwrap();
    etcd.fill_random(mib << 20, 256 << 10).await.unwrap();
    let url = format!("s3://{}/{key}", garage.bucket);
    let status = etcd_backup(garage)
        .args(["save", "--endpoints", &etcd.endpoint, "--to", &url])
        .status()
        .unwrap();
    assert!(status.success(), "etcd-backup save");
    let out = etcd
        .etcdctl()
        .args(["endpoint", "status", "-w", "json"])
        .output()
        .await
        .unwrap();
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    status[0]["Status"]["dbSize"].as_u64().unwrap()
}

/// Peak RSS (MiB) and seconds of `etcd-backup fetch` of `key` into a scratch file.
fn fetch_memory(garage: &Garage, key: &str) -> (f64, f64) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("snapshot.db");
    let url = format!("s3://{}/{key}", garage.bucket);
    let mut child = etcd_backup(garage)
        .args(["fetch", &url, "--out"])
        .arg(&out)
        .spawn()
        .unwrap();
    let pid = child.id();
    let started = Instant::now();
    let mut peak = 0;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "etcd-backup fetch");
            break;
        }
        if let Some(sample) = procstat::try_sample(pid) {
            peak = peak.max(sample.peak_rss_kib);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    (peak as f64 / 1024.0, started.elapsed().as_secs_f64())
}

/// What the whole machine has done so far, whichever process did it: the difference of two
/// readings is what a measured section cost, and says whether it waited for CPU or for disk.
#[derive(Clone, Copy, Debug)]
struct Machine {
    /// CPU seconds busy (user + nice + system + irq + softirq, `/proc/stat`).
    busy: f64,
    /// Of `busy`, the pods' (the kubelet's `kubepods` cgroup: fetch, restore tool, etcd).
    pods: f64,
    /// Seconds the CPUs were idle with disk reads or writes outstanding.
    iowait: f64,
    /// Bytes written to the block devices (`/proc/diskstats`).
    written: f64,
}

impl Machine {
    fn now() -> Machine {
        let stat = std::fs::read_to_string("/proc/stat").unwrap();
        let cpu: Vec<f64> = stat
            .lines()
            .next()
            .unwrap()
            .split_whitespace()
            .skip(1)
            .map(|f| f.parse().unwrap())
            .collect();
        // user nice system idle iowait irq softirq steal, in USER_HZ (100 per second)
        let busy = (cpu[0] + cpu[1] + cpu[2] + cpu[5] + cpu[6]) / 100.0;
        let pods = pods_cpu_seconds();
        // Whole disks only (partitions would count twice): the ones /sys/block lists, without
        // loop and RAM devices. Field 10 is sectors written, of 512 bytes.
        let disks = std::fs::read_to_string("/proc/diskstats").unwrap();
        let written = disks
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .filter(|f| {
                !f[2].starts_with("loop")
                    && !f[2].starts_with("ram")
                    && Path::new("/sys/block").join(f[2]).exists()
            })
            .map(|f| f[9].parse::<f64>().unwrap() * 512.0)
            .sum();
        Machine {
            busy,
            pods,
            iowait: cpu[4] / 100.0,
            written,
        }
    }

    fn since(self, before: Machine) -> Machine {
        Machine {
            busy: self.busy - before.busy,
            pods: self.pods - before.pods,
            iowait: self.iowait - before.iowait,
            written: self.written - before.written,
        }
    }

    /// "CPU-s (of them pods), iowait s, GB written".
    fn describe(&self) -> String {
        format!(
            "{:.1} CPU-s ({:.1} in pods), {:.1} s iowait, {:.2} GB written",
            self.busy,
            self.pods,
            self.iowait,
            self.written / 1e9
        )
    }
}

/// The by-hand restore of one member: a claim and a pod that fetches the snapshot with the
/// `etcd-backup` image and runs `etcdutl snapshot restore` onto the claim.
struct ByHand {
    client: kube::Client,
    ns: String,
    url: String,
    endpoint: String,
    version: String,
    scratch_dir: serde_json::Value,
    storage: String,
}

impl ByHand {
    /// Creates claim and pod `name` (on `node` if given: node-local claims bind where the pod
    /// is scheduled) and waits for the pod's success.
    async fn run(&self, name: &str, node: Option<&str>) {
        let claim: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": self.storage}}},
        }))
        .unwrap();
        let mut pod = json!({
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": "Never",
                "initContainers": [{"name": "fetch", "image": "localhost/etcd-backup:dev",
                    "args": ["--s3-endpoint", self.endpoint, "--s3-force-path-style", "fetch", self.url, "--out", "/snapshot/snapshot.db"],
                    "env": [{"name": "AWS_SHARED_CREDENTIALS_FILE", "value": "/aws/credentials"},
                            {"name": "AWS_CONFIG_FILE", "value": "/aws/config"}],
                    "volumeMounts": [{"name": "snapshot", "mountPath": "/snapshot"},
                                     {"name": "aws", "mountPath": "/aws"}]}],
                "containers": [{"name": "restore", "image": format!("localhost/etcd:v{}", self.version),
                    "command": ["/usr/local/bin/etcdutl", "snapshot", "restore", "/snapshot/snapshot.db",
                                "--data-dir", "/var/etcd/data"],
                    "volumeMounts": [{"name": "snapshot", "mountPath": "/snapshot"},
                                     {"name": "data", "mountPath": "/var/etcd"}]}],
                "volumes": [{"name": "snapshot", "emptyDir": self.scratch_dir},
                            {"name": "aws", "secret": {"secretName": "aws"}},
                            {"name": "data", "persistentVolumeClaim": {"claimName": name}}],
            }
        });
        if let Some(node) = node {
            pod["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": node});
        }
        // The namespace enforces Pod Security "restricted", as for the operator's pods.
        testbed::cluster::restricted(&mut pod["spec"]);
        let pod: Pod = serde_json::from_value(pod).unwrap();
        Api::<PersistentVolumeClaim>::namespaced(self.client.clone(), &self.ns)
            .create(&PostParams::default(), &claim)
            .await
            .unwrap();
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        pods.create(&PostParams::default(), &pod).await.unwrap();
        let done =
            |p: &Pod| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded");
        wait_until(&pods, name, "the by-hand restore", 1800, done)
            .await
            .unwrap();
    }
}

/// CPU-seconds of the kubelets' pods: the one-node bed's `kubepods` cgroup, or on a bed of
/// several nodes the sum of each node's cgroup root (`/ebsbed-<node>`, which holds its pods).
fn pods_cpu_seconds() -> f64 {
    let root = Path::new("/sys/fs/cgroup/cpuacct");
    let read = |dir: &Path| {
        std::fs::read_to_string(dir.join("cpuacct.usage"))
            .ok()
            .and_then(|ns| ns.trim().parse::<f64>().ok())
    };
    if let Some(ns) = read(&root.join("kubepods")) {
        return ns / 1e9;
    }
    let nodes: Vec<f64> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("ebsbed-"))
        .filter_map(|e| read(&e.path()))
        .collect();
    if nodes.is_empty() {
        f64::NAN
    } else {
        nodes.iter().sum::<f64>() / 1e9
    }
}

/// Writes every dirty page out (sync(1)), so that a section's disk writes are its own.
fn sync() {
    assert!(Command::new("sync").status().unwrap().success(), "sync");
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let size_mib: u64 = args.next().map_or(1024, |a| a.parse().unwrap());
    let small_mib: u64 = args.next().map_or(100, |a| a.parse().unwrap());
    let scratch = args.next().unwrap_or_else(|| "Disk".into());
    let scratch_dir = match scratch.as_str() {
        "Disk" => json!({}),
        "Memory" => json!({"medium": "Memory"}),
        other => panic!("scratch is Disk or Memory, not {other}"),
    };
    let members: i32 = args.next().map_or(3, |a| a.parse().unwrap());
    let version = args.next().unwrap_or_else(|| "3.7.3".into());
    let (etcd_operator, restore_operator) =
        (release("etcd-operator"), release("etcd-restore-operator"));
    let node_count: usize = args.next().map_or(1, |a| a.parse().unwrap());
    // One node: the one-node bed; more: the bed of several nodes (node-local volumes, members
    // spread one per node by the operator's defaults), each by-hand pod on a node of its own.
    let (kube, nodes) = if node_count > 1 {
        assert!(
            members as usize <= node_count,
            "at most one member per node"
        );
        let bed = NodesBed::shared(node_count)
            .await
            .expect("the bed of nodes");
        (bed.kube, bed.nodes)
    } else {
        let kube = KubeTestbed::with_kubelet().await.expect("the kubelet bed");
        (kube, vec![])
    };
    kube.install_crds().await.expect("CRDs");
    let garage = Garage::start_on(&host_address()).await.unwrap();
    eprintln!("filling etcd with {size_mib} MiB and {small_mib} MiB, saving both to S3 ...");
    let db = snapshot(&garage, size_mib, "bench/etcd.backup").await;
    let small_db = snapshot(&garage, small_mib, "bench/small.backup").await;
    let (rss, fetch_secs) = fetch_memory(&garage, "bench/etcd.backup");
    let (small_rss, _) = fetch_memory(&garage, "bench/small.backup");

    let ns = kube.namespace("bench-restore").await.unwrap();
    let secret: Secret = serde_json::from_value(garage.aws_secret("aws")).unwrap();
    Api::<Secret>::namespaced(kube.client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let storage = format!("{}Mi", size_mib * 3);

    // 1. By hand: one member's data from the snapshot, in a pod on a claim; with several nodes,
    //    then one such pod per member at once, each on a node of its own (what a user restoring
    //    every member by hand would run).
    eprintln!("restoring one member by hand ...");
    let by_hand_pod = ByHand {
        client: kube.client.clone(),
        ns: ns.clone(),
        url: format!("s3://{}/bench/etcd.backup", garage.bucket),
        endpoint: garage.endpoint.clone(),
        version: version.clone(),
        scratch_dir,
        storage: storage.clone(),
    };
    // Written data still in the page cache would be charged to the next section.
    sync();
    let started = Instant::now();
    let machine_before = Machine::now();
    by_hand_pod.run("by-hand", None).await;
    let by_hand_secs = started.elapsed().as_secs_f64();
    // The pod is done, but what it wrote may still be in the page cache: count its writeback.
    sync();
    let by_hand = Machine::now().since(machine_before);
    let per_node = if nodes.len() > 1 {
        eprintln!("restoring {members} members by hand, one per node, at once ...");
        sync();
        let started = Instant::now();
        let machine_before = Machine::now();
        let pods = nodes
            .iter()
            .take(members as usize)
            .enumerate()
            .map(|(i, node)| {
                let by_hand_pod = &by_hand_pod;
                async move { by_hand_pod.run(&format!("by-hand-{i}"), Some(node)).await }
            });
        futures::future::join_all(pods).await;
        let secs = started.elapsed().as_secs_f64();
        sync();
        Some((secs, Machine::now().since(machine_before)))
    } else {
        None
    };

    // 2. The EtcdRestore: `members` members into a new cluster.
    eprintln!("restoring {members} members with an EtcdRestore ...");
    let cluster_operator = Process::start(&etcd_operator, &kube.kubeconfig, &ns, &[]);
    let operator = Process::start(
        &restore_operator,
        &kube.kubeconfig,
        &ns,
        &["--backup-image", "localhost/etcd-backup:dev"],
    );
    let restore: EtcdRestore = serde_json::from_value(json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdRestore",
        "metadata": {"name": "restored"},
        "spec": {"etcdCluster": {"name": "restored"}, "backupStorageType": "S3",
            "s3": {"path": format!("{}/bench/etcd.backup", garage.bucket), "awsSecret": "aws",
                   "endpoint": garage.endpoint, "forcePathStyle": true},
            "newCluster": {"size": members, "version": version, "repository": "localhost/etcd", "storage": storage},
            "scratchMedium": scratch},
    }))
    .unwrap();
    let restores: Api<EtcdRestore> = Api::namespaced(kube.client.clone(), &ns);
    sync();
    let started = Instant::now();
    let machine_before = Machine::now();
    restores
        .create(&PostParams::default(), &restore)
        .await
        .unwrap();
    // When each phase is first seen, polled: where the time goes.
    let phases = {
        let restores = restores.clone();
        tokio::spawn(async move {
            let mut seen: Vec<(String, f64, Machine)> = Vec::new();
            loop {
                let phase = restores
                    .get_status("restored")
                    .await
                    .ok()
                    .and_then(|r| r.status?.phase)
                    .map(|p| format!("{p:?}"));
                if let Some(phase) = phase
                    && seen.last().is_none_or(|(last, _, _)| *last != phase)
                {
                    let done = phase == "Succeeded" || phase == "Failed";
                    seen.push((phase, started.elapsed().as_secs_f64(), Machine::now()));
                    if done {
                        return seen;
                    }
                }
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        })
    };
    let finished = |r: &EtcdRestore| {
        r.status
            .as_ref()
            .is_some_and(|s| s.phase.is_some_and(|p| p.is_terminal()))
    };
    let done = tokio::select! {
        done = wait_until(&restores, "restored", "the restore", 1800, finished) => done.unwrap(),
        exited = cluster_operator.exited() => panic!("the EtcdCluster operator ended: {exited}"),
        exited = operator.exited() => panic!("the EtcdRestore operator ended: {exited}"),
    };
    let restore_secs = started.elapsed().as_secs_f64();
    let restore = Machine::now().since(machine_before);
    let phases = phases.await.unwrap();
    let status = done.status.unwrap();
    assert!(status.succeeded, "{status:?}");
    let usage = procstat::sample(operator.0.id());
    // Where the members ran: on a bed of several nodes, each on a node of its own.
    let member_nodes: Vec<String> = Api::<Pod>::namespaced(kube.client.clone(), &ns)
        .list(&kube::api::ListParams::default().labels("etcd_cluster=restored"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.spec?.node_name)
        .collect();
    kube.delete_namespace(&ns).await.unwrap();

    println!(
        "\ndatabase: {:.0} MB (small: {:.0} MB)",
        db as f64 / 1e6,
        small_db as f64 / 1e6
    );
    println!(
        "etcd {version}; scratch volume of the fetched snapshot: {scratch}; members restored: {members}"
    );
    println!(
        "nodes: {}; the members ran on: {}",
        nodes.len().max(1),
        member_nodes.join(", ")
    );
    println!("| measure | value |\n|---|---|");
    println!("| by hand, one member: fetch + etcdutl restore in a pod | {by_hand_secs:.1} s |");
    println!(
        "| EtcdRestore, {members} members: create -> succeeded (healthy) | {restore_secs:.1} s |"
    );
    println!(
        "| ratio EtcdRestore / by hand | {:.2} |",
        restore_secs / by_hand_secs
    );
    println!(
        "| machine CPU-seconds: by hand, EtcdRestore (ratio) | {:.1}, {:.1} ({:.2}) |",
        by_hand.busy,
        restore.busy,
        restore.busy / by_hand.busy
    );
    if let Some((secs, machine)) = &per_node {
        println!(
            "| by hand, {members} members at once, one per node | {secs:.1} s, {} |",
            machine.describe()
        );
        println!(
            "| ratio EtcdRestore / {members} by hand at once | {:.2} |",
            restore_secs / secs
        );
        println!(
            "| machine CPU-seconds per member: by hand at once, EtcdRestore | {:.1}, {:.1} |",
            machine.busy / f64::from(members),
            restore.busy / f64::from(members)
        );
    }
    println!("| machine, by hand | {} |", by_hand.describe());
    println!("| machine, EtcdRestore | {} |", restore.describe());
    let mut from = (0.0, machine_before);
    for (phase, at, machine) in &phases {
        println!(
            "| EtcdRestore, {:.1} to {at:.1} s (until {phase} is first seen) | {} |",
            from.0,
            machine.since(from.1).describe()
        );
        from = (*at, *machine);
    }
    println!(
        "| restore operator: CPU, peak RSS | {:.2} s, {:.1} MiB |",
        usage.cpu_seconds,
        usage.peak_rss_kib as f64 / 1024.0
    );
    println!(
        "| etcd-backup fetch on the host, large snapshot: time, peak RSS | {fetch_secs:.1} s, {rss:.1} MiB |"
    );
    println!("| etcd-backup fetch, small snapshot: peak RSS | {small_rss:.1} MiB |");
}
