//! The injection library (profiler-inject, `libgpuprofd_inject.so`) in a real process under a
//! real kernel, with no daemon: the fake driver loads it from `CUDA_INJECTION64_PATH` at
//! `cuInit`, the fake CUPTI (`FAKECUPTI_LOG`) says what the library asked of CUPTI, and perf
//! uprobes stand in for gpuprofd: one on the activity site with the semaphore as its reference
//! counter (what raises the semaphore, as gpuprofd's probes do), and counting ones without a
//! reference counter on the three sites (how many times the library called each).
//!
//! Checked: nothing is loaded or enabled while nobody listens; activity is enabled after the
//! attach and disabled after the detach (generous deadlines, no timing assertion); every record
//! reaches the activity site in batches of 16, each kernel name once per enable; no CUPTI on the
//! library path: the library reports it once and does nothing; an unsupported CUPTI version is
//! reported once; an in-process CUPTI client makes the library yield until it leaves; the
//! application's results are the same with and without the library.
//!
//! Run through `cargo xtask test` (as root, `--test-threads=1`).

use gpuprofd_tests::*;
use object::{Object, ObjectSegment, ObjectSymbol};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The library `cargo xtask build` made (next to the daemon it built).
fn inject_lib() -> PathBuf {
    let p = daemon_bin().with_file_name("libgpuprofd_inject.so");
    assert!(
        p.exists(),
        "{} does not exist: `cargo xtask build` builds it",
        p.display()
    );
    p
}

/// File offsets of a symbol (through its segment), as uprobes and reference counters take them.
fn file_offset(lib: &Path, name: &str) -> u64 {
    let data = std::fs::read(lib).unwrap();
    let f = object::File::parse(&*data).unwrap();
    let sym = f
        .dynamic_symbols()
        .find(|s| s.name() == Ok(name))
        .unwrap_or_else(|| panic!("{} exports no {name}", lib.display()));
    let a = sym.address();
    for seg in f.segments() {
        let (off, size) = seg.file_range();
        if a >= seg.address() && a < seg.address() + size {
            return a - seg.address() + off;
        }
    }
    panic!(
        "{name} at {a:#x} is in no file-backed segment of {}",
        lib.display()
    );
}

/// A perf uprobe event (the `uprobe` PMU) on `lib`+`offset` in thread `tid`, counting hits;
/// with `ref_ctr`, the kernel keeps that process's semaphore (at file offset `ref_ctr`) raised
/// while it exists. Closed on drop.
struct Uprobe {
    fd: i32,
    _path: std::ffi::CString,
}

fn sysfs_u64(p: &str) -> u64 {
    let s = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("read {p}: {e}"));
    s.trim().parse().unwrap_or_else(|_| panic!("{p}: {s}"))
}

impl Uprobe {
    fn attach(tid: u32, lib: &Path, offset: u64, ref_ctr: Option<u64>) -> Uprobe {
        require_bpf();
        let pmu = sysfs_u64("/sys/bus/event_source/devices/uprobe/type") as u32;
        let fmt = std::fs::read_to_string(
            "/sys/bus/event_source/devices/uprobe/format/ref_ctr_offset",
        )
        .expect("this kernel's uprobe PMU has no ref_ctr_offset (Linux 4.20 or later is needed)");
        assert_eq!(
            fmt.trim(),
            "config:32-63",
            "ref_ctr_offset's place in config"
        );
        let path = std::ffi::CString::new(lib.to_str().unwrap()).unwrap();
        // struct perf_event_attr, 128 bytes (PERF_ATTR_SIZE_VER7); all flags 0: enabled,
        // counting, this thread only.
        let mut attr = [0u64; 16];
        attr[0] = pmu as u64 | (128u64 << 32); // type, size
        attr[1] = ref_ctr.unwrap_or(0) << 32; // config: ref_ctr_offset in bits 32-63, not a retprobe
        attr[7] = path.as_ptr() as u64; // config1: uprobe_path
        attr[8] = offset; // config2: probe_offset
        // SAFETY: a valid attr buffer of the size it states; the path outlives the event.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                attr.as_ptr(),
                tid as libc::pid_t,
                -1,
                -1,
                8u64, // PERF_FLAG_FD_CLOEXEC
            )
        } as i32;
        assert!(
            fd >= 0,
            "perf_event_open(uprobe {}+{offset:#x}, tid {tid}): {}",
            lib.display(),
            std::io::Error::last_os_error()
        );
        Uprobe { fd, _path: path }
    }

    fn hits(&self) -> u64 {
        let mut n = 0u64;
        // SAFETY: reading one u64 count from our own perf fd.
        let r = unsafe { libc::read(self.fd, (&raw mut n).cast(), 8) };
        assert_eq!(r, 8, "read perf count: {}", std::io::Error::last_os_error());
        n
    }
}

