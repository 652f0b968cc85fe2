//! vLLM's multimodal hash of an image, reproduced: `MultiModalHasher.hash_kwargs("blake3",
//! image=img)` for the PIL RGB image whose pixels these are (vLLM 0.33.0,
//! `vllm/multimodal/hasher.py`). It hashes pixels, not bytes: the mode and the numpy array's
//! dtype, shape and buffer, framed with lengths and container tags.

/// `_TAG_SEQUENCE`, `_TAG_MAPPING`, `_TAG_LEAF` in vLLM's framing.
const SEQUENCE: u8 = 1;
const MAPPING: u8 = 2;
const LEAF: u8 = 3;

struct Framer(blake3::Hasher);

impl Framer {
    /// `_framed(chunk)`: the chunk's length as u64 LE, then the chunk.
    fn framed(&mut self, chunk: &[u8]) -> &mut Self {
        self.0.update(&(chunk.len() as u64).to_le_bytes());
        self.0.update(chunk);
        self
    }

    fn tag(&mut self, tag: u8) -> &mut Self {
        self.0.update(&[tag]);
        self
    }

    fn len(&mut self, n: u64) -> &mut Self {
        self.0.update(&n.to_le_bytes());
        self
    }
}

/// The blake3 digest vLLM computes for the `width` x `height` RGB8 image of `pixels` as the
/// only keyword argument named `image`; `pixels` holds `bpp` bytes a pixel (3, or 4 with a
/// fourth byte that is not hashed: vLLM hashes `np.asarray(img)`, 3 bytes a pixel).
pub(crate) fn hash(width: u32, height: u32, pixels: &[u8], bpp: usize) -> [u8; 32] {
    let mut h = Framer(blake3::Hasher::new());
    // iter_item_to_bytes("image", img): the key, then the value (a leaf: the PIL image).
    h.framed(b"image").tag(LEAF);
    // serialize_item(img): no EXIF ImageID UUID (a file's EXIF never yields a uuid.UUID), no
    // palette (RGB): iter_item_to_bytes("image", {"mode": "RGB", "data": np.asarray(img)}).
    h.framed(b"image").tag(MAPPING).len(2);
    h.framed(b"mode").tag(LEAF).framed(b"RGB");
    h.framed(b"data").tag(LEAF);
    // serialize_item(ndarray): iter_item_to_bytes("ndarray", {dtype, shape, data}).
    h.framed(b"ndarray").tag(MAPPING).len(3);
    h.framed(b"dtype").tag(LEAF).framed(b"|u1");
    h.framed(b"shape").tag(SEQUENCE).len(3);
    // Each dimension is an int: framed(np.array(n).tobytes()), an int64 on 64-bit Linux.
    for n in [u64::from(height), u64::from(width), 3] {
        h.tag(LEAF).framed(&(n as i64).to_le_bytes());
    }
    h.framed(b"data").tag(LEAF);
    if bpp == 3 {
        h.framed(pixels);
    } else {
        // framed(): the RGB length, then the RGB bytes, a row at a time.
        let row_px = width as usize;
        h.len((pixels.len() / bpp * 3) as u64);
        let mut rgb = Vec::with_capacity(row_px * 3);
        for row in pixels.chunks(row_px.max(1) * bpp) {
            rgb.clear();
            for px in row.chunks_exact(bpp) {
                rgb.extend_from_slice(&px[..3]);
            }
            h.0.update(&rgb);
        }
    }
    *h.0.finalize().as_bytes()
}
