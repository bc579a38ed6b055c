//! The claims of the watched namespace(s), from a watch instead of a list per reconcile, and the
//! one way the operators write a claim.
//!
//! A plan made from a cache that has not seen the operator's own last write could start a
//! member without its data, take a name twice, or let data move back to an older etcd (the
//! `etcd.version.ran` record). So every claim write goes through [`ClaimApi`], which makes the
//! cache wait for the version the API server returned (client-go's "expectations"), and a
//! namespace is read from the cache only once it shows every such version
//! ([`claim_ledger`](crate::claim_ledger) has the rules). Otherwise, and whenever the caller
//! asks for it, the claims are listed live, and the cache must then catch up with what that
//! list saw before it is read again. Each operator asks for a live read where another actor may
//! have changed claims just before the change that triggered it (the two watches are not
//! ordered): the EtcdCluster operator when the cluster's spec or restore hand-over changed, the
//! EtcdRestore operator when its restore moves to a new step.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use operator_runtime::process::Gone;
use serde_json::Value;
use tokio::sync::Notify;

use crate::claim_ledger::{Key, Ledger, Version, Want};

/// How long a read waits for the cache to show the versions awaited in its namespace before it
/// lists the claims live instead (the watch normally shows a write within milliseconds).
pub const CATCH_UP_WAIT: Duration = Duration::from_secs(3);

/// The cache, shared by an operator's reconciles (in its context).
pub struct Claims {
    client: Client,
    store: Store<PersistentVolumeClaim>,
    ledger: Arc<Mutex<Ledger>>,
    changed: Arc<Notify>,
    catch_up_wait: Duration,
    /// Per object read for (uid): the look it last read the claims under (see
    /// [`Claims::for_object`]).
    looks: Mutex<HashMap<String, String>>,
}

/// What keeps the cache filled: the watch's events go through it (`run`), or a test's.
pub struct ClaimFeed {
    writer: reflector::store::Writer<PersistentVolumeClaim>,
    store: Store<PersistentVolumeClaim>,
    ledger: Arc<Mutex<Ledger>>,
    changed: Arc<Notify>,
}

impl Claims {
    pub fn new(client: Client, catch_up_wait: Duration) -> (Claims, ClaimFeed) {
        let (store, writer) = reflector::store();
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let changed = Arc::new(Notify::new());
        let feed = ClaimFeed {
            writer,
            store: store.clone(),
            ledger: ledger.clone(),
            changed: changed.clone(),
        };
        let claims = Claims {
            client,
            store,
            ledger,
            changed,
            catch_up_wait,
            looks: Mutex::default(),
        };
        (claims, feed)
    }

