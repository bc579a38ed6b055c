use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::free_port;

/// The start script, shared with the demo and the benchmark.
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../garage-up.sh");

/// A single-node Garage S3 server on loopback, started by `e2e/garage-up.sh`, with bucket
/// `backups` and the script's fixed test key (read/write/owner).
pub struct Garage {
    /// `http://127.0.0.1:PORT`
    pub endpoint: String,
    pub region: String,
    pub access_key: String,
    pub secret_key: String,
    pub bucket: String,
    dir: tempfile::TempDir,
    /// S3, RPC and admin ports, kept for `restart`.
    ports: [u16; 3],
    /// Where the S3 API listens.
    address: String,
}

impl Garage {
    /// A server whose S3 API listens on 127.0.0.1.
    pub async fn start() -> Result<Garage> {
        Garage::start_on("127.0.0.1").await
    }

    /// A server whose S3 API listens on `address`, e.g. the kubelet bed's bridge address
    /// ([`crate::cluster::GATEWAY`]), so pods can reach it.
    pub async fn start_on(address: &str) -> Result<Garage> {
        let dir = tempfile::tempdir()?;
        let ports = [free_port(), free_port(), free_port()];
        let exports = script(&up_args(dir.path(), ports), address).await?;
        let var = |name: &str| -> Result<String> {
            exports
                .lines()
                .find_map(|l| {
                    l.strip_prefix("export ")?
                        .strip_prefix(name)?
                        .strip_prefix('=')
                })
                .map(str::to_string)
                .with_context(|| format!("garage-up.sh printed no {name}"))
        };
        Ok(Garage {
            endpoint: var("AWS_ENDPOINT_URL")?,
            region: var("AWS_REGION")?,
            access_key: var("AWS_ACCESS_KEY_ID")?,
            secret_key: var("AWS_SECRET_ACCESS_KEY")?,
            bucket: var("GARAGE_BUCKET")?,
            dir,
            ports,
            address: address.to_string(),
        })
    }

