use super::*;
use profiler_common::gpu::{BATCH, copykind, state};

fn kernel(name: u32, device: u32, stream: u32, start: u64, dur: u64) -> GpuActivity {
    GpuActivity {
        kind: activity::KERNEL,
        device,
        stream,
        name,
        start_ns: start,
        end_ns: start + dur,
        ..GpuActivity::default()
    }
}

fn copy(kind: u8, dur: u64, bytes: u64) -> GpuActivity {
    GpuActivity {
        kind: activity::MEMCPY,
        copy_kind: kind,
        start_ns: 1_000,
        end_ns: 1_000 + dur,
        bytes,
        ..GpuActivity::default()
    }
}

fn batch(items: &[GpuActivity]) -> GpuActivityBody {
    let mut b = GpuActivityBody {
        n: items.len() as u32,
        _pad: 0,
        items: [GpuActivity::default(); BATCH],
    };
    b.items[..items.len()].copy_from_slice(items);
    b
}

fn name(id: u32, s: &str) -> GpuNameBody {
    GpuNameBody::new(id, s.as_bytes())
}

fn st(s: u32, detail: u64) -> GpuStateBody {
    GpuStateBody {
        state: s,
        _pad: 0,
        detail,
    }
}

#[test]
fn a_process_without_the_library_says_why() {
    let r = KernelTime::default().report();
    assert_eq!(r.basis, "absent");
    assert_eq!(r.unavailable.as_deref(), Some(ABSENT));
    assert_eq!((r.source, r.state, r.kernels), (None, None, 0));
}

#[test]
fn exact_totals_percentiles_and_shares() {
    let mut t = KernelTime::default();
    t.apply_state(&st(state::ENABLED, 130_000));
    t.apply_name(&name(1, "_Z4gemmPf"));
    t.apply_name(&name(2, "_Z4reluPf"));
    // gemm: 100 runs of 10 µs on device 0 stream 7, then 1 of 50 µs on device 1 stream 9.
    for chunk in (0..100u64).collect::<Vec<_>>().chunks(BATCH) {
        let items: Vec<_> = chunk
            .iter()
            .map(|&i| kernel(1, 0, 7, i * 100_000, 10_000))
            .collect();
        t.apply_batch(&batch(&items));
    }
    t.apply_batch(&batch(&[
        kernel(1, 1, 9, 0, 50_000),
        kernel(2, 0, 7, 0, 2_000),
        kernel(2, 0, 7, 0, 4_000),
        copy(copykind::HTOD, 3_000, 1 << 20),
        copy(copykind::HTOD, 1_000, 4096),
        copy(copykind::DTOH, 500, 8),
        GpuActivity {
            kind: activity::MEMSET,
            start_ns: 10,
            end_ns: 710,
            bytes: 256,
            ..GpuActivity::default()
        },
    ]));
    let r = t.report();
    assert_eq!(r.basis, "measured");
    assert_eq!(r.source.as_deref(), Some("cupti"));
    assert_eq!(r.state.as_deref(), Some("enabled"));
    assert_eq!(r.state_detail, Some(130_000));
    assert_eq!(r.unavailable, None);
    assert_eq!(r.records, 101 + 2 + 3 + 1);
    assert_eq!(r.kernels, 103);
    assert_eq!(r.kernel_ns, 100 * 10_000 + 50_000 + 6_000);
    assert_eq!((r.memcpy_ns, r.memset_ns), (4_500, 700));
    assert_eq!((r.memsets, r.memset_bytes), (1, 256));
    assert_eq!(
        r.copies,
        [
            GpuCopyTime {
                kind: "h2d".into(),
                count: 2,
                gpu_ns: 4_000,
                bytes: (1 << 20) + 4096
            },
            GpuCopyTime {
                kind: "d2h".into(),
                count: 1,
                gpu_ns: 500,
                bytes: 8
            }
        ]
    );
    let k = t.kernels();
    let names: Vec<&str> = k.keys().map(String::as_str).collect();
    assert_eq!(names, ["_Z4gemmPf", "_Z4reluPf"]);
    let g = &k["_Z4gemmPf"];
    assert_eq!((g.count, g.total_ns), (101, 1_050_000));
    assert_eq!((g.min_ns, g.max_ns), (10_000, 50_000));
    assert_eq!(g.mean_ns, 1_050_000 / 101);
    // The median and the 99th of 101 (nearest rank) are 10 µs runs: reported as the midpoint
    // of 10 000's bucket [9984, 10112), within 0.79 % (model::hist).
    assert_eq!((g.p50_ns, g.p99_ns), (10_047, 10_047));
    assert_eq!(g.share, 1_050_000.0 / 1_056_000.0);
    assert_eq!(
        g.streams,
        [
            GpuStreamTime {
                device: 0,
                stream: 7,
                count: 100,
                gpu_ns: 1_000_000
            },
            GpuStreamTime {
                device: 1,
                stream: 9,
                count: 1,
                gpu_ns: 50_000
            }
        ]
    );
    let r2 = &k["_Z4reluPf"];
    assert_eq!(
        (r2.count, r2.total_ns, r2.min_ns, r2.max_ns),
        (2, 6_000, 2_000, 4_000)
    );
}

