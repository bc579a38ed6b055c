//! The one writer of an EtcdCluster's status. Three stages of a reconcile write it: execute
//! records a membership change before etcd is called, defragmentation records its round before
//! a member is defragmented, and the report ends the reconcile. Each write is a server-side
//! apply of the whole status, typed, under the operator's one field manager ([`MANAGER`]): a
//! manager's apply must carry every field it owns (the API server drops the ones it leaves
//! out), so the writer keeps the status as last written and each stage replaces its own part
//! of it. The restore operator never writes this status: its hand-over is an annotation (see
//! [`etcd_members::labels::RESTORED_BY_ANNOTATION`]).

use std::sync::{LazyLock, Mutex};

use etcd_api::{DefragStatus, EtcdCluster, EtcdClusterStatus, MembershipChange};
use kube::api::{Api, Patch, PatchParams};
use kube::{CustomResourceExt, ResourceExt};
use operator_runtime::status_apply;

use crate::context::{Error, MANAGER};

pub struct StatusWriter {
    api: Api<EtcdCluster>,
    name: String,
    /// The status as last written (at first: as read at the start of the reconcile).
    written: Mutex<EtcdClusterStatus>,
}

impl StatusWriter {
    /// A writer for `cluster`, as read fresh at the start of the reconcile.
    pub fn new(client: kube::Client, cluster: &EtcdCluster) -> Self {
        StatusWriter {
            api: Api::namespaced(client, &cluster.namespace().unwrap_or_default()),
            name: cluster.name_any(),
            written: Mutex::new(cluster.status.clone().unwrap_or_default()),
        }
    }

    /// Records the membership change about to be made (`None`: none is in flight).
    pub async fn record_membership_change(
        &self,
        change: Option<MembershipChange>,
    ) -> Result<(), Error> {
        self.write(|s| s.membership_change = change, None).await
    }

    /// Records the defragmentation round.
    pub async fn record_defragmentation(&self, round: DefragStatus) -> Result<(), Error> {
        self.write(|s| s.defragmentation = Some(round), None).await
    }

    /// Writes the reconcile's report: every field but the defragmentation round, which keeps
    /// what the defragmentation stage recorded. With `unchanged_since` (the cluster as read),
    /// only if the cluster did not change since (a conflict otherwise, retried from a new read).
    pub async fn report(
        &self,
        report: EtcdClusterStatus,
        unchanged_since: Option<&EtcdCluster>,
    ) -> Result<(), Error> {
        let write = |s: &mut EtcdClusterStatus| {
            *s = EtcdClusterStatus {
                defragmentation: s.defragmentation.take(),
                ..report
            }
        };
        self.write(write, unchanged_since).await
    }

    /// The defragmentation round as last written.
    pub fn defragmentation(&self) -> Option<DefragStatus> {
        self.lock().defragmentation.clone()
    }

