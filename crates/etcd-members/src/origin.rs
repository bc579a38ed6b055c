//! Proof of origin for member pods. A pod is taken for a member only if this operator (or the
//! restore operator, for a restore of its cluster) made it: labels and owner references are
//! written by whoever creates a pod, so they prove nothing. A fake etcd labelled as a member
//! that says it is the sole leader would otherwise hand the planner a member list in which
//! the real members are strangers, and the operator would remove them with its own rights.
//!
//! The proof is a keyed hash (HMAC-SHA256) of the pod's namespace, member name and UID, in an
//! annotation. The key is a Secret in the operators' own namespace, which tenants of the
//! clusters' namespaces cannot read; the UID is assigned by the API server, so a proof copied
//! from a real pod does not fit any other pod. A pod is made with a scheduling gate and gets
//! its proof and loses the gate in one patch: a pod without a proof never ran, so an operator
//! that stopped between the two steps deletes it (nothing is lost) and makes it again.
//!
//! Pods made before the key existed (by an older operator) are trusted once, as before, and
//! get their proof. Where the operators run in the clusters' own namespace, anyone who can
//! create pods there can also run one as the operator's ServiceAccount: the proof then guards
//! against mistakes, not against them.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Pod, PodSchedulingGate, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use sha2::Sha256;

use crate::labels::MEMBER_LABEL;

/// The annotation that carries a member pod's proof of origin.
pub const PROOF_ANNOTATION: &str = "etcd.database.coreos.com/proof-of-origin";
/// The scheduling gate a member pod is made with, removed with the proof.
pub const UNPROVEN_GATE: &str = "etcd.database.coreos.com/unproven";
/// The Secret, in the operators' namespace, that holds the key.
pub const KEY_SECRET: &str = "etcd-member-proof-key";
/// The field of the key member pods are proven with.
pub const KEY_FIELD: &str = "key";
/// The field of the key a rotation replaced: still accepted (and the pods it proves are proven
/// again with `key`) until it is removed.
pub const PREVIOUS_KEY_FIELD: &str = "previous";
/// The field that vouches for member pods after a lost key: pod UIDs (separated by spaces,
/// commas or new lines) that a person with the rights of the operators' namespace checked are
/// the cluster's members. Those pods are proven with the current key; the field is removed by
/// hand afterwards. A UID is the API server's and never reused, so a pod made later is not
/// vouched for by it.
pub const VOUCHED_FIELD: &str = "vouched-pod-uids";
/// How often the operators read the key's Secret again (a rotation takes effect within it).
pub const KEY_REFRESH: Duration = Duration::from_secs(30);
/// A key shorter than this is refused (the operators make 32 random bytes).
pub const MIN_KEY_BYTES: usize = 16;

/// The key member pods' proofs are made and checked with. Clones share it: a key changed in
/// its Secret ([`ProofKey::refresh_forever`]) is seen by every clone at once.
#[derive(Clone)]
pub struct ProofKey {
    keys: Arc<RwLock<Keys>>,
}

/// The keys of the Secret.
#[derive(Clone, PartialEq, Eq)]
struct Keys {
    current: Vec<u8>,
    previous: Option<Vec<u8>>,
    /// UIDs of pods vouched for by a person ([`VOUCHED_FIELD`]).
    vouched: BTreeSet<String>,
    /// When the Secret was made: pods older than that, without any proof, were made before
    /// proofs existed.
    created: Option<Timestamp>,
}

impl fmt::Debug for ProofKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys = self.read();
        f.debug_struct("ProofKey")
            .field("created", &keys.created)
            .field("previous", &keys.previous.is_some())
            .field("vouched", &keys.vouched)
            .finish_non_exhaustive()
    }
}

/// What a pod labelled as a member is, by its origin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Made by the operators: its proof fits.
    Proven,
    /// Made by the operators, proven with the key a rotation replaced: a member, proven again
    /// with the current key.
    ProvenWithPrevious,
    /// Running, with no proof that fits, but its UID is vouched for in the key's Secret (after
    /// a lost key): a member, proven with the current key.
    Vouched,
    /// Still gated, without a proof: it never ran (an operator stopped between making it and
    /// proving it, or someone else made it gated). Deleted and made again.
    Unproven,
    /// Without any proof, made before the key existed (by an older operator): trusted once,
    /// then proven.
    Older,
    /// Running without a proof that fits: not a member; the operator holds until it is gone.
    /// A pod whose proof fits no key is foreign whatever its age.
    Foreign,
}

