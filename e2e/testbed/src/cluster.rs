//! The kubelet bed: a single-node Kubernetes (1.37, or `KUBE_VERSION=1.35`) whose kubelet runs pods
//! (`e2e/cluster/up.sh`), shared by every test of one `cargo test` (or `cargo nextest`) run.
//!
//! - [`KubeTestbed::with_kubelet`](crate::kube::KubeTestbed::with_kubelet) returns a client for
//!   it: `KUBECONFIG`'s cluster when that is set (it needs the `localhost/*` images and a
//!   default StorageClass, see docs/development/tests.md), otherwise the machine's bed in [`bed_dir`], started
//!   on first use. The bed registers the `cargo` process that runs the tests (this process's
//!   parent) as a user and stops once every user is gone, so the test binaries of one run share
//!   one bed and nothing outlives the run.
//! - Pods reach the host on [`host_address`] ([`GATEWAY`] on the bed): start Garage with
//!   [`Garage::start_on(&host_address())`](crate::Garage::start_on) for backups made inside the
//!   cluster.
//! - Images are `localhost/<binary>:dev` for every project binary the test run built (the
//!   directory of the running test executable, i.e. `target/debug`), `localhost/etcd:v<version>`
//!   for each etcd line in `e2e/cluster/versions.sh` and v3.4.23, `localhost/pause:3.2`.
//! - [`FailureReport`] prints a namespace's events and pod logs when a test panics.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::kube::KubeTestbed;

/// The bridge address: the API server, cluster DNS and host services pods may reach.
pub const GATEWAY: &str = "10.88.0.1";
/// The address pods reach this machine on: `BED_HOST_ADDRESS` when set (for a cluster named by
/// `KUBECONFIG`, e.g. kind's Docker bridge gateway), else [`GATEWAY`]. Servers the tests start for
/// pods (Garage) listen there.
pub fn host_address() -> String {
    std::env::var("BED_HOST_ADDRESS")
        .ok()
        .filter(|a| !a.is_empty())
        .unwrap_or_else(|| GATEWAY.to_string())
}

/// The default StorageClass (directory-backed volumes under the bed's directory).
pub const STORAGE_CLASS: &str = "testbed-local";
/// The script, shared with CI, the demo and developers.
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../cluster/up.sh");

/// Where the tests' bed lives: `BED_DIR`, or `$TMPDIR/etcd-backup-suite-bed`.
pub fn bed_dir() -> PathBuf {
    std::env::var_os("BED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("etcd-backup-suite-bed"))
}

/// The bed's `ctr` (containerd's client), which build.sh builds beside containerd: a fresh
/// machine has no other on its PATH.
pub fn ctr_binary() -> PathBuf {
    crate::kube::versions_path("containerd_bin").join("ctr")
}

/// The build output the test executable belongs to (`target/debug`): the images are made from
/// the binaries there.
fn binaries_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    // target/debug/deps/<test>-<hash>, target/release/examples/<bench>, or a binary such as the
    // demo in target/release itself.
    let mut dir = exe.parent().context("an executable in a directory")?;
    if dir.ends_with("deps") || dir.ends_with("examples") {
        dir = dir
            .parent()
            .context("test executable outside a cargo target dir")?;
    }
    Ok(dir.to_path_buf())
}

/// Starts (or joins) the bed for this test run; returns its kubeconfig.
pub(crate) async fn start() -> Result<PathBuf> {
    let user = bed_user();
    let mut args = vec![OsString::from("--watch-pid"), user.into(), "--rm".into()];
    args.push(bed_dir().into_os_string());
    kubeconfig_printed(&run_up_sh(&args).await?)
}

/// The process whose life the bed follows (it is stopped once that process is gone):
/// `BED_USER_PID` when set (a test that runs a binary of its own, such as the demo, passes its
/// test runner's, so the bed outlives that test for the next ones), else this process's parent
/// (cargo, for a test binary).
fn bed_user() -> String {
    std::env::var("BED_USER_PID")
        .ok()
        .filter(|pid| pid.parse::<u32>().is_ok())
        .unwrap_or_else(|| std::os::unix::process::parent_id().to_string())
}

