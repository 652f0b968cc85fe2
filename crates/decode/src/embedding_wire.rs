//! The self-describing value format of embeddings in the fleet tiers (disk, shared cache).
//!
//! The tiers store bytes under keys and know nothing of tensors; this module encodes an
//! [`Embedding`] into such bytes and checks them on the way back. A value read from a tier is
//! input from other processes, some possibly hostile: it is size-capped, parsed with checked
//! arithmetic, bound to the key and model it was read for, and verified by checksum before
//! any of it is used.
//!
//! Value, format version 1 (integers little-endian):
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 4 | magic `MMCE` |
//! | 4 | 2 | format version (1) |
//! | 6 | 1 | dtype (1 f32, 2 f16, 3 bf16) |
//! | 7 | 1 | dimensions `n` (at most [`MAX_DIMS`]) |
//! | 8 | 32 | the embedding key it is the value of |
//! | 40 | 2 | model id length `m` |
//! | 42 | 4 | metadata length (`u32::MAX`: none) |
//! | 46 | 8 | tensor byte length |
//! | 54 | 8 × n | shape |
//! | … | m | model id (UTF-8) |
//! | … | … | metadata |
//! | … | 0–7 | zero padding, so the tensor starts at a multiple of 8 |
//! | … | … | tensor bytes |
//! | end − 32 | 32 | blake3 of everything before |
//!
//! A large value is stored in chunks under keys of their own; its [`Manifest`] (format below)
//! names the chunk count and size, a random generation (chunk keys carry it, so chunks of an
//! older write never mix with a newer manifest) and the value's checksum.

use bytes::Bytes;
use mmcache_scope::EmbeddingKey;

use crate::embedding::{DType, Embedding, MAX_EMBEDDING_METADATA_BYTES, TensorError};

/// Current format version of values and manifests.
pub const EMBEDDING_FORMAT_VERSION: u16 = 1;
/// Most dimensions a stored tensor may have.
pub const MAX_DIMS: usize = 8;
/// Default cap on an encoded embedding value: 64 MiB (`MMCACHE_EMBEDDING_MAX_VALUE_BYTES`).
pub const DEFAULT_EMBEDDING_MAX_VALUE_BYTES: u64 = 64 << 20;
/// Default size over which a value is stored in chunks, and the chunk size: 256 KiB
/// (`MMCACHE_EMBEDDING_CHUNK_BYTES`).
pub const DEFAULT_EMBEDDING_CHUNK_BYTES: u64 = 256 << 10;
/// The most chunks one value may have. A manifest naming more is refused before any chunk is
/// read, so a forged one (say 64 MiB in 1-byte chunks) cannot make a reader start millions of
/// GETs; the loader refuses a chunk size that would need more for its value cap.
pub const MAX_EMBEDDING_CHUNKS: u32 = 1024;
/// Bytes of an encoded [`Manifest`].
pub const MANIFEST_BYTES: usize = 128;

const MAGIC: &[u8; 4] = b"MMCE";
const MANIFEST_MAGIC: &[u8; 4] = b"MMCC";
const FIXED: usize = 54;
pub(crate) const SUM: usize = 32;
const NO_METADATA: u32 = u32::MAX;

/// Why stored bytes are not a usable value (or an embedding cannot be encoded).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// Shorter than its header or fields say.
    #[error("embedding value truncated: {len} bytes, {needed} needed")]
    Truncated {
        /// Bytes present.
        len: usize,
        /// Bytes the header needs.
        needed: usize,
    },
    /// Not a value of ours (magic), or a format version this build does not read.
    #[error("not an mmcache embedding value (magic or version {version})")]
    Foreign {
        /// The version field, when the magic matched (0 otherwise: no build writes version 0).
        version: u16,
    },
    /// Bytes that do not check out: checksum, dtype, dimensions, lengths, padding.
    #[error("embedding value corrupt: {what}")]
    Corrupt {
        /// What did not check out.
        what: &'static str,
    },
    /// A valid value of another key, or of another model id.
    #[error("embedding value belongs to another {what}")]
    OtherKey {
        /// `key` or `model`.
        what: &'static str,
    },
    /// Over the size cap.
    #[error("embedding value of {len} bytes is over the {max}-byte cap")]
    Oversized {
        /// Its length (or the length it claims).
        len: u64,
        /// The cap.
        max: u64,
    },
    /// The embedding cannot be encoded (too many dimensions, a model id over 64 KiB).
    #[error("embedding cannot be stored: {what}")]
    Unencodable {
        /// Why.
        what: &'static str,
    },
    /// The tensor the value describes is not a valid embedding.
    #[error(transparent)]
    Tensor(#[from] TensorError),
}

