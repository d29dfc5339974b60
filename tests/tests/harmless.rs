//! Never harm the target: the same workloads, run alone and then with the daemon attached (a
//! full capture taking a stack at every call, and the service), must give the same results —
//! the fake libraries' digests of every call's arguments, bytes copied and sizes allocated,
//! every reply line and the exit code. Covered: every probe site the placement module chooses
//! on these libraries (driver trampolines, frame-pointer and CET runtime prologues, return
//! probes of copies, syncs and allocations), with and without frame pointers in the caller.
//! Also a process of 1,000 threads launching at once, counted exactly.
//!
//! Run through `cargo xtask test` (as root, `--test-threads=1`).

use gpuprofd_tests::*;
use std::io::Write;
use std::process::{Command, Stdio};

const RELU: &str = "relu(float*, int)";

/// Every kind of call the fake libraries serve, each probe shape at least once.
const SCRIPT: &[&str] = &[
    "rt_malloc 1048576 3",
    "drv_malloc 4096 2",
    // (pinned copies use the last rt_malloc_host/managed buffer: the 64 KiB one)
    "rt_malloc_managed 512 1",
    "rt_malloc_host 65536 1",
    "drv_malloc_async 1000 2 1",
    "drv_free_async_all 1",
    "drv_malloc_pitch 100 10 1",
    "drv_host_alloc 2048 1",
    "drv_vmm 2097152 1",
    "rt_launch vecAdd 3 64 1 1 256 1 1 0 0",
    "rt_launch_ptsz relu 2 128 2 1 128 1 1 0 1",
    "rt_launch_stub gemm 4 16 16 1 16 16 1 4096 2",
    "rt_launch_ex reduce 5 32 1 1 256 1 1 1024 0",
    "rt_launch_ex_ptsz vecAdd 6 8 1 1 32 1 1 0 0",
    "rt_launch_coop vecAdd 7 2 1 1 64 1 1 0 0",
    "drv_launch triton_poi_fused_add_0 3 10 1 1 128 1 1 0 0",
    "drv_launch_ptsz triton_red_fused_sum_1 2 20 1 1 64 1 1 256 1",
    "drv_launch_ex cupy_scale 4 30 2 1 32 2 1 0 0",
    "drv_launch_ex_ptsz cupy_scale 1 30 2 1 32 2 1 0 0",
    "drv_launch_coop triton_poi_fused_add_0 5 1 1 1 32 1 1 0 0",
    "drv_launch_lib lib_saxpy 6 4 1 1 256 1 1 0 0",
    "drv_launch_kfunc lib_saxpy 2 8 1 1 256 1 1 0 0",
    "rt_memcpy h2d 4096 3",
    "rt_memcpy d2h 1000 2",
    "rt_memcpy d2d 64 1",
    "rt_memcpy h2h 10 4",
    "rt_memcpy default 7 1",
    "rt_memcpy_ptds h2d 5 1",
    "rt_memcpy_pinned h2d 4096 3",
    "rt_memcpy_pinned d2h 1024 1",
    "host_register rt 8192",
    "memcpy_registered h2d 4096 2",
    "host_unregister rt",
    "host_register drv 4096",
    "memcpy_registered d2h 512 1",
    "host_unregister drv",
    "rt_memcpy_async h2d 100 2 1",
    "rt_memcpy_async_ptsz d2h 300 1 2",
    "drv_memcpy h2d 11 1",
    "drv_memcpy_ptds d2d 13 2",
    "drv_memcpy_async d2h 17 3 1",
    "drv_memcpy_async_ptsz h2d 19 1 0",
    "rt_memcpy2d h2d 16 8 2",
    "drv_memcpy2d d2h 32 4 1",
    "rt_memcpy_peer 1000 1",
    "drv_memcpy_peer 2000 2",
    "rt_graph_launch 3 0",
    "drv_graph_launch 2 1",
    "drv_graph_launch_ptsz 1 0",
    "set_delay_us 200",
    "rt_sync_device 3",
    "drv_sync_stream 1 2",
    "rt_sync_stream 2 1",
    "rt_stream_wait_event 1 4",
    "drv_stream_wait_event 1 1",
    "stack_chain 5 3 2",
    "storm 8 500",
    // A call that fails must fail the same way.
    "rt_malloc 0 1",
    "rt_free_all",
    "drv_free_all",
    "digest",
];

