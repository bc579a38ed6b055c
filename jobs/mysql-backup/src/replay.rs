//! Applies archived binlogs to a prepared (not yet installed) restore: the transactions after
//! the backup's GTID state (those it holds are skipped), through a private server on the
//! staging dir (no network, no grant checks: nobody else can reach it), fed by
//! `mariadb-binlog` reading the verified pieces from its stdin, stopped exactly before the
//! point by this code (which frames the events itself), then shut down cleanly. Replayed
//! transactions keep their GTIDs and are written to the restored server's own binlog, which
//! starts from the backup's GTID state, so the server continues the history it restores.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::{Duration, Instant};

use backup_storage::Store;
use backup_storage::encryption::Identity;
use backup_storage::layers::{Declared, ObjectReader};
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;
use tokio::process::ChildStdin;

use crate::binlog::{Framer, Gtid, GtidState, Transactions};
use crate::binlog_archive::Piece;
use crate::point_in_time::{Point, ReplayPlan};
use crate::tool::Tool;
use crate::{Error, Result};

/// What a replay applied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    pub transactions: u64,
    pub last_gtid: Option<Gtid>,
    pub last_event_time: Option<DateTime<Utc>>,
    /// The transaction it stopped before (None: stopped by time with no later one seen).
    pub stopped_before: Option<Gtid>,
}

/// Starts a private server on `datadir`, replays, stops it.
pub async fn replay(
    store: &Store,
    plan: &ReplayPlan,
    point: Point,
    identity: Option<&Identity>,
    datadir: &Path,
    use_memory: Option<&str>,
) -> Result<Applied> {
    let server_id = plan.files[0].pieces[0].manifest.server_id;
    let basename = log_bin_basename(&plan.files[0].pieces[0].manifest.file);
    let mut server = PrivateServer::start(datadir, server_id, &basename, use_memory).await?;
    let applied = async {
        let mut client = Tool::spawn("mariadb", &server.client_args(), true, "mariadb-client")?;
        let mut sql = client.stdin();
        // Replayed statements may print results (ANALYZE TABLE, say): read and dropped, so
        // the client never blocks on a full pipe.
        let mut printed = client.stdout();
        let drain = tokio::spawn(async move {
            let _ = tokio::io::copy(&mut printed, &mut tokio::io::sink()).await;
        });
        let mut feed = Feed::new(point, plan);
        let fed = async {
            // The session keeps every privilege; the binlog restarts from the backup's state.
            let setup = format!(
                "FLUSH LOCAL PRIVILEGES;\nRESET MASTER;\nSET GLOBAL gtid_binlog_state = '{}';\n",
                plan.base_state
            );
            write(&mut sql, setup.as_bytes()).await?;
            for file in &plan.files {
                if !feed.file(store, &file.pieces, identity, &mut sql).await? {
                    break;
                }
            }
            feed.check_reached()
        }
        .await;
        drop(sql);
        let (status, tail) = client.wait().await?;
        let _ = drain.await;
        // A statement that failed ends the client first: its error is the cause, the broken
        // pipe that followed is not.
        if !status.success() {
            return Err(Error::Config(format!(
                "replaying the binary logs failed: a replayed statement was refused \
                 ({status}): {tail}"
            )));
        }
        fed?;
        Ok(feed.applied)
    }
    .await;
    let stopped = server.stop().await;
    let applied = applied?;
    stopped?;
    Ok(applied)
}

/// `bin.000003` -> `bin`.
fn log_bin_basename(file: &str) -> String {
    match file.rsplit_once('.') {
        Some((base, n)) if n.chars().all(|c| c.is_ascii_digit()) => base.to_string(),
        _ => file.to_string(),
    }
}

/// Frames the archived events and forwards those between the backup's position and the point.
struct Feed<'a> {
    point: Point,
    plan: &'a ReplayPlan,
    applied: Applied,
    /// The last applied sequence number of each domain.
    applied_seq: BTreeMap<u32, u64>,
    /// The last applied GTID of each (domain, server).
    applied_state: GtidState,
    done: bool,
}

