//! The validate stage: what the operator refuses before it observes or touches anything. A
//! cluster object that cannot be read at all (a field this version of the operator does not
//! understand) is told apart here too, so that one bad object never stalls the watch of all.

use etcd_api::EtcdCluster;
use etcd_cluster::EtcdVersion;
use etcd_members::tls::TlsSecrets;
use kube::core::error_boundary::InvalidObject;

use crate::defrag;

/// Checks the spec this reconcile acts on; the target version it names. Everything after works
/// with what this returns rather than parsing the spec again.
pub fn spec(cluster: &EtcdCluster) -> Result<EtcdVersion, String> {
    let size = cluster.spec.size;
    if !(1..=7).contains(&size) {
        return Err(format!("size {size} is outside 1..7"));
    }
    let target = EtcdVersion::parse_supported(cluster.spec.version()).map_err(|e| e.to_string())?;
    if let Some(d) = &cluster.spec.defragmentation {
        defrag::check_schedule(&d.schedule)?;
    }
    TlsSecrets::of(&cluster.spec).validate()?;
    Ok(target)
}

/// What the Warning about a cluster object that cannot be read says.
pub fn unreadable(invalid: &InvalidObject) -> String {
    format!(
        "the EtcdCluster cannot be read by this operator: {}; nothing of it is touched until it \
         can (correct the object, or run the operator version that wrote it)",
        invalid.error
    )
}
