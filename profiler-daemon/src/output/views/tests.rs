//! Views from a known report: exact tables, JSON and CSV.

use super::*;
use clap::Parser;

/// Two processes of two jobs: 300 + 100 launches, copies both ways, one API with durations.
fn report() -> Report {
    let k = |name: &str, calls: u64, grid: u32| {
        json!({"name": name, "mangled": null, "calls": calls, "grid": [grid, 1, 1],
               "block": [256, 1, 1], "shared_bytes": 0, "streams": 1,
               "api": "cudaLaunchKernel", "name_source": "register_function"})
    };
    let alloc = |peak: u64| {
        let z = json!({"calls": 0, "bytes": 0});
        json!({"calls": 2, "failed": 0, "bytes": peak, "frees": 1, "live_bytes": peak / 2,
               "peak_bytes": peak, "untracked": 0,
               "by_kind": {"device": z, "host_pinned": z, "managed": z, "async": z,
                           "pitched": z, "vmm": z}})
    };
    let v = json!({
        "schema": "gpuprofd.report/1", "host": "node7", "started_at": "2026-11-23T07:00:00Z",
        "duration_ns": 10_000_000_000u64, "drops": {}, "submitted": {}, "decode_errors": 0,
        "jobs": [
            {"kind": "slurm", "id": "4242", "steps": ["0"], "processes": [100],
             "launches": 300, "graph_launches": 0, "copy_bytes": 3_145_728u64,
             "alloc_bytes": 1_048_576, "blocked_ns": 2_000_000},
            {"kind": "docker", "id": "abc", "name": "web", "steps": [], "processes": [200],
             "launches": 100, "graph_launches": 0, "copy_bytes": 0, "alloc_bytes": 0,
             "blocked_ns": 0}
        ],
        "processes": [
            {"tgid": 100, "comm": "python3", "cmdline": "python3 train.py", "exited": false,
             "job": {"kind": "slurm", "id": "4242", "step": "0", "cgroup": "/slurm/job_4242"},
             "launches": 300, "unnamed_launches": 0,
             "kernels": [k("gemm(float*, int)", 200, 64), k("relu(float*, int)", 100, 8)],
             "copies": [
                {"direction": "h2d", "calls": 2, "bytes": 2_097_152u64, "async_calls": 0,
                 "blocked_ns": 1_000_000, "size_histogram": [0, 0, 0, 2, 0, 0]},
                {"direction": "d2h", "calls": 1, "bytes": 1_048_576u64, "async_calls": 1,
                 "blocked_ns": 1_000, "size_histogram": [0, 0, 0, 1, 0, 0]}],
             "api": [{"name": "cudaStreamSynchronize", "calls": 10, "blocked_ns": 2_000_000,
                      "p50_ns": 150_000, "p99_ns": 400_000, "max_ns": 410_000}],
             "graphs": {"launches": 0}, "allocations": alloc(1_048_576),
             "streams": [
                {"stream": "0x7f00", "launches": 240, "copies": 3, "copy_bytes": 3_145_728u64},
                {"stream": "default", "launches": 60, "copies": 0, "copy_bytes": 0}],
             // Busy from 1 s to 9 s: 8 s in 32 bins of 256 ms, evenly.
             "timeline": {"first_call_ns": 1_000_000_000u64, "last_call_ns": 9_000_000_000u64,
                          "bin_ns": 256_000_000u64,
                          "calls": ([[10; 31].as_slice(), &[6]].concat()),
                          "launches": ([[9; 31].as_slice(), &[21]].concat()),
                          "blocked_ns": ([[3_001_000u64].as_slice(), &[0; 31]].concat())}},
            {"tgid": 200, "comm": "server", "cmdline": "server", "exited": true,
             "job": {"kind": "docker", "id": "abc", "name": "web", "cgroup": "/docker/abc"},
             "launches": 100, "unnamed_launches": 0,
             "kernels": [k("softmax", 100, 1)], "copies": [], "api": [],
             "graphs": {"launches": 0}, "allocations": alloc(0),
             // 80 launches from 0.5 s to 1 s, nothing for 1.5 s, 20 more at the end.
             "timeline": {"first_call_ns": 500_000_000u64, "last_call_ns": 2_500_000_000u64,
                          "bin_ns": 64_000_000u64,
                          "calls": ([[10u64; 8].as_slice(), &[0; 23], &[20]].concat()),
                          "launches": ([[10u64; 8].as_slice(), &[0; 23], &[20]].concat()),
                          "blocked_ns": ([0u64; 32])}}
        ]
    });
    serde_json::from_value(v).unwrap()
}

