//! What a drill pod says, pure: nothing while it runs; once it has ended, the result, a reason
//! and the words for status and events, from the containers' exit codes and termination
//! messages (`check` writes its JSON verdict there; the others' is the end of their log).

use etcd_api::DrillResult;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use operator_runtime::events::truncate_note;
use serde::Deserialize;

#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub result: DrillResult,
    /// `Passed`, or why it failed (`status.lastDrill.reason`, the failure metric's label).
    pub reason: String,
    pub message: String,
    pub etcd_version: Option<String>,
    pub revision: Option<i64>,
    pub key_count: Option<i64>,
}

/// `etcd-backup drill-check`'s JSON verdict.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Report {
    passed: bool,
    #[serde(default)]
    etcd_version: Option<String>,
    revision: i64,
    #[serde(default)]
    restored_key_count: Option<i64>,
    #[serde(default)]
    differences: Vec<String>,
    #[serde(default)]
    seconds: f64,
}

fn failed(reason: &str, message: String) -> Verdict {
    Verdict {
        result: DrillResult::Failed,
        reason: reason.into(),
        message: truncate_note(message),
        etcd_version: None,
        revision: None,
        key_count: None,
    }
}

/// The exit code and message of a container that has terminated.
fn terminated(status: &ContainerStatus) -> Option<(i32, String)> {
    let state = status.state.as_ref()?.terminated.as_ref()?;
    Some((
        state.exit_code,
        state.message.clone().unwrap_or_default().trim().to_string(),
    ))
}

/// A container waiting for a reason that will not pass by itself (the image cannot be pulled,
/// its configuration is refused).
fn stuck(status: &ContainerStatus) -> Option<String> {
    let waiting = status.state.as_ref()?.waiting.as_ref()?;
    let reason = waiting.reason.as_deref()?;
    let hopeless = matches!(
        reason,
        "ErrImagePull" | "ImagePullBackOff" | "InvalidImageName" | "CreateContainerConfigError"
    );
    hopeless.then(|| {
        format!(
            "container {} cannot start: {reason}: {}",
            status.name,
            waiting.message.as_deref().unwrap_or("")
        )
    })
}

/// The verdict of `pod`, or `None` while it still runs.
pub fn read(pod: &Pod) -> Option<Verdict> {
    let status = pod.status.as_ref()?;
    let init = status.init_container_statuses.iter().flatten();
    let main = status.container_statuses.iter().flatten();
    if let Some(message) = init.clone().chain(main.clone()).find_map(stuck) {
        return Some(failed("PodCannotStart", message));
    }
    match status.phase.as_deref() {
        Some("Succeeded") => Some(from_check(main.clone().find(|c| c.name == "check"))),
        Some("Failed") => {
            if status.reason.as_deref() == Some("DeadlineExceeded") {
                return Some(failed(
                    "TimedOut",
                    "the drill did not finish within its time (drill.timeoutInSecond)".into(),
                ));
            }
            // The first step that failed says why: the steps run in this order.
            for step in ["fetch", "restore"] {
                if let Some((code, message)) = init
                    .clone()
                    .find(|c| c.name == step)
                    .and_then(terminated)
                    .filter(|(code, _)| *code != 0)
                {
                    return Some(match (step, u8::try_from(code)) {
                        ("fetch", Ok(command_line::EXIT_DATA_BAD)) => failed(
                            "BackupCorrupt",
                            format!(
                                "the backup failed verification while it was fetched: {message}"
                            ),
                        ),
                        ("fetch", Ok(command_line::EXIT_NO_USABLE_IDENTITY)) => failed(
                            "NoUsableIdentity",
                            format!(
                                "the backup could not be decrypted with the drill's identity \
                                 (drill.identitySecret); the backup itself was not judged: \
                                 {message}"
                            ),
                        ),
                        ("fetch", _) => failed(
                            "FetchFailed",
                            format!("the backup could not be fetched: {message}"),
                        ),
                        _ => failed(
                            "RestoreFailed",
                            format!("etcd's restore tool refused the backup: {message}"),
                        ),
                    });
                }
            }
            Some(from_check(main.clone().find(|c| c.name == "check")))
        }
        _ => None,
    }
}

