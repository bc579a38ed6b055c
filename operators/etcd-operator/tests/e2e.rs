//! The operator binary against the kubelet bed, with real etcd member pods: the coreos example
//! cluster (on the bed's image and with claims) is created seed-first with learners joining,
//! keeps its data through scaling 3 -> 5 -> 3 and through a member pod being deleted, and an
//! operator killed in the middle of creation finishes the job after a restart; upgrades,
//! refusals, quorum loss, and the coreos scope annotation.

use std::process::{Command, Stdio};

use backup_api::EtcdCluster;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::{Api, ResourceExt};
use serde_json::json;
use testbed::kube::{KubeTestbed, wait_until};
use testbed::logs::logged_at;

mod common;
use common::*;

/// A member's addition is recorded (in flight).
fn adding(c: &EtcdCluster) -> bool {
    c.status
        .as_ref()
        .and_then(|s| s.membership_change.as_ref())
        .is_some_and(|m| m.action == "Add")
}

/// A pod of that name made again (not the one with `old_uid`) and ready.
fn made_again_and_ready(old_uid: Option<String>) -> impl Fn(&Pod) -> bool + Send + 'static {
    move |p: &Pod| {
        p.metadata.uid != old_uid
            && p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    }
}

/// `minAvailable` of the cluster's PodDisruptionBudget.
async fn min_available(kube: &KubeTestbed, ns: &str) -> i64 {
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(kube.client.clone(), ns);
    let budget = budgets.get("example-etcd-cluster").await.unwrap();
    match budget.spec.unwrap().min_available.unwrap() {
        IntOrString::Int(n) => n.into(),
        other => panic!("minAvailable {other:?}"),
    }
}