impl<'a> Feed<'a> {
    fn new(point: Point, plan: &'a ReplayPlan) -> Feed<'a> {
        Feed {
            point,
            plan,
            applied: Applied::default(),
            applied_seq: BTreeMap::new(),
            applied_state: GtidState::default(),
            done: false,
        }
    }

    /// Replays one file's transactions the backup does not hold; false once the point is
    /// reached.
    async fn file(
        &mut self,
        store: &Store,
        pieces: &[Piece],
        identity: Option<&Identity>,
        sql: &mut ChildStdin,
    ) -> Result<bool> {
        let mut decoder = Tool::spawn("mariadb-binlog", &["-".into()], true, "mariadb-client")?;
        let mut decoder_in = decoder.stdin();
        let mut decoded = decoder.stdout();
        let copy = async {
            tokio::io::copy(&mut decoded, sql)
                .await
                .map_err(|e| Error::io("mariadb (the replay's SQL session)", e))
        };
        let forward = async {
            let result = self.forward(store, pieces, identity, &mut decoder_in).await;
            drop(decoder_in);
            result
        };
        // The first failure cancels the other side; the decoder's pipes are closed before
        // waiting for it, so it cannot block on a full pipe.
        let joined = tokio::try_join!(copy, forward);
        drop(decoded);
        let (status, tail) = decoder.wait().await?;
        // The decoder's own failure explains a broken pipe; a failed SQL session is reported
        // by the caller, which waits for it.
        if !status.success() {
            return Err(Error::Config(format!(
                "mariadb-binlog failed ({status}): {tail}"
            )));
        }
        joined?;
        Ok(!self.done)
    }

    async fn forward(
        &mut self,
        store: &Store,
        pieces: &[Piece],
        identity: Option<&Identity>,
        out: &mut ChildStdin,
    ) -> Result<()> {
        let mut framer = Framer::default();
        let mut tx = Transactions::default();
        // Within the open transaction: whether it is skipped (the backup holds it).
        let mut skipping = false;
        for piece in pieces {
            let m = &piece.manifest;
            let bytes = fetch_piece(store, piece, identity).await?;
            let bad = |detail: String| Error::Corrupted {
                url: store.location(&piece.key).to_string(),
                detail,
            };
            let mut at = if m.start == 0 {
                if bytes.get(..4) != Some(crate::binlog::MAGIC) {
                    return Err(bad("no binlog magic number".into()));
                }
                write(out, &bytes[..4]).await?;
                4
            } else {
                0
            };
            while let Some(f) = framer
                .next(&bytes[at..], m.start + at as u64)
                .map_err(|e| bad(e.to_string()))?
            {
                let event = f.event;
                let whole = &bytes[at..at + f.len];
                at += f.len;
                let inside = !tx.between();
                let started = tx.observe(&event);
                if event.is_format_description() {
                    write(out, whole).await?;
                    continue;
                }
                if let Some(gtid) = started {
                    // The backup holds it, or a file before this one did (a promoted replica's file
                    // repeats what it had replicated).
                    let repeated = self.applied_state.includes(gtid);
                    // A file repeating its own server's applied transaction is another history
                    // (the planner never chains one; this guards the replay all the same).
                    if repeated && gtid.server == m.server_id {
                        return Err(Error::Config(format!(
                            "{} repeats transaction {gtid} of its own server: two histories \
                             (the server was restored, or lost transactions in a crash); \
                             restore to a point before it, or from a backup taken after it",
                            m.file
                        )));
                    }
                    skipping = self.plan.base_state.reaches(gtid) || repeated;
                    if !skipping {
                        self.check_continues(gtid)?;
                        if self.stops_before(gtid, event.time())? {
                            self.applied.stopped_before = Some(gtid);
                            self.done = true;
                            return Ok(());
                        }
                        self.applied.transactions += 1;
                        self.applied.last_gtid = Some(gtid);
                        self.applied_seq.insert(gtid.domain, gtid.seq);
                        self.applied_state.record(gtid);
                    }
                } else if !inside {
                    // Between transactions (Gtid_list, checkpoints, Rotate): no data.
                    continue;
                }
                if !skipping {
                    write(out, whole).await?;
                    self.applied.last_event_time = Some(event.time());
                }
            }
            if at != bytes.len() {
                return Err(bad(format!(
                    "{} bytes after the last whole event",
                    bytes.len() - at
                )));
            }
        }
        Ok(())
    }

    /// Sequence numbers of a domain follow one another: a transaction after the backup's (or
    /// the last applied one of its domain) that is not the next one means transactions are
    /// missing.
    fn check_continues(&self, gtid: Gtid) -> Result<()> {
        let previous = self
            .applied_seq
            .get(&gtid.domain)
            .copied()
            .or_else(|| self.plan.base_state.last_seq(gtid.domain));
        match previous {
            Some(seq) if gtid.seq != seq + 1 => Err(Error::Config(format!(
                "the archived history does not continue: after sequence number {seq} of domain \
                 {} comes {gtid} (transactions missing between the backup {} and the archive, \
                 or two histories: a failover that lost transactions); restore to a point \
                 before it",
                gtid.domain, self.plan.base.key
            ))),
            _ => Ok(()),
        }
    }

    /// A GTID point the replay never met was not reached, whatever the plan expected.
    fn check_reached(&self) -> Result<()> {
        match self.point {
            Point::BeforeGtid(g) if !self.done => Err(Error::Config(format!(
                "the archive ended before transaction {g}: the last applied is {}; nothing \
                 was installed",
                self.applied
                    .last_gtid
                    .map_or("none".to_string(), |l| l.to_string())
            ))),
            _ => Ok(()),
        }
    }

    fn stops_before(&self, gtid: Gtid, time: DateTime<Utc>) -> Result<bool> {
        match self.point {
            Point::BeforeTime(t) => Ok(time >= t),
            Point::BeforeGtid(g) if g == gtid => Ok(true),
            // The point's place in its domain holds another transaction (another server id),
            // or was passed: the point names no transaction of this history.
            Point::BeforeGtid(g) if g.domain == gtid.domain && gtid.seq >= g.seq => {
                Err(Error::Config(format!(
                    "the archive has no transaction {g}: it went from {} to {gtid}",
                    self.applied
                        .last_gtid
                        .map_or("the backup".to_string(), |l| l.to_string())
                )))
            }
            Point::BeforeGtid(_) => Ok(false),
        }
    }
}

async fn write(out: &mut ChildStdin, bytes: &[u8]) -> Result<()> {
    out.write_all(bytes)
        .await
        .map_err(|e| Error::io("mariadb-binlog", e))
}

/// A piece's plaintext, checked against its manifest (pieces are small: the archiver caps
/// them), so no byte is applied unverified.
async fn fetch_piece(store: &Store, piece: &Piece, identity: Option<&Identity>) -> Result<Vec<u8>> {
    let m = &piece.manifest;
    let url = store.location(&piece.key).to_string();
    let corrupted = |detail: String| Error::Corrupted {
        url: url.clone(),
        detail,
    };
    let download = store.download(&piece.key).await?;
    let declared = Declared::recorded(
        m.compression,
        m.encryption.as_ref(),
        m.stored_checksum().ok().map(|c| c.kind),
    );
    let mut reader = ObjectReader::open(download, &declared, identity, &url)
        .await
        .map_err(|e| corrupted(e.to_string()))?;
    let mut bytes = Vec::new();
    while reader
        .advance()
        .await
        .map_err(|e| corrupted(e.to_string()))?
    {
        bytes.extend_from_slice(reader.piece());
    }
    let sha = hex::encode(Sha256::digest(&bytes));
    if sha != m.binlog_sha256 || bytes.len() as u64 != m.end - m.start {
        return Err(corrupted(format!(
            "{} bytes with sha256 {sha}, the manifest records {} bytes with {}",
            bytes.len(),
            m.end - m.start,
            m.binlog_sha256
        )));
    }
    Ok(bytes)
}

/// The restore's own server: on the staging dir, a socket in a private temp dir, no network.
struct PrivateServer {
    tool: Option<Tool>,
    dir: tempfile::TempDir,
}

impl PrivateServer {
    async fn start(
        datadir: &Path,
        server_id: u32,
        basename: &str,
        use_memory: Option<&str>,
    ) -> Result<PrivateServer> {
        let dir = tempfile::Builder::new()
            .prefix("mysql-backup-replay-")
            .tempdir()
            .map_err(|e| Error::io(std::env::temp_dir(), e))?;
        let mut args: Vec<std::ffi::OsString> = vec![
            "--no-defaults".into(),
            format!("--datadir={}", datadir.display()).into(),
            format!("--socket={}", dir.path().join("s.sock").display()).into(),
            format!("--pid-file={}", dir.path().join("mariadbd.pid").display()).into(),
            format!("--log-error={}", dir.path().join("error.log").display()).into(),
            "--skip-networking".into(),
            "--skip-grant-tables".into(),
            format!("--log-bin={basename}").into(),
            format!("--server-id={server_id}").into(),
            format!("--innodb-buffer-pool-size={}", use_memory.unwrap_or("128M")).into(),
            // mariadb-binlog writes a row event group as one statement: as large as the
            // primary allowed (at most 1 GiB).
            "--max-allowed-packet=1G".into(),
        ];
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            args.push("--user=root".into());
        }
        let tool = Tool::spawn("mariadbd", &args, false, "mariadb-server")?;
        let mut server = PrivateServer {
            tool: Some(tool),
            dir,
        };
        server.wait_ready().await?;
        Ok(server)
    }

