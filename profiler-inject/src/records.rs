//! CUPTI activity records → [`GpuActivity`]: pure functions over one record's bytes, so they
//! are tested with records built here (exact field values), and the layouts are cudarc's
//! bindings of the CUDA 12.9 headers, never hand-written declarations.
//!
//! Fields are read one by one through raw places (`addr_of!` + `read_unaligned`): the structs
//! are `packed(8)` and hold C enums, and reading a whole struct whose enum field carries a value
//! the bindings do not know would be undefined behaviour.

use cudarc::cupti::sys::{
    CUpti_ActivityAPI, CUpti_ActivityKernel9, CUpti_ActivityKind, CUpti_ActivityMemcpy6,
    CUpti_ActivityMemset4,
};
use profiler_common::gpu::{GpuActivity, activity};

/// CUPTI API versions whose records have the layouts read here (`cupti_version.h`: v26 CUDA
/// 12.8, v27 12.9, v28 12.9 Update 1; 130000-130099 CUDA 13.0, whose wheel's header says
/// 130001). `CUpti_ActivityMemcpy6` first appears in 12.8. CUDA 13.0 writes its kernels as
/// `CUpti_ActivityKernel10`, which keeps every field read here where `CUpti_ActivityKernel9`
/// has it (`kernel10_reads_as_kernel9` checks it against the bindings), and keeps
/// `Memcpy6`/`Memset4` (13.0 changed only padding these fields do not cross).
pub fn supported(version: u32) -> bool {
    (26..=28).contains(&version) || (130_000..=130_099).contains(&version)
}

pub const KIND_MEMCPY: u32 = CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMCPY as u32;
pub const KIND_MEMSET: u32 = CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMSET as u32;
pub const KIND_CONCURRENT_KERNEL: u32 =
    CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL as u32;
pub const KIND_DRIVER: u32 = CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_DRIVER as u32;

/// CUPTI timestamp → CLOCK_MONOTONIC ns, with `offset` = monotonic − CUPTI measured at the same
/// moment. 0 (CUPTI's "not known") stays 0; the result never wraps.
pub fn to_monotonic(ts: u64, offset: i64) -> u64 {
    if ts == 0 {
        return 0;
    }
    (ts as i128 + offset as i128).clamp(0, u64::MAX as i128) as u64
}

macro_rules! field {
    ($rec:expr, $ty:ty, $f:ident) => {
        // SAFETY: the caller guarantees `$rec` points to a whole record of type `$ty`.
        unsafe { core::ptr::addr_of!((*($rec as *const $ty)).$f).read_unaligned() }
    };
}