    /// Applies the status as last written with `change`, and keeps it as written only once the
    /// API server took it (a stage that failed to record must not see its record reported).
    async fn write(
        &self,
        change: impl FnOnce(&mut EtcdClusterStatus),
        unchanged_since: Option<&EtcdCluster>,
    ) -> Result<(), Error> {
        let mut status = self.lock().clone();
        change(&mut status);
        self.apply(&status, unchanged_since).await?;
        *self.lock() = status;
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, EtcdClusterStatus> {
        // Poisoned only by a panic between two plain assignments: the status is whole.
        self.written.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn apply(
        &self,
        status: &EtcdClusterStatus,
        unchanged_since: Option<&EtcdCluster>,
    ) -> Result<(), Error> {
        let mut body = body(status);
        if let Some(read) = unchanged_since {
            body["metadata"] = serde_json::json!({"resourceVersion": read.resource_version()});
        }
        let params = PatchParams::apply(MANAGER).force();
        self.api
            .patch_status(&self.name, &params, &Patch::Apply(&body))
            .await?;
        Ok(())
    }
}

/// The apply's body. The membership change and the defragmentation round, and every field in
/// them, are written as null when there is none, not left out: earlier versions wrote them
/// under other managers (a merge patch, `etcd-operator-defragmentation`), which keep owning
/// what they wrote, and a field left out by this apply but owned by another manager stays as
/// it was (a round long over still under way, a removal's `keepClaim` carried to the next).
fn body(status: &EtcdClusterStatus) -> serde_json::Value {
    let mut body = status_apply::body::<EtcdCluster, _>(status);
    let written = &mut body["status"];
    for field in ["membershipChange", "defragmentation"] {
        match written.get_mut(field) {
            Some(part) => with_nulls(part, &status_schema()["properties"][field]),
            None => written[field] = serde_json::Value::Null,
        }
    }
    body
}

/// The schema of the EtcdCluster's status in its CRD: what the API server checks applies
/// against (every optional field in it is nullable).
fn status_schema() -> &'static serde_json::Value {
    static SCHEMA: LazyLock<serde_json::Value> = LazyLock::new(|| {
        let crd = serde_json::to_value(EtcdCluster::crd()).unwrap_or_default();
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"].clone()
    });
    &SCHEMA
}

/// Says "none" for each property `schema` has and `value` leaves out, down through nested
/// objects: null where the schema allows it, an empty list for a list (the schema refuses a
/// null there; an apply replaces a list whole, so it is not gone into).
fn with_nulls(value: &mut serde_json::Value, schema: &serde_json::Value) {
    let (Some(object), Some(properties)) =
        (value.as_object_mut(), schema["properties"].as_object())
    else {
        return;
    };
    for (name, property) in properties {
        if let Some(inner) = object.get_mut(name) {
            with_nulls(inner, property);
        } else if property["nullable"] == true {
            object.insert(name.clone(), serde_json::Value::Null);
        } else if property["type"] == "array" {
            object.insert(name.clone(), serde_json::json!([]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_api::DefragRound;
    use serde_json::json;

    #[test]
    fn when_nothing_is_in_flight_the_body_says_null_rather_than_leaving_the_fields_out() {
        let body = body(&EtcdClusterStatus::default());
        assert_eq!(body["apiVersion"], "etcd.database.coreos.com/v1beta2");
        assert_eq!(body["kind"], "EtcdCluster");
        let status = body["status"].as_object().unwrap();
        assert_eq!(status.get("membershipChange"), Some(&json!(null)));
        assert_eq!(status.get("defragmentation"), Some(&json!(null)));
    }

    #[test]
    fn when_a_change_and_a_round_are_recorded_the_body_carries_them() {
        let status = EtcdClusterStatus {
            membership_change: Some(MembershipChange {
                action: "Add".into(),
                member: Some("c-3".into()),
                ..Default::default()
            }),
            defragmentation: Some(DefragStatus {
                round: Some(DefragRound {
                    started: "2026-11-30T00:00:00Z".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let body = body(&status);
        assert_eq!(body["status"]["membershipChange"]["member"], "c-3");
        assert_eq!(
            body["status"]["defragmentation"]["round"]["started"],
            "2026-11-30T00:00:00Z"
        );
        // What they leave out is said as null, down to the fields of the round.
        let change = body["status"]["membershipChange"].as_object().unwrap();
        for field in ["keepClaim", "memberID", "reason", "restoredBy"] {
            assert_eq!(change.get(field), Some(&json!(null)), "{field}: {body}");
        }
        let defragmentation = body["status"]["defragmentation"].as_object().unwrap();
        assert_eq!(
            defragmentation.get("lastRound"),
            Some(&json!(null)),
            "{body}"
        );
        let round = body["status"]["defragmentation"]["round"]
            .as_object()
            .unwrap();
        for field in ["current", "currentStarted", "currentSizeBefore"] {
            assert_eq!(round.get(field), Some(&json!(null)), "{field}: {body}");
        }
        // A list the schema does not let be null is said empty.
        assert_eq!(round.get("done"), Some(&json!([])), "{body}");
        // Lists are not gone into, and the rest of the status is as it was.
        assert!(body["status"].get("phase").is_none(), "{body}");
    }

    /// The API server refuses a null where the CRD's schema does not allow one (the status
    /// write then fails, and every later one: a defragmentation round never starts).
    #[test]
    fn every_null_written_is_one_the_schema_allows() {
        fn check(value: &serde_json::Value, schema: &serde_json::Value, path: &str) {
            let Some(object) = value.as_object() else {
                return;
            };
            for (name, inner) in object {
                let property = &schema["properties"][name];
                let path = format!("{path}.{name}");
                assert!(!property.is_null(), "{path} is not in the schema");
                if inner.is_null() {
                    assert_eq!(property["nullable"], true, "{path}: null refused");
                }
                check(inner, property, &path);
            }
        }
        for status in [
            EtcdClusterStatus::default(),
            EtcdClusterStatus {
                membership_change: Some(MembershipChange::default()),
                defragmentation: Some(DefragStatus {
                    round: Some(DefragRound::default()),
                    last_round: Some(Default::default()),
                }),
                ..Default::default()
            },
        ] {
            check(&body(&status)["status"], status_schema(), "status");
        }
    }
}
