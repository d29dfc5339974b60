//! CUPTI's buffer callbacks and the hand-over: `bufferRequested` lends a pool buffer;
//! `bufferCompleted` (CUPTI's worker thread, or the control thread inside
//! `cuptiActivityFlushAll`) walks the records, interns kernel names, calls the name site before
//! the first batch that uses a new id, the activity site once per [`BATCH`] records (always with
//! a whole `BATCH`-long array), returns the buffer and reports CUPTI's drop count.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::cupti;
use profiler_common::gpu::{BATCH, GpuActivity, state};

use crate::{pool, records, sites};

/// Kernel names seen since the last enable: contents → id (from 1).
#[derive(Default)]
pub struct Names {
    ids: HashMap<Vec<u8>, u32>,
}

impl Names {
    /// The id of the NUL-terminated `name`, announcing it through `announce` the first time.
    ///
    /// # Safety
    /// `name` is a valid NUL-terminated string.
    pub unsafe fn intern(
        &mut self,
        name: *const core::ffi::c_char,
        announce: &mut dyn FnMut(u32, *const core::ffi::c_char),
    ) -> u32 {
        // SAFETY: the caller's promise.
        let bytes = unsafe { core::ffi::CStr::from_ptr(name) }.to_bytes();
        if let Some(&id) = self.ids.get(bytes) {
            return id;
        }
        let id = self.ids.len() as u32 + 1;
        self.ids.insert(bytes.to_vec(), id);
        announce(id, name);
        id
    }
}

/// Records → batches: `out` gets each full batch (and the last, partial one at `finish`).
pub struct Batcher {
    items: [GpuActivity; BATCH],
    n: usize,
}

impl Default for Batcher {
    fn default() -> Self {
        Self {
            items: [GpuActivity::default(); BATCH],
            n: 0,
        }
    }
}

impl Batcher {
    pub fn push(&mut self, a: GpuActivity, out: &mut dyn FnMut(&[GpuActivity; BATCH], u32)) {
        self.items[self.n] = a;
        self.n += 1;
        if self.n == BATCH {
            self.finish(out);
        }
    }
    pub fn finish(&mut self, out: &mut dyn FnMut(&[GpuActivity; BATCH], u32)) {
        if self.n > 0 {
            out(&self.items, self.n as u32);
            self.items = [GpuActivity::default(); BATCH];
            self.n = 0;
        }
    }
}

static NAMES: Mutex<Option<Names>> = Mutex::new(None);
static FORGET: AtomicBool = AtomicBool::new(false);

/// Called by the control thread on every enable: names are announced again from id 1.
pub fn forget_names() {
    FORGET.store(true, Ordering::Release);
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC − CUPTI's clock, now.
fn clock_offset() -> i64 {
    let mut cupti_ts = 0u64;
    // SAFETY: CUPTI is loaded (this runs only from its callbacks); a valid out pointer.
    let r = unsafe { cupti::cuptiGetTimestamp(&mut cupti_ts) };
    if r != cupti::CUptiResult::CUPTI_SUCCESS {
        return 0;
    }
    monotonic_ns() as i64 - cupti_ts as i64
}

/// `CUpti_BuffersCallbackRequestFunc`.
///
/// # Safety
/// Called by CUPTI with valid out pointers.
pub unsafe extern "C" fn buffer_requested(
    buffer: *mut *mut u8,
    size: *mut usize,
    max_records: *mut usize,
) {
    let _ = std::panic::catch_unwind(|| {
        let p = pool::take();
        // SAFETY: CUPTI passes valid out pointers.
        unsafe {
            *buffer = p.unwrap_or(core::ptr::null_mut());
            *size = if p.is_some() { pool::BUFFER_BYTES } else { 0 };
            *max_records = 0;
        }
    });
}

/// `CUpti_BuffersCallbackCompleteFunc`.
///
/// # Safety
/// Called by CUPTI with a buffer [`buffer_requested`] lent, `valid` bytes of records in it.
pub unsafe extern "C" fn buffer_completed(
    context: cudarc::driver::sys::CUcontext,
    stream: u32,
    buffer: *mut u8,
    _size: usize,
    valid: usize,
) {
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: CUPTI hands back a buffer it was lent, `valid` bytes filled.
        unsafe { deliver(buffer, valid) };
        let mut dropped = 0usize;
        // SAFETY: the context and stream CUPTI named; a valid out pointer.
        let r = unsafe { cupti::cuptiActivityGetNumDroppedRecords(context, stream, &mut dropped) };
        if r == cupti::CUptiResult::CUPTI_SUCCESS && dropped > 0 {
            sites::state(state::DROPPED, dropped as u64);
        }
    });
    pool::give(buffer);
}