/// Every event in `ns`.
async fn events(kube: &KubeTestbed, ns: &str) -> Vec<k8s_openapi::api::events::v1::Event> {
    Api::namespaced(kube.client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

/// Runs an operator until `cluster` shows `what`, then kills it (a crash at that point).
async fn operator_killed_at<F>(
    kube: &KubeTestbed,
    ns: &str,
    clusters: &Api<EtcdCluster>,
    what: &str,
    done: F,
) where
    F: Fn(&EtcdCluster) -> bool + Send + 'static,
{
    let _operator = Operator::start(kube, ns);
    wait_until(clusters, "example-etcd-cluster", what, 120, done)
        .await
        .unwrap();
}

async fn resize(clusters: &Api<EtcdCluster>, size: i32) {
    let patch = json!({"spec": {"size": size}});
    clusters
        .patch(
            "example-etcd-cluster",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn creates_scales_and_heals_a_pvc_backed_cluster_keeping_its_data() {
    let Running {
        kube,
        ns,
        clusters,
        _report,
        _operator,
    } = running_cluster("etcd-op").await;
    let name = "example-etcd-cluster";
    assert_eq!(
        member_pods(&kube, &ns).await,
        [
            "example-etcd-cluster-0",
            "example-etcd-cluster-1",
            "example-etcd-cluster-2"
        ]
    );

    // Data written now must survive everything below.
    let mut client = member_client(&kube, &ns, "example-etcd-cluster-0").await;
    for i in 0..50 {
        client
            .put(format!("key-{i}"), format!("value-{i}"), None)
            .await
            .unwrap();
    }
    let list = client.member_list().await.unwrap();
    assert_eq!(list.members().len(), 3);
    assert!(list.members().iter().all(|m| !m.is_learner()));

    // A disruption budget that keeps quorum, in the policy version this server has.
    assert_eq!(min_available(&kube, &ns).await, 2);

    // 3 -> 5 -> 3.
    resize(&clusters, 5).await;
    wait_until(&clusters, name, "5 ready members", 240, converged(5))
        .await
        .unwrap();
    assert_eq!(min_available(&kube, &ns).await, 3);
    resize(&clusters, 3).await;
    wait_until(
        &clusters,
        name,
        "3 ready members after scaling down",
        240,
        converged(3),
    )
    .await
    .unwrap();
    let remaining = member_pods(&kube, &ns).await;
    assert_eq!(remaining.len(), 3, "{remaining:?}");

    // A deleted member pod comes back under its name, on its claim, with the data.
    let victim = remaining[1].clone();
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    let old_uid = pods.get(&victim).await.unwrap().metadata.uid;
    pods.delete(&victim, &DeleteParams::default())
        .await
        .unwrap();
    wait_until(
        &pods,
        &victim,
        "the deleted member back and ready",
        240,
        made_again_and_ready(old_uid),
    )
    .await
    .unwrap();
    wait_until(
        &clusters,
        name,
        "3 ready members after healing",
        240,
        converged(3),
    )
    .await
    .unwrap();
    let mut member = member_client(&kube, &ns, &victim).await;
    let options = etcd_client::GetOptions::new()
        .with_serializable()
        .with_prefix();
    let kvs = member.get("key-", Some(options.clone())).await.unwrap();
    assert_eq!(kvs.kvs().len(), 50, "the member restarted without its data");
    assert_eq!(member.member_list().await.unwrap().members().len(), 3);

    // Every member pod deleted at once (all nodes drained): quorum is gone until they are back,
    // and each member comes back on its claim with the data. The cluster is reported down
    // meanwhile, but no member is called dead (nor is a restore asked for).
    let drained_at = k8s_openapi::jiff::Timestamp::now();
    let before: Vec<_> = pods
        .list(&ListParams::default().labels("etcd_cluster=example-etcd-cluster"))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|p| (p.metadata.name.unwrap(), p.metadata.uid))
        .collect();
    for (member, _) in &before {
        pods.delete(member, &DeleteParams::default()).await.unwrap();
    }
    for (member, old_uid) in before {
        let back = made_again_and_ready(old_uid);
        wait_until(&pods, &member, "every member back after a drain", 240, back)
            .await
            .unwrap();
    }
    wait_until(
        &clusters,
        name,
        "3 ready members after a drain",
        240,
        converged(3),
    )
    .await
    .unwrap();
    for member in member_pods(&kube, &ns).await {
        let mut client = member_client(&kube, &ns, &member).await;
        let kvs = client.get("key-", Some(options.clone())).await.unwrap();
        assert_eq!(kvs.kvs().len(), 50, "{member} came back without its data");
    }
    let events = events(&kube, &ns).await;
    // When an event was last made: identical ones are counted in one object (a series).
    let last_seen = |e: &k8s_openapi::api::events::v1::Event| {
        let series = e.series.as_ref().map(|s| s.last_observed_time.0);
        series.or(e.event_time.as_ref().map(|t| t.0))
    };
    let since_drain = |reason: &str| -> Vec<String> {
        events
            .iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .filter(|e| last_seen(e).is_some_and(|t| t >= drained_at))
            .map(|e| e.note.clone().unwrap_or_default())
            .collect()
    };
    // The operator started each one again.
    let started = since_drain("MemberStarted");
    for member in member_pods(&kube, &ns).await {
        assert!(
            started
                .iter()
                .any(|n| n.contains(&format!("pod {member} "))),
            "{member} was not started again after the drain: {started:?}"
        );
    }
    let lost = since_drain("QuorumLost");
    assert!(
        !lost.is_empty(),
        "the drained cluster was not reported down"
    );
    assert!(
        lost.iter()
            .all(|n| n.contains("waiting for members to come back") && !n.contains("dead")),
        "a member coming back was reported dead: {lost:?}"
    );
    kube.delete_namespace(&ns).await.unwrap();
}

#[tokio::test]
async fn an_operator_killed_during_creation_finishes_it_after_a_restart() {
    let (kube, ns, _report) = testbed::cluster::test_namespace("etcd-op-restart").await;
    let clusters: Api<EtcdCluster> = Api::namespaced(kube.client.clone(), &ns);
    clusters
        .create(&PostParams::default(), &example(3))
        .await
        .unwrap();
    let name = "example-etcd-cluster";
    {
        let _operator = Operator::start(&kube, &ns);
        // Killed as soon as the second member's addition is recorded (after the seed).
        wait_until(&clusters, name, "a member addition in flight", 240, adding)
            .await
            .unwrap();
    }
    let _operator = Operator::start(&kube, &ns);
    wait_until(
        &clusters,
        name,
        "3 ready members after the restart",
        240,
        converged(3),
    )
    .await
    .unwrap();
    let mut client = member_client(&kube, &ns, "example-etcd-cluster-0").await;
    let members = client.member_list().await.unwrap();
    assert_eq!(
        members.members().len(),
        3,
        "no phantom member: {:?}",
        members.members()
    );
    assert_eq!(member_pods(&kube, &ns).await.len(), 3);
    kube.delete_namespace(&ns).await.unwrap();
}

async fn set_version(clusters: &Api<EtcdCluster>, version: &str) {
    let patch = json!({"spec": {"version": version}});
    clusters
        .patch(
            "example-etcd-cluster",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();
}

fn degraded_reason(c: &EtcdCluster) -> Option<String> {
    condition_reason(c, "Degraded")
}

fn progressing_reason(c: &EtcdCluster) -> Option<String> {
    condition_reason(c, "Progressing")
}

fn condition_reason(c: &EtcdCluster, type_: &str) -> Option<String> {
    condition(c, type_)?.reason.clone()
}

fn condition_message(c: &EtcdCluster, type_: &str) -> Option<String> {
    condition(c, type_)?.message.clone()
}

fn condition<'a>(c: &'a EtcdCluster, type_: &str) -> Option<&'a backup_api::ClusterCondition> {
    c.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// Sets the cluster's version to `version` while a client writes through every member, waits
/// until every member runs it, and checks that writes went on throughout (the longest stretch
/// without a successful write under 3 s) and that each member's pod, claim and etcd say
/// `version`. Returns each member's pod uid before and after.
async fn upgrade_while_writing(
    kube: &KubeTestbed,
    ns: &str,
    clusters: &Api<EtcdCluster>,
    version: &str,
) -> Vec<(String, String)> {
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(kube.client.clone(), ns);
    let uids = |pods: Vec<Pod>| -> Vec<String> {
        pods.into_iter().filter_map(|p| p.metadata.uid).collect()
    };
    let mut before = Vec::new();
    for pod in member_pods(kube, ns).await {
        before.push(pods.get(&pod).await.unwrap());
    }
    let writer = Writer::start(kube, ns, "during-upgrade").await;

    set_version(clusters, version).await;
    let upgraded = {
        let version = version.to_string();
        move |c: &EtcdCluster| {
            converged(3)(c)
                && c.status.as_ref().and_then(|s| s.current_version.as_deref())
                    == Some(version.as_str())
        }
    };
    let what = format!("every member on {version}");
    wait_until(clusters, "example-etcd-cluster", &what, 300, upgraded)
        .await
        .unwrap();
    let (longest, writes) = writer.stop().await;
    eprintln!("upgrade to {version}: {writes} writes, longest stretch without one {longest:?}");
    assert!(writes > 20, "only {writes} writes succeeded");
    // At most an election (1 s by default) plus the client's 2 s request timeout before it
    // tries another member; measured here: 0.1 to 0.45 s.
    assert!(
        longest < std::time::Duration::from_secs(3),
        "writes refused for {longest:?}"
    );
    let mut after = Vec::new();
    for pod in member_pods(kube, ns).await {
        let mut client = member_client(kube, ns, &pod).await;
        let status = client.status().await;
        let status = status.unwrap_or_else(|e| panic!("{pod} gives no status: {e:?}"));
        assert_eq!(status.version(), version, "{pod}");
        let made = pods.get(&pod).await.unwrap();
        let image = made.spec.clone().unwrap().containers[0].image.clone();
        assert_eq!(image, Some(format!("localhost/etcd:v{version}")));
        // The data's version, which a member restarting on it gets, and the newest version
        // that ran on it, which it is never moved back from.
        let claim = claims.get(&pod).await.unwrap();
        assert_eq!(claim.annotations()["etcd.version"], version, "{pod}");
        assert_eq!(claim.annotations()["etcd.version.ran"], version, "{pod}");
        after.push(made);
    }
    uids(before).into_iter().zip(uids(after)).collect()
}

/// Whether etcd's metrics on member pod `name` say both corruption checks are on (3.6 and
/// later report their feature gates).
async fn corruption_checks_on(kube: &KubeTestbed, ns: &str, name: &str) -> bool {
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    let ip = testbed::cluster::pod_ip(&pods, name).await;
    let (_, metrics) = testbed::http_get(&ip, 8080, "/metrics").await.unwrap();
    ["InitialCorruptCheck", "CompactHashCheck"]
        .iter()
        .all(|gate| {
            metrics.lines().any(|l| {
                l.starts_with("etcd_server_feature_enabled{")
                    && l.contains(&format!("name=\"{gate}\""))
                    && l.ends_with(" 1")
            })
        })
}

#[tokio::test]
async fn rolls_3_4_to_3_5_one_member_at_a_time_while_a_client_writes_and_refuses_a_downgrade() {
    let Running {
        kube,
        ns,
        clusters,
        _report,
        _operator,
    } = running_cluster("etcd-op-upgrade").await;
    let name = "example-etcd-cluster";

    upgrade_while_writing(&kube, &ns, &clusters, "3.5.33").await;
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(kube.client.clone(), &ns);

    // A downgrade is refused with the cause, and no member is touched.
    set_version(&clusters, "3.4.23").await;
    let refused = |c: &EtcdCluster| progressing_reason(c).as_deref() == Some("UpgradeRefused");
    let cluster = wait_until(&clusters, name, "the downgrade refused", 60, refused)
        .await
        .unwrap();
    let message = cluster
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Progressing")
        .unwrap()
        .message
        .unwrap();
    assert!(message.contains("downgrade"), "{message}");
    for pod in member_pods(&kube, &ns).await {
        let image = pods.get(&pod).await.unwrap().spec.unwrap().containers[0]
            .image
            .clone();
        assert_eq!(
            image.as_deref(),
            Some("localhost/etcd:v3.5.33"),
            "{pod} was touched"
        );
    }

    // With the downgrade still refused, a member whose pod and volume are lost is replaced
    // by one at the version the cluster runs, not at the refused spec version.
    let lost = "example-etcd-cluster-1";
    claims.delete(lost, &DeleteParams::default()).await.unwrap();
    pods.delete(lost, &DeleteParams::default()).await.unwrap();
    let replaced = |c: &EtcdCluster| {
        c.status
            .as_ref()
            .and_then(|s| s.members.as_ref())
            .and_then(|m| m.ready.as_ref())
            .is_some_and(|ready| {
                ready.len() == 3 && ready.iter().all(|m| m != "example-etcd-cluster-1")
            })
    };
    wait_until(&clusters, name, "the lost member replaced", 240, replaced)
        .await
        .unwrap();
    let members = member_pods(&kube, &ns).await;
    assert_eq!(members.len(), 3, "{members:?}");
    for pod in members {
        let image = pods.get(&pod).await.unwrap().spec.unwrap().containers[0]
            .image
            .clone();
        assert_eq!(image.as_deref(), Some("localhost/etcd:v3.5.33"), "{pod}");
    }
    kube.delete_namespace(&ns).await.unwrap();
}

/// The current lines, one minor at a time: 3.5 -> 3.6 -> 3.7 with a client writing. 3.4 and
/// 3.5 spell the corruption checks as experimental flags, 3.6 and later as feature gates, so at
/// 3.5 -> 3.6 each member gets a new pod on its claim (3.7 would ignore the old spelling); at
/// 3.6 -> 3.7 each moves in place. Skipping 3.6 is refused first, with nothing touched.
#[tokio::test]
async fn rolls_3_5_to_3_6_to_3_7_with_the_checks_on_and_refuses_skipping_a_minor() {
    let Running {
        kube,
        ns,
        clusters,
        _report,
        _operator,
    } = running_cluster_at("etcd-op-lines", "3.5.33").await;
    let name = "example-etcd-cluster";
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    let image_of = |pod: Pod| pod.spec.unwrap().containers[0].image.clone().unwrap();

    // 3.5.33 -> 3.7.3 skips a minor: refused, nothing touched (no image is needed for that).
    set_version(&clusters, "3.7.3").await;
    let refused = |c: &EtcdCluster| progressing_reason(c).as_deref() == Some("UpgradeRefused");
    wait_until(&clusters, name, "3.5 -> 3.7 refused", 60, refused)
        .await
        .unwrap();
    for pod in member_pods(&kube, &ns).await {
        assert_eq!(
            image_of(pods.get(&pod).await.unwrap()),
            "localhost/etcd:v3.5.33"
        );
    }

    let moves = upgrade_while_writing(&kube, &ns, &clusters, "3.6.16").await;
    for (before, after) in &moves {
        assert_ne!(before, after, "a new pod for the feature gates' spelling");
    }
    let moves = upgrade_while_writing(&kube, &ns, &clusters, "3.7.3").await;
    for (before, after) in &moves {
        assert_eq!(before, after, "moved in place: the spelling is the same");
    }
    for pod in member_pods(&kube, &ns).await {
        assert!(corruption_checks_on(&kube, &ns, &pod).await, "{pod}");
    }
    let mut client = member_client(&kube, &ns, "example-etcd-cluster-0").await;
    let written = client.get("during-upgrade", None).await.unwrap();
    assert_eq!(written.kvs().len(), 1, "the writes survived both upgrades");

    // etcd raises CORRUPT (here through its API, as its compaction hash check would): the
    // cluster is Degraded with the cause and what to do, a Warning says so, and quorum is not
    // taken for lost; disarmed, it is healthy again.
    use etcd_client::{AlarmAction, AlarmOptions, AlarmType};
    let id = client.status().await.unwrap().header().unwrap().member_id();
    let on_member = || {
        let mut options = AlarmOptions::new();
        options.with_member(id);
        Some(options)
    };
    client
        .alarm(AlarmAction::Activate, AlarmType::Corrupt, on_member())
        .await
        .unwrap();
    let degraded_by =
        |reason: &'static str| move |c: &EtcdCluster| degraded_reason(c).as_deref() == Some(reason);
    let cluster = wait_until(
        &clusters,
        name,
        "Degraded by the alarm",
        60,
        degraded_by("EtcdAlarm"),
    )
    .await
    .unwrap();
    let status = cluster.status.unwrap();
    let available = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Available");
    assert_eq!(
        available.unwrap().status,
        "True",
        "not taken for a lost quorum"
    );
    let degraded = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Degraded");
    let message = degraded.unwrap().message.clone().unwrap();
    assert!(
        message.contains("CORRUPT") && message.contains("alarm disarm"),
        "{message}"
    );
    let warned = events(&kube, &ns).await.into_iter().filter(|e| {
        e.type_.as_deref() == Some("Warning") && e.reason.as_deref() == Some("EtcdAlarm")
    });
    assert!(warned.count() > 0);
    client
        .alarm(AlarmAction::Deactivate, AlarmType::Corrupt, on_member())
        .await
        .unwrap();
    wait_until(
        &clusters,
        name,
        "healthy again",
        60,
        degraded_by("AllHealthy"),
    )
    .await
    .unwrap();
    kube.delete_namespace(&ns).await.unwrap();
}

/// Issue 27: an upgrade to the next minor from a patch below the minimum for it (3.5.32
/// before 3.6, 3.6.11 before 3.7) is refused, naming the patch to go to, and no member is
/// touched; going to a later patch first is accepted.
async fn refused_below_the_minimum_then_patched(
    prefix: &str,
    from: &str,
    next_minor: &str,
    minimum: &str,
    patch: &str,
) {
    let Running {
        kube,
        ns,
        clusters,
        _report,
        _operator,
    } = running_cluster_at(prefix, from).await;
    let name = "example-etcd-cluster";
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    let before = pod_identities(&pods).await;
    set_version(&clusters, next_minor).await;
    let refused = |c: &EtcdCluster| progressing_reason(c).as_deref() == Some("UpgradeRefused");
    let what = format!("{from} -> {next_minor} refused");
    let refusal = wait_until(&clusters, name, &what, 60, refused)
        .await
        .unwrap();
    let message = condition_message(&refusal, "Progressing").unwrap_or_default();
    assert!(message.contains(minimum), "{message}");
    assert!(message.contains("no member was touched"), "{message}");
    assert_eq!(pod_identities(&pods).await, before, "a member was touched");
    let image = format!("localhost/etcd:v{from}");
    for pod in before.keys() {
        let pod = pods.get(pod).await.unwrap();
        assert_eq!(
            pod.spec.unwrap().containers[0].image.as_deref(),
            Some(image.as_str())
        );
    }
    let warned = events(&kube, &ns).await.into_iter().any(|e| {
        e.type_.as_deref() == Some("Warning")
            && e.reason.as_deref() == Some("UpgradeRefused")
            && e.note.as_deref().is_some_and(|n| n.contains(minimum))
    });
    assert!(warned, "no Warning names the patch to go to");
    // The patch first: accepted, in place.
    upgrade_while_writing(&kube, &ns, &clusters, patch).await;

    kube.delete_namespace(&ns).await.unwrap();
}

#[tokio::test]
async fn upgrades_to_3_6_from_below_3_5_32_are_refused_naming_it() {
    refused_below_the_minimum_then_patched(
        "etcd-op-patch-35",
        "3.5.21",
        "3.6.16",
        "3.5.32",
        "3.5.33",
    )
    .await;
}

#[tokio::test]
async fn upgrades_to_3_7_from_below_3_6_11_are_refused_naming_it() {
    refused_below_the_minimum_then_patched("etcd-op-patch", "3.6.10", "3.7.3", "3.6.11", "3.6.16")
        .await;
}

/// A member whose data differs from its peers' (one byte of a value flipped in its database
/// while its pod was down) fails etcd's initial corruption check, on by default: the cluster
/// is Degraded with that cause and a Warning, the member is kept as it is (not replaced, its
/// claim untouched), and replacing it as the status says (claim, then pod) heals the cluster.
#[tokio::test]
async fn a_member_whose_data_differs_is_reported_and_kept_for_a_human() {
    let Running {
        kube,
        ns,
        clusters,
        _report,
        _operator,
    } = running_cluster_at("etcd-op-corrupt", "3.7.3").await;
    let name = "example-etcd-cluster";
    let member = "example-etcd-cluster-1";
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(kube.client.clone(), &ns);
    let mut client = member_client(&kube, &ns, "example-etcd-cluster-0").await;
    let value = "a-value-whose-byte-is-flipped";
    client.put("/flipped", value, None).await.unwrap();

    // Held by the user while the member's database is changed under it.
    let pause = |paused: bool| json!({"spec": {"paused": paused}});
    let params = PatchParams::default();
    clusters
        .patch(name, &params, &Patch::Merge(pause(true)))
        .await
        .unwrap();
    let paused = |c: &EtcdCluster| {
        c.status
            .as_ref()
            .is_some_and(|s| s.control_paused == Some(true))
    };
    wait_until(&clusters, name, "paused", 60, paused)
        .await
        .unwrap();
    let old = pods.get(member).await.unwrap().metadata.uid;
    pods.delete(member, &DeleteParams::default()).await.unwrap();
    await_condition(
        pods.clone(),
        member,
        kube::runtime::conditions::is_deleted(&old.clone().unwrap()),
    )
    .await
    .unwrap();
    // The image's shell is busybox, whose applets are called by name: the value's offsets from
    // `strings -t d`, one byte of each copy overwritten in place.
    let flip = format!(
        "db=/var/etcd/data/member/snap/db; \
         for at in $(busybox strings -t d $db | busybox awk -v v={value} \
           'match($0, /^ *[0-9]+ /) {{ i = index(substr($0, RLENGTH + 1), v); if (i) print $1 + i - 1 }}'); do \
           printf X | busybox dd of=$db bs=1 seek=$at conv=notrunc 2>/dev/null; done; \
         busybox grep -c {value} $db && exit 1 || exit 0"
    );
    let tamper = json!({
        "metadata": {"name": "tamper"},
        "spec": {"restartPolicy": "Never",
            "containers": [{"name": "sh", "image": "localhost/etcd:v3.4.23",
                "imagePullPolicy": "Never", "command": ["sh", "-c", flip],
                "volumeMounts": [{"name": "data", "mountPath": "/var/etcd"}]}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": member}}]},
    });
    testbed::cluster::run_once(&pods, tamper, 120).await;
    pods.delete("tamper", &DeleteParams::default())
        .await
        .unwrap();
    let claim_uid = claims.get(member).await.unwrap().metadata.uid;
    clusters
        .patch(name, &params, &Patch::Merge(pause(false)))
        .await
        .unwrap();

    // Reported, with what to do.
    let differs = |c: &EtcdCluster| degraded_reason(c).as_deref() == Some("MemberDataDiffers");
    let cluster = wait_until(&clusters, name, "the member's data reported", 240, differs)
        .await
        .unwrap();
    let degraded = cluster.status.unwrap().conditions.unwrap();
    let message = degraded
        .iter()
        .find(|c| c.type_ == "Degraded")
        .unwrap()
        .message
        .clone();
    let message = message.unwrap();
    assert!(
        message.starts_with(member) && message.contains("delete its claim"),
        "{message}"
    );
    let warnings: Vec<_> = events(&kube, &ns)
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("MemberDataDiffers"))
        .collect();
    assert!(!warnings.is_empty());
    // Kept: the same claim, still a member of etcd.
    assert_eq!(claims.get(member).await.unwrap().metadata.uid, claim_uid);
    let list = client.member_list().await.unwrap();
    assert!(
        list.members()
            .iter()
            .any(|m| m.name() == member || m.name().is_empty())
    );
    assert_eq!(list.members().len(), 3);

    // The remedy the status gives: the claim, then the pod; the member is made again from the
    // others, and the value is the one written.
    claims
        .delete(member, &DeleteParams::default())
        .await
        .unwrap();
    pods.delete(member, &DeleteParams::default()).await.unwrap();
    let healed =
        |c: &EtcdCluster| converged(3)(c) && degraded_reason(c).as_deref() == Some("AllHealthy");
    wait_until(&clusters, name, "healed", 300, healed)
        .await
        .unwrap();
    for pod in member_pods(&kube, &ns).await {
        let mut client = member_client(&kube, &ns, &pod).await;
        let got = client.get("/flipped", None).await.unwrap();
        assert_eq!(got.kvs()[0].value_str().unwrap(), value, "{pod}");
    }
    kube.delete_namespace(&ns).await.unwrap();
}

/// coreos's scope annotation, with the shipped cluster-wide deployment: `deploy/cluster-wide/`
/// runs in-cluster from its image (two replicas, its ClusterRole checked live: no request
/// refused) and manages the annotated cluster in another namespace, while the cluster without
/// the annotation beside it is left to a namespaced operator.
#[tokio::test]
async fn cluster_wide_and_namespaced_operators_split_clusters_by_the_scope_annotation() {
    use k8s_openapi::api::apps::v1::Deployment;

    let (kube, ns, _report) = testbed::cluster::test_namespace("etcd-op-wide").await;
    let deploy = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/cluster-wide");
    let manifests = testbed::cluster::deploy_manifests(deploy.as_ref(), &ns).unwrap();
    kube.apply(&manifests, &ns).await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(kube.client.clone(), &ns);
    let ready = |d: &Deployment| d.status.as_ref().and_then(|s| s.ready_replicas) == Some(2);
    wait_until(
        &deployments,
        "etcd-operator-cluster-wide",
        "2 ready operator replicas",
        180,
        ready,
    )
    .await
    .unwrap();

    let clusters_ns = kube.namespace("etcd-op-scope").await.unwrap();
    let _clusters_report = kube.report_on_failure(&clusters_ns);
    let clusters: Api<EtcdCluster> = Api::namespaced(kube.client.clone(), &clusters_ns);
    let mut wide = example(1);
    wide.metadata.name = Some("wide".into());
    wide.annotations_mut().insert(
        "etcd.database.coreos.com/scope".into(),
        "clusterwide".into(),
    );
    let mut local = example(1);
    local.metadata.name = Some("local".into());
    for cluster in [&wide, &local] {
        clusters
            .create(&PostParams::default(), cluster)
            .await
            .unwrap();
    }
    wait_until(
        &clusters,
        "wide",
        "the annotated cluster running",
        240,
        converged(1),
    )
    .await
    .unwrap();
    // The cluster-wide operator has reconciled; the other cluster is not its own.
    let untouched = clusters.get("local").await.unwrap();
    assert!(untouched.status.is_none(), "{:?}", untouched.status);
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &clusters_ns);
    let local_pods = pods
        .list(&ListParams::default().labels("etcd_cluster=local"))
        .await
        .unwrap();
    assert!(local_pods.items.is_empty());
    let _namespaced = Operator::start(&kube, &clusters_ns);
    wait_until(
        &clusters,
        "local",
        "the other cluster running",
        240,
        converged(1),
    )
    .await
    .unwrap();

    testbed::cluster::assert_leader_and_no_refusals(
        &kube.kubeconfig,
        &ns,
        "app.kubernetes.io/name=etcd-operator-cluster-wide",
    );
    kube.delete_namespace(&clusters_ns).await.unwrap();
    kube.delete_namespace(&ns).await.unwrap();
}

#[tokio::test]
async fn bad_input_and_quorum_loss_are_reported_and_nothing_is_deleted() {
    let Running {
        kube,
        ns,
        clusters,
        _report,
        _operator,
    } = running_cluster("etcd-op-quorum").await;
    let name = "example-etcd-cluster";

    // A version that is not semver: a condition and a Warning, the members untouched.
    set_version(&clusters, "latest").await;
    let invalid = |c: &EtcdCluster| progressing_reason(c).as_deref() == Some("InvalidSpec");
    wait_until(&clusters, name, "the invalid version reported", 60, invalid)
        .await
        .unwrap();
    assert_eq!(member_pods(&kube, &ns).await.len(), 3);
    set_version(&clusters, "3.4.23").await;
    wait_until(&clusters, name, "3 ready members again", 120, converged(3))
        .await
        .unwrap();

    // Two of three members lose pod and volume: quorum is gone.
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(kube.client.clone(), &ns);
    for member in ["example-etcd-cluster-1", "example-etcd-cluster-2"] {
        claims
            .delete(member, &DeleteParams::default())
            .await
            .unwrap();
        pods.delete(member, &DeleteParams::default()).await.unwrap();
    }
    let lost = |c: &EtcdCluster| {
        c.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.type_ == "Available"
                        && c.status == "False"
                        && c.reason.as_deref() == Some("QuorumLost")
                })
            })
    };
    let cluster = wait_until(&clusters, name, "Available=False/QuorumLost", 120, lost)
        .await
        .unwrap();
    let available = cluster
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Available")
        .unwrap();
    let message = available.message.unwrap();
    assert!(
        message.contains("example-etcd-cluster-1") && message.contains("example-etcd-cluster-2"),
        "{message}"
    );
    let events = events(&kube, &ns).await;
    let warning = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("QuorumLost"))
        .expect("a QuorumLost event");
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    assert!(
        warning
            .note
            .as_deref()
            .unwrap_or("")
            .contains("EtcdRestore"),
        "{warning:?}"
    );
    // The surviving member and its data are untouched; nothing was re-created over the loss.
    // The kubelet removes a deleted pod only after its container stopped and its volumes were
    // released; with eleven tests on two cores that once took over a minute (containers already
    // terminated), so the bound is generous: the point is that they go, not how fast.
    for member in ["example-etcd-cluster-1", "example-etcd-cluster-2"] {
        let gone = await_condition(pods.clone(), member, |p: Option<&Pod>| p.is_none());
        tokio::time::timeout(std::time::Duration::from_secs(180), gone)
            .await
            .unwrap()
            .unwrap();
    }
    // Status has caught up with the pods being gone, and still says QuorumLost.
    // The survivor alone is listed (ready or not: without quorum its /health fails).
    let deleted = |c: &EtcdCluster| {
        c.status
            .as_ref()
            .and_then(|s| s.members.as_ref())
            .is_some_and(|m| {
                let listed: Vec<&String> = m
                    .ready
                    .iter()
                    .flatten()
                    .chain(m.unready.iter().flatten())
                    .collect();
                listed == ["example-etcd-cluster-0"]
            })
    };
    wait_until(
        &clusters,
        name,
        "status without the deleted pods",
        120,
        move |c: &EtcdCluster| lost(c) && deleted(c),
    )
    .await
    .unwrap();
    assert_eq!(member_pods(&kube, &ns).await, ["example-etcd-cluster-0"]);
    assert!(
        claims
            .get_opt("example-etcd-cluster-0")
            .await
            .unwrap()
            .is_some()
    );
    let mut survivor = member_client(&kube, &ns, "example-etcd-cluster-0").await;
    assert_eq!(
        survivor.member_list().await.unwrap().members().len(),
        3,
        "a member was removed without quorum"
    );
    kube.delete_namespace(&ns).await.unwrap();
}