mmcache_metrics::label_values! {
    /// What kind of [`WireError`] a value met: the `reason` label of the embedding metrics.
    pub enum WireErrorKind: "reason" {
        Truncated = "truncated",
        Foreign = "foreign",
        Corrupt = "corrupt",
        OtherKey = "other_key",
        Oversized = "oversized",
        Unencodable = "unencodable",
    }
}

impl WireError {
    /// The error's kind, a metric label.
    pub fn label(&self) -> WireErrorKind {
        match self {
            Self::Truncated { .. } => WireErrorKind::Truncated,
            Self::Foreign { .. } => WireErrorKind::Foreign,
            Self::Corrupt { .. } | Self::Tensor(_) => WireErrorKind::Corrupt,
            Self::OtherKey { .. } => WireErrorKind::OtherKey,
            Self::Oversized { .. } => WireErrorKind::Oversized,
            Self::Unencodable { .. } => WireErrorKind::Unencodable,
        }
    }

    /// Whether the value may be good for another reader: over this reader's cap, or ours in a
    /// format version this build does not read (a newer build's, during a rolling upgrade).
    /// Such a value is a miss that deletes nothing; every other error is bad for every reader.
    pub fn may_suit_others(&self) -> bool {
        matches!(self, Self::Oversized { .. })
            || matches!(self, Self::Foreign { version } if *version != 0)
    }

    /// A short label for metrics: `truncated`, `foreign`, `corrupt`, `other_key`,
    /// `oversized`, `unencodable`.
    pub fn kind(&self) -> &'static str {
        self.label().as_str()
    }
}

fn dtype_code(d: DType) -> u8 {
    match d {
        DType::F32 => 1,
        DType::F16 => 2,
        DType::BF16 => 3,
    }
}

fn dtype_of(code: u8) -> Option<DType> {
    match code {
        1 => Some(DType::F32),
        2 => Some(DType::F16),
        3 => Some(DType::BF16),
        _ => None,
    }
}

/// A zeroed buffer aligned to 8 bytes, to assemble a value into (from chunks, or one read)
/// so that its tensor can be used in place, with no copy beyond the assembly.
#[derive(Debug)]
pub struct ValueBuf {
    words: Vec<u64>,
    len: usize,
}

impl AsRef<[u8]> for ValueBuf {
    fn as_ref(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.len]
    }
}

impl ValueBuf {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> Self {
        Self {
            words: vec![0; len.div_ceil(8)],
            len,
        }
    }

    /// The bytes, to write into.
    pub fn as_mut_bytes(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.words)[..self.len]
    }

    /// The finished buffer, shared.
    pub fn freeze(self) -> Bytes {
        Bytes::from_owner(self)
    }
}

/// The length of [`encode_value`]'s output for `embedding` under `model`, known before the
/// value is made (a writer reserves it first).
///
/// # Errors
///
/// [`encode_value`]'s: the embedding cannot be encoded.
pub fn encoded_len(model: &str, embedding: &Embedding) -> Result<usize, WireError> {
    let dims = embedding.shape().len();
    if dims > MAX_DIMS {
        return Err(WireError::Unencodable {
            what: "too many dimensions",
        });
    }
    if u16::try_from(model.len()).is_err() {
        return Err(WireError::Unencodable {
            what: "model id over 65535 bytes",
        });
    }
    let head = FIXED + 8 * dims + model.len() + embedding.metadata().map_or(0, Bytes::len);
    Ok(head.next_multiple_of(8) + embedding.bytes().len() + SUM)
}

