//! The kubelet bed's two missing cluster add-ons (`e2e/cluster/up.sh` runs it), test
//! infrastructure only:
//!
//! - **Cluster DNS records.** Writes a hosts file that dnsmasq (`--hostsdir`) serves: every
//!   Service's `<svc>.<ns>.svc.cluster.local` (its ClusterIP, or for a headless Service the
//!   addresses of its Endpoints) and every endpoint address with a hostname as
//!   `<hostname>.<svc>.<ns>.svc.cluster.local` (what etcd peer URLs use), like CoreDNS.
//! - **Directory volumes**, backed by a directory under `--volumes` each, bound to their claim by
//!   the agent. A volume outlives pods; when its claim is deleted, the directory and the volume are
//!   removed (reclaim policy Delete). Two StorageClasses:
//!   - `testbed-local` (the default): **node-local**, as local-path-provisioner and local SSD
//!     classes are. The volume's node affinity names one node, so a pod using the claim can only
//!     run there. On a bed of one node it binds at once (`Immediate`, the node is the only one);
//!     on a bed of several it is `WaitForFirstConsumer`: the scheduler picks the node of the first
//!     pod (`volume.kubernetes.io/selected-node`) and the volume is made for that node.
//!   - `testbed-shared`: volumes any node may mount (`Immediate`, no node affinity), as network
//!     storage is; for the tests that need a claim to follow its pod to another node.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Endpoints, PersistentVolume, PersistentVolumeClaim, Service};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

const STORAGE_CLASS: &str = "testbed-local";
const SHARED_STORAGE_CLASS: &str = "testbed-shared";
/// The annotation the scheduler sets on a `WaitForFirstConsumer` claim: the node it chose.
const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
const PROVISIONER: &str = "testbed.etcd-backup-suite/local";
const DOMAIN: &str = "cluster.local";

struct Args {
    kubeconfig: PathBuf,
    dns_hosts: PathBuf,
    volumes: PathBuf,
    nodes: Vec<String>,
}

fn args() -> Result<Args> {
    let mut map = BTreeMap::new();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        map.insert(flag, value);
    }
    let mut take = |flag: &str| map.remove(flag).with_context(|| format!("missing {flag}"));
    Ok(Args {
        kubeconfig: take("--kubeconfig")?.into(),
        dns_hosts: take("--dns-hosts")?.into(),
        volumes: take("--volumes")?.into(),
        nodes: take("--nodes")?.split(',').map(str::to_string).collect(),
    })
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args = args().context(
        "usage: bed-agent --kubeconfig FILE --dns-hosts FILE --volumes DIR --nodes NAME,...",
    )?;
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(&args.kubeconfig)?,
        &KubeConfigOptions::default(),
    )
    .await?;
    let client = Client::try_from(config)?;
    install_storage_classes(&client, args.nodes.len()).await?;
    tokio::try_join!(
        dns(client.clone(), args.dns_hosts),
        volumes(client, args.volumes, args.nodes),
    )?;
    Ok(())
}

// ---- DNS ----

async fn dns(client: Client, hosts: PathBuf) -> Result<()> {
    let (services, services_writer) = reflector::store::<Service>();
    let (endpoints, endpoints_writer) = reflector::store::<Endpoints>();
    let service_events = reflector(
        services_writer,
        watcher(
            Api::<Service>::all(client.clone()),
            watcher::Config::default(),
        ),
    )
    .default_backoff()
    .map(|e| e.map(|_| ()).map_err(anyhow::Error::from));
    let endpoint_events = reflector(
        endpoints_writer,
        watcher(Api::<Endpoints>::all(client), watcher::Config::default()),
    )
    .default_backoff()
    .map(|e| e.map(|_| ()).map_err(anyhow::Error::from));
    let mut events = std::pin::pin!(futures::stream::select(service_events, endpoint_events));
    let mut written = None;
    while let Some(event) = events.next().await {
        if let Err(error) = event {
            eprintln!("bed-agent: dns watch: {error:#}");
            continue;
        }
        let text = hosts_file(&services, &endpoints);
        if written.as_ref() != Some(&text) {
            write_atomically(&hosts, &text)?;
            written = Some(text);
        }
    }
    Ok(())
}

