//! Each rule fires on a report that has its problem, with exact evidence, and a balanced report
//! fires none.

use super::*;
use serde_json::{Value, json};

const SECS: u64 = 10;

/// A process over a 10 s capture: `launches` of a 64-block kernel, `api` rows
/// `(name, calls, blocked_ns, p50_ns)`, copies `(direction, calls, bytes, async_calls,
/// blocked_ns)`, `device_allocs`.
fn process(
    tgid: u32,
    launches: u64,
    api: &[(&str, u64, u64, u64)],
    copies: &[(&str, u64, u64, u64, u64)],
    device_allocs: u64,
) -> Value {
    let z = json!({"calls": 0, "bytes": 0});
    json!({
        "tgid": tgid, "comm": "python3", "cmdline": "python3 train.py", "exited": false,
        "job": null, "launches": launches, "unnamed_launches": 0,
        "kernels": [{"name": "k", "mangled": null, "calls": launches, "grid": [64, 1, 1],
                     "block": [256, 1, 1], "shared_bytes": 0, "streams": 1,
                     "api": "cudaLaunchKernel", "name_source": "register_function"}],
        "copies": copies.iter().map(|(d, c, b, a, n)| json!({"direction": d, "calls": c,
                   "bytes": b, "async_calls": a, "blocked_ns": n})).collect::<Vec<_>>(),
        "api": api.iter().map(|(n, c, b, p)| json!({"name": n, "calls": c, "blocked_ns": b,
                "p50_ns": p, "p99_ns": p, "max_ns": p})).collect::<Vec<_>>(),
        "graphs": {"launches": 0},
        "allocations": {"calls": device_allocs, "failed": 0, "bytes": device_allocs << 20,
                        "frees": device_allocs, "live_bytes": 0, "peak_bytes": 1 << 20,
                        "untracked": 0,
                        "by_kind": {"device": {"calls": device_allocs, "bytes": device_allocs << 20},
                                    "host_pinned": z, "managed": z, "async": z, "pitched": z,
                                    "vmm": z}}
    })
}

fn report(processes: Vec<Value>, drops: u64) -> Report {
    serde_json::from_value(json!({
        "schema": "gpuprofd.report/1", "host": "n", "started_at": "2026-11-23T07:00:00Z",
        "duration_ns": SECS * 1_000_000_000, "drops": {"launch": drops}, "submitted": {},
        "decode_errors": 0, "jobs": [], "processes": processes
    }))
    .unwrap()
}

/// Busy but healthy: 5k launches/s, 10% of the time in syncs, big async copies, few mallocs.
fn balanced() -> Value {
    process(
        1,
        50_000,
        &[("cudaStreamSynchronize", 1_000, 1_000_000_000, 900_000)],
        &[("h2d", 500, 500 << 20, 500, 10_000_000)],
        20,
    )
}

fn rules(r: &Report) -> Vec<(&'static str, Option<u32>)> {
    advise(r, &[]).iter().map(|a| (a.rule, a.pid)).collect()
}

#[test]
fn a_balanced_run_gets_no_advice() {
    assert_eq!(advise_(&report(vec![balanced()], 0)), vec![]);
    assert_eq!(render(&[]), "");
}

#[test]
fn sync_bound() {
    let p = process(
        7,
        1_000,
        &[
            ("cudaStreamSynchronize", 3_000, 3_500_000_000, 1_200_000),
            ("cudaDeviceSynchronize", 10, 500_000_000, 50_000_000),
            ("cudaLaunchKernel", 1_000, 0, 0),
        ],
        &[],
        0,
    );
    let a = advise_(&report(vec![balanced(), p], 0));
    assert_eq!(a.len(), 1);
    assert_eq!((a[0].rule, a[0].pid), ("sync_bound", Some(7)));
    assert_eq!(
        a[0].evidence,
        "blocked 4.0 s of 10.0 s active (40%) waiting for the GPU; most in cudaStreamSynchronize \
         (3000 calls, p50 1.200 ms)"
    );
}

