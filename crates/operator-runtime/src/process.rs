//! The start-up every operator binary shares: the flags that say what to watch and how to run,
//! the Kubernetes client, shutdown on a signal, the `/metrics` + `/healthz` + `/readyz` server
//! and, when asked, leader election. A binary parses [`RuntimeArgs`] (flattened into its own
//! flags), calls [`start`], runs its controller until [`Started::stop`] is cancelled, then
//! [`Started::finish`].

use std::net::SocketAddr;
use std::sync::Arc;

use thiserror::Error;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::http::{self, EncodeMetrics, Health};
use crate::leader::{self, LeaderError, Leadership, LeaseConfig};
use crate::shutdown::stop_on_signal;

/// Flags with the same names and environment variables in every operator.
#[derive(clap::Args, Debug, Clone)]
pub struct RuntimeArgs {
    /// Watch objects in this namespace only; empty watches all namespaces.
    #[arg(long, env = "WATCH_NAMESPACE", default_value = "")]
    pub namespace: String,
    /// Watch only objects whose labels match this selector (e.g. `team=a`), to split objects
    /// between operator deployments; empty watches all.
    #[arg(long, env = "WATCH_SELECTOR", default_value = "")]
    pub selector: String,
    /// Address of the /metrics, /healthz and /readyz server.
    #[arg(long, env = "LISTEN_ADDRESS", default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// Elect a leader through a Lease so that replicas never act on one object together.
    #[arg(long, env = "LEADER_ELECTION", default_value_t = false)]
    pub leader_election: bool,
    /// Name of the Lease; defaults to the operator's name.
    #[arg(long, env = "LEASE_NAME")]
    pub lease_name: Option<String>,
    /// Namespace of the Lease; defaults to the pod's namespace (downward API).
    #[arg(long, env = "POD_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// This replica's identity in the Lease and in events (downward API pod name).
    #[arg(long, env = "POD_NAME")]
    pub pod_name: Option<String>,
    /// Seconds a Lease is held without renewal. The holder renews every 2/15 of it and stops
    /// acting when it could not renew for 2/3 of it (the renew deadline).
    #[arg(long, env = "LEASE_DURATION_SECONDS", default_value_t = 15)]
    pub lease_duration_seconds: u64,
}

impl RuntimeArgs {
    /// The namespace to watch, `None` for all.
    pub fn watch_namespace(&self) -> Option<&str> {
        Some(self.namespace.as_str()).filter(|n| !n.is_empty())
    }

    /// The operator's own namespace (its pod's, else the one it watches), where what it keeps
    /// for itself lives: its Lease, the member pods' proof key.
    pub fn own_namespace(&self) -> Option<String> {
        self.lease_namespace
            .clone()
            .or_else(|| self.watch_namespace().map(str::to_string))
    }

    /// The label selector, `None` for all objects.
    pub fn watch_selector(&self) -> Option<&str> {
        Some(self.selector.as_str()).filter(|s| !s.is_empty())
    }
}

#[derive(Debug, Error)]
pub enum StartError {
    #[error("no Kubernetes configuration: set KUBECONFIG or run in a pod ({0})")]
    Config(#[source] kube::Error),
    #[error("cannot listen on {address}: {source}")]
    Listen {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error("leader election needs --lease-namespace (POD_NAMESPACE) or --namespace")]
    LeaseNamespace,
    #[error(transparent)]
    Leader(#[from] LeaderError),
    #[error("leadership lost")]
    LeadershipLost,
}

/// A running operator process.
pub struct Started {
    pub client: kube::Client,
    /// Cancelled on SIGTERM/SIGINT or when leadership is lost: the controller winds down.
    pub stop: CancellationToken,
    pub health: Arc<Health>,
    /// This replica's name, for events and the Lease.
    pub identity: String,
    server: JoinHandle<std::io::Result<()>>,
    leadership: Option<Leadership>,
}

/// Starts the process plumbing for operator `manager`. Returns `None` when stopped (a signal)
/// while waiting for leadership: the binary exits cleanly.
pub async fn start(
    manager: &str,
    args: &RuntimeArgs,
    metrics: EncodeMetrics,
) -> Result<Option<Started>, StartError> {
    let client = kube::Client::try_default()
        .await
        .map_err(StartError::Config)?;
    let stop = CancellationToken::new();
    tokio::spawn(stop_on_signal(stop.clone()));
    let health = Arc::new(Health::default());
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|source| StartError::Listen {
            address: args.listen,
            source,
        })?;
    let server = tokio::spawn(http::serve(
        listener,
        http::router(metrics, health.clone()),
        stop.clone(),
    ));
    let identity = args
        .pod_name
        .clone()
        .unwrap_or_else(|| format!("{manager}-{}", std::process::id()));
    let leadership = if args.leader_election {
        let lease = LeaseConfig {
            name: args.lease_name.clone().unwrap_or_else(|| manager.into()),
            namespace: args.own_namespace().ok_or(StartError::LeaseNamespace)?,
            identity: identity.clone(),
            duration_seconds: args.lease_duration_seconds,
        };
        match leader::acquire(client.clone(), &lease, &health, &stop).await? {
            Some(leadership) => Some(leadership),
            None => return Ok(None),
        }
    } else {
        None
    };
    Ok(Some(Started {
        client,
        stop,
        health,
        identity,
        server,
        leadership,
    }))
}

impl Started {
    /// Runs `work` (a controller) until it returns or leadership is lost. On a loss `work` is
    /// dropped at once, reconciles in flight with it at their next await point, instead of
    /// being waited for (a graceful shutdown waits for them): nothing this replica started
    /// goes on to record an intent or call etcd after a standby may lead. `None` when dropped.
    pub async fn until_leadership_lost<F: std::future::Future>(
        &self,
        work: F,
    ) -> Option<F::Output> {
        match &self.leadership {
            Some(leadership) => until_cancelled(&leadership.lost, work).await,
            None => Some(work.await),
        }
    }

