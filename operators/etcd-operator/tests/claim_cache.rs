//! The claim cache against a mock API server (`mock_api`): when a reconcile reads claims from
//! the watch and when it lists them, and that a plan never sees claims older than this
//! operator's own last write. The watch's events are fed by hand, as `ClaimFeed::run` feeds
//! them from a real watch (every e2e on the bed runs that).

use std::sync::Arc;
use std::time::Duration;

use etcd_api::EtcdCluster;
use etcd_members::claims::{ClaimFeed, Claims};
use etcd_members::labels::RESTORED_BY_ANNOTATION;
use etcd_members::origin::ProofKey;
use etcd_operator::context::Context;
use etcd_operator::metrics::Metrics;
use etcd_operator::scope::Scope;
use http::{Method, StatusCode};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::ResourceExt;
use kube::api::{DeleteParams, Patch};
use kube::runtime::watcher::Event;
use mock_api::MockApi;
use serde_json::{Value, json};

const CLAIMS: &str = "/api/v1/namespaces/ns/persistentvolumeclaims";
/// How long a read waits for the cache before it lists (short, for the tests).
const WAIT: Duration = Duration::from_secs(1);

fn context() -> (Arc<Context>, MockApi, ClaimFeed) {
    let (client, api) = mock_api::pair();
    let (claims, feed) = Claims::new(client.clone(), WAIT);
    let key = ProofKey::new(vec![3; 32], None);
    let metrics = Arc::new(Metrics::default());
    let ctx = Context::new(client, None, metrics, Scope::new(false), key, claims);
    (Arc::new(ctx), api, feed)
}

fn cluster(generation: i64, restored_by: Option<&str>) -> EtcdCluster {
    let mut obj = json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "metadata": {"name": "c", "namespace": "ns", "uid": "uid-1", "generation": generation},
        "spec": {"size": 3, "version": "3.5.33"},
    });
    if let Some(restore) = restored_by {
        obj["metadata"]["annotations"] = json!({RESTORED_BY_ANNOTATION: restore});
    }
    serde_json::from_value(obj).unwrap()
}

fn claim_json(name: &str, uid: &str, version: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": version,
                        "labels": {"etcd_cluster": "c"}}})
}

fn claim(name: &str, uid: &str, version: &str) -> PersistentVolumeClaim {
    serde_json::from_value(claim_json(name, uid, version)).unwrap()
}

/// The watch's first list: `claims`.
fn listed(feed: &mut ClaimFeed, claims: &[PersistentVolumeClaim]) {
    feed.apply(&Event::Init);
    for c in claims {
        feed.apply(&Event::InitApply(c.clone()));
    }
    feed.apply(&Event::InitDone);
}

/// The names and versions of `claims`.
fn versions(claims: &[PersistentVolumeClaim]) -> Vec<(String, String)> {
    claims
        .iter()
        .map(|c| (c.name_any(), c.resource_version().unwrap_or_default()))
        .collect()
}

/// A read that lists the claims (live), answered with `items`; what it returns.
async fn first_look(
    ctx: &Arc<Context>,
    api: &mut MockApi,
    c: &EtcdCluster,
    items: Vec<Value>,
) -> Vec<PersistentVolumeClaim> {
    let read = {
        let (ctx, c) = (ctx.clone(), c.clone());
        tokio::spawn(async move { ctx.claims_of(&c).await.unwrap() })
    };
    api.expect_list(CLAIMS, items).await;
    read.await.unwrap()
}

/// The operator deletes claim c-0 (`uid`: the claim it means, if it says), and the API server
/// answers that c-0 (uid u0) is gone.
async fn delete_c0(ctx: &Arc<Context>, api: &mut MockApi, uid: Option<&'static str>) {
    let delete = {
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let api = ctx.claims.api("ns");
            api.delete("c-0", uid, &DeleteParams::default()).await
        })
    };
    api.expect_call(
        Method::DELETE,
        &format!("{CLAIMS}/c-0"),
        StatusCode::OK,
        |_| json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "details": {"name": "c-0", "kind": "persistentvolumeclaims", "uid": "u0"}}),
    )
    .await;
    delete.await.unwrap().unwrap();
}