/// Kernel launches the script makes (graph launches are not kernel launches).
const LAUNCHES: u64 = 3 + 2 + 4 + 5 + 6 + 7 + 3 + 2 + 4 + 1 + 5 + 6 + 2 + 5 + 3 + 8 * 500;

/// What a run of the script showed: every line it printed (throughput figures cut) and how it
/// ended.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    lines: Vec<String>,
    code: Option<i32>,
}

/// Runs `bin/<exe>` on the whole script, alone: nothing waits on its replies.
fn run(exe: &str, env: &[(&str, &str)]) -> (Outcome, u32) {
    let mut child = Command::new(fakecuda().join("bin").join(exe))
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {exe}: {e}"));
    let pid = child.id();
    {
        let mut stdin = child.stdin.take().unwrap();
        for l in SCRIPT {
            writeln!(stdin, "{l}").unwrap();
        }
        // Holds the process until the daemon has named its frames (they are read live).
        writeln!(stdin, "sleep_ms 300\nexit").unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let lines = text
        .lines()
        .filter(|l| !l.starts_with("ready "))
        .map(|l| match l.find(" result=") {
            Some(i) => l[..i].to_owned(),
            None => l.to_owned(),
        })
        .chain(
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .map(|l| format!("stderr: {l}")),
        )
        .collect();
    (
        Outcome {
            lines,
            code: out.status.code(),
        },
        pid,
    )
}

/// The variants: which executable, which runtime build, whether the daemon's report must
/// account for every launch of the script (the runtime-less workload cannot make them all).
const VARIANTS: &[(&str, Option<&str>, bool)] = &[
    ("workload", None, true),
    ("workload", Some("lib-cet"), true),
    ("workload_nofp", None, true),
    ("workload_drv", None, false),
];

fn env_of(lib: Option<&str>) -> Vec<(&'static str, String)> {
    lib.map(|d| {
        (
            "LD_LIBRARY_PATH",
            fakecuda().join(d).to_str().unwrap().to_owned(),
        )
    })
    .into_iter()
    .collect()
}

fn run_variant(v: &(&str, Option<&str>, bool)) -> (Outcome, u32) {
    let env = env_of(v.1);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, s)| (*k, s.as_str())).collect();
    run(v.0, &env)
}

/// Each variant alone: the reference, which must itself be sane (every command answered `ok`
/// but the one that must fail) and deterministic (two runs agree).
fn references() -> Vec<Outcome> {
    VARIANTS
        .iter()
        .map(|v| {
            let (a, _) = run_variant(v);
            let (b, _) = run_variant(v);
            assert_eq!(a, b, "{v:?} is not deterministic alone");
            assert_eq!(a.code, Some(0), "{v:?}: {:?}", a.lines);
            let digest = a
                .lines
                .iter()
                .find(|l| l.starts_with("digest "))
                .unwrap_or_else(|| panic!("{v:?} printed no digest: {:?}", a.lines));
            assert!(!digest.contains("drv=0000000000000000"), "{digest}");
            if v.2 {
                let errs: Vec<&String> = a.lines.iter().filter(|l| !l.starts_with("ok ")).collect();
                assert_eq!(errs.len(), 1, "{v:?}: {:?}", a.lines);
                assert!(a.lines.contains(&"ok rt_malloc failed=1".to_owned()));
            }
            a
        })
        .collect()
}

