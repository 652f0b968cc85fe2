//! Embedding tensors and the byte-weighted in-memory cache that keeps them.
//!
//! An [`Embedding`] is one contiguous, row-major tensor ([`DType`], shape, bytes) plus optional
//! small metadata (e.g. a serialised `image_grid_thw`). Its bytes always sit in an allocation
//! made as a `Vec` of the element type (`Vec<f32>` for f32, `Vec<u16>` for f16 and bf16), so
//! they are aligned for the dtype and a no-copy typed view (numpy, [`Embedding::as_f32`]) is
//! sound. [`EmbeddingStore`] keeps them under [`EmbeddingKey`]s, weighed in bytes.

use bytes::Bytes;
use mmcache_scope::EmbeddingKey;

use crate::cache::{CacheStats, ENTRY_OVERHEAD_BYTES, Gauges, Sizing, WeightedCache};
use crate::metrics as names;

/// Largest metadata an embedding may carry: 64 KiB.
pub const MAX_EMBEDDING_METADATA_BYTES: usize = 64 << 10;

/// Default byte budget of the embedding cache: 1 GiB (`MMCACHE_EMBEDDING_CACHE_BYTES`), about
/// a hundred 1024 px images of a 7B vision-language model.
pub const DEFAULT_EMBEDDING_CACHE_BYTES: u64 = 1 << 30;

/// Embeddings: typically a 2,048-wide f32 vector (8 KiB); at most a vision model's per-image
/// token embeddings, e.g. 2,880 tokens x 4,096 dims x 2 bytes (23 MiB).
const EMBEDDING_SIZING: Sizing = Sizing {
    typical_entry: 8 << 10,
    largest_entry: 32 << 20,
};

/// Element type of an embedding tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DType {
    /// IEEE 754 single precision.
    F32,
    /// IEEE 754 half precision (bits as `u16`).
    F16,
    /// bfloat16 (bits as `u16`).
    BF16,
}

impl DType {
    /// Bytes per element.
    pub fn element_size(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::BF16 => 2,
        }
    }

    /// Lowercase name as numpy/torch spell it (`float32`, `float16`, `bfloat16`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::F32 => "float32",
            Self::F16 => "float16",
            Self::BF16 => "bfloat16",
        }
    }
}

/// Why an [`Embedding`] could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TensorError {
    /// The shape's element count times the element size is not the data's length.
    #[error("shape {shape:?} of {dtype} needs {expected} bytes, got {actual}")]
    ShapeMismatch {
        /// The shape given.
        shape: Vec<usize>,
        /// Its dtype name.
        dtype: &'static str,
        /// Bytes the shape needs.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// The shape's byte size does not fit in `usize`.
    #[error("shape {shape:?} of {dtype} overflows")]
    ShapeOverflow {
        /// The shape given.
        shape: Vec<usize>,
        /// Its dtype name.
        dtype: &'static str,
    },
    /// Elements of `dtype` are not as wide as the storage given for them (an f32 tensor from
    /// `u16` bits): its typed views would be misaligned.
    #[error(
        "{dtype} elements are {element_size} bytes; storage of {storage_size}-byte elements cannot hold them"
    )]
    DTypeWidth {
        /// The dtype name.
        dtype: &'static str,
        /// Its element size in bytes.
        element_size: usize,
        /// The storage's element size in bytes.
        storage_size: usize,
    },
    /// The metadata is over [`MAX_EMBEDDING_METADATA_BYTES`].
    #[error("embedding metadata of {len} bytes is over the {max}-byte cap")]
    MetadataTooLarge {
        /// Its length.
        len: usize,
        /// The cap.
        max: usize,
    },
}

/// The aligned owner of an embedding's bytes.
enum Storage {
    F32(Vec<f32>),
    U16(Vec<u16>),
}

impl AsRef<[u8]> for Storage {
    fn as_ref(&self) -> &[u8] {
        match self {
            Self::F32(v) => bytemuck::cast_slice(v),
            Self::U16(v) => bytemuck::cast_slice(v),
        }
    }
}

/// One embedding: a contiguous row-major tensor plus optional metadata. Cheap to clone (the
/// bytes are shared, the shape is a short `Vec`).
#[derive(Clone, PartialEq, Eq)]
pub struct Embedding {
    dtype: DType,
    shape: Vec<usize>,
    data: Bytes,
    metadata: Option<Bytes>,
}

impl std::fmt::Debug for Embedding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedding")
            .field("dtype", &self.dtype)
            .field("shape", &self.shape)
            .field("bytes", &self.data.len())
            .field("metadata_bytes", &self.metadata.as_ref().map(Bytes::len))
            .finish()
    }
}

