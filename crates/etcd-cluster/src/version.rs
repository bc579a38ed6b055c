//! etcd versions and the upgrade paths etcd supports: patch upgrades, and one minor version at a
//! time; never a downgrade, never a major change (etcd's `upgrades/upgrading-etcd.md`). Checked
//! before any member is touched.

use std::fmt;

use thiserror::Error;

/// The newest etcd minor this operator knows how to run.
pub const NEWEST_KNOWN_MINOR: (u64, u64) = (3, 7);

/// An etcd release, `MAJOR.MINOR.PATCH` (a leading `v` is accepted, as coreos did).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct EtcdVersion(semver::Version);

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum VersionError {
    #[error("version {0:?} is not MAJOR.MINOR.PATCH (e.g. 3.5.16)")]
    NotSemver(String),
    #[error(
        "version {from} -> {to} is a downgrade; etcd cannot run older code on newer data: restore a backup taken before the upgrade instead"
    )]
    Downgrade { from: EtcdVersion, to: EtcdVersion },
    #[error(
        "version {from} -> {to} skips a minor version; upgrade one minor at a time ({from} -> {next}.x -> ...)"
    )]
    SkipsMinor {
        from: EtcdVersion,
        to: EtcdVersion,
        next: String,
    },
    #[error(
        "etcd {0} is not supported: this operator runs etcd 3.5, 3.6 and 3.7 (3.4 only to upgrade from it); a cluster of the archived coreos operator moves by a backup and a restore: back it up with its unchanged coreos EtcdBackup, then restore that backup into a new EtcdCluster of a supported version with an EtcdRestore (docs/migrating-from-coreos.md)"
    )]
    Unsupported(EtcdVersion),
    #[error(
        "etcd {0} is newer than this operator knows how to run: it runs etcd 3.5, 3.6 and 3.7 (3.4 only to upgrade from it); a later minor may change the flags, the restore tool and the upgrade rules, so run an operator release that supports it"
    )]
    Unknown(EtcdVersion),
    #[error("version {from} -> {to} changes the major version, which etcd does not support")]
    MajorChange { from: EtcdVersion, to: EtcdVersion },
    #[error(
        "version {from} -> {to}: etcd requires every member on {minimum} or later before the next minor; upgrade to {minimum} (or a later patch) first"
    )]
    NeedsPatch {
        from: EtcdVersion,
        to: EtcdVersion,
        minimum: EtcdVersion,
    },
}

impl EtcdVersion {
    pub fn parse(text: &str) -> Result<EtcdVersion, VersionError> {
        let trimmed = text.trim().trim_start_matches('v');
        semver::Version::parse(trimmed)
            .ok()
            .filter(|v| v.pre.is_empty() && v.build.is_empty())
            .map(EtcdVersion)
            .ok_or_else(|| VersionError::NotSemver(text.to_string()))
    }

    /// A version parsed and supported: 3.4 (to upgrade from), 3.5, 3.6 and 3.7. A later minor
    /// is refused, not guessed at: its flags, restore tool and upgrade rules are unknown here.
    pub fn parse_supported(text: &str) -> Result<EtcdVersion, VersionError> {
        let version = EtcdVersion::parse(text)?;
        if version.minor() < (3, 4) || version.0.major != 3 {
            return Err(VersionError::Unsupported(version));
        }
        if version.minor() > NEWEST_KNOWN_MINOR {
            return Err(VersionError::Unknown(version));
        }
        Ok(version)
    }

    pub fn minor(&self) -> (u64, u64) {
        (self.0.major, self.0.minor)
    }

    pub fn at_least(&self, major: u64, minor: u64, patch: u64) -> bool {
        self.0 >= semver::Version::new(major, minor, patch)
    }

    /// Whether this version's restore tool has `--bump-revision` and `--mark-compacted`
    /// (etcdctl 3.4.27, etcdutl 3.5.10, and 3.6).
    pub fn restore_can_bump_revision(&self) -> bool {
        match self.minor() {
            (3, 4) => self.at_least(3, 4, 27),
            (3, 5) => self.at_least(3, 5, 10),
            (3, m) => m > 5,
            (major, _) => major > 3,
        }
    }

    /// Whether the restore tool is `etcdutl` (3.5 and later) rather than `etcdctl`.
    pub fn has_etcdutl(&self) -> bool {
        self.at_least(3, 5, 0)
    }
}

impl fmt::Display for EtcdVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// What moving from one version to another means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Upgrade {
    /// Same version: nothing to do.
    None,
    /// A patch release of the same minor.
    Patch,
    /// The next minor version.
    Minor,
}

/// The oldest patch of `from`'s minor that etcd's upgrade guide allows to move to the next minor:
/// 3.5.32 before 3.6 (the zombie-member fix; earlier guidance named 3.5.20 and 3.5.26, the
/// newest patch is the safe reading), 3.6.11 before 3.7. `None`: any patch.
fn minimum_before_next_minor(from: &EtcdVersion) -> Option<EtcdVersion> {
    let patch = match from.minor() {
        (3, 5) => 32,
        (3, 6) => 11,
        _ => return None,
    };
    Some(EtcdVersion(semver::Version::new(3, from.0.minor, patch)))
}

