//! Scheduled defragmentation, and the NOSPACE alarm.

use super::*;

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
    let status_writers =
        testbed::status_writers::StatusWriters::watch(clusters.clone(), "example-etcd-cluster");
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
    // The round was recorded by the cluster's one status writer, not a manager of its own.
    assert_eq!(
        status_writers.seen(),
        std::collections::BTreeSet::from(["etcd-operator".to_string()])
    );
}

/// Out of space: a cluster with a small quota is written until etcd raises `NOSPACE` and refuses
/// writes; once the history is deleted and compacted, the operator starts a round at once (its
/// schedule is months away), defragments every member and disarms the alarm, and writes go
/// through again.
#[tokio::test]
async fn a_nospace_alarm_starts_a_round_at_once_and_is_disarmed_once_there_is_room() {
    let mut cluster = serde_json::to_value(example(3)).unwrap();
    cluster["spec"]["version"] = json!("3.6.16");
    cluster["spec"]["pod"]["etcdEnv"] =
        json!([{"name": "ETCD_QUOTA_BACKEND_BYTES", "value": "16777216"}]);
    cluster["spec"]["defragmentation"] =
        json!({"schedule": "0 0 1 1 *", "minFreePercent": 10, "minFreeMiB": 1});
    let cluster: EtcdCluster = serde_json::from_value(cluster).unwrap();
    let Running {
        kube,
        ns,
        clusters,
        _report,
        _operator,
    } = running_cluster_of("nospace", &cluster).await;
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
