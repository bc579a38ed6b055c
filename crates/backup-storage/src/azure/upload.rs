//! A block blob upload of a stream of unknown length with bounded memory.
//!
//! Blocks of the part size are staged with `Put Block` while the next one fills, at most
//! `max_in_flight` at once (the writer waits when that many are in flight), so memory holds
//! `max_in_flight + 1` blocks. Each block carries its Content-MD5, which the service checks
//! before it keeps the block. `Put Block List` then commits exactly this upload's block IDs, in
//! order (they start with a random prefix of this upload's, so two writers of one name never
//! commit each other's blocks), with the precondition, metadata and content type; the blob must
//! then have the size that was sent, or nothing is reported good.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::{Bytes, BytesMut};
use http::Method;
use md5::{Digest, Md5};
use tokio::task::JoinSet;

use super::{AzureStore, SERVICE, metadata_name_written};
use crate::http::encode_query;
use crate::object::{ObjectInfo, Precondition, UploadOptions};
use crate::{Result, StorageError};

/// Azure's limit of blocks per blob.
const MAX_BLOCKS: i32 = 50_000;
/// Azure's limit of one block (4000 MiB).
const MAX_BLOCK_SIZE: usize = 4000 * 1024 * 1024;

pub struct AzureUpload {
    store: AzureStore,
    key: String,
    options: UploadOptions,
    buffer: BytesMut,
    /// This upload's block ID prefix.
    nonce: u64,
    /// Number of the block being filled (1-based).
    next_block: i32,
    in_flight: JoinSet<Result<()>>,
    bytes: u64,
    failed: Option<String>,
}

/// The base64 of the MD5 of `data`, as Content-MD5 carries it.
pub(super) fn content_md5(data: &[u8]) -> String {
    STANDARD.encode(Md5::digest(data))
}

impl AzureUpload {
    pub(super) fn new(store: AzureStore, key: &str, options: UploadOptions) -> Self {
        let first = options.part_sizer.size_of(1);
        AzureUpload {
            store,
            key: key.to_string(),
            options,
            buffer: BytesMut::with_capacity(first),
            nonce: rand::random(),
            next_block: 1,
            in_flight: JoinSet::new(),
            bytes: 0,
            failed: None,
        }
    }

    /// Block IDs are base64 of equal-length strings, as the service requires.
    fn block_id(&self, number: i32) -> String {
        STANDARD.encode(format!("{:016x}-{number:06}", self.nonce))
    }

    pub fn bytes_written(&self) -> u64 {
        self.bytes
    }

    pub async fn write(&mut self, mut data: &[u8]) -> Result<()> {
        self.refuse_if_failed()?;
        while !data.is_empty() {
            let size = self
                .options
                .part_sizer
                .size_of(self.next_block)
                .min(MAX_BLOCK_SIZE);
            let take = (size - self.buffer.len()).min(data.len());
            self.buffer.extend_from_slice(&data[..take]);
            self.bytes += take as u64;
            data = &data[take..];
            if self.buffer.len() == size
                && let Err(e) = self.stage_block().await
            {
                self.fail(&e);
                return Err(e);
            }
        }
        Ok(())
    }