/// `gpuprofd report …`'s arguments, parsed as the command line does.
fn parse(args: &[&str]) -> Result<ReportArgs, clap::Error> {
    #[derive(clap::Parser)]
    struct Report {
        #[command(flatten)]
        args: ReportArgs,
    }
    // The first two words stand for `gpuprofd report`.
    Report::try_parse_from(&args[1..]).map(|r| r.args)
}

fn show(args: &[&str]) -> Result<String, String> {
    let mut all = vec!["gpuprofd", "report", "x.gpuprof"];
    all.extend_from_slice(args);
    let a = parse(&all).map_err(|e| e.to_string())?;
    let re = a
        .name_regex
        .as_deref()
        .map(|r| regex::Regex::new(r).unwrap());
    render(&report(), &[], &a, re.as_ref())
}

#[test]
fn kernels_view_orders_by_calls_then_name_with_shares() {
    assert_eq!(
        show(&["--view", "kernels"]).unwrap(),
        "PID  KERNEL             CALLS  PER s   SHARE  GPU ms  GRID    BLOCK\n\
         100  gemm(float*, int)    200   25.0   66.7%       -  64x1x1  256x1x1\n\
         100  relu(float*, int)    100   12.5   33.3%       -  8x1x1   256x1x1\n\
         200  softmax              100   50.0  100.0%       -  1x1x1   256x1x1\n"
    );
}

/// Process 100 with CUPTI's GPU time (relu 3 ms over 100 runs, gemm 1 ms over 200), and a
/// kernel only CUPTI saw; process 200 without the library.
fn with_gpu_time() -> crate::model::snapshot::Report {
    use crate::model::kernel_time::{GpuTimeReport, KernelGpuTime};
    let mut r = report();
    let k = |count, total_ns: u64, share| KernelGpuTime {
        basis: "measured".into(),
        count,
        total_ns,
        mean_ns: total_ns / count,
        min_ns: 1_000,
        p50_ns: total_ns / count,
        p99_ns: 2 * total_ns / count,
        max_ns: 3 * total_ns / count,
        share,
        streams: Vec::new(),
    };
    let p = r.processes.iter_mut().find(|p| p.tgid == 100).unwrap();
    p.kernels[0].gpu_time = Some(k(200, 1_000_000, 0.2));
    p.kernels[1].gpu_time = Some(k(100, 3_000_000, 0.6));
    let mut only = p.kernels[1].clone();
    (only.name, only.mangled, only.calls, only.name_source) = (
        "graph_kernel".into(),
        Some("graph_kernel".into()),
        0,
        "cupti".into(),
    );
    only.gpu_time = Some(k(10, 1_000_000, 0.2));
    p.kernels.push(only);
    p.gpu_time = GpuTimeReport {
        basis: "measured".into(),
        source: Some("cupti".into()),
        kernel_ns: 5_000_000,
        ..GpuTimeReport::default()
    };
    p.gpu_time.unavailable = None;
    r
}

#[test]
fn kernels_view_gpu_time_columns_order_and_why_not() {
    let r = with_gpu_time();
    let a = parse(&[
        "gpuprofd",
        "report",
        "x.gpuprof",
        "--view",
        "kernels",
        "--order-by",
        "gpu_time",
        "--select",
        "pid,kernel,calls,gpu_total_ns,gpu_share,gpu_mean_ns,gpu_p99_ns,grid",
    ])
    .unwrap();
    assert_eq!(
        render(&r, &[], &a, None).unwrap(),
        "PID  KERNEL             CALLS  GPU ms  GPU %  GPU MEAN us  GPU P99 us  GRID\n\
         100  relu(float*, int)    100   3.000  60.0%         30.0        60.0  8x1x1\n\
         100  gemm(float*, int)    200   1.000  20.0%          5.0        10.0  64x1x1\n\
         100  graph_kernel           0   1.000  20.0%        100.0       200.0  -\n\
         200  softmax              100       -      -            -           -  1x1x1\n"
    );
    let a = parse(&[
        "gpuprofd",
        "report",
        "x.gpuprof",
        "--view",
        "kernels",
        "--format",
        "json",
        "--select",
        "pid,kernel,gpu_total_ns,gpu_time",
    ])
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&render(&r, &[], &a, None).unwrap()).unwrap();
    let why: Vec<(u64, &str, &str)> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["pid"].as_u64().unwrap(),
                x["kernel"].as_str().unwrap(),
                x["gpu_time"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        why,
        [
            (100, "gemm(float*, int)", "measured"),
            (100, "relu(float*, int)", "measured"),
            (200, "softmax", crate::model::kernel_time::ABSENT),
            (100, "graph_kernel", "measured"),
        ]
    );
    // Only the kernels view has GPU time to order by.
    let a = parse(&[
        "gpuprofd",
        "report",
        "x.gpuprof",
        "--view",
        "api",
        "--order-by",
        "gpu_time",
    ])
    .unwrap();
    assert!(
        render(&r, &[], &a, None)
            .unwrap_err()
            .contains("the Api view has no gpu_total_ns; the kernels and processes views have it")
    );
}