fn from_check(check: Option<&ContainerStatus>) -> Verdict {
    let Some((code, message)) = check.and_then(terminated) else {
        return failed(
            "PodFailed",
            "the drill pod ended before its check ran".into(),
        );
    };
    let report = serde_json::from_str::<Report>(&message).ok();
    match (code, report) {
        (0, Some(r)) if r.passed => Verdict {
            result: DrillResult::Succeeded,
            reason: "Passed".into(),
            message: format!(
                "restored with etcd {} it serves {} keys at revision {} and the same HashKV, as recorded ({:.1} s)",
                r.etcd_version.clone().unwrap_or_default(),
                r.restored_key_count.unwrap_or_default(),
                r.revision,
                r.seconds
            ),
            etcd_version: r.etcd_version,
            revision: Some(r.revision),
            key_count: r.restored_key_count,
        },
        (_, Some(r)) => Verdict {
            etcd_version: r.etcd_version.clone(),
            revision: Some(r.revision),
            key_count: r.restored_key_count,
            ..failed(
                "ContentMismatch",
                format!(
                    "the restore is not the backed-up key space: {}",
                    r.differences.join("; ")
                ),
            )
        },
        (_, None) => failed(
            "DidNotServe",
            format!("the restored member could not be checked: {message}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Pod {
        serde_saphyr::from_str(yaml).unwrap()
    }

    /// A pod in `phase` whose container `step` ended with `code` and `message`.
    fn ended_pod(phase: &str, step: &str, code: i32, message: &str) -> Pod {
        let list = if step == "check" {
            "containerStatuses"
        } else {
            "initContainerStatuses"
        };
        pod(&format!(
            "status: {{phase: {phase}, {list}: [{{name: {step}, image: i, imageID: i, \
             ready: false, restartCount: 0, \
             state: {{terminated: {{exitCode: {code}, message: '{message}'}}}}}}]}}"
        ))
    }

    fn failed_pod(step: &str, code: i32, message: &str) -> Pod {
        ended_pod("Failed", step, code, message)
    }

    #[test]
    fn a_running_pod_has_no_verdict() {
        assert_eq!(read(&pod("status: {phase: Running}")), None);
        assert_eq!(read(&pod("status: {phase: Pending}")), None);
    }

    #[test]
    fn a_passed_check_is_a_success_with_what_it_saw() {
        let report = r#"{"passed":true,"etcdVersion":"3.6.16","revision":40,"restoredKeyCount":12,"differences":[],"seconds":1.5}"#;
        let v = read(&ended_pod("Succeeded", "check", 0, report)).unwrap();
        assert_eq!(v.result, DrillResult::Succeeded, "{v:?}");
        assert_eq!(v.key_count, Some(12));
        assert_eq!(v.revision, Some(40));
    }

    #[test]
    fn each_failing_step_has_its_reason() {
        let v = read(&failed_pod("fetch", 3, "sha256 mismatch")).unwrap();
        assert_eq!(
            (v.result, v.reason.as_str()),
            (DrillResult::Failed, "BackupCorrupt")
        );
        assert!(v.message.contains("sha256 mismatch"));
        assert_eq!(
            read(&failed_pod("fetch", 1, "S3 down")).unwrap().reason,
            "FetchFailed"
        );
        let v = read(&failed_pod("fetch", 4, "is not among its recipients")).unwrap();
        assert_eq!(v.reason, "NoUsableIdentity");
        assert!(
            v.message.contains("not among its recipients"),
            "{}",
            v.message
        );
        assert_eq!(
            read(&failed_pod("restore", 1, "bad db")).unwrap().reason,
            "RestoreFailed"
        );
        let report = r#"{"passed":false,"revision":40,"restoredKeyCount":11,"differences":["12 keys at revision 40 recorded, the restore has 11"]}"#;
        let v = read(&failed_pod("check", 3, report)).unwrap();
        assert_eq!(v.reason, "ContentMismatch");
        assert!(
            v.message.contains("12 keys at revision 40"),
            "{}",
            v.message
        );
        assert_eq!(
            read(&failed_pod("check", 1, "did not serve"))
                .unwrap()
                .reason,
            "DidNotServe"
        );
        let deadline = pod("status: {phase: Failed, reason: DeadlineExceeded}");
        assert_eq!(read(&deadline).unwrap().reason, "TimedOut");
    }

    #[test]
    fn an_image_that_cannot_be_pulled_fails_at_once() {
        let p = pod(
            "status: {phase: Pending, initContainerStatuses: [{name: restore, image: i, imageID: '', ready: false, restartCount: 0, state: {waiting: {reason: ImagePullBackOff, message: 'not found'}}}]}",
        );
        let v = read(&p).unwrap();
        assert_eq!(v.reason, "PodCannotStart");
        assert!(v.message.contains("restore"));
    }
}
