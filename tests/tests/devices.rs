//! Device attribution end to end: every launch, copy, sync and allocation carries the device it
//! went to, learned in the kernel from the calling thread's current context and the stream's
//! context, with no record of its own. Several threads on two fake devices; a context made
//! current before the daemon attached stays unknown until a call reveals it; `report --device`
//! selects one device's calls. Real eBPF on the fake CUDA libraries.
//!
//! Run through `cargo xtask test` (as root, `--test-threads=1`).

use gpuprofd_tests::*;
use serde_json::Value;

/// `(device, launches, copies, copy_bytes, syncs, allocations, alloc_bytes)` per row of a
/// process's `devices`, in the report's order (known devices by ordinal, then unknown).
type Row = (Option<u64>, u64, u64, u64, u64, u64, u64);

fn devices(p: &Value) -> Vec<Row> {
    p["devices"]
        .as_array()
        .unwrap_or_else(|| panic!("no devices: {p}"))
        .iter()
        .map(|d| {
            let n = |k: &str| d[k].as_u64().unwrap_or_else(|| panic!("{k}: {d}"));
            (
                d["device"].as_u64(),
                n("launches"),
                n("copies"),
                n("copy_bytes"),
                n("syncs"),
                n("allocations"),
                n("alloc_bytes"),
            )
        })
        .collect()
}

const K: &str = "triton_poi_fused_add_0";

/// The workload's calls (see the comments): 36 launches, 9 copies, 5 syncs, 2 allocations.
fn calls(w: &mut Workload) {
    let launch = |n: u32, stream: u32| format!("drv_launch {K} {n} 1 1 1 1 1 1 0 {stream}");
    // The main thread, context unknown: 3 launches and 2 copies of 1000 bytes, device unknown.
    w.cmd(&launch(3, 0));
    w.cmd("drv_memcpy h2d 1000 2");
    // A thread on device 1: 5 launches; then stream 2, made there (device 1's), 2 launches.
    w.cmd(&format!("on_device 1 {}", launch(5, 0)));
    w.cmd(&format!("on_device 1 {}", launch(2, 2)));
    // A thread on device 0: 3 copies of 4096 bytes, 2 allocations of 1 MiB.
    w.cmd("on_device 0 drv_memcpy h2d 4096 3");
    w.cmd("on_device 0 drv_malloc 1048576 2");
    // Device 1 again: 4 async copies of 512 bytes on stream 2.
    w.cmd("on_device 1 drv_memcpy_async d2d 512 4 2");
    // The main thread on stream 2: the stream's device (1), though its own is unknown; and 3
    // syncs of that stream.
    w.cmd(&launch(6, 2));
    w.cmd("drv_sync_stream 2 3");
    // The main thread asks for its context: from now on its device (0) is known.
    assert_eq!(w.cmd("drv_get_device"), "ok drv_get_device device=0");
    w.cmd(&launch(4, 0));
    // Push device 1's context, launch, pop back to device 0.
    w.cmd("drv_push_ctx 1");
    w.cmd(&launch(7, 0));
    w.cmd("drv_pop_ctx");
    w.cmd(&launch(1, 0));
    // Through the runtime: cudaSetDevice(1) on a new thread, 8 launches, 2 device syncs.
    w.cmd("on_rt_device 1 rt_launch vecAdd 8 1 1 1 1 1 1 0 0");
    w.cmd("on_rt_device 1 rt_sync_device 2");
}

/// What [`calls`] must give, per device.
fn expected() -> Vec<Row> {
    vec![
        // device 0: 4 + 1 launches; 3 × 4096 bytes; 2 × 1 MiB allocated
        (Some(0), 4 + 1, 3, 3 * 4096, 0, 2, 2 << 20),
        // device 1: 5 + 2 + 6 + 7 + 8 launches; 4 × 512 bytes; 3 + 2 syncs
        (Some(1), 5 + 2 + 6 + 7 + 8, 4, 4 * 512, 3 + 2, 0, 0),
        // unknown: the main thread before it revealed its context
        (None, 3, 2, 2 * 1000, 0, 0, 0),
    ]
}