    fn client_args(&self) -> Vec<std::ffi::OsString> {
        vec![
            "--no-defaults".into(),
            format!("--socket={}", self.dir.path().join("s.sock").display()).into(),
            "--user=root".into(),
            "--binary-mode".into(),
            "--max-allowed-packet=1G".into(),
        ]
    }

    fn error_log(&self) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let socket = self.dir.path().join("s.sock");
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            if tokio::net::UnixStream::connect(&socket).await.is_ok() {
                return Ok(());
            }
            let exited = match self.tool.as_mut() {
                Some(tool) => tool.try_exited()?,
                None => None,
            };
            if let Some(status) = exited {
                return Err(Error::Config(format!(
                    "the restore's private server exited ({status}):\n{}",
                    self.error_log()
                )));
            }
            if Instant::now() > deadline {
                return Err(Error::Config(format!(
                    "the restore's private server did not start in 300 s:\n{}",
                    self.error_log()
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// SIGTERM: a clean shutdown, so the installed data dir needs no crash recovery.
    async fn stop(&mut self) -> Result<()> {
        let Some(mut tool) = self.tool.take() else {
            return Ok(());
        };
        tool.terminate();
        let (status, _) = tool.wait().await?;
        if status.success() || status.signal() == Some(libc::SIGTERM) {
            Ok(())
        } else {
            Err(Error::Config(format!(
                "the restore's private server did not shut down cleanly ({status}):\n{}",
                self.error_log()
            )))
        }
    }
}
