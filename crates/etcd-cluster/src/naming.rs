//! Names and URLs of a cluster's members, as coreos laid them out: member `<cluster>-<ordinal>`
//! (pod and claim named alike), hostname `<member>` under the headless Service `<cluster>`, so a
//! member's address is `<member>.<cluster>.<namespace>.svc<ClusterDomain>`; clients use the
//! Service `<cluster>-client`. Ordinals are never reused within a cluster, so a replaced member
//! never shares a name (or a stale peer URL) with the one it replaces.

/// Client and peer ports (etcd's defaults, as coreos used them).
pub const CLIENT_PORT: u16 = 2379;
pub const PEER_PORT: u16 = 2380;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterNames {
    pub cluster: String,
    pub namespace: String,
    /// coreos `ClusterDomain`, e.g. `.cluster.local`; empty leaves the name to the pods' DNS
    /// search path.
    pub cluster_domain: String,
    /// Peers speak TLS (coreos `member.peerSecret`).
    pub peer_tls: bool,
    /// Clients speak TLS (coreos `member.serverSecret`).
    pub client_tls: bool,
}

impl ClusterNames {
    /// Plain-text names; see [`ClusterNames::with_tls`].
    pub fn new(cluster: &str, namespace: &str, cluster_domain: Option<&str>) -> Self {
        let domain = cluster_domain.unwrap_or("").trim();
        let domain = match domain {
            "" => String::new(),
            d if d.starts_with('.') => d.to_string(),
            d => format!(".{d}"),
        };
        ClusterNames {
            cluster: cluster.to_string(),
            namespace: namespace.to_string(),
            cluster_domain: domain,
            peer_tls: false,
            client_tls: false,
        }
    }

    /// The same names with `https` peer and/or client URLs.
    pub fn with_tls(mut self, peer: bool, client: bool) -> Self {
        self.peer_tls = peer;
        self.client_tls = client;
        self
    }

    /// The name a member's serving certificate is checked against when it is reached by IP:
    /// `<member>.<cluster>.<namespace>.svc`, which coreos's required SAN
    /// `*.<cluster>.<namespace>.svc` covers.
    pub fn server_name(&self, member: &str) -> String {
        format!("{member}.{}.{}.svc", self.cluster, self.namespace)
    }

    pub fn member(&self, ordinal: u32) -> String {
        format!("{}-{ordinal}", self.cluster)
    }

    /// The ordinal of a member name of this cluster.
    pub fn ordinal(&self, member: &str) -> Option<u32> {
        let rest = member.strip_prefix(&self.cluster)?.strip_prefix('-')?;
        // Only plain decimal ordinals: `<cluster>-client` or another cluster's `<cluster>-x-1`
        // are not members.
        if rest.is_empty()
            || !rest.bytes().all(|b| b.is_ascii_digit())
            || rest.starts_with('0') && rest != "0"
        {
            return None;
        }
        rest.parse().ok()
    }