#[test]
fn launch_bound() {
    let a = advise_(&report(vec![process(8, 150_000, &[], &[], 0)], 0));
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].rule, "launch_bound");
    assert_eq!(
        a[0].evidence,
        "15000 kernel launches per second (150000 in 10.0 s active); 100% of them with fewer than 132 \
         blocks"
    );
    assert!(a[0].suggestion.contains("CUDA graph"));
}

/// `process`'s kernel row replaced by kernels `(name, runs, mean GPU ns)` with measured GPU
/// times (shares of their sum), launched once per run.
fn with_gpu_times(mut p: Value, kernels: &[(&str, u64, u64)]) -> Value {
    let sum: u64 = kernels.iter().map(|(_, n, m)| n * m).sum();
    p["kernels"] = kernels
        .iter()
        .map(|(name, n, mean)| {
            json!({"name": name, "mangled": null, "calls": n, "grid": [64, 1, 1],
                   "block": [256, 1, 1], "shared_bytes": 0, "streams": 1,
                   "api": "cudaLaunchKernel", "name_source": "register_function",
                   "gpu_time": {"basis": "measured", "count": n, "total_ns": n * mean,
                                "mean_ns": mean, "min_ns": mean, "p50_ns": mean, "p99_ns": mean,
                                "max_ns": mean, "share": (n * mean) as f64 / sum as f64}})
        })
        .collect();
    p
}

/// With measured GPU times, launch-bound's evidence says how short the kernels ran.
#[test]
fn launch_bound_with_measured_gpu_times() {
    let p = with_gpu_times(
        process(8, 150_000, &[], &[], 0),
        &[("fill", 120_000, 3_000), ("gemm", 30_000, 40_000)],
    );
    let a = advise_(&report(vec![p], 0));
    let got: Vec<(&str, &str)> = a.iter().map(|x| (x.rule, x.evidence.as_str())).collect();
    assert_eq!(
        got,
        [
            (
                "launch_bound",
                "15000 kernel launches per second (150000 in 10.0 s active); 100% of them with fewer \
                 than 132 blocks; measured on the GPU, kernels averaging under 10 µs are 80% of \
                 the kernels run and 23% of the GPU time"
            ),
            (
                "dominant_kernel",
                "gemm took 77% of the process's kernel time on the GPU (1200.000 ms in 30000 runs, \
                 mean 40 µs; measured)"
            ),
        ]
    );
}

/// A kernel with most of the measured GPU time is named; not below 50 %, nor over a trivial
/// total.
#[test]
fn dominant_kernel() {
    let one = |kernels: &[(&str, u64, u64)]| {
        rules(&report(
            vec![with_gpu_times(process(5, 1_000, &[], &[], 0), kernels)],
            0,
        ))
    };
    assert_eq!(
        one(&[("attn", 100, 600_000), ("mlp", 100, 400_000)]),
        vec![("dominant_kernel", Some(5))]
    );
    assert_eq!(
        one(&[("attn", 100, 500_000), ("mlp", 100, 500_001)]),
        vec![("dominant_kernel", Some(5))]
    );
    assert_eq!(
        one(&[
            ("a", 100, 400_000),
            ("b", 100, 300_000),
            ("c", 100, 300_000)
        ]),
        vec![]
    );
    // 60 % of 5 ms: too little GPU time to be worth a line.
    assert_eq!(one(&[("attn", 10, 300_000), ("mlp", 10, 200_000)]), vec![]);
}

#[test]
fn tiny_and_blocking_copies() {
    let p = process(
        9,
        10,
        &[],
        &[
            ("h2d", 4_000, 4_000 * 512, 0, 2_000_000_000),
            ("d2h", 10, 10 << 20, 0, 5_000_000),
        ],
        0,
    );
    let a = advise_(&report(vec![p], 0));
    let got: Vec<(&str, &str)> = a.iter().map(|x| (x.rule, x.evidence.as_str())).collect();
    assert_eq!(
        got,
        [
            (
                "tiny_copies",
                "4000 h2d copies averaging 512 B (2.0 MiB in all)"
            ),
            (
                "blocking_copies",
                "blocked 2.0 s of 10.0 s active (20%) inside synchronous copies"
            ),
        ]
    );
}

