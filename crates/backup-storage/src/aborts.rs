//! Aborts that outlive the upload that needed them: a dropped upload's abort, and the request
//! that starts a multipart upload whose writer is gone meanwhile. A process waits for them
//! before it exits ([`finish_aborts`]).

use std::sync::LazyLock;
use std::time::Duration;

use tokio_util::task::TaskTracker;

/// The aborts of uploads dropped without commit or abort (a cancelled task, a signal), which
/// run in the background; also the requests that start multipart uploads, which abort what
/// they started when its writer was dropped meanwhile.
static DROPPED_UPLOAD_ABORTS: LazyLock<TaskTracker> = LazyLock::new(TaskTracker::new);

/// Runs `abort` in the background and tracks it, so [`finish_aborts`] can wait for it.
pub(crate) fn spawn_abort(
    runtime: &tokio::runtime::Handle,
    abort: impl Future<Output = ()> + Send + 'static,
) {
    runtime.spawn(DROPPED_UPLOAD_ABORTS.track_future(abort));
}

/// Waits, at most `limit`, for the aborts of dropped uploads: a process that exits before they
/// reach the server leaves parts behind. Call it last, once nothing uploads any more (on a
/// signal, after the work was dropped). True when every abort finished in time.
pub async fn finish_aborts(limit: Duration) -> bool {
    DROPPED_UPLOAD_ABORTS.close();
    let finished = tokio::time::timeout(limit, DROPPED_UPLOAD_ABORTS.wait())
        .await
        .is_ok();
    DROPPED_UPLOAD_ABORTS.reopen();
    finished
}
