//! The command-line pieces the binaries share, so that `etcd-backup`, `mysql-backup` and the
//! operators spell their flags, defaults and logs the same way: `--log-format` with its logging
//! set-up, `--output` and the exit codes; with the `storage` feature also the `--s3-*` flags and
//! the store they open, `--compress`, the encryption flags, and how they stop on a signal.

#[cfg(feature = "storage")]
mod interrupt;
#[cfg(feature = "storage")]
mod storage;

use clap::ValueEnum;

#[cfg(feature = "storage")]
pub use interrupt::{Interrupt, NOTHING_STORED, exit_after, until_interrupted};
#[cfg(feature = "storage")]
pub use storage::{CompressArg, EncryptArgs, IdentityArgs, KeyError, SseArg, StorageArgs};

/// Exit code of a run that failed for any reason but the data (unreachable, refused, missing).
pub const EXIT_FAILED: u8 = 1;
/// Exit code of a backup that failed verification, so callers (scripts, the restore operator)
/// can tell "the data is bad" from "the network was down".
pub const EXIT_DATA_BAD: u8 = 3;
/// Exit code of a run that could not decrypt with the identity given (none given for an
/// encrypted backup, not an age identity, not among the backup's recipients): the backup may
/// be good, the key is wrong, which a restore at 3 a.m. must not confuse with bad data.
pub const EXIT_NO_USABLE_IDENTITY: u8 = 4;

/// `--log-format`: logs go to stderr, as text or one JSON object per line.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// `--output`: a command's result on stdout, as human text or JSON.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Text,
    Json,
}

/// The default log filter of long-running programs that talk to S3: `info`, but the AWS
/// SDK's credential loading at `warn`, since at `info` it logs where credentials came from,
/// access key ID included.
pub const DEFAULT_LOG_FILTER: &str = "info,aws_config=warn";

/// Logs to stderr in `format`, filtered by `RUST_LOG`, else by `default_filter`.
pub fn init_logging(format: LogFormat, default_filter: &str) {
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
