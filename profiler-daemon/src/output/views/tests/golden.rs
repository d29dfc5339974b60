//! Golden outputs: every view in every format, with the selection options, rendered from a
//! rich report and compared byte for byte with `views/fixtures/*.txt`.
//!
//! The fixtures pin what `gpuprofd report` prints (JSON keys and value types, CSV headers and
//! cells, table headers, widths, number formats, the narrow default, ordering, selection), so
//! that how the views are built can change while what they print does not. After a change
//! that is meant to change the output, rewrite them with `GPUPROFD_BLESS=1 cargo test -p
//! profiler-daemon --lib golden` and review the diff.

use super::{parse, report};
use crate::analysis::steps::{ProcessSteps, Step};
use crate::model::snapshot::{ProcessReport, Report};
use serde_json::json;
use std::path::PathBuf;

/// The views tests' report, with what it lacks: a third process (long names with commas,
/// quotes and non-ASCII, no timeline, ended holding memory, unblocked and pageable copies,
/// memsets, an empty size histogram) in a Kubernetes job, a fourth without a job that made one call, and
/// sampled call stacks for the code and callers views.
fn rich() -> Report {
    let mut r = report();
    let mut p: ProcessReport = serde_json::from_value(json!({
        "tgid": 300, "comm": "loader, \"wörker\" número 2 of the pool", "cmdline": "loader",
        "exited": true,
        "job": {"kind": "kubernetes", "id": "pod-9f1c", "name": "trainer, v2",
                "namespace": "ml", "container": "c0ffee", "cgroup": "/kubepods/pod-9f1c"},
        "launches": 40, "unnamed_launches": 1,
        "kernels": [
            {"name": "void cutlass::Kernel<cutlass::gemm::GemmUniversal<float, 128, 4>>(Params)",
             "mangled": "_ZN7cutlass6KernelE", "calls": 30, "grid": [16, 8, 2],
             "block": [128, 2, 1], "shared_bytes": 49152, "streams": 2,
             "api": "cudaLaunchCooperativeKernelMultiDevice", "name_source": "symbols"},
            {"name": "<unknown 0x7f3a>", "mangled": null, "calls": 10, "grid": [1, 1, 1],
             "block": [32, 1, 1], "shared_bytes": 1024, "streams": 1, "api": "cuLaunchKernel",
             "name_source": "unknown"}],
        "copies": [
            {"direction": "h2d", "calls": 4000, "bytes": 4_000_000u64, "async_calls": 0,
             "blocked_ns": 3_000_000_000u64, "pageable_calls": 4000,
             "pageable_bytes": 4_000_000u64, "size_histogram": [4000, 0, 0, 0, 0, 0]},
            {"direction": "d2d", "calls": 3, "bytes": 3_221_225_472u64, "async_calls": 0,
             "blocked_ns": 0, "size_histogram": []},
            {"direction": "peer", "calls": 1, "bytes": 300_000_000u64, "async_calls": 1,
             "blocked_ns": 7_000, "pageable_calls": 0, "pageable_bytes": 0,
             "size_histogram": [0, 0, 0, 0, 0, 1]},
            {"direction": "memset", "calls": 5, "bytes": 5_242_880u64, "async_calls": 3,
             "blocked_ns": 40_000, "pageable_calls": 0, "pageable_bytes": 0,
             "size_histogram": [0, 0, 0, 5, 0, 0]}],
        "api": [
            {"name": "cudaGraphInstantiateWithFlags", "calls": 3, "blocked_ns": 9_999_999,
             "p50_ns": 1_234_567, "p99_ns": 5_000_001, "max_ns": 7_654_321},
            {"name": "cudaMalloc", "calls": 6, "blocked_ns": 123, "p50_ns": 0, "p99_ns": 0,
             "max_ns": 0}],
        "graphs": {"launches": 2},
        "allocations": {"calls": 6, "failed": 1, "bytes": 5_368_709_120u64, "frees": 2,
                        "live_bytes": 1_610_612_736u64, "peak_bytes": 5_368_709_120u64,
                        "untracked": 0,
                        "by_kind": {"device": {"calls": 6, "bytes": 5_368_709_120u64},
                                    "host_pinned": {"calls": 0, "bytes": 0},
                                    "managed": {"calls": 0, "bytes": 0},
                                    "async": {"calls": 0, "bytes": 0},
                                    "pitched": {"calls": 0, "bytes": 0},
                                    "vmm": {"calls": 0, "bytes": 0}}},
        "streams": [
            {"stream": "per-thread", "launches": 27, "copies": 4003,
             "copy_bytes": 3_225_225_472u64, "derived_idle_ns": 1_250_000_000u64,
             "drains": 4, "derived_launch_ahead_max_ns": 8_000_000},
            {"stream": "0x55d0c0ffee00", "launches": 13, "copies": 1,
             "copy_bytes": 300_000_000u64}],
        "devices": [
            {"device": 0, "launches": 30, "copies": 4003, "copy_bytes": 3_225_225_472u64,
             "memsets": 1, "memset_bytes": 4096, "syncs": 12, "allocations": 6,
             "alloc_bytes": 5_368_709_120u64},
            {"device": 3, "launches": 8, "copies": 1, "copy_bytes": 300_000_000u64,
             "memsets": 0, "memset_bytes": 0, "syncs": 2, "allocations": 0, "alloc_bytes": 0},
            {"device": null, "launches": 2, "copies": 0, "copy_bytes": 0, "memsets": 0,
             "memset_bytes": 0, "syncs": 0, "allocations": 0, "alloc_bytes": 0,
             "nvml_gpu": 3}],
        "nccl": {"calls": 14, "bytes": 402_653_312u64, "communicators": [
            {"handle": null, "id": null, "rank": 1, "nranks": 8, "device": null,
             "created_by": "ncclCommInitRank", "ended": null, "error": 4, "ops": []},
            {"handle": "0x55d0c0ff1000", "id": "9c3bfa0e51d2a476", "rank": 3, "nranks": 8,
             "device": 0, "created_by": "ncclCommInitRankConfig", "ended": null, "ops": [
                {"op": "AllReduce", "calls": 10, "bytes": 402_653_184u64, "in_group": 0,
                 "datatypes": {"bfloat16": 8, "float32": 2}, "reductions": {"avg": 2, "sum": 8},
                 "streams": ["0x55d0c0ffee00"], "devices": {"0": 10}},
                {"op": "Send", "calls": 2, "bytes": 64, "in_group": 2,
                 "datatypes": {"int8": 2}, "reductions": {}, "streams": ["0x55d0c0ffee00"],
                 "devices": {"0": 2}},
                {"op": "Recv", "calls": 2, "bytes": 64, "in_group": 2,
                 "datatypes": {"int8": 2}, "reductions": {}, "streams": ["0x55d0c0ffee00"],
                 "devices": {"0": 2}}]},
            {"handle": "0x55d0c0ff2000", "id": "0d1e2f3a4b5c6d7e", "rank": null,
             "nranks": null, "device": 0, "created_by": "ncclCommSplit",
             "parent_id": "9c3bfa0e51d2a476", "color": 1, "ended": "destroyed", "ops": []}]},
        "derived_gpu_idle": {"basis": "derived", "unavailable": null,
                             "span_ns": 2_500_000_000u64, "idle_lower_bound_ns": 1_000_000_000u64,
                             "idle_share": 0.4, "drains": 4, "launch_ahead_p50_ns": 2_000_000,
                             "launch_ahead_max_ns": 8_000_000},
        "stacks": {"samples": 12, "dropped": 3, "truncated": 1, "python": null,
                   "python_no_thread": 0, "python_fault": 0, "shallow": 2},
        "code": [
            {"stack": ["_start (loader)", "main (loader)", "load_batch; copy, pinned (libdl.so)"],
             "caller": "libdl.so", "samples": 8, "calls": 4000, "launches": 0, "syncs": 0,
             "copies": 4000, "blocked_ns": 3_000_000_000u64, "kernels": []},
            {"stack": ["_start (loader)", "main (loader)", "run_graph (libtrain.so)"],
             "caller": "libtrain.so", "samples": 4, "calls": 40, "launches": 40, "syncs": 0,
             "copies": 0, "blocked_ns": 0,
             "gpu_measured_ns": 12_000_000u64, "gpu_ns": 120_000_000u64,
             "kernels": [{"name": "void cutlass::Kernel<cutlass::gemm::GemmUniversal<float, 128, \
                                  4>>(Params)", "launches": 30},
                         {"name": "<unknown 0x7f3a>", "launches": 10}]}]
    }))
    .unwrap();
    gpu_time(&mut p);
    r.processes.push(p);
    let idle: ProcessReport = serde_json::from_value(json!({
        "tgid": 400, "comm": "idle", "cmdline": "idle", "exited": false, "job": null,
        "launches": 0, "unnamed_launches": 0, "kernels": [], "copies": [], "api": [],
        "graphs": {"launches": 0},
        "allocations": {"calls": 0, "failed": 0, "bytes": 0, "frees": 0, "live_bytes": 0,
                        "peak_bytes": 0, "untracked": 0,
                        "by_kind": {"device": {"calls": 0, "bytes": 0},
                                    "host_pinned": {"calls": 0, "bytes": 0},
                                    "managed": {"calls": 0, "bytes": 0},
                                    "async": {"calls": 0, "bytes": 0},
                                    "pitched": {"calls": 0, "bytes": 0},
                                    "vmm": {"calls": 0, "bytes": 0}}},
        "streams": [{"stream": "default", "launches": 0, "copies": 0, "copy_bytes": 0}],
        // One call (a device query): an active span of nothing.
        "timeline": {"first_call_ns": 4_000_000_000u64, "last_call_ns": 4_000_000_000u64,
                     "bin_ns": 1_000, "calls": [1], "launches": [0], "blocked_ns": [0]}
    }))
    .unwrap();
    r.processes.push(idle);
    r.jobs.push(
        serde_json::from_value(json!({
            "kind": "kubernetes", "id": "pod-9f1c", "name": "trainer, v2", "namespace": "ml",
            "steps": [], "processes": [300], "launches": 40, "graph_launches": 2,
            "copy_bytes": 3_525_225_472u64, "alloc_bytes": 5_368_709_120u64,
            "blocked_ns": 3_010_000_123u64,
            // It held two GPUs alone while GPM measured them: 62.5 % over 30 rounds and 20 %
            // over 10 make 51.875 %.
            "gpm": [{"gpu": 0, "samples": 30, "source": "measured", "avg": {"sm_activity_pct": 62.5}},
                    {"gpu": 1, "samples": 10, "source": "measured", "avg": {"sm_activity_pct": 20.0}}]}))
        .unwrap(),
    );
    // python3 (100) was sampled too: a Python stack that syncs and one that launches.
    let py = r.processes.iter_mut().find(|p| p.tgid == 100).unwrap();
    py.stacks = serde_json::from_value(json!({
        "samples": 50, "dropped": 0, "truncated": 0, "python": "CPython 3.11 (frames read)",
        "python_no_thread": 0, "python_fault": 1, "shallow": 0}))
    .unwrap();
    py.code = serde_json::from_value(json!([
        {"stack": ["train.py:42 <module>", "train.py:30 step", "model.py:7 forward",
                   "at::native::gemm (libtorch_cuda.so)"],
         "caller": "libtorch_cuda.so", "samples": 40, "calls": 200, "launches": 200,
         "syncs": 0, "copies": 0, "blocked_ns": 0,
         "kernels": [{"name": "gemm(float*, int)", "launches": 200}]},
        {"stack": ["train.py:42 <module>", "train.py:33 step", "torch.cuda.synchronize"],
         "caller": "libtorch_python.so", "samples": 10, "calls": 10, "launches": 0,
         "syncs": 10, "copies": 0, "blocked_ns": 2_000_000, "kernels": []}
    ]))
    .unwrap();
    r
}

