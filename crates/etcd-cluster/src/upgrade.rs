//! Rolling upgrades, planned once membership has converged: the path is validated first (every
//! running version to the target, see [`check_upgrade`]), then one member at a time, followers
//! before the leader, each only when every member is healthy and every pod ready.

use std::collections::BTreeMap;

use crate::plan::{Member, PodState};
use crate::version::{EtcdVersion, VersionError, check_upgrade};

/// A member pod's version (its `etcd.version` annotation) and state.
#[derive(Clone, Debug)]
pub struct PodVersion {
    pub version: String,
    pub state: PodState,
    /// The version an in-place upgrade moved it from, until the upgrade is done.
    pub upgraded_from: Option<String>,
    /// Why its etcd container does not run, as the kubelet reports it.
    pub failure: Option<ContainerFailure>,
    /// Its container has never started in this pod (restart count 0, failing on its image):
    /// nothing of its version touched the data.
    pub never_ran: bool,
    /// Whether its etcd process has saved a raft snapshot since it started (its metrics say);
    /// `None` where it was not asked (see [`must_flush_log`]).
    pub saved_snapshot: Option<bool>,
    /// The newest version that has run on its data.
    pub data_ran: DataRan,
}

/// The newest etcd version that has run on a member's data (its claim's record, or what its
/// pod has run): data is never moved back to an older version than that.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum DataRan {
    /// Nothing yet: a new claim, or a pod whose data is its own and never ran.
    Nothing,
    Version(String),
    /// Not recorded (a claim made before the record, or by a restore): nothing is moved back.
    #[default]
    Unknown,
}

impl DataRan {
    /// Why the data cannot be moved to `to`, if it cannot.
    fn refuses(&self, to: &EtcdVersion) -> Option<String> {
        match self {
            DataRan::Nothing => None,
            DataRan::Version(ran) => match EtcdVersion::parse(ran) {
                Ok(ran) if ran <= *to => None,
                _ => Some(format!(
                    "its data has run {ran}, and data is never moved back to an older version"
                )),
            },
            DataRan::Unknown => Some(
                "its claim does not record which versions ran on its data, so it is not moved back"
                    .into(),
            ),
        }
    }

    /// The newer of the two records (unknown stays unknown).
    pub fn and(self, other: DataRan) -> DataRan {
        let version = |d: &DataRan| match d {
            DataRan::Version(v) => EtcdVersion::parse(v).ok(),
            _ => None,
        };
        match (&self, &other) {
            (DataRan::Unknown, _) | (_, DataRan::Unknown) => DataRan::Unknown,
            (DataRan::Nothing, _) => other,
            (_, DataRan::Nothing) => self,
            _ if version(&other) > version(&self) => other,
            _ => self,
        }
    }
}

impl PodVersion {
    pub fn new(version: &str, state: PodState) -> PodVersion {
        PodVersion {
            version: version.to_string(),
            state,
            upgraded_from: None,
            failure: None,
            never_ran: false,
            saved_snapshot: None,
            data_ran: DataRan::Nothing,
        }
    }
}

/// The counter of raft snapshots a member saved since it started, on its metrics port.
pub const SNAPSHOT_SAVES_METRIC: &str = "etcd_debugging_snap_save_total_duration_seconds_count";

/// Whether a member moving `from` -> `to` must first have saved a raft snapshot while running
/// `from`. etcd 3.7 cannot read the v2 entries that 3.5 wrote to the log (it panics replaying
/// them: "unmarshal should never fail"), and a member replays its log from its last snapshot.
/// A member that ran 3.5 and then 3.6 keeps such entries until 3.6 saves a snapshot, which it
/// does only every `--snapshot-count` (10,000) entries. etcd's 3.7 upgrade guide does not say
/// so; it was met upgrading 3.5.33 -> 3.6.16 -> 3.7.3 here.
pub fn must_flush_log(from: &EtcdVersion, to: &EtcdVersion) -> bool {
    from.minor() == (3, 6) && to.minor() >= (3, 7)
}

/// Members moved by an upgrade that now run the target, ready: nothing to go back to for them
/// any more (their data has been run by the new version), so the record of where they came
/// from is dropped.
pub fn settled(target: &EtcdVersion, pods: &BTreeMap<String, PodVersion>) -> Vec<String> {
    pods.iter()
        .filter(|(_, p)| {
            p.upgraded_from.is_some()
                && p.state == (PodState::Running { ready: true })
                && EtcdVersion::parse(&p.version).ok().as_ref() == Some(target)
        })
        .map(|(name, _)| name.clone())
        .collect()
}

