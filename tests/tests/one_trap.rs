//! One trap per runtime launch (`--launch-traps one`, the default but for `--pid`): the shared
//! runtime's launch entries are left unprobed, each runtime launch is seen at the driver call
//! it makes, and the report says the same as with both layers probed — the same runtime API
//! names, kernel names, configurations and counts, recorded or counted in the kernel — while
//! the program's own driver launches stay driver launches.
//!
//! Run through `cargo xtask test` (as root, `--test-threads=1`).

use gpuprofd_tests::*;
use serde_json::Value;

/// Every runtime launch variant, and the program's own driver launches beside them.
const SCRIPT: [&str; 9] = [
    "rt_launch vecAdd 3 64 1 1 256 1 1 0 0",
    "rt_launch_ptsz relu 2 128 2 1 128 1 1 0 1",
    "rt_launch_stub gemm 4 16 16 1 16 16 1 4096 2",
    "rt_launch_ex reduce 5 32 1 1 256 1 1 1024 0",
    "rt_launch_ex_ptsz vecAdd 6 8 1 1 32 1 1 0 0",
    "rt_launch_coop vecAdd 7 2 1 1 64 1 1 0 0",
    "drv_launch triton_poi_fused_add_0 8 10 1 1 128 1 1 0 0",
    "drv_launch_ex cupy_scale 9 30 2 1 32 2 1 0 0",
    "drv_launch_coop triton_poi_fused_add_0 10 1 1 1 32 1 1 0 0",
];

/// The runtime launch entries the fake runtime exports (`cudaLaunchKernel`, `_ptsz`,
/// `cudaLaunchKernelExC`, `_ptsz`, `cudaLaunchCooperativeKernel`, `_ptsz`).
const RUNTIME_LAUNCH_ENTRIES: u64 = 6;

