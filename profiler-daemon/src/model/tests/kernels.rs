//! Aggregator tests: kernel grouping, every naming path, process separation, the JSON contract.

use super::*;

/// name, mangled, calls, api, name source, streams.
type Row<'a> = (&'a str, Option<&'a str>, u64, &'a str, &'a str, u64);

#[test]
fn kernels_grouped_by_configuration() {
    let v = only(
        &mut agg(),
        &[
            name(
                100,
                namesrc::REGISTER_FUNCTION,
                0x1000,
                "_Z6vecAddPKfS0_Pfi",
            ),
            launch(100, LAUNCH_RT, 0x1000, 64, 1),
            launch(100, LAUNCH_RT, 0x1000, 64, 2),
            launch(100, LAUNCH_RT, 0x1000, 64, 1),
            launch(100, LAUNCH_RT, 0x1000, 128, 7),
        ],
    );
    let k = |calls, grid, streams| {
        json!({"name": "vecAdd(float const*, float const*, float*, int)", "mangled": "_Z6vecAddPKfS0_Pfi",
               "calls": calls, "grid": [grid, 1, 1], "block": [256, 1, 1], "shared_bytes": 0, "streams": streams,
               "api": "cudaLaunchKernel", "name_source": "register_function"})
    };
    assert_eq!(v["kernels"], json!([k(3, 64, 2), k(1, 128, 1)]));
    assert_eq!(
        (v["launches"].as_u64(), v["unnamed_launches"].as_u64()),
        (Some(4), Some(0))
    );
    assert_eq!(
        v["api"],
        json!([{"name": "cudaLaunchKernel", "calls": 4, "blocked_ns": 0, "p50_ns": 0, "p99_ns": 0, "max_ns": 0}])
    );
}

