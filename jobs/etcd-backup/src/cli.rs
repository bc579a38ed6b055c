//! Command-line interface. The S3 flags, `--compress` and `--log-format` are the shared ones
//! of `command-line`; S3 settings also come from the standard AWS environment.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
pub use command_line::{CompressArg, EncryptArgs, IdentityArgs, LogFormat, Output, StorageArgs};

#[derive(Parser, Debug)]
#[command(
    name = "etcd-backup",
    version,
    about = "Save, verify, fetch, list and prune etcd snapshots in S3 or a local directory"
)]
#[command(
    after_help = "Exit codes: 0 success, 1 runtime failure, 2 usage error, 3 the backup failed verification, 4 the identity cannot decrypt the backup (none given, not an age identity, not a recipient)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,

    /// Result format on stdout: human text, or one JSON line.
    #[arg(long, global = true, value_enum, default_value_t = Output::Text)]
    pub output: Output,

    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    #[command(flatten)]
    pub storage: StorageArgs,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Snapshot the most up-to-date etcd member straight into storage, verified while streaming.
    Save(SaveArgs),
    /// Stream a stored backup and check its sha256 trailer, compression, encryption and
    /// manifest. An encrypted backup without --identity is checked as far as possible
    /// (complete, header well formed, size and stored checksum as recorded), and the output
    /// says that its content was not.
    Verify {
        /// s3://bucket/key or file:///path
        url: String,
        #[command(flatten)]
        identity: IdentityArgs,
    },
    /// Download, verify, decrypt and decompress a backup into a file that `etcdutl snapshot
    /// restore` accepts.
    Fetch {
        url: String,
        /// Destination file; written as <out>.part and renamed only when verified.
        #[arg(long)]
        out: PathBuf,
        #[command(flatten)]
        identity: IdentityArgs,
    },
    /// Restore a backup into a throw-away etcd on loopback (a scratch directory, removed after)
    /// and check that it serves what the manifest recorded at backup time: the revision, the
    /// key count and HashKV. Exit 0 when all match, 3 when the backup is bad, 1 when the drill
    /// could not run, 4 when --identity cannot decrypt it.
    Drill {
        url: String,
        #[command(flatten)]
        identity: IdentityArgs,
        /// Directory with etcd and etcdutl (etcdctl for 3.4) of the backup's etcd minor
        /// version (default: PATH).
        #[arg(long)]
        etcd_bin_dir: Option<PathBuf>,
        /// Where the scratch directory is made (default: TMPDIR); it needs room for the
        /// snapshot and the restored data dir.
        #[arg(long)]
        scratch_dir: Option<PathBuf>,
        /// Seconds the restored member may take to serve.
        #[arg(long, default_value_t = 120)]
        start_timeout: u64,
    },
    /// The last step of a drill, for a member restored and started elsewhere (the operator's
    /// drill pods run it beside etcd): wait until --member serves, compare it with the
    /// contents recorded at backup time (--expect, the JSON `contents` of a manifest or an
    /// EtcdBackup's status), print the verdict and write it to --report-file. Exit codes as
    /// `drill`.
    DrillCheck {
        /// The restored member's client URL (loopback).
        #[arg(long)]
        member: String,
        /// The recorded contents: {"revision": R, "keyCount": N, "hashKv": H, ...}.
        #[arg(long)]
        expect: String,
        /// The backup drilled, named in the verdict.
        #[arg(long, default_value = "")]
        object: String,
        /// Also write the JSON verdict here (a pod's /dev/termination-log).
        #[arg(long)]
        report_file: Option<PathBuf>,
        /// Seconds the restored member may take to serve.
        #[arg(long, default_value_t = 300)]
        start_timeout: u64,
    },
    /// List the backups under a prefix with their manifests.
    List {
        /// s3://bucket/prefix or file:///dir/prefix
        prefix: String,
    },
    /// Delete all but the newest N scheduled backups of a base name (never the newest one).
    Prune(PruneArgs),
    /// Archive every change of the cluster, continuously, in segments beside the scheduled
    /// backups, so that a restore can go to any revision or time since the oldest snapshot.
    /// Runs until SIGTERM/SIGINT, which stores the open segment first.
    Archive(ArchiveArgs),
    /// Write a snapshot file at a revision or time, from the newest snapshot before it and
    /// the archived changes after it, replayed in a scratch etcd on loopback. `etcdutl
    /// snapshot restore` restores the file.
    PointInTime(PointInTimeArgs),
    /// The first half of `point-in-time` for a scratch member run apart (a restore pod's
    /// sidecar): decide the snapshot and segments that reach the point, fetch the snapshot
    /// into DIR/snapshot.db and write the decision to DIR/point.json.
    PreparePoint(PreparePointArgs),
    /// The second half: replay the segments `prepare-point` chose into the scratch member at
    /// --endpoint (restored from DIR/snapshot.db, nothing else written to it) and write its
    /// snapshot at the point to --out.
    ReplayPoint(ReplayPointArgs),
}

