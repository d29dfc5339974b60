//! Only the selected processes pay: under `--pid`, the probes' breakpoints are in that process
//! alone; another process running the same libraries at the same time is not trapped at all.
//! Real eBPF on the fake CUDA libraries.
//!
//! "Not trapped" is read from the neighbour's memory, which is exact: a uprobe is an `int3`
//! (0xcc) the kernel writes over the first byte of the probed instruction in each address space
//! it probes, so a process's text of a library, compared with the file, shows one changed byte
//! per probe site it would trap on, and none where it would not. (Program run counters would not
//! tell: a process trapped by a link made for another process runs no program either.)
//!
//! Run through `cargo xtask test` (as root, `--test-threads=1`).

use gpuprofd_tests::*;
use std::os::unix::fs::FileExt;

/// The breakpoints in `pid`'s executable mappings of the fake library `name` (`libcuda.so.1`,
/// `libcudart.so.12`): the bytes that differ from the file, each checked to be an `int3`.
fn breakpoints(pid: u32, name: &str) -> usize {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).expect("mem");
    let mut found = 0;
    let mut mapped = false;
    for line in maps.lines() {
        // start-end perms offset dev inode path
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 6 || !f[1].contains('x') || !f[5].ends_with(&format!("/lib/{name}")) {
            continue;
        }
        mapped = true;
        let (start, end) = f[0].split_once('-').unwrap();
        let start = u64::from_str_radix(start, 16).unwrap();
        let end = u64::from_str_radix(end, 16).unwrap();
        let offset = u64::from_str_radix(f[2], 16).unwrap();
        let file = std::fs::read(f[5]).unwrap();
        let len = (end - start).min(file.len() as u64 - offset) as usize;
        let mut text = vec![0u8; len];
        mem.read_exact_at(&mut text, start)
            .expect("read the process's text");
        let want = &file[offset as usize..offset as usize + len];
        for (i, (&got, &was)) in text.iter().zip(want).enumerate() {
            if got != was {
                assert_eq!(
                    got,
                    0xcc,
                    "{name}+{:#x}: not a breakpoint",
                    offset + i as u64
                );
                found += 1;
            }
        }
    }
    assert!(mapped, "process {pid} does not map {name}");
    found
}

/// The `pid:` of each of the daemon's `uprobe_multi` links (fdinfo; 0: every process, or a
/// link whose process the kernel no longer holds).
fn link_pids(daemon: u32) -> Vec<u32> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{daemon}/fdinfo")).expect("daemon fdinfo") {
        let text = std::fs::read_to_string(e.unwrap().path()).unwrap_or_default();
        if !text.contains("link_type:\tuprobe_multi")
            && !text.contains("link_type:\turetprobe_multi")
        {
            continue;
        }
        let pid = text
            .lines()
            .find_map(|l| l.strip_prefix("pid:"))
            .unwrap_or_else(|| panic!("no pid line: {text}"));
        v.push(pid.trim().parse().unwrap());
    }
    v
}

