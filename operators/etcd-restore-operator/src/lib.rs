//! The EtcdRestore controller. A restore is a small step machine (`etcd_cluster::restore_plan`,
//! pure, beside the membership planner): pause (or create) the EtcdCluster, record the plan,
//! restore every new member from the snapshot in its own pod onto a claim of its own (each fetch
//! verifies the backup) while the old members still run, record the verified snapshot, stop and
//! detach the old members (their volumes are kept), start the new ones, wait until all are
//! healthy with the data, hand the cluster back to the EtcdCluster operator. Each reconcile
//! reads the world again, so a restart resumes. Here: `controller` (reconcile) runs `validate`
//! (the spec and its source) -> `observe`
//! (the world) -> the step machine -> `execute` (with `finalizer` and the `api` writes) ->
//! `status` (typed, server-side apply); `pods` builds the restore's own objects.

mod api;
pub mod context;
pub mod controller;
mod execute;
mod finalizer;
pub mod metrics;
pub mod observe;
pub mod pods;
pub mod rbac;
pub mod runner;
pub mod status;
mod validate;