#[test]
fn calls_on_two_devices_from_several_threads_are_split_exactly() {
    // Started before the daemon: the main thread's context (device 0's primary, made current
    // by the runtime and the workload at start) was set before anything was attached.
    let mut w = Workload::spawn("workload", &[("FAKECUDA_DEVICES", "2")]);
    let tgid = w.tgid;
    let lib = fakecuda().join("lib");
    let d = Daemon::capturing(&all_jobs_args(&lib));
    calls(&mut w);
    w.exit();
    let f = d.stop();
    let p = process(&f.report, tgid);
    assert_eq!(devices(p), expected());
    assert_eq!(p["launches"], 3 + 5 + 2 + 6 + 4 + 7 + 1 + 8);

    // `report --device 1`: only device 1's calls.
    let (code, out, err) = run_daemon(&[
        "report",
        f.output.to_str().unwrap(),
        "--format",
        "json",
        "--device",
        "1",
    ]);
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let p1 = process(&r, tgid);
    assert_eq!(p1["launches"], 28);
    assert_eq!(devices(p1), vec![(Some(1), 28, 4, 4 * 512, 5, 0, 0)]);
    let d2d = copies(p1, "d2d").unwrap_or_else(|| panic!("no d2d: {}", p1["copies"]));
    assert_eq!(
        (d2d["calls"].as_u64(), d2d["bytes"].as_u64()),
        (Some(4), Some(2048))
    );
    assert!(copies(p1, "h2d").is_none(), "{}", p1["copies"]);

    // The timeline: a stream's track per device, named by its GPU where known.
    let trace = f.output.with_extension("trace.json");
    let file = f.output.to_str().unwrap();
    let (code, _, err) = run_daemon(&["export", file, "-o", trace.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let t: Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let mut tracks: Vec<String> = t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["pid"] == tgid && e["ph"] == "M" && e["name"] == "thread_name")
        .filter_map(|e| e["args"]["name"].as_str())
        .filter(|n| n.contains("stream"))
        .map(|n| match n.split_once("stream 0x") {
            Some((gpu, _)) => format!("{gpu}stream 0x…"),
            None => n.to_owned(),
        })
        .collect();
    tracks.sort();
    assert_eq!(
        tracks,
        [
            "GPU 0: default stream",
            "GPU 1: default stream",
            "GPU 1: stream 0x…",
            "default stream"
        ]
    );
}

/// Launches counted in the kernel (`--count-launches`) keep their device: it is part of the
/// counters' key, so the split is the one a record per launch gives.
#[test]
fn counted_launches_keep_their_device() {
    let mut w = Workload::spawn("workload", &[("FAKECUDA_DEVICES", "2")]);
    let tgid = w.tgid;
    let lib = fakecuda().join("lib");
    let mut args = all_jobs_args(&lib).to_vec();
    args.extend(["--count-launches", "100ms"]);
    let d = Daemon::start(&args);
    calls(&mut w);
    w.exit();
    let r = d.stop().report;
    assert_eq!(devices(process(&r, tgid)), expected());
}

/// A context made current before the daemon attached, on a thread that never calls a driver
/// context function afterwards: the runtime's `cudaGetDevice` (which asks the driver through
/// its private export table, as the real one does) reveals the device while it is probed, for
/// the first second after its library is attached. After that the probe is gone: a call then
/// reveals nothing, and costs no trap.
#[test]
fn cuda_get_device_reveals_an_earlier_context_while_it_is_probed() {
    let launch = |n: u32| format!("drv_launch {K} {n} 1 1 1 1 1 1 0 0");
    // Both processes made device 1 current on their main thread before the daemon started.
    let mut early = Workload::spawn("workload", &[("FAKECUDA_DEVICES", "2")]);
    let mut late = Workload::spawn("workload", &[("FAKECUDA_DEVICES", "2")]);
    let (early_tgid, late_tgid) = (early.tgid, late.tgid);
    early.cmd("rt_set_device 1");
    late.cmd("rt_set_device 1");
    let lib = fakecuda().join("lib");
    let d = Daemon::capturing(&all_jobs_args(&lib));
    // Inside the learning time: 3 launches unknown, then cudaGetDevice, then 5 on device 1.
    early.cmd(&launch(3));
    assert_eq!(early.cmd("rt_get_device"), "ok rt_get_device device=1");
    early.cmd(&launch(5));
    // After it (1 s, let go at the next once-a-second tick): cudaGetDevice is not probed.
    std::thread::sleep(std::time::Duration::from_secs(4));
    assert_eq!(late.cmd("rt_get_device"), "ok rt_get_device device=1");
    late.cmd(&launch(4));
    // The first process's device stays known.
    early.cmd(&launch(2));
    early.exit();
    late.exit();
    let f = d.stop();
    let row = |dev: Option<u64>, n: u64| (dev, n, 0, 0, 0, 0, 0);
    assert_eq!(
        devices(process(&f.report, early_tgid)),
        vec![row(Some(1), 5 + 2), row(None, 3)]
    );
    assert_eq!(devices(process(&f.report, late_tgid)), vec![row(None, 4)]);
}