impl Drop for Uprobe {
    fn drop(&mut self) {
        // SAFETY: our own fd.
        unsafe { libc::close(self.fd) };
    }
}

/// Waits (bounded: 20 s) for `f` to hold.
fn eventually(what: &str, f: impl Fn() -> bool) {
    let end = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Several of the library's polls: long enough for anything it would do to have happened.
fn a_few_polls() {
    std::thread::sleep(Duration::from_millis(5 * profiler_poll_ms()));
}

fn profiler_poll_ms() -> u64 {
    100 // profiler_common::gpu::POLL_MS (the tests crate does not depend on profiler-common)
}

/// The thread of `tgid` named `comm`.
fn thread_named(tgid: u32, comm: &str) -> u32 {
    let mut found = None;
    eventually(&format!("thread {comm} in {tgid}"), || {
        for e in std::fs::read_dir(format!("/proc/{tgid}/task")).unwrap() {
            let e = e.unwrap();
            let name = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
            if name.trim() == comm {
                return true;
            }
        }
        false
    });
    for e in std::fs::read_dir(format!("/proc/{tgid}/task")).unwrap() {
        let e = e.unwrap();
        if std::fs::read_to_string(e.path().join("comm"))
            .unwrap_or_default()
            .trim()
            == comm
        {
            found = Some(e.file_name().to_string_lossy().parse().unwrap());
        }
    }
    found.unwrap()
}

fn maps(tgid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{tgid}/maps")).unwrap()
}

/// The fake CUPTI's log: its lines ("" when it wrote none).
/// The fake CUPTI's log without the library's flushes of completed records (`flush 0`: one at
/// each poll while enabled, and one at disable; [`flushes`] counts them).
fn log_lines(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| *l != "flush 0")
        .map(str::to_owned)
        .collect()
}

/// The library's `flush 0` calls so far.
fn flushes(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| *l == "flush 0")
        .count()
}

/// The log without its `deliver N` lines, and the N.
fn split_log(log: &Path) -> (Vec<String>, Vec<u64>) {
    let (d, rest): (Vec<String>, Vec<String>) = log_lines(log)
        .into_iter()
        .partition(|l| l.starts_with("deliver "));
    (rest, d.iter().map(|l| l[8..].parse().unwrap()).collect())
}

const DISABLE: [&str; 12] = [
    "disable 10",
    "disable 1",
    "disable 2",
    "driverapi 307 0",
    "driverapi 442 0",
    "driverapi 652 0",
    "driverapi 653 0",
    "driverapi 477 0",
    "driverapi 478 0",
    "driverapi 514 0",
    "driverapi 515 0",
    "period 0",
];

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// A workload with the library injected; `cupti`: the fake CUPTI on its library path.
fn workload(dir: &TempDir, cupti: bool, extra: &[(&str, &str)]) -> (Workload, PathBuf) {
    let log = dir.path().join("cupti.log");
    let lib = inject_lib();
    let cupti_dir = fakecuda().join("lib-cupti");
    assert!(
        cupti_dir.join("libcupti.so.12").exists(),
        "{} has no libcupti.so.12: tests/fakecuda/build.sh builds it",
        cupti_dir.display()
    );
    let mut env = vec![
        ("CUDA_INJECTION64_PATH", lib.to_str().unwrap().to_owned()),
        ("FAKECUPTI_LOG", log.to_str().unwrap().to_owned()),
        (
            "LD_LIBRARY_PATH",
            if cupti {
                cupti_dir.to_str().unwrap().to_owned()
            } else {
                String::new()
            },
        ),
    ];
    for (k, v) in extra {
        env.push((k, v.to_string()));
    }
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let w = Workload::spawn("workload", &env);
    assert!(
        maps(w.tgid).contains(lib.to_str().unwrap()),
        "the driver did not load CUDA_INJECTION64_PATH"
    );
    (w, log)
}

