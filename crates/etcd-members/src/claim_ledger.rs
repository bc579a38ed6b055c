//! What the claim watch has shown, and the versions the cache must show before a plan may be
//! made from it (see claims.rs). Pure: no client, no clock of its own; the rules are tested as
//! specifications below.
//!
//! A version is awaited after each of this operator's own writes (the object the API server
//! returned, or the uid of a claim it deleted) and after a live read (everything that read saw).
//! The watch delivers each claim's versions in order, so once a version was seen the cache holds
//! it or something newer. A relist whose list was requested after the version was awaited holds
//! it or something newer too.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// A claim: namespace and name.
pub type Key = (String, String);

/// One version of a claim as the watch showed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Version {
    Live { uid: String, version: String },
    Deleted { uid: String },
}

/// What the cache must have shown before it is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Want {
    /// This version of this claim (written or read live), or its deletion (which is later).
    Version { uid: String, version: String },
    /// The deletion of the claim with this uid.
    Gone { uid: String },
}

impl Want {
    /// Whether having seen `seen` means the cache holds what is wanted, or something newer.
    /// Only the same claim (uid) counts: events of an older claim of the same name may still
    /// be on their way, and they come before the wanted one.
    fn met_by(&self, seen: &Version) -> bool {
        match (self, seen) {
            (Want::Version { uid, version }, Version::Live { uid: u, version: v }) => {
                uid == u && version == v
            }
            (Want::Version { uid, .. } | Want::Gone { uid }, Version::Deleted { uid: u }) => {
                uid == u
            }
            (Want::Gone { .. }, Version::Live { .. }) => false,
        }
    }
}

/// How long the versions seen are remembered (a version is awaited right after the write or
/// read that returned it, so seconds would do), and how long a version is awaited before it is
/// given up with a warning (the reads of its namespace are live until then).
pub const REMEMBERED: Duration = Duration::from_secs(600);
pub const AWAITED_AT_MOST: Duration = Duration::from_secs(600);

#[derive(Debug)]
struct Awaited {
    key: Key,
    want: Want,
    /// Relists begun before it was awaited: a relist begun after it covers it.
    relists_begun: u64,
    since: Instant,
}

#[derive(Debug, Default)]
pub struct Ledger {
    /// A first list has been completed: the cache holds every claim.
    synced: bool,
    relists_begun: u64,
    /// The claims of the relist under way, applied to the cache when it is done.
    relisting: Vec<(Key, Version)>,
    seen: HashMap<Key, Vec<(Instant, Version)>>,
    awaited: Vec<Awaited>,
    /// Namespaces where a write may have happened without an answer (a timeout, a lost
    /// connection): read live until a live read saw what it did.
    distrusted: HashSet<String>,
    last_expiry: Option<Instant>,
}

/// How often [`Ledger::expire`] looks (it scans everything seen).
const EXPIRY_EVERY: Duration = Duration::from_secs(10);

impl Ledger {
    /// The watch saw a claim created, changed or deleted.
    pub fn saw(&mut self, key: Key, version: Version, now: Instant) {
        self.awaited
            .retain(|a| !(a.key == key && a.want.met_by(&version)));
        self.seen.entry(key).or_default().push((now, version));
    }

    /// A relist begins: its list is requested after this.
    pub fn relist_begun(&mut self) {
        self.relists_begun += 1;
        self.relisting.clear();
    }

    /// A claim of the relist under way.
    pub fn relisted(&mut self, key: Key, version: Version) {
        self.relisting.push((key, version));
    }

    /// The relist is done and the cache holds its claims. `before`: the claims the cache held
    /// until then; those the relist does not have were deleted before its list.
    pub fn relist_done(&mut self, before: Vec<(Key, String)>, now: Instant) {
        let relisted = std::mem::take(&mut self.relisting);
        let still: HashSet<(&Key, &str)> = relisted
            .iter()
            .filter_map(|(key, version)| match version {
                Version::Live { uid, .. } => Some((key, uid.as_str())),
                Version::Deleted { .. } => None,
            })
            .collect();
        let gone: Vec<(Key, String)> = before
            .into_iter()
            .filter(|(key, uid)| !still.contains(&(key, uid.as_str())))
            .collect();
        for (key, uid) in gone {
            self.saw(key, Version::Deleted { uid }, now);
        }
        for (key, version) in relisted {
            self.saw(key, version, now);
        }
        let relists_begun = self.relists_begun;
        self.awaited.retain(|a| a.relists_begun >= relists_begun);
        self.synced = true;
    }