/// How a member's container fails (the kubelet's waiting reason and message).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ContainerFailure {
    /// The image cannot be pulled or is invalid: the container never ran it, so the member's
    /// data was not touched by that version.
    Image(String),
    /// The container keeps exiting.
    Crashing(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpgradeStep {
    /// Every member runs the target version.
    Done,
    /// Move this member's pod to the target image (in place, on its own volume).
    Upgrade { member: String, from: String },
    /// An upgrade is under way; wait for this.
    Wait { reason: String },
    /// The target cannot be reached from what runs: nothing is touched.
    Refused(VersionError),
    /// A member moved to `version` does not run: the upgrade is paused (nothing else moves)
    /// until the cause is fixed or the spec goes back.
    Failed {
        member: String,
        version: String,
        cause: String,
    },
    /// The spec went back to the version this member was moved from, and the new image never
    /// ran (or the member was made at a version whose image never ran): move it to `to` in
    /// place, on its untouched data.
    Revert { member: String, to: String },
    /// `member` has not saved a snapshot since it started (see [`must_flush_log`]): make every
    /// member save one, by writes that change nothing (a transaction whose condition is never
    /// true still goes through the log), before it moves.
    FlushLog { member: String },
}

/// A failed in-place upgrade, checked before membership planning (a member that does not run
/// holds everything else up anyway). A member whose new version does not run pauses the
/// upgrade with the cause. Going back is offered only where it is safe: the new image never
/// ran (pull failure), so the member's data is as the old version left it; a member that
/// crashed on the new version may have changed its data and stays put.
pub fn failed_upgrade(
    target: &EtcdVersion,
    pods: &BTreeMap<String, PodVersion>,
) -> Option<UpgradeStep> {
    for (name, pod) in pods {
        // A pod made at a version whose image never ran (a new cluster or member with a bad
        // version): move it to the version a new member would get now (the spec's, or the
        // oldest the others run), its data untouched by the other.
        if pod.never_ran && pod.upgraded_from.is_none() {
            let others = pods
                .iter()
                .filter(|(other, _)| *other != name)
                .map(|(_, p)| p.version.as_str());
            let wanted = starting_version(target, None, others);
            if EtcdVersion::parse(&pod.version).ok().as_ref() != Some(&wanted) {
                return Some(match pod.data_ran.refuses(&wanted) {
                    None => UpgradeStep::Revert {
                        member: name.clone(),
                        to: wanted.to_string(),
                    },
                    Some(why) => UpgradeStep::Failed {
                        member: name.clone(),
                        version: pod.version.clone(),
                        cause: format!(
                            "its image never ran in this pod, and {why} ({wanted}); make the image of {} available",
                            pod.version
                        ),
                    },
                });
            }
        }
        let (Some(from), Some(failure)) = (&pod.upgraded_from, &pod.failure) else {
            continue;
        };
        let back = EtcdVersion::parse(from).ok().as_ref() == Some(target);
        // Back only on data the new version never ran on (the record says what ran).
        let refused = pod.data_ran.refuses(target);
        return Some(match failure {
            ContainerFailure::Image(_) if back && refused.is_none() => UpgradeStep::Revert {
                member: name.clone(),
                to: from.clone(),
            },
            ContainerFailure::Image(cause) if back => UpgradeStep::Failed {
                member: name.clone(),
                version: pod.version.clone(),
                cause: format!(
                    "{cause}; {}: make the image of {} available",
                    refused.unwrap_or_default(),
                    pod.version
                ),
            },
            ContainerFailure::Image(cause) | ContainerFailure::Crashing(cause) => {
                let hint = match failure {
                    ContainerFailure::Image(_) => {
                        format!("make the image available, or set version back to {from}")
                    }
                    ContainerFailure::Crashing(_) => format!(
                        "see the member's logs; it crashed on {} and may have changed its data, so it is not moved back to {from} automatically",
                        pod.version
                    ),
                };
                UpgradeStep::Failed {
                    member: name.clone(),
                    version: pod.version.clone(),
                    cause: format!("{cause}; {hint}"),
                }
            }
        });
    }
    None
}

/// The lowest version any member runs (what the cluster speaks), if all parse.
pub fn current_version(pods: &BTreeMap<String, PodVersion>) -> Option<EtcdVersion> {
    pods.values()
        .filter_map(|p| EtcdVersion::parse(&p.version).ok())
        .min()
}

/// The version a member's pod is created with. A member restarting on its own data gets the
/// version recorded for that data (`own`), so that a pod deleted mid-upgrade neither moves
/// ahead nor goes back. A new member joins at the lowest version the members run, so that it is
/// never ahead of an upgrade that is refused or still under way; it is upgraded like the others
/// afterwards. The first member gets the target.
pub fn starting_version<'a>(
    target: &EtcdVersion,
    own: Option<&str>,
    running: impl IntoIterator<Item = &'a str>,
) -> EtcdVersion {
    if let Some(own) = own.and_then(|v| EtcdVersion::parse(v).ok()) {
        return own;
    }
    running
        .into_iter()
        .filter_map(|v| EtcdVersion::parse(v).ok())
        .min()
        .unwrap_or_else(|| target.clone())
}

