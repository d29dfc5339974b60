//! Memsets end to end: every driver and runtime memset entry point on the real probes, counted
//! once (a runtime memset is not counted again as the driver memset it makes), with exact
//! bytes in each API's unit, in the report, a capture file and the timeline.
//!
//! Run through `cargo xtask test` (as root, `--test-threads=1`).

use gpuprofd_tests::*;
use std::collections::BTreeMap;

/// One workload command: (command, the API the program called, calls, bytes each call sets,
/// stream-ordered). A 2D or 3D memset's pitch is its row plus 64 bytes (see workload.c), so
/// the bytes set are never the rows' span; the driver's N and Width count elements.
type Case = (&'static str, &'static str, u64, u64, bool);

const RUNTIME: &[Case] = &[
    ("rt_memset 4096 3", "cudaMemset", 3, 4096, false),
    ("rt_memset_ptds 100 1", "cudaMemset_ptds", 1, 100, false),
    ("rt_memset_async 1000 2 1", "cudaMemsetAsync", 2, 1000, true),
    (
        "rt_memset_async_ptsz 10 1 0",
        "cudaMemsetAsync_ptsz",
        1,
        10,
        true,
    ),
    ("rt_memset2d 300 20 2", "cudaMemset2D", 2, 300 * 20, false),
    (
        "rt_memset2d_ptds 16 4 1",
        "cudaMemset2D_ptds",
        1,
        16 * 4,
        false,
    ),
    (
        "rt_memset2d_async 30 2 1 2",
        "cudaMemset2DAsync",
        1,
        30 * 2,
        true,
    ),
    (
        "rt_memset2d_async_ptsz 8 8 2 1",
        "cudaMemset2DAsync_ptsz",
        2,
        64,
        true,
    ),
    // extent width × height × depth; the pitched pointer and the extent are passed on the stack
    ("rt_memset3d 64 8 3 2", "cudaMemset3D", 2, 64 * 8 * 3, false),
    (
        "rt_memset3d_ptds 32 2 2 1",
        "cudaMemset3D_ptds",
        1,
        32 * 2 * 2,
        false,
    ),
    (
        "rt_memset3d_async 64 8 3 1 1",
        "cudaMemset3DAsync",
        1,
        64 * 8 * 3,
        true,
    ),
    (
        "rt_memset3d_async_ptsz 16 4 2 1 2",
        "cudaMemset3DAsync_ptsz",
        1,
        16 * 4 * 2,
        true,
    ),
];

const DRIVER: &[Case] = &[
    ("drv_memset d8 1000 2", "cuMemsetD8_v2", 2, 1000, false),
    (
        "drv_memset_ptds d16 1000 1",
        "cuMemsetD16_v2_ptds",
        1,
        1000 * 2,
        false,
    ),
    ("drv_memset d32 100 1", "cuMemsetD32_v2", 1, 100 * 4, false),
    (
        "drv_memset_async d32 1000 3 1",
        "cuMemsetD32Async",
        3,
        1000 * 4,
        true,
    ),
    (
        "drv_memset_async_ptsz d16 10 1 1",
        "cuMemsetD16Async_ptsz",
        1,
        10 * 2,
        true,
    ),
    ("drv_memset_async d8 7 1 0", "cuMemsetD8Async", 1, 7, true),
    // Width in elements: 100 16-bit values × 7 rows
    (
        "drv_memset2d d16 100 7 2",
        "cuMemsetD2D16_v2",
        2,
        100 * 7 * 2,
        false,
    ),
    (
        "drv_memset2d_ptds d32 100 7 1",
        "cuMemsetD2D32_v2_ptds",
        1,
        100 * 7 * 4,
        false,
    ),
    (
        "drv_memset2d d8 50 3 1",
        "cuMemsetD2D8_v2",
        1,
        50 * 3,
        false,
    ),
    (
        "drv_memset2d_async d8 100 7 1 2",
        "cuMemsetD2D8Async",
        1,
        100 * 7,
        true,
    ),
    (
        "drv_memset2d_async_ptsz d32 5 5 1 0",
        "cuMemsetD2D32Async_ptsz",
        1,
        5 * 5 * 4,
        true,
    ),
    (
        "drv_memset2d_async d16 4 4 2 1",
        "cuMemsetD2D16Async",
        2,
        4 * 4 * 2,
        true,
    ),
];

