//! Command line. Secrets come from files or the environment only: `MYSQL_BACKUP_PASSWORD`,
//! `MYSQL_BACKUP_TOKEN`, `MYSQL_REPLICATION_PASSWORD` (or the matching `--*-file` flags), and the
//! standard AWS variables for S3.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
pub use command_line::{CompressArg, EncryptArgs, IdentityArgs, LogFormat, Output, StorageArgs};

#[derive(Parser, Debug)]
#[command(
    name = "mysql-backup",
    version,
    about = "Streaming MySQL/MariaDB physical backups with xtrabackup or mariadb-backup"
)]
#[command(
    after_help = "Exit codes: 0 success, 1 failure, 3 the data failed verification (corrupted, truncated, no manifest), 4 the identity cannot decrypt the backup (none given, not an age identity, not a recipient)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Tool family: mariadb (mariadb-backup, mbstream) or percona (xtrabackup, xbstream, MySQL 8).
    #[arg(long, global = true, value_enum, default_value_t = ToolArg::Auto, env = "MYSQL_BACKUP_TOOL")]
    pub tool: ToolArg,
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(flatten)]
    pub storage: StorageArgs,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the backup tool beside the server and upload its stream (committed only if complete).
    Backup {
        /// Destination: s3://bucket/key or file:///dir/name.
        #[arg(long)]
        to: String,
        #[command(flatten)]
        db: DbArgs,
        #[command(flatten)]
        tool: BackupToolArgs,
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        incremental: IncrementalArgs,
    },
    /// Sidecar: stream a fresh backup to one authenticated client at a time.
    Serve {
        /// Address to listen on, e.g. 0.0.0.0:3307.
        #[arg(long)]
        listen: String,
        #[command(flatten)]
        db: DbArgs,
        #[command(flatten)]
        tool: BackupToolArgs,
        #[command(flatten)]
        auth: AuthArgs,
    },
    /// Receive a backup from `serve` and upload it.
    Pull {
        /// The serve address, HOST:PORT.
        #[arg(long)]
        from: String,
        #[arg(long)]
        to: String,
        #[command(flatten)]
        auth: AuthArgs,
        #[command(flatten)]
        remote: RemoteArgs,
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        incremental: IncrementalArgs,
    },
    /// Init container of a new replica: receive from `serve`, extract, prepare. Skips an
    /// initialised data dir; wipes what an interrupted earlier attempt left.
    Clone {
        #[arg(long)]
        from: String,
        #[arg(long)]
        datadir: PathBuf,
        #[command(flatten)]
        auth: AuthArgs,
        #[command(flatten)]
        remote: RemoteArgs,
        #[command(flatten)]
        prepare: PrepareArgs,
    },
    /// Download, verify, extract, prepare and move a backup into an empty data dir.
    Restore {
        /// s3://bucket/key or file:///dir/name; with --newest, the prefix the backups share.
        #[arg(long)]
        from: String,
        /// Restore the newest complete backup under the prefix --from (what `list` shows first).
        #[arg(long, conflicts_with = "force")]
        newest: bool,
        #[arg(long)]
        datadir: PathBuf,
        /// Restore an object without a valid manifest (the stream checks still apply).
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        identity: IdentityArgs,
        #[command(flatten)]
        prepare: PrepareArgs,
        #[command(flatten)]
        point: PointArgs,
    },
    /// Sidecar of the primary: copy the server's binary logs into an archive as they are
    /// written (pieces ending between transactions, each with a manifest), for restores to a
    /// point. Resumes from what the archive holds.
    ArchiveBinlogs {
        /// The archive's prefix: s3://bucket/prefix/ (gs://, azure://, file:///dir/ too).
        #[arg(long)]
        to: String,
        /// The server's data directory (its binlog files and index), as mounted here.
        #[arg(long, env = "MYSQL_BACKUP_DATADIR")]
        datadir: PathBuf,
        /// The binlog index file, when the data dir holds more than one.
        #[arg(long)]
        binlog_index: Option<PathBuf>,
        /// Seconds between looks at the active file: how far the archive may lag behind the
        /// server, and (under constant writes) one piece per interval to store and to read back.
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=3600))]
        interval: u64,
        /// Largest piece in MiB (a piece is held in memory while it is stored).
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=256))]
        max_piece_mib: u64,
        /// Archive what is there, then exit (a job, or a test).
        #[arg(long)]
        once: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// The binlog archive under a prefix: each file (oldest first), how far it is archived,
    /// its GTID states, last transaction and event time, and whether the server finished it.
    ListBinlogs {
        /// s3://bucket/prefix/ or file:///dir/ (what archive-binlogs writes to).
        prefix: String,
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// The complete backups under a prefix (object and manifest), newest first.
    List {
        /// s3://bucket/prefix or file:///dir/prefix.
        prefix: String,
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Delete the complete backups under a prefix beyond the newest --keep (the newest is never
    /// deleted), each object before its manifest, and manifests left without their object.
    /// Objects without a manifest (unfinished, or not mysql-backup's) are left alone. With
    /// --binlogs, then the archived binary logs older than the oldest kept backup.
    Prune {
        /// s3://bucket/prefix or file:///dir/prefix.
        prefix: String,
        /// How many of the newest backups to keep (at least 1).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        keep: u64,
        /// Show what would be deleted without deleting.
        #[arg(long)]
        dry_run: bool,
        /// Also delete the archived binary logs (archive-binlogs' prefix) that no restore to a
        /// point since the oldest kept backup needs: the finished files it holds entirely.
        #[arg(long)]
        binlogs: Option<String>,
    },
    /// Abort the unfinished multipart uploads under a prefix that runners killed outright
    /// (SIGKILL, a lost node) left behind, started more than --older-than seconds ago. Objects
    /// are never touched; a running backup's upload is younger than the default hour.
    CleanUploads {
        /// s3://bucket/prefix (or a local file:///dir/prefix for temp files).
        prefix: String,
        #[arg(long, default_value_t = 3600)]
        older_than: u64,
    },
    /// Once per data dir: point the local server at the source using the backup's binlog
    /// coordinates, and start replication.
    ConfigureReplication {
        /// The restored/cloned data dir (holds the coordinates and the done-marker).
        #[arg(long)]
        datadir: PathBuf,
        #[arg(long)]
        source_host: String,
        #[arg(long, default_value_t = 3306)]
        source_port: u16,
        /// Replication user on the source.
        #[arg(long, env = "MYSQL_REPLICATION_USER")]
        replication_user: String,
        /// File holding the replication password (else MYSQL_REPLICATION_PASSWORD).
        #[arg(long, env = "MYSQL_REPLICATION_PASSWORD_FILE")]
        replication_password_file: Option<PathBuf>,
        /// How long to wait for the local server to accept connections, in seconds.
        #[arg(long, default_value_t = 300)]
        wait_timeout: u64,
        #[command(flatten)]
        db: DbArgs,
    },
}

/// How to reach the database (the local server for backup/serve/configure-replication).
#[derive(Args, Debug, Clone)]
pub struct DbArgs {
    #[arg(long, env = "MYSQL_BACKUP_SOCKET")]
    pub socket: Option<PathBuf>,
    #[arg(long, env = "MYSQL_BACKUP_HOST")]
    pub host: Option<String>,
    #[arg(long, env = "MYSQL_BACKUP_PORT")]
    pub port: Option<u16>,
    #[arg(long, env = "MYSQL_BACKUP_USER")]
    pub user: Option<String>,
    /// File holding the password (else MYSQL_BACKUP_PASSWORD; never a flag value).
    #[arg(long, env = "MYSQL_BACKUP_PASSWORD_FILE")]
    pub password_file: Option<PathBuf>,
    /// An option file with [client] credentials, used as is instead of the flags above.
    #[arg(long)]
    pub defaults_extra_file: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct BackupToolArgs {
    /// The server's data directory, as the tool must read it.
    #[arg(long, env = "MYSQL_BACKUP_DATADIR")]
    pub datadir: Option<PathBuf>,
    /// Copy threads for the tool (--parallel).
    #[arg(long)]
    pub parallel: Option<u32>,
    /// Also record the source's replication coordinates (--slave-info; back up a replica).
    #[arg(long)]
    pub replica_info: bool,
    /// Extra argument for the backup tool (repeatable), e.g. --tool-arg=--no-lock.
    #[arg(long = "tool-arg", allow_hyphen_values = true)]
    pub tool_args: Vec<String>,
}

#[derive(Args, Debug, Clone)]
pub struct StoreArgs {
    #[arg(long, value_enum, default_value_t = CompressArg::None)]
    pub compress: CompressArg,
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(i32).range(1..=19))]
    pub zstd_level: i32,
    /// zstd worker threads (each buffers a few MiB).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=32))]
    pub zstd_threads: u32,
    /// Initial S3 part size in MiB (parts grow so 10,000 always suffice).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(8..=5120))]
    pub part_size_mib: u64,
    /// Parts uploaded in parallel.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=32))]
    pub parts_in_flight: u64,
    #[command(flatten)]
    pub encrypt: EncryptArgs,
}

/// Incremental backups: only the pages changed since the newest backup under a prefix.
#[derive(Args, Debug, Clone)]
pub struct IncrementalArgs {
    /// Back up only the pages changed since the newest backup under this prefix (--to must be
    /// under it too), building a chain on it. A full backup is taken instead, and the output
    /// says why, when there is none yet, its chain is broken or already holds
    /// --max-incrementals, or the source's data dir is not the one the chain was taken from.
    #[arg(long, value_name = "PREFIX")]
    pub incremental: Option<String>,
    /// Incrementals after a full backup before the next full one (a restore applies them all).
    #[arg(long, default_value_t = 6, requires = "incremental", value_parser = clap::value_parser!(u64).range(1..=100))]
    pub max_incrementals: u64,
}

#[derive(Args, Debug, Clone)]
pub struct AuthArgs {
    /// File holding the shared token of serve and its clients (else MYSQL_BACKUP_TOKEN).
    #[arg(long, env = "MYSQL_BACKUP_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct RemoteArgs {
    #[arg(long, default_value_t = 10)]
    pub connect_timeout: u64,
    /// Fail when the source sends nothing for this many seconds.
    #[arg(long, default_value_t = 600)]
    pub stall_timeout: u64,
}

/// Restore to a point: the newest backup under --from before the point, then the archived
/// binary logs up to (not including) the point.
#[derive(Args, Debug, Clone)]
pub struct PointArgs {
    /// The binlog archive's prefix (what archive-binlogs writes to).
    #[arg(long, requires = "point")]
    pub binlogs: Option<String>,
    /// Stop before the first transaction at or after this time (RFC 3339, e.g.
    /// 2026-11-30T10:15:00Z).
    #[arg(long, group = "point", requires = "binlogs", conflicts_with_all = ["newest", "force"])]
    pub until: Option<String>,
    /// Stop before this transaction (MariaDB GTID, e.g. 0-100-5123): everything committed
    /// before it is restored, it and what follows are not.
    #[arg(long, group = "point", requires = "binlogs", conflicts_with_all = ["newest", "force"])]
    pub until_gtid: Option<String>,
}

#[derive(Args, Debug, Clone)]
pub struct PrepareArgs {
    /// Memory for --prepare, e.g. 1G.
    #[arg(long)]
    pub use_memory: Option<String>,
    /// Extractor threads.
    #[arg(long)]
    pub parallel: Option<u32>,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum ToolArg {
    Auto,
    Mariadb,
    Percona,
}
