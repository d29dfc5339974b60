//! Which CUPTI the library calls. Everything of cudarc's CUPTI bindings (types, enums, record
//! layouts) is re-exported; only the entry points the library calls are resolved here, from a
//! library this module chooses.
//!
//! Why not cudarc's own loader: it opens the first of a fixed list of names, `libcupti.so`
//! first. A PyTorch process has already loaded its wheel's CUPTI (`libcupti.so.13` in
//! `site-packages/nvidia/cu13/lib`) when the driver starts this library; where a CUDA toolkit
//! on the loader's search path also has a `libcupti.so` (a different file), `dlopen` maps that
//! second copy. Whichever copy talks to the driver first owns its profiling interface, and the
//! other copy's `cuptiSubscribe` then fails with `CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED`:
//! on an H200 (2026-11-27) torch.profiler recorded no GPU activity at all in a process that had
//! the library loaded. So, in order:
//!
//! 1. the CUPTI already mapped in the process (found with `dl_iterate_phdr`), so there is only
//!    ever one copy and the application's own profiler keeps working;
//! 2. a CUPTI beside a CUDA runtime the process has mapped: the same directory (CUDA 13's
//!    toolkit and wheels keep both in one) or pip's CUDA 12 layout
//!    (`nvidia/cuda_runtime/lib` → `nvidia/cuda_cupti/lib`): the copy the framework's profiler
//!    would load later;
//! 3. cudarc's list of names, in its order.
//!
//! The function pointer types below are written against cudarc's types from the prototypes in
//! cudarc's bindings (CUDA 13.0's `cupti_activity.h`, `cupti_callbacks.h`); they are checked by
//! the `prototypes_match_cudarc` test, which assigns each of cudarc's functions to its type.

use std::ffi::{CStr, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub use cudarc::cupti::sys::*;
use cudarc::driver::sys::CUcontext;

macro_rules! entry_points {
    ($( $name:ident ( $($arg:ident : $ty:ty),* ) ;)*) => {
        /// The entry points, resolved from one library.
        #[allow(non_snake_case)]
        struct Api {
            $( $name: unsafe extern "C" fn($($ty),*) -> CUptiResult, )*
        }

        impl Api {
            fn resolve(lib: &libloading::Library) -> Result<Api, String> {
                Ok(Api {
                    $( $name: {
                        // SAFETY: the symbol is CUPTI's function of that name, whose prototype
                        // is the type given (see the module's header).
                        let s = unsafe {
                            lib.get::<unsafe extern "C" fn($($ty),*) -> CUptiResult>(
                                concat!(stringify!($name), "\0").as_bytes(),
                            )
                        };
                        *s.map_err(|e| format!("{}: {e}", stringify!($name)))?
                    }, )*
                })
            }
        }

        $(
            /// CUPTI's function of the same name, in the library [`load`] chose.
            ///
            /// # Safety
            /// As CUPTI's; [`load`] returned `Ok` before.
            #[allow(non_snake_case, clippy::missing_safety_doc)]
            pub unsafe fn $name($($arg: $ty),*) -> CUptiResult {
                let api = &LOADED.get().expect("cupti::load succeeded before any call").1;
                // SAFETY: the caller's promise; the library is never unloaded.
                unsafe { (api.$name)($($arg),*) }
            }
        )*

        #[cfg(test)]
        mod prototypes {
            use super::*;
            /// Each of cudarc's functions coerces to the pointer type used here: a prototype
            /// written differently would not compile.
            #[test]
            #[allow(non_snake_case)]
            fn prototypes_match_cudarc() {
                $(
                    let $name: unsafe fn($($ty),*) -> CUptiResult = cudarc::cupti::sys::$name;
                    let _ = $name;
                )*
            }
        }
    };
}

entry_points! {
    cuptiGetVersion(version: *mut u32);
    cuptiGetTimestamp(timestamp: *mut u64);
    cuptiSubscribe(subscriber: *mut CUpti_SubscriberHandle, callback: CUpti_CallbackFunc, userdata: *mut core::ffi::c_void);
    cuptiUnsubscribe(subscriber: CUpti_SubscriberHandle);
    cuptiActivityRegisterCallbacks(requested: CUpti_BuffersCallbackRequestFunc, completed: CUpti_BuffersCallbackCompleteFunc);
    cuptiActivityEnable(kind: CUpti_ActivityKind);
    cuptiActivityDisable(kind: CUpti_ActivityKind);
    cuptiActivityEnableDriverApi(cbid: CUpti_CallbackId, enable: u8);
    cuptiSetThreadIdType(type_: CUpti_ActivityThreadIdType);
    cuptiActivityFlushPeriod(time: u32);
    cuptiActivityFlushAll(flag: u32);
    cuptiActivityGetNextRecord(buffer: *mut u8, valid_bytes: usize, record: *mut *mut CUpti_Activity);
    cuptiActivityGetNumDroppedRecords(context: CUcontext, stream_id: u32, dropped: *mut usize);
}

/// The chosen library (kept open for the life of the process) and its entry points.
static LOADED: OnceLock<(libloading::Library, Api)> = OnceLock::new();

/// Where the loaded CUPTI came from ([`load`]'s rule that found it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    /// Already mapped in the process.
    InProcess,
    /// Beside a CUDA runtime the process has mapped.
    BesideRuntime,
    /// By cudarc's list of names.
    ByName,
}