    /// Every claim of `namespace`: from the cache once it shows every version awaited there
    /// (waiting for that at most the catch-up wait), else (or with `live`) listed.
    pub async fn of_namespace(
        &self,
        namespace: &str,
        live: bool,
    ) -> Result<Vec<PersistentVolumeClaim>, kube::Error> {
        if !live && self.caught_up(namespace).await {
            let mut cached: Vec<PersistentVolumeClaim> = self
                .store
                .state()
                .iter()
                .filter(|c| c.namespace().as_deref() == Some(namespace))
                .map(|c| (**c).clone())
                .collect();
            // In the order a list has them (by name), so that a plan does not depend on where
            // its claims came from.
            cached.sort_by_key(|c| c.name_any());
            return Ok(cached);
        }
        // What the cache holds before the list: only what differs from it is awaited after.
        let before = self.cached_versions(namespace);
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), namespace);
        let listed = api.list(&ListParams::default()).await?.items;
        self.await_listed(namespace, &before, &listed);
        Ok(listed)
    }

    /// Every claim of `namespace`, read for the object with `uid` in the state `look` (what of
    /// it may follow another actor's claim writes: its spec's generation, a hand-over, a
    /// recorded step): listed live when `look` is not the one its claims were last read under
    /// (and so on its first read), from the cache otherwise.
    pub async fn for_object(
        &self,
        namespace: &str,
        uid: &str,
        look: String,
    ) -> Result<Vec<PersistentVolumeClaim>, kube::Error> {
        let live = self.looks().get(uid) != Some(&look);
        let claims = self.of_namespace(namespace, live).await?;
        // Only once read: a failed live read is made again by the next reconcile.
        self.looks().insert(uid.to_string(), look);
        Ok(claims)
    }

    /// Forgets the looks of objects that are gone.
    pub fn forget<K: Resource>(&self, gone: &Gone<'_, K>) {
        let mut looks = self.looks();
        match gone {
            Gone::Deleted(object) => {
                looks.remove(&object.uid().unwrap_or_default());
            }
            Gone::Relisted(objects) => {
                let uids: Vec<String> = objects.iter().filter_map(|o| o.uid()).collect();
                looks.retain(|uid, _| uids.contains(uid));
            }
        }
    }

    fn looks(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.looks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes the claims of `namespace` through this, so that the cache waits for them.
    pub fn api(&self, namespace: &str) -> ClaimApi<'_> {
        ClaimApi {
            api: Api::namespaced(self.client.clone(), namespace),
            namespace: namespace.to_string(),
            claims: self,
        }
    }

    async fn caught_up(&self, namespace: &str) -> bool {
        let deadline = tokio::time::Instant::now() + self.catch_up_wait;
        loop {
            // Asked for before the look, so that a change between the two is not missed.
            let changed = self.changed.notified();
            {
                let mut ledger = self.lock();
                log_expired(ledger.expire(Instant::now()));
                if ledger.caught_up(namespace) {
                    return true;
                }
                // A watch that has not listed yet (starting, or not allowed to watch) is not
                // waited for.
                if !ledger.synced() {
                    return false;
                }
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                tracing::debug!(namespace, "claim cache behind: listing claims");
                return false;
            }
        }
    }

    /// The uid and version of each claim of `namespace` the cache holds.
    fn cached_versions(&self, namespace: &str) -> HashMap<Key, Version> {
        self.store
            .state()
            .iter()
            .filter(|c| c.namespace().as_deref() == Some(namespace))
            .filter_map(|c| Some((key_of(c), live_version(c)?)))
            .collect()
    }

    /// The cache is read again only once it has seen what a live list saw, where that differs
    /// from what it held before the list (`before`): every claim listed in another version, and
    /// the deletion of those it held that the list did not have. A claim made or changed after
    /// the list is not awaited: the watch shows it anyway, and no later version is waited for.
    fn await_listed(
        &self,
        namespace: &str,
        before: &HashMap<Key, Version>,
        listed: &[PersistentVolumeClaim],
    ) {
        let now = Instant::now();
        let mut ledger = self.lock();
        ledger.read_live(namespace);
        let mut listed_keys = HashMap::new();
        for claim in listed {
            let Some(version) = live_version(claim) else {
                continue;
            };
            let key = key_of(claim);
            if before.get(&key) != Some(&version) {
                self.expect(&mut ledger, key.clone(), want_of(&version), now);
            }
            listed_keys.insert(key, version);
        }
        for (key, version) in before {
            let Version::Live { uid, .. } = version else {
                continue;
            };
            let still =
                matches!(listed_keys.get(key), Some(Version::Live { uid: u, .. }) if u == uid);
            if !still {
                let want = Want::Gone { uid: uid.clone() };
                self.expect(&mut ledger, key.clone(), want, now);
            }
        }
    }

    /// A write in `namespace` failed without an answer from the API server (a timeout, a lost
    /// connection): it may have happened, so the namespace is read live next time.
    fn unanswered(&self, namespace: &str, error: &kube::Error) {
        if !matches!(error, kube::Error::Api(_)) {
            self.lock().distrust(namespace);
        }
    }

    /// After a write: the cache waits for the version the API server returned.
    fn wrote(&self, claim: &PersistentVolumeClaim) {
        if let Some(version) = live_version(claim) {
            let mut ledger = self.lock();
            self.expect(
                &mut ledger,
                key_of(claim),
                want_of(&version),
                Instant::now(),
            );
        }
    }

    /// After a delete: the cache waits for the claim's deletion.
    fn deleted(&self, namespace: &str, name: &str, uid: String) {
        let key = (namespace.to_string(), name.to_string());
        let mut ledger = self.lock();
        self.expect(&mut ledger, key, Want::Gone { uid }, Instant::now());
    }

    fn expect(&self, ledger: &mut Ledger, key: Key, want: Want, now: Instant) {
        let current = self.cached(&key);
        ledger.expect(key, want, current.as_ref(), now);
    }

    /// The version of claim `key` the cache holds.
    fn cached(&self, key: &Key) -> Option<Version> {
        let claim = self
            .store
            .get(&reflector::ObjectRef::new(&key.1).within(&key.0))?;
        live_version(&claim)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ledger> {
        // The ledger is only ever left consistent: a panic elsewhere does not poison its data.
        self.ledger.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The one way the operator writes a claim: each write's result is awaited in the cache.
pub struct ClaimApi<'a> {
    api: Api<PersistentVolumeClaim>,
    namespace: String,
    claims: &'a Claims,
}

impl ClaimApi<'_> {
    pub async fn create(
        &self,
        claim: &PersistentVolumeClaim,
    ) -> Result<PersistentVolumeClaim, kube::Error> {
        let made = self.answered(self.api.create(&PostParams::default(), claim).await)?;
        self.claims.wrote(&made);
        Ok(made)
    }

    pub async fn patch(
        &self,
        name: &str,
        patch: &Patch<Value>,
    ) -> Result<PersistentVolumeClaim, kube::Error> {
        let patched = self.answered(self.api.patch(name, &PatchParams::default(), patch).await)?;
        self.claims.wrote(&patched);
        Ok(patched)
    }

    /// Deletes claim `name` (`uid`: the claim meant, when known; a precondition in `params`
    /// or not): the cache waits for its deletion, or for its version marked for deletion while
    /// a pod still uses it.
    pub async fn delete(
        &self,
        name: &str,
        uid: Option<&str>,
        params: &DeleteParams,
    ) -> Result<(), kube::Error> {
        let answer = self.answered(self.api.delete(name, params).await)?;
        if let Some(terminating) = answer.as_ref().left() {
            self.claims.wrote(terminating);
            return Ok(());
        }
        // Gone at once: the API server names the deleted claim's uid in its answer; else the
        // one the caller meant, else the one the cache holds under that name.
        let named = answer
            .right()
            .and_then(|status| status.details)
            .map(|details| details.uid)
            .filter(|uid| !uid.is_empty());
        let cached = || match self
            .claims
            .cached(&(self.namespace.clone(), name.to_string()))
        {
            Some(Version::Live { uid, .. }) => Some(uid),
            _ => None,
        };
        match named.or(uid.map(String::from)).or_else(cached) {
            Some(uid) => self.claims.deleted(&self.namespace, name, uid),
            // Not known which claim went: the namespace is read live next time.
            None => self.claims.lock().distrust(&self.namespace),
        }
        Ok(())
    }

    /// A read by name, live (a claim found under a new member's name): the cache waits for
    /// what it returned, which the operator is about to act on.
    pub async fn get(&self, name: &str) -> Result<PersistentVolumeClaim, kube::Error> {
        let claim = self.api.get(name).await?;
        self.claims.wrote(&claim);
        Ok(claim)
    }

    pub async fn get_opt(&self, name: &str) -> Result<Option<PersistentVolumeClaim>, kube::Error> {
        let claim = self.api.get_opt(name).await?;
        if let Some(claim) = &claim {
            self.claims.wrote(claim);
        }
        Ok(claim)
    }

    /// A write's result; one that failed without an answer may still have happened.
    fn answered<T>(&self, result: Result<T, kube::Error>) -> Result<T, kube::Error> {
        if let Err(error) = &result {
            self.claims.unanswered(&self.namespace, error);
        }
        result
    }
}