/// python3's loop (three regular steps and one odd one), the loader's (nothing regular), and
/// the step series of a process the report no longer has.
fn steps() -> Vec<ProcessSteps> {
    let step = |i: u64, wall_ns: u64, regular: bool| Step {
        start_ns: i * 20_000_000,
        wall_ns,
        launches: if regular { 300 } else { 7 },
        blocked_ns: 2_000_000 + i,
        copy_bytes: 4096 * i,
        first_enqueue_ns: 500_000,
        live_bytes: 1 << 20,
        regular,
        derived_gpu_idle_ns: Some(4_000_000 + i),
        derived_launch_ahead_ns: (i > 0).then_some(1_500_000),
        gpu_ns: None,
        gpu_busy_ns: None,
        gpu_comm_ns: None,
        gpu_comm_exposed_ns: None,
    };
    vec![
        ProcessSteps {
            tgid: 100,
            generation: 0,
            boundary: "cudaStreamSynchronize".into(),
            steps: vec![
                step(0, 12_000_000, true),
                step(1, 10_000_000, true),
                step(2, 11_000_000, true),
                step(3, 3_000_000, false),
            ],
        },
        ProcessSteps {
            tgid: 300,
            generation: 0,
            boundary: "cudaMemcpy h2d, a long boundary name".into(),
            steps: vec![step(0, 1_000, false), step(1, 2_000, false)],
        },
        ProcessSteps {
            tgid: 500,
            generation: 1,
            boundary: "cudaDeviceSynchronize".into(),
            steps: vec![step(4, 25_000_000, true)],
        },
    ]
}