impl Found {
    /// Its wire value (`profiler_common::gpu::found`).
    pub fn wire(self) -> u64 {
        use profiler_common::gpu::found;
        match self {
            Found::InProcess => found::IN_PROCESS,
            Found::BesideRuntime => found::BESIDE_RUNTIME,
            Found::ByName => found::BY_NAME,
        }
    }
}

/// The loaded CUPTI's path as the loader mapped it (found again among the mapped objects
/// after the load: a name the loader searched for becomes its file).
pub fn loaded_path() -> Option<PathBuf> {
    LOADED.get()?;
    mapped_objects().into_iter().find(|p| is_cupti(p))
}

/// Opens CUPTI by the rule in the module's header (once; later calls return the first
/// outcome's kind). `Err` when no candidate opens or one lacks an entry point.
pub fn load() -> Result<Found, String> {
    static OUTCOME: OnceLock<Result<Found, String>> = OnceLock::new();
    OUTCOME
        .get_or_init(|| {
            let mapped = mapped_objects();
            let (found, candidates): (Found, Vec<OsString>) =
                if let Some(p) = mapped.iter().find(|p| is_cupti(p)) {
                    (Found::InProcess, vec![p.clone().into_os_string()])
                } else {
                    let beside = beside_runtimes(&mapped);
                    if beside.is_empty() {
                        let names = cudarc::get_lib_name_candidates("cupti");
                        (
                            Found::ByName,
                            names.into_iter().map(OsString::from).collect(),
                        )
                    } else {
                        (
                            Found::BesideRuntime,
                            beside.into_iter().map(PathBuf::into_os_string).collect(),
                        )
                    }
                };
            let mut last = String::from("no candidate");
            for c in &candidates {
                // SAFETY: CUPTI's initialisers are the only code this runs; a CUPTI already
                // mapped is returned as is (same file).
                match unsafe { libloading::Library::new(c) } {
                    Ok(lib) => {
                        let api = Api::resolve(&lib)?;
                        let _ = LOADED.set((lib, api));
                        return Ok(found);
                    }
                    Err(e) => last = format!("{}: {e}", Path::new(c).display()),
                }
            }
            Err(last)
        })
        .clone()
}

/// `libcupti.so` or `libcupti.so.N…` by file name.
fn is_cupti(p: &Path) -> bool {
    profiler_common::gpu::is_cupti_file(p.file_name().map(OsStr::as_bytes).unwrap_or_default())
}