impl Origin {
    /// Whether the pod is taken for a member (at once, or once proven).
    pub fn is_member(&self) -> bool {
        matches!(
            self,
            Origin::Proven | Origin::ProvenWithPrevious | Origin::Vouched | Origin::Older
        )
    }
}

/// Why the key cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error(
        "Secret {KEY_SECRET} holds no usable key: {0}; member pods cannot be proven, so the \
         operator does not start (delete the Secret to have a new key made, then see \
         docs/reference/labels-and-annotations.md for the member pods of a lost key)"
    )]
    Malformed(String),
}

impl ProofKey {
    pub fn new(key: Vec<u8>, created: Option<Timestamp>) -> ProofKey {
        ProofKey::from_keys(Keys {
            current: key,
            previous: None,
            vouched: BTreeSet::new(),
            created,
        })
    }

    /// A key during a rotation: pods proven with `previous` are still members.
    pub fn rotating(key: Vec<u8>, previous: Vec<u8>, created: Option<Timestamp>) -> ProofKey {
        ProofKey::from_keys(Keys {
            current: key,
            previous: Some(previous),
            vouched: BTreeSet::new(),
            created,
        })
    }

    /// The key after a lost one: pods whose UID is in `vouched` are members.
    pub fn vouching(key: Vec<u8>, vouched: &[&str], created: Option<Timestamp>) -> ProofKey {
        ProofKey::from_keys(Keys {
            current: key,
            previous: None,
            vouched: vouched.iter().map(|uid| uid.to_string()).collect(),
            created,
        })
    }

    fn from_keys(keys: Keys) -> ProofKey {
        ProofKey {
            keys: Arc::new(RwLock::new(keys)),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Keys> {
        // A writer that panicked left whole keys behind (they are replaced in one assignment).
        self.keys.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads the key from the Secret in `namespace`, making it (a new random key) the first
    /// time. Two operators starting together both try; the one that loses reads the other's.
    /// A Secret without a usable key (missing, empty, too short) is refused, not replaced.
    pub async fn load_or_create(
        client: kube::Client,
        namespace: &str,
    ) -> Result<ProofKey, KeyError> {
        Ok(ProofKey::from_keys(
            read_or_create(client, namespace).await?,
        ))
    }

    /// Reads the Secret again every `every`, so that a rotated (or recreated) key is used by
    /// both operators without a restart. A Secret that cannot be read or holds no usable key
    /// leaves the key in use as it is, said in the log each time.
    pub async fn refresh_forever(&self, client: kube::Client, namespace: String, every: Duration) {
        loop {
            tokio::time::sleep(every).await;
            match read_or_create(client.clone(), &namespace).await {
                Ok(keys) => {
                    if self.replace(keys) {
                        tracing::warn!(secret = KEY_SECRET, %namespace, "the member pods' proof key changed; it is used from now on");
                    }
                }
                Err(e) => {
                    tracing::error!(secret = KEY_SECRET, %namespace, error = %e, "cannot read the member pods' proof key; the one in use stays");
                }
            }
        }
    }

    /// Puts `keys` in place; whether they differ from those in use.
    fn replace(&self, keys: Keys) -> bool {
        let mut held = self.keys.write().unwrap_or_else(|e| e.into_inner());
        let changed = *held != keys;
        *held = keys;
        changed
    }

    /// The proof for the pod with `uid` that is `member` in `namespace`, with the current key.
    pub fn proof(&self, namespace: &str, member: &str, uid: &str) -> String {
        proof_with(&self.read().current, namespace, member, uid)
    }

    /// Where `pod` comes from.
    pub fn origin(&self, pod: &Pod) -> Origin {
        let keys = self.read();
        let meta = &pod.metadata;
        let given = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(PROOF_ANNOTATION));
        let fits = |key: &[u8]| -> bool {
            let (Some(given), Some(member), Some(uid)) = (
                given,
                meta.labels.as_ref().and_then(|l| l.get(MEMBER_LABEL)),
                meta.uid.as_deref(),
            ) else {
                return false;
            };
            let namespace = meta.namespace.as_deref().unwrap_or_default();
            let expected = proof_with(key, namespace, member, uid);
            !key.is_empty() && constant_time_eq(given.as_bytes(), expected.as_bytes())
        };
        if fits(&keys.current) {
            return Origin::Proven;
        }
        if keys.previous.as_deref().is_some_and(fits) {
            return Origin::ProvenWithPrevious;
        }
        if gated(pod) {
            return Origin::Unproven;
        }
        if meta
            .uid
            .as_ref()
            .is_some_and(|uid| keys.vouched.contains(uid))
        {
            return Origin::Vouched;
        }
        // A proof that fits no key proves it is not the operators' (or that the key was
        // lost): its age does not make it one.
        if given.is_some() {
            return Origin::Foreign;
        }
        let made = meta.creation_timestamp.as_ref().map(|t| t.0);
        match (made, keys.created) {
            (Some(made), Some(key)) if made < key => Origin::Older,
            _ => Origin::Foreign,
        }
    }

    /// The patch that proves the pod with `uid` as `member` and lets it be scheduled.
    fn seal(&self, namespace: &str, member: &str, uid: &str) -> serde_json::Value {
        json!({
            "metadata": {"annotations": {PROOF_ANNOTATION: self.proof(namespace, member, uid)}},
            "spec": {"schedulingGates": null},
        })
    }
}

/// The keys in the Secret, made (a new random key) when there is none.
async fn read_or_create(client: kube::Client, namespace: &str) -> Result<Keys, KeyError> {
    let secrets: Api<Secret> = Api::namespaced(client, namespace);
    if let Some(secret) = secrets.get_opt(KEY_SECRET).await? {
        return keys_of(&secret);
    }
    let key: [u8; 32] = rand::random();
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(KEY_SECRET.into()),
            ..Default::default()
        },
        data: Some([(KEY_FIELD.to_string(), ByteString(key.to_vec()))].into()),
        ..Default::default()
    };
    match secrets.create(&PostParams::default(), &secret).await {
        Ok(made) => keys_of(&made),
        Err(kube::Error::Api(e)) if e.code == 409 => keys_of(&secrets.get(KEY_SECRET).await?),
        Err(e) => Err(e.into()),
    }
}

