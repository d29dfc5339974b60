//! The exposition of a known report: exact samples, bounded series.

use super::*;
use serde_json::json;

pub(crate) fn report() -> Report {
    let k = |name: &str, calls: u64| {
        json!({"name": name, "mangled": null, "calls": calls, "grid": [1, 1, 1],
               "block": [32, 1, 1], "shared_bytes": 0, "streams": 1,
               "api": "cudaLaunchKernel", "name_source": "register_function"})
    };
    let z = json!({"calls": 0, "bytes": 0});
    let alloc = json!({"calls": 1, "failed": 0, "bytes": 4096, "frees": 0, "live_bytes": 4096,
        "peak_bytes": 4096, "untracked": 0, "by_kind": {"device": z, "host_pinned": z,
        "managed": z, "async": z, "pitched": z, "vmm": z}});
    let mut kernels: Vec<serde_json::Value> =
        (0..12).map(|i| k(&format!("k{i:02}"), 100 - i)).collect();
    kernels.push(k("k00", 5)); // same name, another configuration: summed
    let proc_ = |tgid: u32, comm: &str| {
        json!({"tgid": tgid, "comm": comm, "cmdline": "", "exited": false,
           "job": {"kind": "slurm", "id": "77", "cgroup": "/job_77"},
           "launches": 1000, "unnamed_launches": 0, "kernels": kernels,
           "copies": [{"direction": "h2d", "calls": 3, "bytes": 3072, "async_calls": 0,
                       "blocked_ns": 1500}],
           "api": [{"name": "cudaStreamSynchronize", "calls": 4, "blocked_ns": 2_500_000_000u64,
                    "p50_ns": 1, "p99_ns": 1, "max_ns": 1}],
           "graphs": {"launches": 2}, "allocations": alloc, "gpu": null,
           "devices": [{"device": 1, "launches": 990, "copies": 3, "copy_bytes": 3072,
                        "memsets": 0, "memset_bytes": 0, "syncs": 4, "allocations": 1,
                        "alloc_bytes": 4096, "nvml_gpu": 3},
                       {"device": null, "nvml_gpu": 3, "launches": 10, "copies": 0, "copy_bytes": 0,
                        "memsets": 0, "memset_bytes": 0, "syncs": 0, "allocations": 0,
                        "alloc_bytes": 0}],
           "derived_gpu_idle": {"basis": "derived", "unavailable": null, "span_ns": 4_000_000_000u64,
                                "idle_lower_bound_ns": 1_500_000_000u64, "idle_share": 0.375,
                                "drains": 4, "launch_ahead_p50_ns": 1, "launch_ahead_max_ns": 1}})
    };
    serde_json::from_value(json!({
        "schema": "gpuprofd.report/1", "host": "n", "started_at": "2026-11-23T07:00:00Z",
        "duration_ns": 1, "drops": {"launch": 3, "copy": 0}, "submitted": {"launch": 1003},
        "probe_faults": {"user_read": 2, "launch_counts_full": 0},
        "decode_errors": 0, "jobs": [],
        "processes": [proc_(100, "old"), proc_(100, "python3"), proc_(200, "gone")],
        "nvml": {"state": "ok", "samples": 3},
        "gpus": [{"index": 0, "name": "H100", "uuid": "GPU-1", "samples": 3, "gpu_util_avg": 50.0,
                  "gpu_util_max": 90, "mem_util_avg": 1.0, "memory_used_max_bytes": 10,
                  "memory_total_bytes": 100, "sm_clock_avg_mhz": null, "power_avg_w": null,
                  "temp_max_c": null, "unprofiled_pids": [],
                  "gpm": {"state": "measured", "samples": 2}},
                 {"index": 1, "name": "A100", "uuid": "GPU-2", "samples": 3, "gpu_util_avg": 5.0,
                  "gpu_util_max": 9, "mem_util_avg": 1.0, "memory_used_max_bytes": 10,
                  "memory_total_bytes": 100, "sm_clock_avg_mhz": null, "power_avg_w": null,
                  "temp_max_c": null, "unprofiled_pids": [],
                  "gpm": {"state": "unsupported", "detail": "no GPM", "samples": 0}}]
    }))
    .unwrap()
}