#[test]
fn states_drops_and_bad_records() {
    let mut t = KernelTime::default();
    // Drops before any other state are the state; after one, they only add up.
    t.apply_state(&st(state::DROPPED, 5));
    assert_eq!(t.report().state.as_deref(), Some("dropped"));
    t.apply_state(&st(state::YIELDED, 27));
    t.apply_state(&st(state::DROPPED, 3));
    let r = t.report();
    assert_eq!(r.state.as_deref(), Some("yielded_to_another_cupti_client"));
    assert_eq!(r.dropped, 8);
    assert!(r.unavailable.unwrap().contains("CUPTI result 27"));
    // n above BATCH is clamped; an end before its start is counted, not timed; a kernel
    // whose name never came is listed by id.
    let mut b = batch(&[kernel(9, 0, 1, 0, 100)]);
    b.items[1] = GpuActivity {
        kind: activity::KERNEL,
        name: 9,
        start_ns: 500,
        end_ns: 400,
        ..GpuActivity::default()
    };
    b.n = 2;
    t.apply_batch(&b);
    let r = t.report();
    assert_eq!(
        (r.records, r.bad_times, r.kernels, r.kernel_ns),
        (2, 1, 1, 100)
    );
    assert_eq!(t.kernels()["<kernel id 9>"].count, 1);
    let mut t = KernelTime::default();
    t.apply_state(&st(state::NO_CUPTI, 0));
    assert_eq!(
        t.report().unavailable.as_deref(),
        Some("the injection library found no CUPTI library")
    );
}

#[test]
fn bounded_kernels_and_names() {
    let mut t = KernelTime::default();
    for id in 1..=(MAX_KERNELS as u32 + 10) {
        t.apply_batch(&batch(&[kernel(id, 0, 0, 0, 1)]));
    }
    for id in 1..=(MAX_NAMES as u32 + 3) {
        t.apply_name(&name(id, "_Z1kv"));
    }
    let r = t.report();
    assert_eq!(
        (r.kernels, r.kernel_ns),
        (MAX_KERNELS as u64 + 10, MAX_KERNELS as u64 + 10)
    );
    assert_eq!((r.kernels_cut, r.names_cut), (10, 3));
    // Several ids of one name merge into one kernel.
    let k = t.kernels();
    assert_eq!(k["_Z1kv"].count, MAX_KERNELS as u64);
}

#[test]
fn the_report_says_which_cupti_the_library_uses_and_how_it_found_it() {
    use profiler_common::gpu::found;
    let mut t = KernelTime::default();
    t.apply_name(&name(
        found::PATH_NAME_ID,
        "/opt/venv/lib/python3.12/site-packages/nvidia/cuda_cupti/lib/libcupti.so.12",
    ));
    t.apply_state(&st(state::ENABLED, 28 | found::IN_PROCESS << found::SHIFT));
    let r = t.report();
    assert_eq!(
        (
            r.state_detail,
            r.cupti_found.as_deref(),
            r.cupti_library.as_deref()
        ),
        (
            Some(28),
            Some("in_process"),
            Some("/opt/venv/lib/python3.12/site-packages/nvidia/cuda_cupti/lib/libcupti.so.12")
        )
    );
    // The path is no kernel name.
    assert!(t.kernels().is_empty());
    // A library from before the field: the version alone.
    let mut t = KernelTime::default();
    t.apply_state(&st(state::ENABLED, 28));
    assert_eq!(
        (t.report().state_detail, t.report().cupti_found),
        (Some(28), None)
    );
}
