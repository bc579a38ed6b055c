//! The EtcdCluster operator: reconcile is observe (pods, claims, etcd's member list) -> plan
//! one step (`etcd_cluster::plan`, pure) -> record intent -> execute -> status. Builders of
//! pods, claims and Services, labels, TLS and proofs of origin are `etcd_members`', shared with
//! the EtcdRestore operator.

pub mod adopt;
pub mod conditions;
pub mod context;
pub mod controller;
pub mod defrag;
mod execute;
pub mod metrics;
pub mod observe;
pub mod quorum_loss;
pub mod rbac;
pub mod runner;
pub mod scope;
pub mod status;
pub mod status_writer;
pub mod upgrade;
pub mod validate;
