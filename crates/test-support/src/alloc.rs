//! A global allocator that counts live bytes and their peak, for tests that assert how much
//! memory something allocates. Declare it in the test binary:
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOCATOR: mmcache_test_support::alloc::Counting = mmcache_test_support::alloc::Counting;
//! ```
//!
//! It counts the whole process: keep one such test per binary, or run them one at a time.

// The crate's only unsafe code: a GlobalAlloc that forwards to the system allocator.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

/// The counting allocator (forwards to [`System`]).
#[derive(Debug)]
pub struct Counting;

impl Counting {
    fn grew(size: usize) {
        let live = LIVE.fetch_add(size, Ordering::Relaxed) + size;
        PEAK.fetch_max(live, Ordering::Relaxed);
    }
}

// SAFETY: every call forwards to `System` with the caller's layout; the counters only watch.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            Self::grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            Self::grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

/// Runs `f` and returns its result with the peak of bytes allocated on top of what was live
/// when it started (meaningful only with [`Counting`] as the global allocator).
pub fn peak_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = start_peak();
    let out = f();
    (out, peak_since(base))
}

/// Starts a measurement: resets the peak to the bytes live now, which it returns.
pub fn start_peak() -> usize {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    base
}

/// The peak since [`start_peak`] returned `base`, above `base`.
pub fn peak_since(base: usize) -> usize {
    PEAK.load(Ordering::Relaxed).saturating_sub(base)
}