/// Runs `e2e/cluster/up.sh` with `args` (images from this build's binaries); its stdout, or an
/// error with its stderr.
pub(crate) async fn run_up_sh(args: &[OsString]) -> Result<String> {
    let output = tokio::process::Command::new(SCRIPT)
        .args(args)
        .env("BED_BINARIES", binaries_dir()?)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .with_context(|| format!("cannot run {SCRIPT}"))?;
    if !output.status.success() {
        bail!(
            "{SCRIPT} {args:?} failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The kubeconfig named by up.sh's `export KUBECONFIG=` line.
pub(crate) fn kubeconfig_printed(stdout: &str) -> Result<PathBuf> {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("export KUBECONFIG="))
        .map(PathBuf::from)
        .context("up.sh printed no KUBECONFIG")
}

/// The documents of a shipped Kustomize base or overlay (an operator's `deploy/<variant>/`, or
/// the all-in-one `deploy/<variant>/`), rendered by kustomize with everything moved to namespace
/// `ns` and the images pointed at this build's (`localhost/<name>:dev`, never pulled): the test
/// runs what users apply. See [`crate::kustomize::render_for_bed`].
pub fn deploy_manifests(deploy_dir: &Path, ns: &str) -> Result<Vec<serde_json::Value>> {
    crate::kustomize::render_for_bed(deploy_dir, ns)
}

/// The logs of an in-cluster operator's pods (`selector`): one of them became leader, and none
/// logged a refused request (its RBAC, checked live). Panics with the logs otherwise. Each pod's
/// log is read on its own: `kubectl logs --selector` stops at the first pod whose log cannot be
/// read (one being deleted after a failover) and would hide the others. A pod that took the
/// Lease moments ago may not show its log lines yet: the logs are read again for a while
/// until a leader shows.
pub fn assert_leader_and_no_refusals(kubeconfig: &Path, ns: &str, selector: &str) {
    let read_logs = || {
        let names = kubectl(kubeconfig)
            .args(["--namespace", ns, "get", "pods", "--selector", selector])
            .args(["--output", "name"])
            .output()
            .expect("kubectl get pods");
        let mut logs = String::new();
        for pod in String::from_utf8_lossy(&names.stdout).lines() {
            let output = kubectl(kubeconfig)
                .args(["--namespace", ns, "logs", pod])
                .output()
                .expect("kubectl logs");
            logs.push_str(&format!("--- {pod}\n"));
            logs.push_str(&String::from_utf8_lossy(&output.stdout));
        }
        logs
    };
    let mut logs = read_logs();
    for _ in 0..30 {
        if logs.contains("became leader") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
        logs = read_logs();
    }
    assert!(logs.contains("became leader"), "no leader in:\n{logs}");
    assert!(
        !logs.to_lowercase().contains("forbidden"),
        "a request was refused:\n{logs}"
    );
}

/// The kubelet bed's kubeconfig, once joined.
static WITH_KUBELET: tokio::sync::OnceCell<Result<PathBuf, String>> =
    tokio::sync::OnceCell::const_new();

/// The kubelet bed, as a [`KubeTestbed`].
impl KubeTestbed {
    /// A cluster whose kubelet runs pods: `KUBECONFIG`'s cluster when that is set, otherwise
    /// the machine's kubelet bed (`e2e/cluster/up.sh`), started or joined on the first call and
    /// shared by every test process of this `cargo test` run. See [`crate::cluster`].
    pub async fn with_kubelet() -> Result<KubeTestbed> {
        // e2e/test.sh's lane of the tests that need no bed (up.sh refuses it too; this also
        // covers a cluster named by KUBECONFIG).
        if let Some(reason) = std::env::var("BED_REFUSED").ok().filter(|r| !r.is_empty()) {
            bail!("this test needs the kubelet bed, which is refused here: {reason}");
        }
        if std::env::var_os("KUBECONFIG").is_some_and(|v| !v.is_empty()) {
            return KubeTestbed::start().await;
        }
        let kubeconfig = WITH_KUBELET
            .get_or_init(|| async { start().await.map_err(|e| format!("{e:#}")) })
            .await
            .as_ref()
            .map_err(|e| anyhow::anyhow!("cannot start the kubelet bed: {e}"))?
            .clone();
        KubeTestbed::of_bed(kubeconfig).await
    }

    /// A guard that prints `namespace`'s events and pod logs if the test panics.
    pub fn report_on_failure(&self, namespace: &str) -> FailureReport {
        FailureReport::new(&self.kubeconfig, namespace)
    }
}

/// `kubectl`: the bed's own build when present, else the one on `PATH`.
pub fn kubectl(kubeconfig: &Path) -> Command {
    let bed = crate::kube::bin_dir().join("kubectl");
    let mut command = Command::new(if bed.is_file() {
        bed
    } else {
        PathBuf::from("kubectl")
    });
    command.arg("--kubeconfig").arg(kubeconfig);
    command
}

/// Prints the events of a namespace and the logs of its pods (current and previous container)
/// when the test holding it panics, the first thing a developer needs. Nothing otherwise.
/// What a test on the kubelet bed starts with: the bed (started or joined), the CRDs, a fresh
/// namespace, and that namespace's events and pod logs printed if the test panics.
pub async fn test_namespace(prefix: &str) -> (crate::kube::KubeTestbed, String, FailureReport) {
    let kube = crate::kube::KubeTestbed::with_kubelet()
        .await
        .expect("the kubelet bed");
    kube.install_crds().await.expect("CRDs installed");
    let ns = kube.namespace(prefix).await.expect("a test namespace");
    let report = kube.report_on_failure(&ns);
    (kube, ns, report)
}

pub struct FailureReport {
    kubeconfig: PathBuf,
    namespace: String,
}

impl FailureReport {
    pub fn new(kubeconfig: &Path, namespace: &str) -> FailureReport {
        FailureReport {
            kubeconfig: kubeconfig.to_path_buf(),
            namespace: namespace.to_string(),
        }
    }

    /// The report as text: events, pod list, each container's logs.
    pub fn text(&self) -> String {
        let run = |args: &[&str]| -> String {
            match kubectl(&self.kubeconfig)
                .args(["--namespace", &self.namespace])
                .args(args)
                .output()
            {
                Ok(o) => format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                ),
                Err(e) => format!("cannot run kubectl: {e}\n"),
            }
        };
        let mut text = format!("===== namespace {}: events =====\n", self.namespace);
        text += &run(&["get", "events", "--sort-by=.lastTimestamp"]);
        text += "===== pods =====\n";
        text += &run(&["get", "pods", "-o", "wide"]);
        let pods = run(&["get", "pods", "-o", "name"]);
        for pod in pods.lines().filter(|l| l.starts_with("pod/")) {
            for previous in [false, true] {
                let mut args = vec!["logs", pod, "--all-containers", "--prefix", "--tail=200"];
                if previous {
                    args.push("--previous");
                }
                let logs = run(&args);
                if previous && logs.contains("not found") || logs.trim().is_empty() {
                    continue;
                }
                text += &format!(
                    "===== {pod} logs{} =====\n{logs}",
                    if previous { " (previous)" } else { "" }
                );
            }
        }
        text
    }
}

impl Drop for FailureReport {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.text());
        }
    }
}

