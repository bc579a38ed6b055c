//! Events on a real API server: distinct notes stay distinct Events; an identical event is
//! counted in the series of the first.

use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{ListParams, PostParams};
use kube::{Resource, ResourceExt};
use operator_runtime::events::Events;
use testbed::kube::KubeTestbed;

#[tokio::test]
async fn each_note_is_its_own_event_and_repeats_are_counted() {
    let kube = KubeTestbed::start().await.unwrap();
    let ns = kube.namespace("events").await.unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(kube.client.clone(), &ns);
    let mut object = ConfigMap::default();
    object.metadata.name = Some("subject".into());
    let object = maps.create(&PostParams::default(), &object).await.unwrap();
    let reference: ObjectReference = object.object_ref(&());
    let events = Events::new(kube.client.clone(), "test-operator", Some("pod-a".into()));

    events
        .normal(&reference, "MemberStarted", "started pod c-1")
        .await;
    events
        .normal(&reference, "MemberStarted", "started pod c-0")
        .await;
    // The same object after a write (a new resourceVersion): still a repeat.
    let mut changed = object.clone();
    changed.data = Some([("k".to_string(), "v".to_string())].into());
    let changed = maps
        .replace("subject", &PostParams::default(), &changed)
        .await
        .unwrap();
    assert_ne!(changed.resource_version(), object.resource_version());
    let reference: ObjectReference = changed.object_ref(&());
    events
        .normal(&reference, "MemberStarted", "started pod c-1")
        .await;
    events
        .warning(&reference, "MemberStarted", "started pod c-1")
        .await;

    let api: Api<Event> = Api::namespaced(kube.client.clone(), &ns);
    let mut written: Vec<(String, String, i32)> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|e| {
            assert_eq!(e.regarding.as_ref().unwrap().uid, object.uid());
            assert_eq!(e.reporting_controller.as_deref(), Some("test-operator"));
            assert_eq!(e.reporting_instance.as_deref(), Some("pod-a"));
            let count = e.series.as_ref().map_or(1, |s| s.count);
            (e.type_.unwrap(), e.note.unwrap(), count)
        })
        .collect();
    written.sort();
    assert_eq!(
        written,
        [
            ("Normal".into(), "started pod c-0".into(), 1),
            ("Normal".into(), "started pod c-1".into(), 2),
            ("Warning".into(), "started pod c-1".into(), 1),
        ]
    );
    kube.delete_namespace(&ns).await.unwrap();
}
