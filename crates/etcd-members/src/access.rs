//! How an operator reaches etcd members: through their pod IPs, plain or with TLS.

use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use etcd_cluster::ClusterNames;
use etcd_cluster::naming::CLIENT_PORT;

use crate::tls::ClientTls;

/// Dial and request timeout for each member.
const MEMBER_TIMEOUT: Duration = Duration::from_secs(3);

/// How the operator reaches members: through their pod IPs (which work from inside and outside
/// the cluster), plain or with the operator Secret's client certificate. With TLS the member's
/// certificate is checked against its name ([`ClusterNames::server_name`]), as the IP is not in
/// it.
#[derive(Clone, Debug)]
pub struct Access {
    pub names: ClusterNames,
    pub tls: Option<ClientTls>,
}

impl Access {
    pub async fn connect(&self, member: &str, ip: &str) -> Result<Client, etcd_client::Error> {
        let mut options = ConnectOptions::new()
            .with_connect_timeout(MEMBER_TIMEOUT)
            .with_timeout(MEMBER_TIMEOUT);
        if let Some(tls) = self.tls.as_ref().filter(|_| self.names.client_tls) {
            options = options.with_tls(
                TlsOptions::new()
                    .ca_certificate(Certificate::from_pem(&tls.ca))
                    .identity(Identity::from_pem(&tls.cert, &tls.key))
                    .domain_name(self.names.server_name(member)),
            );
        }
        let url = format!("{}://{ip}:{CLIENT_PORT}", self.names.client_scheme());
        Client::connect([url], Some(options)).await
    }
}