/// Counters on the library's control thread (`gpuprofd-inj`): its state reports, and the names
/// it announces (the flush at disable runs there).
struct Sites {
    lib: PathBuf,
    ctl: u32,
    state: Uprobe,
    name_ctl: Uprobe,
}

impl Sites {
    fn on(tgid: u32) -> Sites {
        let lib = inject_lib();
        let ctl = thread_named(tgid, "gpuprofd-inj");
        Sites {
            state: Uprobe::attach(ctl, &lib, file_offset(&lib, "gpuprofd_inject_state"), None),
            name_ctl: Uprobe::attach(ctl, &lib, file_offset(&lib, "gpuprofd_inject_name"), None),
            ctl,
            lib,
        }
    }
    /// What gpuprofd does: a probe on the activity site with the semaphore as its reference
    /// counter, here bound to thread `tid` (the kernel raises the semaphore of its process) and
    /// counting that thread's calls. Every probe on one site must name the same reference
    /// counter (the kernel refuses another with EINVAL), so the activity site is only ever
    /// probed this way.
    fn listen_on(&self, tid: u32) -> Uprobe {
        Uprobe::attach(
            tid,
            &self.lib,
            file_offset(&self.lib, "gpuprofd_inject_activity"),
            Some(file_offset(&self.lib, "gpuprofd_inject_semaphore")),
        )
    }
    fn listen(&self) -> Uprobe {
        self.listen_on(self.ctl)
    }
}

#[test]
fn the_sites_are_five_byte_nops_and_the_semaphore_is_file_backed() {
    let lib = inject_lib();
    for f in [
        "gpuprofd_inject_activity",
        "gpuprofd_inject_name",
        "gpuprofd_inject_state",
    ] {
        let data = std::fs::read(&lib).unwrap();
        let off = file_offset(&lib, f) as usize;
        assert_eq!(
            &data[off..off + 6],
            &[0x0f, 0x1f, 0x44, 0x00, 0x00, 0xc3],
            "{f}"
        );
    }
    let data = std::fs::read(&lib).unwrap();
    let elf = object::File::parse(&*data).unwrap();
    use object::ObjectSection;
    let probes = elf.section_by_name(".probes").expect("a .probes section");
    assert_eq!(
        probes.kind(),
        object::SectionKind::Data,
        ".probes is file-backed data"
    );
    assert_eq!(probes.size(), 2);
    let sem = elf
        .dynamic_symbols()
        .find(|s| s.name() == Ok("gpuprofd_inject_semaphore"))
        .unwrap();
    assert_eq!(sem.address(), probes.address());
    assert_eq!(sem.size(), 2);
    assert_eq!(elf.elf_soname(), Some(&b"libgpuprofd_inject.so"[..]));
}

trait Soname {
    fn elf_soname(&self) -> Option<&[u8]>;
}
impl Soname for object::File<'_> {
    fn elf_soname(&self) -> Option<&[u8]> {
        // The dynamic section's DT_SONAME, through the raw ELF reader.
        use object::read::elf::{Dyn, ElfFile64, FileHeader};
        let object::File::Elf64(e) = self else {
            return None;
        };
        let e: &ElfFile64 = e;
        let endian = e.endian();
        let hdr = e.elf_header();
        let data = e.data();
        let sections = hdr.sections(endian, data).ok()?;
        let (dynamic, link) = sections.dynamic(endian, data).ok()??;
        let strings = sections.strings(endian, data, link).ok()?;
        for d in dynamic {
            if d.d_tag(endian) as u32 == object::elf::DT_SONAME {
                return d.string(endian, strings).ok();
            }
        }
        None
    }
}