/// The claim watch's task: stopped when this is dropped (with the controller it serves, also
/// when a lost Lease drops the controller).
pub struct ClaimWatch(tokio::task::JoinHandle<()>);

impl Drop for ClaimWatch {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl ClaimFeed {
    /// Runs [`ClaimFeed::run`] in a task of its own, until the returned guard is dropped.
    pub fn spawn(self, client: Client, namespace: Option<String>) -> ClaimWatch {
        ClaimWatch(tokio::spawn(self.run(client, namespace)))
    }

    /// Watches the claims of `namespace` (or of all) until the process ends.
    pub async fn run(mut self, client: Client, namespace: Option<String>) {
        let api: Api<PersistentVolumeClaim> = match namespace {
            Some(namespace) => Api::namespaced(client, &namespace),
            None => Api::all(client),
        };
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => self.apply(&event),
                // The watcher goes on where it stopped, or relists when it cannot: nothing it
                // missed is taken for seen.
                Err(error) => tracing::warn!(%error, "claim watch"),
            }
        }
    }

    /// Applies one event of the watch to the cache and records what it showed.
    pub fn apply(&mut self, event: &watcher::Event<PersistentVolumeClaim>) {
        let now = Instant::now();
        {
            let mut ledger = self.ledger.lock().unwrap_or_else(|e| e.into_inner());
            match event {
                watcher::Event::Apply(claim) => {
                    if let Some(version) = live_version(claim) {
                        ledger.saw(key_of(claim), version, now);
                    }
                }
                watcher::Event::Delete(claim) => {
                    if let Some(uid) = claim.uid() {
                        ledger.saw(key_of(claim), Version::Deleted { uid }, now);
                    }
                }
                watcher::Event::Init => ledger.relist_begun(),
                watcher::Event::InitApply(claim) => {
                    if let Some(version) = live_version(claim) {
                        ledger.relisted(key_of(claim), version);
                    }
                }
                watcher::Event::InitDone => {
                    let before = self
                        .store
                        .state()
                        .iter()
                        .filter_map(|c| Some((key_of(c), c.uid()?)))
                        .collect();
                    // The cache takes the relist's claims with the same event, below.
                    ledger.relist_done(before, now);
                }
            }
            log_expired(ledger.expire(now));
            // The cache changes with the ledger held: a read sees both or neither.
            self.writer.apply_watcher_event(event);
        }
        self.changed.notify_waiters();
    }
}

fn log_expired(expired: Vec<(Key, Want)>) {
    for (key, want) in expired {
        tracing::warn!(namespace = %key.0, claim = %key.1, ?want, "the claim watch never showed this version: no longer waited for");
    }
}

fn key_of(claim: &PersistentVolumeClaim) -> Key {
    (claim.namespace().unwrap_or_default(), claim.name_any())
}

fn live_version(claim: &PersistentVolumeClaim) -> Option<Version> {
    Some(Version::Live {
        uid: claim.uid()?,
        version: claim.resource_version()?,
    })
}

fn want_of(version: &Version) -> Want {
    match version {
        Version::Live { uid, version } => Want::Version {
            uid: uid.clone(),
            version: version.clone(),
        },
        Version::Deleted { uid } => Want::Gone { uid: uid.clone() },
    }
}
