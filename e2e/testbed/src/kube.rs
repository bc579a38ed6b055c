//! A real Kubernetes API server for tests: kube-apiserver and kube-controller-manager of the bed's
//! version (1.37, or `KUBE_VERSION=1.35`; built from their Go modules by `e2e/cluster/build.sh`)
//! with their own etcd, on 127.0.0.1 only, started by `e2e/apiserver/up.sh`. There is no kubelet:
//! pods are created as objects and stay Pending; the controller manager runs garbage collection,
//! Jobs, StatefulSets and the other built-in controllers.
//!
//! ```no_run
//! # async fn t() -> anyhow::Result<()> {
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use testbed::kube::KubeTestbed;
//!
//! let kube = KubeTestbed::start().await?; // one server shared by all tests of this binary
//! kube.install_crds().await?; // crds/*.yaml, waits until Established
//! let ns = kube.namespace("my-test").await?; // a fresh namespace, e.g. `my-test-x7k2p9`
//! let config_maps: kube::Api<ConfigMap> = kube::Api::namespaced(kube.client.clone(), &ns);
//! // ... run the code under test with `kube.client` or `kube.kubeconfig` ...
//! kube.delete_namespace(&ns).await?; // optional; matters against a long-lived cluster
//! # Ok(()) }
//! ```
//!
//! - With `KUBECONFIG` set, that cluster is used instead (nothing is started); tests stay apart
//!   by using their own namespace from [`KubeTestbed::namespace`].
//! - Otherwise one control plane is started per test process, on first use, and shared by all
//!   tests in it (starting one takes a few seconds). Statics are never dropped, so `up.sh` leaves
//!   a watcher behind that stops the servers (and removes their directory) once the test process
//!   is gone, however it ends. `KUBE_TESTBED_KEEP=1` keeps the directory (logs, certs) for
//!   debugging; its path is in [`KubeTestbed::dir`].
//! - The binaries must have been built once with `e2e/cluster/build.sh` (cached under
//!   `~/.cache/etcd-backup-suite`, see `e2e/cluster/versions.sh` for the env variables); `start`
//!   fails with that advice when they are missing, or runs the build itself when
//!   `KUBE_TESTBED_AUTO_BUILD=1`.
//! - Each call of `start` returns a new [`kube::Client`] bound to the calling test's runtime
//!   (a client must not outlive the tokio runtime that created it, and each `#[tokio::test]` has
//!   its own).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{await_condition, conditions};
use rand::Rng;
use tokio::sync::OnceCell;

/// The scripts, shared with CI and developers.
const SCRIPTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../apiserver");
/// The versions and cache paths of the beds' upstream programs (sourced, not run).
const VERSIONS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../cluster/versions.sh");
/// The build of those programs.
const BUILD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../cluster/build.sh");
/// The committed CRDs.
const CRDS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../crds");
/// Label put on every namespace made by [`KubeTestbed::namespace`], for cleaning up a real
/// cluster: `kubectl delete namespace -l etcd-backup-suite/testbed=true`.
pub const NAMESPACE_LABEL: &str = "etcd-backup-suite/testbed";
/// The label that makes the API server enforce a Pod Security Standard in a namespace.
pub const POD_SECURITY_LABEL: &str = "pod-security.kubernetes.io/enforce";
/// Field manager of `install_crds`'s server-side apply.
const MANAGER: &str = "testbed";

/// A Kubernetes API server to test against: the test process's own control plane, the machine's
/// kubelet bed, or `KUBECONFIG`'s cluster. Cloning shares the client.
#[derive(Clone)]
pub struct KubeTestbed {
    /// A client for the admin user (`system:masters`), bound to the caller's tokio runtime.
    pub client: kube::Client,
    /// The kubeconfig `client` was made from (for `kubectl` or a process under test). With
    /// `KUBECONFIG` set, its value as is.
    pub kubeconfig: PathBuf,
    dir: Option<PathBuf>,
}

/// What the process-wide control plane left: its directory and kubeconfig. A failure is kept as
/// text so every test reports it without starting again.
struct Shared {
    dir: PathBuf,
    kubeconfig: PathBuf,
}

