//! EtcdCluster domain logic, free of Kubernetes and of any runtime: member naming and URLs
//! ([`naming`]), supported version paths ([`version`]), the membership planner ([`plan`]) and
//! the rolling-upgrade planner ([`upgrade`]) that the `etcd-operator` executes one step at a
//! time, each member's restore command for a restore from a snapshot ([`restore`]), the restore's
//! step machine that the `etcd-restore-operator` executes ([`restore_plan`]), when a lost quorum
//! is recovered automatically ([`quorum_loss`]), and how each
//! version spells the switches of etcd's data corruption checks ([`checks`]).

pub mod arbitration;
pub mod checks;
pub mod defrag;
pub mod naming;
pub mod plan;
pub mod quorum_loss;
pub mod restore;
pub mod restore_plan;
pub mod upgrade;
pub mod version;

pub use naming::ClusterNames;
pub use plan::{Intent, Member, MembershipObserved, MembershipStep, PodState, plan};
pub use upgrade::{
    ContainerFailure, DataRan, PodVersion, UpgradeStep, current_version, failed_upgrade,
    plan_upgrade, settled, starting_version,
};
pub use version::{EtcdVersion, Upgrade, VersionError, check_upgrade};
