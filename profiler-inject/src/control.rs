//! The control thread (`gpuprofd-inj`): every [`POLL_MS`] it reads the semaphore and enables or
//! disables CUPTI's activity records to match, reporting each change through the state site.
//! All CUPTI setup and teardown runs here, never on an application thread.

use std::sync::Once;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use crate::cupti::{self, CUpti_ActivityKind as K, CUptiResult as R};
use profiler_common::gpu::{LAUNCH_CBIDS, POLL_MS, found, state};

use crate::{deliver, records, sites};

/// CUPTI's worker thread's flush period (milliseconds) while enabled. CUPTI's periodic flush
/// returns only *full* buffers ("Periodic flush can return only those activity buffers which
/// are full", cupti_activity.h): on an H200 a 1 MiB buffer took ~3 s of a torch.compile loop to
/// fill, and gpuprofd's join had let those launches go. So the control thread also asks for
/// every completed record at each poll while enabled ([`POLL_MS`], `cuptiActivityFlushAll(0)`,
/// which does not wait for the GPU): records reach gpuprofd within about a poll.
pub const FLUSH_PERIOD_MS: u32 = 200;

const KINDS: [K; 3] = [
    K::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
    K::CUPTI_ACTIVITY_KIND_MEMCPY,
    K::CUPTI_ACTIVITY_KIND_MEMSET,
];

/// The pid that enabled activity, 0 while disabled (for the exit handler, which runs on the
/// exiting thread). A pid, not a flag: a child forked after the enable (a data loader worker)
/// inherits the memory but not CUPTI's threads, and must not call CUPTI when it exits.
static ENABLED_IN: AtomicI32 = AtomicI32::new(0);
static AT_EXIT: Once = Once::new();

/// At process exit, while enabled: what CUPTI still holds (up to a poll's worth of
/// records) is delivered before the process goes, so a short program loses nothing. Runs
/// before CUPTI's own exit handlers (registered earlier, so run later).
extern "C" fn flush_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: getpid has no preconditions.
        let me = unsafe { libc::getpid() };
        if me != 0
            && ENABLED_IN
                .compare_exchange(me, 0, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            // SAFETY: CUPTI is loaded in this process (ENABLED_IN is set after it was). Flag 1:
            // CUPTI_ACTIVITY_FLAG_FLUSH_FORCED, incomplete records too.
            unsafe { cupti::cuptiActivityFlushAll(1) };
        }
    });
}

/// What the library knows about CUPTI in this process.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Cupti {
    /// Not looked for yet (nobody has listened so far).
    Unknown,
    /// No library, or a version whose records we cannot read: do nothing, for good.
    Unusable,
    /// Loaded, API version as given.
    Ready(u32),
}

struct Control {
    cupti: Cupti,
    enabled: bool,
    /// YIELDED was reported for the current listening period.
    yielded: bool,
}

/// The thread's body.
pub fn run() {
    let mut c = Control {
        cupti: Cupti::Unknown,
        enabled: false,
        yielded: false,
    };
    loop {
        // A panic in one step (a bug, or a CUPTI binding's) ends the library's work, not the
        // process: the thread then just stops.
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.step(sites::semaphore())))
            .is_err()
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(POLL_MS));
    }
}

impl Control {
    fn step(&mut self, semaphore: u16) {
        match (semaphore > 0, self.enabled) {
            (true, false) => self.try_enable(),
            (false, true) => self.disable(),
            (false, false) => self.yielded = false,
            (true, true) => {
                // SAFETY: CUPTI is loaded (we enabled through it). Not forced: only completed
                // records, no wait for the GPU.
                unsafe { cupti::cuptiActivityFlushAll(0) };
            }
        }
    }

    fn load(&mut self) {
        // The CUPTI already in the process, else one beside its CUDA runtime, else by name
        // (crate::cupti's header says why).
        if cupti::load().is_err() {
            self.cupti = Cupti::Unusable;
            sites::state(state::NO_CUPTI, 0);
            return;
        }
        let mut version = 0u32;
        // SAFETY: CUPTI is loaded; out pointer valid.
        let r = unsafe { cupti::cuptiGetVersion(&mut version) };
        if r != R::CUPTI_SUCCESS {
            self.cupti = Cupti::Unusable;
            sites::state(state::CUPTI_ERROR, r as u64);
        } else if !records::supported(version) {
            self.cupti = Cupti::Unusable;
            sites::state(state::UNSUPPORTED_VERSION, version as u64);
        } else {
            self.cupti = Cupti::Ready(version);
        }
    }