    fn refuse_if_failed(&self) -> Result<()> {
        match &self.failed {
            Some(cause) => Err(StorageError::UploadFailed {
                url: self.store.url(&self.key),
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    fn fail(&mut self, e: &StorageError) {
        self.failed = Some(e.to_string());
        self.in_flight.abort_all();
    }

    /// Sends the buffer as the next block, after waiting for room in the pipeline.
    async fn stage_block(&mut self) -> Result<()> {
        if self.next_block > MAX_BLOCKS {
            return Err(StorageError::TooManyParts {
                part: self.next_block,
            });
        }
        while self.in_flight.len() >= self.options.max_in_flight.max(1) {
            self.join_one().await?;
        }
        let next_size = self
            .options
            .part_sizer
            .size_of(self.next_block + 1)
            .min(MAX_BLOCK_SIZE);
        let block =
            std::mem::replace(&mut self.buffer, BytesMut::with_capacity(next_size)).freeze();
        let url = format!(
            "{}?comp=block&blockid={}",
            self.store.blob_url(&self.key),
            encode_query(&self.block_id(self.next_block))
        );
        self.next_block += 1;
        let (store, key) = (self.store.clone(), self.key.clone());
        self.in_flight.spawn(async move {
            let headers = [("content-md5", content_md5(&block))];
            let reply = store
                .call("put block", Method::PUT, &url, &headers, block)
                .await?;
            if reply.status.is_success() {
                Ok(())
            } else {
                Err(store.classify("put block", &key, &reply))
            }
        });
        Ok(())
    }

    async fn join_one(&mut self) -> Result<()> {
        match self.in_flight.join_next().await {
            Some(joined) => joined.map_err(|e| StorageError::Cloud {
                service: SERVICE,
                operation: "put block",
                url: self.store.url(&self.key),
                message: e.to_string(),
            })?,
            None => Ok(()),
        }
    }

    pub async fn commit(mut self) -> Result<ObjectInfo> {
        self.refuse_if_failed()?;
        match self.finish().await {
            Ok(info) => Ok(info),
            Err(e) => {
                self.fail(&e);
                Err(e)
            }
        }
    }

    async fn finish(&mut self) -> Result<ObjectInfo> {
        if !self.buffer.is_empty() {
            self.stage_block().await?;
        }
        while !self.in_flight.is_empty() {
            self.join_one().await?;
        }
        let mut list = String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>");
        for number in 1..self.next_block {
            list.push_str(&format!("<Latest>{}</Latest>", self.block_id(number)));
        }
        list.push_str("</BlockList>");
        let mut headers = vec![("content-type", "application/xml".to_string())];
        if let Some(content_type) = &self.options.content_type {
            headers.push(("x-ms-blob-content-type", content_type.clone()));
        }
        let meta: Vec<(String, String)> = self
            .options
            .metadata
            .iter()
            .map(|(k, v)| (format!("x-ms-meta-{}", metadata_name_written(k)), v.clone()))
            .collect();
        match &self.options.precondition {
            Some(Precondition::Absent) => headers.push(("if-none-match", "*".into())),
            Some(Precondition::Unchanged(etag)) => headers.push(("if-match", etag.clone())),
            None => {}
        }
        let mut all: Vec<(&str, String)> = headers;
        all.extend(meta.iter().map(|(k, v)| (k.as_str(), v.clone())));
        let url = format!("{}?comp=blocklist", self.store.blob_url(&self.key));
        let reply = self
            .store
            .call("put block list", Method::PUT, &url, &all, Bytes::from(list))
            .await?;
        if !reply.status.is_success() {
            let error = self.store.classify("put block list", &self.key, &reply);
            // A commit whose answer was lost is sent again, and then meets its own blob: the
            // precondition fails although the blob is this upload's. Its committed blocks say
            // so (their IDs carry this upload's prefix).
            if !(matches!(error, StorageError::PreconditionFailed { .. })
                && self.committed_here().await?)
            {
                return Err(error);
            }
        }
        let info = self
            .store
            .head(&self.key)
            .await?
            .ok_or_else(|| StorageError::NotFound {
                url: self.store.url(&self.key),
            })?;
        if info.size != self.bytes {
            // Never left visible: deleted if it is still this version.
            if let Some(etag) = &info.etag {
                let headers = [("if-match", etag.clone())];
                let url = self.store.blob_url(&self.key);
                if let Err(e) = self
                    .store
                    .call("delete blob", Method::DELETE, &url, &headers, Bytes::new())
                    .await
                {
                    tracing::warn!(key = %self.key, error = %e, "could not delete the damaged blob");
                }
            }
            return Err(StorageError::StoredMismatch {
                url: self.store.url(&self.key),
                what: "the size".into(),
                sent: self.bytes.to_string(),
                stored: info.size.to_string(),
            });
        }
        Ok(info)
    }

    /// Whether the blob under the key is made of exactly this upload's blocks.
    async fn committed_here(&self) -> Result<bool> {
        let url = format!(
            "{}?comp=blocklist&blocklisttype=committed",
            self.store.blob_url(&self.key)
        );
        let reply = self
            .store
            .call("get block list", Method::GET, &url, &[], Bytes::new())
            .await?;
        if !reply.status.is_success() {
            return Ok(false);
        }
        let committed = super::list::block_names(&reply.body).unwrap_or_default();
        let ours: Vec<String> = (1..self.next_block).map(|n| self.block_id(n)).collect();
        Ok(!ours.is_empty() && committed == ours)
    }

    /// Nothing staged is visible; the blocks are discarded by Azure (see the module docs).
    pub async fn abort(mut self) -> Result<()> {
        self.in_flight.abort_all();
        Ok(())
    }
}
