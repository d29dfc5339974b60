//! libgpuprofd_inject.so: gpuprofd's opt-in injection library (issue 31, layer 3). The CUDA
//! driver loads it into a process at `cuInit` when `CUDA_INJECTION64_PATH` names it (as it does
//! for Nsight Systems); it then gives gpuprofd each kernel's, copy's and memset's exact start
//! and end on the GPU, from CUPTI's activity API, while gpuprofd listens, and does nothing
//! otherwise.
//!
//! Why a library of our own in the process: only CUPTI, inside the process, sees when work ran
//! on the GPU; the probes outside see when it was enqueued.
//!
//! **The channel** (`profiler_common::gpu`, fixed there): three exported sites that do nothing
//! (`gpuprofd_inject_activity`, `_name`, `_state`; [`sites`]) and a `u16` semaphore in a
//! file-backed `.probes` section. gpuprofd attaches uprobes to the sites with the semaphore's
//! file offset as their reference counter, so the kernel raises the semaphore while it
//! listens. No socket, file or environment is shared: it works across containers, and a
//! process nobody listens to pays one load every [`POLL_MS`] on one thread. Every probe on one
//! site must name the same reference counter: the kernel refuses a uprobe at an offset that
//! already has one with another (`EINVAL`).
//!
//! **Threads.** `InitializeInjection` (called by the driver inside `cuInit`) only starts one
//! thread, `gpuprofd-inj` ([`control`]), and returns: `cuInit` never waits. That thread reads
//! the semaphore every `POLL_MS`; when it rises it loads CUPTI (first time only), checks the
//! API version and that no other CUPTI client is active, registers the buffer callbacks and
//! enables CONCURRENT_KERNEL, MEMCPY and MEMSET; while it stays up it asks CUPTI for the
//! completed records at each poll (CUPTI's own periodic flush returns only full buffers); when
//! it falls it flushes and disables them.
//! CUPTI hands completed buffers to its own worker thread ([`deliver`]), which converts the
//! records ([`records`]) and calls the sites. The application's launching threads only ever
//! run `bufferRequested` ([`pool`]): a lock-free take from a fixed pool, no waiting.
//!
//! **Bounds.** At most [`pool::BUFFERS`] buffers of [`pool::BUFFER_BYTES`]; when all are in
//! flight CUPTI gets no buffer, drops records and counts them; the library reports the count as
//! state `DROPPED`. The sites are synchronous (a probe runs and returns), so the library itself
//! never queues or drops.
//!
//! **CUPTI versions.** Records are read with the layouts of `CUpti_ActivityKernel9`,
//! `CUpti_ActivityMemcpy6` and `CUpti_ActivityMemset4`, which are what CUPTI API versions 26-28
//! (CUDA 12.8, 12.9, 12.9 Update 1) write; any other version: state `UNSUPPORTED_VERSION`, and
//! nothing is enabled. No CUPTI library found (cudarc's candidates, `libcupti.so.12` among
//! them): state `NO_CUPTI` once, nothing else, ever.
//!
//! **Yielding.** CUPTI allows one subscriber per process. Before each enable the library
//! subscribes and unsubscribes at once: `CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED` means
//! another client (torch.profiler/Kineto, Nsight) is active, so it reports `YIELDED` and tries
//! again at later polls. Gaps: a client that starts *after* the library enabled is not seen
//! (its `cuptiActivityRegisterCallbacks` replaces ours; our buffers then complete to it, which
//! is why they are `malloc`ed: its `free` is harmless); a client that only registers activity
//! callbacks without subscribing is not seen either; and a client subscribing in the
//! microseconds between our subscribe and unsubscribe gets the error instead of us.
//!
//! **Exit.** While enabled, an `atexit` handler flushes what CUPTI still holds (forced), so a
//! short program's last records reach gpuprofd; a process killed by a signal loses up to
//! about a poll ([`POLL_MS`]) of them. A child forked after the enable never calls CUPTI (it
//! has none of CUPTI's threads): the handler flushes only in the pid that enabled.
//!
//! **Never harms the job.** Every entry from C (`InitializeInjection`, CUPTI's callbacks)
//! catches panics; no CUPTI call runs on an application thread; results are never touched.

pub mod control;
pub mod cupti;
pub mod deliver;
pub mod pool;
pub mod records;
pub mod sites;

pub use profiler_common::gpu::POLL_MS;

use std::sync::atomic::{AtomicBool, Ordering};

static STARTED: AtomicBool = AtomicBool::new(false);

/// What the CUDA driver calls once from `cuInit` when `CUDA_INJECTION64_PATH` names this
/// library. Starts the control thread and returns at once; a second call does nothing.
/// Returns 1 (success), as CUPTI's injection sample does; 0 only when the thread could not be
/// started (the driver ignores the value either way).
#[unsafe(no_mangle)]
pub extern "C" fn InitializeInjection() -> i32 {
    std::panic::catch_unwind(|| {
        if STARTED.swap(true, Ordering::AcqRel) {
            return 1;
        }
        match std::thread::Builder::new()
            .name("gpuprofd-inj".into())
            .spawn(control::run)
        {
            Ok(_) => 1,
            Err(_) => 0,
        }
    })
    .unwrap_or(0)
}