#[test]
fn every_naming_path() {
    let resolver = MapSymbols(
        [((100, 0x4000), "_ZN4demoL15internal_kernelEPi".to_owned())]
            .into_iter()
            .collect(),
    );
    let mut a = Aggregator::new(apis(), Box::new(resolver));
    let ps = run(
        &mut a,
        &[
            name(
                100,
                namesrc::REGISTER_FUNCTION,
                0x1000,
                "_Z6vecAddPKfS0_Pfi",
            ),
            launch(100, LAUNCH_RT, 0x1000, 1, 0),
            // __cudaGetKernel: a kernel handle stands for the host stub; same config merges.
            alias(100, 0x7000, 0x1000),
            launch(100, LAUNCH_RT, 0x7000, 1, 5),
            name(
                100,
                namesrc::MODULE_GET_FUNCTION,
                0x2000,
                "_ZN4demo6reduceILi256EEEvPKfPfi",
            ),
            launch(100, LAUNCH_DRV, 0x2000, 2, 0),
            // cuKernelGetFunction: function → kernel named by cuLibraryGetKernel (alias first).
            alias(100, 0x3100, 0x3000),
            name(
                100,
                namesrc::LIBRARY_GET_KERNEL,
                0x3000,
                "triton_poi_fused_add_0",
            ),
            launch(100, LAUNCH_DRV, 0x3100, 3, 0),
            // A runtime stub registered before we attached: the symbol tables name it...
            launch(100, LAUNCH_RT, 0x4000, 4, 0),
            // ...but a driver handle is never looked up there.
            launch(100, LAUNCH_DRV, 0x4000, 4, 0),
            launch(100, LAUNCH_DRV, 0x5000, 5, 0),
            launch(100, LAUNCH_DRV, 0x5000, 5, 0),
            // A name arriving after its launch still names it.
            launch(100, LAUNCH_RT, 0x6000, 6, 0),
            name(100, namesrc::GET_NAME, 0x6000, "late_kernel"),
        ],
    );
    let got: Vec<Row> = ps[0]
        .kernels
        .iter()
        .map(|k| {
            (
                &*k.name,
                k.mangled.as_deref(),
                k.calls,
                &*k.api,
                &*k.name_source,
                k.streams,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("<unknown 0x5000>", None, 2, "cuLaunchKernel", "unknown", 1),
            (
                "vecAdd(float const*, float const*, float*, int)",
                Some("_Z6vecAddPKfS0_Pfi"),
                2,
                "cudaLaunchKernel",
                "register_function",
                2
            ),
            ("<unknown 0x4000>", None, 1, "cuLaunchKernel", "unknown", 1),
            (
                "demo::internal_kernel(int*)",
                Some("_ZN4demoL15internal_kernelEPi"),
                1,
                "cudaLaunchKernel",
                "symbols",
                1
            ),
            (
                "late_kernel",
                Some("late_kernel"),
                1,
                "cudaLaunchKernel",
                "get_name",
                1
            ),
            (
                "triton_poi_fused_add_0",
                Some("triton_poi_fused_add_0"),
                1,
                "cuLaunchKernel",
                "library_get_kernel",
                1
            ),
            (
                "void demo::reduce<256>(float const*, float*, int)",
                Some("_ZN4demo6reduceILi256EEEvPKfPfi"),
                1,
                "cuLaunchKernel",
                "module_get_function",
                1
            ),
        ]
    );
    assert_eq!((ps[0].launches, ps[0].unnamed_launches), (9, 3));
}

#[test]
fn processes_kept_apart() {
    let mut a = agg();
    let ps = run(
        &mut a,
        &[
            name(2, namesrc::REGISTER_FUNCTION, 0x1000, "two"),
            name(1, namesrc::REGISTER_FUNCTION, 0x1000, "one"),
            launch(2, LAUNCH_RT, 0x1000, 1, 0),
            launch(1, LAUNCH_RT, 0x1000, 1, 0),
            launch(1, LAUNCH_RT, 0x1000, 1, 0),
            alias(3, 0x5, 0x1000), // an alias in another process names nothing here
            launch(3, LAUNCH_DRV, 0x5, 1, 0),
        ],
    );
    let got: Vec<(u32, u64, &str)> = ps
        .iter()
        .map(|p| (p.tgid, p.launches, &*p.kernels[0].name))
        .collect();
    assert_eq!(got, [(1, 2, "one"), (2, 1, "two"), (3, 1, "<unknown 0x5>")]);
    assert_eq!(a.seen_tgids(), [1, 2, 3]);
}

#[test]
fn truncated_and_lossy_names() {
    let mut n = name(100, namesrc::REGISTER_FUNCTION, 0x1, "_Z6vecAddPKfS0_P");
    if let Event::Name(_, b) = &mut n {
        b.flags = flags::TRUNCATED;
    }
    let mut bad = name(100, namesrc::GET_NAME, 0x2, "k\u{e9}rnel");
    if let Event::Name(_, b) = &mut bad {
        b.name[1] = 0xff; // invalid UTF-8
    }
    let ps = run(
        &mut agg(),
        &[
            n,
            bad,
            launch(100, LAUNCH_RT, 0x1, 1, 0),
            launch(100, LAUNCH_DRV, 0x2, 2, 0),
        ],
    );
    let got: Vec<&str> = ps[0].kernels.iter().map(|k| &*k.name).collect();
    assert_eq!(got, ["_Z6vecAddPKfS0_P…", "k\u{fffd}\u{fffd}rnel"]);
}

#[test]
fn report_json_contract() {
    let mut a = agg();
    a.apply(&name(42, namesrc::REGISTER_FUNCTION, 0x1000, "_Z1kv"));
    a.apply(&launch(42, LAUNCH_RT, 0x1000, 2, 0));
    a.set_process_meta(
        42,
        ProcessMeta {
            owner: None,
            gpu_env: None,
            comm: "demo".into(),
            cmdline: "./demo".into(),
            exited: false,
            start_time: 0,
            job: Some(crate::enrich::jobs::Job {
                kind: "slurm".into(),
                id: "77".into(),
                step: Some("0".into()),
                cgroup: "/job_77/step_0".into(),
                ..Default::default()
            }),
        },
    );
    use crate::nvml::{DeviceSample, ProcessSample, Sample};
    a.apply_nvml(&Sample {
        ts_ns: 5,
        devices: vec![DeviceSample {
            index: 0,
            name: "NVIDIA H100".into(),
            uuid: "GPU-1".into(),
            gpu_util: Some(50),
            mem_util: Some(20),
            mem_used: Some(1 << 30),
            mem_total: Some(80 << 30),
            sm_clock_mhz: Some(1980),
            power_mw: Some(350_000),
            temp_c: Some(60),
        }],
        processes: vec![
            ProcessSample {
                device: 0,
                pid: 42,
                used_bytes: Some(512 << 20),
                sm_util: Some(45),
                mem_util: Some(10),
            },
            ProcessSample {
                device: 0,
                pid: 77,
                used_bytes: Some(1 << 20),
                sm_util: None,
                mem_util: None,
            },
        ],
        mig: Default::default(),
        health: None,
        gpm: None,
    });
    // GPM of the same round: pid 77's job is not known, so the GPU is shared (no job named).
    use crate::nvml::gpm::{DeviceGpm, Figures, Gpm, Link, State};
    a.apply_nvml_gpm(&Gpm {
        ts_ns: 5,
        devices: vec![DeviceGpm {
            index: 0,
            state: State::Measured(Box::new(Figures {
                sm_activity_pct: Some(62.5),
                tensor_hmma_pct: Some(40.0),
                nvlink_links: vec![Link {
                    link: 0,
                    tx_mib_per_s: Some(1.5),
                    rx_mib_per_s: None,
                }],
                ..Figures::default()
            })),
        }],
    });
    let mut m = meta();
    m.drops = crate::capture::drops_by_kind(&[0, 3]);
    let got = serde_json::to_string(&a.report(m)).unwrap();
    let want = concat!(
        r#"{"schema":"gpuprofd.report/1","host":"gpu-box","started_at":"2026-11-23T07:00:00Z","duration_ns":12500000000,"#,
        r#""drops":{"alias":0,"copy":0,"exec":0,"exit":0,"gpu_activity":0,"gpu_name":0,"gpu_state":0,"#,
        r#""graph":0,"launch":3,"map":0,"mem":0,"name":0,"nccl":0,"stack":0,"sync":0},"#,
        r#""submitted":{"alias":0,"copy":2,"exec":0,"exit":0,"gpu_activity":0,"gpu_name":0,"gpu_state":0,"#,
        r#""graph":0,"launch":1,"map":0,"mem":0,"name":0,"nccl":0,"stack":0,"sync":0},"#,
        r#""decode_errors":0,"#,
        r#""jobs":[{"kind":"slurm","id":"77","steps":["0"],"processes":[42],"launches":1,"graph_launches":0,"#,
        r#""copy_bytes":0,"alloc_bytes":0,"blocked_ns":0}],"#,
        r#""processes":[{"tgid":42,"comm":"demo","cmdline":"./demo","exited":false,"#,
        r#""job":{"kind":"slurm","id":"77","step":"0","cgroup":"/job_77/step_0"},"launches":1,"unnamed_launches":0,"#,
        r#""kernels":[{"name":"k()","mangled":"_Z1kv","calls":1,"grid":[2,1,1],"block":[256,1,1],"shared_bytes":0,"#,
        r#""streams":1,"api":"cudaLaunchKernel","name_source":"register_function"}],"copies":[],"#,
        r#""api":[{"name":"cudaLaunchKernel","calls":1,"blocked_ns":0,"p50_ns":0,"p99_ns":0,"max_ns":0}],"#,
        r#""graphs":{"launches":0},"allocations":{"calls":0,"failed":0,"bytes":0,"frees":0,"live_bytes":0,"#,
        r#""peak_bytes":0,"untracked":0,"by_kind":{"device":{"calls":0,"bytes":0},"host_pinned":{"calls":0,"bytes":0},"#,
        r#""managed":{"calls":0,"bytes":0},"async":{"calls":0,"bytes":0},"pitched":{"calls":0,"bytes":0},"#,
        r#""vmm":{"calls":0,"bytes":0}}},"#,
        r#""gpu":{"samples":1,"devices":[0],"memory_max_bytes":536870912,"sm_util_avg":45.0,"mem_util_avg":10.0},"#,
        r#""streams":[{"stream":"default","launches":1,"copies":0,"copy_bytes":0,"derived_idle_ns":0,"drains":0,"#,
        r#""derived_launch_ahead_max_ns":0}],"code":[],"#,
        r#""stacks":{"samples":0,"dropped":0,"truncated":0,"python":null,"python_no_thread":0,"python_fault":0,"shallow":0},"#,
        r#""timeline":{"first_call_ns":1,"last_call_ns":1,"bin_ns":1000000,"calls":[1],"launches":[1],"blocked_ns":[0]},"#,
        // The launch's record carried no device; NVML listed the process on GPU 0 alone.
        r#""devices":[{"device":null,"launches":1,"copies":0,"copy_bytes":0,"memsets":0,"#,
        r#""memset_bytes":0,"syncs":0,"allocations":0,"alloc_bytes":0,"nvml_gpu":0}],"#,
        r#""derived_gpu_idle":{"basis":"derived","unavailable":null,"span_ns":0,"idle_lower_bound_ns":0,"#,
        r#""idle_share":0.0,"drains":0,"launch_ahead_p50_ns":0,"launch_ahead_max_ns":0},"#,
        // Without the injection library: absent, and why.
        r#""gpu_time":{"basis":"absent","source":null,"state":null,"state_detail":null,"#,
        r#""cupti_library":null,"cupti_found":null,"#,
        r#""unavailable":"no records from the injection library (not loaded in this process, or not attached)","#,
        r#""dropped":0,"records":0,"bad_times":0,"kernels":0,"kernel_ns":0,"memcpy_ns":0,"memset_ns":0,"#,
        r#""memsets":0,"memset_bytes":0,"copies":[],"kernels_cut":0,"names_cut":0,"#,
        r#""calls":0,"joined":0,"unjoined":0,"unjoined_by":{},"launches_evicted":0,"launches_without_records":0}}],"#,
        r#""nvml":{"state":"ok","samples":1},"#,
        r#""gpus":[{"index":0,"name":"NVIDIA H100","uuid":"GPU-1","samples":1,"gpu_util_avg":50.0,"gpu_util_max":50,"#,
        r#""mem_util_avg":20.0,"memory_used_max_bytes":1073741824,"memory_total_bytes":85899345920,"#,
        r#""sm_clock_avg_mhz":1980.0,"power_avg_w":350.0,"temp_max_c":60,"unprofiled_pids":[77],"#,
        r#""gpm":{"state":"measured","source":"measured","samples":1,"#,
        r#""avg":{"graphics_activity_pct":null,"sm_activity_pct":62.5,"sm_occupancy_pct":null,"#,
        r#""integer_activity_pct":null,"tensor_activity_pct":null,"tensor_hmma_pct":40.0,"#,
        r#""tensor_imma_pct":null,"tensor_dfma_pct":null,"dram_bandwidth_pct":null,"#,
        r#""fp16_activity_pct":null,"fp32_activity_pct":null,"fp64_activity_pct":null,"#,
        r#""pcie_tx_mib_per_s":null,"pcie_rx_mib_per_s":null,"nvlink_tx_mib_per_s":null,"#,
        r#""nvlink_rx_mib_per_s":null,"nvlink_links":[{"link":0,"tx_mib_per_s":1.5,"rx_mib_per_s":null}]},"#,
        r#""max":{"graphics_activity_pct":null,"sm_activity_pct":62.5,"sm_occupancy_pct":null,"#,
        r#""integer_activity_pct":null,"tensor_activity_pct":null,"tensor_hmma_pct":40.0,"#,
        r#""tensor_imma_pct":null,"tensor_dfma_pct":null,"dram_bandwidth_pct":null,"#,
        r#""fp16_activity_pct":null,"fp32_activity_pct":null,"fp64_activity_pct":null,"#,
        r#""pcie_tx_mib_per_s":null,"pcie_rx_mib_per_s":null,"nvlink_tx_mib_per_s":null,"#,
        r#""nvlink_rx_mib_per_s":null,"nvlink_links":[{"link":0,"tx_mib_per_s":1.5,"rx_mib_per_s":null}]},"#,
        r#""shared_samples":1,"idle_samples":0,"unattributed_samples":0}}],"#,
        r#""libraries":[]}"#
    );
    assert_eq!(got, want);
    let back: crate::model::snapshot::Report =
        serde_json::from_str(&serde_json::to_string_pretty(&a.report(meta())).unwrap()).unwrap();
    assert_eq!(back.processes[0].kernels[0].name, "k()");
}

/// The injection library's records of process 42 (as the probes write them), joined to the
/// kernel rows by mangled name; a kernel only CUPTI saw gets a row of its own.
#[test]
fn gpu_time_joins_the_kernel_rows_by_mangled_name() {
    use profiler_common::gpu::{
        BATCH, GpuActivity, GpuActivityBody, GpuNameBody, GpuStateBody, activity, state,
    };
    let gname = |id: u32, s: &str| {
        Event::GpuName(
            hdr(kind::GPU_NAME, 0, 42),
            GpuNameBody::new(id, s.as_bytes()),
        )
    };
    let k = |name, stream, dur: u64| GpuActivity {
        kind: activity::KERNEL,
        stream,
        name,
        start_ns: 5_000,
        end_ns: 5_000 + dur,
        ..GpuActivity::default()
    };
    let mut items = [GpuActivity::default(); BATCH];
    items[..4].copy_from_slice(&[
        k(1, 7, 3_000),
        k(1, 7, 1_000),
        k(2, 9, 4_000),
        k(1, 8, 2_000),
    ]);
    let mut a = agg();
    let got = run(
        &mut a,
        &[
            name(42, namesrc::REGISTER_FUNCTION, 0x1000, "_Z1kv"),
            launch(42, LAUNCH_RT, 0x1000, 2, 0),
            launch(42, LAUNCH_RT, 0x1000, 2, 0),
            launch(42, LAUNCH_RT, 0x1000, 2, 0),
            Event::GpuState(
                hdr(kind::GPU_STATE, 0, 42),
                GpuStateBody {
                    state: state::ENABLED,
                    _pad: 0,
                    detail: 130_000,
                },
            ),
            gname(1, "_Z1kv"),
            gname(2, "_Z5graphv"),
            Event::GpuActivity(
                hdr(kind::GPU_ACTIVITY, 0, 42),
                GpuActivityBody {
                    n: 4,
                    _pad: 0,
                    items,
                },
            ),
        ],
    );
    let p = &got[0];
    // GPU records are no calls: the launches and API counts are the program's alone.
    assert_eq!(p.launches, 3);
    assert_eq!(p.api.iter().map(|a| a.calls).sum::<u64>(), 3);
    assert_eq!(
        (p.gpu_time.basis.as_str(), p.gpu_time.state.as_deref()),
        ("measured", Some("enabled"))
    );
    assert_eq!((p.gpu_time.kernels, p.gpu_time.kernel_ns), (4, 10_000));
    type Row<'a> = (&'a str, u64, Option<(u64, u64, f64)>);
    let rows: Vec<Row> = p
        .kernels
        .iter()
        .map(|k| {
            (
                k.name.as_str(),
                k.calls,
                k.gpu_time.as_ref().map(|g| (g.count, g.total_ns, g.share)),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("k()", 3, Some((3, 6_000, 0.6))),
            ("graph()", 0, Some((1, 4_000, 0.4)))
        ]
    );
    let g = p.kernels[0].gpu_time.as_ref().unwrap();
    assert_eq!((g.min_ns, g.max_ns, g.mean_ns), (1_000, 3_000, 2_000));
    let streams: Vec<(u32, u64, u64)> = g
        .streams
        .iter()
        .map(|s| (s.stream, s.count, s.gpu_ns))
        .collect();
    assert_eq!(streams, [(7, 2, 4_000), (8, 1, 2_000)]);
    assert_eq!(p.kernels[1].name_source, "cupti");
}

/// The join in the model: process 42's two launches on thread 42 (at 10 and 20 ns, the second
/// with its stack sampled, period 2) and the library's batch (kernel records first, then the
/// launch calls that claim them): both kernels joined; the sampled launch's kernel time goes to
/// its code row (5,000 ns measured, 10,000 scaled by the period). Without a thread map nothing
/// joins.
#[test]
fn kernel_records_join_their_launches_and_their_sampled_stacks() {
    use crate::model::gpu_join::Tids;
    use profiler_common::gpu::{BATCH, GpuActivity, GpuActivityBody, activity};
    let at = |ev: Event, ts: u64| -> Event {
        let mut ev = ev;
        match &mut ev {
            Event::Launch(h, _) | Event::Stack(h, _) => h.ts_ns = ts,
            _ => unreachable!(),
        }
        ev
    };
    let k = |corr, dur: u64| GpuActivity {
        kind: activity::KERNEL,
        correlation: corr,
        name: 1,
        stream: 7,
        start_ns: 1_000,
        end_ns: 1_000 + dur,
        ..GpuActivity::default()
    };
    let call = |corr, start: u64| GpuActivity {
        kind: activity::API,
        name: 307,
        correlation: corr,
        start_ns: start,
        end_ns: start + 5,
        bytes: 42,
        ..GpuActivity::default()
    };
    let mut items = [GpuActivity::default(); BATCH];
    items[..4].copy_from_slice(&[k(1, 3_000), k(2, 5_000), call(1, 12), call(2, 22)]);
    let st = crate::enrich::stacks::tests::stack(&[0x10, 0x20], &[], kind::LAUNCH, 2);
    let events = [
        at(launch(42, LAUNCH_RT, 0x1000, 2, 0), 10),
        at(launch(42, LAUNCH_RT, 0x1000, 2, 0), 20),
        at(Event::Stack(hdr(kind::STACK, LAUNCH_RT, 42), st), 20),
        Event::GpuActivity(
            hdr(kind::GPU_ACTIVITY, 0, 42),
            GpuActivityBody {
                n: 4,
                _pad: 0,
                items,
            },
        ),
    ];
    let mut a = agg();
    a.set_tids(42, Tids::Same);
    let p = run(&mut a, &events).remove(0);
    let g = &p.gpu_time;
    assert_eq!(
        (g.records, g.calls, g.joined, g.unjoined, g.kernel_ns),
        (2, 2, 2, 0, 8_000)
    );
    assert_eq!(p.code.len(), 1);
    assert_eq!(
        (
            p.code[0].launches,
            p.code[0].gpu_measured_ns,
            p.code[0].gpu_ns
        ),
        (2, 5_000, 10_000)
    );
    let mut a = agg();
    let p = run(&mut a, &events).remove(0);
    assert_eq!((p.gpu_time.joined, p.gpu_time.unjoined), (0, 2));
    assert_eq!(p.gpu_time.unjoined_by["thread_not_mapped"], 2);
    assert_eq!((p.code[0].gpu_measured_ns, p.code[0].gpu_ns), (0, 0));
}