const VIEWS: &[&str] = &[
    "summary",
    "kernels",
    "api",
    "memcpy",
    "memory",
    "processes",
    "jobs",
    "streams",
    "devices",
    "collectives",
    "advice",
    "steps",
    "code",
    "callers",
    "timeline",
];

const FORMATS: &[&str] = &["table", "json", "csv", "html", "folded"];

/// Every column of each tabular view, in its order (for `--select` of all of them).
fn all_columns(view: &str) -> &'static str {
    match view {
        "kernels" => "pid,kernel,calls,rate,share,grid,block,shared_bytes,streams,api",
        "api" => "pid,api,calls,rate,blocked_ns,p50_ns,p99_ns,max_ns",
        "memcpy" => {
            "pid,direction,calls,async_calls,pageable_calls,bytes,blocked_ns,bandwidth_bps,\
             size_histogram"
        }
        "memory" => "pid,comm,calls,bytes,frees,live_bytes,peak_bytes,failed,never_freed_bytes",
        "processes" => "pid,comm,job,launches,rate,copy_bytes,blocked_ns,peak_bytes,exited",
        "jobs" => "kind,job,processes,launches,copy_bytes,blocked_ns,gpm_sm_activity",
        "streams" => {
            "pid,stream,launches,rate,share,copies,copy_bytes,derived_idle_ns,drains,\
             derived_launch_ahead_max_ns"
        }
        "devices" => {
            "pid,device,launches,share,copies,copy_bytes,memsets,syncs,allocations,alloc_bytes"
        }
        "collectives" => {
            "pid,comm_id,rank,nranks,device,op,calls,bytes,in_group,datatypes,reductions,\
             streams,created_by,handle,ended"
        }
        "steps" => {
            "pid,boundary,calls,irregular,wall_p50_ns,wall_p90_ns,launches,blocked_ns,\
             first_enqueue_ns,derived_gpu_idle_ns,derived_launch_ahead_ns,copy_bytes,steps"
        }
        "timeline" => {
            "pid,comm,job,first_call_ns,last_call_ns,calls,launches,rate,blocked_share,\
             activity,bins"
        }
        _ => "pid",
    }
}

