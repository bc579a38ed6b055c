//! Streaming zstd for stored objects, with bounded buffers in both directions: the encoder
//! returns what is ready after each chunk, and the decoder hands out fixed-size pieces, so a
//! highly compressible object does not expand into one huge buffer. Shared by the etcd and
//! MySQL paths so both store (and read) the same format.

use std::io::Write;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use zstd::stream::raw::{Decoder as RawDecoder, InBuffer, Operation, OutBuffer};

/// zstd frames start with these bytes; neither bbolt databases (a meta page) nor xbstream
/// (`XBSTCK01`) do.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
/// Largest piece [`Decoder::advance`] finds.
pub const DECODE_PIECE: usize = 256 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum CompressionError {
    #[error("zstd compression failed: {0}")]
    Compress(#[source] std::io::Error),
    #[error("corrupted zstd data: {0}")]
    Corrupt(String),
    #[error("the zstd stream ends in the middle of a frame (truncated object)")]
    Truncated,
}

impl CompressionError {
    /// True when the stored data is at fault, not this machine.
    pub fn is_integrity(&self) -> bool {
        !matches!(self, CompressionError::Compress(_))
    }
}

type Result<T> = std::result::Result<T, CompressionError>;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    #[default]
    None,
    Zstd,
}

impl Compression {
    pub fn as_str(&self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Zstd => "zstd",
        }
    }

    /// Guess from the first bytes of an object (for objects without a manifest).
    pub fn sniff(first_bytes: &[u8]) -> Compression {
        if first_bytes.starts_with(&ZSTD_MAGIC) {
            Compression::Zstd
        } else {
            Compression::None
        }
    }
}

impl std::str::FromStr for Compression {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "none" => Ok(Compression::None),
            "zstd" => Ok(Compression::Zstd),
            other => Err(format!(
                "unknown compression {other:?} (expected none or zstd)"
            )),
        }
    }
}

/// Compresses chunk by chunk; each call returns the bytes ready to store.
pub enum Encoder {
    Plain,
    Zstd(Box<zstd::stream::write::Encoder<'static, Vec<u8>>>),
}

impl Encoder {
    /// `threads` above 1 starts zstd workers; each buffers about one job (a few MiB at low
    /// levels), so 1 keeps memory smallest.
    pub fn new(compression: Compression, level: i32, threads: u32) -> Result<Encoder> {
        Ok(match compression {
            Compression::None => Encoder::Plain,
            Compression::Zstd => {
                let mut enc = zstd::stream::write::Encoder::new(Vec::new(), level)
                    .map_err(CompressionError::Compress)?;
                if threads > 1 {
                    enc.multithread(threads)
                        .map_err(CompressionError::Compress)?;
                }
                Encoder::Zstd(Box::new(enc))
            }
        })
    }

    /// Feeds `input`; returns output to store (possibly empty), borrowed until the next call.
    pub fn encode<'a>(&'a mut self, input: &'a [u8]) -> Result<&'a [u8]> {
        match self {
            Encoder::Plain => Ok(input),
            Encoder::Zstd(enc) => {
                enc.get_mut().clear();
                enc.write_all(input).map_err(CompressionError::Compress)?;
                Ok(enc.get_ref())
            }
        }
    }

    /// Ends the stream; returns the last bytes to store.
    pub fn finish(self) -> Result<Vec<u8>> {
        match self {
            Encoder::Plain => Ok(Vec::new()),
            Encoder::Zstd(mut enc) => {
                enc.get_mut().clear();
                enc.finish().map_err(CompressionError::Compress)
            }
        }
    }
}

/// Decompresses chunk by chunk into pieces of at most [`DECODE_PIECE`] bytes. Pull-based so the
/// caller can await between pieces: `feed` a chunk, then take pieces with `advance` and `piece`
/// until `advance` returns false.
pub struct Decoder {
    zstd: Option<Box<RawDecoder<'static>>>,
    input: Bytes,
    pos: usize,
    out: Vec<u8>,
    /// Where the piece [`Decoder::advance`] found lies.
    piece: PieceAt,
    /// True when the last zstd frame ended exactly: a truncated stream leaves this false.
    frame_done: bool,
}

#[derive(Clone, Copy)]
enum PieceAt {
    /// The whole input chunk (no compression).
    Input,
    /// The first `n` bytes of `out`.
    Out(usize),
}

impl Decoder {
    pub fn new(compression: Compression) -> Result<Decoder> {
        let zstd = match compression {
            Compression::None => None,
            Compression::Zstd => Some(Box::new(
                RawDecoder::new().map_err(|e| CompressionError::Corrupt(e.to_string()))?,
            )),
        };
        Ok(Decoder {
            zstd,
            input: Bytes::new(),
            pos: 0,
            out: vec![0; DECODE_PIECE],
            piece: PieceAt::Out(0),
            frame_done: true,
        })
    }

    /// Hands over the next stored chunk; call after `advance` returned false.
    pub fn feed(&mut self, chunk: Bytes) {
        debug_assert!(
            self.pos >= self.input.len(),
            "previous chunk not fully decoded"
        );
        self.input = chunk;
        self.pos = 0;
    }

