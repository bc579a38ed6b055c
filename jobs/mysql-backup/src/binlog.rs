//! MariaDB binary log files, as far as archiving and replaying to a point need them: the event
//! framing (a 19-byte header whose length field gives the event's end), each event's CRC32,
//! GTIDs and the GTID state a file starts with, and where transactions end, so an archived
//! piece never stops in the middle of one and a replay stops exactly before a transaction.
//!
//! Format: the MariaDB server's `log_event.h` (binlog version 4). Encrypted binary logs
//! (`encrypt-binlog`) cannot be read outside the server and are refused.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, Utc};

pub const MAGIC: &[u8; 4] = b"\xfebin";
pub const HEADER_LEN: usize = 19;

const QUERY_EVENT: u8 = 2;
const STOP_EVENT: u8 = 3;
const ROTATE_EVENT: u8 = 4;
const FORMAT_DESCRIPTION_EVENT: u8 = 15;
const XID_EVENT: u8 = 16;
const XA_PREPARE_LOG_EVENT: u8 = 38;
const GTID_EVENT: u8 = 162;
const GTID_LIST_EVENT: u8 = 163;
const START_ENCRYPTION_EVENT: u8 = 164;
const QUERY_COMPRESSED_EVENT: u8 = 165;

/// Header flag of the format description event while the server has the file open.
const LOG_EVENT_BINLOG_IN_USE_F: u8 = 1;

/// GTID event flags (`Gtid_log_event::FL_*`).
const FL_STANDALONE: u8 = 1;
const FL_PREPARED_XA: u8 = 64;

/// A MariaDB GTID: domain, server id, sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Gtid {
    pub domain: u32,
    pub server: u32,
    pub seq: u64,
}

impl fmt::Display for Gtid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}-{}", self.domain, self.server, self.seq)
    }
}

impl std::str::FromStr for Gtid {
    type Err = String;
    fn from_str(s: &str) -> Result<Gtid, String> {
        let parts: Vec<&str> = s.trim().split('-').collect();
        let bad = || format!("{s:?} is not a MariaDB GTID (domain-server-sequence, e.g. 0-1-42)");
        let [domain, server, seq] = parts.as_slice() else {
            return Err(bad());
        };
        Ok(Gtid {
            domain: domain.parse().map_err(|_| bad())?,
            server: server.parse().map_err(|_| bad())?,
            seq: seq.parse().map_err(|_| bad())?,
        })
    }
}

/// The binlog state: the last GTID logged per (domain, server), as `gtid_binlog_state` and a
/// file's Gtid_list event hold it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GtidState(BTreeMap<(u32, u32), u64>);

impl GtidState {
    pub fn record(&mut self, gtid: Gtid) {
        self.0.insert((gtid.domain, gtid.server), gtid.seq);
    }

    /// True when `gtid` is at or before this state in its domain (a transaction it holds).
    pub fn includes(&self, gtid: Gtid) -> bool {
        self.0
            .get(&(gtid.domain, gtid.server))
            .is_some_and(|&seq| seq >= gtid.seq)
    }

    /// The same place in every domain's history: equal newest sequence numbers (the server ids
    /// a state lists beside them may differ after a failover).
    pub fn same_position(&self, other: &GtidState) -> bool {
        self.domains()
            .chain(other.domains())
            .all(|d| self.last_seq(d) == other.last_seq(d))
    }

    /// True when this state holds `gtid`'s domain up to its sequence number.
    pub fn reaches(&self, gtid: Gtid) -> bool {
        self.last_seq(gtid.domain)
            .is_some_and(|seq| seq >= gtid.seq)
    }

    /// The newest sequence number in `domain`.
    pub fn last_seq(&self, domain: u32) -> Option<u64> {
        self.0
            .iter()
            .filter(|((d, _), _)| *d == domain)
            .map(|(_, &seq)| seq)
            .max()
    }

    /// The domains this state has a GTID in.
    pub fn domains(&self) -> impl Iterator<Item = u32> + '_ {
        let mut domains: Vec<u32> = self.0.keys().map(|(d, _)| *d).collect();
        domains.dedup();
        domains.into_iter()
    }

    pub fn parse(text: &str) -> Result<GtidState, String> {
        let mut state = GtidState::default();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            state.record(part.parse()?);
        }
        Ok(state)
    }
}