/// The argument lists rendered for `view`, after `--view VIEW`: every format, then the
/// options the view reads (the summary reads none; advice `--pid` and `--name-regex`; the
/// others all of them).
fn cases(view: &str) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<&str>> = Vec::new();
    for f in FORMATS {
        out.push(vec!["--format", f]);
    }
    match view {
        "summary" => {}
        "advice" => {
            for f in ["table", "json", "csv"] {
                out.push(vec!["--format", f, "--pid", "100"]);
                out.push(vec!["--format", f, "--pid", "300"]);
                out.push(vec!["--format", f, "--pid", "999"]);
                out.push(vec!["--format", f, "--name-regex", "copies"]);
            }
        }
        _ => out.extend(selections(view)),
    }
    out.into_iter()
        .map(|c| c.into_iter().map(str::to_owned).collect())
        .collect()
}

/// Process 300's GPU time as CUPTI measured it: its first kernel's, and a kernel only CUPTI
/// saw (launched inside a CUDA graph).
fn gpu_time(p: &mut ProcessReport) {
    p.kernels[0].gpu_time = Some(
        serde_json::from_value(json!({
            "basis": "measured", "count": 30, "total_ns": 90_000_000u64,
            "mean_ns": 3_000_000u64, "min_ns": 2_000_000u64, "p50_ns": 2_900_000u64,
            "p99_ns": 5_100_000u64, "max_ns": 5_200_000u64, "share": 0.75,
            "streams": [{"device": 0, "stream": 7, "count": 30, "gpu_ns": 90_000_000u64}]
        }))
        .unwrap(),
    );
    p.kernels.push(
        serde_json::from_value(json!({
            "name": "graph_node_kernel", "mangled": "graph_node_kernel", "calls": 0,
            "grid": [0, 0, 0], "block": [0, 0, 0], "shared_bytes": 0, "streams": 0, "api": "",
            "name_source": "cupti",
            "gpu_time": {"basis": "measured", "count": 20, "total_ns": 30_000_000u64,
                         "mean_ns": 1_500_000u64, "min_ns": 1_000_000u64,
                         "p50_ns": 1_500_000u64, "p99_ns": 2_000_000u64,
                         "max_ns": 2_000_000u64, "share": 0.25,
                         "streams": [{"device": 0, "stream": 13, "count": 20,
                                      "gpu_ns": 30_000_000u64}]}
        }))
        .unwrap(),
    );
    p.gpu_time = serde_json::from_value(json!({
        "basis": "measured", "source": "cupti", "state": "enabled", "state_detail": 130_000u64,
        "unavailable": null, "dropped": 2, "records": 53, "bad_times": 0, "kernels": 50,
        "kernel_ns": 120_000_000u64, "memcpy_ns": 4_000_000u64, "memset_ns": 10_000,
        "memsets": 1, "memset_bytes": 4096,
        "copies": [{"kind": "h2d", "count": 2, "gpu_ns": 4_000_000u64, "bytes": 8_000_000u64}],
        "kernels_cut": 0, "names_cut": 0, "calls": 49, "joined": 48, "unjoined": 2,
        "unjoined_by": {"no_launch_record": 1, "thread_not_mapped": 1}, "launches_evicted": 0
    }))
    .unwrap();
}