#[test]
fn enabled_only_while_a_probe_listens() {
    let dir = TempDir::new("inject-listen");
    let (mut w, log) = workload(&dir, true, &[]);
    let sites = Sites::on(w.tgid);
    w.script(&["rt_launch relu 4 1 1 1 32 1 1 0 0", "rt_memcpy h2d 4096 1"]);
    a_few_polls();
    // Nobody listens: CUPTI is not even loaded, and the library said nothing.
    assert!(
        !maps(w.tgid).contains("libcupti"),
        "CUPTI loaded with nobody listening"
    );
    assert_eq!(log_lines(&log), Vec::<String>::new());
    assert_eq!(sites.state.hits(), 0);

    let probe = sites.listen();
    eventually("activity enabled", || {
        log_lines(&log).len() >= CUPTI_ENABLE.len()
    });
    assert_eq!(log_lines(&log), strs(&CUPTI_ENABLE));
    assert_eq!(sites.state.hits(), 1, "ENABLED");
    // CUPTI's periodic flush returns only full buffers (the fake's too): the library asks for
    // the completed records at each poll.
    eventually("a flush at each poll", || flushes(&log) >= 3);
    // CUPTI's worker thread delivers full buffers: count there too.
    let worker = thread_named(w.tgid, "fakecupti-wrk");
    let lib = inject_lib();
    let act = sites.listen_on(worker);
    let names = Uprobe::attach(
        worker,
        &lib,
        file_offset(&lib, "gpuprofd_inject_name"),
        None,
    );

    // 20 + 3 kernels (two names) and their 23 launch calls, 2 copies, 1 memset: 49 records.
    w.script(&[
        "gpu_ns kernel 5000",
        "rt_launch relu 20 1 1 1 32 1 1 0 0",
        "rt_launch vecAdd 3 1 1 1 32 1 1 0 0",
        "rt_memcpy h2d 4096 2",
        "rt_memset 4096 1",
    ]);
    eventually("49 records delivered", || {
        split_log(&log).1.iter().sum::<u64>() == 49
    });
    let (_, delivered) = split_log(&log);
    let batches: u64 = delivered.iter().map(|n| n.div_ceil(16)).sum();
    eventually("every batch handed over", || {
        act.hits() + probe.hits() == batches
    });
    assert_eq!(
        names.hits() + sites.name_ctl.hits(),
        3,
        "the CUPTI library's path (at the enable), relu and vecAdd, once each"
    );

    drop(act); // (it holds the semaphore too)
    drop(probe);
    eventually("activity disabled", || {
        split_log(&log).0.len() >= CUPTI_ENABLE.len() + DISABLE.len()
    });
    // Everything was delivered before the detach: nothing after the flush.
    let lines = log_lines(&log);
    assert_eq!(lines[lines.len() - DISABLE.len()..], strs(&DISABLE)[..]);
    let (calls, _) = split_log(&log);
    assert_eq!(calls, [strs(&CUPTI_ENABLE), strs(&DISABLE)].concat());
    assert_eq!(sites.state.hits(), 2, "ENABLED, DISABLED");
    let before = split_log(&log).1.iter().sum::<u64>();
    w.cmd("rt_launch relu 5 1 1 1 32 1 1 0 0");
    a_few_polls();
    assert_eq!(
        split_log(&log).1.iter().sum::<u64>(),
        before,
        "records after disable"
    );

    // Listening again: enabled again, and the names are announced again.
    let probe = sites.listen();
    eventually("enabled again", || {
        split_log(&log).0.len() >= 2 * CUPTI_ENABLE.len() + DISABLE.len()
    });
    w.cmd("rt_launch relu 1 1 1 1 32 1 1 0 0");
    eventually("the CUPTI path and relu's name again", || {
        names.hits() + sites.name_ctl.hits() == 5
    });
    assert_eq!(sites.state.hits(), 3);
    drop(probe);
    eventually("disabled again", || {
        split_log(&log).0.len() == 2 * (CUPTI_ENABLE.len() + DISABLE.len())
    });
    w.exit();
}