/// `TLS.static` with coreos's Secret and key names: members speak TLS to peers and clients and
/// require client certificates; the operator reaches them with the operator Secret. A missing
/// Secret is reported (no pod made that could not start) until it is created.
#[tokio::test]
async fn a_tls_cluster_with_a_secret_created_late() {
    let (kube, ns, _report) = testbed::cluster::test_namespace("etcd-op-tls").await;
    let name = "example-etcd-cluster";
    // Certificates as coreos documents them; the operator's Secret comes later.
    let tls = testbed::cluster::static_tls(&kube, &ns, name, false).await;

    // On the 3.6 line, so that each line runs somewhere: 3.4 and 3.5 (upgrades), 3.6 (here),
    // 3.7 (upgrades, corruption).
    let mut cluster = example(3);
    cluster.spec.version = Some("3.6.16".into());
    cluster.spec.tls = serde_json::from_value(json!({"static": {
        "member": {"peerSecret": "etcd-peer-tls", "serverSecret": "etcd-server-tls"},
        "operatorSecret": "etcd-client-tls",
    }}))
    .unwrap();
    let clusters: Api<EtcdCluster> = Api::namespaced(kube.client.clone(), &ns);
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    let _operator = Operator::start(&kube, &ns);
    let missing = |c: &EtcdCluster| {
        progressing_reason(c).as_deref() == Some("InvalidSpec")
            && c.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c.message
                            .as_deref()
                            .unwrap_or("")
                            .contains("etcd-client-tls")
                    })
                })
    };
    wait_until(&clusters, name, "the missing Secret reported", 60, missing)
        .await
        .unwrap();
    assert!(member_pods(&kube, &ns).await.is_empty());

    testbed::cluster::create_client_tls(&kube, &ns, &tls).await;
    wait_until(&clusters, name, "3 ready TLS members", 300, converged(3))
        .await
        .unwrap();

    // A client with the operator's certificate works; one without a certificate does not.
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    let member = "example-etcd-cluster-1";
    let ip = testbed::cluster::pod_ip(&pods, member).await;
    let options = |identity: bool| Some(tls.client_options(member, name, &ns, identity));
    let url = format!("https://{ip}:2379");
    let mut client = etcd_client::Client::connect([url.clone()], options(true))
        .await
        .unwrap();
    client.put("over-tls", "yes", None).await.unwrap();
    let list = client.member_list().await.unwrap();
    assert_eq!(list.members().len(), 3);
    for m in list.members() {
        assert!(m.peer_urls()[0].starts_with("https://"), "{m:?}");
        assert!(m.client_urls()[0].starts_with("https://"), "{m:?}");
    }
    let anonymous = async {
        let mut c = etcd_client::Client::connect([url], options(false)).await?;
        c.get("over-tls", None).await
    };
    assert!(
        anonymous.await.is_err(),
        "a client without a certificate was served"
    );
    kube.delete_namespace(&ns).await.unwrap();
}