/// The hosts file for every Service and named endpoint, sorted so it only changes with them.
fn hosts_file(services: &Store<Service>, endpoints: &Store<Endpoints>) -> String {
    let mut lines = Vec::new();
    for service in services.state() {
        let (Some(ns), name) = (service.namespace(), service.name_any()) else {
            continue;
        };
        let fqdn = format!("{name}.{ns}.svc.{DOMAIN}");
        let cluster_ip = service.spec.as_ref().and_then(|s| s.cluster_ip.clone());
        match cluster_ip.as_deref() {
            Some("None") => {
                let key = reflector::ObjectRef::new(&name).within(&ns);
                let Some(eps) = endpoints.get(&key) else {
                    continue;
                };
                for subset in eps.subsets.iter().flatten() {
                    for address in subset.addresses.iter().flatten() {
                        lines.push(format!("{} {fqdn}", address.ip));
                        if let Some(host) = &address.hostname {
                            lines.push(format!("{} {host}.{fqdn}", address.ip));
                        }
                    }
                }
            }
            Some(ip) if !ip.is_empty() => lines.push(format!("{ip} {fqdn}")),
            _ => {}
        }
    }
    lines.sort();
    lines.dedup();
    lines.join("\n") + "\n"
}

fn write_atomically(path: &Path, text: &str) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot rename to {}", path.display()))
}

// ---- Volumes ----

async fn install_storage_classes(client: &Client, nodes: usize) -> Result<()> {
    let local_binding = if nodes > 1 {
        "WaitForFirstConsumer"
    } else {
        "Immediate"
    };
    let classes = [
        serde_json::json!({
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {
                "name": STORAGE_CLASS,
                "annotations": { "storageclass.kubernetes.io/is-default-class": "true" },
            },
            "provisioner": PROVISIONER,
            "reclaimPolicy": "Delete",
            "volumeBindingMode": local_binding,
        }),
        serde_json::json!({
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": { "name": SHARED_STORAGE_CLASS },
            "provisioner": PROVISIONER,
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "Immediate",
        }),
    ];
    // The shared class first: the default class is what up.sh waits for as "ready".
    for class in classes.iter().rev() {
        let class: StorageClass = serde_json::from_value(class.clone())?;
        let name = class.name_any();
        Api::<StorageClass>::all(client.clone())
            .patch(
                &name,
                &PatchParams::apply("bed-agent").force(),
                &Patch::Apply(&class),
            )
            .await
            .with_context(|| format!("cannot create the StorageClass {name}"))?;
    }
    Ok(())
}

async fn volumes(client: Client, root: PathBuf, nodes: Vec<String>) -> Result<()> {
    let claims = watcher(
        Api::<PersistentVolumeClaim>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .applied_objects()
    .map(|e| e.map(|c| Change::Claim(Box::new(c))));
    let volumes = watcher(
        Api::<PersistentVolume>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .applied_objects()
    .map(|e| e.map(|v| Change::Volume(Box::new(v))));
    let mut changes = std::pin::pin!(futures::stream::select(claims, volumes));
    while let Some(change) = changes.next().await {
        let result = match change {
            Ok(Change::Claim(claim)) => provision(&client, &root, &nodes, &claim).await,
            Ok(Change::Volume(volume)) => reclaim(&client, &root, &volume).await,
            Err(error) => Err(error.into()),
        };
        if let Err(error) = result {
            eprintln!("bed-agent: volumes: {error:#}");
        }
    }
    Ok(())
}

enum Change {
    Claim(Box<PersistentVolumeClaim>),
    Volume(Box<PersistentVolume>),
}

/// The node a claim's volume must be on: none for the shared class; for the node-local class
/// the only node, or on a bed of several the node the scheduler chose for the claim's first pod
/// (not chosen yet: no volume yet either).
fn volume_node<'a>(
    class: &str,
    nodes: &'a [String],
    claim: &'a PersistentVolumeClaim,
) -> Option<Option<&'a str>> {
    match class {
        SHARED_STORAGE_CLASS => Some(None),
        STORAGE_CLASS if nodes.len() == 1 => Some(Some(nodes[0].as_str())),
        STORAGE_CLASS => claim
            .annotations()
            .get(SELECTED_NODE)
            .map(|n| Some(n.as_str())),
        _ => None,
    }
}

