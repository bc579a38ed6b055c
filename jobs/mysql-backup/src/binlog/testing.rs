//! Binary log events built as the server writes them, for tests.

use super::*;

/// One event as the server writes it, with a CRC32 when `checksums`.
pub fn event(kind: u8, server_id: u32, timestamp: u32, body: &[u8], checksums: bool) -> Vec<u8> {
    let len = HEADER_LEN + body.len() + if checksums { 4 } else { 0 };
    let mut e = Vec::new();
    e.extend(timestamp.to_le_bytes());
    e.push(kind);
    e.extend(server_id.to_le_bytes());
    e.extend((len as u32).to_le_bytes());
    e.extend(0u32.to_le_bytes());
    e.extend(0u16.to_le_bytes());
    e.extend(body);
    if checksums {
        let crc = crc32fast::hash(&e);
        e.extend(crc.to_le_bytes());
    }
    e
}

pub fn format_description(checksums: bool) -> Vec<u8> {
    let mut body = vec![0u8; 60];
    body.push(u8::from(checksums));
    // The FDE always carries a checksum field after the algorithm byte.
    let mut e = event(FORMAT_DESCRIPTION_EVENT, 7, 100, &body, false);
    let len = e.len() + 4;
    e[9..13].copy_from_slice(&(len as u32).to_le_bytes());
    let crc = crc32fast::hash(&e);
    e.extend(crc.to_le_bytes());
    e
}

pub fn gtid_event(seq: u64, flags: u8) -> Vec<u8> {
    let mut body = seq.to_le_bytes().to_vec();
    body.extend(0u32.to_le_bytes());
    body.push(flags);
    event(GTID_EVENT, 7, 200, &body, true)
}

pub fn query(text: &str) -> Vec<u8> {
    let mut body = vec![0u8; 13];
    body.extend(b"shop\0");
    body[8] = 4;
    body.extend(text.as_bytes());
    event(QUERY_EVENT, 7, 200, &body, true)
}

pub fn xid() -> Vec<u8> {
    event(XID_EVENT, 7, 200, &8u64.to_le_bytes(), true)
}

pub fn gtid_list(entries: &[(u32, u32, u64)]) -> Vec<u8> {
    let mut body = (entries.len() as u32).to_le_bytes().to_vec();
    for (domain, server, seq) in entries {
        body.extend(domain.to_le_bytes());
        body.extend(server.to_le_bytes());
        body.extend(seq.to_le_bytes());
    }
    event(GTID_LIST_EVENT, 7, 1, &body, true)
}

/// A row event of `len` body bytes (its content is not read).
pub fn rows(len: usize) -> Vec<u8> {
    event(30, 7, 200, &vec![0u8; len], true)
}

/// A file: the magic number, a format description with checksums, then `events`.
pub fn file(events: &[Vec<u8>]) -> Vec<u8> {
    let mut bytes = MAGIC.to_vec();
    bytes.extend(format_description(true));
    for e in events {
        bytes.extend(e);
    }
    bytes
}
