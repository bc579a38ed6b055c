//! The API calls in an operator's own namespace that making member pods needs; both operators
//! that make them (the EtcdCluster and the EtcdRestore operator) make exactly these there.

use operator_runtime::rbac::ApiCall;

/// Calls in the operator's own namespace: leader election (operator-runtime's
/// `LEASE_CALLS`), and the Secret with the member pods' proof key ([`crate::origin`]),
/// read, or made on first start.
pub const OWN_NAMESPACE_CALLS: &[ApiCall] = &[
    ("coordination.k8s.io", "leases", "get"),
    ("coordination.k8s.io", "leases", "create"),
    ("coordination.k8s.io", "leases", "update"),
    ("", "secrets", "get"),
    ("", "secrets", "create"),
];

#[cfg(test)]
mod tests {
    #[test]
    fn the_own_namespace_calls_include_leader_election() {
        for call in operator_runtime::leader::LEASE_CALLS {
            assert!(super::OWN_NAMESPACE_CALLS.contains(call), "{call:?}");
        }
    }
}
