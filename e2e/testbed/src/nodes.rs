//! A bed of several kubelet nodes (`e2e/cluster/up.sh --nodes N`): node-a, node-b, ... each in
//! its own network namespace, zone (`zone-a`, `zone-b`, `zone-c`) and pod range, and the faults
//! users meet: a node powered off and on again, a node cut off from the others while it runs on,
//! and (with plain `kubectl drain`) a drain.
//!
//! - [`NodesBed::shared`]: the machine's bed of `N` nodes, started or joined on first use and
//!   shared by the test binaries of one `cargo test` run, like the one-node bed of
//!   [`crate::cluster`] (one bed runs on a machine at a time: a run asks for one kind of bed). Tests
//!   that take nodes down must leave them up again.
//! - [`NodesBed::start`]: a bed of its own in a directory the caller names, for the tests of the
//!   bed itself (its `--stop` is part of what they check).
//!
//! The node controller's timings are Kubernetes' defaults: a node that stops reporting turns
//! `NotReady` after about 50 s (`node-monitor-grace-period`), its pods are evicted 300 s later.
//!
//! Storage classes: `testbed-local` (default) is node-local and `WaitForFirstConsumer`: a claim,
//! once bound, can only be used on its node. `testbed-shared` volumes can be mounted on any node.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use k8s_openapi::api::core::v1::Node;
use kube::Api;

use crate::kube::{KubeTestbed, wait_until};

/// Volumes any node may mount (network storage's behaviour).
pub const SHARED_STORAGE_CLASS: &str = "testbed-shared";

/// The names of the nodes of a bed of `count` nodes, in zone order (node-a in zone-a, ...).
pub fn node_names(count: usize) -> Vec<String> {
    (0..count)
        .map(|i| format!("node-{}", (b'a' + i as u8) as char))
        .collect()
}

/// The zone label of node `index` (0-based) of a bed of several nodes.
pub fn zone_of(index: usize) -> String {
    format!("zone-{}", (b'a' + (index % 3) as u8) as char)
}

/// `program` run in node `node`'s network namespace (`e2e/cluster/node.sh`'s `in_node`): what
/// the node itself reaches, such as its own pods while it is cut off from the others.
pub fn in_node(node: &str, program: impl AsRef<std::ffi::OsStr>) -> tokio::process::Command {
    let mut command = tokio::process::Command::new("nsenter");
    command
        .arg(format!("--net=/run/netns/ebsbed-{node}"))
        .arg(program);
    command
}

/// A running bed of several nodes.
pub struct NodesBed {
    pub dir: PathBuf,
    pub kube: KubeTestbed,
    pub nodes: Vec<String>,
}

/// Held by a test while it takes nodes down or cuts them off: tests of one binary run in
/// parallel, and each expects every node up when it starts.
static FAULTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The shared bed's kubeconfig, once joined.
static SHARED: tokio::sync::OnceCell<Result<(PathBuf, usize), String>> =
    tokio::sync::OnceCell::const_new();

impl NodesBed {
    /// The machine's bed of `nodes` nodes for this `cargo test` run (in [`shared_dir`]), started
    /// or joined on first use; it stops once the run's `cargo` process is gone. A one-node bed
    /// left running by an earlier run whose users are gone is stopped first.
    pub async fn shared(nodes: usize) -> Result<NodesBed> {
        if std::env::var_os("KUBECONFIG").is_some_and(|v| !v.is_empty()) {
            bail!("a bed of {nodes} nodes with faults needs e2e/cluster/up.sh: unset KUBECONFIG");
        }
        let (kubeconfig, count) = SHARED
            .get_or_init(|| async {
                let user = std::os::unix::process::parent_id();
                up(&shared_dir(), nodes, user, true)
                    .await
                    .map(|k| (k, nodes))
                    .map_err(|e| format!("{e:#}"))
            })
            .await
            .as_ref()
            .map_err(|e| anyhow::anyhow!("cannot start the bed of {nodes} nodes: {e}"))?
            .clone();
        if count != nodes {
            bail!("this test run's bed has {count} nodes, not {nodes}");
        }
        Ok(NodesBed {
            dir: shared_dir(),
            kube: KubeTestbed::of_bed(kubeconfig).await?,
            nodes: node_names(nodes),
        })
    }

    /// A bed of `nodes` nodes of its own in `dir`, stopped by [`NodesBed::stop`] or, at the
    /// latest, when this test process ends.
    pub async fn start(dir: &Path, nodes: usize) -> Result<NodesBed> {
        let kubeconfig = up(dir, nodes, std::process::id(), false).await?;
        Ok(NodesBed {
            dir: dir.to_path_buf(),
            kube: KubeTestbed::of_bed(kubeconfig).await?,
            nodes: node_names(nodes),
        })
    }

    /// Stops the shared bed of several nodes if one runs (a test that needs the machine to
    /// itself, such as the tests of the bed, calls it first).
    pub async fn stop_shared() -> Result<()> {
        run(&[OsArg::from("--stop"), shared_dir().into_os_string()]).await?;
        Ok(())
    }

