use super::*;
use crate::model::snapshot::LibraryReport;
use crate::model::snapshot::{
    ApiReport, ByKind, CopyReport, GraphReport, KernelReport, KindReport, SCHEMA,
};
use std::collections::BTreeMap;

fn kernel(name: &str, calls: u64, grid: u32, api: &str) -> KernelReport {
    KernelReport {
        name: name.into(),
        mangled: None,
        calls,
        grid: [grid, 1, 1],
        block: [256, 1, 1],
        shared_bytes: 1024,
        streams: 1,
        api: api.into(),
        name_source: "register_function".into(),
        gpu_time: None,
    }
}

fn report(drops: &[(&str, u64)]) -> Report {
    let p = ProcessReport {
        owner: None,
        tgid: 4242,
        comm: "python3".into(),
        cmdline: "python3 train.py --epochs 1".into(),
        exited: true,
        job: None,
        launches: 1234,
        unnamed_launches: 4,
        kernels: vec![
            kernel(
                "vecAdd(float const*, float const*, float*, int)",
                1000,
                64,
                "cudaLaunchKernel",
            ),
            kernel(
                "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(Params)",
                230,
                1024,
                "cuLaunchKernel",
            ),
            kernel("<unknown 0x7f00dead>", 4, 1, "cuLaunchKernel"),
        ],
        copies: vec![
            CopyReport {
                direction: "h2d".into(),
                calls: 50,
                bytes: 52_428_800,
                async_calls: 0,
                blocked_ns: 12_345_678,
                pageable_calls: 50,
                pageable_bytes: 52_428_800,
                size_histogram: vec![],
            },
            CopyReport {
                direction: "d2h".into(),
                calls: 2,
                bytes: 512,
                async_calls: 2,
                blocked_ns: 0,
                pageable_calls: 0,
                pageable_bytes: 0,
                size_histogram: vec![],
            },
        ],
        api: vec![
            ApiReport {
                name: "cudaLaunchKernel".into(),
                calls: 1000,
                blocked_ns: 0,
                p50_ns: 0,
                p99_ns: 0,
                max_ns: 0,
            },
            ApiReport {
                name: "cudaStreamSynchronize".into(),
                calls: 100,
                blocked_ns: 5_050_000,
                p50_ns: 49_919,
                p99_ns: 98_815,
                max_ns: 100_000,
            },
        ],
        graphs: GraphReport { launches: 3 },
        allocations: AllocReport {
            calls: 8,
            failed: 1,
            bytes: 16 << 20,
            frees: 5,
            live_bytes: 1234,
            peak_bytes: 4567,
            untracked: 0,
            by_kind: ByKind {
                device: KindReport {
                    calls: 6,
                    bytes: 16 << 20,
                },
                host_pinned: KindReport { calls: 2, bytes: 0 },
                ..Default::default()
            },
        },
        gpu: None,
        streams: Vec::new(),
        code: Vec::new(),
        stacks: Default::default(),
        timeline: None,
        launch_sampling: None,
        derived_gpu_idle: None,
        nccl: None,
        gpu_time: Default::default(),
        devices: Vec::new(),
    };
    Report {
        schema: SCHEMA.into(),
        host: "gpu-box".into(),
        started_at: "2026-11-23T07:00:00Z".into(),
        duration_ns: 12_500_000_000,
        drops: drops
            .iter()
            .map(|(k, n)| ((*k).to_owned(), *n))
            .collect::<BTreeMap<_, _>>(),
        submitted: BTreeMap::new(),
        probe_faults: BTreeMap::new(),
        decode_errors: 0,
        nvml: Default::default(),
        gpus: vec![],
        jobs: vec![],
        processes: vec![p],
        libraries: vec![
            LibraryReport {
                path: "/usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03".into(),
                soname: "libcuda.so.1".into(),
                layer: "driver".into(),
                version: Some("535.261.03".into()),
                build_id: Some("ab12".into()),
                probes: 61,
            },
            LibraryReport {
                path: "/venv/nvidia/cuda_runtime/lib/libcudart.so.12".into(),
                soname: "libcudart.so.12".into(),
                layer: "runtime".into(),
                version: None,
                build_id: None,
                probes: 88,
            },
        ],
        launch_duty: None,
    }
}

