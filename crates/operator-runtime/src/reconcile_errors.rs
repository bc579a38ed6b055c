//! What every operator does when a reconcile fails: count it by its typed reason (the
//! `<prefix>_reconcile_errors_total{reason}` metric), log it, and retry that object after its
//! own backoff ([`PerObject`]).

use std::fmt::Display;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::backoff::PerObject;

/// An operator's reconcile error: each kind has a reason, one CamelCase word.
pub trait ReconcileError: Display {
    /// The kind of failure, for the metric's `reason` label and the log.
    fn reason(&self) -> &'static str;
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

/// The reconcile-failure counter, by reason.
#[derive(Clone, Debug, Default)]
pub struct ReconcileErrors(Family<ReasonLabels, Counter>);

impl ReconcileErrors {
    /// Registers `reconcile_errors` (with the registry's prefix, `_total` added).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "reconcile_errors",
            "Reconciles (or steps of them) that failed and were retried, by reason",
            self.0.clone(),
        );
    }

    pub fn inc(&self, reason: &str) {
        self.0
            .get_or_create(&ReasonLabels {
                reason: reason.into(),
            })
            .inc();
    }
}

/// The `error_policy` of every operator: counts `error` by reason, logs it with the object,
/// and retries the object after its next backoff delay.
pub fn retry<K: kube::Resource, E: ReconcileError>(
    object: &K,
    error: &E,
    backoff: &PerObject,
    errors: &ReconcileErrors,
) -> Action {
    let delay = backoff.next_delay(&object.uid().unwrap_or_default());
    let reason = error.reason();
    errors.inc(reason);
    tracing::warn!(
        namespace = object.namespace().unwrap_or_default(),
        name = %object.name_any(),
        reason,
        %error,
        retry_in = ?delay,
        "reconcile failed"
    );
    Action::requeue(delay)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Refused;
    impl Display for Refused {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("refused")
        }
    }
    impl ReconcileError for Refused {
        fn reason(&self) -> &'static str {
            "Refused"
        }
    }

    #[test]
    fn failures_are_counted_by_reason_and_retried_later_each_time() {
        let mut registry = Registry::with_prefix("etcd_test");
        let errors = ReconcileErrors::default();
        errors.register(&mut registry);
        let backoff = PerObject::default();
        let mut object = k8s_openapi::api::core::v1::ConfigMap::default();
        object.metadata.name = Some("c".into());
        object.metadata.uid = Some("u".into());
        let first = retry(&object, &Refused, &backoff, &errors);
        let _ = retry(&object, &Refused, &backoff, &errors);
        let third = retry(&object, &Refused, &backoff, &errors);
        assert_ne!(first, third, "the delay grows");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(r#"etcd_test_reconcile_errors_total{reason="Refused"} 3"#),
            "{text}"
        );
    }
}