/// An EtcdCluster with `size` ready members whose operator reports `Progressing: Converged`.
pub fn converged(size: usize) -> impl Fn(&etcd_api::EtcdCluster) -> bool + Send + 'static {
    move |c: &etcd_api::EtcdCluster| {
        c.status.as_ref().is_some_and(|s| {
            s.members
                .as_ref()
                .and_then(|m| m.ready.as_ref())
                .map_or(0, Vec::len)
                == size
                && s.conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "Progressing" && c.reason.as_deref() == Some("Converged"))
        })
    }
}

/// An EtcdCluster whose operator reports `Available: QuorumLost`.
pub fn quorum_lost(c: &etcd_api::EtcdCluster) -> bool {
    c.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Available" && c.reason.as_deref() == Some("QuorumLost"))
    })
}

/// Makes a test's own pod spec (JSON) pass Pod Security "restricted", which the test namespaces
/// enforce: non-root user 65532, seccomp `RuntimeDefault`, and in every container no privilege
/// escalation and no capabilities. Fields the spec sets already are kept.
pub fn restricted(spec: &mut serde_json::Value) {
    use serde_json::json;
    let pod = &mut spec["securityContext"];
    for (key, value) in [
        ("runAsNonRoot", json!(true)),
        ("runAsUser", json!(65532)),
        ("runAsGroup", json!(65532)),
        ("fsGroup", json!(65532)),
        ("seccompProfile", json!({"type": "RuntimeDefault"})),
    ] {
        if pod.get(key).is_none() {
            pod[key] = value;
        }
    }
    for list in ["initContainers", "containers"] {
        for container in spec[list].as_array_mut().into_iter().flatten() {
            let context = &mut container["securityContext"];
            context["allowPrivilegeEscalation"] = json!(false);
            context["capabilities"] = json!({"drop": ["ALL"]});
        }
    }
}