/// Checks that etcd supports going from `from` to `to`.
pub fn check_upgrade(from: &EtcdVersion, to: &EtcdVersion) -> Result<Upgrade, VersionError> {
    let (f, t) = (&from.0, &to.0);
    let error = |make: fn(EtcdVersion, EtcdVersion) -> VersionError| make(from.clone(), to.clone());
    if t == f {
        return Ok(Upgrade::None);
    }
    if t < f {
        return Err(error(|from, to| VersionError::Downgrade { from, to }));
    }
    if t.major != f.major {
        return Err(error(|from, to| VersionError::MajorChange { from, to }));
    }
    match t.minor - f.minor {
        0 => Ok(Upgrade::Patch),
        1 => match minimum_before_next_minor(from) {
            Some(minimum) if *from < minimum => Err(VersionError::NeedsPatch {
                from: from.clone(),
                to: to.clone(),
                minimum,
            }),
            _ => Ok(Upgrade::Minor),
        },
        _ => Err(VersionError::SkipsMinor {
            from: from.clone(),
            to: to.clone(),
            next: format!("{}.{}", f.major, f.minor + 1),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> EtcdVersion {
        EtcdVersion::parse(s).unwrap()
    }

    #[test]
    fn parses_with_or_without_v_and_refuses_the_rest() {
        assert_eq!(v("v3.4.23"), v("3.4.23"));
        for bad in ["3.4", "latest", "3.5.0-rc.1", "", "3.4.x"] {
            assert!(
                matches!(EtcdVersion::parse(bad), Err(VersionError::NotSemver(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn coreos_era_versions_are_refused_with_the_way_out() {
        for old in ["3.2.13", "3.3.25", "2.3.8"] {
            let err = EtcdVersion::parse_supported(old).unwrap_err();
            assert!(matches!(err, VersionError::Unsupported(_)), "{old}");
            assert!(
                err.to_string()
                    .contains("restore that backup into a new EtcdCluster"),
                "{err}"
            );
        }
        for ok in ["3.4.23", "3.5.33", "3.6.16", "3.7.3"] {
            assert_eq!(EtcdVersion::parse_supported(ok), Ok(v(ok)));
        }
    }

    #[test]
    fn a_minor_newer_than_the_operator_knows_is_refused_not_guessed_at() {
        for new in ["3.8.0", "3.10.1", "4.0.0"] {
            let err = EtcdVersion::parse_supported(new).unwrap_err();
            assert!(
                matches!(err, VersionError::Unknown(_) | VersionError::Unsupported(_)),
                "{new}"
            );
        }
        let err = EtcdVersion::parse_supported("3.8.0").unwrap_err();
        assert_eq!(err, VersionError::Unknown(v("3.8.0")));
        assert!(err.to_string().contains("3.5, 3.6 and 3.7"), "{err}");
    }

    #[test]
    fn upgrade_paths() {
        assert_eq!(check_upgrade(&v("3.4.23"), &v("3.4.23")), Ok(Upgrade::None));
        assert_eq!(
            check_upgrade(&v("3.4.23"), &v("3.4.30")),
            Ok(Upgrade::Patch)
        );
        assert_eq!(
            check_upgrade(&v("3.4.23"), &v("3.5.16")),
            Ok(Upgrade::Minor)
        );
        assert_eq!(check_upgrade(&v("3.5.32"), &v("3.6.0")), Ok(Upgrade::Minor));
        let err = check_upgrade(&v("3.5.16"), &v("3.4.23")).unwrap_err();
        assert!(matches!(err, VersionError::Downgrade { .. }));
        assert!(err.to_string().contains("restore a backup"), "{err}");
        let err = check_upgrade(&v("3.4.23"), &v("3.6.0")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "version 3.4.23 -> 3.6.0 skips a minor version; upgrade one minor at a time (3.4.23 -> 3.5.x -> ...)"
        );
        let err = check_upgrade(&v("3.5.16"), &v("3.6.1")).unwrap_err();
        assert!(
            matches!(&err, VersionError::NeedsPatch { minimum, .. } if minimum == &v("3.5.32")),
            "{err}"
        );
        assert!(err.to_string().contains("upgrade to 3.5.32"), "{err}");
        // 3.6 -> 3.7 only from 3.6.11.
        let err = check_upgrade(&v("3.6.10"), &v("3.7.3")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "version 3.6.10 -> 3.7.3: etcd requires every member on 3.6.11 or later before the next minor; upgrade to 3.6.11 (or a later patch) first"
        );
        assert_eq!(check_upgrade(&v("3.6.11"), &v("3.7.0")), Ok(Upgrade::Minor));
        assert_eq!(check_upgrade(&v("3.6.16"), &v("3.7.3")), Ok(Upgrade::Minor));
        // 3.4 -> 3.5 from any patch.
        assert_eq!(check_upgrade(&v("3.4.0"), &v("3.5.33")), Ok(Upgrade::Minor));
        assert!(matches!(
            check_upgrade(&v("3.5.16"), &v("4.0.0")),
            Err(VersionError::MajorChange { .. })
        ));
    }

    #[test]
    fn restore_tool_features_by_version() {
        assert!(!v("3.4.23").restore_can_bump_revision());
        assert!(v("3.4.27").restore_can_bump_revision());
        assert!(!v("3.5.9").restore_can_bump_revision());
        assert!(v("3.5.16").restore_can_bump_revision());
        assert!(v("3.6.0").restore_can_bump_revision());
        assert!(!v("3.4.23").has_etcdutl() && v("3.5.16").has_etcdutl());
    }
}