impl fmt::Display for GtidState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|(&(domain, server), &seq)| {
                Gtid {
                    domain,
                    server,
                    seq,
                }
                .to_string()
            })
            .collect();
        f.write_str(&parts.join(","))
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BinlogError {
    #[error("not a binary log (no magic number at the start)")]
    NoMagic,
    #[error("event at {offset}: {detail}")]
    BadEvent { offset: u64, detail: String },
    #[error("the binary log is encrypted (encrypt-binlog); it can only be read by the server")]
    Encrypted,
}

/// One event's header and body (the CRC32 excluded).
#[derive(Debug, Clone, Copy)]
pub struct Event<'a> {
    pub timestamp: u32,
    pub kind: u8,
    pub server_id: u32,
    pub body: &'a [u8],
}

impl Event<'_> {
    pub fn time(&self) -> DateTime<Utc> {
        DateTime::from_timestamp(i64::from(self.timestamp), 0).unwrap_or_default()
    }

    pub fn is_format_description(&self) -> bool {
        self.kind == FORMAT_DESCRIPTION_EVENT
    }

    /// The GTID this event starts a transaction with, and its flags.
    pub fn gtid(&self) -> Option<(Gtid, u8)> {
        if self.kind != GTID_EVENT || self.body.len() < 13 {
            return None;
        }
        let seq = u64::from_le_bytes(self.body[0..8].try_into().ok()?);
        let domain = u32::from_le_bytes(self.body[8..12].try_into().ok()?);
        Some((
            Gtid {
                domain,
                server: self.server_id,
                seq,
            },
            self.body[12],
        ))
    }

    /// The state a Gtid_list event records (the first events of every file).
    pub fn gtid_list(&self) -> Option<GtidState> {
        if self.kind != GTID_LIST_EVENT || self.body.len() < 4 {
            return None;
        }
        let count = u32::from_le_bytes(self.body[0..4].try_into().ok()?) & 0x0fff_ffff;
        let mut state = GtidState::default();
        for i in 0..count as usize {
            let at = 4 + i * 16;
            let entry = self.body.get(at..at + 16)?;
            state.record(Gtid {
                domain: u32::from_le_bytes(entry[0..4].try_into().ok()?),
                server: u32::from_le_bytes(entry[4..8].try_into().ok()?),
                seq: u64::from_le_bytes(entry[8..16].try_into().ok()?),
            });
        }
        Some(state)
    }

    /// Rotate or Stop: the server wrote nothing after it in this file.
    pub fn ends_file(&self) -> bool {
        matches!(self.kind, ROTATE_EVENT | STOP_EVENT)
    }

    /// A Query event's statement text.
    fn query(&self) -> Option<&[u8]> {
        if !matches!(self.kind, QUERY_EVENT | QUERY_COMPRESSED_EVENT) || self.body.len() < 13 {
            return None;
        }
        let db_len = usize::from(self.body[8]);
        let status_len = usize::from(u16::from_le_bytes(self.body[11..13].try_into().ok()?));
        self.body.get(13 + status_len + db_len + 1..)
    }

    fn ends_transaction(&self) -> bool {
        match self.kind {
            XID_EVENT | XA_PREPARE_LOG_EVENT => true,
            QUERY_EVENT => self.query().is_some_and(|q| {
                let q = String::from_utf8_lossy(q).trim().to_ascii_uppercase();
                q == "COMMIT"
                    || q == "ROLLBACK"
                    || q.starts_with("XA COMMIT")
                    || q.starts_with("XA ROLLBACK")
            }),
            _ => false,
        }
    }
}

/// Reads events off a file's bytes, checking each CRC32 once the format description event
/// said the server writes them.
#[derive(Debug, Default)]
pub struct Framer {
    checksums: bool,
    seen_format: bool,
}

/// Where an event sits in the bytes given to [`Framer::next`].
pub struct Framed<'a> {
    pub event: Event<'a>,
    pub len: usize,
}