/// Encodes `embedding` as the value of `key` under `model`.
///
/// # Errors
///
/// [`WireError::Unencodable`] for more than [`MAX_DIMS`] dimensions or a model id over
/// 65535 bytes.
pub fn encode_value(
    key: &EmbeddingKey,
    model: &str,
    embedding: &Embedding,
) -> Result<Vec<u8>, WireError> {
    let len = encoded_len(model, embedding)?;
    let shape = embedding.shape();
    let meta = embedding.metadata();
    let data = embedding.bytes();
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&EMBEDDING_FORMAT_VERSION.to_le_bytes());
    out.push(dtype_code(embedding.dtype()));
    out.push(shape.len() as u8); // <= MAX_DIMS, checked above
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(&(model.len() as u16).to_le_bytes()); // checked above
    let meta_len = meta.map_or(NO_METADATA, |m| m.len() as u32); // <= 64 KiB, checked at build
    out.extend_from_slice(&meta_len.to_le_bytes());
    out.extend_from_slice(&(data.len() as u64).to_le_bytes());
    for &d in shape {
        out.extend_from_slice(&(d as u64).to_le_bytes());
    }
    out.extend_from_slice(model.as_bytes());
    if let Some(m) = meta {
        out.extend_from_slice(m);
    }
    out.resize(len - data.len() - SUM, 0); // the padding
    push_tensor(&mut out, embedding);
    let sum = blake3::hash(&out);
    out.extend_from_slice(sum.as_bytes());
    debug_assert_eq!(out.len(), len);
    Ok(out)
}

/// The tensor's bytes, little-endian whatever the host.
fn push_tensor(out: &mut Vec<u8>, embedding: &Embedding) {
    if cfg!(target_endian = "little") {
        out.extend_from_slice(embedding.bytes());
    } else if let Some(v) = embedding.as_f32() {
        v.iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
    } else if let Some(v) = embedding.as_u16_bits() {
        v.iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
    }
}

/// A bounds-checked reader over a value's bytes.
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or(WireError::Truncated {
            len: self.buf.len(),
            needed: self.at.saturating_add(n),
        })?;
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().unwrap_or([0; 2]),
        ))
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().unwrap_or([0; 4]),
        ))
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().unwrap_or([0; 8]),
        ))
    }
}

/// Decodes and verifies the value read for `key` under `model`. The tensor is used in place
/// when `value` is aligned (a [`ValueBuf`], or an aligned read), else copied once.
///
/// # Errors
///
/// [`WireError`]: over `max_bytes`, truncated, foreign, corrupt, or another key's or model's.
pub fn decode_value(
    value: &Bytes,
    key: &EmbeddingKey,
    model: &str,
    max_bytes: u64,
) -> Result<Embedding, WireError> {
    decode_summed(value, key, model, max_bytes, None)
}