#[test]
fn selection_like_tfprof() {
    let csv = show(&[
        "--view",
        "kernels",
        "--format",
        "csv",
        "--select",
        "kernel,calls",
        "--name-regex",
        "^(gemm|relu)",
        "--order-by",
        "name",
    ])
    .unwrap();
    assert_eq!(
        csv,
        "kernel,calls\n\"gemm(float*, int)\",200\n\"relu(float*, int)\",100\n"
    );
    let j = show(&[
        "--view",
        "kernels",
        "--format",
        "json",
        "--job",
        "web",
        "--select",
        "pid,kernel",
    ])
    .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&j).unwrap(),
        json!([{"pid": 200, "kernel": "softmax"}])
    );
    let top = show(&[
        "--view",
        "kernels",
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
    ])
    .unwrap();
    assert_eq!(top, "calls\n200\n");
    assert_eq!(
        show(&["--view", "kernels", "--min-calls", "1000"]).unwrap(),
        "(no rows match)\n"
    );
    let e = show(&["--view", "api", "--select", "bytes"]).unwrap_err();
    assert!(
        e.contains("no column \"bytes\"") && e.contains("p99_ns"),
        "{e}"
    );
}

#[test]
fn memcpy_bandwidth_only_for_blocking_copies() {
    let j = show(&[
        "--view",
        "memcpy",
        "--format",
        "json",
        "--select",
        "direction,bytes,bandwidth_bps",
    ])
    .unwrap();
    // 2 MiB in 1 ms of blocking copies = 2,097,152,000 B/s; d2h had an async copy: no figure.
    assert_eq!(
        serde_json::from_str::<Value>(&j).unwrap(),
        json!([
            {"direction": "h2d", "bytes": 2_097_152u64, "bandwidth_bps": 2_097_152_000.0},
            {"direction": "d2h", "bytes": 1_048_576u64, "bandwidth_bps": null}
        ])
    );
    assert_eq!(
        show(&["--view", "memcpy"]).unwrap(),
        "PID  DIR  CALLS  ASYNC  PAGEABLE    BYTES  BLOCKED ms  BW (sync)\n\
         100  h2d      2      0         0  2.0 MiB       1.000  2.0 GiB/s\n\
         100  d2h      1      1         0  1.0 MiB       0.001          -\n"
    );
}

#[test]
fn memory_never_freed_only_for_processes_that_ended() {
    // server exited holding nothing; python3 is still running: its live bytes are not leaks.
    assert_eq!(
        show(&[
            "--view",
            "memory",
            "--format",
            "csv",
            "--select",
            "pid,live_bytes,never_freed_bytes"
        ])
        .unwrap(),
        "pid,live_bytes,never_freed_bytes\n100,524288,\n200,0,0\n"
    );
}

#[test]
fn memcpy_size_histogram_when_selected() {
    assert_eq!(
        show(&[
            "--view",
            "memcpy",
            "--select",
            "direction,calls,size_histogram"
        ])
        .unwrap(),
        "DIR  CALLS  <4K/<64K/<1M/<16M/<256M/more\n\
         h2d      2  0/0/0/2/0/0\n\
         d2h      1  0/0/0/1/0/0\n"
    );
}

#[test]
fn api_processes_jobs_and_memory_views() {
    assert_eq!(
        show(&["--view", "api"]).unwrap(),
        "PID  API                    CALLS  PER s  BLOCKED ms  P50 us  P99 us  MAX us\n\
         100  cudaStreamSynchronize     10    1.3       2.000   150.0   400.0   410.0\n"
    );
    assert_eq!(
        show(&["--view", "processes"]).unwrap(),
        "PID  COMM     JOB               LAUNCHES   COPIED  BLOCKED ms  PEAK MEM  EXITED\n\
         100  python3  slurm:4242             300  3.0 MiB       2.000   1.0 MiB  false\n\
         200  server   docker:abc (web)       100      0 B       0.000       0 B  true\n"
    );
    assert_eq!(
        show(&["--view", "jobs", "--format", "csv"]).unwrap(),
        "kind,job,processes,launches,copy_bytes,blocked_ns,gpm_sm_activity\n\
         slurm,4242,1,300,3145728,2000000,\n\
         docker,abc (web),1,100,0,0,\n"
    );
    assert_eq!(
        show(&[
            "--view",
            "memory",
            "--format",
            "csv",
            "--select",
            "pid,peak_bytes,live_bytes"
        ])
        .unwrap(),
        "pid,peak_bytes,live_bytes\n100,1048576,524288\n200,0,0\n"
    );
}

