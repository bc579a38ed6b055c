//! EtcdCluster domain logic, free of Kubernetes and of any runtime: member naming and URLs
//! ([`naming`]), supported version paths ([`version`]) and the membership planner ([`plan`])
//! that the `etcd-operator` executes one step at a time.

pub mod naming;
pub mod plan;
pub mod version;

pub use naming::ClusterNames;
pub use plan::{Intent, Member, Observed, PodState, Step, plan};
pub use version::{EtcdVersion, Upgrade, VersionError, check_upgrade};