/// `shape`'s byte size for `dtype`, with checked arithmetic.
fn byte_len(dtype: DType, shape: &[usize]) -> Result<usize, TensorError> {
    shape
        .iter()
        .try_fold(dtype.element_size(), |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| TensorError::ShapeOverflow {
            shape: shape.to_vec(),
            dtype: dtype.as_str(),
        })
}

impl Embedding {
    fn checked(dtype: DType, shape: Vec<usize>, storage: Storage) -> Result<Self, TensorError> {
        let expected = byte_len(dtype, &shape)?;
        let actual = storage.as_ref().len();
        if expected != actual {
            return Err(TensorError::ShapeMismatch {
                shape,
                dtype: dtype.as_str(),
                expected,
                actual,
            });
        }
        Ok(Self {
            dtype,
            shape,
            data: Bytes::from_owner(storage),
            metadata: None,
        })
    }

    /// A tensor over bytes already aligned for `dtype` (a fleet-tier value assembled into an
    /// aligned buffer), used in place.
    pub(crate) fn from_aligned(
        dtype: DType,
        shape: Vec<usize>,
        data: Bytes,
    ) -> Result<Self, TensorError> {
        let expected = byte_len(dtype, &shape)?;
        let aligned = (data.as_ptr() as usize).is_multiple_of(dtype.element_size());
        if expected != data.len() || !aligned {
            return Err(TensorError::ShapeMismatch {
                shape,
                dtype: dtype.as_str(),
                expected,
                actual: data.len(),
            });
        }
        Ok(Self {
            dtype,
            shape,
            data,
            metadata: None,
        })
    }

    /// An f32 tensor; the `Vec`'s allocation becomes the embedding's, no copy.
    ///
    /// # Errors
    ///
    /// [`TensorError`] when the shape does not describe `data`.
    pub fn from_f32(shape: Vec<usize>, data: Vec<f32>) -> Result<Self, TensorError> {
        Self::checked(DType::F32, shape, Storage::F32(data))
    }

    /// An f16 or bf16 tensor from its bits; no copy. `dtype` must be 2 bytes wide.
    ///
    /// # Errors
    ///
    /// [`TensorError::DTypeWidth`] when `dtype` is not 2 bytes wide; [`TensorError`] when the
    /// shape does not describe `data`.
    pub fn from_u16_bits(
        dtype: DType,
        shape: Vec<usize>,
        data: Vec<u16>,
    ) -> Result<Self, TensorError> {
        if dtype.element_size() != 2 {
            return Err(TensorError::DTypeWidth {
                dtype: dtype.as_str(),
                element_size: dtype.element_size(),
                storage_size: 2,
            });
        }
        Self::checked(dtype, shape, Storage::U16(data))
    }

    /// A tensor from raw little-endian bytes, copied once into an allocation aligned for
    /// `dtype` (for bytes that arrive unaligned, e.g. from a cache tier or Python).
    ///
    /// # Errors
    ///
    /// [`TensorError`] when the shape does not describe `data`.
    pub fn from_bytes(dtype: DType, shape: Vec<usize>, data: &[u8]) -> Result<Self, TensorError> {
        let expected = byte_len(dtype, &shape)?;
        if expected != data.len() {
            return Err(TensorError::ShapeMismatch {
                shape,
                dtype: dtype.as_str(),
                expected,
                actual: data.len(),
            });
        }
        let storage = match dtype {
            DType::F32 => Storage::F32(
                data.chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            ),
            DType::F16 | DType::BF16 => Storage::U16(
                data.chunks_exact(2)
                    .map(|c| u16::from_le_bytes([c[0], c[1]]))
                    .collect(),
            ),
        };
        Self::checked(dtype, shape, storage)
    }

    /// A copy in an allocation of its own, metadata included: what a tier read is cached as,
    /// so the buffer it was read into (and the download-budget reservation that buffer holds)
    /// is released once the read is done, not kept as long as the entry stays cached.
    pub fn detached(&self) -> Embedding {
        let mut storage = match self.dtype {
            DType::F32 => Storage::F32(vec![0.0; self.data.len() / 4]),
            DType::F16 | DType::BF16 => Storage::U16(vec![0; self.data.len() / 2]),
        };
        match &mut storage {
            Storage::F32(v) => bytemuck::cast_slice_mut(v).copy_from_slice(&self.data),
            Storage::U16(v) => bytemuck::cast_slice_mut(v).copy_from_slice(&self.data),
        }
        Embedding {
            dtype: self.dtype,
            shape: self.shape.clone(),
            data: Bytes::from_owner(storage),
            metadata: self.metadata.as_deref().map(Bytes::copy_from_slice),
        }
    }

