//! Real servers on loopback for tests, the demo and the benchmark: etcd (built by
//! `e2e/cluster/build.sh`),
//! Garage (S3) and, in [`kube`](crate::kube), a Kubernetes API server
//! (`e2e/apiserver/`). Each fixture gets free ports and its own temporary directory, so tests
//! run in parallel; dropping a fixture kills its process and removes its files (the Kubernetes
//! test bed is shared per test process, see [`kube`](crate::kube)). `e2e/install-deps.sh`
//! installs the servers; `e2e/cluster/build.sh` builds the Kubernetes ones. The mock API of the
//! reconcile tests, the repository checks, the demo and the benchmark drivers are crates of
//! their own beside this one (`e2e/mock-api`, `e2e/repo-checks`, `e2e/demo`, `e2e/bench`).

pub mod cli;
pub mod cluster;
pub mod coreos;
pub mod emulators;
mod etcd;
mod garage;
pub mod helm;
pub mod host_state;
pub mod image;
pub mod kube;
pub mod kustomize;
pub mod logs;
pub mod nodes;
pub mod procstat;
pub mod proxy;
pub mod status_writers;
mod tls;

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::Path;
use std::sync::Mutex;

pub use emulators::{Azurite, FakeGcs};
pub use etcd::{
    Etcd, base64_decode, control_plane_etcd_bin, etcd_releases, etcd_tool, snapshot_restore,
};
pub use garage::Garage;
pub use tls::{ExtendedKeyUsagePurpose, TestCa, TlsFiles};

/// A free loopback port, never the same twice in one process: the OS may hand a closed port out
/// again before the server that asked for it first has bound it.
pub fn free_port() -> u16 {
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("bind a loopback port")
            .port();
        if given.insert(port) {
            return port;
        }
    }
}

/// Deterministic, incompressible-looking bytes (an xorshift stream seeded by `seed`), for test
/// objects whose content must survive a round trip byte for byte.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The documents of a multi-document YAML text (manifests, kustomize output), empty ones left
/// out.
pub fn yaml_documents(text: &str) -> anyhow::Result<Vec<serde_json::Value>> {
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(text)?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// The last `lines` lines of a log file, for error messages.
fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// `(status, response)` of a plain HTTP GET of `path` at `host:port` (an operator's or an
/// etcd member's metrics port); `None` if it does not answer. HTTP/1.0, so that the body is not
/// chunked: a chunk boundary may fall inside a metrics line.
pub async fn http_get(host: &str, port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect((host, port)).await.ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, response))
}