#[test]
fn memsets_are_not_copies_to_batch_or_pin() {
    // 4000 small blocking memsets, 30% of the time inside them: neither copy rule applies.
    let p = process(
        9,
        10,
        &[],
        &[("memset", 4_000, 4_000 * 512, 0, 3_000_000_000)],
        0,
    );
    assert_eq!(
        rules(&report(vec![p], 0)),
        Vec::<(&str, Option<u32>)>::new()
    );
}

#[test]
fn alloc_churn_and_lost_records() {
    let r = report(vec![process(11, 10, &[], &[], 5_000)], 42);
    assert_eq!(
        rules(&r),
        [("alloc_churn", Some(11)), ("records_lost", None)]
    );
    let a = advise_(&r);
    assert_eq!(
        a[0].evidence,
        "500 device allocations per second (5000 in 10.0 s active), 5000 frees"
    );
    assert!(a[1].evidence.starts_with("42 records were lost"));
    let text = render(&a);
    assert!(text.contains("[alloc_churn] process 11 python3: 500 device allocations"));
    assert!(text.contains("[records_lost] capture: 42 records"));
}

#[test]
fn gpu_memory_held_while_idle() {
    let with_gpu = |tgid, held: u64, sm: f64, samples: u64| {
        let mut p = process(tgid, 10, &[], &[], 0);
        p["gpu"] = json!({"samples": samples, "devices": [0], "memory_max_bytes": held,
                          "sm_util_avg": sm, "mem_util_avg": 0.0});
        p
    };
    let r = report(
        vec![
            with_gpu(1, 20 << 30, 0.5, 10),
            with_gpu(2, 20 << 30, 60.0, 10),
            with_gpu(3, 100 << 20, 0.0, 10),
            with_gpu(4, 20 << 30, 0.0, 2),
        ],
        0,
    );
    let a = advise_(&r);
    assert_eq!(rules(&r), [("gpu_idle_held", Some(1))]);
    assert_eq!(
        a[0].evidence,
        "holds 20.0 GiB of GPU memory (NVML) while its SM utilisation averaged 0.5% over 10 samples"
    );
}

#[test]
fn a_short_capture_gets_no_per_process_advice() {
    let mut r = report(vec![process(8, 150_000, &[], &[], 0)], 0);
    r.duration_ns = MIN_DURATION_NS - 1;
    assert_eq!(advise_(&r), vec![]);
}

/// Under `--all-jobs` processes come and go within one long capture: each is judged over the
/// time it was active, not the capture's.
#[test]
fn rates_are_over_each_process_s_active_time() {
    let with_timeline = |tgid: u32, exited: bool, first_s: u64, last_s: u64, last_bin_blocked| {
        let mut v = process(tgid, 150_000, &[], &[], 0);
        v["exited"] = json!(exited);
        v["timeline"] = json!({
            "first_call_ns": first_s * 1_000_000_000, "last_call_ns": last_s * 1_000_000_000,
            "bin_ns": 1_000_000_000u64, "calls": [1, 1], "launches": [1, 1],
            "blocked_ns": [0, last_bin_blocked]
        });
        v
    };
    let mut r = report(
        vec![
            // exited: active from 20 s to its last call at 29 s, which blocked 1 s: 10 s
            with_timeline(1, true, 20, 29, 1_000_000_000u64),
            // still running: from 50 s to the capture's end at 100 s
            with_timeline(2, false, 50, 60, 0),
            // started half a second before the end: start-up, no advice
            with_timeline(3, false, 99, 99, 0),
        ],
        0,
    );
    r.duration_ns = 100_000_000_000;
    r.processes[2].timeline.as_mut().unwrap().first_call_ns = 99_500_000_000;
    r.processes[2].timeline.as_mut().unwrap().last_call_ns = 99_500_000_000;
    assert_eq!(active_ns(&r.processes[0], r.duration_ns), 10_000_000_000);
    assert_eq!(active_ns(&r.processes[1], r.duration_ns), 50_000_000_000);
    assert_eq!(active_ns(&r.processes[2], r.duration_ns), 500_000_000);
    let a = advise_(&r);
    assert_eq!(rules(&r), vec![("launch_bound", Some(1))]);
    assert_eq!(
        a[0].evidence,
        "15000 kernel launches per second (150000 in 10.0 s active); 100% of them with fewer \
         than 132 blocks"
    );
    // Without a timeline (no call seen), the whole capture.
    r.processes[0].timeline = None;
    assert_eq!(active_ns(&r.processes[0], r.duration_ns), 100_000_000_000);
    assert_eq!(rules(&r), vec![]);
}

