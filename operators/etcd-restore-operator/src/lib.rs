//! The EtcdRestore controller. A restore is a small step machine ([`plan`], pure): pause (or
//! create) the EtcdCluster, record the plan, restore every new member from the snapshot in its
//! own pod onto a claim of its own (each fetch verifies the backup) while the old members still
//! run, record the verified snapshot, stop and detach the old members (their volumes are kept),
//! start the new ones, wait until all are healthy with the data, hand the cluster back to the
//! EtcdCluster operator. Each reconcile reads the world again, so a restart resumes.

pub mod context;
pub mod controller;
pub mod fetch_report;
pub mod metrics;
pub mod observe;
pub mod observed;
pub mod plan;
pub mod pods;
pub mod rbac;
pub mod runner;
pub mod status;
pub mod step;
