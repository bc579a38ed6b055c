//! Connecting to etcd and choosing the member to snapshot.

use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};

use crate::{Error, Result};

/// Client TLS material in PEM, as in the coreos `clientTLSSecret` (`etcd-client-ca.crt`,
/// `etcd-client.crt`, `etcd-client.key`).
#[derive(Clone)]
pub struct TlsPem {
    pub ca: Vec<u8>,
    pub cert: Option<Vec<u8>>,
    pub key: Option<Vec<u8>>,
}

impl std::fmt::Debug for TlsPem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsPem { .. }")
    }
}

/// How to reach the etcd cluster.
#[derive(Debug, Clone)]
pub struct EtcdConnection {
    pub endpoints: Vec<String>,
    pub tls: Option<TlsPem>,
    /// Per endpoint: connecting, and the status call that picks the member.
    pub dial_timeout: Duration,
}

impl EtcdConnection {
    pub fn new(endpoints: Vec<String>) -> Self {
        EtcdConnection {
            endpoints,
            tls: None,
            dial_timeout: Duration::from_secs(10),
        }
    }

    /// The TLS settings of the connection, if it uses TLS.
    fn tls_config(&self) -> Result<Option<TlsOptions>> {
        let Some(tls) = &self.tls else {
            return Ok(None);
        };
        {
            if !String::from_utf8_lossy(&tls.ca).contains("BEGIN CERTIFICATE") {
                return Err(Error::TlsMaterial(
                    "the CA bundle holds no PEM certificate".into(),
                ));
            }
            let mut config = TlsOptions::new().ca_certificate(Certificate::from_pem(&tls.ca));
            match (&tls.cert, &tls.key) {
                (Some(cert), Some(key)) => config = config.identity(Identity::from_pem(cert, key)),
                (None, None) => {}
                _ => {
                    return Err(Error::TlsMaterial(
                        "a client certificate needs its key, and a key its certificate".into(),
                    ));
                }
            }
            Ok(Some(config))
        }
    }
}

/// The member chosen for the snapshot, with what it reported before the snapshot started.
pub struct Member {
    pub endpoint: String,
    pub client: Client,
    pub revision: i64,
    pub version: String,
    pub cluster_id: u64,
    pub member_id: u64,
    pub db_size: i64,
}

impl Member {
    pub fn cluster_id_hex(&self) -> String {
        format!("{:x}", self.cluster_id)
    }
    pub fn member_id_hex(&self) -> String {
        format!("{:x}", self.member_id)
    }
}

/// Asks every endpoint for its status and picks the member with the highest revision (the most
/// up-to-date state, as coreos did). Unreachable members are skipped; if none answers, the
/// error lists each endpoint's cause.
pub async fn select_member(connection: &EtcdConnection) -> Result<Member> {
    if connection.endpoints.is_empty() {
        return Err(Error::NoEndpoints);
    }
    let tls = connection.tls_config()?;
    // In parallel, so a dead member costs one dial timeout, not one per dead member.
    let probes = connection
        .endpoints
        .iter()
        .map(|endpoint| probe(endpoint, tls.clone(), connection.dial_timeout));
    let mut members = Vec::new();
    let mut failures = Vec::new();
    for (endpoint, result) in connection
        .endpoints
        .iter()
        .zip(futures::future::join_all(probes).await)
    {
        match result {
            Ok(member) => {
                tracing::debug!(%endpoint, revision = member.revision, "etcd member answered");
                members.push(member);
            }
            Err(e) => {
                tracing::warn!(%endpoint, error = %e, "etcd member did not answer");
                failures.push(e);
            }
        }
    }
    if members.is_empty() {
        return Err(match failures.len() {
            1 => failures.remove(0),
            _ => Error::NoMemberAnswered(
                failures
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
        });
    }
    let seen: Vec<Seen> = members
        .iter()
        .map(|m| Seen {
            endpoint: &m.endpoint,
            revision: m.revision,
            cluster_id: m.cluster_id,
        })
        .collect();
    let best = most_up_to_date(&seen)?;
    Ok(members.swap_remove(best))
}

/// What a probe learned about one member, for choosing among them.
#[derive(Debug, Clone, Copy)]
struct Seen<'a> {
    endpoint: &'a str,
    revision: i64,
    cluster_id: u64,
}

/// Index of the member with the highest revision (the first one on a tie). Members of different
/// clusters are refused: a snapshot of the wrong cluster would be a silent disaster at restore.
fn most_up_to_date(seen: &[Seen]) -> Result<usize> {
    if let Some(other) = seen.iter().find(|s| s.cluster_id != seen[0].cluster_id) {
        return Err(Error::MixedClusters(format!(
            "{} is in cluster {:x}, {} in cluster {:x}",
            seen[0].endpoint, seen[0].cluster_id, other.endpoint, other.cluster_id
        )));
    }
    let mut best = 0;
    for (i, s) in seen.iter().enumerate() {
        if s.revision > seen[best].revision {
            best = i;
        }
    }
    Ok(best)
}