    /// A write in `namespace` may have happened without its answer: the namespace is read live
    /// until [`Ledger::read_live`].
    pub fn distrust(&mut self, namespace: &str) {
        self.distrusted.insert(namespace.to_string());
    }

    /// `namespace` was listed live (what that list saw is awaited separately).
    pub fn read_live(&mut self, namespace: &str) {
        self.distrusted.remove(namespace);
    }

    /// Whether the watch has completed a list: before, the cache holds nothing to wait for.
    pub fn synced(&self) -> bool {
        self.synced
    }

    /// The cache must show `want` for `key` before it is read again. `current`: what the cache
    /// holds for `key` now.
    pub fn expect(&mut self, key: Key, want: Want, current: Option<&Version>, now: Instant) {
        let seen_already = current.is_some_and(|c| want.met_by(c))
            || self
                .seen
                .get(&key)
                .is_some_and(|seen| seen.iter().any(|(_, v)| want.met_by(v)));
        if !seen_already {
            self.awaited.push(Awaited {
                key,
                want,
                relists_begun: self.relists_begun,
                since: now,
            });
        }
    }

    /// Whether the cache may be read for `namespace`: it holds every claim, and every version
    /// awaited there.
    pub fn caught_up(&self, namespace: &str) -> bool {
        self.synced
            && !self.distrusted.contains(namespace)
            && !self.awaited.iter().any(|a| a.key.0 == namespace)
    }

