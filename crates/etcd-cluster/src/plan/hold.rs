//! The rule asked before any other: a pod nobody can vouch for stops everything.

use super::{MembershipStep, World};

/// When a pod passes for a member (this cluster's labels) but the operators did not make it (no
/// proof of origin), then nothing is created, removed or deleted until a human has looked at it:
/// it holds the name of a member, and may be meant to.
pub fn foreign_pods_hold_everything(world: &World) -> Option<MembershipStep> {
    let foreign = &world.observed.foreign_pods;
    if foreign.is_empty() {
        return None;
    }
    let pods: Vec<&str> = foreign.iter().map(String::as_str).collect();
    Some(MembershipStep::Wait {
        reason: format!(
            "pod {} carries this cluster's member labels but was not made by the operators (no proof of origin): nothing is done until it is deleted",
            pods.join(", ")
        ),
    })
}
