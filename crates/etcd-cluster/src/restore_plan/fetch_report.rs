//! Reading what a restore pod printed: `etcd-backup fetch`'s JSON report of the verified
//! snapshot, and the revision the restore tool logs when it bumps it.

use super::recorded::{KeySpace, VerifiedSnapshot};

/// `etcd-backup --output json fetch`'s report (the last JSON line with a stored checksum: a
/// sha256, or an encrypted object's CRC32C; or `replay-point`'s, with the key space it
/// replayed as `contents`), followed by the
/// restore tool's log. The revision is the manifest's; a backup without one (made by coreos or
/// `etcdctl`, uploaded by hand) gets the snapshot's own, as the restore tool logs it.
pub fn parse_verified(output: &str) -> Option<VerifiedSnapshot> {
    let report = output.lines().rev().find_map(|line| {
        let line = line.trim_start();
        let value: serde_json::Value = serde_json::from_str(line).ok()?;
        let replayed = value.pointer("/contents/contentSha256").is_some();
        (value.get("sha256").is_some() || value.get("crc32c").is_some() || replayed)
            .then_some(value)
    })?;
    let key_space = report.get("contents").and_then(|c| {
        Some(KeySpace {
            revision: c["revision"].as_i64()?,
            key_count: c["keyCount"].as_i64()?,
            content_sha256: c["contentSha256"].as_str()?.to_string(),
        })
    });
    Some(VerifiedSnapshot {
        revision: report["revision"]
            .as_i64()
            .or_else(|| revision_restored(output)),
        db_bytes: report["dbBytes"].as_i64(),
        sha256: report["sha256"].as_str().map(str::to_string),
        crc32c: report["crc32c"].as_str().map(str::to_string),
        db_sha256: report["dbSha256"].as_str().map(str::to_string),
        etcd_version: report["etcdVersion"].as_str().map(str::to_string),
        latest_revision: revision_restored(output),
        key_space,
    })
}

/// The snapshot's latest revision as `etcdutl snapshot restore --bump-revision` logs it
/// ("bumping latest revision", `latest-revision`, in its console or JSON log). `None` where the
/// tool does not bump (etcd before 3.4.27 and 3.5.10): then nothing says the revision, and the
/// members are checked only to serve.
fn revision_restored(output: &str) -> Option<i64> {
    output
        .lines()
        .filter(|line| line.contains("bumping latest revision"))
        .find_map(|line| {
            let fields: serde_json::Value = serde_json::from_str(&line[line.find('{')?..]).ok()?;
            fields["latest-revision"].as_i64()
        })
}
