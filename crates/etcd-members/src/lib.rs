//! What the EtcdCluster operator and the EtcdRestore operator share about etcd members on
//! Kubernetes: the adoption contract as one explicit API. A restore makes member pods, claims
//! and Services with these builders, labels and proofs of origin, so that the cluster operator
//! takes them over as exactly what it would have made itself. Neither operator depends on the
//! other's crate; the pure domain logic (naming, versions, planning) is `etcd-cluster`'s.
//!
//! - [`labels`]: labels and annotations both operators read or write.
//! - [`build`]: pure builders of member pods, claims, Services and the disruption budget.
//! - [`spread`]: how members spread over nodes and zones unless the user says otherwise.
//! - [`tls`]: the TLS Secrets of a cluster, mounted into members and used to reach them.
//! - [`origin`]: the proof that a pod was made by this operator (or a restore of it).
//! - [`access`]: connecting to a member through its pod IP.
//! - [`claims`]: the claims of the watched namespaces from a watch, and the one way the
//!   operators write a claim (each write awaited in that cache; [`claim_ledger`] has the rules).
//! - [`rbac`]: the API calls in the operator's own namespace that making member pods needs.

pub mod access;
pub mod build;
pub mod claim_ledger;
pub mod claims;
pub mod labels;
pub mod origin;
pub mod rbac;
pub mod spread;
pub mod tls;