/// An upgrade to an image that does not exist: the first member moved fails to pull it, the
/// upgrade pauses with the kubelet's cause (no other member moves), and setting the version
/// back moves that member back onto its untouched data.
#[tokio::test]
async fn an_upgrade_whose_image_is_missing_pauses_with_the_cause_and_can_go_back() {
    let Running {
        kube,
        ns,
        clusters,
        _report,
        _operator,
    } = running_cluster("etcd-op-upgrade-fail").await;
    let name = "example-etcd-cluster";
    let mut client = member_client(&kube, &ns, "example-etcd-cluster-0").await;
    client.put("before", "upgrade", None).await.unwrap();

    set_version(&clusters, "3.5.99").await;
    let failed = |c: &EtcdCluster| progressing_reason(c).as_deref() == Some("UpgradeFailed");
    let cluster = wait_until(&clusters, name, "the upgrade paused", 180, failed)
        .await
        .unwrap();
    let message = cluster
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Progressing")
        .unwrap()
        .message
        .unwrap();
    assert!(
        message.contains("ImagePull") || message.contains("ErrImagePull"),
        "{message}"
    );
    assert!(message.contains("back to 3.4.23"), "{message}");
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    let mut moved = Vec::new();
    for pod in member_pods(&kube, &ns).await {
        if pods.get(&pod).await.unwrap().annotations()["etcd.version"] == "3.5.99" {
            moved.push(pod);
        }
    }
    assert_eq!(
        moved.len(),
        1,
        "only one member moves before it runs: {moved:?}"
    );
    let events = events(&kube, &ns).await;
    assert!(
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some("UpgradeFailed")
                && e.type_.as_deref() == Some("Warning")),
        "no UpgradeFailed Warning"
    );
    // Its pod deleted meanwhile: it comes back as it was moved (the claim records both
    // versions), so going back is still offered.
    let old_uid = pods.get(&moved[0]).await.unwrap().metadata.uid;
    pods.delete(&moved[0], &DeleteParams::default())
        .await
        .unwrap();
    let recreated = move |p: &Pod| {
        p.metadata.uid != old_uid
            && p.annotations()
                .get("etcd.version.upgraded-from")
                .map(String::as_str)
                == Some("3.4.23")
    };
    wait_until(
        &pods,
        &moved[0],
        "the moved member recreated",
        120,
        recreated,
    )
    .await
    .unwrap();

    set_version(&clusters, "3.4.23").await;
    wait_until(
        &clusters,
        name,
        "3 ready members back on 3.4.23",
        180,
        converged(3),
    )
    .await
    .unwrap();
    for pod in member_pods(&kube, &ns).await {
        let pod = pods.get(&pod).await.unwrap();
        assert_eq!(pod.annotations()["etcd.version"], "3.4.23");
        assert!(!pod.annotations().contains_key("etcd.version.upgraded-from"));
        let image = pod.spec.unwrap().containers[0].image.clone();
        assert_eq!(image.as_deref(), Some("localhost/etcd:v3.4.23"));
    }
    let mut reverted = member_client(&kube, &ns, &moved[0]).await;
    let options = etcd_client::GetOptions::new().with_serializable();
    let kv = reverted.get("before", Some(options)).await.unwrap();
    assert_eq!(kv.kvs().len(), 1, "the reverted member lost its data");
    kube.delete_namespace(&ns).await.unwrap();
}

