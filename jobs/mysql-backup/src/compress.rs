//! Streaming zstd: multi-threaded encoding on the way in, bounded-output decoding on the way out
//! (a highly compressible object must not expand into one huge buffer).

use std::io::Write;

use serde::{Deserialize, Serialize};
use zstd::stream::raw::{Decoder as RawDecoder, InBuffer, Operation, OutBuffer};

use crate::{Error, Result};

const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
const DECODE_PIECE: usize = 1 << 20;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    #[default]
    None,
    Zstd,
}

impl Compression {
    /// For objects without a manifest (`--force`).
    pub fn sniff(first_bytes: &[u8]) -> Compression {
        if first_bytes.starts_with(&ZSTD_MAGIC) {
            Compression::Zstd
        } else {
            Compression::None
        }
    }
}

pub enum Encoder {
    Plain,
    Zstd(Box<zstd::stream::write::Encoder<'static, Vec<u8>>>),
}

impl Encoder {
    /// `threads` zstd workers; each buffers about one job (a few MiB at low levels).
    pub fn new(compression: Compression, level: i32, threads: u32) -> Result<Encoder> {
        Ok(match compression {
            Compression::None => Encoder::Plain,
            Compression::Zstd => {
                let err = |e: std::io::Error| Error::Compression(e.to_string());
                let mut enc = zstd::stream::write::Encoder::new(Vec::new(), level).map_err(err)?;
                if threads > 1 {
                    enc.multithread(threads).map_err(err)?;
                }
                Encoder::Zstd(Box::new(enc))
            }
        })
    }

    /// Returns the bytes ready to store (possibly none yet).
    pub fn encode<'a>(&'a mut self, input: &'a [u8]) -> Result<&'a [u8]> {
        match self {
            Encoder::Plain => Ok(input),
            Encoder::Zstd(enc) => {
                enc.get_mut().clear();
                enc.write_all(input)
                    .map_err(|e| Error::Compression(e.to_string()))?;
                Ok(enc.get_ref())
            }
        }
    }

    pub fn finish(self) -> Result<Vec<u8>> {
        match self {
            Encoder::Plain => Ok(Vec::new()),
            Encoder::Zstd(mut enc) => {
                enc.get_mut().clear();
                enc.finish().map_err(|e| Error::Compression(e.to_string()))
            }
        }
    }
}

/// Pull-based: `feed` a stored chunk, then take pieces until `next_piece` returns `None`.
pub struct Decoder {
    zstd: Option<Box<RawDecoder<'static>>>,
    input: bytes::Bytes,
    pos: usize,
    out: Vec<u8>,
    /// False while a frame is open: a truncated object ends with this false.
    frame_done: bool,
}

impl Decoder {
    pub fn new(compression: Compression) -> Result<Decoder> {
        let zstd = match compression {
            Compression::None => None,
            Compression::Zstd => Some(Box::new(
                RawDecoder::new().map_err(|e| Error::Compression(e.to_string()))?,
            )),
        };
        Ok(Decoder {
            zstd,
            input: bytes::Bytes::new(),
            pos: 0,
            out: vec![0; DECODE_PIECE],
            frame_done: true,
        })
    }

    pub fn feed(&mut self, chunk: bytes::Bytes) {
        self.input = chunk;
        self.pos = 0;
    }

    pub fn next_piece(&mut self) -> Result<Option<&[u8]>> {
        let Some(decoder) = self.zstd.as_mut() else {
            if self.pos >= self.input.len() {
                return Ok(None);
            }
            self.pos = self.input.len();
            return Ok(Some(&self.input));
        };
        loop {
            let mut input = InBuffer::around(&self.input[self.pos..]);
            let mut output = OutBuffer::around(self.out.as_mut_slice());
            let hint = decoder
                .run(&mut input, &mut output)
                .map_err(|e| Error::Compression(format!("corrupted zstd data: {e}")))?;
            let produced = output.pos();
            if hint == 0 {
                self.frame_done = true;
            } else if input.pos() > 0 || produced > 0 {
                self.frame_done = false;
            }
            self.pos += input.pos();
            if produced > 0 {
                return Ok(Some(&self.out[..produced]));
            }
            if self.pos >= self.input.len() {
                return Ok(None);
            }
        }
    }

    pub fn finish(&self) -> Result<()> {
        if self.frame_done {
            Ok(())
        } else {
            Err(Error::Compression(
                "the zstd stream ends in the middle of a frame (truncated object)".into(),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(stored: &[u8], chunk: usize) -> Result<Vec<u8>> {
        let mut dec = Decoder::new(Compression::sniff(stored))?;
        let mut out = Vec::new();
        for c in stored.chunks(chunk) {
            dec.feed(bytes::Bytes::copy_from_slice(c));
            while let Some(piece) = dec.next_piece()? {
                assert!(piece.len() <= DECODE_PIECE);
                out.extend_from_slice(piece);
            }
        }
        dec.finish()?;
        Ok(out)
    }

    #[test]
    fn multithreaded_zstd_roundtrips_and_truncation_is_detected() {
        let data: Vec<u8> = (0..9_000_000u32).map(|i| (i / 7 % 13) as u8).collect();
        let mut enc = Encoder::new(Compression::Zstd, 3, 2).unwrap();
        let mut stored = Vec::new();
        for c in data.chunks(1 << 20) {
            stored.extend_from_slice(enc.encode(c).unwrap());
        }
        stored.extend(enc.finish().unwrap());
        assert!(stored.len() < data.len() / 10);
        assert_eq!(decode_all(&stored, 64 * 1024).unwrap(), data);
        let err = decode_all(&stored[..stored.len() - 5], 4096).unwrap_err();
        assert!(err.to_string().contains("truncated"), "{err}");
    }

    #[test]
    fn plain_passes_through() {
        let data = b"XBSTCK01 not compressed";
        assert_eq!(Compression::sniff(data), Compression::None);
        assert_eq!(decode_all(data, 5).unwrap(), data);
    }
}