/// Each kernel row as `(api, name, calls, grid, block, shared bytes)`, sorted.
fn kernel_rows(p: &Value) -> Vec<(String, String, u64, String, String, u64)> {
    let mut v: Vec<_> = p["kernels"]
        .as_array()
        .expect("kernels")
        .iter()
        .map(|k| {
            (
                k["api"].as_str().unwrap().to_owned(),
                k["name"].as_str().unwrap().to_owned(),
                k["calls"].as_u64().unwrap(),
                k["grid"].to_string(),
                k["block"].to_string(),
                k["shared_bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

fn probes(report: &Value, soname: &str) -> u64 {
    report["libraries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["soname"] == soname)
        .unwrap_or_else(|| panic!("{soname} not attached"))["probes"]
        .as_u64()
        .unwrap()
}

/// The report of the script under `gpuprofd --all-jobs EXTRA`, and the workload's tgid.
fn run(extra: &[&str]) -> (Value, u32) {
    let lib = fakecuda().join("lib");
    let mut args: Vec<&str> = all_jobs_args(&lib).to_vec();
    args.extend_from_slice(extra);
    let d = Daemon::start(&args);
    let mut w = Workload::start();
    w.script(&SCRIPT);
    // The fake driver ran one driver launch per runtime launch, and the program's own.
    assert_eq!(w.count("cuLaunchKernel"), 3 + 4 + 8);
    assert_eq!(w.count("cudaLaunchKernel"), 3 + 4);
    let tgid = w.tgid;
    // The daemon stops first: a driver launch is told from a runtime's by the process's
    // mappings, read while it runs (see docs/USAGE.md, "One trap per launch").
    let r = d.stop().report;
    w.exit();
    (r, tgid)
}

fn expected_rows() -> Vec<(String, String, u64, String, String, u64)> {
    let vec_add = "vecAdd(float const*, float const*, float*, int)";
    let mut v: Vec<_> = [
        ("cudaLaunchKernel", vec_add, 3, "[64,1,1]", "[256,1,1]", 0),
        (
            "cudaLaunchKernel_ptsz",
            "relu(float*, int)",
            2,
            "[128,2,1]",
            "[128,1,1]",
            0,
        ),
        (
            "cudaLaunchKernel",
            "gemm(float const*, float const*, float*, int, int, int)",
            4,
            "[16,16,1]",
            "[16,16,1]",
            4096,
        ),
        (
            "cudaLaunchKernelExC",
            "void demo::reduce<256>(float const*, float*, int)",
            5,
            "[32,1,1]",
            "[256,1,1]",
            1024,
        ),
        (
            "cudaLaunchKernelExC_ptsz",
            vec_add,
            6,
            "[8,1,1]",
            "[32,1,1]",
            0,
        ),
        (
            "cudaLaunchCooperativeKernel",
            vec_add,
            7,
            "[2,1,1]",
            "[64,1,1]",
            0,
        ),
        (
            "cuLaunchKernel",
            "triton_poi_fused_add_0",
            8,
            "[10,1,1]",
            "[128,1,1]",
            0,
        ),
        (
            "cuLaunchKernelEx",
            "cupy_scale",
            9,
            "[30,2,1]",
            "[32,2,1]",
            0,
        ),
        (
            "cuLaunchCooperativeKernel",
            "triton_poi_fused_add_0",
            10,
            "[1,1,1]",
            "[32,1,1]",
            0,
        ),
    ]
    .iter()
    .map(|&(a, n, c, g, b, s)| (a.to_owned(), n.to_owned(), c, g.to_owned(), b.to_owned(), s))
    .collect();
    v.sort();
    v
}

#[test]
fn one_trap_reports_what_two_traps_report_with_fewer_probes() {
    let (one, t1) = run(&["--launch-traps", "one"]);
    let (two, t2) = run(&["--launch-traps", "two"]);
    let (p1, p2) = (process(&one, t1), process(&two, t2));
    assert_eq!(kernel_rows(p1), expected_rows());
    assert_eq!(kernel_rows(p2), expected_rows());
    for p in [p1, p2] {
        assert_eq!(p["launches"], 3 + 2 + 4 + 5 + 6 + 7 + 8 + 9 + 10);
        assert_eq!(p["unnamed_launches"], 0);
    }
    // The runtime's launch entries are the only probes one trap leaves out; the driver keeps
    // every probe.
    assert_eq!(
        probes(&two, "libcudart.so.12") - probes(&one, "libcudart.so.12"),
        RUNTIME_LAUNCH_ENTRIES
    );
    assert_eq!(probes(&two, "libcuda.so.1"), probes(&one, "libcuda.so.1"));
}

#[test]
fn launches_counted_in_the_kernel_keep_the_runtime_api_with_one_trap() {
    let (r, t) = run(&["--launch-traps", "one", "--count-launches", "50ms"]);
    let p = process(&r, t);
    assert_eq!(kernel_rows(p), expected_rows());
    assert_eq!(p["unnamed_launches"], 0);
}

#[test]
fn a_runtime_that_tail_calls_the_driver_is_one_launch_with_one_trap() {
    // The driver's launch entry runs on whatever stack the runtime left: the caller is still
    // the runtime's code (a launch cannot be a sibling call, see pairing.rs, but the wrappers
    // around it are built differently).
    let tail = fakecuda().join("lib-tail");
    let d = Daemon::start(&[&all_jobs_args(&tail)[..], &["--launch-traps", "one"]].concat());
    let mut w = Workload::spawn("workload", &[("LD_LIBRARY_PATH", tail.to_str().unwrap())]);
    w.script(&[
        "rt_launch vecAdd 4 8 1 1 64 1 1 0 0",
        "drv_launch triton_poi_fused_add_0 2 10 1 1 128 1 1 0 0",
    ]);
    let tgid = w.tgid;
    let r = d.stop().report;
    w.exit();
    let p = process(&r, tgid);
    let mut want = vec![
        ("cuLaunchKernel".to_owned(), 2),
        ("cudaLaunchKernel".to_owned(), 4),
    ];
    want.sort();
    let got: Vec<_> = api_table(p)
        .into_iter()
        .filter(|(a, _)| a.contains("Launch"))
        .collect();
    assert_eq!(got, want);
    assert_eq!(
        kernel_calls(p, "vecAdd(float const*, float const*, float*, int)"),
        4
    );
}

#[test]
fn pid_attach_keeps_two_traps_by_default() {
    // A running process's older handles are named by its host stubs' symbols only with the
    // runtime's entries probed: `auto` keeps both for --pid.
    let mut w = Workload::start();
    w.script(&["rt_launch vecAdd 1 8 1 1 64 1 1 0 0"]);
    let lib = fakecuda().join("lib");
    let pid = w.tgid.to_string();
    let d = Daemon::start(&["--pid", &pid, "--lib", lib.to_str().unwrap()]);
    w.script(&["rt_launch vecAdd 5 8 1 1 64 1 1 0 0"]);
    let r = d.stop().report;
    w.exit();
    let p = process(&r, w_tgid(&pid));
    assert_eq!(
        kernel_rows(p),
        vec![(
            "cudaLaunchKernel".to_owned(),
            "vecAdd(float const*, float const*, float*, int)".to_owned(),
            5,
            "[8,1,1]".to_owned(),
            "[64,1,1]".to_owned(),
            0
        )]
    );
    assert_eq!(
        probes(&r, "libcudart.so.12") - probes_of_runtime_without_launches(),
        RUNTIME_LAUNCH_ENTRIES
    );
}

fn w_tgid(pid: &str) -> u32 {
    pid.parse().unwrap()
}

/// The fake runtime's probes with one trap (its launch entries left out), from a daemon run
/// the way `run` does.
fn probes_of_runtime_without_launches() -> u64 {
    let lib = fakecuda().join("lib");
    let mut args: Vec<&str> = all_jobs_args(&lib).to_vec();
    args.extend_from_slice(&["--launch-traps", "one"]);
    let d = Daemon::start(&args);
    probes(&d.stop().report, "libcudart.so.12")
}