/// The operator records on claim c-0 the version its member ran (what keeps data from an
/// older etcd), the API server answering `answer`.
async fn record_version_ran(
    ctx: &Arc<Context>,
    api: &mut MockApi,
    answer: Value,
) -> Result<PersistentVolumeClaim, kube::Error> {
    let patch = {
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let record = json!({"metadata": {"annotations": {"etcd.version.ran": "3.6.0"}}});
            ctx.claims
                .api("ns")
                .patch("c-0", &Patch::Merge(record))
                .await
        })
    };
    api.expect_call(
        Method::PATCH,
        &format!("{CLAIMS}/c-0"),
        StatusCode::OK,
        |_| answer,
    )
    .await;
    patch.await.unwrap()
}

#[tokio::test]
async fn when_the_cluster_is_unchanged_and_the_cache_shows_what_was_listed_claims_come_from_the_cache()
 {
    let (ctx, mut api, mut feed) = context();
    let c = cluster(2, None);
    listed(&mut feed, &[claim("c-0", "u0", "5")]);
    first_look(&ctx, &mut api, &c, vec![claim_json("c-0", "u0", "5")]).await;
    // Changed by someone else since: the watch shows it, and the cache answers without a call.
    feed.apply(&Event::Apply(claim("c-0", "u0", "6")));
    let claims = ctx.claims_of(&c).await.unwrap();
    assert_eq!(versions(&claims), [("c-0".into(), "6".into())]);
    api.expect_silence().await;
}

#[tokio::test]
async fn when_the_spec_or_the_restore_that_handed_it_over_changed_the_claims_are_listed_again() {
    let (ctx, mut api, mut feed) = context();
    listed(&mut feed, &[claim("c-0", "u0", "5")]);
    let items = || vec![claim_json("c-0", "u0", "5")];
    first_look(&ctx, &mut api, &cluster(2, None), items()).await;
    // A new generation: listed, though the cache shows everything.
    first_look(&ctx, &mut api, &cluster(3, None), items()).await;
    ctx.claims_of(&cluster(3, None)).await.unwrap();
    api.expect_silence().await;
    // Handed over by a restore (its claims were written before the cluster was).
    first_look(&ctx, &mut api, &cluster(3, Some("restore-uid")), items()).await;
}

#[tokio::test]
async fn when_the_cache_has_not_shown_what_a_live_list_saw_the_next_read_lists_again() {
    let (ctx, mut api, mut feed) = context();
    let c = cluster(2, None);
    listed(&mut feed, &[claim("c-0", "u0", "5")]);
    // The list sees a newer version and a claim the watch has not shown yet.
    let items = vec![claim_json("c-0", "u0", "6"), claim_json("c-1", "u1", "7")];
    first_look(&ctx, &mut api, &c, items.clone()).await;
    // Not shown within the wait: listed.
    first_look(&ctx, &mut api, &c, items).await;
    feed.apply(&Event::Apply(claim("c-0", "u0", "6")));
    feed.apply(&Event::Apply(claim("c-1", "u1", "7")));
    let claims = ctx.claims_of(&c).await.unwrap();
    assert_eq!(
        versions(&claims),
        [("c-0".into(), "6".into()), ("c-1".into(), "7".into())]
    );
    api.expect_silence().await;
}

#[tokio::test]
async fn when_the_operator_wrote_a_claim_the_next_read_waits_for_the_watch_to_show_that_write() {
    let (ctx, mut api, mut feed) = context();
    let c = cluster(2, None);
    listed(&mut feed, &[]);
    first_look(&ctx, &mut api, &c, vec![]).await;
    // A member's claim is created (resourceVersion 11).
    let create = {
        let ctx = ctx.clone();
        tokio::spawn(async move { ctx.claims.api("ns").create(&claim("c-0", "", "")).await })
    };
    api.expect_call(Method::POST, CLAIMS, StatusCode::CREATED, |_| {
        claim_json("c-0", "u0", "11")
    })
    .await;
    create.await.unwrap().unwrap();
    // The next read waits; the watch shows the claim while it waits: no list.
    let read = {
        let (ctx, c) = (ctx.clone(), c.clone());
        tokio::spawn(async move { ctx.claims_of(&c).await.unwrap() })
    };
    tokio::time::sleep(WAIT / 10).await;
    assert!(
        !read.is_finished(),
        "read before the watch showed the write"
    );
    feed.apply(&Event::Apply(claim("c-0", "u0", "11")));
    let claims = read.await.unwrap();
    assert_eq!(versions(&claims), [("c-0".into(), "11".into())]);
    api.expect_silence().await;
}