/// The pool bounds what the library holds: with CUPTI's completions held back, CUPTI gets 8
/// buffers of 1 MiB (4,228 launches each: a kernel record of 208 bytes and its launch call's of
/// 40, 8,456 records) and drops the rest, which the library reports; the launches never wait.
#[test]
fn a_full_pool_drops_and_counts_without_blocking_the_application() {
    let dir = TempDir::new("inject-drop");
    let (mut w, log) = workload(&dir, true, &[]);
    let sites = Sites::on(w.tgid);
    let _probe = sites.listen();
    eventually("activity enabled", || {
        log_lines(&log).len() >= CUPTI_ENABLE.len()
    });
    assert_eq!(sites.state.hits(), 1, "ENABLED");
    // Drops are reported from CUPTI's thread, as the buffer completes.
    let lib = inject_lib();
    let worker = thread_named(w.tgid, "fakecupti-wrk");
    let state_w = Uprobe::attach(
        worker,
        &lib,
        file_offset(&lib, "gpuprofd_inject_state"),
        None,
    );
    w.cmd("cupti_hold on");
    w.cmd("rt_launch relu 41000 1 1 1 32 1 1 0 0");
    assert_eq!(split_log(&log).1, Vec::<u64>::new(), "held");
    w.cmd("cupti_hold off");
    eventually("8 buffers delivered", || split_log(&log).1.len() == 8);
    let lines = log_lines(&log);
    let mut want = strs(&CUPTI_ENABLE);
    want.push("deliver 8456".into());
    want.push(format!("dropped {}", 2 * 41000 - 8 * 8456));
    want.extend(std::iter::repeat_n("deliver 8456".to_owned(), 7));
    assert_eq!(lines, want);
    eventually("DROPPED reported", || state_w.hits() == 1);
    assert_eq!(
        sites.state.hits(),
        1,
        "nothing more from the control thread"
    );
    // Buffers came back: records flow again.
    w.cmd("rt_launch relu 3 1 1 1 32 1 1 0 0");
    eventually("3 more, with their launch calls", || {
        split_log(&log).1.iter().sum::<u64>() == 8 * 8456 + 6
    });
    w.exit();
}

/// What CUPTI still holds when the process exits is delivered on the way out.
#[test]
fn records_are_flushed_at_exit() {
    let dir = TempDir::new("inject-exit");
    let (mut w, log) = workload(&dir, true, &[]);
    let sites = Sites::on(w.tgid);
    let _probe = sites.listen();
    eventually("activity enabled", || {
        log_lines(&log).len() >= CUPTI_ENABLE.len()
    });
    w.cmd("rt_launch relu 5 1 1 1 32 1 1 0 0");
    // A forked child that exits normally runs the exit handlers too: it has no CUPTI threads
    // (a call could hang on a lock another thread held at the fork), so it must not flush.
    assert_eq!(w.cmd("fork_exit"), "ok fork_exit status=0");
    assert_eq!(split_log(&log).0, strs(&CUPTI_ENABLE), "the child flushed");
    w.exit();
    let (calls, delivered) = split_log(&log);
    assert_eq!(calls, [strs(&CUPTI_ENABLE), strs(&["flush 1"])].concat());
    // 5 kernels and their 5 launch calls.
    assert_eq!(delivered.iter().sum::<u64>(), 10, "{delivered:?}");
}

#[test]
fn without_cupti_the_library_says_so_once_and_does_nothing() {
    let dir = TempDir::new("inject-nocupti");
    let (w, log) = workload(&dir, false, &[]);
    let sites = Sites::on(w.tgid);
    let _probe = sites.listen();
    eventually("NO_CUPTI", || sites.state.hits() == 1);
    a_few_polls();
    assert_eq!(sites.state.hits(), 1, "said once");
    assert!(!maps(w.tgid).contains("libcupti"), "{}", maps(w.tgid));
    assert_eq!(log_lines(&log), Vec::<String>::new());
    w.exit();
}

/// CUDA 13.0's CUPTI (API version 130001, its wheel's `cupti_version.h`) is read like 12.9's:
/// the fields the library reads keep their places (profiler-inject's `kernel10_reads_as_kernel9`).
#[test]
fn cupti_13_0_is_enabled_like_12_9() {
    let dir = TempDir::new("inject-cupti13");
    let (w, log) = workload(&dir, true, &[("FAKECUPTI_VERSION", "130001")]);
    let sites = Sites::on(w.tgid);
    let _probe = sites.listen();
    eventually("activity enabled", || {
        log_lines(&log).len() >= CUPTI_ENABLE.len()
    });
    assert_eq!(log_lines(&log), strs(&CUPTI_ENABLE));
    w.exit();
}