/// A member whose data cannot be used any more (its WAL lost underneath it) crash-loops on
/// restart; while the other two hold quorum it is removed and replaced by a new member that
/// syncs every key.
#[tokio::test]
async fn a_member_that_cannot_rejoin_on_its_data_is_replaced() {
    use k8s_openapi::api::core::v1::PersistentVolume;

    let Running {
        kube,
        ns,
        clusters,
        _report,
        _operator,
    } = running_cluster("etcd-op-replace").await;
    let name = "example-etcd-cluster";
    let mut client = member_client(&kube, &ns, "example-etcd-cluster-0").await;
    for i in 0..20 {
        client.put(format!("key-{i}"), "v", None).await.unwrap();
    }

    // The bed's volumes are host directories: lose the victim's WAL, then restart it.
    let victim = "example-etcd-cluster-1";
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(kube.client.clone(), &ns);
    let volume = claims
        .get(victim)
        .await
        .unwrap()
        .spec
        .unwrap()
        .volume_name
        .unwrap();
    let pv = Api::<PersistentVolume>::all(kube.client.clone())
        .get(&volume)
        .await
        .unwrap();
    let dir = pv.spec.unwrap().host_path.unwrap().path;
    let wal = std::path::Path::new(&dir).join("data/member/wal");
    assert!(wal.is_dir(), "{} is not the member's WAL", wal.display());
    std::fs::remove_dir_all(&wal).unwrap();
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    pods.delete(victim, &DeleteParams::default()).await.unwrap();

    let replaced = |c: &EtcdCluster| {
        converged(3)(c)
            && c.status
                .as_ref()
                .and_then(|s| s.members.as_ref())
                .and_then(|m| m.ready.as_ref())
                .is_some_and(|ready| ready.iter().all(|m| m != "example-etcd-cluster-1"))
    };
    wait_until(
        &clusters,
        name,
        "the crashing member replaced",
        300,
        replaced,
    )
    .await
    .unwrap();
    let events = events(&kube, &ns).await;
    let removal = events
        .iter()
        .find(|e| {
            e.reason.as_deref() == Some("MemberRemoved")
                && e.note.as_deref().unwrap_or("").contains(victim)
        })
        .expect("a MemberRemoved event for the victim");
    assert!(
        removal.note.as_deref().unwrap().contains("cannot rejoin"),
        "{removal:?}"
    );
    let members = member_pods(&kube, &ns).await;
    let newcomer = members
        .iter()
        .find(|m| !["example-etcd-cluster-0", "example-etcd-cluster-2"].contains(&m.as_str()))
        .unwrap();
    let mut fresh = member_client(&kube, &ns, newcomer).await;
    let options = etcd_client::GetOptions::new()
        .with_serializable()
        .with_prefix();
    assert_eq!(
        fresh.get("key-", Some(options)).await.unwrap().kvs().len(),
        20
    );
    assert!(
        claims.get_opt(victim).await.unwrap().is_none() || {
            // Deleted, perhaps still finalizing.
            claims
                .get(victim)
                .await
                .unwrap()
                .metadata
                .deletion_timestamp
                .is_some()
        }
    );
    kube.delete_namespace(&ns).await.unwrap();
}