    /// After the controller has returned (its work wound down): stops the server, releases
    /// the Lease so a standby takes over at once, and says whether the process ended because
    /// it lost leadership (an error, so the pod restarts as a standby).
    pub async fn finish(self) -> Result<(), StartError> {
        self.stop.cancel();
        let _ = self.server.await;
        match self.leadership {
            Some(leadership) if leadership.lost.is_cancelled() => Err(StartError::LeadershipLost),
            Some(leadership) => {
                leadership.release().await;
                Ok(())
            }
            None => Ok(()),
        }
    }
}

/// `work`, unless `token` is cancelled first: then `None`, and `work` is dropped.
pub async fn until_cancelled<F: std::future::Future>(
    token: &CancellationToken,
    work: F,
) -> Option<F::Output> {
    tokio::select! {
        biased;
        () = token.cancelled() => None,
        output = work => Some(output),
    }
}

/// An object the controller no longer watches: what the operator keeps about it (metric
/// series, retry state) goes with it.
pub enum Gone<'a, K> {
    /// It was deleted.
    Deleted(&'a K),
    /// The watch (re)listed: these are every object there is; any other was deleted while the
    /// watch was down.
    Relisted(&'a [Arc<K>]),
}

/// What an operator keeps per object (metric series), to be dropped when the object is gone.
pub trait PerObjectState {
    fn forget(&self, namespace: &str, name: &str);
    /// Keeps only the objects for which `exists` holds.
    fn retain(&self, exists: &dyn Fn(&str, &str) -> bool);
}

/// Drops what is kept about gone objects: their retry state and their series.
pub fn forget_gone<K: kube::Resource>(
    gone: Gone<'_, K>,
    backoff: &crate::backoff::PerObject,
    state: &dyn PerObjectState,
) {
    use kube::ResourceExt;
    match gone {
        Gone::Deleted(object) => {
            backoff.forget(&object.uid().unwrap_or_default());
            state.forget(&object.namespace().unwrap_or_default(), &object.name_any());
        }
        Gone::Relisted(objects) => {
            let uids: std::collections::BTreeSet<String> =
                objects.iter().filter_map(|o| o.uid()).collect();
            let names: std::collections::BTreeSet<(String, String)> = objects
                .iter()
                .map(|o| (o.namespace().unwrap_or_default(), o.name_any()))
                .collect();
            backoff.retain(|uid| uids.contains(uid));
            state.retain(&|namespace, name| {
                names.contains(&(namespace.to_string(), name.to_string()))
            });
        }
    }
}

/// Called with each reconcile's result. A reconcile already running when its object was
/// deleted can write the object's series (or retry state) again after [`forget_gone`] dropped
/// them, and no later event would drop them: so when the object is no longer in `store`,
/// `gone` is told again, as after a relist.
pub fn forget_if_deleted<K, E, W>(
    store: &kube::runtime::reflector::Store<K>,
    result: &Result<
        (
            kube::runtime::reflector::ObjectRef<K>,
            kube::runtime::controller::Action,
        ),
        kube::runtime::controller::Error<E, W>,
    >,
    gone: impl Fn(Gone<'_, K>),
) where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
    E: std::error::Error + 'static,
    W: std::error::Error + 'static,
{
    use kube::runtime::controller::Error;
    use kube::runtime::reflector::ObjectRef;
    let object = match result {
        Ok((object, _)) => object.clone(),
        Err(Error::ReconcilerFailed(_, object) | Error::ObjectNotFound(object)) => {
            let typed = ObjectRef::<K>::new(&object.name);
            match &object.namespace {
                Some(namespace) => typed.within(namespace),
                None => typed,
            }
        }
        Err(_) => return,
    };
    if store.get(&object).is_none() {
        gone(Gone::Relisted(&store.state()));
    }
}

/// The watched objects as a controller input that fires on spec changes only (`generation`), with
/// the reflector store it fills: an operator's own status writes must not trigger reconciles.
/// Only objects matching `selector` (a label selector) when one is given. `gone` is called for
/// each deleted object and after each (re)list.
pub fn spec_changes<K, G>(
    api: kube::Api<K>,
    selector: Option<&str>,
    gone: G,
) -> (
    kube::runtime::reflector::Store<K>,
    impl futures::Stream<Item = Result<K, kube::runtime::watcher::Error>> + Send + use<K, G>,
)
where
    G: Fn(Gone<'_, K>) + Send + 'static,
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    use futures::TryStreamExt;
    use kube::runtime::WatchStreamExt;
    use kube::runtime::watcher::Event;
    let mut config = kube::runtime::watcher::Config::default();
    if let Some(selector) = selector {
        config = config.labels(selector);
    }
    let (reader, writer) = kube::runtime::reflector::store();
    let listed = reader.clone();
    let stream = kube::runtime::reflector(writer, kube::runtime::watcher(api, config))
        .default_backoff()
        .inspect_ok(move |event| match event {
            Event::Delete(object) => gone(Gone::Deleted(object)),
            Event::InitDone => gone(Gone::Relisted(&listed.state())),
            _ => {}
        })
        .applied_objects()
        .predicate_filter(kube::runtime::predicates::generation, Default::default());
    (reader, stream)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::ResourceExt;
    use kube::runtime::controller::{Action, Error};
    use kube::runtime::reflector::{self, ObjectRef};
    use kube::runtime::watcher::Event;
    use std::sync::Mutex;

    fn config_map(name: &str) -> ConfigMap {
        let mut object = ConfigMap::default();
        object.metadata.name = Some(name.into());
        object.metadata.namespace = Some("ns".into());
        object.metadata.uid = Some(format!("uid-{name}"));
        object
    }

    /// What a `gone` callback was told: the names that are still listed, per call.
    fn told(
        store: &reflector::Store<ConfigMap>,
        result: &Result<(ObjectRef<ConfigMap>, Action), Error<std::io::Error, std::io::Error>>,
    ) -> Vec<Vec<String>> {
        let calls = Mutex::new(Vec::new());
        forget_if_deleted(store, result, |gone| {
            let Gone::Relisted(listed) = gone else {
                panic!("a finished reconcile is told as a relist")
            };
            let mut names: Vec<String> = listed.iter().map(|o| o.name_any()).collect();
            names.sort();
            calls.lock().unwrap().push(names);
        });
        calls.into_inner().unwrap()
    }

    #[test]
    fn a_reconcile_that_ends_after_its_object_was_deleted_forgets_it_again() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        writer.apply_watcher_event(&Event::Apply(config_map("kept")));
        writer.apply_watcher_event(&Event::Apply(config_map("deleted")));
        writer.apply_watcher_event(&Event::Delete(config_map("deleted")));
        let deleted = ObjectRef::from_obj(&config_map("deleted"));
        let kept = ObjectRef::from_obj(&config_map("kept"));
        let requeue = Action::await_change();
        assert_eq!(
            told(&store, &Ok((deleted.clone(), requeue.clone()))),
            vec![vec!["kept".to_string()]]
        );
        let failed =
            Error::ReconcilerFailed(std::io::Error::other("404"), Box::new(deleted.erase()));
        assert_eq!(told(&store, &Err(failed)), vec![vec!["kept".to_string()]]);
        assert!(told(&store, &Ok((kept.clone(), requeue))).is_empty());
        let failed = Error::ReconcilerFailed(std::io::Error::other("409"), Box::new(kept.erase()));
        assert!(told(&store, &Err(failed)).is_empty());
    }

    /// A reconcile stuck in a slow call is dropped the moment leadership is lost, not awaited.
    #[tokio::test]
    async fn work_is_dropped_when_the_token_is_cancelled() {
        struct Dropped(Arc<std::sync::atomic::AtomicBool>);
        impl Drop for Dropped {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let token = CancellationToken::new();
        let guard = Dropped(dropped.clone());
        let slow = async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        };
        let cancel = {
            let token = token.clone();
            async move {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                token.cancel();
            }
        };
        let (result, ()) = tokio::join!(until_cancelled(&token, slow), cancel);
        assert!(result.is_none());
        assert!(dropped.load(std::sync::atomic::Ordering::SeqCst));
        // Work that ends first gives its output.
        let token = CancellationToken::new();
        assert_eq!(until_cancelled(&token, async { 7 }).await, Some(7));
    }
}