#[test]
fn an_unsupported_cupti_version_is_left_alone() {
    let dir = TempDir::new("inject-version");
    let (w, log) = workload(&dir, true, &[("FAKECUPTI_VERSION", "130100")]);
    let sites = Sites::on(w.tgid);
    let _probe = sites.listen();
    eventually("UNSUPPORTED_VERSION", || sites.state.hits() == 1);
    a_few_polls();
    assert_eq!(sites.state.hits(), 1, "said once");
    assert_eq!(
        log_lines(&log),
        Vec::<String>::new(),
        "nothing asked of CUPTI"
    );
    w.exit();
}

#[test]
fn the_library_yields_to_an_application_cupti_client() {
    let dir = TempDir::new("inject-yield");
    let (mut w, log) = workload(&dir, true, &[]);
    let sites = Sites::on(w.tgid);
    assert_eq!(w.cmd("cupti_client on"), "ok cupti_client result=0");
    let probe = sites.listen();
    // The library tries at every poll and reports once.
    eventually("three refused subscriptions", || {
        log_lines(&log)
            .iter()
            .filter(|l| *l == "subscribe busy")
            .count()
            >= 3
    });
    assert_eq!(sites.state.hits(), 1, "YIELDED, once");
    let lines = log_lines(&log);
    assert_eq!(lines[0], "subscribe ok", "the application's");
    assert!(
        lines[1..].iter().all(|l| l == "subscribe busy"),
        "{lines:?}"
    );
    // The application's profiler leaves: the library enables at a later poll.
    assert_eq!(w.cmd("cupti_client off"), "ok cupti_client result=0");
    eventually("enabled after the client left", || {
        log_lines(&log).last().map(String::as_str) == Some("period 200")
    });
    let lines = log_lines(&log);
    let tail = lines[lines.len() - CUPTI_ENABLE.len() - 1..].to_vec();
    assert_eq!(
        tail,
        [vec!["unsubscribe".to_owned()], strs(&CUPTI_ENABLE)].concat()
    );
    assert_eq!(sites.state.hits(), 2, "YIELDED, ENABLED");
    drop(probe);
    w.exit();
}

/// A framework has loaded its own CUPTI (PyTorch's wheel, at import) and a CUDA toolkit's
/// `libcupti.so`, another file, is on the loader's path. The library must use the copy already
/// in the process: a second copy would own the driver's profiling interface, and the
/// framework's profiler, starting later, would be refused (torch.profiler recorded nothing on an
/// H200 for that reason, 2026-11-27).
#[test]
fn the_library_uses_the_cupti_already_in_the_process() {
    let dir = TempDir::new("inject-two-cupti");
    let framework = fakecuda().join("lib-cupti/libcupti.so.12");
    let system = fakecuda().join("lib-cupti-system");
    let (mut w, log) = workload(
        &dir,
        false,
        &[("LD_LIBRARY_PATH", system.to_str().unwrap())],
    );
    assert_eq!(
        w.cmd(&format!("cupti_preload {}", framework.display())),
        "ok cupti_preload"
    );
    let sites = Sites::on(w.tgid);
    let probe = sites.listen();
    eventually("the library enabled", || {
        log_lines(&log).len() >= CUPTI_ENABLE.len()
    });
    assert_eq!(log_lines(&log), strs(&CUPTI_ENABLE));
    assert_eq!(sites.state.hits(), 1, "ENABLED");
    // The framework's profiler starts now, through its copy: it is the process's CUPTI.
    assert_eq!(w.cmd("cupti_client on"), "ok cupti_client result=0");
    let m = maps(w.tgid);
    assert!(m.contains(framework.to_str().unwrap()), "{m}");
    assert!(
        !m.contains(system.join("libcupti.so").to_str().unwrap()),
        "a second CUPTI: {m}"
    );
    assert_eq!(
        log_lines(&log)[CUPTI_ENABLE.len()..],
        strs(&["subscribe ok"])
    );
    drop(probe);
    w.exit();
}

const SCRIPT: &[&str] = &[
    "rt_malloc 1048576 2",
    "rt_launch vecAdd 3 64 1 1 256 1 1 0 0",
    "rt_launch relu 5 1 1 1 32 1 1 0 0",
    "rt_memcpy h2d 65536 3",
    "rt_memcpy d2h 4096 2",
    "rt_memset 4096 2",
    "rt_sync_device 2",
    "drv_launch triton_poi_fused_add_0 3 10 1 1 128 1 1 0 0",
    "rt_free_all",
    "digest",
    "exit",
];

