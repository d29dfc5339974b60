//! Launches counted in the kernel (`--count-launches`, service mode's default) against a record
//! per launch: the same workloads give the same figures, exactly — per process, per kernel and
//! launch configuration, per API and per stream — for every launch shape the probes know, for a
//! process that ends, one started through a launcher's fork+exec, one that execs from one CUDA
//! program into another, and one still running when the daemon stops; and the launches really
//! were counted in the kernel (no launch record submitted).

use gpuprofd_tests::*;
use serde_json::{Value, json};
use std::process::Command;

/// Every launch entry point of the fake driver and runtime, with distinct configurations and
/// streams (NAME COUNT GX GY GZ BX BY BZ SMEM STREAM), a graph launch, and a 4-thread storm.
const SHAPES: &[&str] = &[
    "rt_launch gemm 5 64 64 1 16 16 1 8192 0",
    "rt_launch gemm 4 64 64 1 16 16 1 8192 1",
    "rt_launch relu 6 256 1 1 256 1 1 0 0",
    "rt_launch_ptsz relu 3 128 1 1 256 1 1 0 2",
    "rt_launch_ex reduce 7 4 1 1 256 1 1 1024 1",
    "rt_launch_ex_ptsz reduce 2 4 1 1 256 1 1 1024 0",
    "rt_launch_coop vecAdd 3 2 1 1 64 1 1 0 0",
    "drv_launch triton_poi_fused_add_0 8 512 1 1 128 1 1 0 0",
    "drv_launch_ptsz triton_red_fused_sum_1 2 32 1 1 64 1 1 256 1",
    "drv_launch_ex cupy_scale 5 30 2 1 32 2 1 0 0",
    "drv_launch_ex_ptsz cupy_scale 1 30 2 1 32 2 1 0 2",
    "drv_launch_coop triton_poi_fused_add_0 2 16 1 1 128 1 1 0 0",
    "drv_launch_lib lib_saxpy 4 8 1 1 32 1 1 0 0",
    "drv_launch_kfunc lib_saxpy 3 8 1 1 32 1 1 0 1",
    "rt_graph_launch 2 0",
    "storm 4 5000",
    "rt_sync_device 1",
];

/// Launches in [`SHAPES`] (the graph launches are not kernel launches).
const SHAPE_LAUNCHES: u64 = 5 + 4 + 6 + 3 + 7 + 2 + 3 + 8 + 2 + 5 + 1 + 2 + 4 + 3 + 4 * 5000;

/// `p[field]`'s entries through `f`, sorted (an order that does not depend on the run).
fn sorted(p: &Value, field: &str, f: impl Fn(&Value) -> Value) -> Vec<Value> {
    let mut v: Vec<Value> = p[field].as_array().unwrap().iter().map(f).collect();
    v.sort_by_key(|x| x.to_string());
    v
}

/// What a report says of a process's launches.
fn launches_of(p: &Value) -> Value {
    let kernels = sorted(p, "kernels", |k| {
        json!([
            k["name"],
            k["api"],
            k["calls"],
            k["grid"],
            k["block"],
            k["shared_bytes"],
            k["streams"]
        ])
    });
    let api = sorted(p, "api", |a| json!([a["name"], a["calls"]]));
    // Stream handles are heap addresses, different in each run: the default stream by name,
    // the others by their figures.
    let streams = sorted(p, "streams", |s| {
        json!([s["stream"] == "default", s["launches"]])
    });
    json!({"comm": p["comm"], "launches": p["launches"], "unnamed": p["unnamed_launches"],
           "graphs": p["graphs"], "kernels": kernels, "api": api, "streams": streams})
}

/// One daemon run over the four workloads; `count` adds `--count-launches INTERVAL`. Returns the
/// four processes' launch figures (the exec'ing one as two programs) and the report.
fn run(count: Option<&str>) -> (Vec<Value>, Value) {
    let lib = fakecuda().join("lib");
    let mut args = all_jobs_args(&lib).to_vec();
    if let Some(interval) = count {
        args.extend(["--count-launches", interval]);
    }
    let d = Daemon::start(&args);
    let dir = TempDir::new("counted");
    let trainer = dir.path().join("trainer");
    std::os::unix::fs::symlink(fakecuda().join("bin/workload"), &trainer).unwrap();

    // Ends before the daemon stops: its launches must all come before its end record.
    let mut ends = Workload::start();
    ends.script(SHAPES);
    let ends_tgid = ends.tgid;
    ends.exit();

    // Started the way launchers start programs (fork, then exec): launches right away.
    let mut launched = Workload::spawn_command({
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg("exec \"$0\"")
            .arg(fakecuda().join("bin/workload"));
        c
    });
    launched.script(&["rt_launch gemm 11 2 2 1 32 1 1 0 0", "storm 2 3000"]);

    // Execs from one CUDA program into another, then away from CUDA. (The pauses let the daemon
    // read each program's name while it runs, in either mode: see the capture tests.)
    let pause = || std::thread::sleep(std::time::Duration::from_secs(1));
    let mut execs = Workload::start();
    execs.cmd("rt_launch gemm 3 1 1 1 32 1 1 0 0");
    execs.cmd("drv_launch cupy_scale 2 1 1 1 32 1 1 0 0");
    pause();
    execs.exec(&trainer.display().to_string(), true);
    execs.script(&["rt_launch relu 2 1 1 1 32 1 1 0 0", "storm 2 1000"]);
    pause();
    execs.exec("/bin/sleep 0.2", false);
    let execs_tgid = execs.tgid;
    assert!(execs.wait().success());

    // Still running when the daemon stops: its last launches are read at the stop.
    let mut running = Workload::start();
    running.script(&["rt_launch reduce 9 4 1 1 256 1 1 1024 0", "storm 3 2000"]);
    let r = d.stop().report;
    let procs = r["processes"].as_array().unwrap();
    let of = |tgid: u32| -> Vec<Value> {
        procs
            .iter()
            .filter(|p| p["tgid"] == tgid)
            .map(launches_of)
            .collect()
    };
    let mut out = of(ends_tgid);
    out.extend(of(launched.tgid));
    out.extend(of(execs_tgid));
    out.extend(of(running.tgid));
    drop(launched);
    drop(running);
    (out, r)
}

