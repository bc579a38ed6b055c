//! Reads a segment back, event by event, and proves it whole: the end record (count, range,
//! sha256 of the plaintext) and, when the manifest is there, the stored size and checksum
//! and the range it recorded.

use std::collections::VecDeque;

use backup_storage::Store;
use backup_storage::encryption::Identity;
use backup_storage::layers::{Declared, ObjectReader, identity_needed};

use super::record::{Change, RecordDecoder, SegmentEnd};
use super::segment::SegmentManifest;
use crate::{Error, Result};

pub struct SegmentReader {
    url: String,
    reader: ObjectReader,
    decoder: Option<RecordDecoder>,
    pending: VecDeque<Change>,
    manifest: Option<SegmentManifest>,
    /// Set once the end was reached and checked.
    end: Option<(SegmentEnd, String)>,
}

impl SegmentReader {
    /// Opens segment `key`; `manifest` is the one beside it, if any.
    pub async fn open(
        store: &Store,
        key: &str,
        manifest: Option<SegmentManifest>,
        identity: Option<&Identity>,
    ) -> Result<SegmentReader> {
        let url = store.location(key).to_string();
        let download = store.download(key).await?;
        let declared = match &manifest {
            Some(m) => Declared::recorded(
                m.compression,
                m.encryption.as_ref(),
                m.stored_checksum().ok().map(|c| c.kind),
            ),
            None => Declared::default(),
        };
        let reader = ObjectReader::open(download, &declared, identity, &url).await?;
        if !reader.content_readable() {
            return Err(identity_needed(&url, &declared).into());
        }
        Ok(SegmentReader {
            url,
            reader,
            decoder: Some(RecordDecoder::new()),
            pending: VecDeque::new(),
            manifest,
            end: None,
        })
    }

    /// The next event, or `None` once the whole segment was read and checked.
    pub async fn next(&mut self) -> Result<Option<Change>> {
        loop {
            if let Some(change) = self.pending.pop_front() {
                return Ok(Some(change));
            }
            let Some(decoder) = self.decoder.as_mut() else {
                return Ok(None);
            };
            if self.reader.advance().await? {
                let pending = &mut self.pending;
                decoder
                    .feed(self.reader.piece(), &mut |c| pending.push_back(c))
                    .map_err(|e| self.bad(e.to_string()))?;
                continue;
            }
            let decoder = self.decoder.take().expect("checked above");
            let end = decoder.finish().map_err(|e| self.bad(e.to_string()))?;
            self.check_manifest(&end)?;
            self.end = Some(end);
        }
    }

    /// What the end record proved and the plaintext's sha256, once [`SegmentReader::next`]
    /// returned `None`.
    pub fn end(&self) -> Option<&(SegmentEnd, String)> {
        self.end.as_ref()
    }

    /// The stored bytes' checksum when they differ from the plaintext (compressed or
    /// encrypted); else the plaintext's sha256 is theirs.
    pub fn stored_checksum(&self) -> Option<backup_storage::stored_checksum::StoredChecksum> {
        self.reader.stored_checksum()
    }

    pub fn compression(&self) -> crate::Compression {
        self.reader
            .compression()
            .unwrap_or(crate::Compression::None)
    }

    pub fn encrypted(&self) -> bool {
        self.reader.encrypted()
    }

    fn check_manifest(&self, (end, sha256): &(SegmentEnd, String)) -> Result<()> {
        let Some(m) = &self.manifest else {
            return Ok(());
        };
        let mut differences = Vec::new();
        let mut compare = |what: &str, recorded: String, found: String| {
            if recorded != found {
                differences.push(format!("{what}: manifest {recorded}, segment {found}"));
            }
        };
        compare(
            "first revision",
            m.first_revision.to_string(),
            end.first_revision.to_string(),
        );
        compare(
            "last revision",
            m.last_revision.to_string(),
            end.last_revision.to_string(),
        );
        compare("events", m.events.to_string(), end.events.to_string());
        compare(
            "plaintext sha256",
            m.plaintext_sha256.clone(),
            sha256.clone(),
        );
        compare(
            "stored bytes",
            m.stored_bytes.to_string(),
            self.reader.stored_bytes().to_string(),
        );
        let stored = self.reader.stored_checksum().map(|c| c.hex);
        if let (Ok(recorded), Some(found)) = (m.stored_checksum(), stored) {
            compare("stored checksum", recorded.hex, found);
        }
        if differences.is_empty() {
            Ok(())
        } else {
            Err(self.bad(differences.join("; ")))
        }
    }

    fn bad(&self, message: String) -> Error {
        Error::BadSegment {
            url: self.url.clone(),
            message,
        }
    }
}
