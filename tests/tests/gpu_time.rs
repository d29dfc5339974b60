//! Exact GPU time end to end, with nothing set by hand: `gpuprofd -- COMMAND` names the real
//! injection library (`libgpuprofd_inject.so`, beside the binary) in the command's
//! `CUDA_INJECTION64_PATH`; the fake driver loads it at `cuInit`, as the real one does; the
//! daemon finds it mapped and probes its sites, which raises its semaphore; the library then
//! enables the fake CUPTI 12.9 (on the command's library path), whose records carry the GPU
//! durations the workload scripted; and the report gives each kernel and copy exactly those
//! times, on the rows of the launches the probes counted, each kernel joined to its launch
//! (CUPTI's launch calls: correlation id and thread), with a flow arrow on the timeline.
//!
//! Run through `cargo xtask test` (as root, `--test-threads=1`).

use gpuprofd_tests::*;
use serde_json::{Value, json};
use std::process::{Command, Stdio};

/// The command's script: a pause long enough for the daemon to attach to the library and for
/// the library to see its semaphore (polled every 100 ms), then kernels and copies with
/// scripted GPU durations.
const SCRIPT: &str = "sleep_ms 1500
gpu_ns kernel 250000
rt_launch relu 4 1 1 1 32 1 1 0 0
gpu_ns kernel 1000000
rt_launch gemm 2 1 1 1 32 1 1 0 0
gpu_ns memcpy 7000
rt_memcpy h2d 4096 3
exit
";

fn kernel<'a>(p: &'a Value, mangled: &str) -> &'a Value {
    p["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["mangled"] == mangled)
        .unwrap_or_else(|| panic!("no kernel {mangled}: {}", p["kernels"]))
}

/// Runs `gpuprofd -- sh -c 'workload < SCRIPT > OUT'` with the fake CUPTI on the command's
/// library path (and `FAKECUPTI_LOG`, when given) and nothing set by hand for the library;
/// returns the report of its capture file (`DIR/run.gpuprof`; the same model reads its records
/// in capture order), the workload's replies and gpuprofd's stderr.
fn run_script(
    dir: &TempDir,
    script: &str,
    cupti_log: Option<&std::path::Path>,
) -> (Value, String, String) {
    run_program(dir, "workload", script, cupti_log)
}

/// [`run_script`] with another of the fakes' workload programs (`bin/PROGRAM`).
fn run_program(
    dir: &TempDir,
    program: &str,
    script: &str,
    cupti_log: Option<&std::path::Path>,
) -> (Value, String, String) {
    let file = dir.path().join("script");
    std::fs::write(&file, script).unwrap();
    let capture = dir.path().join("run.gpuprof");
    let replies = dir.path().join("workload.out");
    let cmd = format!(
        "{} < {} > {}",
        fakecuda().join("bin").join(program).display(),
        file.display(),
        replies.display()
    );
    let mut c = Command::new(daemon_bin());
    c.args(["--no-system-libs", "--no-nvml", "--no-live", "--no-state"])
        .arg("--lib")
        .arg(fakecuda().join("lib"))
        .args(["-o", capture.to_str().unwrap(), "--", "/bin/sh", "-c", &cmd])
        // The command inherits these: the fake CUPTI where the library looks for CUPTI. Not
        // CUDA_INJECTION64_PATH: gpuprofd sets that.
        .env("LD_LIBRARY_PATH", fakecuda().join("lib-cupti"))
        .env_remove("CUDA_INJECTION64_PATH")
        .stdin(Stdio::null());
    if let Some(log) = cupti_log {
        c.env("FAKECUPTI_LOG", log);
    }
    let out = c.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    let (code, out, rerr) = run_daemon(&["report", capture.to_str().unwrap(), "--format", "json"]);
    assert_eq!(code, 0, "{rerr}");
    let replies = std::fs::read_to_string(&replies).unwrap();
    (serde_json::from_str(&out).unwrap(), replies, err)
}