#[tokio::test]
async fn when_the_watch_does_not_show_the_operators_write_in_time_the_claims_are_listed() {
    let (ctx, mut api, mut feed) = context();
    let c = cluster(2, None);
    listed(&mut feed, &[claim("c-0", "u0", "5")]);
    first_look(&ctx, &mut api, &c, vec![claim_json("c-0", "u0", "5")]).await;
    // The version record of an upgraded member (what keeps data from an older etcd).
    record_version_ran(&ctx, &mut api, claim_json("c-0", "u0", "6"))
        .await
        .unwrap();
    // The cache still holds version 5: the plan gets the list's version 6.
    let read = {
        let (ctx, c) = (ctx.clone(), c.clone());
        tokio::spawn(async move { ctx.claims_of(&c).await.unwrap() })
    };
    api.expect_list(CLAIMS, vec![claim_json("c-0", "u0", "6")])
        .await;
    assert_eq!(versions(&read.await.unwrap()), [("c-0".into(), "6".into())]);
}

#[tokio::test]
async fn when_the_operator_deleted_a_claim_the_cache_is_read_only_once_it_shows_the_deletion() {
    let (ctx, mut api, mut feed) = context();
    let c = cluster(2, None);
    listed(&mut feed, &[claim("c-0", "u0", "5")]);
    first_look(&ctx, &mut api, &c, vec![claim_json("c-0", "u0", "5")]).await;
    delete_c0(&ctx, &mut api, Some("u0")).await;
    // Not yet shown: listed (the list no longer has it).
    assert!(first_look(&ctx, &mut api, &c, vec![]).await.is_empty());
    // Shown: from the cache, without it.
    feed.apply(&Event::Delete(claim("c-0", "u0", "5")));
    assert!(ctx.claims_of(&c).await.unwrap().is_empty());
    api.expect_silence().await;
}

#[tokio::test]
async fn when_a_deleted_claim_is_named_only_by_the_api_servers_answer_its_deletion_is_awaited() {
    let (ctx, mut api, mut feed) = context();
    let c = cluster(2, None);
    listed(&mut feed, &[claim("c-0", "u0", "5")]);
    first_look(&ctx, &mut api, &c, vec![claim_json("c-0", "u0", "5")]).await;
    // As the restore operator deletes: by name.
    delete_c0(&ctx, &mut api, None).await;
    first_look(&ctx, &mut api, &c, vec![]).await;
    feed.apply(&Event::Delete(claim("c-0", "u0", "5")));
    assert!(ctx.claims_of(&c).await.unwrap().is_empty());
    api.expect_silence().await;
}

#[tokio::test]
async fn when_a_write_gets_no_usable_answer_the_next_read_lists() {
    let (ctx, mut api, mut feed) = context();
    let c = cluster(2, None);
    listed(&mut feed, &[claim("c-0", "u0", "5")]);
    first_look(&ctx, &mut api, &c, vec![claim_json("c-0", "u0", "5")]).await;
    // The patch may have been applied; its answer is lost (here: not JSON).
    let patched = record_version_ran(&ctx, &mut api, json!("cut off")).await;
    assert!(patched.is_err());
    // Listed, though the cache shows everything awaited; then the cache again.
    first_look(&ctx, &mut api, &c, vec![claim_json("c-0", "u0", "5")]).await;
    ctx.claims_of(&c).await.unwrap();
    api.expect_silence().await;
}

#[tokio::test]
async fn before_the_watch_has_listed_once_every_read_lists() {
    let (ctx, mut api, _feed) = context();
    let c = cluster(2, None);
    first_look(&ctx, &mut api, &c, vec![]).await;
    first_look(&ctx, &mut api, &c, vec![]).await;
}
