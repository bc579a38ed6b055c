//! SIGTERM and SIGINT in the job binaries: the work in progress is dropped, which aborts its
//! uploads (nothing becomes visible, no parts are left), the process waits for those aborts, then
//! exits with 128 + the signal number.

use std::future::Future;
use std::process::ExitCode;
use std::time::Duration;

/// How long an interrupted binary waits for its uploads' aborts: well inside Kubernetes'
/// default 30 s grace period.
const ABORT_LIMIT: Duration = Duration::from_secs(20);

/// The signal that stopped the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interrupt {
    Term,
    Int,
}

impl Interrupt {
    pub fn name(self) -> &'static str {
        match self {
            Interrupt::Term => "SIGTERM",
            Interrupt::Int => "SIGINT",
        }
    }

    /// 128 + the signal number, as a shell reports a process the signal killed.
    pub fn exit_code(self) -> u8 {
        match self {
            Interrupt::Term => 143,
            Interrupt::Int => 130,
        }
    }
}

/// Runs `work` to its end, or until SIGTERM or SIGINT arrives; then `work` is dropped.
pub async fn until_interrupted<F: Future>(work: F) -> Result<F::Output, Interrupt> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("install a SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("install a SIGINT handler");
    tokio::select! {
        output = work => Ok(output),
        _ = term.recv() => Err(Interrupt::Term),
        _ = int.recv() => Err(Interrupt::Int),
    }
}

/// What an interrupted upload leaves: nothing.
pub const NOTHING_STORED: &str = "any upload in progress was aborted, nothing was stored";

/// After an interrupt: waits for the aborts of the dropped uploads, says in one line what
/// happened and what the command left (`left`, e.g. [`NOTHING_STORED`]), and returns the exit
/// code.
pub async fn exit_after(interrupt: Interrupt, left: &str) -> ExitCode {
    let name = interrupt.name();
    if backup_storage::finish_aborts(ABORT_LIMIT).await {
        eprintln!("error: interrupted by {name}; {left}");
    } else {
        eprintln!(
            "error: interrupted by {name}; an upload could not be aborted within {} s, nothing was \
             stored, and `prune` removes its parts later",
            ABORT_LIMIT.as_secs()
        );
    }
    ExitCode::from(interrupt.exit_code())
}