/// The operator is killed in the middle of a scale-up, a scale-down and an upgrade step, and
/// each time a new one finishes the job: no phantom member, no member left behind.
#[tokio::test]
async fn an_operator_killed_while_scaling_or_upgrading_finishes_after_a_restart() {
    let Running {
        kube,
        ns,
        clusters,
        _report,
        _operator,
    } = running_cluster("etcd-op-restarts").await;
    let name = "example-etcd-cluster";
    drop(_operator);
    let in_flight = |action: &'static str| {
        move |c: &EtcdCluster| {
            c.status
                .as_ref()
                .and_then(|s| s.membership_change.as_ref())
                .is_some_and(|m| m.action == action)
        }
    };

    // Scale-up, killed once the addition is recorded.
    resize(&clusters, 5).await;
    operator_killed_at(
        &kube,
        &ns,
        &clusters,
        "an addition in flight",
        in_flight("Add"),
    )
    .await;
    let operator = Operator::start(&kube, &ns);
    wait_until(&clusters, name, "5 ready members", 300, converged(5))
        .await
        .unwrap();
    drop(operator);

    // Scale-down, killed once the removal is recorded.
    resize(&clusters, 3).await;
    operator_killed_at(
        &kube,
        &ns,
        &clusters,
        "a removal in flight",
        in_flight("Remove"),
    )
    .await;
    let operator = Operator::start(&kube, &ns);
    wait_until(&clusters, name, "3 ready members", 300, converged(3))
        .await
        .unwrap();
    drop(operator);
    let mut client = member_client(&kube, &ns, "example-etcd-cluster-0").await;
    assert_eq!(client.member_list().await.unwrap().members().len(), 3);
    assert_eq!(member_pods(&kube, &ns).await.len(), 3);

    // Upgrade, killed once the first member has been moved.
    set_version(&clusters, "3.5.33").await;
    let upgrading = |c: &EtcdCluster| progressing_reason(c).as_deref() == Some("Upgrading");
    operator_killed_at(&kube, &ns, &clusters, "an upgrade step", upgrading).await;
    let _operator = Operator::start(&kube, &ns);
    let upgraded = |c: &EtcdCluster| {
        converged(3)(c)
            && c.status.as_ref().and_then(|s| s.current_version.as_deref()) == Some("3.5.33")
    };
    wait_until(&clusters, name, "every member on 3.5.33", 300, upgraded)
        .await
        .unwrap();
    assert_eq!(client.member_list().await.unwrap().members().len(), 3);
    kube.delete_namespace(&ns).await.unwrap();
}

/// The adoption contract: members made outside this EtcdCluster (here: orphaned by deleting
/// the previous one with `propagationPolicy: Orphan`) are taken over by a new EtcdCluster of
/// the same name, created paused and then unpaused, without a restart, and are then managed
/// (scaled) like its own.
#[tokio::test]
async fn orphaned_members_are_adopted_without_restarts_and_then_managed() {
    let Running {
        kube,
        ns,
        clusters,
        _report,
        _operator,
    } = running_cluster("etcd-op-adopt").await;
    let name = "example-etcd-cluster";
    let mut client = member_client(&kube, &ns, "example-etcd-cluster-0").await;
    client.put("kept", "yes", None).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    let before = pod_identities(&pods).await;

    clusters
        .delete(name, &DeleteParams::orphan())
        .await
        .unwrap();
    let gone = await_condition(clusters.clone(), name, |c: Option<&EtcdCluster>| {
        c.is_none()
    });
    tokio::time::timeout(std::time::Duration::from_secs(60), gone)
        .await
        .unwrap()
        .unwrap();
    let orphaned = |p: &Pod| p.owner_references().is_empty();
    for pod in before.keys() {
        wait_until(&pods, pod, "the member orphaned", 60, orphaned)
            .await
            .unwrap();
    }

    let mut cluster = example(3);
    cluster.spec.paused = Some(true);
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    let paused = |c: &EtcdCluster| c.status.as_ref().and_then(|s| s.control_paused) == Some(true);
    wait_until(&clusters, name, "the new cluster paused", 60, paused)
        .await
        .unwrap();
    let patch = json!({"spec": {"paused": false}});
    clusters
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_until(&clusters, name, "3 adopted members", 120, converged(3))
        .await
        .unwrap();
    let uid = clusters.get(name).await.unwrap().metadata.uid.unwrap();
    for pod in before.keys() {
        let owned = {
            let uid = uid.clone();
            move |p: &Pod| p.owner_references().iter().any(|o| o.uid == uid)
        };
        wait_until(&pods, pod, "the member adopted", 60, owned)
            .await
            .unwrap();
    }
    assert_eq!(
        pod_identities(&pods).await,
        before,
        "an adopted member was restarted"
    );

    resize(&clusters, 4).await;
    wait_until(&clusters, name, "4 ready members", 240, converged(4))
        .await
        .unwrap();
    let options = etcd_client::GetOptions::new().with_serializable();
    let newest = member_pods(&kube, &ns).await.pop().unwrap();
    let mut fresh = member_client(&kube, &ns, &newest).await;
    assert_eq!(
        fresh.get("kept", Some(options)).await.unwrap().kvs().len(),
        1
    );
    kube.delete_namespace(&ns).await.unwrap();
}