    fn try_enable(&mut self) {
        if self.cupti == Cupti::Unknown {
            self.load();
        }
        let Cupti::Ready(version) = self.cupti else {
            return;
        };
        // Another CUPTI client? CUPTI allows one subscriber per process.
        let mut sub: cupti::CUpti_SubscriberHandle = core::ptr::null_mut();
        // SAFETY: CUPTI is loaded; valid out pointer; a callback that does nothing.
        let r =
            unsafe { cupti::cuptiSubscribe(&mut sub, Some(no_callback), core::ptr::null_mut()) };
        if r == R::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED {
            if !self.yielded {
                self.yielded = true;
                sites::state(state::YIELDED, r as u64);
            }
            return;
        }
        if r == R::CUPTI_SUCCESS {
            // At once, so an application profiler starting later can subscribe.
            // SAFETY: the handle cuptiSubscribe just gave.
            unsafe { cupti::cuptiUnsubscribe(sub) };
        }
        // SAFETY: CUPTI is loaded; the callbacks catch panics and match CUPTI's prototypes.
        let r = unsafe {
            cupti::cuptiActivityRegisterCallbacks(
                Some(deliver::buffer_requested),
                Some(deliver::buffer_completed),
            )
        };
        if r != R::CUPTI_SUCCESS {
            sites::state(state::CUPTI_ERROR, r as u64);
            self.cupti = Cupti::Unusable;
            return;
        }
        for (i, k) in KINDS.iter().enumerate() {
            // SAFETY: CUPTI is loaded.
            let r = unsafe { cupti::cuptiActivityEnable(*k) };
            if r != R::CUPTI_SUCCESS {
                for k in &KINDS[..i] {
                    // SAFETY: as above.
                    unsafe { cupti::cuptiActivityDisable(*k) };
                }
                sites::state(state::CUPTI_ERROR, r as u64);
                self.cupti = Cupti::Unusable;
                return;
            }
        }
        self.enable_launch_records();
        // CUPTI's worker returns full buffers this often; the polls above return the rest.
        // SAFETY: CUPTI is loaded. A failure changes nothing that matters: the polls flush.
        unsafe { cupti::cuptiActivityFlushPeriod(FLUSH_PERIOD_MS) };
        deliver::forget_names();
        // SAFETY: getpid has no preconditions.
        ENABLED_IN.store(unsafe { libc::getpid() }, Ordering::Release);
        AT_EXIT.call_once(|| {
            // SAFETY: registers a function of this library, which is never unloaded (the
            // driver keeps it).
            unsafe { libc::atexit(flush_at_exit) };
        });
        self.enabled = true;
        self.yielded = false;
        // Which CUPTI: its path (a name record of its own) and the rule that found it.
        let found = cupti::load().map_or(0, cupti::Found::wire);
        if let Some(path) = cupti::loaded_path()
            && let Ok(c) = std::ffi::CString::new(path.into_os_string().into_encoded_bytes())
        {
            sites::gpuprofd_inject_name(found::PATH_NAME_ID, c.as_ptr());
        }
        sites::state(state::ENABLED, u64::from(version) | found << found::SHIFT);
    }

    /// Driver API records of the launch calls only: their correlation ids and threads join each
    /// kernel to the launch the probes saw. Thread ids as `gettid` gives them (in the process's
    /// PID namespace; gpuprofd maps them to the kernel's). Without them the kernels are still
    /// timed, only not joined: a failure here changes nothing else.
    fn enable_launch_records(&mut self) {
        // SAFETY: CUPTI is loaded.
        let r = unsafe {
            cupti::cuptiSetThreadIdType(
                cupti::CUpti_ActivityThreadIdType::CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM,
            )
        };
        if r != R::CUPTI_SUCCESS {
            return;
        }
        for (i, &cbid) in LAUNCH_CBIDS.iter().enumerate() {
            // SAFETY: CUPTI is loaded.
            if unsafe { cupti::cuptiActivityEnableDriverApi(cbid, 1) } != R::CUPTI_SUCCESS {
                for &c in &LAUNCH_CBIDS[..i] {
                    // SAFETY: as above.
                    unsafe { cupti::cuptiActivityEnableDriverApi(c, 0) };
                }
                return;
            }
        }
    }

    fn disable(&mut self) {
        ENABLED_IN.store(0, Ordering::Release);
        // SAFETY: CUPTI is loaded (we enabled through it). Flush first: what ran while
        // gpuprofd listened reaches it before the kinds are turned off.
        unsafe {
            cupti::cuptiActivityFlushAll(0);
            for k in &KINDS {
                cupti::cuptiActivityDisable(*k);
            }
            for &c in &LAUNCH_CBIDS {
                cupti::cuptiActivityEnableDriverApi(c, 0);
            }
            cupti::cuptiActivityFlushPeriod(0); // CUPTI's default again
        }
        self.enabled = false;
        sites::state(state::DISABLED, 0);
    }
}

unsafe extern "C" fn no_callback(
    _userdata: *mut core::ffi::c_void,
    _domain: cupti::CUpti_CallbackDomain,
    _cbid: cupti::CUpti_CallbackId,
    _data: *const core::ffi::c_void,
) {
}

#[cfg(test)]
mod tests {
    /// A PyTorch process has already loaded its wheel's `libcupti.so.12` (CUDA 12) or
    /// `libcupti.so.13` (CUDA 13); dlopen by that SONAME returns the same library, so cudarc
    /// must try both names (it tries `libcupti.so` first, see docs/INJECTION.md, "Known gaps").
    #[test]
    fn cudarc_looks_for_libcupti_so_12_and_13() {
        let names = cudarc::get_lib_name_candidates("cupti");
        assert_eq!(names[0], "libcupti.so");
        let at = |n: &str| names.iter().position(|x| x == n);
        let (v13, v12) = (at("libcupti.so.13"), at("libcupti.so.12"));
        assert!(v13.is_some() && v12.is_some() && v13 < v12, "{names:?}");
    }
}
