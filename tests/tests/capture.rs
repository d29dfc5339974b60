//! End-to-end capture: the real eBPF object on the fake CUDA driver and runtime, exact values.
//!
//! Run through `cargo xtask test` (as root, `--test-threads=1`).

use gpuprofd_tests::*;

const VEC_ADD: &str = "vecAdd(float const*, float const*, float*, int)";
const RELU: &str = "relu(float*, int)";
const REDUCE: &str = "void demo::reduce<256>(float const*, float*, int)";

fn kernel_entry<'a>(p: &'a serde_json::Value, name: &str, api: &str) -> &'a serde_json::Value {
    let ks = kernels(p, name);
    ks.iter()
        .find(|k| k["api"] == api)
        .copied()
        .unwrap_or_else(|| panic!("no {name} via {api}: {ks:?}"))
}

#[test]
fn runtime_launches_every_variant_counted_once() {
    let d = Daemon::all_jobs();
    let mut w = Workload::start();
    w.script(&[
        "rt_launch vecAdd 3 64 1 1 256 1 1 0 0",
        "rt_launch_ptsz relu 2 128 2 1 128 1 1 0 1",
        "rt_launch_stub gemm 4 16 16 1 16 16 1 4096 2",
        "rt_launch_ex reduce 5 32 1 1 256 1 1 1024 0",
        "rt_launch_ex_ptsz vecAdd 6 8 1 1 32 1 1 0 0",
        "rt_launch_coop vecAdd 7 2 1 1 64 1 1 0 0",
    ]);
    // The fake driver really ran one driver launch per runtime launch.
    assert_eq!(w.count("cuLaunchKernel"), 3 + 4);
    assert_eq!(w.count("cuLaunchKernel_ptsz"), 2);
    let tgid = w.tgid;
    let r = d.stop().report;
    let p = process(&r, tgid);
    assert_eq!(p["launches"], 27);
    assert_eq!(p["unnamed_launches"], 0);
    let k = kernel_entry(p, VEC_ADD, "cudaLaunchKernel");
    assert_eq!(
        (k["calls"].as_u64(), &k["grid"], &k["block"]),
        (
            Some(3),
            &serde_json::json!([64, 1, 1]),
            &serde_json::json!([256, 1, 1])
        )
    );
    assert_eq!(k["mangled"], "_Z6vecAddPKfS0_Pfi");
    let k = kernel_entry(p, RELU, "cudaLaunchKernel_ptsz");
    assert_eq!(
        (k["calls"].as_u64(), &k["grid"]),
        (Some(2), &serde_json::json!([128, 2, 1]))
    );
    // __cudaLaunchKernel tail-jumps into cudaLaunchKernel: counted there, once.
    let k = kernel_entry(p, GEMM, "cudaLaunchKernel");
    assert_eq!(
        (k["calls"].as_u64(), &k["block"], k["shared_bytes"].as_u64()),
        (Some(4), &serde_json::json!([16, 16, 1]), Some(4096))
    );
    let k = kernel_entry(p, REDUCE, "cudaLaunchKernelExC");
    assert_eq!(
        (k["calls"].as_u64(), k["shared_bytes"].as_u64()),
        (Some(5), Some(1024))
    );
    assert_eq!(
        kernel_entry(p, VEC_ADD, "cudaLaunchKernelExC_ptsz")["calls"],
        6
    );
    assert_eq!(
        kernel_entry(p, VEC_ADD, "cudaLaunchCooperativeKernel")["calls"],
        7
    );
    // Never the driver layer again for the same launches.
    for drv in [
        "cuLaunchKernel",
        "cuLaunchKernel_ptsz",
        "cuLaunchKernelEx",
        "cuLaunchKernelEx_ptsz",
        "cuLaunchCooperativeKernel",
    ] {
        assert_eq!(api_calls(p, drv), 0, "{drv} double counted");
    }
    assert_eq!(api_calls(p, "cudaLaunchKernel"), 3 + 4);
    w.exit();
}