/// Issue 28 point 5: a pod labelled as a member that the operators did not make (anyone
/// allowed to create pods can make one: here a real etcd that is the sole leader of a cluster
/// of its own) is not taken for a member. The cluster is held with `Degraded=ForeignPod` and a
/// Warning: a scale-down asked meanwhile waits, no member or claim is touched, and the fake
/// pod is left for a human. Once it is deleted, the scale-down goes on. The operator's own
/// pods carry their proof of origin and no scheduling gate.
#[tokio::test]
async fn a_pod_that_passes_for_a_member_is_not_trusted() {
    let Running {
        kube,
        ns,
        clusters,
        _report,
        _operator,
    } = running_cluster("etcd-op-foreign").await;
    let name = "example-etcd-cluster";
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    let before = pod_identities(&pods).await;
    for member in before.keys() {
        let pod = pods.get(member).await.unwrap();
        assert!(
            pod.annotations()
                .contains_key(etcd_members::origin::PROOF_ANNOTATION),
            "{member} has no proof of origin"
        );
        assert!(
            pod.spec.unwrap().scheduling_gates.is_none(),
            "{member} is gated"
        );
    }

    // The fake: the members' image and locked-down context, a single-member etcd of its own.
    let real = pods.get(&format!("{name}-0")).await.unwrap();
    let real_spec = real.spec.clone().unwrap();
    let real_etcd = real_spec.containers[0].clone();
    let fake_name = format!("{name}-9");
    let fake: Pod = serde_json::from_value(json!({
        "metadata": {"name": fake_name, "labels": {"app": "etcd", "etcd_cluster": name, "etcd_node": fake_name}},
        "spec": {
            "securityContext": real_spec.security_context,
            "volumes": [{"name": "data", "emptyDir": {}}],
            "containers": [{
                "name": "etcd",
                "image": real_etcd.image,
                "command": real_etcd.command,
                "securityContext": real_etcd.security_context,
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                "args": ["--name", "fake", "--data-dir", "/data/fake",
                         "--listen-client-urls", "http://0.0.0.0:2379",
                         "--advertise-client-urls", "http://127.0.0.1:2379",
                         "--listen-peer-urls", "http://127.0.0.1:2380",
                         "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
                         "--initial-cluster", "fake=http://127.0.0.1:2380"],
            }],
        },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &fake).await.unwrap();
    let fake_ready = |p: &Pod| p.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some();
    wait_until(&pods, &fake_name, "the fake member running", 60, fake_ready)
        .await
        .unwrap();
    let mut fake_client = member_client(&kube, &ns, &fake_name).await;
    let status = fake_client.status().await.unwrap();
    assert_eq!(
        status.leader(),
        status.header().unwrap().member_id(),
        "the fake is a leader"
    );

    // A scale-down asked while it runs waits for it to be gone.
    resize(&clusters, 2).await;
    let generation = clusters.get(name).await.unwrap().metadata.generation;
    let held = move |c: &EtcdCluster| {
        c.status
            .as_ref()
            .is_some_and(|s| s.observed_generation == generation)
            && condition_reason(c, "Degraded").as_deref() == Some("ForeignPod")
    };
    wait_until(&clusters, name, "held by the foreign pod", 60, held)
        .await
        .unwrap();
    let warned = events(&kube, &ns).await.into_iter().any(|e| {
        e.type_.as_deref() == Some("Warning")
            && e.reason.as_deref() == Some("ForeignPod")
            && e.note.as_deref().is_some_and(|n| n.contains(&fake_name))
    });
    assert!(warned, "no Warning names the foreign pod");
    let mut client = member_client(&kube, &ns, &format!("{name}-0")).await;
    assert_eq!(client.member_list().await.unwrap().members().len(), 3);
    let after: std::collections::BTreeMap<_, _> = pod_identities(&pods)
        .await
        .into_iter()
        .filter(|(pod, _)| *pod != fake_name)
        .collect();
    assert_eq!(
        after, before,
        "a member was touched while the foreign pod ran"
    );
    assert!(pods.get_opt(&fake_name).await.unwrap().is_some());

    pods.delete(&fake_name, &DeleteParams::default())
        .await
        .unwrap();
    wait_until(&clusters, name, "2 members", 240, converged(2))
        .await
        .unwrap();
    kube.delete_namespace(&ns).await.unwrap();
}

/// Issue 28 point 9, fencing: two replicas with leader election; the leader is cut off from
/// the API server while it grows a new cluster. It stops (exits non-zero) within the renew
/// deadline and plans nothing after it lost the Lease, before the standby leads; the standby
/// finishes the cluster, whose member list is then exactly its three members.
#[tokio::test]
async fn a_leader_cut_off_mid_reconcile_stops_before_the_standby_leads() {
    let (kube, ns, _report) = testbed::cluster::test_namespace("etcd-op-fence").await;
    let (config, partition) = testbed::kube::partitioned_kubeconfig(&kube.kubeconfig)
        .await
        .unwrap();
    let through = std::env::temp_dir().join(format!("{ns}-partitioned.kubeconfig"));
    std::fs::write(&through, serde_saphyr::to_string(&config).unwrap()).unwrap();
    let replica = |id: &str, kubeconfig: &std::path::Path| {
        let log = std::env::temp_dir().join(format!("{ns}-{id}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_etcd-operator"))
            .args(["--namespace", &ns, "--listen", "127.0.0.1:0"])
            .args([
                "--leader-election",
                "--lease-namespace",
                &ns,
                "--pod-name",
                id,
            ])
            .args(["--lease-duration-seconds", "6"])
            .env("KUBECONFIG", kubeconfig)
            .env("LOG_FORMAT", "json")
            .env("RUST_LOG", "info,etcd_operator=debug,operator_runtime=info")
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("start etcd-operator");
        (Operator(child), log)
    };
    let (mut leader, leader_log) = replica("replica-a", &through);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while logged_at(&leader_log, "became leader").is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "replica-a did not lead"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (_standby, standby_log) = replica("replica-b", &kube.kubeconfig);

    let clusters: Api<EtcdCluster> = Api::namespaced(kube.client.clone(), &ns);
    clusters
        .create(&PostParams::default(), &example(3))
        .await
        .unwrap();
    let name = "example-etcd-cluster";
    // Mid-growth: a membership change recorded by the leader.
    wait_until(&clusters, name, "a member being added", 120, adding)
        .await
        .unwrap();
    partition.cut();
    let exit = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        loop {
            if let Some(status) = leader.0.try_wait().unwrap() {
                break status;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the cut-off leader did not stop");
    assert!(
        !exit.success(),
        "a lost leadership exits non-zero: {exit:?}"
    );
    wait_until(&clusters, name, "3 ready members", 240, converged(3))
        .await
        .unwrap();

    let lost = logged_at(&leader_log, "lost leadership");
    let took_over = logged_at(&standby_log, "became leader");
    assert_eq!(
        lost.len(),
        1,
        "{}",
        std::fs::read_to_string(&leader_log).unwrap()
    );
    assert_eq!(took_over.len(), 1);
    assert!(
        lost[0] < took_over[0],
        "lost at {}, standby led at {}",
        lost[0],
        took_over[0]
    );
    let planned_after: Vec<_> = logged_at(&leader_log, "planned")
        .into_iter()
        .filter(|t| *t > lost[0])
        .collect();
    assert!(
        planned_after.is_empty(),
        "the cut-off leader planned at {planned_after:?}"
    );
    let mut client = member_client(&kube, &ns, &format!("{name}-0")).await;
    let members = client.member_list().await.unwrap();
    let names: std::collections::BTreeSet<&str> =
        members.members().iter().map(|m| m.name()).collect();
    assert_eq!(members.members().len(), 3, "{names:?}");
    assert_eq!(names.len(), 3, "{names:?}");
    kube.delete_namespace(&ns).await.unwrap();
}

/// Each member pod's UID and etcd container restart count.
async fn pod_identities(pods: &Api<Pod>) -> std::collections::BTreeMap<String, (String, i32)> {
    let list = pods
        .list(&ListParams::default().labels("etcd_cluster=example-etcd-cluster"))
        .await
        .unwrap();
    list.items
        .into_iter()
        .map(|p| {
            let restarts = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .map_or(0, |c| c[0].restart_count);
            (p.name_any(), (p.metadata.uid.unwrap(), restarts))
        })
        .collect()
}

/// Bad input the schema cannot catch: an image that does not exist, and a claim spec the API
/// server refuses. Each is reported (Degraded with the cause, once as a Warning), and no
/// member pod is made without its claim.
#[tokio::test]
async fn a_missing_image_and_a_refused_claim_spec_are_reported() {
    let (kube, ns, _report) = testbed::cluster::test_namespace("etcd-op-bad").await;
    let _operator = Operator::start(&kube, &ns);
    let clusters: Api<EtcdCluster> = Api::namespaced(kube.client.clone(), &ns);
    let mut missing = example(1);
    missing.metadata.name = Some("missing".into());
    missing.spec.version = Some("3.4.99".into());
    let mut bad_claim = serde_json::to_value(example(1)).unwrap();
    bad_claim["metadata"]["name"] = json!("bad-claim");
    bad_claim["spec"]["pod"]["persistentVolumeClaimSpec"]["resources"]["requests"]["storage"] =
        json!("lots");
    let bad_claim: EtcdCluster = serde_json::from_value(bad_claim).unwrap();
    for cluster in [&missing, &bad_claim] {
        clusters
            .create(&PostParams::default(), cluster)
            .await
            .unwrap();
    }
    let degraded = |needle: &'static str| {
        move |c: &EtcdCluster| {
            c.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c.type_ == "Degraded"
                            && c.status == "True"
                            && c.message.as_deref().unwrap_or("").contains(needle)
                    })
                })
        }
    };
    wait_until(
        &clusters,
        "missing",
        "the missing image reported",
        120,
        degraded("ImagePull"),
    )
    .await
    .unwrap();
    wait_until(
        &clusters,
        "bad-claim",
        "the refused claim reported",
        60,
        degraded("quantities"),
    )
    .await
    .unwrap();
    let events = events(&kube, &ns).await;
    for (cluster, needle) in [("missing", "ImagePull"), ("bad-claim", "quantities")] {
        assert!(
            events.iter().any(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(cluster)
                    && e.type_.as_deref() == Some("Warning")
                    && e.note.as_deref().unwrap_or("").contains(needle)
            }),
            "no Warning for {cluster}"
        );
    }
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    assert!(pods.get_opt("bad-claim-0").await.unwrap().is_none());
    kube.delete_namespace(&ns).await.unwrap();
}