fn libs_args(all: &[&str]) -> Vec<String> {
    let mut a = vec!["--all-jobs".to_owned(), "--no-system-libs".to_owned()];
    for d in all {
        a.push("--lib".to_owned());
        a.push(fakecuda().join(d).to_str().unwrap().to_owned());
    }
    a
}

#[test]
fn every_workload_gives_the_same_results_with_a_full_capture_attached() {
    let want = references();
    let mut args = libs_args(&["lib", "lib-cet"]);
    args.extend(["--stack-period", "1", "--no-nvml"].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let d = Daemon::capturing(&args);
    let mut pids = Vec::new();
    for (v, want) in VARIANTS.iter().zip(&want) {
        let (got, pid) = run_variant(v);
        assert_eq!(&got, want, "{v:?} changed under a full capture");
        pids.push(pid);
    }
    let fin = d.stop();
    // The daemon did watch: every launch of the full variants is in its report, with stacks.
    for (v, pid) in VARIANTS.iter().zip(pids) {
        if !v.2 {
            continue;
        }
        let p = process(&fin.report, pid);
        assert_eq!(p["launches"], LAUNCHES, "{v:?}");
        assert_eq!(p["graphs"]["launches"], 6, "{v:?}");
        // Each launch counted once, under the API the program called: the 8 threads of the
        // storm on 2 CPUs are preempted between the runtime's entry and its driver call.
        assert_eq!(
            api_calls(p, "cudaLaunchKernel"),
            8 * 500 + 8 + 3 + 4,
            "{v:?}"
        );
        assert_eq!(api_calls(p, "cuLaunchKernel"), 3 + 6 + 2, "{v:?}");
        assert_eq!(p["stacks"]["dropped"], 0, "{v:?}");
    }
    for (k, n) in fin.report["drops"].as_object().unwrap() {
        assert_eq!(n, 0, "drops of {k}");
    }
    eprintln!(
        "reliability: harmless: {} builds × {} commands ({LAUNCHES} launches each), alone and \
         under a full capture with a stack at every call: every reply, digest and exit code identical",
        VARIANTS.len(),
        SCRIPT.len()
    );
}

#[test]
fn every_workload_gives_the_same_results_under_the_service() {
    let want = references();
    let dir = TempDir::new("harmless-serve");
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[capture]\nlibs = [\"{}\", \"{}\"]\nsystem_libs = false\nstack_period = 1\n\n\
             [nvml]\nenabled = false\n\n[metrics]\nenabled = false\n\n[control]\nsocket = \"{}\"\n",
            fakecuda().join("lib").display(),
            fakecuda().join("lib-cet").display(),
            dir.path().join("ctl.sock").display()
        ),
    )
    .unwrap();
    let mut svc = Service::start(&config, None);
    svc.stderr.wait_for("the service's ready line", |l| {
        l.contains("gpuprofd: ready")
    });
    let mut pids = Vec::new();
    for (v, want) in VARIANTS.iter().zip(&want) {
        let (got, pid) = run_variant(v);
        assert_eq!(&got, want, "{v:?} changed under the service");
        pids.push(pid);
    }
    // The service did watch: its snapshot comes to hold every launch of the full variants.
    for (v, pid) in VARIANTS.iter().zip(pids) {
        if v.2 {
            snapshot_when(&daemon_bin(), &dir.path().join("ctl.sock"), pid, LAUNCHES);
        }
    }
    let (st, said) = svc.stop();
    assert!(
        st.success(),
        "gpuprofd serve ended with {st}: {}",
        said.join("\n")
    );
    eprintln!(
        "reliability: harmless: the same {} builds under the service: identical",
        VARIANTS.len()
    );
}

