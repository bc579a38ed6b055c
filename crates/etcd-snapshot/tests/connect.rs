//! How endpoints are dialled (our own connector: host names, bare `host:port`, dead hosts).

use std::time::Duration;

use etcd_snapshot::{Error, EtcdConnection, select_member};
use testbed::Etcd;

#[tokio::test]
async fn members_named_by_host_name_or_without_a_scheme_are_reached() {
    let etcd = Etcd::start().await.unwrap();
    let port = etcd.endpoint.rsplit(':').next().unwrap();
    for endpoint in [
        format!("http://localhost:{port}"),
        format!("127.0.0.1:{port}"),
    ] {
        let member = select_member(&EtcdConnection::new(vec![endpoint.clone()]))
            .await
            .unwrap_or_else(|e| panic!("{endpoint}: {e}"));
        assert_eq!(member.endpoint, endpoint);
        assert!(
            member.revision > 0,
            "{endpoint}: revision {}",
            member.revision
        );
    }
}

#[tokio::test]
async fn an_unknown_host_is_reported_unreachable() {
    let mut connection = EtcdConnection::new(vec!["http://no-such-host.invalid:2379".into()]);
    connection.dial_timeout = Duration::from_secs(5);
    match select_member(&connection).await {
        Err(Error::Unreachable { endpoint, .. }) => {
            assert_eq!(endpoint, "http://no-such-host.invalid:2379")
        }
        other => panic!("expected Unreachable, got {:?}", other.map(|m| m.endpoint)),
    }
}
