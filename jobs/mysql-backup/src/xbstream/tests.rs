use super::*;

/// Encodes one chunk as xtrabackup does (test-side writer, independent of the parser).
fn chunk(kind: u8, path: &str, offset: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.push(0);
    out.push(kind);
    out.extend_from_slice(&(path.len() as u32).to_le_bytes());
    out.extend_from_slice(path.as_bytes());
    if kind == b'E' {
        return out;
    }
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

fn sample_stream() -> Vec<u8> {
    let mut s = Vec::new();
    s.extend(chunk(b'P', "ibdata1", 0, &[1u8; 1000]));
    // Interleaved files, as with --parallel.
    s.extend(chunk(
        b'P',
        "xtrabackup_binlog_info",
        0,
        b"bin.000001\t1079\t0-1-5\n",
    ));
    s.extend(chunk(b'P', "ibdata1", 1000, &[2u8; 500]));
    s.extend(chunk(b'E', "xtrabackup_binlog_info", 0, &[]));
    s.extend(chunk(b'E', "ibdata1", 0, &[]));
    s.extend(chunk(b'P', "db/t.ibd", 0, &[]));
    s.extend(chunk(b'E', "db/t.ibd", 0, &[]));
    s
}

fn parse_in_pieces(data: &[u8], piece: usize) -> Result<StreamSummary, StreamError> {
    let mut p = Parser::new();
    for c in data.chunks(piece) {
        p.feed(c)?;
    }
    p.finish()
}

#[test]
fn parses_interleaved_files_in_any_piece_size() {
    let s = sample_stream();
    for piece in [1, 3, 17, 4096, s.len()] {
        let summary = parse_in_pieces(&s, piece).unwrap();
        assert_eq!(summary.files, 3);
        assert_eq!(summary.payload_bytes, 1500 + 22);
        assert_eq!(summary.stream_bytes, s.len() as u64);
        assert_eq!(
            summary.metadata["xtrabackup_binlog_info"],
            b"bin.000001\t1079\t0-1-5\n"
        );
        assert!(!summary.metadata.contains_key("ibdata1"));
    }
}

#[test]
fn a_flipped_payload_bit_fails_the_crc() {
    let mut s = sample_stream();
    s[60] ^= 0x40;
    let err = parse_in_pieces(&s, 100).unwrap_err();
    assert!(
        matches!(err, StreamError::BadChecksum { ref path, .. } if path == "ibdata1"),
        "{err}"
    );
}

#[test]
fn a_cut_at_a_chunk_boundary_is_detected_by_unfinished_files() {
    let mut s = Vec::new();
    s.extend(chunk(b'P', "ibdata1", 0, &[1u8; 1000]));
    let err = parse_in_pieces(&s, 64).unwrap_err();
    assert!(
        matches!(err, StreamError::UnfinishedFiles { count: 1, .. }),
        "{err}"
    );
}

#[test]
fn a_cut_inside_a_chunk_is_truncation() {
    let s = sample_stream();
    for cut in [5, 20, 40, s.len() - 3] {
        let err = parse_in_pieces(&s[..cut], 7).unwrap_err();
        assert!(
            matches!(err, StreamError::TruncatedChunk { .. }),
            "cut {cut}: {err}"
        );
    }
}

#[test]
fn bad_magic_gaps_and_unsafe_paths_are_refused() {
    let err = parse_in_pieces(b"PK\x03\x04 definitely not xbstream data", 8).unwrap_err();
    assert!(matches!(err, StreamError::BadMagic { offset: 0 }));

    let mut gap = chunk(b'P', "ibdata1", 0, &[1; 10]);
    gap.extend(chunk(b'P', "ibdata1", 20, &[1; 10]));
    let err = parse_in_pieces(&gap, 64).unwrap_err();
    assert!(
        matches!(
            err,
            StreamError::OutOfOrder {
                expected: 10,
                found: 20,
                ..
            }
        ),
        "{err}"
    );

    for bad in ["../etc/passwd", "/etc/passwd", "a//b"] {
        let err = parse_in_pieces(&chunk(b'P', bad, 0, b"x"), 64).unwrap_err();
        assert!(matches!(err, StreamError::BadPath { .. }), "{bad}: {err}");
    }
    assert_eq!(parse_in_pieces(&[], 1).unwrap_err(), StreamError::Empty);
}

#[test]
fn recognises_both_metadata_naming_schemes() {
    assert!(is_metadata_file("xtrabackup_checkpoints"));
    assert!(is_metadata_file("mariadb_backup_binlog_info"));
    assert!(is_metadata_file("backup-my.cnf"));
    assert!(!is_metadata_file("xtrabackup_logfile"));
    assert!(!is_metadata_file("db/xtrabackup_info"));
}

/// The writer above must agree with the real tool: parse what Debian's `mbstream -c` produces.
#[test]
fn accepts_the_output_of_mbstream() {
    if std::process::Command::new("mbstream")
        .arg("--help")
        .output()
        .is_err()
    {
        panic!("mbstream is required (apt-get install mariadb-backup)");
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("xtrabackup_info"),
        b"tool_name = mariadb-backup\n",
    )
    .unwrap();
    let big: Vec<u8> = (0..25_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(dir.path().join("big"), &big).unwrap();
    let out = std::process::Command::new("mbstream")
        .args(["-c", "xtrabackup_info", "big"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let summary = parse_in_pieces(&out.stdout, 1 << 20).unwrap();
    assert_eq!(summary.files, 2);
    assert_eq!(summary.payload_bytes, big.len() as u64 + 27);
    assert_eq!(
        summary.metadata["xtrabackup_info"],
        b"tool_name = mariadb-backup\n"
    );
    // Cut exactly after the first 10 MiB chunk of `big`: mbstream -x would exit 0 here.
    let boundary = find_second_chunk_of(&out.stdout, b"big");
    let err = parse_in_pieces(&out.stdout[..boundary], 1 << 16).unwrap_err();
    assert!(matches!(err, StreamError::UnfinishedFiles { .. }), "{err}");
}

/// Byte offset where the second chunk carrying `path` begins.
fn find_second_chunk_of(stream: &[u8], path: &[u8]) -> usize {
    let mut needle = MAGIC.to_vec();
    needle.extend_from_slice(&[0, b'P']);
    needle.extend_from_slice(&(path.len() as u32).to_le_bytes());
    needle.extend_from_slice(path);
    let hits: Vec<usize> = stream
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle.as_slice())
        .map(|(i, _)| i)
        .collect();
    assert!(hits.len() >= 2, "expected several chunks of the file");
    hits[1]
}

#[test]
fn a_corrupted_sparse_map_count_is_refused_before_anything_is_buffered() {
    let mut sparse = Vec::new();
    sparse.extend_from_slice(MAGIC);
    sparse.push(0);
    sparse.push(b'S');
    sparse.extend_from_slice(&7u32.to_le_bytes());
    sparse.extend_from_slice(b"ibdata1");
    sparse.extend_from_slice(&u32::MAX.to_le_bytes()); // sparse-map entries: 32 GiB of map
    sparse.extend_from_slice(&0u64.to_le_bytes());
    sparse.extend_from_slice(&0u64.to_le_bytes());
    sparse.extend_from_slice(&0u32.to_le_bytes());
    let mut parser = Parser::new();
    let err = parser.feed(&sparse).unwrap_err();
    assert!(
        matches!(err, StreamError::BadSparseMap { entries, offset: 0 } if entries == u32::MAX as usize),
        "{err}"
    );
    assert!(
        parser.header.capacity() < 1 << 20,
        "{}",
        parser.header.capacity()
    );
}