/// The selection options for a view that reads them, alone and together.
fn selections(view: &str) -> Vec<Vec<&'static str>> {
    let mut out: Vec<Vec<&str>> = Vec::new();
    let all = all_columns(view);
    for f in ["table", "json", "csv"] {
        out.push(vec!["--format", f, "--select", all]);
    }
    // The columns backwards: --select sets the order.
    let backwards: &'static str = String::leak(all.split(',').rev().collect::<Vec<_>>().join(","));
    out.push(vec!["--select", backwards]);
    for f in ["table", "csv"] {
        for o in ["calls", "bytes", "blocked", "rate", "name", "gpu_time"] {
            out.push(vec!["--format", f, "--order-by", o]);
        }
    }
    for f in ["table", "json", "csv"] {
        out.push(vec!["--format", f, "--top", "2"]);
        out.push(vec!["--format", f, "--top", "0"]);
        out.push(vec!["--format", f, "--min-calls", "50"]);
        out.push(vec!["--format", f, "--min-bytes", "1"]);
        out.push(vec![
            "--format",
            f,
            "--name-regex",
            "^(gemm|soft|cuda|h2d|py|slurm|train)",
        ]);
        out.push(vec!["--format", f, "--name-regex", "nothing matches this"]);
        out.push(vec!["--format", f, "--pid", "100"]);
        out.push(vec!["--format", f, "--pid", "300"]);
        out.push(vec!["--format", f, "--job", "web"]);
        out.push(vec!["--format", f, "--job", "4242"]);
        out.push(vec!["--format", f, "--job", "trainer, v2"]);
        out.push(vec!["--format", f, "--job", "pod-9f1c"]);
    }
    out.push(vec!["--select", "pid,nosuch"]);
    out.push(vec!["--format", "csv", "--select", "pid,pid"]);
    out.push(vec![
        "--format",
        "csv",
        "--order-by",
        "name",
        "--top",
        "3",
        "--min-calls",
        "2",
        "--name-regex",
        "[a-z]",
        "--select",
        backwards,
    ]);
    out.push(vec![
        "--format",
        "json",
        "--order-by",
        "blocked",
        "--pid",
        "100",
        "--job",
        "4242",
        "--min-bytes",
        "0",
        "--top",
        "5",
    ]);
    if view == "code" {
        out.extend(code_options());
    }
    out.extend(the_tests_own());
    out
}