/// Creates a volume for a Pending claim of our classes that has none yet. The volume's name is
/// derived from the claim's UID, so a repeated event cannot make a second one.
async fn provision(
    client: &Client,
    root: &Path,
    nodes: &[String],
    claim: &PersistentVolumeClaim,
) -> Result<()> {
    let Some(spec) = &claim.spec else {
        return Ok(());
    };
    let pending = claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending");
    if !pending
        || spec.volume_name.as_deref().is_some_and(|v| !v.is_empty())
        || claim.metadata.deletion_timestamp.is_some()
    {
        return Ok(());
    }
    let class = spec.storage_class_name.as_deref().unwrap_or_default();
    let Some(node) = volume_node(class, nodes, claim) else {
        return Ok(());
    };
    let (ns, name, uid) = (
        claim.namespace().unwrap_or_default(),
        claim.name_any(),
        claim.uid().unwrap_or_default(),
    );
    let pv_name = format!("pvc-{uid}");
    let dir = root.join(&pv_name);
    std::fs::create_dir_all(&dir)?;
    // Pods run as any user (the operators as 65532): test volumes are open to all.
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))?;
    let size = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map(|q| q.0.clone())
        .unwrap_or_else(|| "1Gi".into());
    let mut volume = serde_json::json!({
        "metadata": {
            "name": pv_name,
            "annotations": { "pv.kubernetes.io/provisioned-by": PROVISIONER },
        },
        "spec": {
            "capacity": { "storage": size },
            "accessModes": spec.access_modes.clone().unwrap_or_else(|| vec!["ReadWriteOnce".into()]),
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": class,
            "volumeMode": spec.volume_mode.clone().unwrap_or_else(|| "Filesystem".into()),
            "claimRef": { "kind": "PersistentVolumeClaim", "apiVersion": "v1",
                          "namespace": ns, "name": name, "uid": uid },
            "hostPath": { "path": dir, "type": "Directory" },
        },
    });
    if let Some(node) = node {
        volume["spec"]["nodeAffinity"] = serde_json::json!({ "required": { "nodeSelectorTerms": [{
            "matchExpressions": [{ "key": "kubernetes.io/hostname", "operator": "In", "values": [node] }]
        }] } });
    }
    let volume: PersistentVolume = serde_json::from_value(volume)?;
    match Api::<PersistentVolume>::all(client.clone())
        .create(&PostParams::default(), &volume)
        .await
    {
        Ok(_) => eprintln!(
            "bed-agent: {pv_name} for claim {ns}/{name} at {} (node {})",
            dir.display(),
            node.unwrap_or("any")
        ),
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e).with_context(|| format!("cannot create {pv_name}")),
    }
    Ok(())
}

/// Deletes the directory and the volume once its claim is gone (phase Released).
async fn reclaim(client: &Client, root: &Path, volume: &PersistentVolume) -> Result<()> {
    let ours = volume
        .annotations()
        .get("pv.kubernetes.io/provisioned-by")
        .is_some_and(|p| p == PROVISIONER);
    let released = volume.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released");
    let delete = volume
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
        == Some("Delete");
    if !(ours && released && delete) || volume.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let name = volume.name_any();
    let dir = root.join(&name);
    if dir.exists() {
        std::fs::remove_dir_all(&dir)
            .with_context(|| format!("cannot remove {}", dir.display()))?;
    }
    match Api::<PersistentVolume>::all(client.clone())
        .delete(&name, &DeleteParams::default())
        .await
    {
        Ok(_) => eprintln!("bed-agent: {name} released: directory and volume deleted"),
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e).with_context(|| format!("cannot delete {name}")),
    }
    Ok(())
}
