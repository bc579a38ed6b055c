//! The EtcdCluster's conditions and, for each, the reasons it can carry: one enum per condition,
//! so a reason cannot be written on the wrong condition or misspelt. The reference's
//! conditions table is checked against these lists.

/// A condition's reasons.
pub trait ConditionReason: Copy + 'static {
    /// The condition type (`Available`, ...).
    const TYPE: &'static str;
    const ALL: &'static [Self];
    fn as_str(self) -> &'static str;
}

/// Defines a condition's reason enum: each variant is written as its own name.
macro_rules! reasons {
    ($(#[$doc:meta])* $name:ident for $type:literal { $($(#[$vdoc:meta])* $variant:ident,)+ }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum $name {
            $($(#[$vdoc])* $variant,)+
        }

        impl ConditionReason for $name {
            const TYPE: &'static str = $type;
            const ALL: &'static [Self] = &[$($name::$variant,)+];
            fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => stringify!($variant),)+
                }
            }
        }
    };
}

reasons! {
    /// `Available`: whether a majority of the voting members is healthy.
    Available for "Available" {
        QuorumHealthy,
        QuorumLost,
        /// A cluster being created whose seed does not answer yet.
        NoMemberAnswers,
    }
}

reasons! {
    /// `Progressing`: what the operator is changing (True), or why it changes nothing (False).
    Progressing for "Progressing" {
        CreatingSeed,
        AddingMember,
        RemovingMember,
        /// A member whose node was lost is removed (its claim kept) to be replaced.
        ReplacingLostMember,
        RestartingMember,
        FinishingChange,
        /// Any other membership step.
        Reconciling,
        Upgrading,
        RevertingUpgrade,
        Waiting,
        Converged,
        /// The cluster is down: nothing is changed until it is restored.
        QuorumLost,
        UpgradeRefused,
        UpgradeFailed,
        InvalidSpec,
        Paused,
        HeldByAbandonedRestore,
    }
}

reasons! {
    /// `Degraded`: something needs attention (True), or every member is healthy.
    Degraded for "Degraded" {
        MembersUnhealthy,
        /// A member is down with its node (not Ready, or gone).
        NodeDown,
        EtcdAlarm,
        MemberDataDiffers,
        ForeignPod,
        AllHealthy,
    }
}

reasons! {
    /// `DataPersistent`: where members keep their data.
    DataPersistent for "DataPersistent" {
        PersistentVolumeClaims,
        EmptyDir,
    }
}

reasons! {
    /// `VersionSupported`: whether `spec.version` is a line this operator runs for good (3.5,
    /// 3.6, 3.7), or one it runs only to upgrade from (3.4, end of life: no security fixes).
    VersionSupported for "VersionSupported" {
        Supported,
        EndOfLife,
    }
}

reasons! {
    /// `Defragmented`: how the last defragmentation round ended (once one has).
    Defragmented for "Defragmented" {
        RoundSucceeded,
        DefragmentationStopped,
        DefragmentationFailed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_written_as_their_names() {
        assert_eq!(Available::QuorumLost.as_str(), "QuorumLost");
        assert_eq!(
            Progressing::HeldByAbandonedRestore.as_str(),
            "HeldByAbandonedRestore"
        );
        assert_eq!(Degraded::ALL.len(), 6);
        assert_eq!(Defragmented::TYPE, "Defragmented");
    }
}