pub(crate) fn extra() -> Extra {
    Extra {
        facts: crate::model::snapshot::MetricsFacts {
            gpu_now: BTreeMap::from([(0, (Some(87), Some(12 << 30)))]),
            process_gpu_bytes: BTreeMap::from([(100, 1 << 30)]),
            gpu_health: BTreeMap::from([(
                0,
                (
                    crate::nvml::DeviceHealth {
                        index: 0,
                        throttle_reasons: Some(0x4 | 0x40),
                        pcie_tx_kbps: Some(1000),
                        pcie_rx_kbps: None,
                        ecc_corrected: Some(3),
                        ecc_uncorrected: Some(0),
                    },
                    2,
                ),
            )]),
            gpm_now: BTreeMap::from([(
                0,
                crate::model::gpm::GpmNow {
                    figures: crate::nvml::gpm::Figures {
                        sm_activity_pct: Some(62.5),
                        sm_occupancy_pct: Some(25.0),
                        tensor_activity_pct: Some(40.0),
                        tensor_hmma_pct: Some(40.0),
                        dram_bandwidth_pct: Some(50.0),
                        pcie_tx_mib_per_s: Some(2.0),
                        nvlink_tx_mib_per_s: Some(3.0),
                        nvlink_links: vec![crate::nvml::gpm::Link {
                            link: 4,
                            tx_mib_per_s: Some(3.0),
                            rx_mib_per_s: None,
                        }],
                        ..Default::default()
                    },
                    holder: crate::model::gpm::Holder::Job("slurm:77".into()),
                },
            )]),
            expired: vec![200],
        },
        records_read: 1003,
        launches_counted: 5000,
        probes: 95,
        bpf_maps: vec![
            crate::capture::MapFill {
                map: "MMAP_PEND",
                entries: 3,
                capacity: 16384,
            },
            crate::capture::MapFill {
                map: "PY_PROCS",
                entries: 0,
                capacity: 4096,
            },
        ],
        heap_in_use: Some(5 << 20),
        top_kernels: TOP_KERNELS,
        per_process: true,
        otlp: None,
    }
}

fn samples(text: &str, name: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .map(str::to_owned)
        .collect()
}