/// The keys a Secret holds: `key` must be there and long enough; `previous`, when there, too.
fn keys_of(secret: &Secret) -> Result<Keys, KeyError> {
    let field = |name: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(name))
            .map(|k| k.0.clone())
    };
    let usable = |name: &str, key: Option<Vec<u8>>| -> Result<Vec<u8>, KeyError> {
        match key {
            None => Err(KeyError::Malformed(format!("no field {name:?}"))),
            Some(k) if k.len() < MIN_KEY_BYTES => Err(KeyError::Malformed(format!(
                "field {name:?} has {} bytes, fewer than {MIN_KEY_BYTES}",
                k.len()
            ))),
            Some(k) => Ok(k),
        }
    };
    let current = usable(KEY_FIELD, field(KEY_FIELD))?;
    let previous = match field(PREVIOUS_KEY_FIELD) {
        None => None,
        Some(k) => Some(usable(PREVIOUS_KEY_FIELD, Some(k))?),
    };
    let vouched = field(VOUCHED_FIELD)
        .map(|uids| {
            String::from_utf8_lossy(&uids)
                .split(|c: char| c.is_whitespace() || c == ',')
                .filter(|uid| !uid.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    Ok(Keys {
        current,
        previous,
        vouched,
        created: secret.metadata.creation_timestamp.as_ref().map(|t| t.0),
    })
}

/// HMAC-SHA256 of the pod's namespace, member name and UID with `key`, hex.
fn proof_with(key: &[u8], namespace: &str, member: &str, uid: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    for part in [namespace, member, uid] {
        // Length-prefixed, so that no two triples hash the same bytes.
        mac.update(&(part.len() as u64).to_be_bytes());
        mac.update(part.as_bytes());
    }
    hex::encode(mac.finalize().into_bytes())
}

fn gated(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.name == UNPROVEN_GATE))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Why a member pod could not be made.
#[derive(Debug, thiserror::Error)]
pub enum MakeError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error(
        "pod {0} exists, runs, and was not made by the operators (it has no proof of origin): \
         nothing is done with it or on its word; delete it if it is not yours"
    )]
    Foreign(String),
    #[error("pod {0} was made but never proven; it was deleted and is made again")]
    Remade(String),
}