    /// The lowest ordinal above every one in `used` (names of pods, claims and members ever
    /// seen), so no name comes back.
    pub fn next_member<'a>(&self, used: impl IntoIterator<Item = &'a str>) -> String {
        let next = used
            .into_iter()
            .filter_map(|n| self.ordinal(n))
            .max()
            .map_or(0, |m| m + 1);
        self.member(next)
    }

    pub fn peer_service(&self) -> &str {
        &self.cluster
    }

    pub fn client_service(&self) -> String {
        format!("{}-client", self.cluster)
    }

    pub fn host(&self, member: &str) -> String {
        format!(
            "{member}.{}.{}.svc{}",
            self.cluster, self.namespace, self.cluster_domain
        )
    }

    pub fn peer_scheme(&self) -> &str {
        if self.peer_tls { "https" } else { "http" }
    }

    pub fn client_scheme(&self) -> &str {
        if self.client_tls { "https" } else { "http" }
    }

    pub fn peer_url(&self, member: &str) -> String {
        format!("{}://{}:{PEER_PORT}", self.peer_scheme(), self.host(member))
    }

    pub fn client_url(&self, member: &str) -> String {
        format!(
            "{}://{}:{CLIENT_PORT}",
            self.client_scheme(),
            self.host(member)
        )
    }

    /// The Service URL clients use.
    pub fn service_url(&self) -> String {
        format!(
            "{}://{}.{}.svc{}:{CLIENT_PORT}",
            self.client_scheme(),
            self.client_service(),
            self.namespace,
            self.cluster_domain
        )
    }

    /// The member a peer URL belongs to (its host's first label), if it is one of ours. Any
    /// cluster domain is accepted: a changed `ClusterDomain` must not make members strangers
    /// (which would read as lost quorum).
    pub fn member_of_peer_url(&self, url: &str) -> Option<String> {
        let host = url.split("://").nth(1)?.split([':', '/']).next()?;
        let member = host.split('.').next()?;
        let ours = host
            .strip_prefix(&format!("{member}.{}.{}.svc", self.cluster, self.namespace))
            .is_some_and(|domain| domain.is_empty() || domain.starts_with('.'));
        (ours && self.ordinal(member).is_some()).then(|| member.to_string())
    }

    /// etcd's `--initial-cluster` for these members: `name=peerURL,...`.
    pub fn initial_cluster<'a>(&self, members: impl IntoIterator<Item = &'a str>) -> String {
        members
            .into_iter()
            .map(|m| format!("{m}={}", self.peer_url(m)))
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_urls_and_ordinals() {
        let n = ClusterNames::new("example", "prod", Some("cluster.local"));
        assert_eq!(n.member(3), "example-3");
        assert_eq!(
            n.peer_url("example-3"),
            "http://example-3.example.prod.svc.cluster.local:2380"
        );
        assert_eq!(n.client_service(), "example-client");
        assert_eq!(
            n.service_url(),
            "http://example-client.prod.svc.cluster.local:2379"
        );
        assert_eq!(n.ordinal("example-12"), Some(12));
        for not_ours in [
            "example-client",
            "example-",
            "example-01",
            "other-1",
            "example-x-1",
        ] {
            assert_eq!(n.ordinal(not_ours), None, "{not_ours}");
        }
        assert_eq!(
            n.next_member(["example-0", "example-4", "example-client"]),
            "example-5"
        );
        assert_eq!(n.next_member([]), "example-0");
        assert_eq!(
            n.member_of_peer_url("http://example-4.example.prod.svc.cluster.local:2380"),
            Some("example-4".into())
        );
        assert_eq!(n.member_of_peer_url("http://10.0.0.1:2380"), None);
        // Another cluster domain (ClusterDomain changed): still ours; another namespace: not.
        assert_eq!(
            n.member_of_peer_url("http://example-4.example.prod.svc:2380"),
            Some("example-4".into())
        );
        assert_eq!(
            n.member_of_peer_url("http://example-4.example.other.svc.cluster.local:2380"),
            None
        );
        assert_eq!(
            n.member_of_peer_url("http://example-4.example.prod.svcx:2380"),
            None
        );
        assert_eq!(
            n.initial_cluster(["example-0", "example-1"]),
            "example-0=http://example-0.example.prod.svc.cluster.local:2380,example-1=http://example-1.example.prod.svc.cluster.local:2380"
        );
        let tls = ClusterNames::new("c", "ns", None).with_tls(true, true);
        assert_eq!(tls.client_url("c-0"), "https://c-0.c.ns.svc:2379");
        assert_eq!(tls.server_name("c-0"), "c-0.c.ns.svc");
        // Peer TLS alone (coreos allows a peerSecret without a serverSecret).
        let peer_only = ClusterNames::new("c", "ns", None).with_tls(true, false);
        assert_eq!(peer_only.peer_url("c-0"), "https://c-0.c.ns.svc:2380");
        assert_eq!(peer_only.client_url("c-0"), "http://c-0.c.ns.svc:2379");
        assert_eq!(
            peer_only.member_of_peer_url("https://c-0.c.ns.svc:2380"),
            Some("c-0".into())
        );
        assert_eq!(
            ClusterNames::new("c", "ns", Some(".cluster.local")).host("c-0"),
            "c-0.c.ns.svc.cluster.local"
        );
    }
}