/// The code view's own options, in each of its formats.
fn code_options() -> Vec<Vec<&'static str>> {
    let mut out: Vec<Vec<&str>> = Vec::new();
    for f in ["table", "json", "csv", "folded"] {
        out.push(vec!["--format", f, "--start-name-regex", "main|step"]);
        out.push(vec!["--format", f, "--start-name-regex", "("]);
        out.push(vec!["--format", f, "--max-depth", "2"]);
        out.push(vec!["--format", f, "--max-depth", "0"]);
        out.push(vec!["--format", f, "--order-by", "blocked"]);
        out.push(vec!["--format", f, "--order-by", "gpu_time"]);
        out.push(vec!["--format", f, "--name-regex", "cutlass"]);
        out.push(vec!["--format", f, "--name-regex", "synchronize"]);
        out.push(vec!["--format", f, "--min-calls", "100"]);
    }
    out
}

/// The combinations the views tests use.
fn the_tests_own() -> Vec<Vec<&'static str>> {
    vec![
        vec![
            "--format",
            "csv",
            "--select",
            "kernel,calls",
            "--name-regex",
            "^(gemm|relu)",
        ],
        vec!["--format", "json", "--job", "web", "--select", "pid,kernel"],
        vec![
            "--format",
            "csv",
            "--select",
            "calls",
            "--top",
            "1",
            "--pid",
            "100",
            "--min-calls",
            "150",
        ],
        vec!["--min-calls", "1000"],
        vec![
            "--format",
            "json",
            "--select",
            "direction,bytes,bandwidth_bps",
        ],
        vec![
            "--format",
            "csv",
            "--select",
            "pid,live_bytes,never_freed_bytes",
        ],
        vec!["--select", "direction,calls,size_histogram"],
        vec!["--select", "kernel,streams,api", "--top", "1"],
        vec!["--format", "csv", "--select", "pid,peak_bytes,live_bytes"],
        vec!["--order-by", "bytes", "--top", "1", "--format", "json"],
        vec![
            "--order-by",
            "rate",
            "--format",
            "json",
            "--select",
            "pid,rate,calls",
        ],
        vec![
            "--order-by",
            "rate",
            "--format",
            "json",
            "--select",
            "kernel,rate",
        ],
        vec!["--format", "csv", "--select", "steps"],
        vec!["--select", "bins,activity"],
        vec!["--format", "csv", "--select", "bins"],
    ]
}

