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

#[tokio::test]
async fn a_member_that_refuses_connections_for_a_moment_is_tried_again_within_the_dial_timeout() {
    let mut etcd = Etcd::start().await.unwrap();
    let endpoint = etcd.endpoint.clone();
    etcd.kill();
    // Refused now, serving again about 2 s later: a member restarting, or a Service whose
    // routes are still being set up when a backup starts.
    let back = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        etcd.restart().await.unwrap();
        etcd
    });
    let mut connection = EtcdConnection::new(vec![endpoint.clone()]);
    connection.dial_timeout = Duration::from_secs(30);
    let member = select_member(&connection)
        .await
        .unwrap_or_else(|e| panic!("{endpoint}: {e}"));
    assert_eq!(member.endpoint, endpoint);
    drop(back.await.unwrap());
}