    /// The bed to this test alone until the guard is dropped, with every node up, Ready,
    /// schedulable and not tainted out-of-service (a test that failed before bringing its node
    /// back, uncordoning or untainting it, leaves it so: it is brought back here).
    pub async fn exclusive(&self) -> Result<tokio::sync::MutexGuard<'static, ()>> {
        let guard = FAULTS.lock().await;
        let api: Api<Node> = Api::all(self.kube.client.clone());
        for node in &self.nodes {
            let schedulable = serde_json::json!({"spec": {"unschedulable": null}});
            api.patch(
                node,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&schedulable),
            )
            .await?;
            self.remove_out_of_service_taint(&api, node).await?;
            let state = std::fs::read_to_string(self.dir.join("nodes").join(node).join("state"))
                .unwrap_or_default();
            match state.trim() {
                "down" => self.node_up(node).await?,
                "partitioned" => self.heal(node).await?,
                _ => {}
            }
            self.wait_node(node, true, 180).await?;
        }
        Ok(guard)
    }

    /// Removes the taint `node.kubernetes.io/out-of-service` from `node` when it has it (a
    /// strategic merge patch deleting the taint by its key: the others stay).
    async fn remove_out_of_service_taint(&self, api: &Api<Node>, node: &str) -> Result<()> {
        const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";
        let found = api.get(node).await?;
        let taints = found.spec.and_then(|s| s.taints).unwrap_or_default();
        if !taints.iter().any(|t| t.key == OUT_OF_SERVICE) {
            return Ok(());
        }
        let untaint = serde_json::json!({"spec": {"taints": [
            {"key": OUT_OF_SERVICE, "$patch": "delete"}]}});
        api.patch(
            node,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Strategic(&untaint),
        )
        .await?;
        Ok(())
    }

    /// Waits until node `node` reports Ready `True` (`ready`) or anything else (not ready), for at
    /// most `seconds`; how long that took.
    pub async fn wait_node(
        &self,
        node: &str,
        ready: bool,
        seconds: u64,
    ) -> Result<std::time::Duration> {
        let nodes: Api<Node> = Api::all(self.kube.client.clone());
        let what = if ready { "Ready" } else { "NotReady" };
        let started = std::time::Instant::now();
        wait_until(&nodes, node, what, seconds, move |n| {
            (node_ready(n) == Some("True")) == ready
        })
        .await?;
        Ok(started.elapsed())
    }

    /// Node `node` powered off: its network cut, its kubelet, kube-proxy, containerd and every
    /// container killed at once. Its files and volumes stay.
    pub async fn node_down(&self, node: &str) -> Result<()> {
        self.fault("--node-down", node).await
    }

    /// Node `node` powered on again on the same files; it turns Ready by itself.
    pub async fn node_up(&self, node: &str) -> Result<()> {
        self.fault("--node-up", node).await
    }

    /// Node `node` cut off from the other nodes, the control plane and the host; everything on
    /// it keeps running.
    pub async fn partition(&self, node: &str) -> Result<()> {
        self.fault("--partition", node).await
    }

    /// Node `node`'s network back after [`NodesBed::partition`].
    pub async fn heal(&self, node: &str) -> Result<()> {
        self.fault("--heal", node).await
    }

    /// `up.sh --stop`: every process, mount, namespace, cgroup, route and rule of the bed gone.
    pub async fn stop(&self) -> Result<()> {
        run(&[OsArg::from("--stop"), OsArg::from(self.dir.as_os_str())]).await?;
        Ok(())
    }

    /// The pids of node `node`'s kubelet, kube-proxy and containerd that still run.
    pub fn node_processes(&self, node: &str) -> Vec<u32> {
        ["kubelet", "kube-proxy", "containerd"]
            .iter()
            .filter_map(|part| {
                let file = self
                    .dir
                    .join("nodes")
                    .join(node)
                    .join(format!("{part}.pid"));
                let pid: u32 = std::fs::read_to_string(file).ok()?.trim().parse().ok()?;
                let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
                (!status.contains("State:\tZ")).then_some(pid)
            })
            .collect()
    }

    async fn fault(&self, what: &str, node: &str) -> Result<()> {
        run(&[
            OsArg::from(what),
            OsArg::from(self.dir.as_os_str()),
            OsArg::from(node),
        ])
        .await?;
        Ok(())
    }
}

/// The status of a node's `Ready` condition (`True`, `False`, `Unknown`).
pub fn node_ready(node: &Node) -> Option<&str> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.as_str())
}

/// Where the shared bed of several nodes lives: `BED_DIR` with `-nodes` appended, or
/// `$TMPDIR/etcd-backup-suite-bed-nodes`.
pub fn shared_dir() -> PathBuf {
    let mut dir = crate::cluster::bed_dir().into_os_string();
    dir.push("-nodes");
    PathBuf::from(dir)
}

type OsArg = std::ffi::OsString;

async fn run(args: &[OsArg]) -> Result<String> {
    crate::cluster::run_up_sh(args).await
}

/// Starts (or joins) the bed of `nodes` nodes in `dir` for user `user`; its kubeconfig.
async fn up(dir: &Path, nodes: usize, user: u32, remove_dir: bool) -> Result<PathBuf> {
    let mut args = vec![
        OsArg::from("--nodes"),
        OsArg::from(nodes.to_string()),
        OsArg::from("--watch-pid"),
        OsArg::from(user.to_string()),
    ];
    if remove_dir {
        args.push(OsArg::from("--rm"));
    }
    args.push(dir.as_os_str().to_owned());
    crate::cluster::kubeconfig_printed(&run(&args).await?)
}