/// Walks one completed buffer and hands its records over.
///
/// # Safety
/// `buffer` holds `valid` bytes of CUPTI activity records.
unsafe fn deliver(buffer: *mut u8, valid: usize) {
    if buffer.is_null() || valid == 0 {
        return;
    }
    let offset = clock_offset();
    let mut guard = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    if FORGET.swap(false, Ordering::AcqRel) || guard.is_none() {
        *guard = Some(Names::default());
    }
    let names = guard.as_mut().expect("set above");
    let mut batch = Batcher::default();
    let mut out =
        |items: &[GpuActivity; BATCH], n: u32| sites::gpuprofd_inject_activity(items.as_ptr(), n);
    let mut announce = |id, name| sites::gpuprofd_inject_name(id, name);
    let mut rec: *mut cupti::CUpti_Activity = core::ptr::null_mut();
    loop {
        // SAFETY: CUPTI's own iterator over the buffer it filled.
        let r = unsafe { cupti::cuptiActivityGetNextRecord(buffer, valid, &mut rec) };
        if r != cupti::CUptiResult::CUPTI_SUCCESS || rec.is_null() {
            break; // CUPTI_ERROR_MAX_LIMIT_REACHED: the end
        }
        // SAFETY: a whole record CUPTI returned; names are NUL-terminated strings CUPTI owns.
        let a = unsafe {
            records::convert(rec as *const u8, offset, &mut |n| {
                names.intern(n, &mut announce)
            })
        };
        if let Some(a) = a {
            batch.push(a, &mut out);
        }
    }
    batch.finish(&mut out);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn act(c: u32) -> GpuActivity {
        GpuActivity {
            kind: 1,
            correlation: c,
            ..Default::default()
        }
    }

    #[test]
    fn batches_of_sixteen_always_whole_arrays() {
        let mut b = Batcher::default();
        let mut calls: Vec<(u32, Vec<u32>)> = vec![];
        let mut out = |items: &[GpuActivity; BATCH], n: u32| {
            calls.push((n, items.iter().map(|a| a.correlation).collect()));
        };
        for c in 1..=35 {
            b.push(act(c), &mut out);
        }
        b.finish(&mut out);
        b.finish(&mut out); // nothing left: no call
        assert_eq!(calls.len(), 3);
        assert_eq!(calls[0], (16, (1..=16).collect()));
        assert_eq!(calls[1], (16, (17..=32).collect()));
        let mut last: Vec<u32> = vec![33, 34, 35];
        last.extend([0; 13]);
        assert_eq!(calls[2], (3, last));
    }

    #[test]
    fn names_interned_from_one_and_announced_once() {
        let mut n = Names::default();
        let mut said = vec![];
        let mut announce = |id, p: *const core::ffi::c_char| {
            said.push((
                id,
                unsafe { core::ffi::CStr::from_ptr(p) }
                    .to_str()
                    .unwrap()
                    .to_owned(),
            ))
        };
        let a = c"_Z4reluPfi";
        let b = c"_Z6vecAddPfS_S_i";
        let a_copy = std::ffi::CString::new("_Z4reluPfi").unwrap(); // same text, other address
        let ids = unsafe {
            [
                n.intern(a.as_ptr(), &mut announce),
                n.intern(b.as_ptr(), &mut announce),
                n.intern(a_copy.as_ptr(), &mut announce),
                n.intern(b.as_ptr(), &mut announce),
            ]
        };
        assert_eq!(ids, [1, 2, 1, 2]);
        assert_eq!(
            said,
            vec![
                (1, "_Z4reluPfi".to_owned()),
                (2, "_Z6vecAddPfS_S_i".to_owned())
            ]
        );
    }
}