/// [`decode_value`], given (when `Some`) blake3 of everything before the trailing checksum,
/// as a reader that hashed the bytes while they arrived has it: the checksum is compared,
/// not computed again.
pub(crate) fn decode_summed(
    value: &Bytes,
    key: &EmbeddingKey,
    model: &str,
    max_bytes: u64,
    body_sum: Option<blake3::Hash>,
) -> Result<Embedding, WireError> {
    if value.len() as u64 > max_bytes {
        return Err(WireError::Oversized {
            len: value.len() as u64,
            max: max_bytes,
        });
    }
    let mut r = Reader { buf: value, at: 0 };
    let magic = r.take(4)?;
    let version = r.u16()?;
    if magic != MAGIC || version != EMBEDDING_FORMAT_VERSION {
        let version = if magic == MAGIC { version } else { 0 };
        return Err(WireError::Foreign { version });
    }
    // The checksum first: nothing below is trusted before it holds.
    if value.len() < FIXED + SUM {
        return Err(WireError::Truncated {
            len: value.len(),
            needed: FIXED + SUM,
        });
    }
    let body = value.len() - SUM;
    let sum = body_sum.unwrap_or_else(|| blake3::hash(&value[..body]));
    if sum.as_bytes() != &value[body..] {
        return Err(WireError::Corrupt { what: "checksum" });
    }
    let dtype = dtype_of(r.take(1)?[0]).ok_or(WireError::Corrupt { what: "dtype" })?;
    let dims = usize::from(r.take(1)?[0]);
    if dims > MAX_DIMS {
        return Err(WireError::Corrupt { what: "dimensions" });
    }
    if r.take(32)? != key.as_bytes() {
        return Err(WireError::OtherKey { what: "key" });
    }
    let model_len = usize::from(r.u16()?);
    let meta_len = r.u32()?;
    let data_len = r.u64()?;
    let mut shape = Vec::with_capacity(dims);
    for _ in 0..dims {
        let d = usize::try_from(r.u64()?).map_err(|_| WireError::Corrupt { what: "shape" })?;
        shape.push(d);
    }
    if r.take(model_len)? != model.as_bytes() {
        return Err(WireError::OtherKey { what: "model" });
    }
    let metadata = match meta_len {
        NO_METADATA => None,
        n if n as usize > MAX_EMBEDDING_METADATA_BYTES => {
            return Err(WireError::Corrupt { what: "metadata" });
        }
        n => {
            let start = r.at;
            r.take(n as usize)?;
            Some(value.slice(start..r.at))
        }
    };
    let pad = r.at.next_multiple_of(8) - r.at;
    if r.take(pad)?.iter().any(|&b| b != 0) {
        return Err(WireError::Corrupt { what: "padding" });
    }
    let data_len = usize::try_from(data_len).map_err(|_| WireError::Corrupt { what: "length" })?;
    if r.at.checked_add(data_len) != Some(body) {
        return Err(WireError::Corrupt { what: "length" });
    }
    let data = value.slice(r.at..body);
    let embedding = if cfg!(target_endian = "little")
        && (data.as_ptr() as usize).is_multiple_of(dtype.element_size())
    {
        Embedding::from_aligned(dtype, shape, data)?
    } else {
        Embedding::from_bytes(dtype, shape, &data)?
    };
    match metadata {
        Some(m) => Ok(embedding.with_metadata(m)?),
        None => Ok(embedding),
    }
}

/// What names a chunked value: its size, chunking, generation and checksum.
///
/// Encoding (128 bytes, little-endian): magic `MMCC`, version u16, 2 zero bytes, the
/// embedding key (32), total length u64, chunk size u32, chunk count u32, generation u64, the
/// value's trailing checksum (32), blake3 of the 96 bytes before (32).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Manifest {
    /// Bytes of the whole value.
    pub total_len: u64,
    /// Bytes of every chunk but the last.
    pub chunk_bytes: u32,
    /// Chunks: `total_len / chunk_bytes`, rounded up.
    pub count: u32,
    /// Random, set by the writer: chunk keys carry it.
    pub generation: u64,
    /// The value's own trailing checksum.
    pub value_sum: [u8; 32],
}

impl Manifest {
    /// The manifest of `value` (an [`encode_value`] output) cut into `chunk_bytes` pieces.
    ///
    /// # Errors
    ///
    /// [`WireError::Unencodable`] for a chunk size of 0 or over 4 GiB, or more than
    /// `u32::MAX` chunks; [`WireError::Truncated`] for a value shorter than its checksum.
    pub fn of(value: &[u8], chunk_bytes: u64, generation: u64) -> Result<Self, WireError> {
        let chunk = u32::try_from(chunk_bytes)
            .ok()
            .filter(|&c| c > 0)
            .ok_or(WireError::Unencodable { what: "chunk size" })?;
        let count = u32::try_from(value.len().div_ceil(chunk as usize)).map_err(|_| {
            WireError::Unencodable {
                what: "chunk count",
            }
        })?;
        let at = value.len().checked_sub(SUM).ok_or(WireError::Truncated {
            len: value.len(),
            needed: SUM,
        })?;
        let mut value_sum = [0; 32];
        value_sum.copy_from_slice(&value[at..]);
        Ok(Self {
            total_len: value.len() as u64,
            chunk_bytes: chunk,
            count,
            generation,
            value_sum,
        })
    }

