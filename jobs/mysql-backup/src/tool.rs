//! Running an external tool: stderr is streamed to the logs line by line and its tail kept for
//! error messages; the process is killed if it is dropped (a failed upload stops the backup).

use std::collections::VecDeque;
use std::ffi::OsString;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::task::JoinHandle;

use crate::{Error, Result};

const TAIL_LINES: usize = 20;

pub struct Tool {
    pub name: String,
    child: Child,
    tail: Arc<Mutex<VecDeque<String>>>,
    stderr_task: Option<JoinHandle<()>>,
}

impl Tool {
    /// Starts `program` with stdout (and optionally stdin) piped.
    pub fn spawn(
        program: &str,
        args: &[OsString],
        stdin: bool,
        package: &'static str,
    ) -> Result<Tool> {
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::ToolMissing {
                tool: program.to_string(),
                package,
            },
            _ => Error::io(program, e),
        })?;
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let stderr = child.stderr.take().expect("stderr is piped");
        let name = program.to_string();
        let task_tail = tail.clone();
        let task_name = name.clone();
        let stderr_task = tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::info!(tool = %task_name, "{line}");
                let mut tail = task_tail.lock().unwrap_or_else(|e| e.into_inner());
                if tail.len() == TAIL_LINES {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
        });
        tracing::debug!(tool = %name, pid = child.id(), "started");
        Ok(Tool {
            name,
            child,
            tail,
            stderr_task: Some(stderr_task),
        })
    }

    /// The tool's stdout, with the pipe enlarged: at the default 64 KiB the tool and the runner
    /// take turns in tiny steps; 1 MiB lets the tool keep writing while a chunk is processed.
    pub fn stdout(&mut self) -> ChildStdout {
        let stdout = self.child.stdout.take().expect("stdout taken once");
        enlarge_pipe(std::os::fd::AsRawFd::as_raw_fd(&stdout));
        stdout
    }

    pub fn stdin(&mut self) -> ChildStdin {
        self.child
            .stdin
            .take()
            .expect("stdin is piped and taken once")
    }

    /// Waits for the exit and for stderr to be fully read (so the tail is complete).
    pub async fn wait(&mut self) -> Result<(ExitStatus, String)> {
        let status = self
            .child
            .wait()
            .await
            .map_err(|e| Error::io(&self.name, e))?;
        if let Some(task) = self.stderr_task.take() {
            let _ = task.await;
        }
        Ok((status, self.tail()))
    }

    pub fn tail(&self) -> String {
        let tail = self.tail.lock().unwrap_or_else(|e| e.into_inner());
        tail.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    /// The exit status if the process has exited.
    pub fn try_exited(&mut self) -> Result<Option<ExitStatus>> {
        self.child.try_wait().map_err(|e| Error::io(&self.name, e))
    }

    /// Asks the process to stop (SIGTERM), e.g. a server's clean shutdown.
    pub fn terminate(&self) {
        if let Some(pid) = self.child.id() {
            // SAFETY: kill(2) on our own child's pid; failure (already gone) is harmless.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
        }
    }

    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }
}

/// Best effort: the kernel may cap the size (`/proc/sys/fs/pipe-max-size`).
pub(crate) fn enlarge_pipe(fd: std::os::fd::RawFd) {
    // SAFETY: F_SETPIPE_SZ on a pipe fd we own; failure only leaves the default size.
    let size = unsafe { libc::fcntl(fd, libc::F_SETPIPE_SZ, PIPE_SIZE) };
    if size < 0 {
        tracing::debug!(
            "could not enlarge the pipe: {}",
            std::io::Error::last_os_error()
        );
    }
}

const PIPE_SIZE: libc::c_int = 1 << 20;