/// The copies' size buckets (bounds exclusive): < 4 KiB, < 64 KiB, < 1 MiB, < 16 MiB,
/// < 256 MiB, more.
fn bucket(bytes: u64) -> usize {
    [4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20]
        .iter()
        .position(|&b| bytes < b)
        .unwrap_or(5)
}

/// What the memset row and the API table must say for these cases.
struct Expected {
    calls: u64,
    bytes: u64,
    async_calls: u64,
    sizes: [u64; 6],
    apis: Vec<(String, u64)>,
}

fn expected(cases: &[&[Case]]) -> Expected {
    let mut e = Expected {
        calls: 0,
        bytes: 0,
        async_calls: 0,
        sizes: [0; 6],
        apis: Vec::new(),
    };
    let mut apis = BTreeMap::<String, u64>::new();
    for &(_, api, calls, bytes, is_async) in cases.iter().flat_map(|c| c.iter()) {
        e.calls += calls;
        e.bytes += calls * bytes;
        e.async_calls += if is_async { calls } else { 0 };
        e.sizes[bucket(bytes)] += calls;
        *apis.entry(api.to_owned()).or_default() += calls;
    }
    e.apis = apis.into_iter().collect();
    e
}

fn script(w: &mut Workload, cases: &[&[Case]]) {
    for &(cmd, ..) in cases.iter().flat_map(|c| c.iter()) {
        w.cmd(cmd);
    }
}