#[test]
fn probe_faults_are_said_when_any_happened() {
    let mut r = Report {
        probe_faults: BTreeMap::from([
            ("launch_counts_full".to_owned(), 0),
            ("user_read".to_owned(), 3),
        ]),
        ..serde_json::from_value(serde_json::json!({
            "schema": "gpuprofd.report/1", "host": "h", "started_at": "x",
            "duration_ns": 0, "drops": {}, "submitted": {}, "decode_errors": 0,
            "jobs": [], "processes": []}))
        .unwrap()
    };
    assert_eq!(
        probe_faults(&r),
        "probe faults: user_read 3 (a call's arguments or results unreadable: recorded as 0)\n"
    );
    r.probe_faults.insert("user_read".into(), 0);
    assert_eq!(probe_faults(&r), "");
}

#[test]
fn gpm_lines() {
    use crate::model::snapshot::{GpmJobReport, GpmReport};
    use crate::nvml::gpm::Figures;
    let f = |sm: f64| Figures {
        sm_activity_pct: Some(sm),
        sm_occupancy_pct: Some(20.0),
        tensor_activity_pct: Some(40.0),
        tensor_hmma_pct: Some(40.0),
        tensor_imma_pct: Some(0.0),
        dram_bandwidth_pct: Some(55.5),
        fp32_activity_pct: Some(10.0),
        pcie_tx_mib_per_s: Some(128.0),
        pcie_rx_mib_per_s: Some(256.0),
        ..Figures::default()
    };
    let m = GpmReport {
        state: "measured".into(),
        detail: String::new(),
        source: "measured".into(),
        samples: 9,
        avg: Some(f(62.5)),
        max: Some(f(75.0)),
        jobs: vec![GpmJobReport {
            workload: "slurm:77".into(),
            samples: 8,
            avg: f(65.0),
        }],
        shared_samples: 1,
        idle_samples: 0,
        unattributed_samples: 0,
    };
    let mut s = String::new();
    gpm(&mut s, &m);
    assert_eq!(
        s,
        concat!(
            "    gpm (measured, 9 samples): SM activity avg 62.5% (max 75.0%), SM occupancy avg 20.0%, ",
            "tensor avg 40.0% (HMMA 40.0%, IMMA 0.0%, DFMA -), DRAM bandwidth avg 55.5%\n",
            "      FP16 -, FP32 10.0%, FP64 -; PCIe tx 128.0 MiB/s rx 256.0 MiB/s; NVLink tx - rx -\n",
            "      held (samples): slurm:77 alone 8 (SM activity avg 65.0%), shared 1\n",
        )
    );
    let mut s = String::new();
    gpm(
        &mut s,
        &GpmReport {
            state: "unsupported".into(),
            detail: "the device does not support GPM".into(),
            source: String::new(),
            samples: 0,
            avg: None,
            max: None,
            jobs: vec![],
            shared_samples: 0,
            idle_samples: 0,
            unattributed_samples: 0,
        },
    );
    assert_eq!(s, "    gpm: unsupported: the device does not support GPM\n");
}