#[test]
fn summary_is_the_daemon_report() {
    assert_eq!(show(&[]).unwrap(), output::table::render(&report()));
    let j: Report = serde_json::from_str(&show(&["--format", "json"]).unwrap()).unwrap();
    assert_eq!(j, report());
    assert!(show(&["--format", "csv"]).unwrap_err().contains("--view"));
}

#[test]
fn narrow_columns_come_back_when_selected() {
    assert_eq!(
        show(&[
            "--view",
            "kernels",
            "--select",
            "kernel,streams,api",
            "--top",
            "1"
        ])
        .unwrap(),
        "KERNEL             STREAMS  API\ngemm(float*, int)        1  cudaLaunchKernel\n"
    );
    let csv = show(&["--view", "kernels", "--format", "csv", "--top", "1"]).unwrap();
    assert_eq!(
        csv.lines().next().unwrap(),
        "pid,kernel,calls,rate,share,gpu_total_ns,gpu_share,gpu_mean_ns,gpu_p50_ns,gpu_p99_ns,\
         gpu_max_ns,grid,block,shared_bytes,streams,api,name_source"
    );
}

#[test]
fn tables_fit_80_columns() {
    for v in [
        "kernels",
        "api",
        "memcpy",
        "memory",
        "processes",
        "jobs",
        "streams",
        "timeline",
    ] {
        for line in show(&["--view", v]).unwrap().lines() {
            assert!(line.chars().count() <= 80, "{v}: {line}");
        }
    }
}

#[test]
fn steps_view_medians_and_series() {
    use crate::analysis::steps::{ProcessSteps, Step};
    let step = |i: u64, wall_ns: u64, regular: bool| Step {
        start_ns: i * 20_000_000,
        wall_ns,
        launches: if regular { 300 } else { 7 },
        blocked_ns: 2_000_000,
        copy_bytes: 4096,
        first_enqueue_ns: 500_000,
        live_bytes: 1 << 20,
        regular,
        derived_gpu_idle_ns: Some(4_000_000),
        derived_launch_ahead_ns: Some(1_500_000),
        gpu_ns: Some(5_000_000 + i * 1_000_000),
        gpu_busy_ns: Some(4_500_000 + i * 1_000_000),
        gpu_comm_ns: Some(1_000_000),
        gpu_comm_exposed_ns: Some(250_000 + i * 100_000),
    };
    let steps = vec![ProcessSteps {
        tgid: 100,
        generation: 0,
        boundary: "cudaStreamSynchronize".into(),
        steps: vec![
            step(0, 12_000_000, true),
            step(1, 10_000_000, true),
            step(2, 11_000_000, true),
            step(3, 3_000_000, false),
        ],
    }];
    let a = |args: &[&str]| {
        let mut all = vec!["gpuprofd", "report", "x.gpuprof", "--view", "steps"];
        all.extend_from_slice(args);
        let a = parse(&all).unwrap();
        render(&report(), &steps, &a, None).unwrap()
    };
    assert_eq!(
        a(&[]),
        "PID  BOUNDARY               STEPS  P50 ms  LAUNCH/STEP  INPUT ms  IDLE≥ ms   BUSY\n\
         100  cudaStreamSynchronize      3  11.000          300     0.500     4.000  55.0%\n"
    );
    assert_eq!(
        a(&["--format", "csv"]),
        "pid,boundary,calls,irregular,wall_p50_ns,wall_p90_ns,launches,blocked_ns,\
         first_enqueue_ns,derived_gpu_idle_ns,derived_launch_ahead_ns,gpu_ns,gpu_busy_ns,\
         gpu_busy_share,gpu_comm_ns,gpu_comm_exposed_ns,copy_bytes\n\
         100,cudaStreamSynchronize,3,1,11000000,12000000,300,2000000,500000,4000000,1500000,\
         6000000,5500000,0.55,1000000,350000,4096\n"
    );
    let j: Value = serde_json::from_str(&a(&["--format", "json"])).unwrap();
    assert_eq!(j[0]["steps"].as_array().unwrap().len(), 4);
    assert_eq!(j[0]["steps"][3]["regular"], false);
    assert_eq!(j[0]["steps"][1]["wall_ns"], 10_000_000);
    // Measured GPU time of each step's kernels (median of the regular steps in the CSV).
    assert_eq!(j[0]["steps"][3]["gpu_ns"], 8_000_000);
    // Busy 4.5, 5.5, 6.5 ms of 12, 10, 11: the median share is 55 %.
    assert_eq!(j[0]["steps"][3]["gpu_busy_ns"], 7_500_000);
    assert_eq!(j[0]["gpu_busy_share"], 0.55);
    assert_eq!(a(&["--job", "web"]), "(no rows match)\n");
    assert_eq!(
        a(&["--job", "4242", "--format", "csv", "--select", "pid"]),
        "pid\n100\n"
    );
}

