//! The activity buffers: a fixed pool CUPTI borrows from (`bufferRequested`, which CUPTI may
//! call on an application thread) and the completion path returns to. Lock-free (one atomic
//! swap per slot) so a launching thread never waits on the delivery thread.
//!
//! Why 8 × 1 MiB: a kernel record is 208 bytes, so one buffer holds ~5,000 records and the pool
//! ~40,000, about 0.4 s of a launch-bound loop at 100 k launches/s while the delivery thread is
//! slow; 8 MiB at most per process is small beside any CUDA context (hundreds of MiB). Buffers
//! are allocated on first use only, so a process nobody listens to allocates none.
//!
//! Buffers come from `malloc` (CUPTI asks 8-byte alignment, which malloc exceeds): if another
//! CUPTI client replaces our callbacks, buffers we lent complete to it and it `free`s them,
//! which is then harmless; the pool only has fewer to lend (counted in [`allocated`]).

use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

/// Buffers in the pool at most.
pub const BUFFERS: usize = 8;
/// Bytes per buffer.
pub const BUFFER_BYTES: usize = 1 << 20;

static FREE: [AtomicPtr<u8>; BUFFERS] = [const { AtomicPtr::new(core::ptr::null_mut()) }; BUFFERS];
static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

/// A buffer to lend to CUPTI, or `None` when all [`BUFFERS`] are out (CUPTI then drops
/// records and counts them).
pub fn take() -> Option<*mut u8> {
    for slot in &FREE {
        let p = slot.swap(core::ptr::null_mut(), Ordering::AcqRel);
        if !p.is_null() {
            return Some(p);
        }
    }
    if ALLOCATED.fetch_add(1, Ordering::AcqRel) >= BUFFERS {
        ALLOCATED.fetch_sub(1, Ordering::AcqRel);
        return None;
    }
    // SAFETY: plain malloc; null is handled.
    let p = unsafe { libc::malloc(BUFFER_BYTES) } as *mut u8;
    if p.is_null() {
        ALLOCATED.fetch_sub(1, Ordering::AcqRel);
        return None;
    }
    Some(p)
}

/// Returns a buffer [`take`] lent (freed instead if the pool were already full, which buffers
/// from `take` cannot make it).
pub fn give(p: *mut u8) {
    if p.is_null() {
        return;
    }
    for slot in &FREE {
        if slot
            .compare_exchange(
                core::ptr::null_mut(),
                p,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
        {
            return;
        }
    }
    // More returned than the pool holds: cannot happen with buffers from `take`.
    // SAFETY: a malloc'ed buffer nobody else holds.
    unsafe { libc::free(p as *mut libc::c_void) };
    ALLOCATED.fetch_sub(1, Ordering::AcqRel);
}

/// Buffers allocated so far (lent or free).
pub fn allocated() -> usize {
    ALLOCATED.load(Ordering::Acquire)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole pool in one test: it is process-global.
    #[test]
    fn bounded_and_reused() {
        let lent: Vec<_> = (0..BUFFERS).map(|_| take().expect("a buffer")).collect();
        assert_eq!(allocated(), BUFFERS);
        assert_eq!(take(), None);
        assert_eq!(allocated(), BUFFERS);
        let first = lent[0];
        give(first);
        assert_eq!(take(), Some(first));
        assert_eq!(take(), None);
        for p in lent {
            give(p);
        }
        let again: Vec<_> = (0..BUFFERS).map(|_| take().expect("a buffer")).collect();
        assert_eq!(allocated(), BUFFERS);
        assert_eq!(take(), None);
        for p in again {
            give(p);
        }
    }
}