/// `kubectl exec POD -- ARGS` in namespace `ns`: whether it succeeded, and its stdout followed by
/// its stderr.
pub fn exec_in_pod(kubeconfig: &Path, ns: &str, pod: &str, args: &[&str]) -> (bool, String) {
    let output = match kubectl(kubeconfig)
        .args(["--namespace", ns, "exec", pod, "--"])
        .args(args)
        .output()
    {
        Ok(output) => output,
        Err(e) => return (false, format!("cannot run kubectl: {e}")),
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

/// A pod's phase (`Pending`, `Running`, `Succeeded`, ...), empty before it has one.
pub fn pod_phase(pod: &k8s_openapi::api::core::v1::Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// Whether a pod's `Ready` condition is `True`.
pub fn pod_ready(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The IP of pod `name` (which must have one: started, not yet gone).
pub async fn pod_ip(pods: &kube::Api<k8s_openapi::api::core::v1::Pod>, name: &str) -> String {
    let pod = pods
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("pod {name}: {e}"));
    pod.status
        .and_then(|s| s.pod_ip)
        .unwrap_or_else(|| panic!("pod {name} has no IP"))
}

/// Runs `pod` (a Pod's JSON, `restartPolicy: Never`) once, under Pod Security "restricted"
/// (see [`restricted`]), and waits up to `seconds` until it has succeeded; a failed pod panics
/// with its phase.
pub async fn run_once(
    pods: &kube::Api<k8s_openapi::api::core::v1::Pod>,
    mut pod: serde_json::Value,
    seconds: u64,
) {
    use k8s_openapi::api::core::v1::Pod;
    restricted(&mut pod["spec"]);
    let pod: Pod = serde_json::from_value(pod).expect("a pod");
    let name = pod.metadata.name.clone().expect("a named pod");
    pods.create(&Default::default(), &pod)
        .await
        .unwrap_or_else(|e| panic!("create pod {name}: {e}"));
    let phase = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.clone());
    let ended = |p: &Pod| {
        matches!(
            p.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
    };
    let done = crate::kube::wait_until(pods, &name, "the pod to end", seconds, ended)
        .await
        .unwrap();
    assert_eq!(phase(&done).as_deref(), Some("Succeeded"), "pod {name}");
}

/// The client side of [`static_tls`]: the CA, and the certificate the operators use.
pub struct StaticTls {
    pub ca_pem: String,
    pub client_crt: String,
    pub client_key: String,
}

impl StaticTls {
    /// Options for a client of member `member` of `cluster` in `namespace`, with the
    /// operators' certificate when `identity`.
    pub fn client_options(
        &self,
        member: &str,
        cluster: &str,
        namespace: &str,
        identity: bool,
    ) -> etcd_client::ConnectOptions {
        let mut tls = etcd_client::TlsOptions::new()
            .ca_certificate(etcd_client::Certificate::from_pem(&self.ca_pem))
            .domain_name(format!("{member}.{cluster}.{namespace}.svc"));
        if identity {
            tls = tls.identity(etcd_client::Identity::from_pem(
                &self.client_crt,
                &self.client_key,
            ));
        }
        etcd_client::ConnectOptions::new()
            .with_tls(tls)
            .with_timeout(std::time::Duration::from_secs(5))
    }
}

/// The coreos static TLS Secrets of `cluster` in `namespace` (doc/user/cluster_tls.md):
/// `etcd-peer-tls` and `etcd-server-tls` for the members, and, with `client`, the operators'
/// `etcd-client-tls` (left out to be made later with [`create_client_tls`]).
pub async fn static_tls(
    kube: &crate::kube::KubeTestbed,
    namespace: &str,
    cluster: &str,
    client: bool,
) -> StaticTls {
    use crate::tls::{ExtendedKeyUsagePurpose as Usage, TestCa};
    let ca = TestCa::new("etcd test CA").unwrap();
    let peer_names = [
        format!("*.{cluster}.{namespace}.svc"),
        format!("*.{cluster}.{namespace}.svc.cluster.local"),
    ];
    let server_names = [
        format!("*.{cluster}.{namespace}.svc"),
        format!("{cluster}-client.{namespace}.svc"),
        "localhost".to_string(),
    ];
    let (peer_crt, peer_key) = ca
        .issue(
            &[&peer_names[0], &peer_names[1]],
            "peer",
            &[Usage::ServerAuth, Usage::ClientAuth],
        )
        .unwrap();
    let (server_crt, server_key) = ca
        .issue(
            &[&server_names[0], &server_names[1], &server_names[2]],
            "server",
            &[Usage::ServerAuth, Usage::ClientAuth],
        )
        .unwrap();
    let (client_crt, client_key) = ca.issue(&[], "operator", &[Usage::ClientAuth]).unwrap();
    let tls = StaticTls {
        ca_pem: ca.cert_pem.clone(),
        client_crt,
        client_key,
    };
    create_secret(
        kube,
        namespace,
        "etcd-peer-tls",
        [
            ("peer.crt", &peer_crt),
            ("peer.key", &peer_key),
            ("peer-ca.crt", &ca.cert_pem),
        ],
    )
    .await;
    create_secret(
        kube,
        namespace,
        "etcd-server-tls",
        [
            ("server.crt", &server_crt),
            ("server.key", &server_key),
            ("server-ca.crt", &ca.cert_pem),
        ],
    )
    .await;
    if client {
        create_client_tls(kube, namespace, &tls).await;
    }
    tls
}

/// The operators' client certificate Secret `etcd-client-tls` (coreos `operatorSecret`, also
/// an EtcdBackup's `clientTLSSecret`).
pub async fn create_client_tls(kube: &crate::kube::KubeTestbed, namespace: &str, tls: &StaticTls) {
    create_secret(
        kube,
        namespace,
        "etcd-client-tls",
        [
            ("etcd-client.crt", &tls.client_crt),
            ("etcd-client.key", &tls.client_key),
            ("etcd-client-ca.crt", &tls.ca_pem),
        ],
    )
    .await;
}

async fn create_secret(
    kube: &crate::kube::KubeTestbed,
    namespace: &str,
    name: &str,
    files: [(&str, &str); 3],
) {
    use k8s_openapi::api::core::v1::Secret;
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "stringData": files.iter().map(|(k, v)| (k.to_string(), serde_json::json!(v))).collect::<serde_json::Map<_, _>>(),
    }))
    .unwrap();
    kube::Api::<Secret>::namespaced(kube.client.clone(), namespace)
        .create(&kube::api::PostParams::default(), &secret)
        .await
        .unwrap();
}