    /// The byte range of chunk `i` within the value.
    pub fn chunk_range(&self, i: u32) -> std::ops::Range<usize> {
        let start = i as usize * self.chunk_bytes as usize;
        let end = (start + self.chunk_bytes as usize).min(self.total_len as usize);
        start..end
    }

    /// The manifest's bytes, for `key`.
    pub fn encode(&self, key: &EmbeddingKey) -> [u8; MANIFEST_BYTES] {
        let mut out = [0u8; MANIFEST_BYTES];
        out[..4].copy_from_slice(MANIFEST_MAGIC);
        out[4..6].copy_from_slice(&EMBEDDING_FORMAT_VERSION.to_le_bytes());
        out[8..40].copy_from_slice(key.as_bytes());
        out[40..48].copy_from_slice(&self.total_len.to_le_bytes());
        out[48..52].copy_from_slice(&self.chunk_bytes.to_le_bytes());
        out[52..56].copy_from_slice(&self.count.to_le_bytes());
        out[56..64].copy_from_slice(&self.generation.to_le_bytes());
        out[64..96].copy_from_slice(&self.value_sum);
        let sum = blake3::hash(&out[..96]);
        out[96..].copy_from_slice(sum.as_bytes());
        out
    }

    /// Whether `bytes` start like a manifest (rather than a value).
    pub fn looks_like(bytes: &[u8]) -> bool {
        bytes.starts_with(MANIFEST_MAGIC)
    }

    /// Decodes and checks a manifest read for `key`; its total length must be within
    /// `max_bytes` and its chunk size within `max_chunk_bytes`.
    ///
    /// # Errors
    ///
    /// [`WireError`] as for values.
    pub fn decode(
        bytes: &[u8],
        key: &EmbeddingKey,
        max_bytes: u64,
        max_chunk_bytes: u64,
    ) -> Result<Self, WireError> {
        // Magic and version first: a newer build's manifest may have another length.
        if bytes.len() >= 6 && bytes.starts_with(MANIFEST_MAGIC) {
            let version = u16::from_le_bytes([bytes[4], bytes[5]]);
            if version != EMBEDDING_FORMAT_VERSION {
                return Err(WireError::Foreign { version });
            }
        }
        if bytes.len() != MANIFEST_BYTES {
            return Err(if bytes.len() < MANIFEST_BYTES {
                WireError::Truncated {
                    len: bytes.len(),
                    needed: MANIFEST_BYTES,
                }
            } else {
                WireError::Corrupt {
                    what: "manifest length",
                }
            });
        }
        let u = |r: std::ops::Range<usize>| {
            let mut b = [0u8; 8];
            b[..r.len()].copy_from_slice(&bytes[r]);
            u64::from_le_bytes(b)
        };
        if &bytes[..4] != MANIFEST_MAGIC {
            return Err(WireError::Foreign { version: 0 });
        }
        if blake3::hash(&bytes[..96]).as_bytes() != &bytes[96..] {
            return Err(WireError::Corrupt { what: "checksum" });
        }
        if &bytes[8..40] != key.as_bytes() {
            return Err(WireError::OtherKey { what: "key" });
        }
        let mut value_sum = [0; 32];
        value_sum.copy_from_slice(&bytes[64..96]);
        let m = Self {
            total_len: u(40..48),
            chunk_bytes: u(48..52) as u32,
            count: u(52..56) as u32,
            generation: u(56..64),
            value_sum,
        };
        if m.total_len > max_bytes {
            return Err(WireError::Oversized {
                len: m.total_len,
                max: max_bytes,
            });
        }
        let expected = m.total_len.div_ceil(u64::from(m.chunk_bytes.max(1)));
        if m.chunk_bytes == 0
            || u64::from(m.chunk_bytes) > max_chunk_bytes
            || u64::from(m.count) != expected
            || m.count > MAX_EMBEDDING_CHUNKS
            || m.total_len < (FIXED + SUM) as u64
        {
            return Err(WireError::Corrupt { what: "manifest" });
        }
        Ok(m)
    }
}

#[cfg(test)]
#[path = "embedding_wire_tests.rs"]
mod tests;
