//! A chunked embedding value put back together as its chunks arrive, and a value read whole
//! moved into an aligned buffer of its own ([`decode_copied`]).
//!
//! Each chunk is copied into its place in one 8-byte-aligned buffer (the tensor is then used
//! there, no further copy), and the checksum runs over every chunk as soon as the chunks
//! before it are in. The value is verified when its last chunk lands, with no pass over the
//! whole value at the end: that pass (a 9 MB copy and blake3, milliseconds of one core) was
//! what a reader cost the image loads running beside it.

use bytes::Bytes;
use mmcache_scope::EmbeddingKey;

use crate::embedding::Embedding;
use crate::embedding_wire::{
    MAX_EMBEDDING_CHUNKS, Manifest, SUM, ValueBuf, WireError, decode_summed,
};

/// The value of one [`Manifest`], chunk by chunk, in any order.
///
/// ```
/// use mmcache_decode::{Assembly, Embedding, Manifest, encode_value};
/// use mmcache_scope::{EmbeddingKey, EmbeddingKeyInput};
///
/// let key = EmbeddingKey::unscoped(&EmbeddingKeyInput::caller("img-1"), "model");
/// let e = Embedding::from_f32(vec![256, 4], vec![0.5; 1024]).unwrap();
/// let value = encode_value(&key, "model", &e).unwrap();
/// let m = Manifest::of(&value, 1024, 1).unwrap();
/// let mut a = Assembly::new(m).unwrap();
/// for i in (0..m.count).rev() {
///     a.put(i, &value[m.chunk_range(i)]).unwrap();
/// }
/// let back = a.finish(&key, "model", 1 << 20).unwrap();
/// assert_eq!(back.bytes(), e.bytes());
/// ```
pub struct Assembly {
    m: Manifest,
    buf: ValueBuf,
    hasher: blake3::Hasher,
    landed: Vec<bool>,
    /// Chunks `0..hashed` are in the checksum.
    hashed: u32,
}

impl std::fmt::Debug for Assembly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Assembly")
            .field("manifest", &self.m)
            .field("landed", &self.landed.iter().filter(|&&l| l).count())
            .field("hashed", &self.hashed)
            .finish_non_exhaustive()
    }
}

impl Assembly {
    /// An empty assembly of `m`'s value (its buffer allocated, zeroed; the pages are
    /// touched as chunks land).
    ///
    /// # Errors
    ///
    /// [`WireError::Corrupt`] for a manifest whose chunk count is not its length over its
    /// chunk size, or over [`MAX_EMBEDDING_CHUNKS`] chunks (`Manifest::decode` refuses
    /// those; its fields are public, so this checks again).
    pub fn new(m: Manifest) -> Result<Self, WireError> {
        let chunk = u64::from(m.chunk_bytes);
        if chunk == 0
            || m.count > MAX_EMBEDDING_CHUNKS
            || m.total_len.div_ceil(chunk.max(1)) != u64::from(m.count)
        {
            return Err(WireError::Corrupt { what: "manifest" });
        }
        let len =
            usize::try_from(m.total_len).map_err(|_| WireError::Corrupt { what: "manifest" })?;
        Ok(Self {
            buf: ValueBuf::zeroed(len),
            hasher: blake3::Hasher::new(),
            landed: vec![false; m.count as usize],
            hashed: 0,
            m,
        })
    }

    /// Copies chunk `i` into its place, then hashes every chunk the checksum can take now.
    ///
    /// # Errors
    ///
    /// [`WireError::Truncated`] for a chunk of another length than the manifest says;
    /// [`WireError::Corrupt`] for an index past the last chunk or a chunk put twice.
    pub fn put(&mut self, i: u32, chunk: &[u8]) -> Result<(), WireError> {
        let range = self.m.chunk_range(i);
        match self.landed.get(i as usize) {
            None | Some(true) => {
                return Err(WireError::Corrupt {
                    what: "chunk index",
                });
            }
            Some(false) if chunk.len() != range.len() => {
                return Err(WireError::Truncated {
                    len: chunk.len(),
                    needed: range.len(),
                });
            }
            Some(false) => {}
        }
        self.buf.as_mut_bytes()[range].copy_from_slice(chunk);
        self.landed[i as usize] = true;
        // The checksum covers everything but itself (the value's last SUM bytes).
        let body = (self.m.total_len as usize).saturating_sub(SUM);
        while self.landed.get(self.hashed as usize) == Some(&true) {
            let r = self.m.chunk_range(self.hashed);
            let r = r.start.min(body)..r.end.min(body);
            self.hasher.update(&self.buf.as_ref()[r]);
            self.hashed += 1;
        }
        Ok(())
    }