fn advise_(r: &Report) -> Vec<Advice> {
    advise(r, &[])
}

fn steps_of(tgid: u32, steps: &[(u64, u64, u64)]) -> ProcessSteps {
    ProcessSteps {
        tgid,
        generation: 0,
        boundary: "cudaStreamSynchronize 0x10".into(),
        steps: steps
            .iter()
            .enumerate()
            .map(
                |(i, &(wall_ns, first_enqueue_ns, live_bytes))| crate::analysis::steps::Step {
                    start_ns: i as u64 * wall_ns,
                    wall_ns,
                    launches: 5,
                    blocked_ns: 0,
                    copy_bytes: 0,
                    first_enqueue_ns,
                    live_bytes,
                    regular: true,
                    derived_gpu_idle_ns: None,
                    derived_launch_ahead_ns: None,
                    gpu_ns: None,
                    gpu_busy_ns: None,
                    gpu_comm_ns: None,
                    gpu_comm_exposed_ns: None,
                },
            )
            .collect(),
    }
}

#[test]
fn input_bound_and_memory_growth_from_steps() {
    let r = report(vec![balanced(), process(5, 100, &[], &[], 0)], 0);
    const MB: u64 = 1 << 20;
    let s = [
        steps_of(1, &[(10_000_000, 1_000_000, 0); 5]),
        steps_of(
            5,
            &[
                (10_000_000, 4_000_000, 100 * MB),
                (10_000_000, 5_000_000, 140 * MB),
                (10_000_000, 4_000_000, 140 * MB),
                (10_000_000, 6_000_000, 180 * MB),
            ],
        ),
    ];
    let a = advise(&r, &s);
    let got: Vec<(&str, Option<u32>, &str)> = a
        .iter()
        .map(|x| (x.rule, x.pid, x.evidence.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (
                "input_bound",
                Some(5),
                "in 4 steps of 10.000 ms (median; boundary cudaStreamSynchronize 0x10), the \
                 first GPU work was enqueued 4.000 ms (40%) after the step began"
            ),
            (
                "memory_growth",
                Some(5),
                "device memory live at step ends grew from 100.0 MiB to 180.0 MiB over 4 steps \
                 and never went down"
            ),
        ]
    );
    // Memory that goes down once is not growth; two steps are too few to judge.
    let down = [steps_of(
        5,
        &[(10, 0, 100 * MB), (10, 0, 90 * MB), (10, 0, 300 * MB)],
    )];
    assert_eq!(advise(&r, &down), vec![]);
    let few = [steps_of(5, &[(10, 9, 0), (10, 9, 500 * MB)])];
    assert_eq!(advise(&r, &few), vec![]);
}