impl MakeError {
    /// The kind of failure, one CamelCase word (metrics, logs).
    pub fn reason(&self) -> &'static str {
        match self {
            MakeError::Kube(_) => "KubernetesApi",
            MakeError::Foreign(_) => "ForeignPod",
            MakeError::Remade(_) => "PodRemade",
        }
    }
}

/// Makes member pod `pod` (named and labelled as its member): gated, then proven and ungated.
/// A pod of that name that already exists is accepted only when it is the operators' own.
pub async fn make_member_pod(api: &Api<Pod>, key: &ProofKey, pod: &Pod) -> Result<(), MakeError> {
    let mut gated_pod = pod.clone();
    let spec = gated_pod.spec.get_or_insert_with(Default::default);
    spec.scheduling_gates = Some(vec![PodSchedulingGate {
        name: UNPROVEN_GATE.into(),
    }]);
    match api.create(&PostParams::default(), &gated_pod).await {
        // Proven by the call that made it, and by no other: a gated pod found later may be
        // anyone's.
        Ok(made) => {
            let uid = made.uid().unwrap_or_default();
            let mut patch = key.seal(
                &made.namespace().unwrap_or_default(),
                &member_of(&made),
                &uid,
            );
            // The UID in the patch must match the pod's (it is immutable): a pod deleted and
            // made again under this name in between is not proven by mistake.
            patch["metadata"]["uid"] = json!(uid);
            api.patch(
                &made.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let existing = api.get(&pod.name_any()).await?;
            settle(api, key, &existing).await
        }
        Err(e) => Err(e.into()),
    }
}

fn member_of(pod: &Pod) -> String {
    pod.labels().get(MEMBER_LABEL).cloned().unwrap_or_default()
}

/// What becomes of an existing pod labelled as a member: one of the operators' stays (proven
/// again with the current key when a rotation's previous key proves it), one that never ran is
/// deleted (to be made again), an older operator's gets its proof, and a foreign one is
/// refused.
pub async fn settle(api: &Api<Pod>, key: &ProofKey, pod: &Pod) -> Result<(), MakeError> {
    let name = pod.name_any();
    match key.origin(pod) {
        Origin::Proven => Ok(()),
        Origin::Unproven => {
            delete_unproven(api, pod).await?;
            Err(MakeError::Remade(name))
        }
        origin @ (Origin::Older | Origin::ProvenWithPrevious | Origin::Vouched) => {
            let uid = pod.uid().unwrap_or_default();
            let proof = key.proof(&pod.namespace().unwrap_or_default(), &member_of(pod), &uid);
            let patch = json!({"metadata": {"uid": uid, "annotations": {PROOF_ANNOTATION: proof}}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            tracing::info!(pod = %name, ?origin, "member pod proven with the current key");
            Ok(())
        }
        Origin::Foreign => Err(MakeError::Foreign(name)),
    }
}

/// Sorts the pods labelled as a cluster's members by origin: returns the members (the
/// operators' own, older ones proven on the way) and the names of foreign ones. Pods that
/// never ran are deleted.
pub async fn members_by_origin(
    api: &Api<Pod>,
    key: &ProofKey,
    pods: Vec<Pod>,
) -> Result<(Vec<Pod>, BTreeSet<String>), kube::Error> {
    let mut members = Vec::new();
    let mut foreign = BTreeSet::new();
    for pod in pods {
        match key.origin(&pod) {
            Origin::Proven => members.push(pod),
            Origin::Older | Origin::ProvenWithPrevious | Origin::Vouched => {
                match settle(api, key, &pod).await {
                    Ok(()) => members.push(pod),
                    Err(MakeError::Kube(e)) => return Err(e),
                    Err(_) => {
                        foreign.insert(pod.name_any());
                    }
                }
            }
            Origin::Unproven => {
                tracing::info!(pod = %pod.name_any(), "deleting a member pod that was never proven (it never ran)");
                delete_unproven(api, &pod).await?;
            }
            Origin::Foreign => {
                foreign.insert(pod.name_any());
            }
        }
    }
    Ok((members, foreign))
}

/// Deletes a pod that never ran, only if it is still that pod.
pub async fn delete_unproven(api: &Api<Pod>, pod: &Pod) -> Result<(), kube::Error> {
    let params = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: pod.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&pod.name_any(), &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn pod(uid: &str, member: &str, proof: Option<String>, gated: bool, age: i64) -> Pod {
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {
                "name": member, "namespace": "ns", "uid": uid,
                "labels": {MEMBER_LABEL: member},
            },
            "spec": {"containers": []},
        }))
        .unwrap();
        if let Some(proof) = proof {
            pod.annotations_mut().insert(PROOF_ANNOTATION.into(), proof);
        }
        if gated {
            pod.spec.as_mut().unwrap().scheduling_gates = Some(vec![PodSchedulingGate {
                name: UNPROVEN_GATE.into(),
            }]);
        }
        pod.metadata.creation_timestamp = Some(Time(hours_ago(age)));
        pod
    }

    fn hours_ago(hours: i64) -> Timestamp {
        Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_hours(hours)
    }

    #[test]
    fn only_a_proof_made_with_the_key_for_that_pod_fits() {
        let key = ProofKey::new(vec![7; 32], Some(hours_ago(10)));
        let proof = key.proof("ns", "c-0", "uid-a");
        assert_eq!(
            key.origin(&pod("uid-a", "c-0", Some(proof.clone()), false, 1)),
            Origin::Proven
        );
        // Copied onto another pod (another UID), or relabelled as another member.
        assert_eq!(
            key.origin(&pod("uid-b", "c-0", Some(proof.clone()), false, 1)),
            Origin::Foreign
        );
        assert_eq!(
            key.origin(&pod("uid-a", "c-9", Some(proof.clone()), false, 1)),
            Origin::Foreign
        );
        // Made with another key.
        let other = ProofKey::new(vec![8; 32], key.read().created);
        assert_eq!(
            other.origin(&pod("uid-a", "c-0", Some(proof), false, 1)),
            Origin::Foreign
        );
        // Gated without a proof: never ran.
        assert_eq!(
            key.origin(&pod("uid-a", "c-0", None, true, 1)),
            Origin::Unproven
        );
        // Made before the key existed, without any proof: an older operator's.
        assert_eq!(
            key.origin(&pod("uid-a", "c-0", None, false, 11)),
            Origin::Older
        );
        // With a proof that fits no key, its age does not make it one (a key lost and made
        // again must not re-trust what was refused).
        assert_eq!(
            key.origin(&pod("uid-a", "c-0", Some("00".into()), false, 11)),
            Origin::Foreign
        );
        assert_eq!(
            key.origin(&pod("uid-a", "c-0", Some("00".into()), false, 1)),
            Origin::Foreign
        );
        // An empty key proves nothing.
        let empty = ProofKey::new(Vec::new(), key.read().created);
        let proof = empty.proof("ns", "c-0", "uid-a");
        assert_eq!(
            empty.origin(&pod("uid-a", "c-0", Some(proof), false, 1)),
            Origin::Foreign
        );
    }

    #[test]
    fn during_a_rotation_both_keys_prove_and_the_previous_ones_pods_are_proven_again() {
        let (old, new) = (vec![1; 32], vec![2; 32]);
        let before = ProofKey::new(old.clone(), Some(hours_ago(10)));
        let proven_before = pod(
            "uid-a",
            "c-0",
            Some(before.proof("ns", "c-0", "uid-a")),
            false,
            1,
        );
        let rotating = ProofKey::rotating(new.clone(), old, before.read().created);
        assert_eq!(rotating.origin(&proven_before), Origin::ProvenWithPrevious);
        assert!(rotating.origin(&proven_before).is_member());
        // New proofs are made with the new key.
        let proven_now = pod(
            "uid-b",
            "c-1",
            Some(rotating.proof("ns", "c-1", "uid-b")),
            false,
            1,
        );
        assert_eq!(rotating.origin(&proven_now), Origin::Proven);
        // Once the previous key is removed, what it alone proves is foreign.
        let after = ProofKey::new(new, before.read().created);
        assert_eq!(after.origin(&proven_now), Origin::Proven);
        assert_eq!(after.origin(&proven_before), Origin::Foreign);
    }

    #[test]
    fn a_changed_key_is_seen_by_every_clone_at_once() {
        let key = ProofKey::new(vec![1; 32], None);
        let held_by_the_controller = key.clone();
        let proof = key.proof("ns", "c-0", "uid-a");
        assert!(key.replace(Keys {
            current: vec![9; 32],
            previous: None,
            vouched: BTreeSet::new(),
            created: None,
        }));
        assert_ne!(held_by_the_controller.proof("ns", "c-0", "uid-a"), proof);
        let same = key.read().clone();
        assert!(!key.replace(same), "the same keys are no change");
        let mut vouched = key.read().clone();
        vouched.vouched.insert("uid-a".into());
        assert!(key.replace(vouched), "pods vouched for are a change");
    }

    /// After a lost key (the Secret made again with a new one, no copy of the old): when a
    /// person lists a running member pod's UID in the Secret, then it is a member and is proven
    /// with the new key; when a pod is not listed, or is listed by another pod's UID, then it
    /// stays foreign; when a listed pod is gated (it never ran), then it is still deleted.
    #[test]
    fn after_a_lost_key_only_the_pods_vouched_for_by_uid_are_members() {
        let lost = ProofKey::new(vec![1; 32], Some(hours_ago(10)));
        let member =
            |uid: &str, name: &str| pod(uid, name, Some(lost.proof("ns", name, uid)), false, 5);
        let (real_a, real_b) = (member("uid-a", "c-0"), member("uid-b", "c-1"));
        // A pod that was being refused, with a proof that fit no key.
        let refused = pod("uid-f", "c-9", Some("00".into()), false, 5);
        let made_again = ProofKey::new(vec![2; 32], Some(hours_ago(0)));
        for pod in [&real_a, &real_b, &refused] {
            assert_eq!(made_again.origin(pod), Origin::Foreign);
        }

        let vouching = ProofKey::vouching(vec![2; 32], &["uid-a", "uid-b"], Some(hours_ago(0)));
        assert_eq!(vouching.origin(&real_a), Origin::Vouched);
        assert!(vouching.origin(&real_b).is_member());
        assert_eq!(vouching.origin(&refused), Origin::Foreign);
        // The same name, another pod (made after the listing): not vouched for.
        assert_eq!(vouching.origin(&member("uid-c", "c-0")), Origin::Foreign);
        assert_eq!(
            vouching.origin(&pod("uid-a", "c-0", None, true, 0)),
            Origin::Unproven
        );
        // Proven with the new key, it stays a member once the list is removed.
        let proven = pod(
            "uid-a",
            "c-0",
            Some(vouching.proof("ns", "c-0", "uid-a")),
            false,
            5,
        );
        assert_eq!(made_again.origin(&proven), Origin::Proven);
    }

    #[test]
    fn vouched_uids_are_read_whatever_the_separators() {
        let secret = Secret {
            data: Some(
                [
                    ("key".to_string(), ByteString(vec![7; 32])),
                    (
                        VOUCHED_FIELD.to_string(),
                        ByteString(b"uid-a\nuid-b, uid-c,\n\n".to_vec()),
                    ),
                ]
                .into(),
            ),
            ..Default::default()
        };
        let keys = keys_of(&secret).unwrap();
        assert_eq!(
            keys.vouched.iter().map(String::as_str).collect::<Vec<_>>(),
            ["uid-a", "uid-b", "uid-c"]
        );
    }

    #[test]
    fn a_secret_without_a_usable_key_is_refused_loudly() {
        let secret = |fields: &[(&str, usize)]| -> Secret {
            Secret {
                data: Some(
                    fields
                        .iter()
                        .map(|(name, len)| (name.to_string(), ByteString(vec![7; *len])))
                        .collect(),
                ),
                ..Default::default()
            }
        };
        for (fields, says) in [
            (vec![], "no field \"key\""),
            (vec![("key", 0)], "0 bytes"),
            (vec![("key", 8)], "8 bytes"),
            (
                vec![("key", 32), ("previous", 3)],
                "\"previous\" has 3 bytes",
            ),
        ] {
            let error = keys_of(&secret(&fields))
                .err()
                .expect("refused")
                .to_string();
            assert!(error.contains(says), "{fields:?}: {error}");
            assert!(error.contains("does not start"), "{error}");
        }
        let Ok(keys) = keys_of(&secret(&[("key", 32), ("previous", 32)])) else {
            panic!("a key and a previous key of 32 bytes are usable");
        };
        assert_eq!(
            (keys.current.len(), keys.previous.map(|p| p.len())),
            (32, Some(32))
        );
    }

    #[test]
    fn the_key_never_reaches_debug_output() {
        let key = ProofKey::new(vec![0xab; 32], None);
        assert!(!format!("{key:?}").contains("171"));
        assert!(!format!("{key:?}").to_lowercase().contains("ab, "));
    }
}
