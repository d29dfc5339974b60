//! The GPU validation harness (scripts/gpu-validate.sh) where there is no GPU: its dry run, its
//! no-GPU steps against the fake driver, and its comparison logic on synthetic inputs with
//! known mismatches. The GPU steps themselves only run on a lent GPU machine.

use gpuprofd_tests::*;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn harness(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut c = Command::new("bash");
    c.arg(repo().join("scripts/gpu-validate.sh"))
        .arg("--bin")
        .arg(daemon_bin())
        .args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("run scripts/gpu-validate.sh");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn dry_run_checks_prerequisites_and_prints_the_plan() {
    let dir = TempDir::new("gv-dry");
    let out = dir.path().join("never-created");
    let (code, stdout, stderr) = harness(&["--dry-run", "--out", out.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    for step in [
        "doctor",
        "procaddr",
        "coverage",
        "live",
        "service",
        "code",
        "attribution",
        "device",
        "nccl",
        "gputime",
        "neighbour",
        "overhead",
        "nvml",
    ] {
        assert!(
            stdout.contains(&format!("  run   {step}\n")),
            "{step} not planned:\n{stdout}"
        );
    }
    assert!(stdout.contains("  ok       gpuprofd"), "{stdout}");
    assert!(stdout.contains("dry run: nothing executed"), "{stdout}");
    assert!(!out.exists(), "a dry run wrote {}", out.display());

    let (code, stdout, _) = harness(&["--dry-run", "--only", "doctor,nvml"], &[]);
    assert_eq!(code, 0);
    assert!(stdout.contains("  run   doctor\n") && stdout.contains("  skip  coverage\n"));
    let (code, _, stderr) = harness(&["--dry-run", "--only", "warp"], &[]);
    assert_eq!(code, 2);
    assert!(stderr.contains("unknown step 'warp'"), "{stderr}");
    let (code, _, stderr) = harness(&["--dry-run", "--modes", "none,turbo"], &[]);
    assert_eq!(code, 2);
    assert!(stderr.contains("unknown overhead mode 'turbo'"), "{stderr}");
}

#[test]
fn no_gpu_steps_against_the_fake_driver() {
    require_bpf();
    let dir = TempDir::new("gv-run");
    let out = dir.path().join("out");
    let lib = fakecuda().join("lib");
    let (code, stdout, stderr) = harness(
        &[
            "--only",
            "doctor,procaddr",
            "--lib",
            lib.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        &[("LD_LIBRARY_PATH", lib.to_str().unwrap())],
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(r["schema"], "gpuprofd.validation/1");
    assert_eq!(r["findings"], json!([]), "{}", r["findings"]);
    assert_eq!(r["doctor"]["ok"], true);
    let sonames: Vec<&str> = r["doctor"]["libraries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["soname"].as_str().unwrap())
        .collect();
    assert_eq!(sonames, ["libcuda.so.1", "libcudart.so.12"]);
    // The fake driver hands out its exported trampolines, as the real one must.
    assert_eq!(r["procaddr"]["all_same"], true);
    assert_eq!(r["procaddr"]["cuInit"], 0);
    assert_eq!(r["procaddr"]["symbols"].as_array().unwrap().len(), 25);
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(
        md.contains("| bpf_round_trip | True | 3 calls, 3 records"),
        "{md}"
    );
}

/// Runs compare.py on `d/manifest.json` into `d/out`; its `results.json`.
fn compare(d: &std::path::Path) -> Value {
    let out = Command::new("python3")
        .arg(repo().join("scripts/gpu-workloads/compare.py"))
        .arg(d.join("manifest.json"))
        .arg(d.join("out"))
        .output()
        .expect("python3 (the validation scripts need it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(d.join("out/results.json")).unwrap()).unwrap()
}

#[test]
fn compare_reports_every_mismatch() {
    let dir = TempDir::new("gv-compare");
    let d = dir.path();
    let write = |name: &str, v: Value| std::fs::write(d.join(name), v.to_string()).unwrap();
    write(
        "report.json",
        json!({"schema": "gpuprofd.report/1", "drops": {"launch": 0, "copy": 3},
          "processes": [
            {"tgid": 100, "launches": 10, "unnamed_launches": 1, "graphs": {"launches": 0},
             "kernels": [{"name": "k1(int)", "calls": 10}],
             "copies": [{"direction": "h2d", "calls": 2, "bytes": 200}],
             "api": [{"name": "cudaLaunchKernel", "calls": 10}, {"name": "cudaMalloc", "calls": 1},
                     {"name": "cuMemAlloc_v2", "calls": 2}, {"name": "cudaFree", "calls": 1}]},
            {"tgid": 200, "launches": 4, "unnamed_launches": 0, "graphs": {"launches": 5},
             "kernels": [{"name": "k3", "calls": 4}], "copies": [],
             "api": [{"name": "cudaGraphLaunch", "calls": 5}]}]}),
    );
    write(
        "a.json",
        json!({"workload": "a", "pid": 100, "steps": 1, "step_times_s": [0.1],
          "profiler": {"kernels": 11, "kernel_names": {"k1(int)": 10, "k2": 1},
                       "memcpy": {"h2d": {"calls": 2, "bytes": 200}, "d2h": {"calls": 1, "bytes": 4}},
                       "api": {"cudaLaunchKernel": 11, "cudaMalloc": 3, "cudaFree": 2}},
          "known": {}}),
    );
    write(
        "b.json",
        json!({"workload": "b", "pid": 200, "steps": 5, "step_times_s": [0.1],
          "profiler": {"kernels": 20, "kernel_names": {"k3": 20}, "memcpy": {}, "api": {"cudaGraphLaunch": 5}},
          "known": {"graph_replays": 5}}),
    );
    write(
        "none.json",
        json!({"workload": "lb", "pid": 1, "steps": 3, "step_times_s": [1.0, 2.0, 3.0], "profiler": null, "known": {}}),
    );
    write(
        "gp.json",
        json!({"workload": "lb", "pid": 2, "steps": 3, "step_times_s": [2.0, 2.2, 9.0], "profiler": null, "known": {}}),
    );
    // The code view: launches whose stack holds `FILE:LINE forward`, per marked line. CPython
    // 3.11+ names the frame `Net.forward` (its qualified name); `Net.forward_pre` is not it.
    let fwd = |l: u32| format!("/w/code_view.py:{l} forward");
    let qual = |l: u32| format!("/w/code_view.py:{l} Net.forward");
    write(
        "code.json",
        json!({"schema": "gpuprofd.report/1", "drops": {},
          "processes": [{"tgid": 300, "launches": 9, "code": [
              {"stack": ["/w/code_view.py:50 main", fwd(24)], "launches": 5},
              {"stack": ["/w/code_view.py:50 main", fwd(25)], "launches": 3},
              {"stack": ["/w/code_view.py:50 main", qual(25)], "launches": 2},
              {"stack": ["/w/code_view.py:50 main", "/w/code_view.py:26 Net.forward_pre"], "launches": 7},
              {"stack": ["/w/code_view.py:50 main", fwd(26), "x (libc.so.6)"], "launches": 1}],
            "stacks": {"samples": 9, "python": "CPython 3.11 (/usr/bin/python3.11)", "python_no_thread": 0}}]}),
    );
    write(
        "c.json",
        json!({"pid": 300, "file": "/w/code_view.py", "steps": 3,
               "lines": {"fc1": 24, "relu": 25, "fc2": 26}}),
    );
    write(
        "manifest.json",
        json!({"env": {"gpu": "test"}, "doctor": null, "procaddr": null, "nvml": null, "runs": [
            {"name": "run1", "kind": "coverage", "report": "report.json", "error": null, "results": ["a.json", "b.json"]},
            {"name": "jax_jit", "kind": "coverage", "report": null, "error": "jax is not importable", "results": []},
            {"name": "code_view", "kind": "code", "report": "code.json", "error": null, "results": ["c.json"]},
            {"name": "oh_none", "kind": "overhead", "mode": "none", "report": null, "error": null, "results": ["none.json"]},
            {"name": "oh_g", "kind": "overhead", "mode": "gpuprofd", "report": null, "error": null, "results": ["gp.json"]}]}),
    );
    let r = compare(d);
    assert_eq!(
        r["findings"],
        json!([
            "run1: gpuprofd dropped records: {'copy': 3}",
            "run1: gpuprofd counted 10 kernel launches, torch.profiler 11 (-1)",
            "run1: 1 kernel names differ from torch.profiler's, e.g. ['k2']",
            "run1: d2h copies gpuprofd 0 calls / 0 B, torch.profiler 1 / 4 B",
            // A family's total, whatever the split between runtime and driver names (a
            // statically linked runtime's cudaMalloc reaches gpuprofd as cuMemAlloc_v2).
            "run1: device frees: gpuprofd 1 calls, torch.profiler 2",
            "run1: kernel launches: gpuprofd 10 calls, torch.profiler 11",
            "jax_jit: did not run: jax is not importable",
            "code_view: /w/code_view.py:26 forward: 1 launches attributed, expected at least 3",
        ])
    );
    assert_eq!(
        r["code_view"][0]["lines"],
        json!({"fc1": {"line": 24, "launches": 5}, "relu": {"line": 25, "launches": 5},
               "fc2": {"line": 26, "launches": 1}})
    );
    let p = &r["processes"];
    assert_eq!(p[0]["named_fraction"], 0.9);
    assert_eq!(p[0]["profiler_names_matched"], "1/2");
    // Graph replays are checked against graph launches, not kernel counts.
    assert_eq!(p[1]["graph_replays"], 5);
    assert!(p[1].get("launch_diff").is_none());
    assert_eq!(
        r["overhead"],
        json!([{"workload": "lb", "median_step_s": {"none": 2.0, "gpuprofd": 2.2},
                "ratio_vs_none": {"none": 1.0, "gpuprofd": 1.1}}])
    );
}

/// The device step's comparison: each process's launches per device against the device torch
/// says it used and torch.profiler's count; the context probes' runs per launch; and the
/// neighbour step's ratio, with a finding when the neighbour shows up in `--pid`'s report.
#[test]
fn compare_reports_devices_and_the_neighbour() {
    let dir = TempDir::new("gv-device");
    let d = dir.path();
    let write = |name: &str, v: Value| std::fs::write(d.join(name), v.to_string()).unwrap();
    let row = |dev: Value, launches: u64| json!({"device": dev, "launches": launches, "copies": 0});
    write(
        "dev.report.json",
        json!({"schema": "gpuprofd.report/1", "drops": {}, "processes": [
            {"tgid": 10, "launches": 30, "devices": [row(json!(0), 30)]},
            {"tgid": 11, "launches": 12, "devices": [row(json!(0), 7), row(json!(1), 1),
                {"device": null, "launches": 4, "nvml_gpu": 0}]}]}),
    );
    write(
        "dev.bpfstats.json",
        json!({"programs": {"ctx_entry": {"runs": 21, "ns": 1000}, "ctx_ret": {"runs": 9, "ns": 400},
                            "drv_launch": {"runs": 42, "ns": 5000}}}),
    );
    write(
        "a.json",
        json!({"workload": "a", "pid": 10, "cuda_device": 0, "steps": 1, "step_times_s": [0.1],
               "profiler": {"kernels": 30}}),
    );
    write(
        "b.json",
        json!({"workload": "b", "pid": 11, "cuda_device": 0, "steps": 1, "step_times_s": [0.1],
               "profiler": {"kernels": 12}}),
    );
    let lb = |pid: u32, t: Vec<f64>| json!({"workload": "launch_bound", "pid": pid, "steps": t.len(), "step_times_s": t});
    write("n1.json", lb(20, vec![1.0, 1.0, 1.0]));
    write("n2.json", lb(21, vec![1.1, 1.1, 1.1]));
    write("n3.json", lb(22, vec![2.0, 2.0, 2.0]));
    write("p1.json", lb(23, vec![1.05, 1.05, 1.05]));
    write("p2.json", lb(24, vec![1.2, 1.2]));
    write("p3.json", lb(25, vec![1.3]));
    write(
        "p1.report.json",
        json!({"processes": [{"tgid": 99, "launches": 1}]}),
    );
    write(
        "p2.report.json",
        json!({"processes": [{"tgid": 24, "launches": 1}]}),
    );
    let nb = |name: &str, mode: &str, res: &str, rep: Value| json!({"name": name, "kind": "neighbour", "mode": mode, "report": rep, "error": null, "results": [res]});
    write(
        "manifest.json",
        json!({"env": {}, "doctor": null, "procaddr": null, "nvml": null, "runs": [
            {"name": "device_all", "kind": "device", "report": "dev.report.json", "error": null,
             "results": ["a.json", "b.json"]},
            nb("nb_r1_none", "none", "n1.json", Value::Null),
            nb("nb_r1_pid", "gpuprofd-pid-other", "p1.json", json!("p1.report.json")),
            nb("nb_r2_pid", "gpuprofd-pid-other", "p2.json", json!("p2.report.json")),
            nb("nb_r2_none", "none", "n2.json", Value::Null),
            nb("nb_r3_none", "none", "n3.json", Value::Null),
            nb("nb_r3_pid", "gpuprofd-pid-other", "p3.json", Value::Null)]}),
    );
    let r = compare(d);
    assert_eq!(
        r["findings"],
        json!([
            "device_all: pid 11: 1 launches on a device other than torch's current device 0",
            "device_all: pid 11: 7 launches on device 0, torch.profiler counted 12 kernels",
            "nb_r2_pid: the neighbour (pid 24) is in gpuprofd --pid's report",
        ])
    );
    let dev = &r["device"];
    assert_eq!(dev[0]["launches_on_device"], 30);
    assert_eq!(dev[0]["launches_unknown"], 0);
    assert_eq!(dev[1]["launches_on_device"], 7);
    assert_eq!(dev[1]["launches_unknown"], 4);
    assert_eq!(dev[1]["nvml_gpu"], 0);
    assert_eq!(
        dev[2]["context_probe_runs"],
        json!({"ctx_entry": 21, "ctx_ret": 9})
    );
    assert_eq!(dev[2]["launches_all_processes"], 42);
    assert_eq!(dev[2]["ctx_entry_per_launch"], 0.5);
    // Medians per run: none 1.0, 1.1, 2.0 -> 1.1; beside --pid 1.05, 1.2, 1.3 -> 1.2.
    assert_eq!(
        r["neighbour"]["median_step_s"],
        json!({"none": 1.1, "gpuprofd-pid-other": 1.2})
    );
    assert_eq!(r["neighbour"]["ratio"], 1.0909);
    let md = std::fs::read_to_string(d.join("out/summary.md")).unwrap();
    assert!(
        md.contains("| device_all | 11 | 0 | 12 | 7 | 4 | 0 | 12 |"),
        "{md}"
    );
}

/// The NCCL step's comparison: calls and bytes per operation over every communicator against
/// what the script asked for, and the communicator's rank, size and device.
#[test]
fn compare_reports_nccl_against_what_the_script_asked_for() {
    let dir = TempDir::new("gv-nccl");
    let d = dir.path();
    let write = |name: &str, v: Value| std::fs::write(d.join(name), v.to_string()).unwrap();
    let op = |op: &str, calls: u64, bytes: u64, dt: &str| {
        json!({"op": op, "calls": calls, "bytes": bytes, "in_group": 0,
               "datatypes": {dt: calls}, "reductions": {}, "streams": [], "devices": {},
               "gpu_kernels": calls})
    };
    write(
        "nccl.report.json",
        json!({"schema": "gpuprofd.report/1", "drops": {}, "processes": [
            {"tgid": 7, "launches": 0, "nccl": {"calls": 0, "bytes": 0, "communicators": [
                {"id": "00000000000000aa", "rank": 0, "nranks": 1, "device": 0,
                 "created_by": "ncclCommInitRankConfig", "ended": "destroyed",
                 "ops": [op("AllReduce", 26, 1000, "float32"), op("Broadcast", 13, 500, "float32")]},
                {"id": "00000000000000bb", "rank": 0, "nranks": 2, "device": 0,
                 "created_by": "ncclCommSplit", "ended": null,
                 "ops": [op("AllGather", 12, 48, "float32")]}]}},
            {"tgid": 8, "launches": 0}]}),
    );
    let res = |pid: u32| {
        json!({"workload": "nccl_collectives", "pid": pid, "cuda_device": 0, "steps": 13,
               "step_times_s": [0.1],
               "profiler": {"kernels": 2, "kernel_names": {"ncclDevKernel_AllReduce_Sum_f32_RING_LL": 2}},
               "known": {"rank": 0, "nranks": 1, "nccl": {
                   "AllReduce": {"calls": 26, "bytes": 1000},
                   "AllGather": {"calls": 13, "bytes": 52},
                   "Broadcast": {"calls": 13, "bytes": 500}}}})
    };
    write("a.json", res(7));
    write("b.json", res(8));
    write(
        "manifest.json",
        json!({"env": {}, "doctor": null, "procaddr": null, "nvml": null, "runs": [
            {"name": "nccl", "kind": "nccl", "report": "nccl.report.json", "error": null,
             "results": ["a.json", "b.json"]}]}),
    );
    let r = compare(d);
    assert_eq!(
        r["findings"],
        json!([
            "nccl: AllGather: gpuprofd 12 calls / 48 B, the script asked for 13 / 52 B",
            "nccl: communicator 00000000000000bb: rank 0 of 2 on device 0, expected rank 0 of 1 on device 0",
            "nccl: no NCCL call of process 8 in the report (was libnccl.so.2 found? see the report's libraries)",
        ])
    );
    let n = &r["nccl"][0];
    assert_eq!(
        n["ops"]["AllReduce"],
        json!({"known_calls": 26, "known_bytes": 1000, "calls": 26, "bytes": 1000,
               "datatypes": {"float32": 26}, "gpu_kernels": 26})
    );
    assert_eq!(n["profiler_nccl_kernels"], 2);
    assert_eq!(
        n["communicators"][0]["created_by"],
        "ncclCommInitRankConfig"
    );
}

/// Measured GPU time against torch.profiler's: kernels matched by name across the demanglers'
/// spellings ("void " and spaces), the sums and each top kernel against their goals, the join's
/// counts, and the run where torch.profiler held CUPTI: its kernels counted (a late profiler
/// taking CUPTI's records from an enabled library is fine), one CUPTI file in each process.
#[test]
fn compare_reports_gpu_time_against_torch_profiler() {
    let dir = TempDir::new("gv-gputime");
    let d = dir.path();
    let write = |name: &str, v: Value| std::fs::write(d.join(name), v.to_string()).unwrap();
    let k = |name: &str, ns: u64| {
        json!({"name": name, "mangled": "_Z1x", "calls": 10,
               "gpu_time": {"basis": "measured", "count": 10, "total_ns": ns}})
    };
    write(
        "lib.report.json",
        json!({"schema": "gpuprofd.report/1", "drops": {}, "processes": [
            {"tgid": 7, "launches": 30,
             "gpu_time": {"basis": "measured", "source": "cupti", "state": "enabled",
                          "kernels": 30, "calls": 30, "joined": 28, "unjoined": 2,
                          "unjoined_by": {"no_launch_record": 2}, "kernel_ns": 6_107_000},
             "kernels": [k("gemm<float>(float*, int)", 5_000_000), k("relu(float*)", 1_100_000),
                         k("only_ours()", 7_000),
                         {"name": "fill()", "mangled": "_Z4fillv", "calls": 3, "gpu_time": null}]}]}),
    );
    write(
        "prof.report.json",
        json!({"schema": "gpuprofd.report/1", "drops": {}, "processes": [
            {"tgid": 8, "launches": 30,
             "gpu_time": {"basis": "measured", "source": "cupti", "state": "enabled"}}]}),
    );
    write(
        "lib.json",
        json!({"workload": "torch_cnn", "pid": 7, "steps": 10, "step_times_s": [0.1],
               "profiler": null, "known": {}, "cupti_files": ["/w/nvidia/cu13/lib/libcupti.so.13"]}),
    );
    write(
        "prof.json",
        json!({"workload": "torch_cnn", "pid": 8, "steps": 10, "step_times_s": [0.1],
               "profiler": {"kernels": 30, "kernel_names": {},
                            "kernel_gpu_us": {"void gemm<float>(float*, int)": 5000.0,
                                              "relu(float*)": 1000.0,
                                              "only_theirs()": 2.5}},
               "known": {},
               "cupti_files": ["/usr/local/cuda/lib64/libcupti.so", "/w/nvidia/cu13/lib/libcupti.so.13"]}),
    );
    write(
        "manifest.json",
        json!({"env": {}, "doctor": null, "procaddr": null, "nvml": null, "runs": [
            {"name": "gt", "kind": "gputime", "report": "lib.report.json", "error": null,
             "results": ["lib.json", "prof.json", "prof.report.json"]}]}),
    );
    let r = compare(d);
    assert_eq!(
        r["findings"],
        json!([
            "gt: 2 of 30 kernel records not tied to a launch: {'no_launch_record': 2}",
            "gt: matched kernels' GPU time 6.1 ms against torch.profiler's 6.0 ms (goal: within 1 %)",
            "gt: relu(float*): 1.100 ms against torch.profiler's 1.000 ms (goal: within 2 %)",
            "gt: two CUPTI files in the process: ['/usr/local/cuda/lib64/libcupti.so', '/w/nvidia/cu13/lib/libcupti.so.13']",
        ])
    );
    let g = &r["gputime"][0];
    assert_eq!(
        (
            &g["kernels_matched"],
            &g["unmatched_gpuprofd_ms"],
            &g["unmatched_profiler_ms"],
            &g["sum_ratio"]
        ),
        (&json!(2), &json!(0.007), &json!(0.003), &json!(1.0167))
    );
    assert_eq!(g["top"][0]["ratio"], json!(1.0));
    assert_eq!(g["state"], json!("enabled"));
    assert_eq!(
        (
            &g["joined"],
            &g["kernel_gpu_ms"],
            &g["kernel_records_vs_profiler"]
        ),
        (&json!(28), &json!(6.107), &json!("30 / 30"))
    );
    assert_eq!(g["prof_run_state"], json!("enabled"));
}