#[test]
fn driver_launches_every_variant_with_names() {
    let d = Daemon::all_jobs();
    let mut w = Workload::start();
    w.script(&[
        "drv_launch triton_poi_fused_add_0 3 10 1 1 128 1 1 0 0",
        "drv_launch_ptsz triton_red_fused_sum_1 2 20 1 1 64 1 1 256 1",
        "drv_launch_ex cupy_scale 4 30 2 1 32 2 1 0 0",
        "drv_launch_ex_ptsz cupy_scale 1 30 2 1 32 2 1 0 0",
        "drv_launch_coop triton_poi_fused_add_0 5 1 1 1 32 1 1 0 0",
        "drv_launch_lib lib_saxpy 6 4 1 1 256 1 1 0 0",
        "drv_launch_kfunc lib_saxpy 2 8 1 1 256 1 1 0 0",
    ]);
    let tgid = w.tgid;
    let r = d.stop().report;
    let p = process(&r, tgid);
    assert_eq!(p["launches"], 23);
    assert_eq!(p["unnamed_launches"], 0);
    assert_eq!(
        kernel_entry(p, "triton_poi_fused_add_0", "cuLaunchKernel")["calls"],
        3
    );
    let k = kernel_entry(p, "triton_red_fused_sum_1", "cuLaunchKernel_ptsz");
    assert_eq!(
        (k["calls"].as_u64(), k["shared_bytes"].as_u64()),
        (Some(2), Some(256))
    );
    let k = kernel_entry(p, "cupy_scale", "cuLaunchKernelEx");
    assert_eq!(
        (k["calls"].as_u64(), &k["grid"], &k["block"]),
        (
            Some(4),
            &serde_json::json!([30, 2, 1]),
            &serde_json::json!([32, 2, 1])
        )
    );
    assert_eq!(
        kernel_entry(p, "cupy_scale", "cuLaunchKernelEx_ptsz")["calls"],
        1
    );
    assert_eq!(
        kernel_entry(p, "triton_poi_fused_add_0", "cuLaunchCooperativeKernel")["calls"],
        5
    );
    // CUkernel launched directly (named by cuLibraryGetKernel) and through cuKernelGetFunction
    // (the function inherits the kernel's name).
    let saxpy = "lib_saxpy(float, float const*, float*)";
    let launches: Vec<u64> = kernels(p, saxpy)
        .iter()
        .map(|k| k["calls"].as_u64().unwrap())
        .collect();
    assert_eq!(kernel_calls(p, saxpy), 8, "{launches:?}");
    w.exit();
}