#[test]
fn exposition_has_exact_values() {
    let t = render(&report(), &extra());
    assert!(!t.contains("# EOF"), "{t}");
    assert!(
        t.contains("# TYPE gpuprofd_kernel_launches_total counter\n"),
        "{t}"
    );
    let l = r#"{pid="100",comm="python3",workload="slurm:77"}"#;
    assert_eq!(
        samples(&t, "gpuprofd_kernel_launches_total"),
        [format!("gpuprofd_kernel_launches_total{l} 1000")]
    );
    assert_eq!(
        samples(&t, "gpuprofd_copy_bytes_total"),
        [
            r#"gpuprofd_copy_bytes_total{pid="100",comm="python3",workload="slurm:77",direction="h2d"} 3072"#
        ]
    );
    // Per device: the ordinal, or "unknown"; the node GPU where the row's device is known
    // (the unknown row's likely GPU is no label).
    let sorted = |name: &str| {
        let mut v = samples(&t, name);
        v.sort();
        v
    };
    assert_eq!(
        sorted("gpuprofd_device_kernel_launches_total"),
        [
            r#"gpuprofd_device_kernel_launches_total{pid="100",comm="python3",workload="slurm:77",gpu="1",node_gpu="3"} 990"#,
            r#"gpuprofd_device_kernel_launches_total{pid="100",comm="python3",workload="slurm:77",gpu="unknown",node_gpu="unknown"} 10"#,
        ]
    );
    assert_eq!(
        sorted("gpuprofd_device_copy_bytes_total"),
        [
            r#"gpuprofd_device_copy_bytes_total{pid="100",comm="python3",workload="slurm:77",gpu="1",node_gpu="3"} 3072"#,
            r#"gpuprofd_device_copy_bytes_total{pid="100",comm="python3",workload="slurm:77",gpu="unknown",node_gpu="unknown"} 0"#,
        ]
    );
    assert_eq!(
        samples(&t, "gpuprofd_api_blocked_seconds_total"),
        [
            r#"gpuprofd_api_blocked_seconds_total{pid="100",comm="python3",workload="slurm:77",api="cudaStreamSynchronize"} 2.5"#
        ]
    );
    assert_eq!(
        samples(&t, "gpuprofd_gpu_idle_derived_seconds_total"),
        [format!("gpuprofd_gpu_idle_derived_seconds_total{l} 1.5")]
    );
    // No process loaded the injection library: no measured GPU time.
    assert_eq!(samples(&t, "gpuprofd_gpu_kernel_seconds_total"), [""; 0]);
    assert_eq!(
        samples(&t, "gpuprofd_gpu_memory_held_bytes"),
        [format!("gpuprofd_gpu_memory_held_bytes{l} 1073741824")]
    );
    assert_eq!(
        samples(&t, "gpuprofd_gpu_utilization_ratio"),
        [r#"gpuprofd_gpu_utilization_ratio{gpu="0",uuid="GPU-1"} 0.87"#]
    );
    let mut lost = samples(&t, "gpuprofd_records_lost_total");
    lost.sort();
    assert_eq!(
        lost,
        [
            r#"gpuprofd_records_lost_total{kind="copy"} 0"#,
            r#"gpuprofd_records_lost_total{kind="launch"} 3"#
        ]
    );
    let mut faults = samples(&t, "gpuprofd_probe_faults_total");
    faults.sort();
    assert_eq!(
        faults,
        [
            r#"gpuprofd_probe_faults_total{kind="launch_counts_full"} 0"#,
            r#"gpuprofd_probe_faults_total{kind="user_read"} 2"#
        ]
    );
    assert_eq!(samples(&t, "gpuprofd_processes"), ["gpuprofd_processes 1"]);
    assert_eq!(samples(&t, "gpuprofd_probes"), ["gpuprofd_probes 95"]);
    assert_eq!(
        samples(&t, "gpuprofd_launches_counted_in_kernel_total"),
        ["gpuprofd_launches_counted_in_kernel_total 5000"]
    );
    // A family's series come in no set order.
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    assert_eq!(
        sorted(samples(&t, "gpuprofd_bpf_map_entries")),
        [
            "gpuprofd_bpf_map_entries{map=\"MMAP_PEND\"} 3",
            "gpuprofd_bpf_map_entries{map=\"PY_PROCS\"} 0"
        ]
    );
    assert_eq!(
        samples(&t, "gpuprofd_heap_in_use_bytes"),
        ["gpuprofd_heap_in_use_bytes 5242880"]
    );
    assert_eq!(
        sorted(samples(&t, "gpuprofd_bpf_map_capacity")),
        [
            "gpuprofd_bpf_map_capacity{map=\"MMAP_PEND\"} 16384",
            "gpuprofd_bpf_map_capacity{map=\"PY_PROCS\"} 4096"
        ]
    );
    // NVML health: the reasons in force now, PCIe, ECC, XID.
    let mut on = samples(&t, "gpuprofd_gpu_throttle_reason");
    assert_eq!(on.len(), 9, "every reason, 0 or 1: {on:?}");
    on.retain(|s| s.ends_with(" 1"));
    on.sort();
    assert_eq!(
        on,
        [
            r#"gpuprofd_gpu_throttle_reason{gpu="0",uuid="GPU-1",what="hw_thermal_slowdown"} 1"#,
            r#"gpuprofd_gpu_throttle_reason{gpu="0",uuid="GPU-1",what="sw_power_cap"} 1"#,
        ]
    );
    assert_eq!(
        samples(&t, "gpuprofd_gpu_pcie_throughput_bytes_per_second"),
        [
            r#"gpuprofd_gpu_pcie_throughput_bytes_per_second{gpu="0",uuid="GPU-1",what="tx"} 1024000"#
        ]
    );
    let mut ecc = samples(&t, "gpuprofd_gpu_ecc_errors");
    ecc.sort();
    assert_eq!(
        ecc,
        [
            r#"gpuprofd_gpu_ecc_errors{gpu="0",uuid="GPU-1",what="corrected"} 3"#,
            r#"gpuprofd_gpu_ecc_errors{gpu="0",uuid="GPU-1",what="uncorrected"} 0"#,
        ]
    );
    assert_eq!(
        samples(&t, "gpuprofd_gpu_xid_errors_total"),
        [r#"gpuprofd_gpu_xid_errors_total{gpu="0",uuid="GPU-1"} 2"#]
    );
}

#[test]
fn gpm_figures_of_the_latest_round() {
    let t = render(&report(), &extra());
    let mut s = samples(&t, "gpuprofd_gpu_gpm_supported");
    s.sort();
    assert_eq!(
        s,
        [
            r#"gpuprofd_gpu_gpm_supported{gpu="0",uuid="GPU-1"} 1"#,
            r#"gpuprofd_gpu_gpm_supported{gpu="1",uuid="GPU-2"} 0"#,
        ]
    );
    let mut r = samples(&t, "gpuprofd_gpu_gpm_ratio");
    r.sort();
    assert_eq!(
        r,
        [
            r#"gpuprofd_gpu_gpm_ratio{gpu="0",uuid="GPU-1",what="dram_bandwidth"} 0.5"#,
            r#"gpuprofd_gpu_gpm_ratio{gpu="0",uuid="GPU-1",what="sm_activity"} 0.625"#,
            r#"gpuprofd_gpu_gpm_ratio{gpu="0",uuid="GPU-1",what="sm_occupancy"} 0.25"#,
            r#"gpuprofd_gpu_gpm_ratio{gpu="0",uuid="GPU-1",what="tensor_activity"} 0.4"#,
            r#"gpuprofd_gpu_gpm_ratio{gpu="0",uuid="GPU-1",what="tensor_hmma"} 0.4"#,
        ]
    );
    assert_eq!(
        samples(&t, "gpuprofd_gpu_gpm_pcie_bytes_per_second"),
        [r#"gpuprofd_gpu_gpm_pcie_bytes_per_second{gpu="0",uuid="GPU-1",what="tx"} 2097152.0"#]
    );
    let mut n = samples(&t, "gpuprofd_gpu_gpm_nvlink_bytes_per_second");
    n.sort();
    assert_eq!(
        n,
        [
            r#"gpuprofd_gpu_gpm_nvlink_bytes_per_second{gpu="0",uuid="GPU-1",what="tx",link="4"} 3145728.0"#,
            r#"gpuprofd_gpu_gpm_nvlink_bytes_per_second{gpu="0",uuid="GPU-1",what="tx",link="total"} 3145728.0"#,
        ]
    );
    assert_eq!(
        samples(&t, "gpuprofd_gpu_gpm_holder"),
        [r#"gpuprofd_gpu_gpm_holder{gpu="0",uuid="GPU-1",workload="slurm:77"} 1"#]
    );
    let mut w = samples(&t, "gpuprofd_workload_gpm_ratio");
    w.sort();
    assert_eq!(
        w,
        [
            r#"gpuprofd_workload_gpm_ratio{workload="slurm:77",gpu="0",what="dram_bandwidth"} 0.5"#,
            r#"gpuprofd_workload_gpm_ratio{workload="slurm:77",gpu="0",what="sm_activity"} 0.625"#,
            r#"gpuprofd_workload_gpm_ratio{workload="slurm:77",gpu="0",what="sm_occupancy"} 0.25"#,
            r#"gpuprofd_workload_gpm_ratio{workload="slurm:77",gpu="0",what="tensor_activity"} 0.4"#,
        ]
    );
}

#[test]
fn series_are_bounded() {
    let t = render(&report(), &extra());
    // The ended process (200) and the old holder of pid 100 are gone; kernel series: top 10.
    assert!(!t.contains(r#"pid="200""#), "{t}");
    assert!(!t.contains(r#"comm="old""#), "{t}");
    let k = samples(&t, "gpuprofd_top_kernel_launches_total");
    assert_eq!(k.len(), TOP_KERNELS);
    assert!(
        k.iter().any(|s| s.contains(r#"kernel="k00"} 105"#)),
        "configurations summed by name: {k:?}"
    );
    assert!(!k.iter().any(|s| s.contains("k10") || s.contains("k11")));
    // The service's `metrics.top_kernels` narrows it further: the three most launched.
    let t = render(
        &report(),
        &Extra {
            top_kernels: 3,
            ..extra()
        },
    );
    let mut k = samples(&t, "gpuprofd_top_kernel_launches_total");
    k.retain(|s| s.contains(r#"pid="100""#));
    assert_eq!(k.len(), 3, "{k:?}");
    assert!(!k.iter().any(|s| s.contains("k03")), "{k:?}");
}

/// `promtool check metrics` (Prometheus's own linter) accepts the exposition, when promtool is
/// installed (`scripts/setup.sh --test-tools` installs it; the privileged suite requires it).
#[test]
fn promtool_accepts_the_exposition_if_installed() {
    let Some(promtool) = ["/opt/gpuprofd-test-tools/usr/bin/promtool", "promtool"]
        .into_iter()
        .find(|p| {
            std::process::Command::new(p)
                .arg("--version")
                .output()
                .is_ok()
        })
    else {
        return; // checked for certain in tests/tests/metrics.rs
    };
    use std::io::Write;
    let mut child = std::process::Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(render(&report(), &extra()).as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn by_default_series_are_per_workload() {
    // Two live processes of one Slurm job and one without a job: two workload series, no pid.
    let mut r = report();
    r.processes[2].exited = false;
    let mut other = r.processes[0].clone();
    other.tgid = 300;
    other.job = None;
    r.processes.push(other);
    let t = render(
        &r,
        &Extra {
            per_process: false,
            facts: crate::model::snapshot::MetricsFacts {
                expired: vec![],
                ..extra().facts
            },
            ..extra()
        },
    );
    assert!(!t.contains("pid=") && !t.contains("comm="), "{t}");
    assert!(
        !t.contains("job="),
        "Prometheus's own job label is left alone: {t}"
    );
    let mut launches = samples(&t, "gpuprofd_kernel_launches_total");
    launches.sort();
    assert_eq!(
        launches,
        [
            r#"gpuprofd_kernel_launches_total{workload=""} 1000"#,
            r#"gpuprofd_kernel_launches_total{workload="slurm:77"} 2000"#,
        ]
    );
    let mut copied = samples(&t, "gpuprofd_copy_bytes_total");
    copied.sort();
    assert_eq!(
        copied,
        [
            r#"gpuprofd_copy_bytes_total{workload="",direction="h2d"} 3072"#,
            r#"gpuprofd_copy_bytes_total{workload="slurm:77",direction="h2d"} 6144"#,
        ]
    );
    assert_eq!(
        samples(&t, "gpuprofd_gpu_memory_held_bytes"),
        [r#"gpuprofd_gpu_memory_held_bytes{workload="slurm:77"} 1073741824"#]
    );
    // Top kernels per workload: the job's two processes' counts summed, ten kept.
    let mut k = samples(&t, "gpuprofd_top_kernel_launches_total");
    k.retain(|s| s.contains(r#"workload="slurm:77""#));
    assert_eq!(k.len(), TOP_KERNELS, "{k:?}");
    assert!(
        k.contains(
            &r#"gpuprofd_top_kernel_launches_total{workload="slurm:77",kernel="k00"} 210"#
                .to_string()
        ),
        "{k:?}"
    );
    assert_eq!(samples(&t, "gpuprofd_processes"), ["gpuprofd_processes 3"]);
}

#[test]
fn a_duty_cycle_exposes_the_estimates_and_the_attached_share() {
    let mut r = report();
    r.launch_duty = Some(crate::model::snapshot::LaunchDutyReport {
        cycle: "100ms/1s".into(),
        windows: 10,
        attached_ms: 1000,
        observed_ms: 10_000,
        ..Default::default()
    });
    // pid 100's two processes are one workload: their estimates add, their errors in quadrature.
    for (p, (est, se)) in r
        .processes
        .iter_mut()
        .zip([(4000, 300), (6000, 400), (1, 1)])
    {
        p.launch_sampling = Some(crate::model::snapshot::LaunchSamplingReport {
            windows: 10,
            counted_launches: 1000,
            estimated_launches: est,
            standard_error: Some(se),
            ..Default::default()
        });
    }
    let t = render(&r, &extra());
    assert_eq!(
        samples(&t, "gpuprofd_launch_probes_attached_ratio"),
        ["gpuprofd_launch_probes_attached_ratio 0.1"]
    );
    // A reused pid shows only its latest process (6000 ± 400); pid 200 has expired.
    let l = r#"{pid="100",comm="python3",workload="slurm:77"}"#;
    assert_eq!(
        samples(&t, "gpuprofd_kernel_launches_estimated_total"),
        [format!("gpuprofd_kernel_launches_estimated_total{l} 6000")]
    );
    assert_eq!(
        samples(&t, "gpuprofd_kernel_launches_estimate_stderr"),
        [format!("gpuprofd_kernel_launches_estimate_stderr{l} 400.0")]
    );
    // Without a cycle the probes are attached all the time.
    let t = render(&report(), &extra());
    assert_eq!(
        samples(&t, "gpuprofd_launch_probes_attached_ratio"),
        ["gpuprofd_launch_probes_attached_ratio 1.0"]
    );
    assert!(samples(&t, "gpuprofd_kernel_launches_estimated_total").is_empty());
}

#[test]
fn otlp_push_counts_are_exposed_while_it_runs() {
    let t = render(&report(), &extra());
    assert!(!t.contains("gpuprofd_otlp"), "{t}");
    let status = crate::output::otlp::Status {
        exports: 4,
        exports_failed: 2,
        in_flight: 1,
        ..Default::default()
    };
    let t = render(
        &report(),
        &Extra {
            otlp: Some(status),
            ..extra()
        },
    );
    assert_eq!(
        samples(&t, "gpuprofd_otlp_exports_total"),
        ["gpuprofd_otlp_exports_total 4"]
    );
    assert_eq!(
        samples(&t, "gpuprofd_otlp_exports_failed_total"),
        ["gpuprofd_otlp_exports_failed_total 2"]
    );
    assert_eq!(
        samples(&t, "gpuprofd_otlp_exports_in_flight"),
        ["gpuprofd_otlp_exports_in_flight 1"]
    );
    assert!(t.contains("# TYPE gpuprofd_otlp_exports_failed_total counter\n"));
}

#[test]
fn nccl_collectives_per_operation_communicator_and_rank() {
    // Two processes of one job: ranks 0 and 1 of one communicator; the first also uses one
    // made before the attach (id and rank unknown).
    let mut r = report();
    let nccl = |rank: i32, calls: u64| {
        serde_json::from_value::<crate::model::nccl::NcclReport>(serde_json::json!({
            "calls": calls, "bytes": calls * 4096,
            "communicators": [{
                "handle": "0x10", "id": "00000000000000ab", "rank": rank, "nranks": 2,
                "device": rank, "created_by": "ncclCommInitRank", "ended": null,
                "ops": [{"op": "AllReduce", "calls": calls, "bytes": calls * 4096,
                         "in_group": 0, "datatypes": {"float32": calls},
                         "reductions": {"sum": calls}, "streams": ["0x5"],
                         "devices": {"0": calls}}]}]
        }))
        .unwrap()
    };
    let mut a = nccl(0, 3);
    let mut early = a.communicators[0].clone();
    early.id = None;
    early.rank = None;
    early.created_by = "before_attach".into();
    early.ops[0].op = "Broadcast".into();
    a.communicators.push(early);
    // Pid 100's earlier process and pid 200 are not exposed (`extra`'s facts).
    r.processes[0].nccl = Some(nccl(0, 99));
    r.processes[1].nccl = Some(a);
    let mut other = r.processes[1].clone();
    other.tgid = 300;
    other.nccl = Some(nccl(1, 5));
    r.processes.push(other);
    let t = render(&r, &extra());
    let mut calls = samples(&t, "gpuprofd_nccl_collective_calls_total");
    calls.sort();
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert!(
        calls.iter().any(|s| s.contains(r#"op="AllReduce""#)
            && s.contains(r#"communicator="00000000000000ab",rank="0""#)
            && s.ends_with(" 3")),
        "{calls:?}"
    );
    assert!(
        calls.iter().any(
            |s| s.contains(r#"communicator="00000000000000ab",rank="1""#) && s.ends_with(" 5")
        ),
        "{calls:?}"
    );
    assert!(
        calls.iter().any(
            |s| s.contains(r#"op="Broadcast",communicator="unknown",rank="unknown""#)
                && s.ends_with(" 3")
        ),
        "{calls:?}"
    );
    let bytes = samples(&t, "gpuprofd_nccl_collective_bytes_total");
    assert_eq!(bytes.len(), 3, "{bytes:?}");
    assert!(
        bytes
            .iter()
            .any(|s| s.contains(r#"rank="1""#) && s.ends_with(" 20480"))
    );
    // GPU seconds only where the injection library measured the collectives' kernels.
    assert_eq!(
        samples(&t, "gpuprofd_nccl_collective_gpu_seconds_total"),
        [""; 0]
    );
    let mut m = r.clone();
    m.processes[1].nccl.as_mut().unwrap().communicators[0].ops[0].gpu_ns = Some(250_000_000);
    let t = render(&m, &extra());
    let gpu = samples(&t, "gpuprofd_nccl_collective_gpu_seconds_total");
    assert_eq!(gpu.len(), 1, "{gpu:?}");
    assert!(
        gpu[0].contains(r#"op="AllReduce",communicator="00000000000000ab",rank="0""#)
            && gpu[0].ends_with(" 0.25"),
        "{gpu:?}"
    );
}

/// Kernel GPU-time series: the kernels with the most measured GPU time (not the most
/// launched), their rows summed by name, none for kernels without a measured time.
#[test]
fn top_kernels_by_measured_gpu_time() {
    use crate::model::kernel_time::KernelGpuTime;
    let mut r = report();
    assert_eq!(
        samples(
            &render(&r, &extra()),
            "gpuprofd_top_kernel_gpu_seconds_total"
        ),
        [""; 0]
    );
    let kernels = &mut r.processes[1].kernels;
    // k11 (the least launched) took the most GPU time; k00's two rows: 0.5 s + 0.25 s.
    for (i, k) in kernels.iter_mut().enumerate().take(12) {
        k.gpu_time = Some(KernelGpuTime {
            total_ns: if i == 11 {
                3_000_000_000
            } else {
                1_000_000 * (i as u64 + 1)
            },
            ..Default::default()
        });
    }
    kernels[0].gpu_time.as_mut().unwrap().total_ns = 500_000_000;
    kernels[12].gpu_time = Some(KernelGpuTime {
        total_ns: 250_000_000,
        ..Default::default()
    });
    kernels[1].gpu_time = None; // k01: no measured time
    let t = render(
        &r,
        &Extra {
            top_kernels: 3,
            ..extra()
        },
    );
    let mut got = samples(&t, "gpuprofd_top_kernel_gpu_seconds_total");
    got.retain(|s| s.contains(r#"pid="100""#));
    got.sort();
    let want = [("k00", "0.75"), ("k10", "0.011"), ("k11", "3.0")];
    assert_eq!(got.len(), 3, "{got:?}");
    for ((name, v), s) in want.iter().zip(&got) {
        assert!(
            s.contains(&format!(r#"kernel="{name}""#)) && s.ends_with(&format!(" {v}")),
            "{got:?}"
        );
    }
}

#[test]
fn measured_gpu_kernel_seconds_per_process() {
    let mut r = report();
    r.processes[1].gpu_time = crate::model::kernel_time::GpuTimeReport {
        basis: "measured".into(),
        source: Some("cupti".into()),
        unavailable: None,
        kernel_ns: 2_500_000_000,
        ..Default::default()
    };
    let t = render(&r, &extra());
    let got = samples(&t, "gpuprofd_gpu_kernel_seconds_total");
    assert_eq!(got.len(), 1, "{got:?}");
    let l = &r.processes[1];
    assert!(
        got[0].contains(&format!("pid=\"{}\"", l.tgid)) && got[0].ends_with(" 2.5"),
        "{got:?}"
    );
}