    /// Decodes the next piece, which [`Decoder::piece`] then returns (borrowing the decoder only
    /// shared, so a caller can return it from a loop); false once the chunk is used up.
    pub fn advance(&mut self) -> Result<bool> {
        // Cleared first: after `false` or an error there is no piece.
        self.piece = PieceAt::Out(0);
        let Some(decoder) = self.zstd.as_mut() else {
            if self.pos >= self.input.len() {
                return Ok(false);
            }
            self.pos = self.input.len();
            self.piece = PieceAt::Input;
            return Ok(true);
        };
        // A run may consume input (headers) without output; keep going until there is output
        // or the chunk is used up.
        loop {
            let mut input = InBuffer::around(&self.input[self.pos..]);
            let mut output = OutBuffer::around(self.out.as_mut_slice());
            let hint = decoder
                .run(&mut input, &mut output)
                .map_err(|e| CompressionError::Corrupt(e.to_string()))?;
            let produced = output.pos();
            // zstd answers 0 when a frame is fully decoded and flushed (possibly on a call with
            // no new input). After that, an idle call asks for the next frame's header, which
            // says nothing about the finished frame; any progress starts a new one.
            if hint == 0 {
                self.frame_done = true;
            } else if input.pos() > 0 || produced > 0 {
                self.frame_done = false;
            }
            self.pos += input.pos();
            if produced > 0 {
                self.piece = PieceAt::Out(produced);
                return Ok(true);
            }
            if self.pos >= self.input.len() {
                return Ok(false);
            }
        }
    }

    /// The piece the last [`Decoder::advance`] found; empty after `false` or an error.
    pub fn piece(&self) -> &[u8] {
        match self.piece {
            PieceAt::Input => &self.input,
            PieceAt::Out(n) => &self.out[..n],
        }
    }

    /// After the last chunk: an error if the stream stopped inside a frame.
    pub fn finish(&self) -> Result<()> {
        if self.frame_done {
            Ok(())
        } else {
            Err(CompressionError::Truncated)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode_all(data: &[u8], chunk: usize, threads: u32) -> Vec<u8> {
        let mut enc = Encoder::new(Compression::Zstd, 3, threads).unwrap();
        let mut stored = Vec::new();
        for c in data.chunks(chunk) {
            stored.extend_from_slice(enc.encode(c).unwrap());
        }
        stored.extend(enc.finish().unwrap());
        assert_eq!(Compression::sniff(&stored), Compression::Zstd);
        stored
    }

    fn decode_all(stored: &[u8], chunk: usize) -> Result<Vec<u8>> {
        let mut dec = Decoder::new(Compression::sniff(stored))?;
        let mut out = Vec::new();
        for c in stored.chunks(chunk) {
            dec.feed(Bytes::copy_from_slice(c));
            while dec.advance()? {
                let piece = dec.piece();
                assert!(piece.len() <= DECODE_PIECE);
                out.extend_from_slice(piece);
            }
        }
        dec.finish()?;
        Ok(out)
    }

    #[test]
    fn zstd_roundtrips_compressible_and_random_data() {
        let zeros = vec![0u8; 3 * 1024 * 1024];
        assert_eq!(
            decode_all(&encode_all(&zeros, 32 * 1024, 1), 777).unwrap(),
            zeros
        );
        let noise: Vec<u8> = (0..500_000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        assert_eq!(
            decode_all(&encode_all(&noise, 4096, 1), 777).unwrap(),
            noise
        );
        // The whole object in one chunk: the frame end is seen on a call without new input.
        let stored = encode_all(&noise, noise.len(), 1);
        assert_eq!(decode_all(&stored, stored.len()).unwrap(), noise);
    }

    #[test]
    fn multithreaded_zstd_roundtrips() {
        let data: Vec<u8> = (0..9_000_000u32).map(|i| (i / 7 % 13) as u8).collect();
        let stored = encode_all(&data, 1 << 20, 2);
        assert!(stored.len() < data.len() / 10);
        assert_eq!(decode_all(&stored, 64 * 1024).unwrap(), data);
    }

    #[test]
    fn truncated_or_corrupted_zstd_is_an_integrity_error() {
        let data = vec![7u8; 1 << 20];
        let stored = encode_all(&data, data.len(), 1);
        let err = decode_all(&stored[..stored.len() - 3], 1000).unwrap_err();
        assert!(matches!(err, CompressionError::Truncated), "{err}");
        assert!(err.is_integrity());
        let mut corrupted = stored.clone();
        corrupted[4] ^= 0xff; // the frame header descriptor
        let err = decode_all(&corrupted, 1000).unwrap_err();
        assert!(err.to_string().contains("corrupted zstd data"), "{err}");
        assert_eq!(decode_all(&stored, 1 << 20).unwrap(), data);
    }

    #[test]
    fn plain_data_is_not_sniffed_as_zstd_and_passes_through() {
        for plain in [&[0u8, 0, 0, 0, 0xed, 0xda][..], b"XBSTCK01 not compressed"] {
            assert_eq!(Compression::sniff(plain), Compression::None);
            assert_eq!(decode_all(plain, 4).unwrap(), plain);
        }
    }

    #[test]
    fn names_parse_and_print() {
        for c in [Compression::None, Compression::Zstd] {
            assert_eq!(c.as_str().parse::<Compression>(), Ok(c));
        }
        assert!("gzip".parse::<Compression>().unwrap_err().contains("gzip"));
    }
}
