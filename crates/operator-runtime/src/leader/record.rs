//! The Lease record and the election's decisions about it, free of API calls: client-go's
//! algorithm (`tryAcquireOrRenew`).

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;

/// When this replica last saw the Lease change (its `resourceVersion`), on its own monotonic
/// clock. Another holder's Lease counts as expired one lease duration after that, whatever the
/// holders' clocks wrote into it, so clock skew between nodes cannot hand the Lease over early.
#[derive(Debug, Default)]
pub(super) struct Observed {
    last: Option<(String, Instant)>,
    /// The holder the Lease named when last read.
    holder: Option<String>,
}

impl Observed {
    pub(super) fn saw(&mut self, resource_version: &str, holder: Option<&str>, now: Instant) {
        if self.last.as_ref().map(|(v, _)| v.as_str()) != Some(resource_version) {
            self.last = Some((resource_version.to_string(), now));
        }
        self.holder = holder.filter(|h| !h.is_empty()).map(str::to_string);
    }

    /// Whether another replica held the Lease when it was last seen, less than `duration` ago:
    /// if the Lease is gone now, that replica may still be acting.
    pub(super) fn other_holder_within(&self, me: &str, duration: Duration, now: Instant) -> bool {
        let recent = self
            .last
            .as_ref()
            .is_some_and(|(_, at)| now.saturating_duration_since(*at) < duration);
        recent && self.holder.as_deref().is_some_and(|h| h != me)
    }

    /// The replica that holds the Lease if it is another one whose hold has not expired.
    pub(super) fn held_by_other<'a>(
        &self,
        spec: &'a LeaseSpec,
        me: &str,
        default_duration: Duration,
        now: Instant,
    ) -> Option<&'a str> {
        let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty())?;
        if holder == me {
            return None;
        }
        let duration = spec
            .lease_duration_seconds
            .map_or(default_duration, |s| Duration::from_secs(s.max(0) as u64));
        let seen = self.last.as_ref().map_or(now, |(_, at)| *at);
        (now.saturating_duration_since(seen) < duration).then_some(holder)
    }
}

/// The spec this replica writes to take or renew the Lease at `now`.
pub(super) fn taken(
    current: Option<&LeaseSpec>,
    me: &str,
    duration: Duration,
    now: Timestamp,
) -> LeaseSpec {
    let current = current.cloned().unwrap_or_default();
    let renewing = current.holder_identity.as_deref() == Some(me);
    LeaseSpec {
        holder_identity: Some(me.to_string()),
        lease_duration_seconds: Some(duration.as_secs().max(1) as i32),
        acquire_time: if renewing {
            current.acquire_time.clone()
        } else {
            Some(MicroTime(now))
        },
        renew_time: Some(MicroTime(now)),
        lease_transitions: if renewing {
            current.lease_transitions
        } else {
            Some(current.lease_transitions.unwrap_or(0) + 1)
        },
        ..current
    }
}

/// The spec that gives the Lease up: no holder, so a standby takes it on its next try instead
/// of waiting out the duration (client-go's `ReleaseOnCancel`).
pub(super) fn released(current: &LeaseSpec, now: Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        renew_time: Some(MicroTime(now)),
        ..current.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn held_by(holder: &str) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn another_holder_expires_one_duration_after_the_lease_last_changed_here() {
        let start = Instant::now();
        let mut observed = Observed::default();
        observed.saw("1", Some("a"), start);
        let spec = held_by("a");
        let at = |secs| start + secs * SECOND;
        assert_eq!(
            observed.held_by_other(&spec, "b", 15 * SECOND, at(14)),
            Some("a")
        );
        assert_eq!(
            observed.held_by_other(&spec, "b", 15 * SECOND, at(15)),
            None
        );
        // A renewal (new resourceVersion) restarts the clock; seeing the same one again does not.
        observed.saw("2", Some("a"), at(10));
        observed.saw("2", Some("a"), at(12));
        assert_eq!(
            observed.held_by_other(&spec, "b", 15 * SECOND, at(24)),
            Some("a")
        );
        assert_eq!(
            observed.held_by_other(&spec, "b", 15 * SECOND, at(25)),
            None
        );
    }

    #[test]
    fn a_lease_deleted_under_another_holder_is_waited_out() {
        let start = Instant::now();
        let mut observed = Observed::default();
        assert!(
            !observed.other_holder_within("b", 15 * SECOND, start),
            "never seen"
        );
        observed.saw("1", Some("a"), start);
        assert!(observed.other_holder_within("b", 15 * SECOND, start + 14 * SECOND));
        assert!(!observed.other_holder_within("b", 15 * SECOND, start + 15 * SECOND));
        assert!(
            !observed.other_holder_within("a", 15 * SECOND, start),
            "its own"
        );
        observed.saw("2", None, start);
        assert!(
            !observed.other_holder_within("b", 15 * SECOND, start),
            "released"
        );
    }

    #[test]
    fn own_released_or_empty_leases_are_not_held_by_another() {
        let now = Instant::now();
        let mut observed = Observed::default();
        observed.saw("1", Some("me"), now);
        for spec in [held_by("me"), LeaseSpec::default(), held_by("")] {
            assert_eq!(observed.held_by_other(&spec, "me", 15 * SECOND, now), None);
        }
    }

    #[test]
    fn taking_counts_a_transition_and_renewing_keeps_the_acquire_time() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let t1: Timestamp = "2026-01-01T00:00:02Z".parse().unwrap();
        let taken_over = taken(Some(&held_by("a")), "b", 15 * SECOND, t0);
        assert_eq!(taken_over.holder_identity.as_deref(), Some("b"));
        assert_eq!(taken_over.lease_transitions, Some(1));
        assert_eq!(taken_over.acquire_time, Some(MicroTime(t0)));
        let renewed = taken(Some(&taken_over), "b", 15 * SECOND, t1);
        assert_eq!(renewed.lease_transitions, Some(1));
        assert_eq!(renewed.acquire_time, Some(MicroTime(t0)));
        assert_eq!(renewed.renew_time, Some(MicroTime(t1)));
        let given_up = released(&renewed, t1);
        assert_eq!(given_up.holder_identity, None);
        assert_eq!(given_up.acquire_time, Some(MicroTime(t0)));
    }
}
