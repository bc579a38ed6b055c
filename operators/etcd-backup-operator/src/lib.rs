//! EtcdBackup controller: one-shot and scheduled etcd snapshots to S3 or to a volume mounted
//! in the operator pod (`storageType: Local`).
//!
//! Pipeline per object: `validate` (validate + build a `BackupPlan`, pure) → `secrets`
//! (dereference) → `execute` (snapshot + retention, no Kubernetes) → `status` (pure builders)
//! applied by `controller` (with `context`: the shared `Context` and `Error`); `in_flight` bounds and cancels the runs, `runner` wires the
//! controller.
//! `schedule` and `retention` hold the domain rules, free of Kubernetes.

pub mod archive;
pub mod archive_status;
pub mod context;
pub mod controller;
pub mod drill;
pub mod events;
pub mod execute;
pub mod finalizer;
pub mod in_flight;
pub mod local;
pub mod metrics;
pub mod rbac;
pub mod retention;
pub mod runner;
pub mod schedule;
pub mod secrets;
pub mod status;
pub mod validate;

#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod reconcile_tests;