static SHARED: OnceCell<Result<Shared, String>> = OnceCell::const_new();

impl KubeTestbed {
    /// `KUBECONFIG`'s cluster when that is set, otherwise the test process's own control plane,
    /// started on the first call.
    pub async fn start() -> Result<KubeTestbed> {
        if let Some(path) = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
            let kubeconfig = Kubeconfig::read().context("cannot read $KUBECONFIG")?;
            return Ok(KubeTestbed {
                client: client(kubeconfig).await?,
                kubeconfig: PathBuf::from(path),
                dir: None,
            });
        }
        let shared = SHARED
            .get_or_init(|| async { start_servers().await.map_err(|e| format!("{e:#}")) })
            .await
            .as_ref()
            .map_err(|e| anyhow::anyhow!("cannot start the kube test bed: {e}"))?;
        let kubeconfig = Kubeconfig::read_from(&shared.kubeconfig)
            .with_context(|| format!("cannot read {}", shared.kubeconfig.display()))?;
        Ok(KubeTestbed {
            client: client(kubeconfig).await?,
            kubeconfig: shared.kubeconfig.clone(),
            dir: Some(shared.dir.clone()),
        })
    }

    /// A client of the cluster `kubeconfig` names, whose directory holds its servers' files
    /// (the kubelet bed's, see [`crate::cluster`]).
    pub(crate) async fn of_bed(kubeconfig: PathBuf) -> Result<KubeTestbed> {
        let config = Kubeconfig::read_from(&kubeconfig)
            .with_context(|| format!("cannot read {}", kubeconfig.display()))?;
        Ok(KubeTestbed {
            client: client(config).await?,
            dir: kubeconfig.parent().map(Path::to_path_buf),
            kubeconfig,
        })
    }

    /// The servers' directory (certs, tokens, `*.log`, `*.pid`); `None` with `KUBECONFIG`.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Applies every `crds/*.yaml` (server-side apply, forced, so concurrent and repeated calls
    /// are fine) and waits until each is Established.
    pub async fn install_crds(&self) -> Result<()> {
        let api: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let mut names = Vec::new();
        for path in crd_paths()? {
            let text = std::fs::read_to_string(&path)?;
            let crd: serde_json::Value = serde_saphyr::from_str(&text)
                .with_context(|| format!("{} is not YAML", path.display()))?;
            let name = crd["metadata"]["name"]
                .as_str()
                .with_context(|| format!("{} has no metadata.name", path.display()))?
                .to_string();
            api.patch(
                &name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&crd),
            )
            .await
            .with_context(|| format!("cannot apply {}", path.display()))?;
            names.push(name);
        }
        for name in names {
            let established = await_condition(api.clone(), &name, conditions::is_crd_established());
            tokio::time::timeout(Duration::from_secs(60), established)
                .await
                .with_context(|| format!("CRD {name} not Established after 60 s"))?
                .with_context(|| format!("waiting for CRD {name}"))?;
        }
        Ok(())
    }

    /// Creates a fresh namespace `<prefix>-<random>` (prefix cut to a valid DNS label) labelled
    /// [`NAMESPACE_LABEL`]`=true`, with Pod Security "restricted" enforced
    /// ([`POD_SECURITY_LABEL`]), and returns its name. One per test keeps tests sharing a
    /// server apart.
    pub async fn namespace(&self, prefix: &str) -> Result<String> {
        let mut base: String = prefix
            .to_ascii_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        base.truncate(50);
        let base = base.trim_matches('-');
        let base = if base.is_empty() { "test" } else { base };
        let suffix: String = (0..6)
            .map(|_| {
                let c = rand::rng().random_range(0..36u8);
                char::from(if c < 10 { b'0' + c } else { b'a' + c - 10 })
            })
            .collect();
        let name = format!("{base}-{suffix}");
        // Pod Security "restricted" enforced: what the operators make must pass it, as in the
        // many clusters that enforce it.
        let namespace: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": { "name": name, "labels": {
                NAMESPACE_LABEL: "true",
                POD_SECURITY_LABEL: "restricted",
            } }
        }))?;
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .with_context(|| format!("cannot create namespace {name}"))?;
        self.wait_for_default_service_account(&name).await?;
        Ok(name)
    }

    /// Pods of a new namespace are refused until its `default` ServiceAccount exists and, before
    /// Kubernetes 1.24, has its token Secret: the controller manager adds both a moment later.
    async fn wait_for_default_service_account(&self, namespace: &str) -> Result<()> {
        use k8s_openapi::api::core::v1::ServiceAccount;
        let info = self.client.apiserver_version().await?;
        let minor: u32 = info.minor.trim_end_matches('+').parse().unwrap_or(u32::MAX);
        let needs_token = info.major == "1" && minor < 24;
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), namespace);
        let usable = move |sa: Option<&ServiceAccount>| {
            sa.is_some_and(|sa| !needs_token || sa.secrets.as_ref().is_some_and(|s| !s.is_empty()))
        };
        tokio::time::timeout(
            Duration::from_secs(60),
            await_condition(api, "default", usable),
        )
        .await
        .with_context(|| format!("no default ServiceAccount token in {namespace} after 60 s"))?
        .with_context(|| format!("waiting for the default ServiceAccount of {namespace}"))?;
        Ok(())
    }

    /// Writes a copy of [`KubeTestbed::kubeconfig`] to `path` whose every user impersonates the
    /// ServiceAccount `namespace/name` (with the groups its token would carry), so a process
    /// under test runs with exactly the RBAC granted to that ServiceAccount. The admin user may
    /// impersonate anyone (`system:masters`; with `KUBECONFIG`, the user needs `impersonate`).
    pub fn write_service_account_kubeconfig(
        &self,
        namespace: &str,
        name: &str,
        path: &Path,
    ) -> Result<()> {
        let mut config = Kubeconfig::read_from(&self.kubeconfig)
            .with_context(|| format!("cannot read {}", self.kubeconfig.display()))?;
        for user in &mut config.auth_infos {
            let auth = user.auth_info.get_or_insert_with(Default::default);
            auth.impersonate = Some(format!("system:serviceaccount:{namespace}:{name}"));
            auth.impersonate_groups = Some(vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ]);
        }
        let yaml = serde_saphyr::to_string(&config)?;
        // It holds the admin token: readable by the owner only.
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)
            .and_then(|mut f| f.write_all(yaml.as_bytes()))
            .with_context(|| format!("cannot write {}", path.display()))
    }

    /// Server-side applies each manifest (any kind the server serves, found by discovery),
    /// forced, as field manager `testbed`. Namespaced objects without a namespace go to
    /// `namespace`.
    pub async fn apply(&self, manifests: &[serde_json::Value], namespace: &str) -> Result<()> {
        use kube::api::DynamicObject;
        use kube::core::GroupVersionKind;
        for doc in manifests {
            let (api_version, kind) = (
                doc["apiVersion"]
                    .as_str()
                    .context("manifest without apiVersion")?,
                doc["kind"].as_str().context("manifest without kind")?,
            );
            let name = doc["metadata"]["name"]
                .as_str()
                .context("manifest without name")?;
            let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            let gvk = GroupVersionKind::gvk(group, version, kind);
            let (resource, caps) = kube::discovery::pinned_kind(&self.client, &gvk)
                .await
                .with_context(|| format!("the server does not serve {api_version} {kind}"))?;
            let api: Api<DynamicObject> = match caps.scope {
                kube::discovery::Scope::Namespaced => {
                    let ns = doc["metadata"]["namespace"].as_str().unwrap_or(namespace);
                    Api::namespaced_with(self.client.clone(), ns, &resource)
                }
                kube::discovery::Scope::Cluster => Api::all_with(self.client.clone(), &resource),
            };
            api.patch(
                name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(doc),
            )
            .await
            .with_context(|| format!("cannot apply {kind} {name}"))?;
        }
        Ok(())
    }

    /// Deletes a namespace (and so everything in it), without waiting. Only needed against a
    /// long-lived cluster: the test bed's own servers go away with the test process.
    pub async fn delete_namespace(&self, name: &str) -> Result<()> {
        Api::<Namespace>::all(self.client.clone())
            .delete(name, &DeleteParams::background())
            .await
            .with_context(|| format!("cannot delete namespace {name}"))?;
        Ok(())
    }
}

