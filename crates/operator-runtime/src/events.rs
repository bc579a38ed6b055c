//! Kubernetes Events about the objects an operator manages: one recorder per process (the
//! operator's name and this replica's identity), notes cut to the 1 kB the API accepts, and a
//! failure to write an event logged, never failing a reconcile.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

pub struct Events {
    recorder: Recorder,
}

impl Events {
    pub fn new(client: kube::Client, controller: &str, instance: Option<String>) -> Events {
        let reporter = Reporter {
            controller: controller.into(),
            instance,
        };
        Events {
            recorder: Recorder::new(client, reporter),
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

    /// Any event, its note cut to size.
    pub async fn send(&self, event: &Event, reference: &ObjectReference) {
        let event = Event {
            type_: event.type_,
            reason: event.reason.clone(),
            note: event.note.clone().map(truncate_note),
            action: event.action.clone(),
            secondary: event.secondary.clone(),
        };
        if let Err(e) = self.recorder.publish(&event, reference).await {
            tracing::warn!(error = %e, reason = %event.reason, "could not publish an event");
        }
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