#[test]
fn exposed_communication_from_the_steps_measured_nccl_time() {
    let r = report(vec![balanced(), process(5, 100, &[], &[], 0)], 0);
    // Steps of 10 ms, first work at once: NCCL ran 4 ms of each, 2.5 ms of it exposed (25%).
    let with = |comm: u64, exposed: u64| {
        let mut s = steps_of(5, &[(10_000_000, 0, 0); 4]);
        for st in &mut s.steps {
            st.gpu_busy_ns = Some(9_000_000);
            st.gpu_comm_ns = Some(comm);
            st.gpu_comm_exposed_ns = Some(exposed);
        }
        s
    };
    let a = advise(&r, &[with(4_000_000, 2_500_000)]);
    assert_eq!(
        a.iter()
            .map(|x| (x.rule, x.evidence.as_str()))
            .collect::<Vec<_>>(),
        [(
            "exposed_communication",
            "in 4 steps of 10.000 ms (median), NCCL's kernels ran 4.000 ms of each, 2.500 ms \
             (25% of the step) with nothing else of the process running on the GPU (median; \
             measured by CUPTI)"
        )]
    );
    assert!(
        a[0].suggestion.contains("bucket_cap_mb"),
        "{}",
        a[0].suggestion
    );
    // Hidden behind compute (1.5 ms exposed, 15%): nothing to say.
    assert_eq!(advise(&r, &[with(4_000_000, 1_500_000)]), vec![]);
    // Not measured in every step: not cited.
    let mut part = with(4_000_000, 2_500_000);
    part.steps[1].gpu_comm_exposed_ns = None;
    assert_eq!(advise(&r, &[part]), vec![]);
}

#[test]
fn throttled_and_failing_gpus() {
    let mut r = report(vec![balanced()], 0);
    let gpu = |index: u32, throttle: Value, xids: Value, xid_count: u64, ecc: u64| {
        json!({"index": index, "name": "H100", "uuid": format!("GPU-{index}"), "samples": 50,
               "gpu_util_avg": 90.0, "gpu_util_max": 99, "mem_util_avg": 30.0,
               "memory_used_max_bytes": 1, "memory_total_bytes": 2, "sm_clock_avg_mhz": 1400.0,
               "power_avg_w": 700.0, "temp_max_c": 88, "unprofiled_pids": [],
               "throttle_rounds": throttle, "ecc_corrected": 0, "ecc_uncorrected": ecc,
               "xid_errors": xids, "xid_count": xid_count})
    };
    r.gpus = serde_json::from_value(json!([
        // Power cap 9 rounds (18 %: under the bar), thermal 30 (60 %): the thermal one counts;
        // idle rounds never do.
        gpu(
            0,
            json!({"sw_power_cap": 9, "hw_thermal_slowdown": 30, "gpu_idle": 50}),
            json!([]),
            0,
            0
        ),
        // Not throttled; two XIDs and uncorrected ECC errors.
        gpu(1, json!({"gpu_idle": 40}), json!([79, 48]), 2, 3),
    ]))
    .unwrap();
    assert_eq!(rules(&r), [("gpu_throttled", None), ("gpu_errors", None)]);
    let a = advise_(&r);
    assert_eq!(
        a[0].evidence,
        "GPU 0 (H100): clocks held back by hw_thermal_slowdown in 30 of 50 NVML rounds (60 %)"
    );
    assert_eq!(
        a[1].evidence,
        "GPU 1 (H100): 2 XID error(s) (79, 48); 3 uncorrected ECC error(s) since the driver loaded"
    );
}

#[test]
fn pageable_copies() {
    // The balanced process's 500 h2d copies (500 MiB), all from pageable memory: advice.
    let mut r = report(vec![balanced()], 0);
    r.processes[0].copies[0].pageable_calls = 500;
    r.processes[0].copies[0].pageable_bytes = 500 << 20;
    assert_eq!(rules(&r), [("pageable_copies", Some(1))]);
    assert_eq!(
        advise_(&r)[0].evidence,
        "500 host↔device copies moved 500.0 MiB of 500.0 MiB through pageable host memory (not \
         in any pinned buffer the process allocated while watched)"
    );
    // 40 % of the bytes: under the bar; and 99 calls are too few whatever their share.
    r.processes[0].copies[0].pageable_bytes = 200 << 20;
    assert_eq!(rules(&r), []);
    r.processes[0].copies[0].pageable_bytes = 500 << 20;
    r.processes[0].copies[0].pageable_calls = 99;
    assert_eq!(rules(&r), []);
}