#[test]
fn copies_from_pinned_and_pageable_memory_are_told_apart() {
    let d = Daemon::all_jobs();
    let mut w = Workload::start();
    w.script(&[
        "rt_malloc_host 65536 1",
        "rt_memcpy_pinned h2d 4096 3",
        "rt_memcpy h2d 4096 2",
        "rt_memcpy_pinned d2h 1024 1",
        "rt_memcpy d2h 512 4",
        "rt_memcpy d2d 64 1",
        // Page-locked in place (cudaHostRegister, cuMemHostRegister): pinned until released.
        "host_register rt 8192",
        "memcpy_registered h2d 4096 3",
        "host_unregister rt",
        "memcpy_registered h2d 4096 1",
        "host_register drv 4096",
        "memcpy_registered d2h 1024 2",
        "memcpy_registered d2h 2048 1",
        "host_unregister drv",
        "rt_launch gemm 3 1 1 1 32 1 1 0 0",
        "rt_launch gemm 2 1 1 1 32 1 1 0 1",
    ]);
    let tgid = w.tgid;
    let r = d.stop().report;
    let p = process(&r, tgid);
    // Per stream: the synchronous copies and 3 launches on the default stream, 2 launches on
    // the workload's stream 1 (its handle is the fake runtime's).
    let streams: Vec<(String, u64, u64, u64)> = p["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["stream"].as_str().unwrap().to_owned(),
                s["launches"].as_u64().unwrap(),
                s["copies"].as_u64().unwrap(),
                s["copy_bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(streams.len(), 2, "{streams:?}");
    assert_eq!(
        streams[0],
        (
            "default".to_owned(),
            3,
            11 + 7,
            5 * 4096 + 1024 + 4 * 512 + 64 + 4 * 4096 + 2 * 1024 + 2048
        )
    );
    assert!(streams[1].0.starts_with("0x"), "{streams:?}");
    assert_eq!((streams[1].1, streams[1].2, streams[1].3), (2, 0, 0));
    let c = |dir: &str| {
        let e = copies(p, dir).unwrap_or_else(|| panic!("no {dir} copies"));
        (
            e["calls"].as_u64().unwrap(),
            e["pageable_calls"].as_u64().unwrap(),
            e["pageable_bytes"].as_u64().unwrap(),
        )
    };
    // The host side of the plain copies is the workload's static scratch buffer: pageable.
    // The registered buffer is pinned while registered, pageable after.
    assert_eq!(c("h2d"), (5 + 4, 2 + 1, 8192 + 4096));
    assert_eq!(c("d2h"), (5 + 3, 4, 2048));
    assert_eq!(c("d2d"), (1, 0, 0), "no host side");
    // Registering is not allocating: the one cudaMallocHost is the only allocation.
    assert_eq!(p["allocations"]["calls"], 1, "{}", p["allocations"]);
    for (api, n) in [
        ("cudaHostRegister", 1),
        ("cudaHostUnregister", 1),
        ("cuMemHostRegister_v2", 1),
        ("cuMemHostUnregister", 1),
    ] {
        assert_eq!(api_calls(p, api), n, "{api}");
    }
}

#[test]
fn copies_in_every_direction_sync_and_async() {
    let d = Daemon::all_jobs();
    let mut w = Workload::start();
    w.script(&[
        "rt_memcpy h2d 4096 3",
        "rt_memcpy d2h 1000 2",
        "rt_memcpy d2d 64 1",
        "rt_memcpy h2h 10 4",
        "rt_memcpy default 7 1",
        "rt_memcpy_ptds h2d 5 1",
        "rt_memcpy_async h2d 100 2 1",
        "rt_memcpy_async_ptsz d2h 300 1 2",
        "drv_memcpy h2d 11 1",
        "drv_memcpy_ptds d2d 13 2",
        "drv_memcpy_async d2h 17 3 1",
        "drv_memcpy_async_ptsz h2d 19 1 0",
        "rt_memcpy2d h2d 16 8 2",
        "drv_memcpy2d d2h 32 4 1",
        "rt_memcpy_peer 1000 1",
        "drv_memcpy_peer 2000 2",
    ]);
    let tgid = w.tgid;
    let r = d.stop().report;
    let p = process(&r, tgid);
    let c = |dir: &str| {
        let e = copies(p, dir).unwrap_or_else(|| panic!("no {dir} copies"));
        (
            e["calls"].as_u64().unwrap(),
            e["bytes"].as_u64().unwrap(),
            e["async_calls"].as_u64().unwrap(),
        )
    };
    // h2d: 3×4096 + 5 + 2×100 + 11 + 19 + 2×(16×8)
    assert_eq!(
        c("h2d"),
        (
            3 + 1 + 2 + 1 + 1 + 2,
            3 * 4096 + 5 + 200 + 11 + 19 + 256,
            2 + 1
        )
    );
    // By size: the three 4 KiB copies in the second bucket (< 64 KiB), the rest under 4 KiB.
    let sizes: Vec<u64> = copies(p, "h2d").unwrap()["size_histogram"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(sizes, [7, 3, 0, 0, 0, 0]);
    // d2h: 2×1000 + 300 + 3×17 + 32×4
    assert_eq!(c("d2h"), (2 + 1 + 3 + 1, 2000 + 300 + 51 + 128, 1 + 3));
    assert_eq!(c("d2d"), (1 + 2, 64 + 26, 0));
    assert_eq!(c("h2h"), (4, 40, 0));
    assert_eq!(c("default"), (1, 7, 0));
    assert_eq!(c("peer"), (1 + 2, 1000 + 4000, 0));
    let blocking = copies(p, "h2d").unwrap()["blocked_ns"].as_u64().unwrap();
    assert!(blocking > 0, "blocking copies carry CPU-blocked time");
    assert_eq!(api_calls(p, "cudaMemcpy"), 3 + 2 + 1 + 4 + 1);
    assert_eq!(api_calls(p, "cudaMemcpy_ptds"), 1);
    assert_eq!(api_calls(p, "cudaMemcpyAsync"), 2);
    assert_eq!(api_calls(p, "cudaMemcpyAsync_ptsz"), 1);
    assert_eq!(api_calls(p, "cuMemcpyHtoD_v2"), 1);
    assert_eq!(api_calls(p, "cuMemcpyDtoD_v2_ptds"), 2);
    assert_eq!(api_calls(p, "cuMemcpyDtoHAsync_v2"), 3);
    assert_eq!(api_calls(p, "cuMemcpyHtoDAsync_v2_ptsz"), 1);
    assert_eq!(api_calls(p, "cudaMemcpy2D"), 2);
    assert_eq!(api_calls(p, "cuMemcpy2D_v2"), 1);
    assert_eq!(api_calls(p, "cudaMemcpyPeer"), 1);
    assert_eq!(api_calls(p, "cuMemcpyPeer"), 2);
    // The runtime's own driver calls are not counted again.
    assert_eq!(api_calls(p, "cuMemcpyDtoH_v2"), 0);
    assert_eq!(api_calls(p, "cuMemcpy"), 0);
    w.exit();
}

#[test]
fn syncs_carry_blocked_time() {
    let d = Daemon::all_jobs();
    let mut w = Workload::start();
    w.script(&[
        "set_delay_us 20000",
        "rt_sync_device 3",
        "drv_sync_stream 1 2",
        "rt_sync_stream 2 1",
        "set_delay_us 0",
        "rt_stream_wait_event 1 4",
        "drv_stream_wait_event 1 1",
    ]);
    let tgid = w.tgid;
    let r = d.stop().report;
    let p = process(&r, tgid);
    let a = api(p, "cudaDeviceSynchronize").expect("cudaDeviceSynchronize");
    assert_eq!(a["calls"], 3);
    let blocked = a["blocked_ns"].as_u64().unwrap();
    // The fake driver slept 20 ms per call; allow scheduling noise above, never below.
    assert!(
        (60_000_000..60_000_000 + 200_000_000).contains(&blocked),
        "blocked {blocked} ns"
    );
    assert!(a["p50_ns"].as_u64().unwrap() >= 19_000_000, "{a}");
    assert_eq!(api_calls(p, "cuStreamSynchronize"), 2);
    assert!(
        api(p, "cuStreamSynchronize").unwrap()["blocked_ns"]
            .as_u64()
            .unwrap()
            >= 40_000_000
    );
    assert_eq!(api_calls(p, "cudaStreamSynchronize"), 1);
    assert_eq!(api_calls(p, "cudaStreamWaitEvent"), 4);
    assert_eq!(api_calls(p, "cuStreamWaitEvent"), 1);
    assert_eq!(
        api_calls(p, "cuCtxSynchronize"),
        0,
        "runtime syncs counted twice"
    );
    w.exit();
}

#[test]
fn allocations_and_frees() {
    let d = Daemon::all_jobs();
    let mut w = Workload::start();
    w.script(&[
        "rt_malloc 1048576 4",
        "drv_malloc 4096 2",
        "rt_malloc_host 8192 1",
        "rt_malloc_managed 512 1",
        "rt_free_all",
        "drv_free_all",
        "rt_malloc 0 1",
    ]);
    let tgid = w.tgid;
    let r = d.stop().report;
    let p = process(&r, tgid);
    let a = &p["allocations"];
    assert_eq!(a["calls"], 4 + 2 + 1 + 1 + 1);
    assert_eq!(a["failed"], 1, "cudaMalloc(0) fails in the fake driver");
    assert_eq!(a["bytes"], 4 * 1048576 + 2 * 4096 + 8192 + 512);
    assert_eq!(a["frees"], 4 + 2);
    assert_eq!(a["peak_bytes"], 4 * 1048576 + 2 * 4096 + 8192 + 512);
    assert_eq!(a["live_bytes"], 8192 + 512);
    assert_eq!(api_calls(p, "cudaMalloc"), 5);
    assert_eq!(api_calls(p, "cuMemAlloc_v2"), 2);
    assert_eq!(api_calls(p, "cudaFree"), 4);
    assert_eq!(api_calls(p, "cuMemFree_v2"), 2);
    assert_eq!(api_calls(p, "cudaMallocHost"), 1);
    assert_eq!(api_calls(p, "cudaMallocManaged"), 1);
    w.exit();
}

#[test]
fn two_processes_are_kept_apart() {
    let d = Daemon::all_jobs();
    let mut a = Workload::start();
    let mut b = Workload::spawn("workload_drv", &[]);
    a.script(&[
        "rt_launch vecAdd 11 1 1 1 32 1 1 0 0",
        "rt_memcpy h2d 100 3",
    ]);
    b.script(&[
        "drv_launch cupy_scale 5 1 1 1 32 1 1 0 0",
        "drv_memcpy h2d 7 2",
    ]);
    let (ta, tb) = (a.tgid, b.tgid);
    let r = d.stop().report;
    let pa = process(&r, ta);
    let pb = process(&r, tb);
    assert_eq!(
        (
            pa["launches"].as_u64(),
            kernel_calls(pa, VEC_ADD),
            kernel_calls(pa, "cupy_scale")
        ),
        (Some(11), 11, 0)
    );
    assert_eq!(
        (
            pb["launches"].as_u64(),
            kernel_calls(pb, "cupy_scale"),
            kernel_calls(pb, VEC_ADD)
        ),
        (Some(5), 5, 0)
    );
    assert_eq!(copies(pa, "h2d").unwrap()["bytes"], 300);
    assert_eq!(copies(pb, "h2d").unwrap()["bytes"], 14);
    assert_eq!(pa["comm"], "workload");
    assert_eq!(pb["comm"], "workload_drv");
    a.exit();
    b.exit();
}

#[test]
fn pid_attach_to_a_running_process_names_its_kernels() {
    // Both start (and register their kernels) before the daemon exists.
    let mut target = Workload::start();
    let mut other = Workload::start();
    target.cmd("rt_launch relu 1 1 1 1 32 1 1 0 0");
    let pid = target.tgid.to_string();
    let d = Daemon::start(&["--pid", &pid]);
    target.script(&["rt_launch vecAdd 9 4 1 1 64 1 1 0 0", "drv_memcpy h2d 1 1"]);
    other.script(&["rt_launch vecAdd 100 4 1 1 64 1 1 0 0"]);
    let (tt, to) = (target.tgid, other.tgid);
    let r = d.stop().report;
    assert!(!has_process(&r, to), "a process not asked for was captured");
    let p = process(&r, tt);
    // The launches before attach are not seen; the name comes from the host stub's symbol.
    assert_eq!(p["launches"], 9);
    assert_eq!(kernel_calls(p, VEC_ADD), 9);
    assert_eq!(p["unnamed_launches"], 0);
    assert_eq!(api_calls(p, "cuMemcpyHtoD_v2"), 1);
    target.exit();
    other.exit();
}

#[test]
fn process_exiting_mid_run_keeps_its_data() {
    let d = Daemon::all_jobs();
    let mut w = Workload::start();
    w.script(&["rt_launch gemm 2 1 1 1 32 1 1 0 0", "rt_memcpy d2h 50 1"]);
    let tgid = w.tgid;
    w.exit();
    let mut still = Workload::start();
    still.cmd("rt_launch relu 1 1 1 1 32 1 1 0 0");
    let r = d.stop().report;
    let p = process(&r, tgid);
    assert_eq!(kernel_calls(p, GEMM), 2);
    assert_eq!(copies(p, "d2h").unwrap()["bytes"], 50);
    assert_eq!(p["exited"], true);
    assert_eq!(process(&r, still.tgid)["exited"], false);
    still.exit();
}

#[test]
fn an_argument_the_probe_cannot_read_is_counted_as_a_probe_fault() {
    let d = Daemon::all_jobs();
    let mut w = Workload::start();
    w.script(&[
        "drv_launch_ex cupy_scale 2 30 2 1 32 2 1 0 0",
        "drv_launch_ex_null cupy_scale 3",
    ]);
    let tgid = w.tgid;
    let f = d.stop();
    // The three launches with no configuration are recorded (the program made them) with the
    // fields the probe could not read left at zero, and counted as faults.
    assert_eq!(f.report["probe_faults"]["user_read"], 3, "{}", f.report);
    assert_eq!(f.report["probe_faults"]["launch_counts_full"], 0);
    let p = process(&f.report, tgid);
    let grids: Vec<(u64, serde_json::Value)> = kernels(p, "cupy_scale")
        .iter()
        .map(|k| (k["calls"].as_u64().unwrap(), k["grid"].clone()))
        .collect();
    assert_eq!(grids.len(), 2, "{grids:?}");
    assert!(
        grids.contains(&(2, serde_json::json!([30, 2, 1]))),
        "{grids:?}"
    );
    assert!(
        grids.contains(&(3, serde_json::json!([0, 0, 0]))),
        "{grids:?}"
    );
    assert!(
        f.stdout.contains(
            "probe faults: user_read 3 (a call's arguments or results unreadable: recorded as 0)"
        ),
        "{}",
        f.stdout
    );
    w.exit();
}

#[test]
fn nothing_lost_and_drops_reported() {
    let d = Daemon::all_jobs();
    let mut w = Workload::start();
    w.cmd("rt_launch vecAdd 20000 1 1 1 32 1 1 0 0");
    let tgid = w.tgid;
    let f = d.stop();
    let p = process(&f.report, tgid);
    assert_eq!(kernel_calls(p, VEC_ADD), 20000);
    for (k, v) in f.report["drops"].as_object().unwrap() {
        assert_eq!(v, 0, "drops of {k}");
    }
    assert!(f.stdout.contains("no records lost"), "{}", f.stdout);
    // Every argument was readable: no fault, and no line about them.
    assert_eq!(f.report["probe_faults"]["user_read"], 0);
    assert!(!f.stdout.contains("probe faults"), "{}", f.stdout);
    w.exit();
}

#[test]
fn cet_runtime_probes_after_endbr64_count_exactly() {
    // The same runtime built with -fcf-protection=full: every export starts with endbr64 and
    // the probe goes on the instruction after it. Counts must not change.
    let cet = fakecuda().join("lib-cet");
    let d = Daemon::start(&[
        "--all-jobs",
        "--no-system-libs",
        "--lib",
        cet.to_str().unwrap(),
    ]);
    let mut w = Workload::spawn("workload", &[("LD_LIBRARY_PATH", cet.to_str().unwrap())]);
    w.script(&[
        "rt_launch vecAdd 5 8 1 1 64 1 1 0 0",
        "rt_memcpy h2d 256 3",
        "rt_malloc 4096 2",
        "rt_free_all",
    ]);
    let tgid = w.tgid;
    let r = d.stop().report;
    let p = process(&r, tgid);
    let maps = std::fs::read_to_string(format!("/proc/{tgid}/maps")).unwrap_or_default();
    assert!(
        maps.is_empty() || maps.contains("lib-cet/libcudart.so.12"),
        "the workload did not load the CET runtime"
    );
    assert_eq!(p["launches"], 5);
    assert_eq!(kernel_calls(p, VEC_ADD), 5);
    assert_eq!(copies(p, "h2d").unwrap()["bytes"], 768);
    assert_eq!(p["allocations"]["calls"], 2);
    assert_eq!(p["allocations"]["frees"], 2);
    assert_eq!(
        api_calls(p, "cuMemcpyHtoD_v2"),
        0,
        "runtime copy counted twice"
    );
    w.exit();
}

#[test]
fn driver_allocation_variants_vmm_and_graphs() {
    let d = Daemon::all_jobs();
    let mut w = Workload::start();
    w.script(&[
        "drv_malloc_async 1000 2 1",
        "drv_free_async_all 1",
        "drv_malloc_pitch 100 10 1",
        "drv_host_alloc 2048 1",
        "drv_vmm 2097152 1",
        "rt_graph_launch 3 0",
        "drv_graph_launch 2 1",
        "drv_graph_launch_ptsz 1 0",
    ]);
    let tgid = w.tgid;
    let r = d.stop().report;
    let p = process(&r, tgid);
    let a = &p["allocations"];
    // pitch: the fake rounds a 100-byte row up to 512; bytes = *pitch × height = 5120
    assert_eq!(a["calls"], 2 + 1 + 1 + 1);
    assert_eq!(a["failed"], 0);
    assert_eq!(a["bytes"], 2000 + 5120 + 2048 + 2097152);
    assert_eq!(a["frees"], 2 + 1 + 1);
    assert_eq!(a["live_bytes"], 5120);
    assert_eq!(a["peak_bytes"], 5120 + 2097152);
    let k = &a["by_kind"];
    assert_eq!(
        (&k["async"]["calls"], &k["async"]["bytes"]),
        (&2.into(), &2000.into())
    );
    assert_eq!(k["pitched"]["bytes"], 5120);
    assert_eq!(k["host_pinned"]["bytes"], 2048);
    assert_eq!(k["vmm"]["bytes"], 2097152);
    for (name, n) in [
        ("cuMemAllocAsync", 2),
        ("cuMemFreeAsync", 2),
        ("cuMemAllocPitch_v2", 1),
        ("cuMemHostAlloc", 1),
        ("cuMemFreeHost", 1),
        ("cuMemCreate", 1),
        ("cuMemMap", 1),
        ("cuMemUnmap", 1),
        ("cuMemRelease", 1),
        ("cudaGraphLaunch", 3),
        ("cuGraphLaunch", 2),
        ("cuGraphLaunch_ptsz", 1),
    ] {
        assert_eq!(api_calls(p, name), n, "{name}");
    }
    // Graph launches are counted as graph launches, never as kernel launches.
    assert_eq!(p["graphs"]["launches"], 3 + 2 + 1);
    assert_eq!(p["launches"], 0);
    w.exit();
}

#[test]
fn late_load_of_a_new_library_file_found_by_the_mmap_watcher() {
    // A runtime in a pip-wheel layout, a file gpuprofd was not told about, dlopen'ed after the
    // daemon started. The /proc rescan is off: only the in-kernel mmap watcher can find it.
    let wheel = TempDir::new("wheel");
    let lib_dir = wheel.path().join("site-packages/nvidia/cuda_runtime/lib");
    std::fs::create_dir_all(&lib_dir).unwrap();
    std::fs::copy(
        fakecuda().join("lib/libcudart.so.12"),
        lib_dir.join("libcudart.so.12"),
    )
    .unwrap();
    let mut d = Daemon::watcher_only();
    let mut w = Workload::spawn("workload_late", &[]);
    w.cmd(&format!("dlopen_runtime {}", lib_dir.display()));
    let wheel_lib = lib_dir.join("libcudart.so.12");
    d.stderr.wait_for("the wheel's runtime attached", |l| {
        l.contains("attached") && l.contains("libcudart.so.12") && l.contains("site-packages")
    });
    w.cmd("rt_launch vecAdd 4 2 1 1 64 1 1 0 0");
    let tgid = w.tgid;
    let r = d.stop().report;
    let p = process(&r, tgid);
    assert_eq!(kernel_calls(p, VEC_ADD), 4);
    assert_eq!(
        api_calls(p, "cudaLaunchKernel"),
        4,
        "runtime layer not attached"
    );
    assert_eq!(api_calls(p, "cuLaunchKernel"), 0);
    assert!(wheel_lib.exists());
    w.exit();
}

#[test]
fn a_library_replaced_then_deleted_while_attached() {
    // A driver or toolkit upgrade: the runtime file is replaced (a new file renamed over it)
    // while a process maps it, a new process loads the new file, then the file is deleted. The
    // old process keeps its (now deleted) inode and its probes; the new file is attached as a
    // library of its own; nothing is counted twice or credited to the other process.
    let tmp = TempDir::new("upgrade");
    let dir = tmp.path().join("upgrade");
    std::fs::create_dir_all(&dir).unwrap();
    let lib = dir.join("libcudart.so.12");
    std::fs::copy(fakecuda().join("lib/libcudart.so.12"), &lib).unwrap();
    let attached = |l: &str| l.contains("INFO attached") && l.contains("upgrade/libcudart.so.12");
    let mut d = Daemon::watcher_only();
    let mut old = Workload::spawn("workload_late", &[]);
    old.cmd(&format!("dlopen_runtime {}", dir.display()));
    d.stderr.wait_for("the first runtime attached", attached);
    old.cmd("rt_launch vecAdd 3 1 1 1 32 1 1 0 0");

    let staged = dir.join("libcudart.so.12.new");
    std::fs::copy(fakecuda().join("lib-cet/libcudart.so.12"), &staged).unwrap();
    std::fs::rename(&staged, &lib).unwrap();
    old.cmd("rt_launch vecAdd 4 1 1 1 32 1 1 0 0");

    let mut new = Workload::spawn("workload_late", &[]);
    new.cmd(&format!("dlopen_runtime {}", dir.display()));
    d.stderr
        .wait_for("the replacement runtime attached", attached);
    new.cmd("rt_launch relu 5 1 1 1 32 1 1 0 0");

    std::fs::remove_file(&lib).unwrap();
    new.cmd("rt_launch relu 2 1 1 1 32 1 1 0 0");
    old.cmd("rt_launch vecAdd 1 1 1 1 32 1 1 0 0");
    let (o, n) = (old.tgid, new.tgid);
    let r = d.stop().report;
    let (po, pn) = (process(&r, o), process(&r, n));
    assert_eq!((kernel_calls(po, VEC_ADD), kernel_calls(po, RELU)), (8, 0));
    assert_eq!((kernel_calls(pn, VEC_ADD), kernel_calls(pn, RELU)), (0, 7));
    assert_eq!(api_calls(po, "cudaLaunchKernel"), 8);
    assert_eq!(api_calls(pn, "cudaLaunchKernel"), 7);
    assert_eq!(
        api_calls(po, "cuLaunchKernel") + api_calls(pn, "cuLaunchKernel"),
        0
    );
    old.exit();
    new.exit();
}

#[test]
fn library_seen_only_inside_a_private_mount_namespace() {
    // The runtime is bind-mounted over an empty directory inside the workload's own mount
    // namespace: the path in its /proc/PID/maps does not exist (or is empty) for the daemon,
    // which must open the file through /proc/PID/root.
    let tmp = TempDir::new("mntns");
    let src = tmp.path().join("ns-libs");
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    std::fs::copy(
        fakecuda().join("lib/libcudart.so.12"),
        src.join("libcudart.so.12"),
    )
    .unwrap();
    let mut d = Daemon::watcher_only();
    let mut cmd = std::process::Command::new("unshare");
    cmd.args(["-m", "--propagation", "private", "sh", "-c"])
        .arg(format!(
            "mount --bind '{}' '{}' && exec '{}'",
            src.display(),
            mnt.display(),
            fakecuda().join("bin/workload_late").display()
        ));
    let mut w = Workload::spawn_command(cmd);
    assert!(
        std::fs::read_dir(&mnt).unwrap().next().is_none(),
        "the bind mount leaked into the host namespace"
    );
    w.cmd(&format!("dlopen_runtime {}", mnt.display()));
    d.stderr.wait_for("the namespaced runtime attached", |l| {
        l.contains("attached") && l.contains("libcudart.so.12") && l.contains("/mnt")
    });
    w.cmd("rt_launch relu 3 1 1 1 32 1 1 0 0");
    let tgid = w.tgid;
    let r = d.stop().report;
    let p = process(&r, tgid);
    assert_eq!(kernel_calls(p, RELU), 3);
    assert_eq!(api_calls(p, "cudaLaunchKernel"), 3);
    w.exit();
}

#[test]
fn runtime_linked_statically_into_the_executable() {
    // nvcc links libcudart statically by default: the runtime's entry points live in the
    // executable's .symtab, and no libcudart.so is mapped. Found when the process maps the
    // driver (the mmap watcher; the /proc rescan is off).
    let mut d = Daemon::watcher_only();
    let mut w = Workload::spawn("workload_static", &[]);
    d.stderr.wait_for("the static runtime attached", |l| {
        l.contains("attached") && l.contains("static libcudart in workload_static")
    });
    w.script(&["rt_launch vecAdd 5 4 1 1 64 1 1 0 0", "rt_memcpy h2d 128 2"]);
    let tgid = w.tgid;
    let r = d.stop().report;
    let p = process(&r, tgid);
    assert_eq!(kernel_calls(p, VEC_ADD), 5);
    assert_eq!(api_calls(p, "cudaLaunchKernel"), 5);
    assert_eq!(api_calls(p, "cudaMemcpy"), 2);
    assert_eq!(api_calls(p, "cuLaunchKernel"), 0, "counted twice");
    assert_eq!(api_calls(p, "cuMemcpyHtoD_v2"), 0, "counted twice");
    assert_eq!(copies(p, "h2d").unwrap()["bytes"], 256);
    w.exit();
}

#[test]
fn a_process_that_execs_is_split_at_each_program_and_nothing_follows_it_away_from_cuda() {
    // A launcher that used CUDA hands its pid to another CUDA program (`exec`), which hands it
    // to a program without CUDA. Each program's calls are its own — its name, its kernels —
    // and nothing is recorded after the last exec. (The pauses let the daemon read each
    // program's name while it runs; read too late, it is reported as `<before exec>`, never
    // as the next program's: see the model's unit test.)
    let dir = TempDir::new("exec");
    let trainer = dir.path().join("trainer");
    std::os::unix::fs::symlink(fakecuda().join("bin/workload"), &trainer).unwrap();
    let d = Daemon::all_jobs();
    let mut w = Workload::start();
    let tgid = w.tgid;
    w.cmd("rt_launch gemm 3 1 1 1 32 1 1 0 0");
    std::thread::sleep(std::time::Duration::from_secs(1));
    w.exec(&trainer.display().to_string(), true);
    w.cmd("rt_launch relu 2 1 1 1 32 1 1 0 0");
    w.cmd("rt_memcpy h2d 4096 1");
    std::thread::sleep(std::time::Duration::from_secs(1));
    w.exec("/bin/sleep 0.2", false);
    let st = w.wait();
    assert!(st.success(), "{st}");
    let r = d.stop().report;
    let procs = r["processes"].as_array().unwrap();
    let summary: Vec<_> = procs
        .iter()
        .map(|p| {
            (
                p["tgid"].as_u64().unwrap(),
                p["comm"].as_str().unwrap(),
                p["launches"].as_u64().unwrap(),
                kernel_calls(p, GEMM),
                kernel_calls(p, RELU),
                p["exited"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (tgid as u64, "workload", 3, 3, 0, true),
            (tgid as u64, "trainer", 2, 0, 2, true)
        ]
    );
    assert!(copies(&procs[0], "h2d").is_none(), "{}", procs[0]);
    let h2d = copies(&procs[1], "h2d").expect("the second program's copy");
    assert_eq!(
        (&h2d["calls"], &h2d["bytes"]),
        (&serde_json::json!(1), &serde_json::json!(4096))
    );
}

#[test]
fn a_reused_tgid_is_reported_as_two_processes() {
    // Force the kernel to hand the ended process's pid to the next one (ns_last_pid), then
    // check the two are kept apart: the first ends with its own counts, marked exited. The
    // daemon is stopped meanwhile, so it reads the first process's records only once its pid
    // already belongs to the second: what procfs shows then must not be taken for the first.
    let d = Daemon::all_jobs();
    d.pause();
    let mut reused = None;
    for _ in 0..20 {
        let mut a = Workload::start();
        a.cmd("rt_launch gemm 2 1 1 1 32 1 1 0 0");
        let pid = a.tgid;
        a.exit();
        // The second process starts at least one clock tick (10 ms) after the first's records.
        std::thread::sleep(std::time::Duration::from_millis(30));
        std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string())
            .expect("write /proc/sys/kernel/ns_last_pid (root)");
        let b = Workload::start();
        if b.tgid == pid {
            reused = Some(b);
            break;
        }
        b.exit(); // another process took the pid first: try again
    }
    let mut b = reused.expect("the kernel never reused a pid in 20 tries");
    d.resume();
    b.cmd("rt_launch relu 5 1 1 1 32 1 1 0 0");
    let tgid = b.tgid;
    let r = d.stop().report;
    let same: Vec<&serde_json::Value> = r["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["tgid"] == tgid)
        .collect();
    assert_eq!(same.len(), 2, "{same:?}");
    assert_eq!(
        (
            &same[0]["exited"],
            kernel_calls(same[0], GEMM),
            kernel_calls(same[0], RELU)
        ),
        (&serde_json::json!(true), 2, 0)
    );
    // Gone before procfs could be read: named by the kernel's end record, nothing borrowed
    // from the process that has its pid now.
    assert_eq!(
        (&same[0]["comm"], &same[0]["cmdline"], &same[0]["job"]),
        (
            &serde_json::json!("workload"),
            &serde_json::json!(""),
            &serde_json::Value::Null
        )
    );
    assert_eq!(
        (
            &same[1]["exited"],
            kernel_calls(same[1], GEMM),
            kernel_calls(same[1], RELU)
        ),
        (&serde_json::json!(false), 0, 5)
    );
    b.exit();
}

#[test]
fn renamed_runtime_found_by_its_soname() {
    // A vendored copy under another file name (SONAME still libcudart.so.12): found by what
    // the file is, not what it is called.
    let tmp = TempDir::new("renamed");
    let renamed = tmp.path().join("libvendored_rt.so.3");
    std::fs::copy(fakecuda().join("lib/libcudart.so.12"), &renamed).unwrap();
    let mut d = Daemon::watcher_only();
    let mut w = Workload::spawn("workload_late", &[]);
    w.cmd(&format!("dlopen_runtime {}", renamed.display()));
    d.stderr.wait_for("the renamed runtime attached", |l| {
        l.contains("attached") && l.contains("libvendored_rt.so.3") && l.contains("runtime")
    });
    w.cmd("rt_launch gemm 7 1 1 1 32 1 1 0 0");
    let tgid = w.tgid;
    let r = d.stop().report;
    let p = process(&r, tgid);
    assert_eq!(kernel_calls(p, GEMM), 7);
    assert_eq!(api_calls(p, "cudaLaunchKernel"), 7);
    w.exit();
}