    /// Whether every chunk is in.
    pub fn is_complete(&self) -> bool {
        self.hashed == self.m.count
    }

    /// The embedding, once every chunk is in and the value checks out as [`decode_value`]
    /// checks one read whole.
    ///
    /// # Errors
    ///
    /// [`WireError::Truncated`] while chunks are missing; [`WireError::Corrupt`] for chunks
    /// of another write (the value's checksum is not the manifest's); else
    /// [`decode_value`]'s errors.
    ///
    /// [`decode_value`]: crate::decode_value
    pub fn finish(
        self,
        key: &EmbeddingKey,
        model: &str,
        max_bytes: u64,
    ) -> Result<Embedding, WireError> {
        self.finish_value(key, model, max_bytes).map(|(e, _)| e)
    }

    /// [`Assembly::finish`], with the whole value beside the embedding (which is used in it):
    /// the checked bytes, for a write to another tier without encoding them again.
    ///
    /// # Errors
    ///
    /// As [`Assembly::finish`].
    pub fn finish_value(
        self,
        key: &EmbeddingKey,
        model: &str,
        max_bytes: u64,
    ) -> Result<(Embedding, Bytes), WireError> {
        if !self.is_complete() {
            let range = self.m.chunk_range(self.hashed);
            return Err(WireError::Truncated {
                len: range.start,
                needed: self.m.total_len as usize,
            });
        }
        let value: Bytes = self.buf.freeze();
        if value.len() < SUM || value[value.len() - SUM..] != self.m.value_sum {
            return Err(WireError::Corrupt {
                what: "chunk of another write",
            });
        }
        let e = decode_summed(&value, key, model, max_bytes, Some(self.hasher.finalize()))?;
        Ok((e, value))
    }
}

/// Decodes a value read whole (a disk entry, one shared-cache read) in a copy of its own, in an
/// aligned buffer: the embedding is used there, so the read's buffer (and the read
/// reservation it holds) can go as soon as this returns, and the checked value comes back
/// beside the embedding, for a write to another tier without encoding it again. One copy and
/// one checksum pass: run it off the async threads for a large value.
///
/// # Errors
///
/// [`decode_value`](crate::decode_value)'s; an oversized value is refused before the copy.
pub fn decode_copied(
    value: &[u8],
    key: &EmbeddingKey,
    model: &str,
    max_bytes: u64,
) -> Result<(Embedding, Bytes), WireError> {
    if value.len() as u64 > max_bytes {
        return Err(WireError::Oversized {
            len: value.len() as u64,
            max: max_bytes,
        });
    }
    let mut buf = ValueBuf::zeroed(value.len());
    buf.as_mut_bytes().copy_from_slice(value);
    let value = buf.freeze();
    let e = decode_summed(&value, key, model, max_bytes, None)?;
    Ok((e, value))
}

#[cfg(test)]
mod tests {
    use mmcache_scope::EmbeddingKeyInput;

    use super::*;
    use crate::embedding_wire::{decode_value, encode_value};

    fn value() -> (EmbeddingKey, Bytes) {
        let key = EmbeddingKey::unscoped(&EmbeddingKeyInput::caller("a"), "m");
        let e = Embedding::from_f32(vec![300, 7], (0..2100).map(|i| i as f32).collect())
            .expect("shape matches");
        (key, encode_value(&key, "m", &e).expect("encodable").into())
    }

    fn assemble(m: Manifest, value: &[u8], order: impl Iterator<Item = u32>) -> Assembly {
        let mut a = Assembly::new(m).expect("a valid manifest");
        for i in order {
            a.put(i, &value[m.chunk_range(i)])
                .expect("a chunk of the value");
        }
        a
    }

