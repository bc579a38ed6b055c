//! etcd's data corruption checks, on by default for every member: the initial check (before a
//! member serves, it compares its key space hash with its peers' and refuses to start on a
//! mismatch) and the compaction hash check (the leader compares the members' hashes at each
//! compaction and raises a `CORRUPT` alarm on a mismatch).
//!
//! etcd spells the switches differently by version: up to 3.5 they are the experimental flags
//! `--experimental-initial-corrupt-check` and `--experimental-compact-hash-check-enabled`
//! (3.4 has only the first); 3.6 turned them into feature gates
//! (`--feature-gates=InitialCorruptCheck=true,CompactHashCheck=true`), still accepting the old
//! spelling, and 3.7 removed the old spelling.
//!
//! They are given as environment variables (etcd reads `ETCD_<FLAG>`), not as flags: a version
//! that does not know a variable logs "unrecognized environment variable" and starts, where an
//! unknown flag stops it. A member moved in place to the next minor (only its image changes)
//! therefore always starts; it runs the checks only if the new version knows their spelling,
//! which is why a member on a claim gets a new pod when the spelling changes (see
//! [`Spelling::differs`]). Both spellings at once are refused by 3.6, so a pod has one.

use crate::EtcdVersion;

/// What etcd 3.5 to 3.7 log when the initial check finds a member's data differs from its
/// peers' (it then exits).
const INITIAL_CHECK_FAILED: &str = "found data inconsistency with peers";

/// Whether an exited etcd's last words (its termination message) say its initial corruption
/// check failed.
pub fn initial_check_failed(last_words: &str) -> bool {
    last_words.contains(INITIAL_CHECK_FAILED)
}

/// What an etcd alarm (or another status error a member reports) means, and what to do.
pub fn explain_member_error(error: &str) -> String {
    let advice = if error.contains("CORRUPT") {
        "etcd's compaction hash check found members whose data differs; the cluster refuses writes until the alarm is disarmed: find the member whose data is wrong (etcdctl endpoint hashkv), replace it (delete its claim, then its pod), then disarm (etcdctl alarm disarm)"
    } else if error.contains("NOSPACE") {
        "the database reached its quota and etcd refuses writes: compact and defragment (etcdctl compact, etcdctl defrag), or raise the quota (etcdEnv ETCD_QUOTA_BACKEND_BYTES), then disarm (etcdctl alarm disarm)"
    } else {
        return error.to_string();
    };
    format!("{error}: {advice}")
}

/// How a version spells the switches of the corruption checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spelling {
    /// Up to 3.5: the experimental flags. 3.6 accepts them (deprecated), 3.7 ignores them.
    Experimental,
    /// From 3.6: feature gates. Earlier versions ignore them.
    FeatureGates,
}

const INITIAL_EXPERIMENTAL: &str = "ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK";
const COMPACT_HASH_EXPERIMENTAL: &str = "ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_ENABLED";
const FEATURE_GATES: &str = "ETCD_FEATURE_GATES";

/// Every variable either spelling sets. A member whose `etcdEnv` names one of them gets none
/// of this operator's: the user's choice stands, and 3.6 refuses a mix of both spellings.
pub const VARIABLES: [&str; 3] = [
    INITIAL_EXPERIMENTAL,
    COMPACT_HASH_EXPERIMENTAL,
    FEATURE_GATES,
];

impl Spelling {
    pub fn of(version: &EtcdVersion) -> Spelling {
        if version.minor() >= (3, 6) {
            Spelling::FeatureGates
        } else {
            Spelling::Experimental
        }
    }

    /// The environment variables that turn both checks on. 3.4 knows only the initial check
    /// and ignores the other variable.
    pub fn env(self) -> Vec<(&'static str, &'static str)> {
        match self {
            Spelling::Experimental => vec![
                (INITIAL_EXPERIMENTAL, "true"),
                (COMPACT_HASH_EXPERIMENTAL, "true"),
            ],
            Spelling::FeatureGates => {
                vec![(
                    FEATURE_GATES,
                    "InitialCorruptCheck=true,CompactHashCheck=true",
                )]
            }
        }
    }