/// The workload's process in a report.
fn workload_of(r: &Value) -> &Value {
    r["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["comm"] == "workload")
        .unwrap_or_else(|| panic!("no workload process: {}", r["processes"]))
}

/// torch.profiler started after the library enabled: it subscribes (the library holds no
/// subscription), registers its own buffer callbacks and gets CUPTI's records from then on.
/// Its profiler works; the report says GPU times stopped, and why, once the process has gone
/// on launching for more than 2 s without them.
const TAKEN_SCRIPT: &str = "sleep_ms 1500
gpu_ns kernel 250000
rt_launch relu 4 1 1 1 32 1 1 0 0
sleep_ms 400
cupti_client take
rt_launch gemm 1 1 1 1 32 1 1 0 0
sleep_ms 1200
rt_launch gemm 1 1 1 1 32 1 1 0 0
sleep_ms 1200
rt_launch gemm 1 1 1 1 32 1 1 0 0
exit
";

#[test]
fn a_later_cupti_client_takes_the_records_and_the_report_says_so() {
    require_bpf();
    let dir = TempDir::new("gpu-time-taken");
    let (r, replies, _) = run_script(&dir, TAKEN_SCRIPT, None);
    assert!(
        replies.contains("ok cupti_client result=0"),
        "the client's subscription: {replies}"
    );
    let p = workload_of(&r);
    let g = &p["gpu_time"];
    assert_eq!(
        (
            &g["basis"],
            &g["state"],
            &g["kernels"],
            &g["kernel_ns"],
            &g["joined"]
        ),
        (
            &json!("measured"),
            &json!("enabled"),
            &json!(4),
            &json!(4 * 250_000),
            &json!(4)
        ),
        "{g}"
    );
    assert_eq!(g["launches_without_records"], json!(3), "{g}");
    let why = g["unavailable"].as_str().unwrap_or_default();
    assert!(
        why.contains("another CUPTI client") && why.contains("3 launches"),
        "{g}"
    );
    assert_eq!(
        kernel(p, "_Z4gemmPKfS0_Pfiii")["gpu_time"],
        Value::Null,
        "{}",
        kernel(p, "_Z4gemmPKfS0_Pfiii")
    );
}

#[test]
fn a_command_gets_measured_gpu_times_with_no_setting() {
    require_bpf();
    let dir = TempDir::new("gpu-time");
    let log = dir.path().join("cupti.log");
    let (r, _, err) = run_script(&dir, SCRIPT, Some(&log));
    // run_script's capture file
    let capture = dir.path().join("run.gpuprof");
    let file = capture.to_str().unwrap();
    assert!(
        !err.contains("no exact GPU times"),
        "gpuprofd did not find the library: {err}"
    );
    let p = workload_of(&r);

    let g = &p["gpu_time"];
    assert_eq!(
        (&g["basis"], &g["source"], &g["state"], &g["unavailable"]),
        (
            &json!("measured"),
            &json!("cupti"),
            &json!("enabled"),
            &Value::Null
        ),
        "{g}"
    );
    // CUPTI API version 28 (12.9 Update 1), as the fake CUPTI says.
    assert_eq!(g["state_detail"], json!(28));
    // Which CUPTI: none was in the process and none beside its runtime, so the loader's
    // search path found the fake one (LD_LIBRARY_PATH).
    let lib = g["cupti_library"].as_str().unwrap_or_default();
    assert_eq!(
        (&g["cupti_found"], std::path::Path::new(lib).parent()),
        (
            &json!("by_name"),
            Some(fakecuda().join("lib-cupti").as_path())
        ),
        "{g}"
    );
    assert_eq!(g["dropped"], json!(0));
    assert_eq!(
        (&g["kernels"], &g["kernel_ns"]),
        (&json!(6), &json!(4 * 250_000 + 2 * 1_000_000))
    );
    assert_eq!(g["memcpy_ns"], json!(3 * 7_000));
    assert_eq!(
        g["copies"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["count"].as_u64().unwrap(), c["bytes"].as_u64().unwrap()))
            .collect::<Vec<_>>(),
        vec![(3, 3 * 4096)]
    );

    // The launches the probes counted carry the GPU time CUPTI measured for them.
    let relu = kernel(p, "_Z4reluPfi");
    assert_eq!(relu["calls"], json!(4));
    let t = &relu["gpu_time"];
    assert_eq!(
        (
            &t["basis"],
            &t["count"],
            &t["total_ns"],
            &t["min_ns"],
            &t["max_ns"]
        ),
        (
            &json!("measured"),
            &json!(4),
            &json!(1_000_000),
            &json!(250_000),
            &json!(250_000)
        )
    );
    let gemm = kernel(p, "_Z4gemmPKfS0_Pfiii");
    assert_eq!(gemm["calls"], json!(2));
    assert_eq!(
        (&gemm["gpu_time"]["count"], &gemm["gpu_time"]["total_ns"]),
        (&json!(2), &json!(2_000_000))
    );
    assert_eq!(gemm["gpu_time"]["share"], json!(2.0 / 3.0));

    // The overview page ranks the kernels by the measured GPU time, and says so.
    let dom = overview_dom(&capture, "gpu-time-overview");
    assert!(
        dom.contains("Top kernels (by GPU time, measured by CUPTI through the injection library)"),
        "{dom}"
    );
    let rows: Vec<&str> = dom
        .split("<tr>")
        .skip(1)
        .filter(|row| row.contains("data-k=\"gpu_ns\""))
        .collect();
    let gemm_row = rows
        .iter()
        .find(|row| row.contains("gemm("))
        .unwrap_or_else(|| panic!("no gemm row: {dom}"));
    assert!(
        gemm_row.contains("<td class=\"\" data-k=\"gpu_ns\">2.000</td>"),
        "{gemm_row}"
    );
    assert!(
        gemm_row.contains("<td class=\"\" data-k=\"gpu_share\">66.7</td>"),
        "{gemm_row}"
    );
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(
        rows[0].contains("gemm(") && rows[1].contains("relu("),
        "gemm (2 ms) ranks before relu (1 ms): {rows:?}"
    );

    // Every kernel joined the launch that caused it, through its launch call (cuLaunchKernel
    // under cudaLaunchKernel, on the workload's one thread, gettid in the same PID namespace).
    assert_eq!(
        (
            &g["records"],
            &g["calls"],
            &g["joined"],
            &g["unjoined"],
            &g["unjoined_by"],
            &g["launches_evicted"]
        ),
        (
            &json!(9),
            &json!(6),
            &json!(6),
            &json!(0),
            &json!({}),
            &json!(0)
        ),
        "{g}"
    );
    let tgid = p["tgid"].as_u64().unwrap();
    gpu_arrows(file, tgid, dir.path());

    // What the library asked of CUPTI, in order: enabled once, never disabled before the end
    // (the command ended first), and its records flushed at the exit.
    let lines: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("deliver "))
        .map(str::to_owned)
        .collect();
    assert_eq!(lines[..CUPTI_ENABLE.len()], CUPTI_ENABLE, "{lines:?}");
}

