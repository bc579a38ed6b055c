//! Leader election against a real API server: a holder cut off from it stops before a standby
//! takes over, and a clean release hands over at once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::config::KubeConfigOptions;
use operator_runtime::http::Health;
use operator_runtime::leader::{Leadership, LeaseConfig, acquire};
use testbed::kube::KubeTestbed;
use tokio_util::sync::CancellationToken;

const LEASE: &str = "fencing-test";

fn config(namespace: &str, identity: &str, duration_seconds: u64) -> LeaseConfig {
    LeaseConfig {
        name: LEASE.into(),
        namespace: namespace.into(),
        identity: identity.into(),
        duration_seconds,
    }
}

/// A client of `bed`'s API server whose every connection goes through a proxy the test can cut.
async fn client_through_proxy(bed: &KubeTestbed) -> (kube::Client, testbed::proxy::Partition) {
    let (kubeconfig, partition) = testbed::kube::partitioned_kubeconfig(&bed.kubeconfig)
        .await
        .unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    (kube::Client::try_from(config).unwrap(), partition)
}

/// Starts a standby in the background; it reports when it became leader.
fn standby(
    client: kube::Client,
    config: LeaseConfig,
) -> tokio::task::JoinHandle<(Instant, Leadership)> {
    tokio::spawn(async move {
        let health = Arc::new(Health::default());
        let leadership = acquire(client, &config, &health, &CancellationToken::new())
            .await
            .unwrap()
            .expect("not stopped");
        (Instant::now(), leadership)
    })
}

async fn holder(api: &Api<Lease>) -> Option<String> {
    api.get(LEASE).await.unwrap().spec.unwrap().holder_identity
}

/// Waits until the holder has renewed the Lease (its `renewTime` moved): the election runs.
async fn wait_for_a_renewal(api: &Api<Lease>) {
    let renew_time = |lease: Lease| lease.spec.and_then(|s| s.renew_time);
    let first = renew_time(api.get(LEASE).await.unwrap());
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if renew_time(api.get(LEASE).await.unwrap()) != first {
            return;
        }
    }
    panic!("the holder never renewed the Lease");
}

#[tokio::test]
async fn a_holder_cut_off_from_the_api_server_stops_before_a_standby_takes_over() {
    let bed = KubeTestbed::start().await.unwrap();
    let namespace = bed.namespace("fencing").await.unwrap();
    let api: Api<Lease> = Api::namespaced(bed.client.clone(), &namespace);
    let (cut_off, partition) = client_through_proxy(&bed).await;
    // Duration 6 s: renewals every 0.8 s, renew deadline 4 s.
    let holder_config = config(&namespace, "holder", 6);
    let stop = CancellationToken::new();
    let health = Arc::new(Health::default());
    let leadership = acquire(cut_off, &holder_config, &health, &stop)
        .await
        .unwrap()
        .unwrap();
    let standby = standby(bed.client.clone(), config(&namespace, "standby", 6));
    wait_for_a_renewal(&api).await;
    assert_eq!(holder(&api).await.as_deref(), Some("holder"));
    assert!(!standby.is_finished(), "the standby took a held Lease");

    partition.cut();
    let cut_at = Instant::now();
    // The standby takes the Lease 6 s after the last renewal; wait well beyond.
    let cut_off_stopped =
        tokio::time::timeout(Duration::from_secs(30), leadership.lost.cancelled());
    cut_off_stopped
        .await
        .expect("the cut-off holder never stopped");
    let stopped_at = Instant::now();
    assert!(stop.is_cancelled(), "losing the Lease stops the process");
    let (took_over_at, _standby_leadership) = standby.await.unwrap();

    assert!(
        stopped_at < took_over_at,
        "the cut-off holder stopped {:?} after the cut, the standby took over {:?} after it",
        stopped_at - cut_at,
        took_over_at - cut_at
    );
    // Its last renewal was before the cut: it stopped within the renew deadline of that.
    assert!(
        stopped_at - cut_at <= holder_config.renew_deadline() + Duration::from_secs(1),
        "stopped {:?} after the cut",
        stopped_at - cut_at
    );
    assert_eq!(holder(&api).await.as_deref(), Some("standby"));
}

#[tokio::test]
async fn a_clean_shutdown_hands_the_lease_over_at_once() {
    let bed = KubeTestbed::start().await.unwrap();
    let namespace = bed.namespace("release").await.unwrap();
    let api: Api<Lease> = Api::namespaced(bed.client.clone(), &namespace);
    // A long duration (30 s), which a standby would wait out without the release.
    let holder_config = config(&namespace, "holder", 30);
    let health = Arc::new(Health::default());
    let leadership = acquire(
        bed.client.clone(),
        &holder_config,
        &health,
        &CancellationToken::new(),
    )
    .await
    .unwrap()
    .unwrap();
    let standby = standby(bed.client.clone(), config(&namespace, "standby", 30));
    // Two renewals: the standby, which tries as often as the holder renews, has tried at
    // least once meanwhile.
    wait_for_a_renewal(&api).await;
    wait_for_a_renewal(&api).await;
    assert!(!standby.is_finished(), "the standby took a held Lease");

    let lost = leadership.lost.clone();
    let released_at = Instant::now();
    leadership.release().await;
    let (took_over_at, _) = standby.await.unwrap();
    assert!(!lost.is_cancelled(), "a release is not a loss");
    // Within a few retry periods (4 s each), far from the 30 s a standby waits for an expiry.
    assert!(
        took_over_at - released_at < Duration::from_secs(15),
        "took over {:?} after the release",
        took_over_at - released_at
    );
    assert_eq!(holder(&api).await.as_deref(), Some("standby"));
}