    /// The spelling a pod's environment uses, read back from its variable names (`None`: the
    /// pod has none of them, or the user's own).
    pub fn of_env<'a>(names: impl IntoIterator<Item = &'a str>) -> Option<Spelling> {
        let names: Vec<&str> = names.into_iter().collect();
        if names.contains(&FEATURE_GATES) {
            Some(Spelling::FeatureGates)
        } else if names.contains(&INITIAL_EXPERIMENTAL) {
            Some(Spelling::Experimental)
        } else {
            None
        }
    }

    /// Whether `version` runs the checks spelled this way (3.6 still reads the experimental
    /// flags; 3.7 and versions before 3.6 ignore the other spelling).
    pub fn understood_by(self, version: &EtcdVersion) -> bool {
        match self {
            Spelling::Experimental => version.minor() < (3, 7),
            Spelling::FeatureGates => version.minor() >= (3, 6),
        }
    }

    /// Whether a pod spelled `pod` must be made again to run `target` with its checks on.
    /// `None` (no checks of ours on the pod) never does.
    pub fn differs(pod: Option<Spelling>, target: &EtcdVersion) -> bool {
        pod.is_some_and(|spelled| spelled != Spelling::of(target))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> EtcdVersion {
        EtcdVersion::parse(s).unwrap()
    }

    #[test]
    fn each_version_gets_its_own_spelling() {
        assert_eq!(Spelling::of(&v("3.4.23")), Spelling::Experimental);
        assert_eq!(Spelling::of(&v("3.5.33")), Spelling::Experimental);
        assert_eq!(Spelling::of(&v("3.6.0")), Spelling::FeatureGates);
        assert_eq!(Spelling::of(&v("3.7.3")), Spelling::FeatureGates);
        assert_eq!(
            Spelling::FeatureGates.env(),
            [(
                "ETCD_FEATURE_GATES",
                "InitialCorruptCheck=true,CompactHashCheck=true"
            )]
        );
        let experimental: Vec<&str> = Spelling::Experimental
            .env()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(
            experimental,
            [
                "ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK",
                "ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_ENABLED"
            ]
        );
    }

    #[test]
    fn a_pods_spelling_is_read_back_from_its_environment() {
        for spelling in [Spelling::Experimental, Spelling::FeatureGates] {
            let env = spelling.env();
            let names = env
                .iter()
                .map(|(k, _)| *k)
                .chain(["ETCD_QUOTA_BACKEND_BYTES"]);
            assert_eq!(Spelling::of_env(names), Some(spelling));
        }
        assert_eq!(Spelling::of_env(["ETCD_QUOTA_BACKEND_BYTES"]), None);
    }

    #[test]
    fn a_pod_is_made_again_only_when_the_spelling_changes() {
        let old = Some(Spelling::Experimental);
        assert!(!Spelling::differs(old, &v("3.5.33")), "a patch upgrade");
        assert!(Spelling::differs(old, &v("3.6.16")), "3.5 -> 3.6");
        assert!(!Spelling::differs(
            Some(Spelling::FeatureGates),
            &v("3.7.3")
        ));
        assert!(!Spelling::differs(old, &v("3.4.23")) && !Spelling::differs(old, &v("3.5.0")));
        assert!(!Spelling::differs(None, &v("3.7.3")), "the user's own");
    }

    #[test]
    fn a_failed_initial_check_and_the_alarms_are_recognised() {
        let exit = r#"{"level":"fatal","msg":"failed to start etcd","error":"c05975f0c8b9c2e9 found data inconsistency with peers"}"#;
        assert!(initial_check_failed(exit));
        assert!(!initial_check_failed("member count is unequal"));
        let corrupt = explain_member_error("memberID:1 alarm:CORRUPT");
        assert!(
            corrupt.contains("refuses writes") && corrupt.contains("replace it"),
            "{corrupt}"
        );
        assert!(explain_member_error("alarm:NOSPACE").contains("defragment"));
        assert_eq!(explain_member_error("something else"), "something else");
    }

    #[test]
    fn which_versions_run_the_checks_of_each_spelling() {
        let experimental = Spelling::Experimental;
        assert!(
            experimental.understood_by(&v("3.5.33")) && experimental.understood_by(&v("3.6.16"))
        );
        assert!(!experimental.understood_by(&v("3.7.3")));
        let gates = Spelling::FeatureGates;
        assert!(!gates.understood_by(&v("3.5.33")) && gates.understood_by(&v("3.7.3")));
    }
}