    /// Where the config, data and `garage.log` live.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// S3 requests the server answered so far, by API endpoint (`PutObject`, `UploadPart`,
    /// ...), from its metrics (the admin API's `/metrics`, open without a metrics token).
    pub async fn s3_requests(&self) -> Result<std::collections::BTreeMap<String, u64>> {
        let (code, body) = crate::http_get("127.0.0.1", self.ports[2], "/metrics")
            .await
            .context("Garage's admin API does not answer")?;
        if code != 200 {
            bail!("Garage's /metrics answered {code}: {body}");
        }
        let mut counts = std::collections::BTreeMap::new();
        for line in body
            .lines()
            .filter(|l| l.starts_with("api_s3_request_counter{"))
        {
            let endpoint = line
                .split("api_endpoint=\"")
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .unwrap_or("?");
            let count: f64 = line
                .rsplit(' ')
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0.0);
            *counts.entry(endpoint.to_string()).or_insert(0) += count as u64;
        }
        Ok(counts)
    }

    /// The server process's PID (for SIGSTOP/SIGCONT: a server that hangs).
    pub fn pid(&self) -> Option<u32> {
        let pid = std::fs::read_to_string(self.dir.path().join("garage.pid")).ok()?;
        pid.trim().parse().ok()
    }

    /// SIGKILL, as a crash would; returns once the process is gone (ports free). Data stays.
    pub fn kill(&mut self) {
        let Ok(pid) = std::fs::read_to_string(self.dir.path().join("garage.pid")) else {
            return;
        };
        let pid = pid.trim();
        let _ = Command::new("kill").args(["-9", pid]).status();
        // Dead once gone or a zombie whose threads have all exited: the main thread turns
        // zombie while other threads still hold the sockets, and init reaps zombies slowly.
        let status = format!("/proc/{pid}/status");
        let dead = || {
            std::fs::read_to_string(&status).map_or(true, |s| {
                let field = |name| s.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
                field("State:").is_some_and(|v| v.starts_with('Z'))
                    && field("Threads:") == Some("1")
            })
        };
        for _ in 0..500 {
            if dead() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills the server now and starts it again `after` that, in a task: a server that
    /// drops its connections mid-request and comes back. The task gives the server back.
    pub fn crash_and_restart(
        mut self,
        after: std::time::Duration,
    ) -> tokio::task::JoinHandle<Garage> {
        self.kill();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            self.restart().await.expect("restart Garage");
            self
        })
    }

    /// Starts the server again on the same data, config and ports.
    pub async fn restart(&mut self) -> Result<()> {
        script(&up_args(self.dir.path(), self.ports), &self.address)
            .await
            .map(|_| ())
    }

    /// Creates bucket `name` and gives the test key read/write/owner on it.
    pub async fn create_bucket(&self, name: &str) -> Result<()> {
        script(
            &[
                OsStr::new("--bucket"),
                self.dir.path().as_os_str(),
                OsStr::new(name),
            ],
            &self.address,
        )
        .await
        .map(|_| ())
    }

    /// Runs the aws CLI (`aws <args>`) against this server with its key, e.g.
    /// `["s3api", "list-multipart-uploads", "--bucket", ...]`: an S3 client independent of ours.
    pub fn aws(&self, args: &[&str]) -> std::process::Output {
        std::process::Command::new("aws")
            .args(["--endpoint-url", &self.endpoint, "--region", &self.region])
            .args(args)
            .env("AWS_ACCESS_KEY_ID", &self.access_key)
            .env("AWS_SECRET_ACCESS_KEY", &self.secret_key)
            .env("AWS_CONFIG_FILE", "/nonexistent")
            .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
            .output()
            .expect("run the aws CLI (e2e/install-deps.sh installs it)")
    }

    /// Starts a multipart upload of `key` and leaves it unfinished, as a killed process would.
    pub fn start_abandoned_upload(&self, key: &str) {
        let bucket = self.bucket.as_str();
        let args = [
            "s3api",
            "create-multipart-upload",
            "--bucket",
            bucket,
            "--key",
            key,
        ];
        let out = self.aws(&args);
        assert!(out.status.success(), "{out:?}");
    }

    /// The coreos `aws` Secret (`credentials` and `config` files, profile `default`) with this
    /// server's key and region, named `name`.
    pub fn aws_secret(&self, name: &str) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
            "stringData": {
                "credentials": format!(
                    "[default]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
                    self.access_key, self.secret_key
                ),
                "config": format!("[default]\nregion = {}\n", self.region),
            }
        })
    }

    /// AWS variables for child processes (aws CLI, etcd-backup). `AWS_DEFAULT_REGION` is for
    /// aws CLI v1, which ignores `AWS_REGION`.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ACCESS_KEY_ID", &self.access_key),
            ("AWS_SECRET_ACCESS_KEY", &self.secret_key),
            ("AWS_REGION", &self.region),
            ("AWS_DEFAULT_REGION", &self.region),
            ("AWS_ENDPOINT_URL", &self.endpoint),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
    }
}

impl Drop for Garage {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `DIR S3_PORT RPC_PORT ADMIN_PORT`
fn up_args(dir: &Path, ports: [u16; 3]) -> Vec<OsString> {
    let ports = ports.iter().map(|p| p.to_string().into());
    std::iter::once(dir.into()).chain(ports).collect()
}

/// Runs `garage-up.sh` with `args`; its stdout, or an error with its stderr (which says to run
/// `e2e/install-deps.sh` when the garage binary is missing).
async fn script<S: AsRef<OsStr>>(args: &[S], address: &str) -> Result<String> {
    let output = tokio::process::Command::new("bash")
        .arg(SCRIPT)
        .args(args)
        .env("GARAGE_S3_ADDRESS", address)
        .output()
        .await
        .with_context(|| format!("cannot run {SCRIPT}"))?;
    if !output.status.success() {
        bail!(
            "{SCRIPT} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8(output.stdout)?)
}