/// HTTP/2 flow-control windows for the snapshot stream. With the defaults (64 KiB) etcd stops
/// after every 64 KiB until the client's window update arrives, which costs a wake-up and a few
/// syscalls per 64 KiB on both sides; a few MiB let the stream flow.
const STREAM_WINDOW: u32 = 4 << 20;
const CONNECTION_WINDOW: u32 = 8 << 20;

async fn connect(
    endpoint: &str,
    tls: Option<TlsOptions>,
    timeout: Duration,
) -> Result<Client, etcd_client::Error> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = if endpoint.contains("://") {
        endpoint.to_string()
    } else {
        format!("{scheme}://{endpoint}")
    };
    let mut builder = tonic::transport::Endpoint::from_shared(url)
        .map_err(|e| etcd_client::Error::InvalidArgs(e.to_string()))?
        .connect_timeout(timeout)
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW);
    if let Some(tls) = tls {
        builder = builder.tls_config(tls)?;
    }
    let channel = builder
        .connect_with_connector(crate::connector::buffered_tcp())
        .await?;
    // No request timeout: it would cut a long snapshot stream. Stalls are caught per chunk.
    Client::from_channel(
        etcd_client::Channel::Tonic(channel),
        Some(ConnectOptions::new()),
    )
    .await
}

/// Asks `endpoint` for its status, trying again while it cannot be reached (a refused or
/// reset connection: a member restarting, or a Service whose routes are still being set up)
/// until `timeout` has passed, as etcdctl's dial timeout does. Other failures (TLS, the
/// answer) end it at once.
async fn probe(endpoint: &str, tls: Option<TlsOptions>, timeout: Duration) -> Result<Member> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match probe_once(endpoint, tls.clone(), left).await {
            Err(Error::Unreachable { .. }) if left > RETRY_PAUSE * 2 => {
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            answer => return answer,
        }
    }
}

/// The pause between two tries of an endpoint that cannot be reached.
const RETRY_PAUSE: Duration = Duration::from_millis(250);

async fn probe_once(endpoint: &str, tls: Option<TlsOptions>, timeout: Duration) -> Result<Member> {
    let call = async {
        let mut client = connect(endpoint, tls, timeout).await?;
        let status = client.status().await?;
        Ok::<_, etcd_client::Error>((client, status))
    };
    let (client, status) = match tokio::time::timeout(timeout, call).await {
        Err(_) => {
            return Err(Error::Unreachable {
                endpoint: endpoint.to_string(),
                message: format!("no answer within {} s", timeout.as_secs()),
            });
        }
        Ok(result) => result.map_err(|e| classify(endpoint, &e))?,
    };
    let header = status.header();
    Ok(Member {
        endpoint: endpoint.to_string(),
        client,
        revision: header.map_or(0, |h| h.revision()),
        version: status.version().to_string(),
        cluster_id: header.map_or(0, |h| h.cluster_id()),
        member_id: header.map_or(0, |h| h.member_id()),
        db_size: status.db_size(),
    })
}

/// tonic hides the root cause in the source chain; walk it to tell TLS from network failures.
pub(crate) fn classify(endpoint: &str, err: &etcd_client::Error) -> Error {
    let mut message = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        message = format!("{message}: {cause}");
        source = cause.source();
    }
    let lower = message.to_lowercase();
    if lower.contains("certificate") || lower.contains("tls") || lower.contains("handshake") {
        Error::Tls {
            endpoint: endpoint.to_string(),
            message,
        }
    } else {
        Error::Unreachable {
            endpoint: endpoint.to_string(),
            message,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(endpoint: &str, revision: i64, cluster_id: u64) -> Seen<'_> {
        Seen {
            endpoint,
            revision,
            cluster_id,
        }
    }

    #[test]
    fn the_highest_revision_wins_and_ties_keep_the_first() {
        let members = [seen("a", 90, 7), seen("b", 100, 7), seen("c", 100, 7)];
        assert_eq!(most_up_to_date(&members).unwrap(), 1);
        assert_eq!(most_up_to_date(&members[..1]).unwrap(), 0);
    }

    #[test]
    fn members_of_different_clusters_are_refused() {
        let err = most_up_to_date(&[seen("a", 5, 0xa1), seen("b", 9, 0xb2)]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the endpoints belong to different etcd clusters (a is in cluster a1, b in cluster b2); \
             list the members of one cluster"
        );
    }
}