async fn client(kubeconfig: Kubeconfig) -> Result<kube::Client> {
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

/// `crds/*.yaml`, sorted.
fn crd_paths() -> Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(CRDS).with_context(|| format!("cannot list {CRDS}"))? {
        let path = entry?.path();
        // Every YAML file but the kustomization that makes them a base.
        if path.extension().is_some_and(|e| e == "yaml")
            && path.file_name().is_some_and(|n| n != "kustomization.yaml")
        {
            paths.push(path);
        }
    }
    paths.sort();
    anyhow::ensure!(!paths.is_empty(), "no CRDs in {CRDS}");
    Ok(paths)
}

/// The kubeconfig at `path`, its API server reached through a proxy the test can cut (a network
/// partition between a process under test and the API server).
pub async fn partitioned_kubeconfig(path: &Path) -> Result<(Kubeconfig, crate::proxy::Partition)> {
    let mut kubeconfig =
        Kubeconfig::read_from(path).with_context(|| format!("cannot read {}", path.display()))?;
    let cluster = kubeconfig.clusters[0]
        .cluster
        .as_mut()
        .context("a kubeconfig cluster")?;
    let mut server: url::Url = cluster.server.as_deref().context("a server")?.parse()?;
    let host = server.host_str().context("a server host")?.to_string();
    let target = format!(
        "{host}:{}",
        server.port_or_known_default().context("a server port")?
    );
    // On the API server's own address (a local one on a bed): the server's certificate names
    // it, and only the port changes.
    let bind = host.trim_start_matches('[').trim_end_matches(']');
    let (proxy, partition) = crate::proxy::partitionable_proxy(bind, target).await;
    let port = proxy.rsplit_once(':').context("a proxy port")?.1.parse()?;
    server
        .set_port(Some(port))
        .map_err(|()| anyhow::anyhow!("cannot set the port"))?;
    cluster.server = Some(server.to_string());
    Ok((kubeconfig, partition))
}

