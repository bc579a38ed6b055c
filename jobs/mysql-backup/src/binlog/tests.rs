use super::testing::*;
use super::*;

fn frame_all(bytes: &[u8]) -> Result<Vec<(u8, usize)>, BinlogError> {
    let mut framer = Framer::default();
    let mut at = 0;
    let mut out = Vec::new();
    while let Some(f) = framer.next(&bytes[at..], at as u64)? {
        out.push((f.event.kind, f.len));
        at += f.len;
    }
    Ok(out)
}

#[test]
fn when_an_event_is_not_all_written_yet_then_framing_stops_before_it() {
    let mut bytes = format_description(true);
    bytes.extend(query("BEGIN"));
    let whole = bytes.len();
    bytes.extend(&query("COMMIT")[..10]);
    let framed = frame_all(&bytes).unwrap();
    assert_eq!(framed.len(), 2);
    assert_eq!(framed.iter().map(|f| f.1).sum::<usize>(), whole);
}

#[test]
fn when_a_byte_of_an_event_changed_then_its_crc32_refuses_it() {
    let mut bytes = format_description(true);
    let at = bytes.len();
    bytes.extend(query("COMMIT"));
    bytes[at + 25] ^= 1;
    let err = frame_all(&bytes).unwrap_err();
    assert!(
        matches!(err, BinlogError::BadEvent { offset, .. } if offset == at as u64),
        "{err}"
    );
}

#[test]
fn when_the_server_writes_no_checksums_then_events_frame_without_them() {
    let mut bytes = format_description(false);
    bytes.extend(event(QUERY_EVENT, 7, 1, &[0u8; 20], false));
    assert_eq!(frame_all(&bytes).unwrap().len(), 2);
}

#[test]
fn when_bytes_do_not_start_with_a_format_description_then_they_are_refused() {
    let err = frame_all(&query("COMMIT")).unwrap_err();
    assert!(
        err.to_string().contains("before the format description"),
        "{err}"
    );
}

#[test]
fn when_the_log_is_encrypted_then_it_is_refused_by_name() {
    let mut bytes = format_description(true);
    bytes.extend(event(START_ENCRYPTION_EVENT, 7, 1, &[0u8; 17], true));
    assert_eq!(frame_all(&bytes).unwrap_err(), BinlogError::Encrypted);
}

/// Feeds events to a tracker; returns, per event, whether it was between transactions after.
fn between_after_each(events: &[Vec<u8>]) -> (Vec<bool>, Transactions) {
    let mut bytes = format_description(true);
    for e in events {
        bytes.extend(e);
    }
    let mut framer = Framer::default();
    let mut tx = Transactions::default();
    let mut at = 0;
    let mut out = Vec::new();
    while let Some(f) = framer.next(&bytes[at..], at as u64).unwrap() {
        tx.observe(&f.event);
        if !f.event.is_format_description() {
            out.push(tx.between());
        }
        at += f.len;
    }
    (out, tx)
}

#[test]
fn when_a_transaction_commits_with_an_xid_then_it_ends_there() {
    let xid = event(XID_EVENT, 7, 200, &8u64.to_le_bytes(), true);
    let rows = event(30, 7, 200, &[0u8; 30], true);
    let (between, tx) = between_after_each(&[gtid_event(5, 0), query("BEGIN"), rows, xid]);
    assert_eq!(between, [false, false, false, true]);
    assert!(tx.state.includes("0-7-5".parse().unwrap()));
    assert!(!tx.state.includes("0-7-6".parse().unwrap()));
}

#[test]
fn when_a_non_transactional_table_commits_with_a_query_then_it_ends_there() {
    let (between, _) = between_after_each(&[gtid_event(5, 0), query("BEGIN"), query("COMMIT")]);
    assert_eq!(between, [false, false, true]);
}

#[test]
fn when_a_ddl_is_standalone_then_it_ends_after_its_statement() {
    let (between, _) = between_after_each(&[
        gtid_event(5, FL_STANDALONE),
        query("DROP TABLE `t`"),
        gtid_event(6, 0),
    ]);
    assert_eq!(between, [false, true, false]);
}

#[test]
fn when_a_file_starts_with_a_gtid_list_then_the_state_is_taken_from_it() {
    let mut body = 2u32.to_le_bytes().to_vec();
    for (domain, server, seq) in [(0u32, 7u32, 41u64), (1, 9, 3)] {
        body.extend(domain.to_le_bytes());
        body.extend(server.to_le_bytes());
        body.extend(seq.to_le_bytes());
    }
    let (_, tx) = between_after_each(&[event(GTID_LIST_EVENT, 7, 1, &body, true)]);
    assert_eq!(tx.state.to_string(), "0-7-41,1-9-3");
    assert_eq!(GtidState::parse("1-9-3,0-7-41").unwrap(), tx.state);
    assert_eq!(tx.state.last_seq(0), Some(41));
}

#[test]
fn gtids_parse_and_print_as_the_server_writes_them() {
    let gtid: Gtid = "0-101-42".parse().unwrap();
    assert_eq!((gtid.domain, gtid.server, gtid.seq), (0, 101, 42));
    assert_eq!(gtid.to_string(), "0-101-42");
    assert!("0-101".parse::<Gtid>().is_err());
    assert!("a-1-2".parse::<Gtid>().is_err());
}