/// `view`'s fixture: each case's command line, then what it printed (or its error).
fn render_view(view: &str, r: &Report, steps: &[ProcessSteps]) -> String {
    let mut out = String::new();
    for case in cases(view) {
        let mut argv = vec!["gpuprofd", "report", "x.gpuprof", "--view", view];
        argv.extend(case.iter().map(String::as_str));
        out.push_str(&format!("==> {}\n", shell_words(&argv[1..])));
        let a = match parse(&argv) {
            Ok(a) => a,
            Err(e) => {
                out.push_str(&format!("usage error: {}\n", e.kind()));
                continue;
            }
        };
        // As `gpuprofd report` does (cli/report.rs): the regular expression is compiled first.
        let re = match a.name_regex.as_deref().map(regex::Regex::new).transpose() {
            Ok(re) => re,
            Err(e) => {
                out.push_str(&format!("error: --name-regex: {e}\n"));
                continue;
            }
        };
        match super::render(r, steps, &a, re.as_ref()) {
            Ok(s) => {
                out.push_str(&s);
                if !s.ends_with('\n') {
                    out.push_str("\n(no newline at the end)\n");
                }
            }
            Err(e) => out.push_str(&format!("error: {e}\n")),
        }
    }
    out
}

/// The arguments as a shell would take them back.
fn shell_words(args: &[&str]) -> String {
    args.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.,:^/".contains(c))
            {
                (*a).to_owned()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/output/views/fixtures")
}

#[test]
fn every_view_in_every_format_prints_what_the_fixtures_hold() {
    let (r, steps) = (rich(), steps());
    let bless = std::env::var_os("GPUPROFD_BLESS").is_some();
    let mut failed = Vec::new();
    for view in VIEWS {
        let got = render_view(view, &r, &steps);
        let path = fixtures().join(format!("{view}.txt"));
        if bless {
            std::fs::create_dir_all(fixtures()).unwrap();
            std::fs::write(&path, &got).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (GPUPROFD_BLESS=1 writes it)", path.display()));
        if got == want {
            continue;
        }
        // The first case that differs, whole, for the failure message.
        let split = |s: &str| -> Vec<String> {
            s.split("==> ")
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect()
        };
        let (g, w) = (split(&got), split(&want));
        let at = g
            .iter()
            .zip(&w)
            .position(|(g, w)| g != w)
            .unwrap_or(g.len().min(w.len()));
        failed.push(format!(
            "{view}: case {at} differs\n--- fixture:\n{}\n--- now:\n{}",
            w.get(at).map_or("(none)", String::as_str),
            g.get(at).map_or("(none)", String::as_str),
        ));
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// The fixtures cover what they claim: every view, and rows of every process in some view.
#[test]
fn the_rich_report_reaches_every_branch_the_fixtures_pin() {
    let r = rich();
    assert_eq!(r.processes.len(), 4);
    assert!(r.processes.iter().any(|p| p.timeline.is_none()));
    assert!(r.processes.iter().any(|p| p.job.is_none()));
    assert!(
        r.processes
            .iter()
            .any(|p| p.exited && p.allocations.live_bytes > 0)
    );
    for view in VIEWS {
        assert!(cases(view).len() >= FORMATS.len(), "{view}");
    }
}