    /// Forgets versions seen long ago, and gives up versions awaited too long (returned, to be
    /// logged): a watch that has not shown a version for that long is not waited for any more.
    /// Looks at most every few seconds.
    pub fn expire(&mut self, now: Instant) -> Vec<(Key, Want)> {
        if self
            .last_expiry
            .is_some_and(|last| now.duration_since(last) < EXPIRY_EVERY)
        {
            return Vec::new();
        }
        self.last_expiry = Some(now);
        self.seen.retain(|_, seen| {
            seen.retain(|(at, _)| now.duration_since(*at) < REMEMBERED);
            !seen.is_empty()
        });
        let (old, kept) = std::mem::take(&mut self.awaited)
            .into_iter()
            .partition(|a| now.duration_since(a.since) >= AWAITED_AT_MOST);
        self.awaited = kept;
        old.into_iter().map(|a: Awaited| (a.key, a.want)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Key {
        ("ns".into(), name.into())
    }

    fn live(uid: &str, version: &str) -> Version {
        Version::Live {
            uid: uid.into(),
            version: version.into(),
        }
    }

    fn deleted(uid: &str) -> Version {
        Version::Deleted { uid: uid.into() }
    }

    fn wants(uid: &str, version: &str) -> Want {
        Want::Version {
            uid: uid.into(),
            version: version.into(),
        }
    }

    fn gone(uid: &str) -> Want {
        Want::Gone { uid: uid.into() }
    }

    /// A ledger whose first list is done (with no claims).
    fn synced() -> Ledger {
        let mut ledger = Ledger::default();
        ledger.relist_begun();
        ledger.relist_done(vec![], Instant::now());
        ledger
    }

    #[test]
    fn before_its_first_list_is_done_the_cache_is_not_read() {
        let mut ledger = Ledger::default();
        assert!(!ledger.caught_up("ns"));
        ledger.relist_begun();
        ledger.relisted(key("a"), live("u1", "5"));
        assert!(!ledger.caught_up("ns"));
        ledger.relist_done(vec![], Instant::now());
        assert!(ledger.caught_up("ns"));
    }

    #[test]
    fn when_a_written_version_was_not_seen_yet_the_namespace_waits_for_it() {
        let mut ledger = synced();
        let now = Instant::now();
        ledger.expect(key("a"), wants("u1", "7"), Some(&live("u1", "6")), now);
        assert!(!ledger.caught_up("ns"));
        assert!(ledger.caught_up("other"), "only its namespace waits");
        ledger.saw(key("a"), live("u1", "7"), now);
        assert!(ledger.caught_up("ns"));
    }

    #[test]
    fn when_the_cache_holds_the_version_already_nothing_is_awaited() {
        let mut ledger = synced();
        let now = Instant::now();
        ledger.expect(key("a"), wants("u1", "7"), Some(&live("u1", "7")), now);
        assert!(ledger.caught_up("ns"));
    }

    #[test]
    fn when_the_watch_showed_the_version_and_a_later_one_before_it_was_awaited_it_is_met() {
        let mut ledger = synced();
        let now = Instant::now();
        ledger.saw(key("a"), live("u1", "7"), now);
        ledger.saw(key("a"), live("u1", "8"), now);
        ledger.expect(key("a"), wants("u1", "7"), Some(&live("u1", "8")), now);
        assert!(ledger.caught_up("ns"));
    }

    #[test]
    fn when_an_older_version_arrives_after_the_write_the_namespace_still_waits() {
        let mut ledger = synced();
        let now = Instant::now();
        ledger.expect(key("a"), wants("u1", "7"), None, now);
        ledger.saw(key("a"), live("u1", "6"), now);
        assert!(!ledger.caught_up("ns"));
    }

    #[test]
    fn when_the_written_claim_is_deleted_its_deletion_is_newer_than_the_write() {
        let mut ledger = synced();
        let now = Instant::now();
        ledger.expect(key("a"), wants("u1", "7"), None, now);
        ledger.saw(key("a"), deleted("u1"), now);
        assert!(ledger.caught_up("ns"));
    }

    #[test]
    fn when_a_claim_was_deleted_only_the_deletion_of_that_claim_meets_it() {
        let mut ledger = synced();
        let now = Instant::now();
        ledger.expect(key("a"), gone("u2"), Some(&live("u2", "9")), now);
        // An older claim of the same name: its events come before the deleted one's.
        ledger.saw(key("a"), deleted("u1"), now);
        ledger.saw(key("a"), live("u2", "9"), now);
        assert!(!ledger.caught_up("ns"));
        // A cache that does not hold the claim has not necessarily seen it deleted: it may not
        // have seen it created yet.
        let mut unseen = synced();
        unseen.expect(key("b"), gone("u3"), None, now);
        assert!(!unseen.caught_up("ns"));
        ledger.saw(key("a"), deleted("u2"), now);
        assert!(ledger.caught_up("ns"));
    }

    #[test]
    fn when_a_relist_begins_after_a_version_was_awaited_its_end_meets_it() {
        let mut ledger = synced();
        let now = Instant::now();
        ledger.expect(key("a"), wants("u1", "7"), None, now);
        ledger.relist_begun();
        ledger.relisted(key("a"), live("u1", "9"));
        assert!(
            !ledger.caught_up("ns"),
            "the cache is the old one until the relist is done"
        );
        ledger.relist_done(vec![], now);
        assert!(ledger.caught_up("ns"));
    }

    #[test]
    fn when_a_version_is_awaited_during_a_relist_only_what_the_relist_shows_meets_it() {
        let mut ledger = synced();
        let now = Instant::now();
        ledger.relist_begun();
        ledger.expect(key("a"), wants("u1", "7"), None, now);
        ledger.expect(key("b"), wants("u2", "3"), None, now);
        ledger.relisted(key("a"), live("u1", "7"));
        ledger.relisted(key("b"), live("u2", "2"));
        ledger.relist_done(vec![], now);
        assert!(
            !ledger.caught_up("ns"),
            "b's version 3 is not in the relist"
        );
        ledger.saw(key("b"), live("u2", "3"), now);
        assert!(ledger.caught_up("ns"));
    }

    #[test]
    fn when_a_relist_lacks_a_claim_the_cache_held_that_claim_was_deleted() {
        let mut ledger = synced();
        let now = Instant::now();
        ledger.relist_begun();
        ledger.expect(key("a"), gone("u1"), Some(&live("u1", "4")), now);
        ledger.relist_done(vec![(key("a"), "u1".into())], now);
        assert!(ledger.caught_up("ns"));
        // And a later wait for it is met by what was seen.
        ledger.expect(key("a"), gone("u1"), None, now);
        assert!(ledger.caught_up("ns"));
    }

    #[test]
    fn when_a_write_went_unanswered_the_namespace_waits_for_a_live_read() {
        let mut ledger = synced();
        ledger.distrust("ns");
        assert!(!ledger.caught_up("ns"));
        assert!(ledger.caught_up("other"));
        ledger.read_live("ns");
        assert!(ledger.caught_up("ns"));
    }

    #[test]
    fn versions_awaited_too_long_are_given_up_and_old_sightings_forgotten() {
        let mut ledger = synced();
        let then = Instant::now();
        ledger.saw(key("a"), live("u1", "1"), then);
        ledger.expect(key("b"), wants("u2", "2"), None, then);
        assert!(ledger.expire(then + Duration::from_secs(1)).is_empty());
        let later = then + AWAITED_AT_MOST;
        assert_eq!(ledger.expire(later), vec![(key("b"), wants("u2", "2"))]);
        assert!(ledger.caught_up("ns"));
        // Forgotten: awaiting it now waits (the cache's current version still meets it).
        ledger.expect(key("a"), wants("u1", "1"), None, later);
        assert!(!ledger.caught_up("ns"));
    }
}