/// Where build.sh puts the Kubernetes binaries, as `versions.sh` says (one place for versions
/// and paths: the scripts'). Asked once per process: every `kubectl` a test runs needs it.
pub(crate) fn bin_dir() -> PathBuf {
    static BIN_DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN_DIR.get_or_init(|| versions_path("kube_bin")).clone()
}

/// A path `versions.sh` sets (`variable`), or one that cannot exist and says why, so that
/// running what it names reports the cause.
pub(crate) fn versions_path(variable: &str) -> PathBuf {
    let output = std::process::Command::new("bash")
        .args([
            "-c",
            &format!("source \"$1\" && echo \"${variable}\""),
            "versions",
        ])
        .arg(VERSIONS)
        .output();
    match output {
        Ok(o) if o.status.success() => {
            PathBuf::from(String::from_utf8_lossy(&o.stdout).trim().to_string())
        }
        // A version the bed does not build (KUBE_VERSION, ETCD_TESTBED_VERSION): versions.sh
        // said which on stderr.
        Ok(o) => PathBuf::from(format!(
            "(no {variable}: {})",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => PathBuf::from(format!("(no {variable}: cannot run bash: {e})")),
    }
}

/// Runs a script; its stdout, or an error with its stderr (which carries the servers' log tail).
async fn script(args: &[&std::ffi::OsStr], path: &Path) -> Result<String> {
    script_with_env(args, &[], path).await
}

async fn script_with_env(
    args: &[&std::ffi::OsStr],
    env: &[(&str, &str)],
    path: &Path,
) -> Result<String> {
    let output = tokio::process::Command::new(path)
        .args(args)
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .with_context(|| format!("cannot run {}", path.display()))?;
    if !output.status.success() {
        bail!(
            "{} failed ({}):\n{}",
            path.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// A control plane of the test's own (not the process-wide one [`KubeTestbed::start`] shares),
/// storing in `etcd` when given (say, one restored from a backup) or in an etcd of its own;
/// stopped when the test process ends. Returns it with the client URL of the etcd it stores in.
pub async fn own_control_plane(etcd: Option<&str>) -> Result<(KubeTestbed, String)> {
    let shared = start_servers_storing_in(etcd).await?;
    let endpoint = std::fs::read_to_string(shared.dir.join("etcd-endpoint"))
        .context("up.sh wrote no etcd-endpoint")?
        .trim()
        .to_string();
    let testbed = KubeTestbed::of_bed(shared.kubeconfig).await?;
    Ok((testbed, endpoint))
}

async fn start_servers() -> Result<Shared> {
    start_servers_storing_in(None).await
}

async fn start_servers_storing_in(etcd: Option<&str>) -> Result<Shared> {
    let bin = bin_dir();
    let built = ["kube-apiserver", "kube-controller-manager"]
        .iter()
        .all(|b| bin.join(b).is_file());
    if !built {
        if std::env::var_os("KUBE_TESTBED_AUTO_BUILD").is_some_and(|v| v == "1") {
            script(&[], Path::new(BUILD)).await?;
        } else {
            bail!(
                "no kube-apiserver/kube-controller-manager in {}: build them once with \
                 e2e/cluster/build.sh (Go; cached), set KUBE_TESTBED_AUTO_BUILD=1 to let the \
                 tests run it, or set KUBECONFIG to test against an existing cluster",
                bin.display()
            );
        }
    }
    let dir = tempfile::Builder::new()
        .prefix("kube-testbed-")
        .tempdir()?
        .keep();
    let pid = std::process::id().to_string();
    let keep = std::env::var_os("KUBE_TESTBED_KEEP").is_some_and(|v| v == "1");
    let mut args: Vec<&std::ffi::OsStr> = vec!["--watch-pid".as_ref(), pid.as_ref()];
    if !keep {
        args.push("--rm".as_ref());
    }
    args.push(dir.as_os_str());
    let env: Vec<(&str, &str)> = etcd.map(|e| ("ETCD_SERVERS", e)).into_iter().collect();
    let stdout = script_with_env(&args, &env, &Path::new(SCRIPTS).join("up.sh"))
        .await
        .with_context(|| format!("servers' directory: {}", dir.display()))?;
    let kubeconfig = stdout
        .lines()
        .find_map(|l| l.strip_prefix("export KUBECONFIG="))
        .map(PathBuf::from)
        .context("up.sh printed no KUBECONFIG")?;
    Ok(Shared { dir, kubeconfig })
}

/// Waits until object `name` exists and satisfies `done`; the object, or an error naming `what`
/// after `seconds`.
pub async fn wait_until<K, F>(
    api: &Api<K>,
    name: &str,
    what: &str,
    seconds: u64,
    done: F,
) -> Result<K>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    F: Fn(&K) -> bool + Send + 'static,
{
    let condition = move |obj: Option<&K>| obj.is_some_and(&done);
    let found = tokio::time::timeout(
        Duration::from_secs(seconds),
        await_condition(api.clone(), name, condition),
    )
    .await
    .map_err(|_| anyhow::anyhow!("{what}: not after {seconds} s"))?
    .with_context(|| format!("watching {name} for {what}"))?;
    found.with_context(|| format!("{name} is gone"))
}

/// Creates Secret `name` in `ns` with `data` (string values, as `stringData`).
pub async fn create_secret(
    client: &kube::Client,
    ns: &str,
    name: &str,
    data: &[(&str, &str)],
) -> Result<()> {
    let data: serde_json::Map<String, serde_json::Value> = data
        .iter()
        .map(|(k, v)| (k.to_string(), serde_json::json!(v)))
        .collect();
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": data}))?;
    kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), ns)
        .create(&kube::api::PostParams::default(), &secret)
        .await?;
    Ok(())
}