    /// The same tensor carrying `metadata` (at most [`MAX_EMBEDDING_METADATA_BYTES`]).
    ///
    /// # Errors
    ///
    /// [`TensorError::MetadataTooLarge`].
    pub fn with_metadata(mut self, metadata: Bytes) -> Result<Self, TensorError> {
        if metadata.len() > MAX_EMBEDDING_METADATA_BYTES {
            return Err(TensorError::MetadataTooLarge {
                len: metadata.len(),
                max: MAX_EMBEDDING_METADATA_BYTES,
            });
        }
        self.metadata = Some(metadata);
        Ok(self)
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape, row-major.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The tensor's bytes (native byte order), aligned for the dtype.
    pub fn bytes(&self) -> &Bytes {
        &self.data
    }

    /// The metadata, when given.
    pub fn metadata(&self) -> Option<&Bytes> {
        self.metadata.as_ref()
    }

    /// The elements of an f32 tensor, no copy; `None` for other dtypes.
    pub fn as_f32(&self) -> Option<&[f32]> {
        (self.dtype == DType::F32)
            .then(|| bytemuck::try_cast_slice(&self.data).ok())
            .flatten()
    }

    /// The element bits of an f16 or bf16 tensor, no copy; `None` for other dtypes.
    pub fn as_u16_bits(&self) -> Option<&[u16]> {
        (self.dtype.element_size() == 2)
            .then(|| bytemuck::try_cast_slice(&self.data).ok())
            .flatten()
    }

    /// What the entry weighs in a cache, before [`ENTRY_OVERHEAD_BYTES`]: tensor, metadata and
    /// shape bytes plus the shared-bytes header (the owner's allocation and `Vec`).
    pub fn weight_bytes(&self) -> u64 {
        const HEADER: usize = 64;
        let shape = std::mem::size_of_val(self.shape.as_slice());
        let meta = self.metadata.as_ref().map_or(0, Bytes::len);
        (self.data.len() + meta + shape + HEADER) as u64
    }
}

/// The worker's in-memory embedding cache, keyed by [`EmbeddingKey`] (which carries the scope
/// digest in scoped mode), weighed in bytes. A budget of 0 stores nothing; an entry heavier
/// than the budget is not stored (nor one heavier than a shard's share; see the crate's
/// "Memory accounting").
///
/// Gauges: [`EMBEDDING_CACHE_ENTRIES`](crate::metrics::EMBEDDING_CACHE_ENTRIES),
/// [`EMBEDDING_CACHE_BYTES`](crate::metrics::EMBEDDING_CACHE_BYTES), `tier="memory"`.
pub struct EmbeddingStore {
    inner: Option<WeightedCache<Embedding>>,
    max_bytes: u64,
}

impl std::fmt::Debug for EmbeddingStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddingStore")
            .field("max_bytes", &self.max_bytes)
            .field("stats", &self.stats())
            .finish()
    }
}

/// What an [`EmbeddingStore::insert`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Inserted {
    /// Whether the entry is now held.
    pub stored: bool,
    /// Entries that left to make room (not counting this one when refused).
    pub evicted: u64,
}

impl EmbeddingStore {
    /// A cache holding at most `max_bytes` of weighed entries (0: off).
    pub fn new(max_bytes: u64) -> Self {
        let inner = (max_bytes > 0).then(|| {
            let gauges = Gauges {
                entries: metrics::gauge!(names::EMBEDDING_CACHE_ENTRIES.name, "tier" => names::MemoryTier::Memory.as_str()),
                bytes: metrics::gauge!(names::EMBEDDING_CACHE_BYTES.name, "tier" => names::MemoryTier::Memory.as_str()),
            };
            WeightedCache::new(max_bytes, None, EMBEDDING_SIZING, gauges)
        });
        Self { inner, max_bytes }
    }

    /// The byte budget.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// The embedding under `key`; a hit counts as a use.
    pub fn get(&self, key: &EmbeddingKey) -> Option<Embedding> {
        self.inner.as_ref()?.get(key.as_bytes())
    }

    /// Caches `embedding` under `key`, evicting as needed. One heavier than the whole budget
    /// is refused up front, evicting nothing.
    pub fn insert(&self, key: &EmbeddingKey, embedding: Embedding) -> Inserted {
        let refused = Inserted {
            stored: false,
            evicted: 0,
        };
        let Some(inner) = &self.inner else {
            return refused;
        };
        let payload = embedding.weight_bytes();
        if payload.saturating_add(ENTRY_OVERHEAD_BYTES) > self.max_bytes {
            return refused;
        }
        let left = inner.insert(*key.as_bytes(), embedding, payload);
        // quick_cache reports a value it refused as too heavy for its shard as evicted too.
        let stored = inner.contains(key.as_bytes());
        Inserted {
            stored,
            evicted: left.saturating_sub(u64::from(!stored)),
        }
    }

    /// Forgets `key`.
    pub fn remove(&self, key: &EmbeddingKey) {
        if let Some(inner) = &self.inner {
            inner.remove(key.as_bytes());
        }
    }