impl Framer {
    /// The event starting at `bytes[0]` (at file `offset`), or None when its end is not there
    /// yet (the server is still writing it).
    pub fn next<'a>(
        &mut self,
        bytes: &'a [u8],
        offset: u64,
    ) -> Result<Option<Framed<'a>>, BinlogError> {
        if bytes.len() < HEADER_LEN {
            return Ok(None);
        }
        let bad = |detail: String| BinlogError::BadEvent { offset, detail };
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        let len = u32_at(9) as usize;
        if len < HEADER_LEN {
            return Err(bad(format!("length {len} is shorter than a header")));
        }
        if bytes.len() < len {
            return Ok(None);
        }
        let kind = bytes[4];
        let whole = &bytes[..len];
        if kind == FORMAT_DESCRIPTION_EVENT {
            // Its checksum algorithm byte sits before its own 4-byte checksum.
            let alg = *whole
                .get(len.saturating_sub(5))
                .ok_or_else(|| bad("format description too short".into()))?;
            self.checksums = alg == 1;
            self.seen_format = true;
        } else if !self.seen_format {
            return Err(bad(
                "an event before the format description (not the start of a file)".into(),
            ));
        }
        if kind == START_ENCRYPTION_EVENT {
            return Err(BinlogError::Encrypted);
        }
        let body_end = if self.checksums || kind == FORMAT_DESCRIPTION_EVENT {
            let end = len
                .checked_sub(4)
                .filter(|&e| e >= HEADER_LEN)
                .ok_or_else(|| bad("too short for its checksum".into()))?;
            if self.checksums {
                let recorded = u32::from_le_bytes(whole[end..].try_into().unwrap());
                let computed = if kind == FORMAT_DESCRIPTION_EVENT {
                    // The server sets the "in use" flag of an open file after computing the
                    // checksum (and clears it on close).
                    let mut hasher = crc32fast::Hasher::new();
                    hasher.update(&whole[..17]);
                    hasher.update(&[whole[17] & !LOG_EVENT_BINLOG_IN_USE_F, whole[18]]);
                    hasher.update(&whole[19..end]);
                    hasher.finalize()
                } else {
                    crc32fast::hash(&whole[..end])
                };
                if recorded != computed {
                    return Err(bad(format!(
                        "CRC32 {computed:08x}, the event records {recorded:08x}"
                    )));
                }
            }
            end
        } else {
            len
        };
        Ok(Some(Framed {
            event: Event {
                timestamp: u32_at(0),
                kind,
                server_id: u32_at(5),
                body: &whole[HEADER_LEN..body_end],
            },
            len,
        }))
    }
}

/// Follows transactions through a file's events: whether the last event seen ended one (or
/// was outside any), and the GTID state so far.
#[derive(Debug, Clone, Default)]
pub struct Transactions {
    /// The open transaction's GTID and flags.
    open: Option<(Gtid, u8)>,
    pub state: GtidState,
}

impl Transactions {
    /// Resumes in the middle of a file: `open` is the transaction a previous piece ended in.
    pub fn resuming(state: GtidState, open: Option<(Gtid, u8)>) -> Transactions {
        Transactions { open, state }
    }

    /// The transaction the last event left open.
    pub fn open(&self) -> Option<(Gtid, u8)> {
        self.open
    }

    /// Takes one event; returns the GTID of a transaction it starts.
    pub fn observe(&mut self, event: &Event) -> Option<Gtid> {
        if let Some(list) = event.gtid_list() {
            self.state = list;
            return None;
        }
        if let Some((gtid, flags)) = event.gtid() {
            self.open = Some((gtid, flags));
            self.state.record(gtid);
            return Some(gtid);
        }
        if let Some((_, flags)) = self.open {
            let standalone = flags & FL_STANDALONE != 0 && flags & FL_PREPARED_XA == 0;
            let closes = if standalone {
                matches!(event.kind, QUERY_EVENT | QUERY_COMPRESSED_EVENT | XID_EVENT)
            } else {
                event.ends_transaction()
            };
            if closes {
                self.open = None;
            }
        }
        None
    }

    /// True between transactions: a piece may end here, a replay may stop here.
    pub fn between(&self) -> bool {
        self.open.is_none()
    }
}

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