/// CUPTI files that a framework would load beside the CUDA runtimes the process maps, most
/// specific first: `libcupti.so.N` (N the runtime's major version) in the runtime's directory,
/// then in pip's `nvidia/cuda_cupti/lib` beside `nvidia/cuda_runtime/lib`.
fn beside_runtimes(mapped: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for p in mapped {
        let Some(name) = p.file_name().map(OsStr::as_bytes) else {
            continue;
        };
        let Some(major) = name.strip_prefix(b"libcudart.so.") else {
            continue;
        };
        let major: Vec<u8> = major
            .iter()
            .copied()
            .take_while(u8::is_ascii_digit)
            .collect();
        if major.is_empty() {
            continue;
        }
        let mut file = b"libcupti.so.".to_vec();
        file.extend_from_slice(&major);
        let file = OsStr::from_bytes(&file);
        let Some(dir) = p.parent() else { continue };
        let mut dirs = vec![dir.to_path_buf()];
        if dir.ends_with("cuda_runtime/lib") {
            dirs.push(dir.join("../../cuda_cupti/lib"));
        }
        for d in dirs {
            let c = d.join(file);
            if c.is_file() && !out.contains(&c) {
                out.push(c);
            }
        }
    }
    out
}

/// The paths of the objects mapped in this process, in load order.
fn mapped_objects() -> Vec<PathBuf> {
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: dl_iterate_phdr passes a valid info and our data pointer.
        let (info, out) = unsafe { (&*info, &mut *(data as *mut Vec<PathBuf>)) };
        if !info.dlpi_name.is_null() {
            // SAFETY: a NUL-terminated name owned by the loader for the call's duration.
            let n = unsafe { CStr::from_ptr(info.dlpi_name) }.to_bytes();
            if !n.is_empty() {
                out.push(PathBuf::from(OsStr::from_bytes(n)));
            }
        }
        0
    }
    let mut out: Vec<PathBuf> = Vec::new();
    // SAFETY: the callback only reads the info and appends to `out`, which outlives the call.
    unsafe {
        libc::dl_iterate_phdr(
            Some(each),
            &mut out as *mut Vec<PathBuf> as *mut libc::c_void,
        )
    };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cupti_file_names() {
        for n in [
            "/a/libcupti.so",
            "/a/libcupti.so.13",
            "libcupti.so.2025.1.0",
        ] {
            assert!(is_cupti(Path::new(n)), "{n}");
        }
        for n in [
            "/a/libcupti_static.a",
            "/a/libcuptiX.so",
            "/a/libnvperf_host.so",
        ] {
            assert!(!is_cupti(Path::new(n)), "{n}");
        }
    }

    #[test]
    fn beside_a_runtime_in_both_pip_layouts() {
        let t = std::env::temp_dir().join(format!("gpuprofd-cupti-{}", std::process::id()));
        let cu13 = t.join("nvidia/cu13/lib");
        let rt12 = t.join("nvidia/cuda_runtime/lib");
        let cupti12 = t.join("nvidia/cuda_cupti/lib");
        for d in [&cu13, &rt12, &cupti12] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(cu13.join("libcupti.so.13"), b"").unwrap();
        std::fs::write(cupti12.join("libcupti.so.12"), b"").unwrap();
        let got = beside_runtimes(&[
            PathBuf::from("/usr/lib/libc.so.6"),
            cu13.join("libcudart.so.13"),
            rt12.join("libcudart.so.12"),
            // No CUPTI beside this one: nothing.
            t.join("elsewhere/libcudart.so.12"),
        ]);
        assert_eq!(
            got,
            vec![
                cu13.join("libcupti.so.13"),
                rt12.join("../../cuda_cupti/lib/libcupti.so.12")
            ]
        );
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn this_process_maps_libc() {
        let m = mapped_objects();
        assert!(
            m.iter().any(|p| p
                .file_name()
                .is_some_and(|n| n.as_bytes().starts_with(b"libc.so"))),
            "{m:?}"
        );
    }
}