#[test]
fn golden() {
    let want = concat!(
        "gpuprofd report: host gpu-box, started 2026-11-23T07:00:00Z, duration 12.500 s\n",
        "no records lost; decode errors: 0\n",
        "CUDA libraries: libcuda.so.1 535.261.03 (driver, 61 probes), libcudart.so.12 (runtime, 88 probes)\n",
        "\n",
        "process 4242 python3 (exited)\n",
        "  cmdline: python3 train.py --epochs 1\n",
        "  kernel launches 1234 (4 unnamed), graph launches 3\n",
        "  kernels by launches:\n",
        "    launches  grid      block    smem B  api               kernel\n",
        "        1000  64x1x1    256x1x1    1024  cudaLaunchKernel  vecAdd(float const*, float const*, float*, int)\n",
        "         230  1024x1x1  256x1x1    1024  cuLaunchKernel    void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_…\n",
        "    … 1 more rows not shown\n",
        "  copies:\n",
        "    direction  calls     bytes  async  blocked (CPU) ms\n",
        "    h2d           50  50.0 MiB      0            12.346\n",
        "    d2h            2     512 B      2                 -\n",
        "  API calls (blocked = CPU time inside the call; - = no return probe):\n",
        "    api                    calls  blocked (CPU) ms  p50 µs  p99 µs  max µs\n",
        "    cudaLaunchKernel        1000                 -       -       -       -\n",
        "    cudaStreamSynchronize    100             5.050    49.9    98.8   100.0\n",
        "  allocations: 8 calls (1 failed), 16.0 MiB allocated, 5 frees, live 1.2 KiB, peak 4.5 KiB\n",
        "    by kind: device 16.0 MiB (6 calls), host_pinned 0 B (2 calls)\n",
    );
    assert_eq!(render_with(&report(&[("copy", 0), ("launch", 0)]), 2), want);
}

#[test]
fn drops_warn_and_empty_sections() {
    let mut r = report(&[("copy", 3), ("launch", 12), ("sync", 0)]);
    r.decode_errors = 2;
    r.libraries.clear();
    let p = &mut r.processes[0];
    (p.comm, p.cmdline, p.exited) = (String::new(), String::new(), false);
    (p.kernels, p.copies, p.api) = (vec![], vec![], vec![]);
    p.allocations = AllocReport::default();
    let want = concat!(
        "gpuprofd report: host gpu-box, started 2026-11-23T07:00:00Z, duration 12.500 s\n",
        "WARNING: records lost (copy 3, launch 12): counts below are lower bounds; decode errors: 2\n",
        "\n",
        "process 4242 ?\n",
        "  kernel launches 1234 (4 unnamed), graph launches 3\n",
        "  kernels: none\n",
        "  copies: none\n",
        "  API calls: none\n",
        "  allocations: none\n",
        "\n",
        "advice (from CPU-side measurements, NVML and measured GPU times; see docs/CAPTURE-FILES.md#advice):\n",
        "  [records_lost] capture: 15 records were lost because the ring buffer was full; \
         every count in this report is a lower bound\n",
        "    try: capture again with a larger --ring-buffer-mb (e.g. 256), or narrow the \
         capture with --pid / --job\n",
    );
    assert_eq!(render(&r), want);
    r.processes.clear();
    r.drops.clear();
    assert!(
        render(&r).ends_with("no records lost; decode errors: 2\n\nno CUDA activity recorded\n")
    );
}

#[test]
fn the_calls_per_device_follow_the_launch_line_unknown_last() {
    use crate::model::devices::DeviceReport;
    let mut r = report(&[("copy", 0), ("launch", 0)]);
    r.processes[0].devices = vec![
        DeviceReport {
            device: Some(1),
            launches: 1200,
            copies: 50,
            copy_bytes: 50 << 20,
            syncs: 100,
            allocations: 8,
            alloc_bytes: 16 << 20,
            ..Default::default()
        },
        DeviceReport {
            device: None,
            launches: 34,
            copies: 2,
            copy_bytes: 512,
            ..Default::default()
        },
    ];
    let text = render_with(&r, 2);
    let want = concat!(
        "  kernel launches 1234 (4 unnamed), graph launches 3\n",
        "  by device (unknown: a context made current before gpuprofd attached):\n",
        "    device   launches  copies    copied  memsets  syncs  allocations  allocated\n",
        "    1            1200      50  50.0 MiB        0    100            8   16.0 MiB\n",
        "    unknown        34       2     512 B        0      0            0        0 B\n",
        "  kernels by launches:\n",
    );
    assert!(text.contains(want), "{text}");
}