#[test]
fn streams_per_process() {
    assert_eq!(
        show(&["--view", "streams"]).unwrap(),
        "PID  STREAM   LAUNCHES  PER s  SHARE  COPIES   COPIED  IDLE≥ ms\n\
         100  0x7f00        240   30.0  80.0%       3  3.0 MiB         -\n\
         100  default        60    7.5  20.0%       0      0 B         -\n"
    );
    let j = show(&[
        "--view",
        "streams",
        "--order-by",
        "bytes",
        "--top",
        "1",
        "--format",
        "json",
    ])
    .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&j).unwrap(),
        json!([{"pid": 100, "stream": "0x7f00", "launches": 240, "rate": 30.0, "share": 0.8, "copies": 3,
                "copy_bytes": 3_145_728u64, "derived_idle_ns": null, "drains": 0,
                "derived_launch_ahead_max_ns": 0}])
    );
}

#[test]
fn timeline_view_places_each_process_on_the_capture() {
    // 10 s capture, 16 columns of 625 ms. python3: 1 s..9.19 s, evenly busy (columns 1..14;
    // the first and last only partly: 9.8 and 13.3 calls of a full column's 24.4). server: 80
    // calls in 0.5..1.012 s (19.5 in column 0, 60.5 in column 1), then 20 in its last bin,
    // which ends at its last call (2.5 s): nearly all in column 3, a trace in column 4.
    assert_eq!(
        show(&["--view", "timeline"]).unwrap(),
        "PID  COMM     FROM s  TO s  PER s  BLOCKED  ACTIVITY\n\
         100  python3     1.0   9.0   37.5     0.0%  | ▄████████████▅ |\n\
         200  server      0.5   2.5   50.0     0.0%  |▃█ ▃▁           |\n"
    );
    let j: Value = serde_json::from_str(
        &show(&[
            "--view",
            "timeline",
            "--order-by",
            "rate",
            "--format",
            "json",
            "--select",
            "pid,rate,calls,blocked_share",
        ])
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        j,
        json!([{"pid": 200, "rate": 50.0, "calls": 100, "blocked_share": 0.0},
               {"pid": 100, "rate": 37.5, "calls": 316, "blocked_share": 0.0}])
    );
    // Rate is per second of each process's own active span.
    let k: Value = serde_json::from_str(
        &show(&[
            "--view",
            "kernels",
            "--order-by",
            "rate",
            "--format",
            "json",
            "--select",
            "kernel,rate",
        ])
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        k,
        json!([{"kernel": "softmax", "rate": 50.0}, {"kernel": "gemm(float*, int)", "rate": 25.0},
               {"kernel": "relu(float*, int)", "rate": 12.5}])
    );
    assert_eq!(
        show(&["--view", "memcpy", "--order-by", "rate"]).unwrap_err(),
        "--order-by rate: the Memcpy view has no rate; the kernels, api, processes, streams and \
         timeline views have one"
    );
}

#[test]
fn rebin_spreads_bins_over_the_capture_in_proportion() {
    // One bin of 100 calls over [500, 1500) ns of a 4000 ns capture in 16 columns of 250.
    let c = rebin((500, 1499), 1000, &[100], 4000);
    assert_eq!(&c[..8], &[0.0, 0.0, 25.0, 25.0, 25.0, 25.0, 0.0, 0.0]);
    // The last bin ends at the last call: calls from 3900 to 3949 all land in column 15
    // (its bin, 400 ns wide, would run past the capture's end).
    let c = rebin((3900, 3949), 400, &[8], 4000);
    assert_eq!((c[15], c.iter().sum::<f64>()), (8.0, 8.0));
    // One call at the very start, in a bin wider than the capture: the first column.
    let c = rebin((0, 0), 1_000_000, &[1], 16_000);
    assert_eq!((c[0], c.iter().sum::<f64>()), (1.0, 1.0));
    assert_eq!(strip(&[0.0, 1.0, 4.0, 8.0]), " ▁▄█");
}

mod golden;