#[test]
fn gpm_busy_sms_missing_the_tensor_cores_or_holding_few_warps() {
    let mut r = report(vec![balanced()], 0);
    let gpu = |index: u32, samples: u64, avg: Value, jobs: Value| {
        json!({"index": index, "name": "H100", "uuid": format!("GPU-{index}"), "samples": samples + 1,
               "gpu_util_avg": 99.0, "gpu_util_max": 100, "mem_util_avg": 30.0,
               "memory_used_max_bytes": 1, "memory_total_bytes": 2, "sm_clock_avg_mhz": 1400.0,
               "power_avg_w": 500.0, "temp_max_c": 60, "unprofiled_pids": [],
               "gpm": {"state": "measured", "source": "measured", "samples": samples, "avg": avg,
                       "jobs": jobs, "shared_samples": 0, "idle_samples": 0,
                       "unattributed_samples": 0}})
    };
    r.gpus = serde_json::from_value(json!([
        // Busy, tensor pipes idle, FP32 busy: tensor advice; occupancy fine. Held by one job
        // in every round.
        gpu(
            0,
            20,
            json!({"sm_activity_pct": 80.0, "sm_occupancy_pct": 45.0, "tensor_activity_pct": 1.0,
                   "fp32_activity_pct": 35.0}),
            json!([{"workload": "slurm:77", "samples": 20, "avg": {}}])
        ),
        // Busy, tensor pipes busy, occupancy 12 %: occupancy advice.
        gpu(
            1,
            20,
            json!({"sm_activity_pct": 60.0, "sm_occupancy_pct": 12.0, "tensor_activity_pct": 50.0,
                   "fp32_activity_pct": 5.0}),
            json!([])
        ),
        // Not busy enough; too few rounds: nothing.
        gpu(
            2,
            20,
            json!({"sm_activity_pct": 40.0, "sm_occupancy_pct": 5.0, "tensor_activity_pct": 0.0,
                   "fp32_activity_pct": 40.0}),
            json!([])
        ),
        gpu(
            3,
            4,
            json!({"sm_activity_pct": 90.0, "sm_occupancy_pct": 5.0, "tensor_activity_pct": 0.0,
                   "fp32_activity_pct": 40.0}),
            json!([])
        ),
    ]))
    .unwrap();
    assert_eq!(
        rules(&r),
        [("gpu_tensor_idle", None), ("gpu_low_occupancy", None)]
    );
    let a = advise_(&r);
    assert_eq!(
        a[0].evidence,
        "GPU 0 (H100): SM activity averaged 80.0 % over 20 GPM rounds (measured, all held by job \
         slurm:77), while the tensor pipes were busy 1.0 % and the FP32 pipes 35.0 %"
    );
    assert_eq!(
        a[1].evidence,
        "GPU 1 (H100): SM activity averaged 60.0 % over 20 GPM rounds (measured), while the SMs \
         held 12.0 % of the warps they can (occupancy)"
    );
}

