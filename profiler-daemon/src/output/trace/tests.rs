//! The Chrome trace of a known capture: exact events, tracks and names.

use super::*;
use crate::store::tests::{Tmp, write_capture};
use serde_json::{Value, json};

fn trace(from: Option<f64>, to: Option<f64>) -> (Summary, Value) {
    // A file per call: tests run in parallel, and each removes its file when done.
    static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let t = Tmp::new(&format!("export-{n}"));
    write_capture(&t.0, true);
    let mut out = Vec::new();
    let s = chrome(&t.0, &mut out, from, to).unwrap();
    (s, serde_json::from_slice(&out).expect("the trace is JSON"))
}

fn events(v: &Value) -> &Vec<Value> {
    v["traceEvents"].as_array().unwrap()
}

#[test]
fn every_launch_on_its_thread_and_stream_with_its_name() {
    let (s, v) = trace(None, None);
    let ev = events(&v);
    assert_eq!(s.events, ev.len() as u64);
    // The GPUs track's name, 3 process names, 3 thread names, 3 stream names, 7 launches ×
    // (thread slice, stream slice); no arrows between the two (one moment, one launch).
    assert_eq!((s.events, s.processes, s.damaged), (24, 3, false));
    assert!(!ev.iter().any(|e| e["ph"] == "s" || e["ph"] == "f"));
    // The reused pid 200: its first process moved to 10,000,200.
    let procs: Vec<(u64, &str)> = ev
        .iter()
        .filter(|e| e["name"] == "process_name" && e["pid"] != 0)
        .map(|e| {
            (
                e["pid"].as_u64().unwrap(),
                e["args"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        procs,
        [
            (100, "python3 (pid 100) [slurm:4242]"),
            (10_000_200, "trainer (pid 200, exited) [slurm:4242]"),
            (200, "trainer2 (pid 200, exited) [slurm:4242]"),
        ]
    );
    let launches: Vec<(u64, u64, &str, f64)> = ev
        .iter()
        .filter(|e| e["cat"] == "launch")
        .map(|e| {
            (
                e["pid"].as_u64().unwrap(),
                e["tid"].as_u64().unwrap(),
                e["name"].as_str().unwrap(),
                e["ts"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(launches.len(), 14);
    // Thread track then stream track, per launch; ts in µs after the capture's start.
    assert_eq!(launches[0], (100, 100, "gemm(float*, int)", 1.0));
    assert_eq!(
        launches[1],
        (100, STREAM_TID_BASE, "gemm(float*, int)", 1.0)
    );
    assert_eq!(
        launches[9],
        (100, STREAM_TID_BASE, "gemm(float*, int)", 1.004)
    );
    assert_eq!(launches[10], (10_000_200, 200, "<unknown 0x9000>", 2.0));
    assert_eq!(launches[12], (200, 200, "<unknown 0x9000>", 3.0));
    let first = ev.iter().find(|e| e["cat"] == "launch").unwrap();
    assert_eq!(
        first["args"],
        json!({"api": "cudaLaunchKernel", "grid": [4, 1, 1], "block": [128, 1, 1],
               "shared_bytes": 0, "stream": "0x0"})
    );
    // The stream's copy: the name alone (the thread's event has the arguments).
    let on_stream = ev
        .iter()
        .find(|e| e["cat"] == "launch" && e["tid"] == STREAM_TID_BASE)
        .unwrap();
    assert_eq!(on_stream.get("args"), None, "{on_stream}");
    let streams: Vec<&str> = ev
        .iter()
        .filter(|e| e["name"] == "thread_name" && e["tid"].as_u64().unwrap() >= STREAM_TID_BASE)
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(streams, ["default stream"; 3]);
}

#[test]
fn a_window_keeps_only_its_calls() {
    // Start + 2.5 µs: only the last launch (at 3 µs) remains.
    let (s, v) = trace(Some(2.5e-6), None);
    let launches: Vec<u64> = events(&v)
        .iter()
        .filter(|e| e["cat"] == "launch")
        .map(|e| e["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(launches, [200, 200]);
    assert_eq!(s.events, 1 + 3 + 1 + 1 + 2);
    let (_, v) = trace(Some(0.0), Some(1.5e-6));
    assert_eq!(
        events(&v).iter().filter(|e| e["cat"] == "launch").count(),
        10
    );
}

#[test]
fn a_killed_capture_still_exports_with_a_warning() {
    let t = Tmp::new("export-cut");
    write_capture(&t.0, false);
    let mut out = Vec::new();
    let s = chrome(&t.0, &mut out, None, None).unwrap();
    assert!(s.warning.unwrap().contains("no closing frame"));
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        events(&v).iter().filter(|e| e["cat"] == "launch").count(),
        14
    );
}

#[test]
fn arguments_are_kept_in_key_order_and_written_as_json_values() {
    let args = Args::from([
        ("stream", Arg::Hex(0x7f00)),
        ("api", Arg::Str("cudaLaunchKernel".into())),
        ("ret", Arg::Int(-1)),
        ("grid", Arg::Dim3([4, 1, 1])),
        ("stack", Arg::List(vec!["f \"g\"".into()])),
    ]);
    let keys: Vec<&str> = args.iter().map(|(k, _)| k).collect();
    assert_eq!(keys, ["api", "grid", "ret", "stack", "stream"]);
    assert_eq!(
        serde_json::to_value(&args).unwrap(),
        json!({"api": "cudaLaunchKernel", "grid": [4, 1, 1], "ret": -1,
               "stack": ["f \"g\""], "stream": "0x7f00"})
    );
}

#[test]
fn gpm_rounds_are_a_counter_per_gpu() {
    let t = Tmp::new("export-gpm");
    crate::store::tests::write_gpm_capture(&t.0);
    let mut out = Vec::new();
    chrome(&t.0, &mut out, None, None).unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    let c: Vec<&Value> = events(&v)
        .iter()
        .filter(|e| e["name"] == "GPU 0 activity % (GPM, measured)")
        .collect();
    // The first round has one sample only: no figures.
    assert_eq!(c.len(), 2);
    assert_eq!(c[0]["ph"], "C");
    assert_eq!(c[0]["args"], json!({"sm_activity": 60, "tensor_hmma": 13}));
    assert_eq!(c[1]["args"]["sm_activity"], 70);
}

/// CUPTI's records (the injection library) on one measured track per device and CUPTI
/// stream, at their GPU times, named by the library's kernel names.
#[test]
fn gpu_activity_on_its_device_and_stream_tracks_at_its_gpu_times() {
    let t = Tmp::new("export-gpu");
    crate::store::tests::write_gpu_capture(&t.0);
    let mut out = Vec::new();
    chrome(&t.0, &mut out, None, None).unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    let ev = events(&v);
    let tracks: Vec<(u64, &str)> = ev
        .iter()
        .filter(|e| e["name"] == "thread_name" && e["tid"].as_u64().unwrap() >= GPU_TID_BASE)
        .map(|e| {
            (
                e["tid"].as_u64().unwrap() - GPU_TID_BASE,
                e["args"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        tracks,
        [
            (0, "GPU 0: CUPTI stream 7 (measured)"),
            (1, "GPU 0: CUPTI stream 3 (measured)")
        ]
    );
    let slices: Vec<Value> = ev
        .iter()
        .filter(|e| e["cat"].as_str().is_some_and(|c| c.starts_with("gpu ")))
        .cloned()
        .collect();
    assert_eq!(slices.len(), 2, "{slices:?}");
    assert_eq!(
        (&slices[0]["name"], &slices[0]["cat"], &slices[0]["ph"]),
        (&json!("k()"), &json!("gpu kernel"), &json!("X"))
    );
    assert_eq!(slices[0]["dur"], json!(2.0));
    assert_eq!(slices[0]["args"], json!({"bytes": 0, "correlation": 11}));
    assert_eq!(
        (
            &slices[1]["name"],
            &slices[1]["dur"],
            &slices[1]["args"]["bytes"]
        ),
        (&json!("copy d2h"), &json!(0.5), &json!(4096))
    );
    // Both began at GPU time 10 ns: the same place on the trace.
    assert_eq!(slices[0]["ts"], slices[1]["ts"]);
    // The launch call joined the kernel to its launch: an arrow from the launch's slice on
    // thread 100 to the kernel's on its GPU track, bound to the slice it arrives at.
    let flows: Vec<(&str, u64, u64, &Value, Option<&str>)> = ev
        .iter()
        .filter(|e| e["cat"] == "gpu")
        .map(|e| {
            (
                e["ph"].as_str().unwrap(),
                e["id"].as_u64().unwrap(),
                e["tid"].as_u64().unwrap(),
                &e["ts"],
                e["bp"].as_str(),
            )
        })
        .collect();
    let launch = ev
        .iter()
        .find(|e| e["cat"] == "launch" && e["tid"] == 100)
        .unwrap();
    let id = flows[0].1;
    assert_eq!(
        flows,
        [
            ("s", id, 100, &launch["ts"], None),
            ("f", id, GPU_TID_BASE, &slices[0]["ts"], Some("e")),
        ]
    );
}

/// A launch no launch call claims gets no arrow (a flow with one end is invalid in Perfetto):
/// of the two launches on thread 100, only the one at 1,000 ns leaves one.
#[test]
fn only_claimed_launches_leave_an_arrow() {
    let t = Tmp::new("export-gpu-early");
    crate::store::tests::write_gpu_capture_full(
        &t.0,
        Some(crate::model::gpu_join::Tids::Same),
        true,
    );
    let mut out = Vec::new();
    chrome(&t.0, &mut out, None, None).unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    let ev = events(&v);
    let launches: Vec<&Value> = ev
        .iter()
        .filter(|e| e["cat"] == "launch" && e["tid"] == 100)
        .collect();
    assert_eq!(launches.len(), 2);
    let flows: Vec<(&str, &Value)> = ev
        .iter()
        .filter(|e| e["cat"] == "gpu")
        .map(|e| (e["ph"].as_str().unwrap(), &e["ts"]))
        .collect();
    assert_eq!(flows.len(), 2, "{flows:?}");
    assert_eq!(flows[0], ("s", &launches[1]["ts"]));
    assert_eq!(flows[1].0, "f");
}

/// Without the thread id map the kernel is not joined: no arrow, the slices as before.
#[test]
fn no_gpu_arrow_where_the_threads_are_not_mapped() {
    let t = Tmp::new("export-gpu-nomap");
    crate::store::tests::write_gpu_capture_with(&t.0, None);
    let mut out = Vec::new();
    chrome(&t.0, &mut out, None, None).unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    let ev = events(&v);
    assert_eq!(ev.iter().filter(|e| e["cat"] == "gpu").count(), 0);
    let gpu = ev
        .iter()
        .filter(|e| e["cat"].as_str().is_some_and(|c| c.starts_with("gpu ")))
        .count();
    assert_eq!(gpu, 2);
}

/// Two nodes' captures of one job (one Slurm job) as one trace: every process on a track of its
/// own though both nodes have a pid 100, named with its node, and node B's calls 1.5 µs later
/// than A's at the same monotonic time (B's wall clock started 1.5 µs later).
#[test]
fn two_captures_merge_into_one_trace_on_the_wall_clock() {
    use crate::store::tests::{header, write_capture_as};
    let (a, b) = (Tmp::new("merge-a"), Tmp::new("merge-b"));
    write_capture_as(&a.0, true, header());
    let mut hb = header();
    hb.host = "node8".into();
    hb.started_at_unix_ns += 1_500;
    write_capture_as(&b.0, true, hb);
    let parts: Vec<merge::Part> = [(&a.0, "node7", 0), (&b.0, "node8", 1_500)]
        .into_iter()
        .map(|(p, n, shift)| merge::Part {
            path: p.clone(),
            node: n.into(),
            shift_ns: shift,
            ranks: HashMap::from([(100, format!("{n}/0"))]),
            only: None,
        })
        .collect();
    let mut out = Vec::new();
    let s = merge::trace_merged(&parts, &mut ChromeSink::new(&mut out), None, None).unwrap();
    let v: Value = serde_json::from_slice(&out).expect("the trace is JSON");
    let ev = events(&v);
    assert_eq!((s.events, s.processes, s.damaged), (48, 6, false));
    assert_eq!(s.events, ev.len() as u64);
    let procs: Vec<(u64, &str)> = ev
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| {
            (
                e["pid"].as_u64().unwrap(),
                e["args"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        procs,
        [
            (1, "node7: GPUs (NVML)"),
            (2, "node7/0 · python3 (pid 100) [slurm:4242]"),
            (3, "node7: trainer (pid 200, exited) [slurm:4242]"),
            (4, "node7: trainer2 (pid 200, exited) [slurm:4242]"),
            (5, "node8: GPUs (NVML)"),
            (6, "node8/0 · python3 (pid 100) [slurm:4242]"),
            (7, "node8: trainer (pid 200, exited) [slurm:4242]"),
            (8, "node8: trainer2 (pid 200, exited) [slurm:4242]"),
        ]
    );
    // The first launch of pid 100 on each node: at 1 µs, and 1.5 µs later on node 8.
    let first: Vec<(u64, f64)> = [2, 6]
        .into_iter()
        .map(|pid| {
            let e = ev
                .iter()
                .find(|e| e["cat"] == "launch" && e["pid"] == pid)
                .unwrap();
            (pid, e["ts"].as_f64().unwrap())
        })
        .collect();
    assert_eq!(first, [(2, 1.0), (6, 2.5)]);
}
