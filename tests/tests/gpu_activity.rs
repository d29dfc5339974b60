//! GPU activity from the injection library, the daemon's side, end to end without CUPTI: the
//! stand-in `libgpuprofd_inject.so` (its three sites and its `.probes` semaphore only, as
//! profiler-common/src/gpu.rs fixes them) driven by `inject_workload` with scripted batches,
//! names and states. The semaphore is the kernel's uprobe reference counter: raised in the
//! selected process while gpuprofd is attached, untouched in another, back to 0 after it
//! stops. The report carries the exact per-kernel GPU totals, copies, memsets and state, on the
//! process that handed them over. Real eBPF; the real library's end-to-end test (fake CUPTI)
//! is a separate one.
//!
//! Run through `cargo xtask test` (as root, `--test-threads=1`).

use gpuprofd_tests::*;
use serde_json::{Value, json};
use std::process::Command;

/// The semaphore's value the workload reads now.
fn sem(w: &mut Workload) -> u64 {
    let r = w.cmd("sem");
    r.rsplit("value=").next().unwrap().parse().unwrap()
}

/// `(mangled, calls, count, total_ns, min_ns, max_ns, share)` of each kernel row with GPU time.
type Row = (String, u64, u64, u64, u64, u64, f64);

fn gpu_rows(p: &Value) -> Vec<Row> {
    p["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| !k["gpu_time"].is_null())
        .map(|k| {
            let g = &k["gpu_time"];
            let n = |f: &str| g[f].as_u64().unwrap_or_else(|| panic!("{f}: {g}"));
            (
                k["mangled"].as_str().unwrap().to_owned(),
                k["calls"].as_u64().unwrap(),
                n("count"),
                n("total_ns"),
                n("min_ns"),
                n("max_ns"),
                g["share"].as_f64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn the_semaphore_follows_the_daemon_and_gpu_times_are_reported_exactly() {
    let mut a = Workload::spawn("inject_workload", &[]);
    let mut b = Workload::spawn("inject_workload", &[]);
    assert_eq!(sem(&mut a), 0, "nobody listens yet");
    let pid = a.tgid.to_string();
    let d = Daemon::capturing(&["--pid", &pid, "--no-system-libs", "--no-nvml"]);
    // One count per probed site (three sites) in the selected process, none in the other.
    a.cmd("wait_sem 5000");
    assert_eq!(sem(&mut a), 3);
    assert_eq!(
        sem(&mut b),
        0,
        "a process that is not selected is not told to enable"
    );

    a.script(&[
        "state 1 130000", // enabled, CUPTI API version 13.0
        "name 1 _Z4gemmPfS_",
        "name 2 _Z4reluPf",
        "kernels 1 0 7 10000 40", // 40 × 10 µs on device 0, CUPTI stream 7
        "kernels 1 1 9 50000 1",  // 1 × 50 µs on device 1, stream 9
        "kernels 2 0 7 2000 5",   // relu: 5 × 2 µs
        "copy 1 1048576 3000",    // h2d, 1 MiB in 3 µs
        "copy 2 4096 500",        // d2h
        "memset 256 700",
        "flush",
        "state 6 4", // 4 records dropped: counted, the state stays `enabled`
    ]);
    // The process that is not selected hands over too: nothing of it may be reported.
    b.script(&[
        "state 1 130000",
        "name 1 _Z5otherv",
        "kernels 1 0 1 999 3",
        "flush",
    ]);

    let f = d.stop();
    // The daemon is gone: the kernel took its count back.
    a.cmd("wait_sem_zero 2000");
    assert_eq!(sem(&mut a), 0);
    let (ta, tb) = (a.tgid, b.tgid);
    a.exit();
    b.exit();

    assert!(!has_process(&f.report, tb), "not selected: {}", f.report);
    let p = process(&f.report, ta);
    let g = &p["gpu_time"];
    assert_eq!(
        (&g["basis"], &g["source"], &g["state"], &g["state_detail"]),
        (
            &json!("measured"),
            &json!("cupti"),
            &json!("enabled"),
            &json!(130000)
        )
    );
    assert_eq!(
        (
            &g["unavailable"],
            &g["dropped"],
            &g["records"],
            &g["bad_times"]
        ),
        (&Value::Null, &json!(4), &json!(49), &json!(0))
    );
    let kernel_ns = 40 * 10_000 + 50_000 + 5 * 2_000;
    assert_eq!(
        (&g["kernels"], &g["kernel_ns"]),
        (&json!(46), &json!(kernel_ns))
    );
    assert_eq!(
        (
            &g["memcpy_ns"],
            &g["memset_ns"],
            &g["memsets"],
            &g["memset_bytes"]
        ),
        (&json!(3_500), &json!(700), &json!(1), &json!(256))
    );
    assert_eq!(
        g["copies"],
        json!([
            {"kind": "h2d", "count": 1, "gpu_ns": 3000, "bytes": 1048576},
            {"kind": "d2h", "count": 1, "gpu_ns": 500, "bytes": 4096}
        ])
    );
    // No launch was probed (the stand-in is no CUDA library): both kernels are CUPTI's rows.
    assert_eq!(
        gpu_rows(p),
        vec![
            (
                "_Z4gemmPfS_".to_owned(),
                0,
                41,
                450_000,
                10_000,
                50_000,
                450_000.0 / kernel_ns as f64
            ),
            (
                "_Z4reluPf".to_owned(),
                0,
                5,
                10_000,
                2_000,
                2_000,
                10_000.0 / kernel_ns as f64
            ),
        ]
    );
    let gemm = &p["kernels"][0];
    assert_eq!(gemm["name"], json!("gemm(float*, float*)"));
    assert_eq!(gemm["name_source"], json!("cupti"));
    assert_eq!(
        gemm["gpu_time"]["streams"],
        json!([
            {"device": 0, "stream": 7, "count": 40, "gpu_ns": 400000},
            {"device": 1, "stream": 9, "count": 1, "gpu_ns": 50000}
        ])
    );
    // No GPU record is a call of the program's.
    assert_eq!((&p["launches"], &p["api"]), (&json!(0), &json!([])));
    assert_eq!(f.report["submitted"]["gpu_activity"], json!(4));
    assert_eq!(f.report["submitted"]["gpu_name"], json!(2));
    assert_eq!(f.report["submitted"]["gpu_state"], json!(2));
    assert_eq!(f.report["drops"]["gpu_activity"], json!(0));

    // The kernels view, ordered by GPU time, from the capture file.
    let out = Command::new(daemon_bin())
        .args(["report", f.output.to_str().unwrap(), "--view", "kernels"])
        .args(["--order-by", "gpu_time", "--format", "csv"])
        .args(["--select", "pid,kernel,calls,gpu_total_ns,gpu_max_ns"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!(
            "pid,kernel,calls,gpu_total_ns,gpu_max_ns\n\
             {ta},\"gemm(float*, float*)\",0,450000,50000\n\
             {ta},relu(float*),0,10000,2000\n"
        )
    );

    // The timeline: one measured track per device and CUPTI stream, each kernel, copy and
    // memset a slice as long as it ran on the GPU; the same events in Perfetto's format.
    let file = f.output.to_str().unwrap();
    let trace = f.output.with_extension("trace.json");
    let (code, _, err) = run_daemon(&["export", file, "-o", trace.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let t: Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let events = t["traceEvents"].as_array().unwrap();
    let mut tracks: Vec<&str> = events
        .iter()
        .filter(|e| e["name"] == "thread_name" && e["pid"] == ta)
        .filter_map(|e| e["args"]["name"].as_str())
        .filter(|n| n.ends_with("(measured)"))
        .collect();
    tracks.sort();
    assert_eq!(
        tracks,
        [
            "GPU 0: CUPTI stream 1 (measured)",
            "GPU 0: CUPTI stream 7 (measured)",
            "GPU 1: CUPTI stream 9 (measured)"
        ]
    );
    let gpu = |cat: &str| -> Vec<f64> {
        events
            .iter()
            .filter(|e| e["cat"] == cat && e["pid"] == ta && e["ph"] == "X")
            .map(|e| e["dur"].as_f64().unwrap())
            .collect()
    };
    let kernels = gpu("gpu kernel");
    assert_eq!(kernels.len(), 46);
    assert_eq!(kernels.iter().sum::<f64>(), 460.0, "µs");
    assert_eq!(
        (gpu("gpu copy"), gpu("gpu memset")),
        (vec![3.0, 0.5], vec![0.7])
    );
    let pf = f.output.with_extension("pftrace");
    let (code, _, err) = run_daemon(&["export", file, "-o", pf.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let x = events.iter().filter(|e| e["ph"] == "X").count() as u64;
    let got = check_pftrace(&pf, &trace);
    assert_eq!(got["slices"].as_u64(), Some(x), "{got}");
}

/// Without `uprobe_multi` links (aya's perf-event uprobes take no reference counter) the
/// library gets no probe: the daemon says so, and the semaphore stays 0.
#[test]
fn without_uprobe_multi_the_library_is_left_alone_and_the_daemon_says_why() {
    let mut a = Workload::spawn("inject_workload", &[]);
    let pid = a.tgid.to_string();
    let d = Daemon::start_with(
        "report.json",
        &["--pid", &pid, "--no-system-libs", "--no-nvml"],
        &[("GPUPROFD_UPROBE_MULTI", "0")],
    );
    assert!(
        d.stderr
            .seen
            .iter()
            .any(|l| l.contains("GPU activity needs uprobe_multi links (Linux 6.6)")),
        "{:#?}",
        d.stderr.seen
    );
    assert_eq!(sem(&mut a), 0);
    a.script(&["state 1 130000", "kernels 1 0 7 1000 2", "flush"]);
    let ta = a.tgid;
    let f = d.stop();
    a.exit();
    if has_process(&f.report, ta) {
        let p = process(&f.report, ta);
        assert_eq!(p["gpu_time"]["basis"], json!("absent"), "{p}");
    }
    assert_eq!(f.report["submitted"]["gpu_activity"], json!(0));
}