/// Scheduled defragmentation on the bed: a cluster whose files are mostly free space (keys
/// written, deleted and compacted) is defragmented one member at a time, followers first and
/// the leader last (after it handed leadership over), each file shrinks, and a client writing
/// throughout is never refused for longer than an election.
#[tokio::test]
async fn defragments_one_member_at_a_time_leader_last_while_a_client_writes() {
    let Running {
        kube,
        ns,
        clusters,
        _report,
        _operator,
    } = running_cluster_at("defrag", "3.5.33").await;
    let members = member_pods(&kube, &ns).await;
    let mut client = member_client(&kube, &ns, &members[0]).await;
    // Live data, so that each member's defragmentation (which copies it) lasts long enough for
    // the members' own metrics to show it.
    let value = "x".repeat(100 * 1024);
    for i in 0..300 {
        client
            .put(format!("/live/{i:03}"), value.clone(), None)
            .await
            .unwrap();
    }
    let (before, leader) = fragment(&kube, &ns, &mut client, "/bulk/", 200).await;
    let before: std::collections::BTreeMap<String, i64> =
        before.into_iter().map(|(m, (size, _))| (m, size)).collect();

    // A client writing throughout; the longest stretch without a successful write is measured.
    let writer = Writer::start(&kube, &ns, "during-defrag").await;
    let watch = DefragWatch::start(&kube, &ns).await;

    let round = scheduled_round(&clusters, 240).await;
    let seen = watch.stop().await;
    let (longest, writes) = writer.stop().await;
    eprintln!("the members' own metrics during the round: {seen:?}");
    // No two members defragmenting at once, by what they say; each was seen at it.
    assert_eq!(seen.most_at_once, 1, "{seen:?}");
    assert_eq!(seen.members.len(), 3, "{seen:?}");
    eprintln!("defragmentation round: {writes} writes, longest stretch without one {longest:?}");
    assert_eq!(round.result, "Succeeded", "{round:?}");
    let order: Vec<&str> = round.members.iter().map(|m| m.member.as_str()).collect();
    assert_eq!(order.len(), 3, "{round:?}");
    assert_eq!(order[2], leader, "the leader last: {round:?}");
    for m in &round.members {
        assert_eq!(m.result, "Defragmented", "{round:?}");
        let (size_before, size_after) = (m.size_before.unwrap(), m.size_after.unwrap());
        assert!(size_after < size_before - 10 * 1024 * 1024, "{m:?}");
        let (now, _, _) = db_sizes(&kube, &ns, &m.member).await;
        assert!(
            now < before[&m.member] - 10 * 1024 * 1024,
            "{}: {now}",
            m.member
        );
    }
    assert!(writes > 20, "only {writes} writes succeeded");
    assert!(
        longest < std::time::Duration::from_secs(3),
        "writes refused for {longest:?}"
    );
    let condition = condition(
        &clusters.get("example-etcd-cluster").await.unwrap(),
        "Defragmented",
    )
    .cloned()
    .unwrap();
    assert_eq!(condition.status, "True");
}

/// Out of space: a cluster with a small quota is written until etcd raises `NOSPACE` and refuses
/// writes; once the history is deleted and compacted, the operator starts a round at once (its
/// schedule is months away), defragments every member and disarms the alarm, and writes go
/// through again.
#[tokio::test]
async fn a_nospace_alarm_starts_a_round_at_once_and_is_disarmed_once_there_is_room() {
    let (kube, ns, _report) = testbed::cluster::test_namespace("nospace").await;
    let _operator = Operator::start(&kube, &ns);
    let clusters: Api<EtcdCluster> = Api::namespaced(kube.client.clone(), &ns);
    let mut cluster = serde_json::to_value(example(3)).unwrap();
    cluster["spec"]["version"] = json!("3.6.16");
    cluster["spec"]["pod"]["etcdEnv"] =
        json!([{"name": "ETCD_QUOTA_BACKEND_BYTES", "value": "16777216"}]);
    cluster["spec"]["defragmentation"] =
        json!({"schedule": "0 0 1 1 *", "minFreePercent": 10, "minFreeMiB": 1});
    let cluster: EtcdCluster = serde_json::from_value(cluster).unwrap();
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    wait_until(
        &clusters,
        "example-etcd-cluster",
        "3 ready members",
        240,
        converged(3),
    )
    .await
    .unwrap();
    let members = member_pods(&kube, &ns).await;
    let mut client = member_client(&kube, &ns, &members[0]).await;
    let value = "x".repeat(100 * 1024);
    let mut refused = None;
    for i in 0..400 {
        if let Err(e) = client
            .put(format!("/fill/{i:03}"), value.clone(), None)
            .await
        {
            refused = Some(e.to_string());
            break;
        }
    }
    let refused = refused.expect("etcd never refused a write");
    assert!(refused.contains("database space exceeded"), "{refused}");
    // Deletes and compaction are still allowed: they free the pages defragmentation returns.
    delete_and_compact(&mut client, "/fill/").await;
    let round = round_recorded(&clusters, "a round after NOSPACE", 240).await;
    assert_eq!(
        (round.trigger.as_str(), round.result.as_str()),
        ("NoSpaceAlarm", "Succeeded"),
        "{round:?}"
    );
    assert_eq!(round.members.len(), 3, "{round:?}");
    // Disarmed once every member has returned its room (a member whose turn came before the
    // compaction gets another round): a write goes through again, and no alarm is left.
    let mut accepted = false;
    for _ in 0..120 {
        if client.put("/after", "room", None).await.is_ok() {
            accepted = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
    assert!(accepted, "writes are still refused");
    let alarms = client
        .alarm(
            etcd_client::AlarmAction::Get,
            etcd_client::AlarmType::None,
            None,
        )
        .await
        .unwrap();
    let left: Vec<String> = alarms
        .alarms()
        .iter()
        .map(|a| format!("{:x} {:?}", a.member_id(), a.alarm()))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
