//! Each call the program made, counted once, whatever the frame shape between the runtime and
//! the driver: the runtime built so that its wrappers tail-jump into the driver (`lib-tail`,
//! whose jumps build.sh checks in the disassembly), where the driver's entry runs on the
//! runtime entry's stack pointer.
//!
//! Run through `cargo xtask test` (as root, `--test-threads=1`).

use gpuprofd_tests::*;

const VEC_ADD: &str = "vecAdd(float const*, float const*, float*, int)";

#[test]
fn a_runtime_that_tail_calls_the_driver_is_counted_once() {
    let tail = fakecuda().join("lib-tail");
    let d = Daemon::start(&all_jobs_args(&tail));
    let mut w = Workload::spawn("workload", &[("LD_LIBRARY_PATH", tail.to_str().unwrap())]);
    w.script(&[
        "rt_memcpy h2d 4096 3",
        "rt_memcpy d2h 1000 2",
        "rt_memcpy_async h2d 100 2 1",
        "rt_memset 4096 3",
        "rt_memset_async 1000 2 1",
        "rt_sync_device 3",
        "rt_sync_stream 2 4",
        "rt_malloc 4096 5",
        "rt_free_all",
        "rt_malloc_host 8192 1",
        "rt_launch vecAdd 4 8 1 1 64 1 1 0 0",
        // The program's own driver calls, on the stack pointers a runtime call just used:
        // counted, at the driver layer.
        "drv_memcpy h2d 11 1",
        "drv_sync_stream 1 2",
        "drv_malloc 64 1",
    ]);
    // The fake driver really ran every call underneath: the runtime's and the program's own.
    assert_eq!(w.count("cuMemcpyHtoD_v2"), 3 + 1);
    assert_eq!(w.count("cuCtxSynchronize"), 3);
    assert_eq!(w.count("cuStreamSynchronize"), 4 + 2);
    assert_eq!(w.count("cuMemAlloc_v2"), 5 + 1);
    assert_eq!(w.count("cuMemsetD8_v2"), 3);
    assert_eq!(w.count("cuMemsetD8Async"), 2);
    let tgid = w.tgid;
    let maps = std::fs::read_to_string(format!("/proc/{tgid}/maps")).unwrap_or_default();
    assert!(
        maps.contains("lib-tail/libcudart.so.12"),
        "the workload did not load the tail-call runtime"
    );
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
    assert_eq!(c("h2d"), (3 + 2 + 1, 3 * 4096 + 2 * 100 + 11, 2));
    assert_eq!(c("d2h"), (2, 2000, 0));
    assert_eq!(c("memset"), (3 + 2, 3 * 4096 + 2 * 1000, 2));
    let mut want: Vec<(String, u64)> = [
        ("cudaFree", 5),
        ("cudaLaunchKernel", 4),
        ("cudaMalloc", 5),
        ("cudaMallocHost", 1),
        ("cudaMemcpy", 3 + 2),
        ("cudaMemcpyAsync", 2),
        ("cudaMemset", 3),
        ("cudaMemsetAsync", 2),
        ("cudaDeviceSynchronize", 3),
        ("cudaStreamSynchronize", 4),
        // The program's own driver calls only: none of the runtime's is counted again.
        ("cuMemAlloc_v2", 1),
        ("cuMemcpyHtoD_v2", 1),
        ("cuStreamSynchronize", 2),
    ]
    .iter()
    .map(|&(a, n)| (a.to_owned(), n))
    .collect();
    want.sort();
    assert_eq!(api_table(p), want);
    let a = &p["allocations"];
    assert_eq!(
        (
            a["calls"].as_u64(),
            a["frees"].as_u64(),
            a["bytes"].as_u64()
        ),
        (Some(5 + 1 + 1), Some(5), Some(5 * 4096 + 8192 + 64))
    );
    assert_eq!(p["launches"], 4);
    assert_eq!(kernel_calls(p, VEC_ADD), 4);
    w.exit();
}