#[derive(Args, Debug)]
pub struct SaveArgs {
    #[command(flatten)]
    pub etcd: EtcdArgs,

    /// Destination: s3://bucket/key or file:///dir/name.
    #[arg(long)]
    pub to: String,

    /// Append the coreos suffix `_v<revision>_<YYYY-MM-DD-HH:MM:SS>` to the key (for schedules).
    #[arg(long)]
    pub scheduled_name: bool,

    #[arg(long, value_enum, default_value_t = CompressArg::None)]
    pub compress: CompressArg,

    #[command(flatten)]
    pub encrypt: EncryptArgs,

    /// Record only the key count for drills, not HashKV (which reads the member's whole
    /// database; for very large key spaces).
    #[arg(long)]
    pub no_hash_kv: bool,

    /// Fail when etcd sends no data for this many seconds.
    #[arg(long, default_value_t = 60)]
    pub stall_timeout: u64,
    /// Optional total deadline in seconds.
    #[arg(long)]
    pub timeout: Option<u64>,

    #[command(flatten)]
    pub parts: PartArgs,
}

/// Which etcd to talk to, and how.
#[derive(Args, Debug)]
pub struct EtcdArgs {
    /// etcd client URLs; the member with the highest revision is snapshotted.
    #[arg(
        long,
        env = "ETCDCTL_ENDPOINTS",
        value_delimiter = ',',
        required = true
    )]
    pub endpoints: Vec<String>,

    /// CA bundle to verify etcd's server certificate.
    #[arg(long, env = "ETCDCTL_CACERT")]
    pub cacert: Option<PathBuf>,
    /// Client certificate for etcd.
    #[arg(long, env = "ETCDCTL_CERT")]
    pub cert: Option<PathBuf>,
    /// Client key for etcd.
    #[arg(long, env = "ETCDCTL_KEY")]
    pub key: Option<PathBuf>,

    /// Seconds to wait for each endpoint to connect and report its status.
    #[arg(long, default_value_t = 10)]
    pub dial_timeout: u64,
}

/// How uploads are cut into parts.
#[derive(Args, Debug)]
pub struct PartArgs {
    /// Initial S3 part size in MiB (parts grow so 10,000 always suffice).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(8..=5120))]
    pub part_size_mib: u64,
    /// Parts uploaded in parallel.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=32))]
    pub parts_in_flight: u64,
}

#[derive(Args, Debug)]
pub struct ArchiveArgs {
    #[command(flatten)]
    pub etcd: EtcdArgs,

    /// The scheduled backups' base name (s3://bucket/etcd.backup or file:///dir/etcd.backup):
    /// the archive goes on from their newest and is stored under <base>.changes/. With no
    /// snapshot of this cluster there, one is taken first.
    #[arg(long)]
    pub to: String,

    /// A segment is stored this many seconds after its first change at the latest.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub segment_seconds: u64,
    /// ...or once it holds this many MiB of changes.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub segment_max_mib: u64,