    #[test]
    fn any_order_gives_the_value_read_whole() {
        let (key, value) = value();
        let whole = decode_value(&value, &key, "m", 1 << 20).expect("valid");
        // The last chunk 10 bytes long: the checksum straddles two chunks.
        for chunk in [1000, 4096, value.len() as u64 - 10, value.len() as u64] {
            let m = Manifest::of(&value, chunk, 3).expect("chunkable");
            let n = m.count;
            let orders: [Vec<u32>; 3] = [
                (0..n).collect(),
                (0..n).rev().collect(),
                (0..n).step_by(2).chain((1..n).step_by(2)).collect(),
            ];
            for order in orders {
                let a = assemble(m, &value, order.into_iter());
                assert!(a.is_complete());
                let got = a.finish(&key, "m", 1 << 20).expect("valid");
                assert_eq!(got.bytes(), whole.bytes(), "chunk size {chunk}");
                assert_eq!(got.shape(), whole.shape());
            }
        }
    }

    #[test]
    fn a_copied_value_is_used_in_its_own_buffer_and_returned_whole() {
        let (key, value) = value();
        // Unaligned on purpose, as a read's buffer may be.
        let mut odd = vec![0u8];
        odd.extend_from_slice(&value);
        let (e, whole) = decode_copied(&odd[1..], &key, "m", 1 << 20).expect("valid");
        assert_eq!(&whole[..], &value[..]);
        let (start, end) = (
            whole.as_ptr() as usize,
            whole.as_ptr() as usize + whole.len(),
        );
        let at = e.bytes().as_ptr() as usize;
        assert!(at >= start && at < end, "the tensor lives in the copy");
        assert_eq!(e, decode_value(&value, &key, "m", 1 << 20).expect("valid"));
        let over = decode_copied(&value, &key, "m", value.len() as u64 - 1);
        assert!(matches!(over, Err(WireError::Oversized { .. })));
    }

    #[test]
    fn a_bad_chunk_is_refused() {
        let (key, value) = value();
        let m = Manifest::of(&value, 1000, 3).expect("chunkable");
        // A flipped byte in the tensor.
        let mut bad = value.to_vec();
        bad[2000] ^= 1;
        let a = assemble(m, &bad, 0..m.count);
        let err = a.finish(&key, "m", 1 << 20).expect_err("corrupt");
        assert_eq!(err, WireError::Corrupt { what: "checksum" });
        // A whole other write of the same length: its own checksum, not the manifest's.
        let e = Embedding::from_f32(vec![300, 7], vec![1.0; 2100]).expect("shape");
        let other = encode_value(&key, "m", &e).expect("encodable");
        assert_eq!(other.len(), value.len());
        let a = assemble(m, &other, 0..m.count);
        let err = a.finish(&key, "m", 1 << 20).expect_err("another write");
        assert_eq!(
            err,
            WireError::Corrupt {
                what: "chunk of another write"
            }
        );
    }

    #[test]
    fn wrong_puts_and_missing_chunks_are_errors() {
        let (key, value) = value();
        let m = Manifest::of(&value, 1000, 3).expect("chunkable");
        let mut a = Assembly::new(m).expect("a valid manifest");
        assert!(matches!(
            a.put(0, &value[..999]),
            Err(WireError::Truncated { len: 999, .. })
        ));
        assert!(matches!(
            a.put(m.count, &value[..1]),
            Err(WireError::Corrupt {
                what: "chunk index"
            })
        ));
        a.put(1, &value[m.chunk_range(1)]).expect("chunk 1");
        assert!(matches!(
            a.put(1, &value[m.chunk_range(1)]),
            Err(WireError::Corrupt {
                what: "chunk index"
            })
        ));
        assert!(!a.is_complete());
        assert!(matches!(
            a.finish(&key, "m", 1 << 20),
            Err(WireError::Truncated { len: 0, .. })
        ));
        // A manifest whose fields disagree (they are public) is refused up front.
        let mut forged = m;
        forged.count += 1;
        assert!(matches!(
            Assembly::new(forged),
            Err(WireError::Corrupt { what: "manifest" })
        ));
        // The value of another key, assembled whole, is still another key's.
        let other = EmbeddingKey::unscoped(&EmbeddingKeyInput::caller("b"), "m");
        let a = assemble(m, &value, 0..m.count);
        assert!(matches!(
            a.finish(&other, "m", 1 << 20),
            Err(WireError::OtherKey { what: "key" })
        ));
    }
}