/// The timeline of the capture: each of the 6 kernel slices has an arrow (`cat: gpu`) from
/// its launch's slice on the workload's thread, arriving at the slice (`bp: e`) at its GPU
/// start; the Perfetto export carries the same 6 arrows (and no other).
fn gpu_arrows(file: &str, tgid: u64, dir: &std::path::Path) {
    let trace = dir.join("trace.json");
    let (code, _, err) = run_daemon(&["export", file, "-o", trace.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let t: Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let ev: Vec<&Value> = t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["pid"] == tgid)
        .collect();
    let kernels: Vec<&Value> = ev
        .iter()
        .copied()
        .filter(|e| e["cat"] == "gpu kernel")
        .collect();
    let launches: Vec<&Value> = ev
        .iter()
        .copied()
        .filter(|e| e["cat"] == "launch" && e["tid"].as_u64() < Some(1 << 20))
        .collect();
    assert_eq!((kernels.len(), launches.len()), (6, 6), "{t}");
    let starts: Vec<&Value> = ev
        .iter()
        .copied()
        .filter(|e| e["cat"] == "gpu" && e["ph"] == "s")
        .collect();
    let ends: Vec<&Value> = ev
        .iter()
        .copied()
        .filter(|e| e["cat"] == "gpu" && e["ph"] == "f")
        .collect();
    assert_eq!((starts.len(), ends.len()), (6, 6), "{t}");
    for (s, l) in starts.iter().zip(&launches) {
        assert_eq!((&s["tid"], &s["ts"]), (&l["tid"], &l["ts"]), "{s} {l}");
    }
    // In launch order: relu 4 times, then gemm twice, each to its own kernel slice.
    let mut names = vec![];
    for s in &starts {
        let f = ends
            .iter()
            .find(|f| f["id"] == s["id"])
            .unwrap_or_else(|| panic!("{s}"));
        assert_eq!(f["bp"], json!("e"), "{f}");
        let k = kernels
            .iter()
            .find(|k| k["tid"] == f["tid"] && k["ts"] == f["ts"])
            .unwrap_or_else(|| panic!("no kernel slice for {f}"));
        names.push(k["name"].as_str().unwrap().to_owned());
    }
    let want: Vec<String> = ["relu(float*, int)"; 4]
        .into_iter()
        .chain(["gemm(float const*, float const*, float*, int, int, int)"; 2])
        .map(str::to_owned)
        .collect();
    assert_eq!(names, want);
    let pf = dir.join("trace.pftrace");
    let (code, _, err) = run_daemon(&["export", file, "-o", pf.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let got = check_pftrace(&pf, &trace);
    assert_eq!(got["flows"].as_u64(), Some(6), "{got}");
}

/// `--no-inject`: the command runs without the library, and its report says why there are no
/// measured times.
#[test]
fn no_inject_leaves_the_command_alone() {
    require_bpf();
    let dir = TempDir::new("gpu-time-off");
    let report = dir.path().join("report.json");
    let workload = fakecuda().join("bin/workload");
    let cmd = format!(
        "printf 'rt_launch relu 2 1 1 1 32 1 1 0 0\\n' | {} > /dev/null",
        workload.display()
    );
    let out = Command::new(daemon_bin())
        .args(["--no-system-libs", "--no-nvml", "--no-live", "--no-state"])
        .arg("--lib")
        .arg(fakecuda().join("lib"))
        .args(["--no-inject", "-o", report.to_str().unwrap()])
        .args(["--", "/bin/sh", "-c", &cmd])
        .env("LD_LIBRARY_PATH", fakecuda().join("lib-cupti"))
        .env_remove("CUDA_INJECTION64_PATH")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = read_report(&report);
    let p = r["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["comm"] == "workload")
        .unwrap_or_else(|| panic!("no workload process: {r}"))
        .clone();
    assert_eq!(p["launches"], json!(2));
    assert_eq!(p["gpu_time"]["basis"], json!("absent"), "{}", p["gpu_time"]);
    let libs: Vec<&str> = r["libraries"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["path"].as_str())
        .filter(|p| p.ends_with("libgpuprofd_inject.so"))
        .collect();
    assert_eq!(libs, Vec::<&str>::new(), "the library was loaded: {r}");
}

/// The steps view (JSON) of the one process with a step loop in `capture`.
fn steps_of(capture: &std::path::Path) -> Value {
    let (code, out, err) = run_daemon(&[
        "report",
        capture.to_str().unwrap(),
        "--view",
        "steps",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let loops = v.as_array().unwrap();
    assert_eq!(loops.len(), 1, "{v}");
    loops[0].clone()
}

/// A training loop with scripted GPU work: per iteration a 50 ms kernel on stream 1, a 10 ms
/// one on stream 2 launched right after it (so it runs inside the first), a second 50 ms one on
/// stream 1 (queued behind the first: the fake GPU runs a stream's work in order), then 150 ms
/// of host time and a stream sync, the step's boundary.
const LOOP_SCRIPT: &str = "sleep_ms 1500
gpu_ns kernel 50000000
rt_launch gemm 1 1 1 1 32 1 1 0 1
gpu_ns kernel 10000000
rt_launch relu 1 1 1 1 32 1 1 0 2
gpu_ns kernel 50000000
rt_launch gemm 1 1 1 1 32 1 1 0 1
sleep_ms 150
rt_sync_stream 1 1
";

#[test]
fn each_step_gets_its_measured_gpu_busy_time_overlaps_counted_once() {
    require_bpf();
    let dir = TempDir::new("gpu-time-steps");
    // Five iterations: the first sync closes the warm-up, the next four close a step each.
    let body = LOOP_SCRIPT.strip_prefix("sleep_ms 1500\n").unwrap();
    let script = format!("sleep_ms 1500\n{}exit\n", body.repeat(5));
    let (_, _, _) = run_script(&dir, &script, None);
    let capture = dir.path().join("run.gpuprof");
    let s = steps_of(&capture);
    let steps = s["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 4, "{s}");
    const MS: u64 = 1_000_000;
    for st in steps {
        // The kernels' GPU time is their sum, 110 ms; busy time is their union: the stream-2
        // kernel ran inside stream 1's 100 ms, so 100 ms exactly.
        assert_eq!(
            (st["gpu_ns"].as_u64(), st["gpu_busy_ns"].as_u64()),
            (Some(110 * MS), Some(100 * MS)),
            "{st}"
        );
        assert!(st["wall_ns"].as_u64().unwrap() >= 150 * MS, "{st}");
    }
    // The table's median share of the step the GPU was busy: 100 ms of a bit over 150.
    let share = s["gpu_busy_share"].as_f64().unwrap();
    assert!((0.4..0.67).contains(&share), "{s}");
    // The overview page draws each step's busy time beside its wall time and tables the
    // medians, labelled measured.
    let dom = overview_dom(&capture, "gpu-busy-steps");
    assert!(
        dom.contains("data-series=\"gpu-busy\" stroke-dasharray=\"4 3\" data-points=\"4\""),
        "{dom}"
    );
    assert!(
        dom.contains("<td class=\"\" data-k=\"busy_p50_ms\">100.000</td>"),
        "{dom}"
    );
    assert!(dom.contains("GPU busy ms (measured, median)"), "{dom}");
    // The timeline's step spans carry it too.
    let t = chrome_trace(&capture);
    let busy: Vec<u64> = t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "step")
        .map(|e| e["args"]["gpu_busy_ns"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(busy, [100 * MS; 4]);
}

/// A data-parallel step on the fakes: a 50 ms compute kernel on stream 1; an all-reduce on
/// stream 2 whose 20 ms kernel runs beside it (hidden behind compute); an all-reduce on stream
/// 1 whose 60 ms kernel runs after it (exposed: nothing else runs); 150 ms of host time (the
/// kernels end 110 ms in); the sync.
const NCCL_LOOP: &str = "gpu_ns kernel 50000000
launch 1 1
gpu_ns kernel 20000000
allreduce 0 1024 7 0 2 1
gpu_ns kernel 60000000
allreduce 0 1024 7 0 1 1
sleep_ms 150
sync 1
";

#[test]
fn each_step_gets_its_communication_and_the_part_not_hidden_behind_compute() {
    require_bpf();
    let dir = TempDir::new("gpu-time-nccl");
    // cuInit (the library's load) comes with the first runtime call: the pause after it.
    let script = format!(
        "set_device 0\nsleep_ms 1500\nstream 1\nstream 2\ninit_config 0 seed 1 0\n{}exit\n",
        NCCL_LOOP.repeat(5)
    );
    let (r, replies, _) = run_program(&dir, "nccl_workload", &script, None);
    assert!(!replies.contains("err "), "{replies}");
    let p = r["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["comm"] == "nccl_workload")
        .unwrap_or_else(|| panic!("no nccl_workload: {}", r["processes"]));
    // Each all-reduce's kernel is tied to the call that launched it: 10 kernels, 5 × (20 +
    // 60) ms on the GPU.
    let op = &p["nccl"]["communicators"][0]["ops"][0];
    assert_eq!(
        (&op["op"], &op["calls"], &op["gpu_kernels"], &op["gpu_ns"]),
        (
            &json!("AllReduce"),
            &json!(10),
            &json!(10),
            &json!(5 * 80_000_000u64)
        ),
        "{op}"
    );
    let g = &p["gpu_time"];
    // 5 compute kernels and 10 NCCL kernels, every one joined to its launch.
    assert_eq!(
        (&g["kernels"], &g["joined"]),
        (&json!(15), &json!(15)),
        "{g}"
    );
    let capture = dir.path().join("run.gpuprof");
    let s = steps_of(&capture);
    let steps = s["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 4, "{s}");
    const MS: u64 = 1_000_000;
    for st in steps {
        let got = [
            "gpu_ns",
            "gpu_busy_ns",
            "gpu_comm_ns",
            "gpu_comm_exposed_ns",
        ]
        .map(|k| st[k].as_u64());
        // Kernels 50 + 20 + 60 ms; busy 110 (the hidden all-reduce inside the compute);
        // communication 20 + 60; exposed 60.
        assert_eq!(
            got,
            [Some(130 * MS), Some(110 * MS), Some(80 * MS), Some(60 * MS)],
            "{st}"
        );
    }
    // 60 ms exposed of a step a little over 150 ms (the rule's bar: 20 %): the advice says so.
    let (code, out, err) = run_daemon(&["report", capture.to_str().unwrap(), "--view", "advice"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("exposed_communication")
            && out.contains("NCCL's kernels ran 80.000 ms of each, 60.000 ms"),
        "{out}"
    );
    // The timeline has each all-reduce on its communicator's track, with its communicator,
    // figures and the thread that called it.
    let t = chrome_trace(&capture);
    let calls: Vec<&Value> = t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "nccl" && e["name"] == "ncclAllReduce")
        .collect();
    assert_eq!(calls.len(), 10, "{calls:?}");
    let comm_id = &p["nccl"]["communicators"][0]["id"];
    for c in &calls {
        let a = &c["args"];
        assert_eq!(
            (
                &a["comm_id"],
                &a["rank"],
                &a["nranks"],
                &a["bytes"],
                &a["datatype"],
                &a["reduction"]
            ),
            (
                comm_id,
                &json!(0),
                &json!(1),
                &json!(4096),
                &json!("float32"),
                &json!("sum")
            ),
            "{c}"
        );
    }
    let track = |name: &str| {
        t["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == "thread_name" && e["args"]["name"] == name)
            .unwrap_or_else(|| panic!("no track {name}"))["tid"]
            .clone()
    };
    let comm_track = track(&format!("NCCL {} rank 0/1", comm_id.as_str().unwrap()));
    for c in &calls {
        assert_eq!(c["tid"], comm_track, "{c}");
        assert_eq!(
            c["args"]["thread"], c["pid"],
            "called from the main thread: {c}"
        );
    }
    // The overview page tables the same medians.
    let dom = overview_dom(&capture, "gpu-comm-steps");
    for (k, v) in [
        ("busy_p50_ms", "110.000"),
        ("comm_p50_ms", "80.000"),
        ("exposed_p50_ms", "60.000"),
    ] {
        assert!(
            dom.contains(&format!("<td class=\"\" data-k=\"{k}\">{v}</td>")),
            "{k}: {dom}"
        );
    }
}