/// The memset row: (calls, bytes, async_calls, size histogram).
fn memset_row(p: &serde_json::Value) -> (u64, u64, u64, Vec<u64>) {
    let m = copies(p, "memset").unwrap_or_else(|| panic!("no memset row: {}", p["copies"]));
    (
        m["calls"].as_u64().unwrap(),
        m["bytes"].as_u64().unwrap(),
        m["async_calls"].as_u64().unwrap(),
        m["size_histogram"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect(),
    )
}

#[test]
fn every_memset_entry_point_counted_once_with_exact_bytes() {
    let d = Daemon::all_jobs();
    let mut w = Workload::start();
    script(&mut w, &[RUNTIME, DRIVER]);
    // What the fake driver itself ran: the runtime's memsets went through the driver's 8-bit
    // memsets (the plain table for the plain entry points, the per-thread one for _ptds/_ptsz).
    let driver_ran: Vec<(&str, u64)> = [
        "cuMemsetD8_v2",
        "cuMemsetD8_v2_ptds",
        "cuMemsetD8Async",
        "cuMemsetD8Async_ptsz",
        "cuMemsetD2D8_v2",
        "cuMemsetD2D8_v2_ptds",
        "cuMemsetD2D8Async",
        "cuMemsetD2D8Async_ptsz",
    ]
    .into_iter()
    .map(|s| (s, w.count(s)))
    .collect();
    let tgid = w.tgid;
    let r = d.stop().report;
    let p = process(&r, tgid);
    assert_eq!(
        driver_ran,
        [
            ("cuMemsetD8_v2", 3 + 2),
            ("cuMemsetD8_v2_ptds", 1),
            ("cuMemsetD8Async", 2 + 1),
            ("cuMemsetD8Async_ptsz", 1),
            ("cuMemsetD2D8_v2", 2 + 2 + 1),
            ("cuMemsetD2D8_v2_ptds", 1 + 1),
            ("cuMemsetD2D8Async", 1 + 1 + 1),
            ("cuMemsetD2D8Async_ptsz", 2 + 1),
        ]
    );
    let e = expected(&[RUNTIME, DRIVER]);
    assert_eq!(
        memset_row(p),
        (e.calls, e.bytes, e.async_calls, e.sizes.to_vec())
    );
    // (Spelled out once, to check the table: 35 calls, 17 of them async, 54,555 bytes.)
    assert_eq!((e.calls, e.async_calls, e.bytes), (35, 17, 54_555));
    // One row per entry point the program called, and nothing else: the driver memsets the
    // runtime made (cuMemsetD8_v2 3 times, cuMemsetD2D8Async twice, ...) are not counted
    // again, while the program's own calls of the same driver functions are.
    assert_eq!(api_table(p), e.apis);
    assert_eq!(api_calls(p, "cuMemsetD8_v2"), 2);
    assert_eq!(api_calls(p, "cuMemsetD2D8_v2"), 1);
    assert_eq!(api_calls(p, "cuMemsetD8Async"), 1);
    assert_eq!(api_calls(p, "cuMemsetD8_v2_ptds"), 0);
    assert_eq!(api_calls(p, "cuMemsetD2D8Async_ptsz"), 0);
    // Memsets are no copies in any other direction.
    let dirs: Vec<&str> = p["copies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["direction"].as_str().unwrap())
        .collect();
    assert_eq!(dirs, ["memset"]);
    // Blocked time: measured for every blocking entry point, none for the stream-ordered ones,
    // and the row's is their sum.
    let mut blocking_ns = 0;
    for &(_, name, _, _, is_async) in RUNTIME.iter().chain(DRIVER) {
        let ns = api(p, name).unwrap()["blocked_ns"].as_u64().unwrap();
        if is_async {
            assert_eq!(ns, 0, "{name}");
        } else {
            assert!(ns > 0, "{name} has a return probe: its time is measured");
            blocking_ns += ns;
        }
    }
    assert_eq!(
        copies(p, "memset").unwrap()["blocked_ns"].as_u64(),
        Some(blocking_ns)
    );
    // Every memset counts as a memory operation on its stream (whichever it went to).
    let stream_ops: u64 = p["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["copies"].as_u64().unwrap())
        .sum();
    assert_eq!(stream_ops, 35);
    w.exit();
}

#[test]
fn a_driver_only_program_counts_every_driver_memset() {
    let d = Daemon::all_jobs();
    let mut w = Workload::spawn("workload_drv", &[]);
    script(&mut w, &[DRIVER]);
    let tgid = w.tgid;
    let r = d.stop().report;
    let p = process(&r, tgid);
    let e = expected(&[DRIVER]);
    assert_eq!(
        memset_row(p),
        (e.calls, e.bytes, e.async_calls, e.sizes.to_vec())
    );
    assert_eq!((e.calls, e.async_calls, e.bytes), (17, 9, 23_041));
    assert_eq!(api_table(p), e.apis);
    w.exit();
}

#[test]
fn memsets_in_a_capture_file_and_its_timeline() {
    let d = Daemon::all_jobs_capturing();
    let mut w = Workload::start();
    w.script(&[
        "rt_memset 4096 2",
        "rt_memset_async 100 3 1",
        "drv_memset2d d32 10 10 1",
    ]);
    let tgid = w.tgid;
    let f = d.stop();
    let p = process(&f.report, tgid);
    // Replayed from the file: the same figures as live.
    assert_eq!(
        memset_row(p),
        (2 + 3 + 1, 8192 + 300 + 400, 3, vec![4, 2, 0, 0, 0, 0])
    );
    let file = f.output.to_str().unwrap();
    let trace = f.output.with_extension("trace.json");
    let (code, _, err) = run_daemon(&["export", file, "-o", trace.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    // On the thread's track, as copies are: timed slices for the blocking calls, instants for
    // the async ones; each named by its API, with its bytes and direction.
    let mut on_thread: Vec<(String, String, u64)> = t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["pid"] == tgid && e["tid"] == tgid && e["cat"] == "copy")
        .map(|e| {
            assert_eq!(e["args"]["direction"], "memset", "{e}");
            (
                e["name"].as_str().unwrap().to_owned(),
                e["ph"].as_str().unwrap().to_owned(),
                e["args"]["bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    on_thread.sort();
    let want = |n: &str, ph: &str, b: u64| (n.to_owned(), ph.to_owned(), b);
    assert_eq!(
        on_thread,
        [
            want("cuMemsetD2D32_v2", "X", 400),
            want("cudaMemset", "X", 4096),
            want("cudaMemset", "X", 4096),
            want("cudaMemsetAsync", "i", 100),
            want("cudaMemsetAsync", "i", 100),
            want("cudaMemsetAsync", "i", 100),
        ]
    );
    w.exit();
}
