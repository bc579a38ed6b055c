//! Who writes an object's status: every field manager seen owning a field of its `status`
//! subresource while a test runs. A watch, not a read at the end: a writer whose fields are
//! taken over or cleared later still shows in the event its own write made.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;

pub struct StatusWriters {
    seen: Arc<Mutex<BTreeSet<String>>>,
    watch: tokio::task::JoinHandle<()>,
}

impl StatusWriters {
    /// Starts watching the object `name` of `api`.
    pub fn watch<K>(api: Api<K>, name: &str) -> Self
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    {
        let seen = Arc::new(Mutex::new(BTreeSet::new()));
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let watch = {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut events = watcher::watcher(api, config).boxed();
                while let Some(event) = events.next().await {
                    let object = match event {
                        Ok(Event::Apply(object) | Event::InitApply(object)) => object,
                        _ => continue,
                    };
                    let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
                    seen.extend(status_managers(&object));
                }
            })
        };
        StatusWriters { seen, watch }
    }

    /// Every manager seen writing the status so far.
    pub fn seen(&self) -> BTreeSet<String> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for StatusWriters {
    fn drop(&mut self) {
        self.watch.abort();
    }
}

/// The managers of `object` that own fields through its status subresource.
pub fn status_managers<K: Resource>(object: &K) -> BTreeSet<String> {
    object
        .managed_fields()
        .iter()
        .filter(|entry| entry.subresource.as_deref() == Some("status"))
        .filter_map(|entry| entry.manager.clone())
        .collect()
}