#[test]
fn a_thousand_threads_launching_at_once_are_counted_exactly() {
    let d = Daemon::all_jobs();
    let mut w = Workload::start();
    w.cmd("storm 1000 20");
    assert_eq!(w.count("cudaLaunchKernel"), 20_000);
    let tgid = w.tgid;
    let fin = d.stop();
    let p = process(&fin.report, tgid);
    assert_eq!(p["launches"], 20_000);
    assert_eq!(kernel_calls(p, RELU), 20_000);
    assert_eq!(api_calls(p, "cudaLaunchKernel"), 20_000);
    assert_eq!(api_calls(p, "cuLaunchKernel"), 0, "counted twice");
    // Every thread's launches belong to this process and no other.
    let others: u64 = fin.report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|q| q["tgid"] != tgid)
        .map(|q| q["launches"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(others, 0);
    eprintln!("reliability: 1,000 threads × 20 launches at once: 20,000 counted, 0 elsewhere");
    for (k, n) in fin.report["drops"].as_object().unwrap() {
        assert_eq!(n, 0, "drops of {k}");
    }
    w.exit();
}

// ---- No probe on a per-CPU private stack.
//
// Linux 6.13+ gives a KPROBE- or TRACEPOINT-type program whose frame is 64 bytes or more a
// per-CPU stack, assuming it cannot be preempted; uprobe programs can be (on kernels booted
// with `preempt=full` or `lazy`), and then a second task running the same program on the same
// CPU overwrites the first one's frame. The probes make a tail call into an empty program
// array, which keeps the verifier from giving them one. On x86-64 the JIT sets a private stack
// up in the prologue as `movabs $stack, %r9; add %gs:this_cpu_off, %r9`: the bytes of that
// `add` are what this looks for, and a control program shows the kernel does it.

/// `bpf(2)` with a zeroed, 128-byte attribute block that starts with `attr`.
fn bpf(cmd: i32, attr: &[u8]) -> std::io::Result<i64> {
    let mut a = [0u8; 128];
    a[..attr.len()].copy_from_slice(attr);
    // SAFETY: the kernel reads at most 128 bytes of `a` (the size passed) and writes into
    // the buffers whose addresses `attr` carries, which the callers keep alive.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, a.as_mut_ptr(), a.len()) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

const BPF_PROG_LOAD: i32 = 5;
const BPF_PROG_GET_FD_BY_ID: i32 = 13;
const BPF_OBJ_GET_INFO_BY_FD: i32 = 15;

/// A program's name and its JIT image (closes `fd`).
fn jited(fd: i32) -> (String, Vec<u8>) {
    let info_of = |info: &mut [u8; 256]| {
        let mut attr = Vec::new();
        attr.extend_from_slice(&(fd as u32).to_ne_bytes());
        attr.extend_from_slice(&256u32.to_ne_bytes());
        attr.extend_from_slice(&(info.as_mut_ptr() as u64).to_ne_bytes());
        bpf(BPF_OBJ_GET_INFO_BY_FD, &attr).expect("BPF_OBJ_GET_INFO_BY_FD");
    };
    let mut info = [0u8; 256];
    info_of(&mut info);
    let len = u32::from_ne_bytes(info[16..20].try_into().unwrap()) as usize;
    let name = String::from_utf8_lossy(&info[64..80])
        .trim_end_matches('\0')
        .to_owned();
    let mut image = vec![0u8; len];
    let mut info = [0u8; 256];
    info[16..20].copy_from_slice(&(len as u32).to_ne_bytes());
    info[24..32].copy_from_slice(&(image.as_mut_ptr() as u64).to_ne_bytes());
    info_of(&mut info);
    // SAFETY: closing a descriptor we own.
    unsafe { libc::close(fd) };
    (name, image)
}

/// `add %gs:disp32, %r9`: the per-CPU base added to a private stack's address.
fn sets_up_a_private_stack(image: &[u8]) -> bool {
    image
        .windows(5)
        .any(|w| w == [0x65, 0x4c, 0x03, 0x0c, 0x25])
}

/// The ids of the BPF programs whose descriptors (programs or links) process `pid` holds.
fn programs_held_by(pid: u32) -> Vec<u32> {
    let mut ids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .expect("the daemon's fdinfo")
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .filter_map(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("prog_id:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

#[test]
fn no_probe_runs_on_a_per_cpu_private_stack() {
    require_bpf();
    // Control: a KPROBE-type program with a 64-byte frame and no tail call.
    // *(u64 *)(r10 - 64) = 0; r0 = *(u64 *)(r10 - 64); r0 = 0; exit
    let insns: [[u8; 8]; 4] = [
        [0x7a, 0x0a, 0xc0, 0xff, 0, 0, 0, 0],
        [0x79, 0xa0, 0xc0, 0xff, 0, 0, 0, 0],
        [0xb7, 0x00, 0, 0, 0, 0, 0, 0],
        [0x95, 0, 0, 0, 0, 0, 0, 0],
    ];
    let license = b"GPL\0";
    let mut attr = Vec::new();
    attr.extend_from_slice(&2u32.to_ne_bytes()); // BPF_PROG_TYPE_KPROBE
    attr.extend_from_slice(&(insns.len() as u32).to_ne_bytes());
    attr.extend_from_slice(&(insns.as_ptr() as u64).to_ne_bytes());
    attr.extend_from_slice(&(license.as_ptr() as u64).to_ne_bytes());
    let fd = bpf(BPF_PROG_LOAD, &attr).expect("load the control program") as i32;
    let (_, control) = jited(fd);
    assert!(
        !control.is_empty(),
        "the kernel shows no JIT image of a program (bpf_jit_enable=0, or kptr_restrict=2 \
         hides it): this test cannot look at the probes' code here"
    );
    let kernel_does_it = sets_up_a_private_stack(&control);
    eprintln!(
        "control program (64-byte frame, no tail call): {}",
        if kernel_does_it {
            "on a per-CPU private stack"
        } else {
            "on the kernel stack (this kernel has no private stacks: nothing to guard against)"
        }
    );
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let (major, minor) = {
        let mut v = release
            .trim()
            .split(['.', '-'])
            .map(|x| x.parse::<u32>().unwrap_or(0));
        (v.next().unwrap_or(0), v.next().unwrap_or(0))
    };
    if (major, minor) >= (6, 13) {
        assert!(
            kernel_does_it,
            "Linux {release} should put the control program on a private stack: the JIT's \
             prologue changed, and this test must learn its new shape"
        );
    }

    let d = Daemon::all_jobs();
    let ids = programs_held_by(d.pid());
    let mut names = Vec::new();
    for id in ids {
        let Ok(fd) = bpf(BPF_PROG_GET_FD_BY_ID, &id.to_ne_bytes()) else {
            continue; // unloaded since
        };
        let (name, image) = jited(fd as i32);
        assert!(!image.is_empty(), "no JIT image for {name}");
        assert!(
            !sets_up_a_private_stack(&image),
            "{name} runs on a per-CPU private stack: a preempted probe's frame can be overwritten"
        );
        names.push(name);
    }
    names.sort();
    // Names are cut at 15 bytes by the kernel.
    let expected = [
        "api_ret",
        "copy_2d",
        "copy_3d",
        "copy_linear",
        "copy_rt3d",
        "ctx_entry",
        "ctx_ret",
        "drv_launch",
        "drv_launch_ex",
        "gpu_activity",
        "gpu_name",
        "gpu_state",
        "graph_launch",
        "mem_entry",
        "memset_entry",
        "mmap_enter",
        "mmap_exit",
        "name_entry",
        "name_ret",
        "nccl_entry",
        "nccl_ret",
        "proc_exec",
        "proc_exit",
        "register_functi",
        "rt_launch",
        "rt_launch_ex",
        "sync_entry",
    ];
    assert_eq!(names, expected, "the daemon's programs");
    eprintln!(
        "reliability: {} probe programs checked, none on a per-CPU private stack",
        names.len()
    );
    drop(d.stop());
}