#[test]
fn counted_launches_equal_a_record_per_launch() {
    let (recorded, r) = run(None);
    // The reference run itself: every launch of the scripts, each program on its own.
    let totals: Vec<(String, u64)> = recorded
        .iter()
        .map(|p| {
            (
                p["comm"].as_str().unwrap().to_owned(),
                p["launches"].as_u64().unwrap(),
            )
        })
        .collect();
    let expect = |c: &str, n: u64| (c.to_owned(), n);
    assert_eq!(
        totals,
        [
            expect("workload", SHAPE_LAUNCHES),
            expect("workload", 11 + 2 * 3000),
            expect("workload", 3 + 2),
            expect("trainer", 2 + 2 * 1000),
            expect("workload", 9 + 3 * 2000),
        ],
        "{r}"
    );
    let all = SHAPE_LAUNCHES + 11 + 6000 + 5 + 2002 + 9 + 6000;
    assert_eq!(r["submitted"]["launch"], all, "a record per launch");

    // Counted, read only when a process ends or execs and at the stop (60 s: no periodic read
    // within the run), then read every 10 ms (reads racing every exec and end).
    for interval in ["60s", "10ms"] {
        let (counted, r) = run(Some(interval));
        assert_eq!(
            counted, recorded,
            "--count-launches {interval} differs from a record per launch"
        );
        assert_eq!(r["submitted"]["launch"], 0, "counted in the kernel: {r}");
        assert_eq!(r["drops"]["launch"], 0);
        assert!(r["drops"].get("counted_launches_channel").is_none(), "{r}");
        // The graph launches are still records (two per process that ran SHAPES).
        assert_eq!(r["submitted"]["graph"], 2, "{r}");
    }
}

#[test]
fn counting_refuses_a_capture_file() {
    let (code, _, err) = run_all_jobs(&["--count-launches", "1s", "-o", "/tmp/x.gpuprof"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(
            "--count-launches cannot write a capture file: a capture keeps every call, and \
             counted launches are only totals. Drop --count-launches"
        ),
        "{err}"
    );
    let (code, _, err) = run_all_jobs(&["--count-launches", "5ms"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("between 10ms and 60s"), "{err}");
}

/// Counted launches keep the time of the latest ones without a clock read per launch: the
/// probes read the precise clock when they make an entry and once per kernel tick after that.
/// A process that launches, sleeps 1.5 s and launches the same configuration three times is
/// active over the 1.5 s, counted as recorded (a stamp that stayed at the entry's first launch
/// would put all four launches at the first).
#[test]
fn counted_launches_keep_the_time_of_the_latest_ones() {
    let lib = fakecuda().join("lib");
    for count in [None, Some("100ms")] {
        let mut args = all_jobs_args(&lib).to_vec();
        if let Some(interval) = count {
            args.extend(["--count-launches", interval]);
        }
        let d = Daemon::start(&args);
        let mut w = Workload::start();
        w.script(&[
            "rt_launch gemm 1 4 1 1 32 1 1 0 0",
            "sleep_ms 1500",
            "rt_launch gemm 3 4 1 1 32 1 1 0 0",
        ]);
        let tgid = w.tgid;
        w.exit();
        let r = d.stop().report;
        let p = process(&r, tgid);
        assert_eq!(p["launches"], 4, "{count:?}: {p}");
        let t = &p["timeline"];
        let launches: u64 = t["launches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_u64().unwrap())
            .sum();
        assert_eq!(launches, 4, "{count:?}: {t}");
        let span = t["last_call_ns"].as_u64().unwrap() - t["first_call_ns"].as_u64().unwrap();
        assert!(
            (1_500_000_000..2_500_000_000).contains(&span),
            "{count:?}: first to last launch {span} ns, slept 1.5 s between them: {t}"
        );
        let submitted = if count.is_some() { 0 } else { 4 };
        assert_eq!(r["submitted"]["launch"], submitted, "{count:?}: {r}");
    }
}