#[test]
fn sync_bound_and_input_bound_cite_the_derived_gpu_idle() {
    let mut p = process(
        7,
        1_000,
        &[("cudaStreamSynchronize", 3_000, 4_000_000_000, 1_200_000)],
        &[],
        0,
    );
    p["derived_gpu_idle"] = json!({
        "basis": "derived", "unavailable": null, "span_ns": 10_000_000_000u64,
        "idle_lower_bound_ns": 3_500_000_000u64, "idle_share": 0.35, "drains": 3_000,
        "launch_ahead_p50_ns": 1_100_000, "launch_ahead_max_ns": 9_000_000});
    let mut s = steps_of(7, &[(10_000_000, 4_000_000, 0); 4]);
    for (i, st) in s.steps.iter_mut().enumerate() {
        st.derived_gpu_idle_ns = Some(3_000_000 + i as u64 * 1_000_000);
    }
    let a = advise(&report(vec![balanced(), p.clone()], 0), &[s.clone()]);
    let got: Vec<(&str, &str)> = a.iter().map(|x| (x.rule, x.evidence.as_str())).collect();
    assert_eq!(
        got,
        [
            (
                "sync_bound",
                "blocked 4.0 s of 10.0 s active (40%) waiting for the GPU; most in \
                 cudaStreamSynchronize (3000 calls, p50 1.200 ms); derived from the syncs, the \
                 GPU had no work queued >= 35% of the time, and the host ran >= 1.100 ms ahead \
                 of it before a wait (median)"
            ),
            (
                "input_bound",
                "in 4 steps of 10.000 ms (median; boundary cudaStreamSynchronize 0x10), the \
                 first GPU work was enqueued 4.000 ms (40%) after the step began; derived from \
                 the syncs, the GPU had no work queued for >= 4.000 ms (40%) of the step \
                 (median)"
            ),
        ]
    );
    // Measured GPU time per step (the injection library): cited too, labelled measured.
    let mut m = s.clone();
    for (i, st) in m.steps.iter_mut().enumerate() {
        st.gpu_ns = Some(2_000_000 + i as u64 * 500_000);
    }
    let a = advise(&report(vec![balanced(), p.clone()], 0), &[m.clone()]);
    assert!(
        a[1].evidence.ends_with(
            "(median); measured by CUPTI, the step's kernels ran 2.500 ms on the GPU (25% of \
             the step; median, summed over streams)"
        ),
        "{}",
        a[1].evidence
    );
    // The busy time inside each step, where there is one, comes first.
    let mut b = m.clone();
    for (i, st) in b.steps.iter_mut().enumerate() {
        st.gpu_busy_ns = Some(1_500_000 + i as u64 * 500_000);
    }
    let a = advise(&report(vec![balanced(), p.clone()], 0), &[b]);
    assert!(
        a[1].evidence.ends_with(
            "(median); measured by CUPTI, the GPU ran this process's work for 2.000 ms (20%) \
             of the step and nothing of it for the rest (median; overlapping streams counted \
             once)"
        ),
        "{}",
        a[1].evidence
    );
    // Not in every step (a step whose records could not join): not cited.
    m.steps[2].gpu_ns = None;
    let a = advise(&report(vec![balanced(), p.clone()], 0), &[m]);
    assert!(!a[1].evidence.contains("measured"), "{}", a[1].evidence);
    // Unavailable (launches counted in the kernel), or missing in a step: no such evidence.
    p["derived_gpu_idle"]["unavailable"] = json!("launches were counted in the kernel");
    s.steps[1].derived_gpu_idle_ns = None;
    let a = advise(&report(vec![balanced(), p], 0), &[s]);
    assert_eq!(a.len(), 2);
    assert!(a.iter().all(|x| !x.evidence.contains("derived")), "{a:?}");
}

/// A node's ranks in one capture: the rank that works longest per step while the others wait is
/// named, with the merge's figures; the balanced ranks get nothing.
#[test]
fn straggler_names_the_rank_the_others_wait_for() {
    let f = crate::analysis::ranks::tests::two_nodes();
    // Node B's capture: rank 2 (pid 11) works 38 ms a step, rank 3 (pid 13) 8 ms.
    let out = advise(&f.reports[1], &f.steps[1]);
    let s: Vec<&Advice> = out.iter().filter(|a| a.rule == "straggler").collect();
    assert_eq!(s.len(), 1, "{out:?}");
    assert_eq!(
        (s[0].pid, s[0].comm.as_deref()),
        (Some(11), Some("python3"))
    );
    assert!(
        s[0].evidence
            .starts_with("node-b/2 was the slowest rank in 6 of 6 matched steps")
            && s[0].evidence.contains("38.000 ms median against 8.000 ms"),
        "{}",
        s[0].evidence
    );
    // Node A's ranks are even: no straggler.
    let out = advise(&f.reports[0], &f.steps[0]);
    assert!(out.iter().all(|a| a.rule != "straggler"), "{out:?}");
}
