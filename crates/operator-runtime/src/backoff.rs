//! Per-object backoff for `error_policy`: an object whose reconcile keeps failing is retried
//! after kube's default backoff (exponential from 0.8 s to 30 s, with jitter), each object on
//! its own, and starts from the shortest delay again after a success.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use kube::runtime::watcher::DefaultBackoff;

#[derive(Default)]
pub struct PerObject {
    failing: Mutex<HashMap<String, DefaultBackoff>>,
}

impl PerObject {
    /// The delay before retrying `key` (an object's UID) after one more failure.
    pub fn next_delay(&self, key: &str) -> Duration {
        let mut failing = self.failing.lock().unwrap_or_else(|e| e.into_inner());
        failing
            .entry(key.to_string())
            .or_default()
            .next()
            .unwrap_or(Duration::from_secs(30))
    }

    /// `key` reconciled, or is gone: its next failure starts from the shortest delay, and
    /// nothing is kept for it.
    pub fn forget(&self, key: &str) {
        let mut failing = self.failing.lock().unwrap_or_else(|e| e.into_inner());
        failing.remove(key);
    }

    /// Keeps only the keys for which `keep` holds (the others' objects are gone).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        let mut failing = self.failing.lock().unwrap_or_else(|e| e.into_inner());
        failing.retain(|key, _| keep(key));
    }

    /// Objects with a failure on record.
    pub fn len(&self) -> usize {
        self.failing.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_per_object_and_start_over_after_a_success() {
        let backoff = PerObject::default();
        let first = backoff.next_delay("a");
        let mut last = first;
        for _ in 0..8 {
            last = backoff.next_delay("a");
        }
        assert!(first <= Duration::from_secs(2), "{first:?}");
        assert!(last >= Duration::from_secs(10), "{last:?} after 9 failures");
        assert!(last <= Duration::from_secs(60), "{last:?}");
        // Another object is on its own.
        assert!(backoff.next_delay("b") <= Duration::from_secs(2));
        backoff.forget("a");
        assert!(backoff.next_delay("a") <= Duration::from_secs(2));
        backoff.forget("a");
        backoff.forget("b");
        assert!(backoff.is_empty());
    }
}