/// Waits (bounded) until `f` holds.
fn wait_until(what: &str, f: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !f() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

const LIBS: [&str; 2] = ["libcuda.so.1", "libcudart.so.12"];
const VEC_ADD: &str = "vecAdd(float const*, float const*, float*, int)";

/// The same script in both processes: the selected one's counts are exact.
fn both_run(target: &mut Workload, other: &mut Workload) {
    for w in [&mut *target, &mut *other] {
        w.script(&[
            "rt_launch vecAdd 4 4 1 1 64 1 1 0 0",
            "drv_launch triton_poi_fused_add_0 2 10 1 1 128 1 1 0 0",
            "rt_memcpy h2d 4096 2",
            "rt_sync_device 3",
        ]);
    }
}

fn check_target(report: &serde_json::Value, tgid: u32, other: u32) {
    assert!(
        !has_process(report, other),
        "a process not asked for was captured"
    );
    let p = process(report, tgid);
    assert_eq!(p["launches"], 6);
    assert_eq!(kernel_calls(p, VEC_ADD), 4);
    assert_eq!(api_calls(p, "cudaLaunchKernel"), 4);
    assert_eq!(api_calls(p, "cuLaunchKernel"), 2);
    assert_eq!(api_calls(p, "cudaMemcpy"), 2);
    assert_eq!(api_calls(p, "cudaDeviceSynchronize"), 3);
}

#[test]
fn under_pid_only_that_process_has_breakpoints() {
    let mut target = Workload::start();
    let mut other = Workload::start();
    let pid = target.tgid.to_string();
    let d = Daemon::start(&["--pid", &pid, "--no-system-libs", "--no-nvml"]);
    assert!(
        d.stderr
            .seen
            .iter()
            .any(|l| l.contains("uprobe_multi links in the selected processes only")),
        "the ready line says where the probes are"
    );
    for lib in LIBS {
        assert!(
            breakpoints(target.tgid, lib) > 0,
            "{lib}: no breakpoint in the target"
        );
        assert_eq!(
            breakpoints(other.tgid, lib),
            0,
            "{lib}: the neighbour is trapped"
        );
    }
    // Every link is the target's (the kernel's own account of it).
    let pids = link_pids(d.pid());
    assert!(!pids.is_empty());
    assert!(pids.iter().all(|&p| p == target.tgid), "{pids:?}");
    both_run(&mut target, &mut other);
    // Still none after its calls (none was added on the way).
    for lib in LIBS {
        assert_eq!(
            breakpoints(other.tgid, lib),
            0,
            "{lib}: the neighbour is trapped"
        );
    }
    let (tt, to) = (target.tgid, other.tgid);
    let f = d.stop();
    check_target(&f.report, tt, to);
    // The links went with the daemon: the target's text is the file's again.
    for lib in LIBS {
        assert_eq!(breakpoints(tt, lib), 0, "{lib}: breakpoints left behind");
    }
    target.exit();
    other.exit();
}

#[test]
fn a_process_that_maps_the_library_after_the_start_gets_no_breakpoint() {
    let mut target = Workload::start();
    let pid = target.tgid.to_string();
    let d = Daemon::start(&["--pid", &pid, "--no-system-libs", "--no-nvml"]);
    // Started after the links were made: the kernel's check at mmap keeps it clean too.
    let mut other = Workload::start();
    for lib in LIBS {
        assert_eq!(
            breakpoints(other.tgid, lib),
            0,
            "{lib}: the late neighbour is trapped"
        );
    }
    both_run(&mut target, &mut other);
    let (tt, to) = (target.tgid, other.tgid);
    check_target(&d.stop().report, tt, to);
    target.exit();
    other.exit();
}

#[test]
fn every_process_is_trapped_when_probes_go_to_all_and_the_check_sees_it() {
    // GPUPROFD_PER_PROCESS=0: today's attach, for every process that maps the library. The
    // neighbour then has the same breakpoints as the target (the check above can fail), and
    // the in-kernel filter still records the target alone.
    let mut target = Workload::start();
    let mut other = Workload::start();
    let pid = target.tgid.to_string();
    let d = Daemon::start_with(
        "report.json",
        &["--pid", &pid, "--no-system-libs", "--no-nvml"],
        &[("GPUPROFD_PER_PROCESS", "0")],
    );
    for lib in LIBS {
        let n = breakpoints(target.tgid, lib);
        assert!(n > 0, "{lib}");
        assert_eq!(breakpoints(other.tgid, lib), n, "{lib}");
    }
    assert!(link_pids(d.pid()).iter().all(|&p| p == 0));
    both_run(&mut target, &mut other);
    let (tt, to) = (target.tgid, other.tgid);
    check_target(&d.stop().report, tt, to);
    target.exit();
    other.exit();
}

#[test]
fn without_uprobe_multi_probes_go_to_every_process_with_a_note() {
    let mut target = Workload::start();
    let mut other = Workload::start();
    let pid = target.tgid.to_string();
    let d = Daemon::start_with(
        "report.json",
        &["--pid", &pid, "--no-system-libs", "--no-nvml"],
        &[("GPUPROFD_UPROBE_MULTI", "0")],
    );
    let notes: Vec<&String> = d
        .stderr
        .seen
        .iter()
        .filter(|l| l.contains("cannot be limited to chosen processes"))
        .collect();
    assert_eq!(notes.len(), 1, "one note: {notes:?}");
    for lib in LIBS {
        assert!(breakpoints(other.tgid, lib) > 0, "{lib}");
    }
    both_run(&mut target, &mut other);
    let (tt, to) = (target.tgid, other.tgid);
    check_target(&d.stop().report, tt, to);
    target.exit();
    other.exit();
}

#[test]
fn an_exec_from_another_thread_gets_new_probes() {
    // The kernel ties a link to the process's main thread; an exec from a second thread ends
    // that thread (the second one takes the pid), and the old links hold nothing: the daemon
    // makes new ones and says that calls in between may be missing.
    let mut w = Workload::start();
    let pid = w.tgid.to_string();
    let mut d = Daemon::start(&["--pid", &pid, "--no-system-libs", "--no-nvml"]);
    w.cmd("rt_launch vecAdd 2 4 1 1 64 1 1 0 0");
    let bin = fakecuda().join("bin/workload");
    w.exec_thread(bin.to_str().unwrap());
    let tgid = w.tgid;
    // The new program's links, and its breakpoints, before it is asked to call.
    wait_until("the new program is probed", || {
        let pids = link_pids(d.pid());
        !pids.is_empty()
            && pids.iter().all(|&p| p == tgid)
            && LIBS.iter().all(|lib| breakpoints(tgid, lib) > 0)
    });
    d.stderr.wait_for("the warning", |l| {
        l.contains(&format!(
            "process {tgid} ran exec from a thread other than its main one"
        ))
    });
    w.cmd("rt_launch vecAdd 3 4 1 1 64 1 1 0 0");
    w.cmd("drv_launch triton_poi_fused_add_0 4 10 1 1 128 1 1 0 0");
    let r = d.stop().report;
    // One entry per program, as for any exec: the old one's 2 launches, the new one's 7.
    let programs: Vec<(u64, u64, u64)> = r["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["tgid"] == tgid)
        .map(|p| {
            (
                p["launches"].as_u64().unwrap(),
                api_calls(p, "cudaLaunchKernel"),
                api_calls(p, "cuLaunchKernel"),
            )
        })
        .collect();
    assert_eq!(programs, [(2, 2, 0), (7, 3, 4)]);
    w.exit();
}