    /// Compression of segments and of the snapshots the archive takes.
    #[arg(long, value_enum, default_value_t = CompressArg::None)]
    pub compress: CompressArg,

    #[command(flatten)]
    pub encrypt: EncryptArgs,

    /// Only needed for an encrypted archive whose newest segment lost its manifest (the
    /// archiver was killed between the two): it is read back to write it.
    #[command(flatten)]
    pub identity: IdentityArgs,

    /// Snapshots the archive takes record only the key count, not HashKV.
    #[arg(long)]
    pub no_hash_kv: bool,

    #[command(flatten)]
    pub parts: PartArgs,
}

/// Which point of which backups: what `point-in-time` and `prepare-point` share.
#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("point").required(true).multiple(false))]
pub struct PointArgs {
    /// The scheduled backups' base name, as given to `archive --to`.
    pub base: String,
    /// The revision to restore to.
    #[arg(long, group = "point")]
    pub revision: Option<i64>,
    /// Or a time (RFC 3339, e.g. 2026-11-29T03:12:00Z): the last revision the archive saw
    /// at or before it.
    #[arg(long, group = "point")]
    pub time: Option<String>,
    /// Only this cluster's snapshots and changes (the hex ID in their manifests), when the
    /// base holds several (a restored cluster gets a new ID).
    #[arg(long)]
    pub cluster_id: Option<String>,
}

#[derive(Args, Debug)]
pub struct PointInTimeArgs {
    #[command(flatten)]
    pub point: PointArgs,
    /// The snapshot file to write; written as <out>.part and renamed when complete.
    #[arg(long)]
    pub out: PathBuf,
    #[command(flatten)]
    pub identity: IdentityArgs,
    /// Directory with etcd and etcdutl of the snapshot's etcd minor version (default: PATH).
    #[arg(long)]
    pub etcd_bin_dir: Option<PathBuf>,
    /// Where the scratch directory is made (default: TMPDIR).
    #[arg(long)]
    pub scratch_dir: Option<PathBuf>,
    /// Seconds the scratch member may take to serve.
    #[arg(long, default_value_t = 120)]
    pub start_timeout: u64,
}

#[derive(Args, Debug)]
pub struct PreparePointArgs {
    #[command(flatten)]
    pub point: PointArgs,
    /// Where snapshot.db and point.json are written.
    #[arg(long)]
    pub dir: PathBuf,
    /// The version of the etcd that will replay (a snapshot of a newer minor is refused).
    #[arg(long)]
    pub etcd_version: String,
    #[command(flatten)]
    pub identity: IdentityArgs,
}

#[derive(Args, Debug)]
pub struct ReplayPointArgs {
    /// The same base name as given to `prepare-point` (the segments are read from it).
    pub base: String,
    /// The directory `prepare-point` wrote point.json to.
    #[arg(long)]
    pub dir: PathBuf,
    /// The scratch member's client URL (loopback).
    #[arg(long, default_value = "http://127.0.0.1:2379")]
    pub endpoint: String,
    /// The snapshot file to write; written as <out>.part and renamed when complete.
    #[arg(long)]
    pub out: PathBuf,
    #[command(flatten)]
    pub identity: IdentityArgs,
    /// Seconds the scratch member may take to serve.
    #[arg(long, default_value_t = 600)]
    pub start_timeout: u64,
}

#[derive(Args, Debug)]
pub struct PruneArgs {
    /// Base name the scheduled backups share: s3://bucket/etcd.backup or file:///dir/etcd.backup
    pub base: String,
    /// How many of the newest backups to keep (at least 1).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub keep: u64,
    /// Show what would be deleted without deleting.
    #[arg(long)]
    pub dry_run: bool,
    /// Also remove unfinished uploads under the base started more than this many seconds ago.
    #[arg(long, default_value_t = 3600)]
    pub incomplete_older_than: u64,
}