    /// Entries and bytes held now.
    pub fn stats(&self) -> CacheStats {
        self.inner
            .as_ref()
            .map_or_else(CacheStats::default, WeightedCache::stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mmcache_scope::EmbeddingKeyInput;

    fn key(i: usize) -> EmbeddingKey {
        EmbeddingKey::unscoped(&EmbeddingKeyInput::caller(i.to_string()), "m")
    }

    #[test]
    fn validates_shape_and_metadata() {
        assert!(Embedding::from_f32(vec![2, 3], vec![0.0; 6]).is_ok());
        let e = Embedding::from_f32(vec![2, 3], vec![0.0; 5]).unwrap_err();
        assert!(
            matches!(
                e,
                TensorError::ShapeMismatch {
                    expected: 24,
                    actual: 20,
                    ..
                }
            ),
            "{e}"
        );
        let e = Embedding::from_u16_bits(DType::BF16, vec![usize::MAX, 2], vec![]).unwrap_err();
        assert!(matches!(e, TensorError::ShapeOverflow { .. }), "{e}");
        let e = Embedding::from_bytes(DType::F16, vec![3], &[0; 5]).unwrap_err();
        assert!(matches!(e, TensorError::ShapeMismatch { .. }));
        let ok = Embedding::from_f32(vec![1], vec![1.0]).unwrap();
        let big = Bytes::from(vec![0; MAX_EMBEDDING_METADATA_BYTES + 1]);
        assert!(matches!(
            ok.clone().with_metadata(big),
            Err(TensorError::MetadataTooLarge { .. })
        ));
        let meta = Bytes::from(vec![1; MAX_EMBEDDING_METADATA_BYTES]);
        assert_eq!(
            ok.with_metadata(meta).unwrap().metadata().unwrap().len(),
            65536
        );
    }

    #[test]
    fn bytes_are_aligned_and_round_trip() {
        let f = Embedding::from_f32(vec![2], vec![1.5, -2.0]).unwrap();
        assert_eq!(f.bytes().as_ptr() as usize % 4, 0);
        assert_eq!(f.as_f32(), Some(&[1.5f32, -2.0][..]));
        let raw: Vec<u8> = [1.5f32, -2.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        // From an odd offset: copied into an aligned allocation.
        let mut odd = vec![0u8];
        odd.extend_from_slice(&raw);
        let g = Embedding::from_bytes(DType::F32, vec![2], &odd[1..]).unwrap();
        assert_eq!(g, f);
        let h = Embedding::from_u16_bits(DType::F16, vec![3], vec![1, 2, 3]).unwrap();
        assert_eq!(
            (h.dtype().as_str(), h.as_u16_bits()),
            ("float16", Some(&[1u16, 2, 3][..]))
        );
        assert_eq!(h.as_f32(), None);
        assert_eq!(DType::BF16.element_size(), 2);
    }

    #[test]
    fn u16_bits_refuse_a_dtype_that_is_not_two_bytes() {
        // Two u16s are the 4 bytes one f32 needs, so only the dtype check refuses them: an F32
        // embedding over u16 storage would be 2-byte aligned under a 4-byte typed view.
        let e = Embedding::from_u16_bits(DType::F32, vec![1], vec![0; 2]).unwrap_err();
        assert_eq!(
            e,
            TensorError::DTypeWidth {
                dtype: "float32",
                element_size: 4,
                storage_size: 2,
            },
            "{e}"
        );
        assert!(e.to_string().contains("float32"), "{e}");
        for dtype in [DType::F16, DType::BF16] {
            assert!(Embedding::from_u16_bits(dtype, vec![2], vec![0; 2]).is_ok());
        }
    }

    #[test]
    fn store_keeps_bytes_within_budget_and_refuses_an_entry_over_it() {
        let one = Embedding::from_f32(vec![256], vec![0.0; 256]).unwrap();
        let per = one.weight_bytes() + ENTRY_OVERHEAD_BYTES;
        let budget = per * 4;
        let store = EmbeddingStore::new(budget);
        let mut evicted = 0;
        for i in 0..50 {
            let r = store.insert(&key(i), one.clone());
            assert!(r.stored);
            evicted += r.evicted;
            assert!(store.stats().bytes <= budget);
        }
        assert!(evicted >= 46, "{evicted}");
        assert!(store.get(&key(49)).is_some());
        let huge = Embedding::from_f32(vec![2048], vec![0.0; 2048]).unwrap(); // 8 KiB > 4 x 1.3 KiB
        let before = store.stats();
        assert!(!store.insert(&key(99), huge).stored);
        assert_eq!(store.stats(), before);
        assert!(store.get(&key(99)).is_none());
        let off = EmbeddingStore::new(0);
        assert!(!off.insert(&key(1), one).stored);
        assert!(off.get(&key(1)).is_none());
    }
}