/// One record, if it is a kernel, copy, memset or driver API call (the launches enabled). `name` interns a kernel's name pointer (called
/// only for kernels) and returns its id.
///
/// # Safety
/// `rec` points to a complete CUPTI activity record of a supported version (as
/// `cuptiActivityGetNextRecord` returns them), valid for the duration of the call.
pub unsafe fn convert(
    rec: *const u8,
    offset: i64,
    name: &mut dyn FnMut(*const core::ffi::c_char) -> u32,
) -> Option<GpuActivity> {
    // SAFETY: every record starts with its `CUpti_ActivityKind` (a u32).
    let kind = unsafe { (rec as *const u32).read_unaligned() };
    let mut a = GpuActivity::default();
    match kind {
        KIND_CONCURRENT_KERNEL => {
            a.kind = activity::KERNEL;
            a.device = field!(rec, CUpti_ActivityKernel9, deviceId);
            a.context = field!(rec, CUpti_ActivityKernel9, contextId);
            a.stream = field!(rec, CUpti_ActivityKernel9, streamId);
            a.correlation = field!(rec, CUpti_ActivityKernel9, correlationId);
            a.start_ns = to_monotonic(field!(rec, CUpti_ActivityKernel9, start), offset);
            a.end_ns = to_monotonic(field!(rec, CUpti_ActivityKernel9, end), offset);
            let n = field!(rec, CUpti_ActivityKernel9, name);
            a.name = if n.is_null() { 0 } else { name(n) };
        }
        KIND_MEMCPY => {
            a.kind = activity::MEMCPY;
            a.copy_kind = field!(rec, CUpti_ActivityMemcpy6, copyKind);
            a.device = field!(rec, CUpti_ActivityMemcpy6, deviceId);
            a.context = field!(rec, CUpti_ActivityMemcpy6, contextId);
            a.stream = field!(rec, CUpti_ActivityMemcpy6, streamId);
            a.correlation = field!(rec, CUpti_ActivityMemcpy6, correlationId);
            a.start_ns = to_monotonic(field!(rec, CUpti_ActivityMemcpy6, start), offset);
            a.end_ns = to_monotonic(field!(rec, CUpti_ActivityMemcpy6, end), offset);
            a.bytes = field!(rec, CUpti_ActivityMemcpy6, bytes);
        }
        KIND_MEMSET => {
            a.kind = activity::MEMSET;
            a.device = field!(rec, CUpti_ActivityMemset4, deviceId);
            a.context = field!(rec, CUpti_ActivityMemset4, contextId);
            a.stream = field!(rec, CUpti_ActivityMemset4, streamId);
            a.correlation = field!(rec, CUpti_ActivityMemset4, correlationId);
            a.start_ns = to_monotonic(field!(rec, CUpti_ActivityMemset4, start), offset);
            a.end_ns = to_monotonic(field!(rec, CUpti_ActivityMemset4, end), offset);
            a.bytes = field!(rec, CUpti_ActivityMemset4, bytes);
        }
        KIND_DRIVER => {
            a.kind = activity::API;
            a.name = field!(rec, CUpti_ActivityAPI, cbid);
            a.correlation = field!(rec, CUpti_ActivityAPI, correlationId);
            a.start_ns = to_monotonic(field!(rec, CUpti_ActivityAPI, start), offset);
            a.end_ns = to_monotonic(field!(rec, CUpti_ActivityAPI, end), offset);
            a.bytes = u64::from(field!(rec, CUpti_ActivityAPI, threadId));
        }
        _ => return None,
    }
    Some(a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{MaybeUninit, offset_of, size_of};
    use cudarc::cupti::sys::CUpti_ActivityKind as K;

    fn zeroed<T>() -> T {
        // SAFETY: every field of the three records is an integer, a pointer or a C enum whose
        // first value is 0.
        unsafe { MaybeUninit::<T>::zeroed().assume_init() }
    }

    /// The numbers tests/fakecuda/cupti.c asserts with `_Static_assert`: if cudarc's bindings
    /// and the fake CUPTI disagree, one of the two builds fails.
    #[test]
    fn layouts_match_the_fake_cupti() {
        assert_eq!(size_of::<CUpti_ActivityKernel9>(), 208);
        assert_eq!(offset_of!(CUpti_ActivityKernel9, start), 16);
        assert_eq!(offset_of!(CUpti_ActivityKernel9, end), 24);
        assert_eq!(offset_of!(CUpti_ActivityKernel9, deviceId), 40);
        assert_eq!(offset_of!(CUpti_ActivityKernel9, contextId), 44);
        assert_eq!(offset_of!(CUpti_ActivityKernel9, streamId), 48);
        assert_eq!(offset_of!(CUpti_ActivityKernel9, correlationId), 92);
        assert_eq!(offset_of!(CUpti_ActivityKernel9, gridId), 96);
        assert_eq!(offset_of!(CUpti_ActivityKernel9, name), 104);
        assert_eq!(offset_of!(CUpti_ActivityKernel9, graphId), 156);
        assert_eq!(offset_of!(CUpti_ActivityKernel9, maxActiveClusters), 204);
        assert_eq!(size_of::<CUpti_ActivityMemcpy6>(), 96);
        assert_eq!(offset_of!(CUpti_ActivityMemcpy6, copyKind), 4);
        assert_eq!(offset_of!(CUpti_ActivityMemcpy6, bytes), 8);
        assert_eq!(offset_of!(CUpti_ActivityMemcpy6, start), 16);
        assert_eq!(offset_of!(CUpti_ActivityMemcpy6, end), 24);
        assert_eq!(offset_of!(CUpti_ActivityMemcpy6, deviceId), 32);
        assert_eq!(offset_of!(CUpti_ActivityMemcpy6, contextId), 36);
        assert_eq!(offset_of!(CUpti_ActivityMemcpy6, streamId), 40);
        assert_eq!(offset_of!(CUpti_ActivityMemcpy6, correlationId), 44);
        assert_eq!(offset_of!(CUpti_ActivityMemcpy6, copyCount), 88);
        assert_eq!(size_of::<CUpti_ActivityMemset4>(), 88);
        assert_eq!(offset_of!(CUpti_ActivityMemset4, value), 4);
        assert_eq!(offset_of!(CUpti_ActivityMemset4, bytes), 8);
        assert_eq!(offset_of!(CUpti_ActivityMemset4, start), 16);
        assert_eq!(offset_of!(CUpti_ActivityMemset4, end), 24);
        assert_eq!(offset_of!(CUpti_ActivityMemset4, deviceId), 32);
        assert_eq!(offset_of!(CUpti_ActivityMemset4, contextId), 36);
        assert_eq!(offset_of!(CUpti_ActivityMemset4, streamId), 40);
        assert_eq!(offset_of!(CUpti_ActivityMemset4, correlationId), 44);
        assert_eq!(offset_of!(CUpti_ActivityMemset4, graphId), 72);
        assert_eq!(size_of::<CUpti_ActivityAPI>(), 40);
        assert_eq!(offset_of!(CUpti_ActivityAPI, cbid), 4);
        assert_eq!(offset_of!(CUpti_ActivityAPI, start), 8);
        assert_eq!(offset_of!(CUpti_ActivityAPI, end), 16);
        assert_eq!(offset_of!(CUpti_ActivityAPI, processId), 24);
        assert_eq!(offset_of!(CUpti_ActivityAPI, threadId), 28);
        assert_eq!(offset_of!(CUpti_ActivityAPI, correlationId), 32);
        assert_eq!(offset_of!(CUpti_ActivityAPI, returnValue), 36);
        assert_eq!(KIND_DRIVER, 4);
        assert_eq!(KIND_MEMCPY, 1);
        assert_eq!(KIND_MEMSET, 2);
        assert_eq!(KIND_CONCURRENT_KERNEL, 10);
    }

    #[test]
    fn kernel_record() {
        let mut r: CUpti_ActivityKernel9 = zeroed();
        r.kind = K::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        r.start = 5_000_000_000;
        r.end = 5_000_012_345;
        r.deviceId = 3;
        r.contextId = 7;
        r.streamId = 13;
        r.correlationId = 4242;
        r.gridX = 99; // not carried
        let name = c"_Z4reluPfi";
        r.name = name.as_ptr();
        let mut seen = vec![];
        let a = unsafe {
            convert(&raw const r as *const u8, -1_000, &mut |p| {
                seen.push(p);
                9
            })
        };
        assert_eq!(seen, vec![name.as_ptr()]);
        assert_eq!(
            a,
            Some(GpuActivity {
                kind: activity::KERNEL,
                copy_kind: 0,
                _pad: 0,
                device: 3,
                context: 7,
                stream: 13,
                correlation: 4242,
                name: 9,
                start_ns: 4_999_999_000,
                end_ns: 5_000_011_345,
                bytes: 0,
            })
        );
    }

    #[test]
    fn memcpy_and_memset_records() {
        let mut c: CUpti_ActivityMemcpy6 = zeroed();
        c.kind = K::CUPTI_ACTIVITY_KIND_MEMCPY;
        c.copyKind = 2; // DTOH
        c.bytes = 1 << 20;
        c.start = 100;
        c.end = 300;
        c.deviceId = 1;
        c.contextId = 2;
        c.streamId = 8;
        c.correlationId = 77;
        let mut never = |_| -> u32 { panic!("copies have no name") };
        let a = unsafe { convert(&raw const c as *const u8, 50, &mut never) };
        assert_eq!(
            a,
            Some(GpuActivity {
                kind: activity::MEMCPY,
                copy_kind: 2,
                _pad: 0,
                device: 1,
                context: 2,
                stream: 8,
                correlation: 77,
                name: 0,
                start_ns: 150,
                end_ns: 350,
                bytes: 1 << 20,
            })
        );
        let mut s: CUpti_ActivityMemset4 = zeroed();
        s.kind = K::CUPTI_ACTIVITY_KIND_MEMSET;
        s.value = 0xab;
        s.bytes = 4096;
        s.start = 1000;
        s.end = 1500;
        s.deviceId = 0;
        s.contextId = 1;
        s.streamId = 7;
        s.correlationId = 78;
        let a = unsafe { convert(&raw const s as *const u8, 0, &mut never) };
        assert_eq!(
            a,
            Some(GpuActivity {
                kind: activity::MEMSET,
                copy_kind: 0,
                _pad: 0,
                device: 0,
                context: 1,
                stream: 7,
                correlation: 78,
                name: 0,
                start_ns: 1000,
                end_ns: 1500,
                bytes: 4096,
            })
        );
    }

    #[test]
    fn driver_api_record() {
        let mut r: CUpti_ActivityAPI = zeroed();
        r.kind = K::CUPTI_ACTIVITY_KIND_DRIVER;
        r.cbid = 442; // cuLaunchKernel_ptsz
        r.start = 9_000;
        r.end = 9_750;
        r.processId = 31;
        r.threadId = 57;
        r.correlationId = 4242;
        r.returnValue = 0;
        let mut never = |_| -> u32 { panic!("API records have no name pointer") };
        let a = unsafe { convert(&raw const r as *const u8, 1_000, &mut never) };
        assert_eq!(
            a,
            Some(GpuActivity {
                kind: activity::API,
                copy_kind: 0,
                _pad: 0,
                device: 0,
                context: 0,
                stream: 0,
                correlation: 4242,
                name: 442,
                start_ns: 10_000,
                end_ns: 10_750,
                bytes: 57,
            })
        );
    }

    #[test]
    fn other_kinds_and_unknown_values_are_skipped() {
        let mut raw = [0u8; 208];
        raw[..4].copy_from_slice(&5u32.to_ne_bytes()); // CUPTI_ACTIVITY_KIND_RUNTIME
        let mut never = |_| -> u32 { unreachable!() };
        assert_eq!(unsafe { convert(raw.as_ptr(), 0, &mut never) }, None);
        raw[..4].copy_from_slice(&0x7777u32.to_ne_bytes()); // no such kind at all
        assert_eq!(unsafe { convert(raw.as_ptr(), 0, &mut never) }, None);
    }

    #[test]
    fn timestamps() {
        assert_eq!(to_monotonic(0, 123), 0);
        assert_eq!(to_monotonic(10, -20), 0);
        assert_eq!(to_monotonic(u64::MAX - 1, 5), u64::MAX);
        assert_eq!(to_monotonic(1_000, -400), 600);
        assert!(supported(28) && supported(130_001));
        assert!(!supported(25) && !supported(29) && !supported(130_100));
    }

    /// CUDA 13.0 writes kernels as `CUpti_ActivityKernel10`: every field `convert` reads is at
    /// the same place as in `CUpti_ActivityKernel9`.
    #[test]
    fn kernel10_reads_as_kernel9() {
        use cudarc::cupti::sys::CUpti_ActivityKernel10 as K10;
        type K9 = CUpti_ActivityKernel9;
        assert_eq!(offset_of!(K10, start), offset_of!(K9, start));
        assert_eq!(offset_of!(K10, end), offset_of!(K9, end));
        assert_eq!(offset_of!(K10, deviceId), offset_of!(K9, deviceId));
        assert_eq!(offset_of!(K10, contextId), offset_of!(K9, contextId));
        assert_eq!(offset_of!(K10, streamId), offset_of!(K9, streamId));
        assert_eq!(
            offset_of!(K10, correlationId),
            offset_of!(K9, correlationId)
        );
        assert_eq!(offset_of!(K10, name), offset_of!(K9, name));
        assert_eq!(size_of::<K10>(), 216);
    }
}
