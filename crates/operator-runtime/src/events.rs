//! Kubernetes Events about the objects an operator manages: one publisher per process (the
//! operator's name and this replica's identity), notes cut to the 1 kB the API accepts, repeats
//! of an identical event counted in a series, and a failure to write an event logged, never
//! failing a reconcile.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Reporter};

/// How long a repeat of an event counts in its series (kube's recorder and client-go's use the
/// same): a later one is a new Event object.
const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);

/// Publishes events.k8s.io Events. kube's `Recorder` counts every event with the same reason
/// about the same object within its window as a repeat of the first one, keeping the first
/// note: "started pod c-0" would read "started pod c-1". Here only an identical event (reason,
/// action, type, note, objects) is a repeat, counted in its series; any other is its own Event.
pub struct Events {
    client: kube::Client,
    reporter: Reporter,
    /// The last Event object written per distinct event, for its series.
    written: Mutex<HashMap<String, K8sEvent>>,
}

impl Events {
    pub fn new(client: kube::Client, controller: &str, instance: Option<String>) -> Events {
        let reporter = Reporter {
            controller: controller.into(),
            instance,
        };
        Events {
            client,
            reporter,
            written: Mutex::new(HashMap::new()),
        }
    }

    /// A Normal event; `reason` is also its action.
    pub async fn normal(&self, reference: &ObjectReference, reason: &str, note: &str) {
        self.publish(reference, EventType::Normal, reason, note)
            .await;
    }

    /// A Warning event; `reason` is also its action.
    pub async fn warning(&self, reference: &ObjectReference, reason: &str, note: &str) {
        self.publish(reference, EventType::Warning, reason, note)
            .await;
    }

    async fn publish(
        &self,
        reference: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: &str,
    ) {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note.into()),
            action: reason.into(),
            secondary: None,
        };
        self.send(&event, reference).await;
    }

    /// Any event, its note cut to size. A failure is logged, never returned.
    pub async fn send(&self, event: &Event, reference: &ObjectReference) {
        if let Err(e) = self.write(event, reference).await {
            tracing::warn!(error = %e, reason = %event.reason, "could not publish an event");
        }
    }

    async fn write(&self, event: &Event, reference: &ObjectReference) -> Result<(), kube::Error> {
        let note = event.note.clone().map(truncate_note);
        let key = format!(
            "{}|{}|{:?}|{}|{}|{note:?}",
            identity(reference),
            event.secondary.as_ref().map(identity).unwrap_or_default(),
            event.type_,
            event.reason,
            event.action,
        );
        let now = Timestamp::now();
        let repeat = {
            let mut written = self.written.lock().expect("not poisoned");
            written.retain(|_, e| last_seen(e).is_some_and(|t| t + SERIES_WINDOW > now));
            written.get(&key).cloned()
        };
        let namespace = reference.namespace.as_deref().unwrap_or("default");
        let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), namespace);
        // A repeat goes into the series of the Event written before, unless that one is gone
        // meanwhile (events expire): then, as any other, it is a new Event.
        let counted = match repeat {
            Some(mut object) => {
                let count = object.series.as_ref().map_or(2, |s| s.count + 1);
                object.series = Some(EventSeries {
                    count,
                    last_observed_time: MicroTime(now),
                });
                let name = object.metadata.name.clone().unwrap_or_default();
                match api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&object))
                    .await
                {
                    Ok(_) => Some(object),
                    Err(kube::Error::Api(e)) if e.code == 404 => None,
                    Err(e) => return Err(e),
                }
            }
            None => None,
        };
        let written = match counted {
            Some(object) => object,
            None => {
                let object = self.new_event(event, note, reference, now);
                api.create(&PostParams::default(), &object).await?;
                object
            }
        };
        self.written
            .lock()
            .expect("not poisoned")
            .insert(key, written);
        Ok(())
    }

    fn new_event(
        &self,
        event: &Event,
        note: Option<String>,
        reference: &ObjectReference,
        now: Timestamp,
    ) -> K8sEvent {
        let controller = &self.reporter.controller;
        let object = reference.name.as_deref().unwrap_or(controller);
        K8sEvent {
            metadata: ObjectMeta {
                name: Some(format!("{object}.{:x}", now.as_nanosecond())),
                namespace: reference.namespace.clone(),
                ..Default::default()
            },
            action: Some(event.action.clone()),
            reason: Some(event.reason.clone()),
            note,
            event_time: Some(MicroTime(now)),
            regarding: Some(reference.clone()),
            related: event.secondary.clone(),
            reporting_controller: Some(controller.clone()),
            reporting_instance: Some(
                (self.reporter.instance.clone()).unwrap_or_else(|| controller.clone()),
            ),
            type_: Some(match event.type_ {
                EventType::Normal => "Normal".into(),
                EventType::Warning => "Warning".into(),
            }),
            ..Default::default()
        }
    }
}

/// Which object a reference names, whatever its resourceVersion (it changes with every status
/// write: an event repeated after one is still a repeat).
fn identity(reference: &ObjectReference) -> String {
    let ObjectReference {
        api_version,
        kind,
        namespace,
        name,
        uid,
        ..
    } = reference;
    format!("{api_version:?}/{kind:?}/{namespace:?}/{name:?}/{uid:?}")
}

/// When an Event object was last seen: its series' last, else its own time.
fn last_seen(event: &K8sEvent) -> Option<Timestamp> {
    match &event.series {
        Some(series) => Some(series.last_observed_time.0),
        None => event.event_time.as_ref().map(|t| t.0),
    }
}

/// Event notes are limited to 1 kB: longer ones are cut at a character boundary, marked `…`.
pub fn truncate_note(mut note: String) -> String {
    const LIMIT: usize = 1000;
    if note.len() > LIMIT {
        let mut cut = LIMIT;
        while !note.is_char_boundary(cut) {
            cut -= 1;
        }
        note.truncate(cut);
        note.push('…');
    }
    note
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_notes_are_cut_at_a_character_boundary() {
        assert_eq!(truncate_note("short".into()), "short");
        let long = "é".repeat(700); // 1400 bytes
        let cut = truncate_note(long);
        assert!(cut.len() <= 1000 + '…'.len_utf8(), "{}", cut.len());
        assert!(cut.ends_with('…'));
    }
}