/// Runs the script in `bin/workload` with `env`, calling `ready(tgid)` between its ready line and
/// the script; returns every line it printed after ready, and its exit status.
fn results(env: &[(&str, &str)], ready: impl FnOnce(u32)) -> (Vec<String>, Option<i32>) {
    use std::io::{BufRead, BufReader, Write};
    let mut c = std::process::Command::new(fakecuda().join("bin/workload"));
    c.envs(env.iter().copied())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, format!("ready {}\n", child.id()));
    ready(child.id());
    let mut stdin = child.stdin.take().unwrap();
    for l in SCRIPT {
        writeln!(stdin, "{l}").unwrap();
    }
    drop(stdin);
    let lines: Vec<String> = out.lines().map(Result::unwrap).collect();
    let st = wait_bounded(&mut child);
    (lines, st.code())
}

#[test]
fn results_are_the_same_with_and_without_the_library() {
    let (want, code) = results(&[], |_| {});
    assert_eq!(code, Some(0));
    assert_eq!(want.len(), SCRIPT.len() + 1, "{want:?}"); // + the digest line
    assert!(
        want.iter().any(|l| l.starts_with("digest drv=")),
        "{want:?}"
    );
    let lib = inject_lib();
    let cupti_dir = fakecuda().join("lib-cupti");
    for (cupti, what) in [(false, "no CUPTI"), (true, "CUPTI enabled")] {
        let dir = TempDir::new("inject-same");
        let log = dir.path().join("cupti.log");
        let env = [
            ("CUDA_INJECTION64_PATH", lib.to_str().unwrap()),
            ("FAKECUPTI_LOG", log.to_str().unwrap()),
            (
                "LD_LIBRARY_PATH",
                if cupti {
                    cupti_dir.to_str().unwrap()
                } else {
                    ""
                },
            ),
        ];
        let mut held = None;
        let (got, code) = results(&env, |tgid| {
            let sites = Sites::on(tgid);
            let probe = sites.listen();
            eventually("the library's first state", || sites.state.hits() == 1);
            held = Some((sites, probe));
        });
        assert_eq!(code, Some(0), "{what}");
        assert_eq!(got, want, "{what}");
        if cupti {
            let (calls, delivered) = split_log(&log);
            assert_eq!(
                calls,
                [strs(&CUPTI_ENABLE), strs(&["flush 1"])].concat(),
                "{what}"
            );
            // 3 + 5 + 3 kernels and their 11 launch calls, 3 + 2 copies, 2 memsets: all of
            // them, the last at exit.
            assert_eq!(delivered.iter().sum::<u64>(), 29, "{delivered:?}");
        }
    }
}

/// `gpuprofd doctor` names a process that has the library and maps two CUPTI libraries (a
/// framework's and another on the loader's path): the driver takes one CUPTI client per
/// process, so a profiler started in it records nothing (what the H200 showed, 2026-11-27).
#[test]
fn doctor_names_a_process_with_two_cupti_libraries() {
    let dir = TempDir::new("inject-doctor-two-cupti");
    let (mut w, _log) = workload(&dir, false, &[]);
    let framework = fakecuda().join("lib-cupti/libcupti.so.12");
    let system = fakecuda().join("lib-cupti-system/libcupti.so");
    for p in [&framework, &system] {
        assert_eq!(
            w.cmd(&format!("cupti_preload {}", p.display())),
            "ok cupti_preload"
        );
    }
    let (code, out, err) = run_daemon(&["doctor", "--json", "--no-system-libs"]);
    assert!(code == 0 || code == 1, "{err}");
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    let c = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "gpu_time_library")
        .unwrap();
    assert_eq!(c["ok"], false, "{c}");
    // Sorted by path: "lib-cupti-system" before "lib-cupti/".
    let want = format!(
        "{} (workload: {}, {})",
        w.tgid,
        system.display(),
        framework.display()
    );
    let detail = c["detail"].as_str().unwrap();
    assert!(
        detail.contains("map two CUPTI libraries") && detail.contains(&want),
        "{c}"
    );
    w.exit();
}