pub fn plan_upgrade(
    target: &EtcdVersion,
    pods: &BTreeMap<String, PodVersion>,
    members: &[Member],
) -> UpgradeStep {
    // Validate from every version that runs: a half-done upgrade may only go on to the same
    // target (or one etcd accepts from the oldest member).
    for pod in pods.values() {
        let running = match EtcdVersion::parse(&pod.version) {
            Ok(v) => v,
            Err(e) => return UpgradeStep::Refused(e),
        };
        if let Err(e) = check_upgrade(&running, target) {
            return UpgradeStep::Refused(e);
        }
    }
    // Every version parsed above; each outdated member with the version it runs.
    let outdated: Vec<(&String, &PodVersion, EtcdVersion)> = pods
        .iter()
        .filter_map(|(name, p)| {
            let running = EtcdVersion::parse(&p.version).ok()?;
            (running != *target).then_some((name, p, running))
        })
        .collect();
    // Done only once every member runs the target and is ready: the last one moved (the
    // leader) is still `Wait` until its new container has started and answers.
    if let Some(m) = members.iter().find(|m| !m.healthy) {
        let name = m.name.clone().unwrap_or_else(|| format!("{:x}", m.id));
        return UpgradeStep::Wait {
            reason: format!("member {name} is not healthy; the upgrade waits"),
        };
    }
    if let Some((name, _)) = pods
        .iter()
        .find(|(_, p)| p.state != (PodState::Running { ready: true }))
    {
        return UpgradeStep::Wait {
            reason: format!("member {name} is not ready; the upgrade waits"),
        };
    }
    let is_leader = |name: &str| {
        members
            .iter()
            .any(|m| m.leader && m.name.as_deref() == Some(name))
    };
    // Followers first, the leader last.
    let Some((member, pod, from)) = outdated
        .iter()
        .find(|(name, _, _)| !is_leader(name))
        .or_else(|| outdated.first())
    else {
        return UpgradeStep::Done;
    };
    if must_flush_log(from, target) {
        match pod.saved_snapshot {
            Some(true) => {}
            Some(false) => {
                return UpgradeStep::FlushLog {
                    member: (*member).clone(),
                };
            }
            // Flushing again would not tell more: wait until the member can be asked.
            None => {
                return UpgradeStep::Wait {
                    reason: format!(
                        "cannot tell whether member {member} saved a snapshot on {from}: its metrics (port 8080, {SNAPSHOT_SAVES_METRIC}) do not answer; the upgrade waits"
                    ),
                };
            }
        }
    }
    UpgradeStep::Upgrade {
        member: (*member).clone(),
        from: pod.version.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods(versions: &[(&str, &str)]) -> BTreeMap<String, PodVersion> {
        versions
            .iter()
            .map(|(n, v)| {
                (
                    n.to_string(),
                    PodVersion::new(v, PodState::Running { ready: true }),
                )
            })
            .collect()
    }

    fn members(leader: &str) -> Vec<Member> {
        ["c-0", "c-1", "c-2"]
            .iter()
            .enumerate()
            .map(|(i, n)| Member {
                id: i as u64 + 1,
                name: Some(n.to_string()),
                started: true,
                learner: false,
                healthy: true,
                leader: *n == leader,
            })
            .collect()
    }

    #[test]
    fn followers_first_leader_last_one_at_a_time() {
        let target = EtcdVersion::parse("3.5.16").unwrap();
        let mut running = pods(&[("c-0", "3.4.23"), ("c-1", "3.4.23"), ("c-2", "3.4.23")]);
        let m = members("c-0");
        assert_eq!(
            plan_upgrade(&target, &running, &m),
            UpgradeStep::Upgrade {
                member: "c-1".into(),
                from: "3.4.23".into()
            }
        );
        running.get_mut("c-1").unwrap().version = "3.5.16".into();
        running.get_mut("c-1").unwrap().state = PodState::Running { ready: false };
        assert!(matches!(
            plan_upgrade(&target, &running, &m),
            UpgradeStep::Wait { .. }
        ));
        running.get_mut("c-1").unwrap().state = PodState::Running { ready: true };
        assert_eq!(
            plan_upgrade(&target, &running, &m),
            UpgradeStep::Upgrade {
                member: "c-2".into(),
                from: "3.4.23".into()
            }
        );
        running.get_mut("c-2").unwrap().version = "3.5.16".into();
        assert_eq!(
            plan_upgrade(&target, &running, &m),
            UpgradeStep::Upgrade {
                member: "c-0".into(),
                from: "3.4.23".into()
            }
        );
        running.get_mut("c-0").unwrap().version = "3.5.16".into();
        assert_eq!(plan_upgrade(&target, &running, &m), UpgradeStep::Done);
        assert_eq!(current_version(&running).unwrap().to_string(), "3.5.16");
    }

    #[test]
    fn a_member_moves_from_3_6_to_3_7_only_after_saving_a_snapshot_on_3_6() {
        let target = EtcdVersion::parse("3.7.3").unwrap();
        let mut running = pods(&[("c-0", "3.6.16"), ("c-1", "3.6.16"), ("c-2", "3.6.16")]);
        let m = members("c-0");
        // Its metrics did not answer: flushing would not tell more, so the upgrade waits and
        // says why.
        match plan_upgrade(&target, &running, &m) {
            UpgradeStep::Wait { reason } => {
                assert!(reason.contains("c-1") && reason.contains(SNAPSHOT_SAVES_METRIC))
            }
            other => panic!("expected a wait, got {other:?}"),
        }
        // Not yet saved: the log is flushed first.
        running.get_mut("c-1").unwrap().saved_snapshot = Some(false);
        assert_eq!(
            plan_upgrade(&target, &running, &m),
            UpgradeStep::FlushLog {
                member: "c-1".into()
            }
        );
        running.get_mut("c-1").unwrap().saved_snapshot = Some(true);
        assert_eq!(
            plan_upgrade(&target, &running, &m),
            UpgradeStep::Upgrade {
                member: "c-1".into(),
                from: "3.6.16".into()
            }
        );
        // Other paths need nothing of the kind.
        let v = |s| EtcdVersion::parse(s).unwrap();
        assert!(must_flush_log(&v("3.6.16"), &v("3.7.0")));
        assert!(!must_flush_log(&v("3.5.33"), &v("3.6.16")));
        assert!(!must_flush_log(&v("3.6.11"), &v("3.6.16")));
        assert!(!must_flush_log(&v("3.7.0"), &v("3.7.3")));
    }

    /// Issue: a member that ran 3.6 and settled, whose new pod cannot pull its image after the
    /// spec went back to 3.5, was taken for one whose image never ran and moved back to 3.5.
    #[test]
    fn data_is_never_moved_back_to_an_older_version_than_it_ran() {
        let v = |s: &str| EtcdVersion::parse(s).unwrap();
        let pull_failure = || Some(ContainerFailure::Image("ImagePullBackOff: gone".into()));
        // A settled member came back in a new pod whose image cannot be pulled.
        let mut running = pods(&[("c-0", "3.5.33"), ("c-1", "3.6.16"), ("c-2", "3.5.33")]);
        let c1 = running.get_mut("c-1").unwrap();
        c1.failure = pull_failure();
        c1.never_ran = true;
        c1.data_ran = DataRan::Version("3.6.16".into());
        match failed_upgrade(&v("3.5.33"), &running) {
            Some(UpgradeStep::Failed { member, cause, .. }) => {
                assert_eq!(member, "c-1");
                assert!(cause.contains("its data has run 3.6.16"), "{cause}");
            }
            other => panic!("{other:?}"),
        }
        // The same with nothing run on its data (a new member): moved, as before.
        running.get_mut("c-1").unwrap().data_ran = DataRan::Nothing;
        assert_eq!(
            failed_upgrade(&v("3.5.33"), &running),
            Some(UpgradeStep::Revert {
                member: "c-1".into(),
                to: "3.5.33".into()
            })
        );
        // Unknown (a claim without the record): not moved back either.
        running.get_mut("c-1").unwrap().data_ran = DataRan::Unknown;
        assert!(matches!(
            failed_upgrade(&v("3.5.33"), &running),
            Some(UpgradeStep::Failed { .. })
        ));
        // One member set back: the same.
        let mut alone = pods(&[("c-0", "3.6.16")]);
        let c0 = alone.get_mut("c-0").unwrap();
        c0.failure = pull_failure();
        c0.never_ran = true;
        c0.data_ran = DataRan::Version("3.6.16".into());
        assert!(matches!(
            failed_upgrade(&v("3.5.33"), &alone),
            Some(UpgradeStep::Failed { .. })
        ));
        // Moved by an upgrade whose image never ran: back, unless the record says the new
        // version ran on the data before (in an earlier pod).
        let mut moving = pods(&[("c-0", "3.5.33"), ("c-1", "3.6.16"), ("c-2", "3.5.33")]);
        let c1 = moving.get_mut("c-1").unwrap();
        c1.upgraded_from = Some("3.5.33".into());
        c1.failure = pull_failure();
        c1.data_ran = DataRan::Version("3.5.33".into());
        assert_eq!(
            failed_upgrade(&v("3.5.33"), &moving),
            Some(UpgradeStep::Revert {
                member: "c-1".into(),
                to: "3.5.33".into()
            })
        );
        moving.get_mut("c-1").unwrap().data_ran = DataRan::Version("3.6.16".into());
        assert!(matches!(
            failed_upgrade(&v("3.5.33"), &moving),
            Some(UpgradeStep::Failed { .. })
        ));
        // The newer record wins; unknown stays unknown.
        let ran = |s: &str| DataRan::Version(s.into());
        assert_eq!(ran("3.5.33").and(ran("3.6.16")), ran("3.6.16"));
        assert_eq!(DataRan::Nothing.and(ran("3.5.33")), ran("3.5.33"));
        assert_eq!(ran("3.6.16").and(DataRan::Unknown), DataRan::Unknown);
    }

    #[test]
    fn members_start_at_their_own_version_or_behind_an_unfinished_upgrade() {
        let target = EtcdVersion::parse("3.5.16").unwrap();
        let v = |own, running: &[&str]| starting_version(&target, own, running.iter().copied());
        // The first member: the target.
        assert_eq!(v(None, &[]).to_string(), "3.5.16");
        // Joining a cluster mid-upgrade, or one whose upgrade was refused: the oldest.
        assert_eq!(v(None, &["3.5.16", "3.4.23"]).to_string(), "3.4.23");
        // Restarting on its data: the version that data was last run with.
        assert_eq!(v(Some("3.5.16"), &["3.4.23"]).to_string(), "3.5.16");
        assert_eq!(v(Some("not-a-version"), &["3.4.23"]).to_string(), "3.4.23");
    }

    #[test]
    fn a_member_whose_new_version_does_not_run_pauses_the_upgrade_and_can_go_back() {
        let new = EtcdVersion::parse("3.5.99").unwrap();
        let old = EtcdVersion::parse("3.4.23").unwrap();
        let mut running = pods(&[("c-0", "3.4.23"), ("c-1", "3.5.99"), ("c-2", "3.4.23")]);
        // Moved, not yet failing: nothing to say.
        running.get_mut("c-1").unwrap().upgraded_from = Some("3.4.23".into());
        assert_eq!(failed_upgrade(&new, &running), None);
        // The new image cannot be pulled: paused with the cause.
        running.get_mut("c-1").unwrap().failure = Some(ContainerFailure::Image(
            "ImagePullBackOff: not found".into(),
        ));
        match failed_upgrade(&new, &running) {
            Some(UpgradeStep::Failed {
                member,
                version,
                cause,
            }) => {
                assert_eq!((member.as_str(), version.as_str()), ("c-1", "3.5.99"));
                assert!(cause.contains("ImagePullBackOff") && cause.contains("back to 3.4.23"));
            }
            other => panic!("{other:?}"),
        }
        // The spec goes back: the member goes back.
        assert_eq!(
            failed_upgrade(&old, &running),
            Some(UpgradeStep::Revert {
                member: "c-1".into(),
                to: "3.4.23".into()
            })
        );
        // Crashed on the new version: paused, never moved back automatically.
        running.get_mut("c-1").unwrap().failure =
            Some(ContainerFailure::Crashing("CrashLoopBackOff".into()));
        assert!(matches!(
            failed_upgrade(&old, &running),
            Some(UpgradeStep::Failed { .. })
        ));
        // A failing member that was not upgraded is not an upgrade's business.
        let mut other = pods(&[("c-0", "3.4.23")]);
        other.get_mut("c-0").unwrap().failure =
            Some(ContainerFailure::Crashing("CrashLoopBackOff".into()));
        assert_eq!(failed_upgrade(&new, &other), None);
    }

    #[test]
    fn done_only_once_the_last_moved_member_runs_and_then_it_is_settled() {
        let target = EtcdVersion::parse("3.5.16").unwrap();
        let mut running = pods(&[("c-0", "3.5.16"), ("c-1", "3.5.16"), ("c-2", "3.5.16")]);
        // The leader was patched last; its old container still runs (not ready yet).
        running.get_mut("c-0").unwrap().state = PodState::Running { ready: false };
        running.get_mut("c-0").unwrap().upgraded_from = Some("3.4.23".into());
        assert!(matches!(
            plan_upgrade(&target, &running, &members("c-0")),
            UpgradeStep::Wait { .. }
        ));
        assert!(settled(&target, &running).is_empty());
        running.get_mut("c-0").unwrap().state = PodState::Running { ready: true };
        assert_eq!(
            plan_upgrade(&target, &running, &members("c-0")),
            UpgradeStep::Done
        );
        assert_eq!(settled(&target, &running), ["c-0"]);
    }

    #[test]
    fn a_member_made_at_a_version_whose_image_never_ran_moves_to_the_spec_version() {
        let target = EtcdVersion::parse("3.4.23").unwrap();
        let mut seed = pods(&[("c-0", "3.4.99")]);
        let pod = seed.get_mut("c-0").unwrap();
        pod.state = PodState::Pending;
        pod.failure = Some(ContainerFailure::Image("ErrImagePull".into()));
        pod.never_ran = true;
        assert_eq!(
            failed_upgrade(&target, &seed),
            Some(UpgradeStep::Revert {
                member: "c-0".into(),
                to: "3.4.23".into()
            })
        );
        // A member joining others goes to what they run, never ahead of them.
        let mut joining = seed.clone();
        joining.insert(
            "c-1".into(),
            PodVersion::new("3.4.22", PodState::Running { ready: true }),
        );
        assert_eq!(
            failed_upgrade(&target, &joining),
            Some(UpgradeStep::Revert {
                member: "c-0".into(),
                to: "3.4.22".into()
            })
        );
        // Once it has run, never.
        seed.get_mut("c-0").unwrap().never_ran = false;
        assert_eq!(failed_upgrade(&target, &seed), None);
    }

    #[test]
    fn bad_paths_are_refused_before_anything_moves() {
        let running = pods(&[("c-0", "3.5.16"), ("c-1", "3.5.16"), ("c-2", "3.5.16")]);
        let down = EtcdVersion::parse("3.4.23").unwrap();
        assert!(matches!(
            plan_upgrade(&down, &running, &members("c-0")),
            UpgradeStep::Refused(VersionError::Downgrade { .. })
        ));
        let old = pods(&[("c-0", "3.4.23"), ("c-1", "3.4.23"), ("c-2", "3.4.23")]);
        let skip = EtcdVersion::parse("3.6.0").unwrap();
        assert!(matches!(
            plan_upgrade(&skip, &old, &members("c-0")),
            UpgradeStep::Refused(VersionError::SkipsMinor { .. })
        ));
        let mut sick = members("c-0");
        sick[2].healthy = false;
        let up = EtcdVersion::parse("3.5.16").unwrap();
        assert!(matches!(
            plan_upgrade(&up, &old, &sick),
            UpgradeStep::Wait { .. }
        ));
    }
}
