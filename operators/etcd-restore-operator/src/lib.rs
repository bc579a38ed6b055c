//! The EtcdRestore controller. A restore is a small step machine (`etcd_cluster::restore_plan`,
//! pure, beside the membership planner): pause (or create) the EtcdCluster, record the plan,
//! restore every new member from the snapshot in its own pod onto a claim of its own (each fetch
//! verifies the backup) while the old members still run, record the verified snapshot, stop and
//! detach the old members (their volumes are kept), start the new ones, wait until all are
//! healthy with the data, hand the cluster back to the EtcdCluster operator. Each reconcile
//! reads the world again, so a restart resumes. Here: `controller` (reconcile) runs `observe`
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

#[cfg(test)]
mod tests {
    /// The step machine reads the fetch container's exit codes as `etcd-backup` writes them.
    #[test]
    fn the_fetch_exit_codes_the_step_machine_reads_are_etcd_backup_s() {
        use etcd_cluster::restore_plan::{FETCH_DATA_BAD, FETCH_FAILED, FETCH_NO_USABLE_IDENTITY};
        assert_eq!(FETCH_DATA_BAD, i32::from(backup_cli::EXIT_DATA_BAD));
        assert_eq!(
            FETCH_NO_USABLE_IDENTITY,
            i32::from(backup_cli::EXIT_NO_USABLE_IDENTITY)
        );
        assert_eq!(FETCH_FAILED, i32::from(backup_cli::EXIT_FAILED));
    }
}
