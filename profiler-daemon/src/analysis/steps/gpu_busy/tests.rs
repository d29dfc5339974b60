//! The unions on scripted intervals.

use super::*;

fn rec(kind: u8, start: u64, end: u64) -> GpuActivity {
    GpuActivity {
        kind,
        start_ns: start,
        end_ns: end,
        ..GpuActivity::default()
    }
}

fn kernel(name: u32, start: u64, end: u64) -> GpuActivity {
    GpuActivity {
        name,
        ..rec(activity::KERNEL, start, end)
    }
}

fn name(id: u32, s: &str) -> GpuNameBody {
    GpuNameBody::new(id, s.as_bytes())
}

/// The busy times alone.
fn busy(g: GpuBusy) -> Vec<Option<u64>> {
    g.finish().into_iter().map(|b| b.map(|b| b.busy)).collect()
}

#[test]
fn overlapping_streams_count_once_and_work_is_clipped_to_each_window() {
    let mut g = GpuBusy::default();
    g.state(0, state::ENABLED);
    // Step 1 [100, 200): two streams overlap on [120, 150); a copy runs on into step 2.
    g.record(&rec(activity::KERNEL, 110, 150));
    g.record(&rec(activity::KERNEL, 120, 160));
    g.record(&rec(activity::MEMCPY, 190, 230));
    // A launch call's record is CPU time, not GPU work.
    g.record(&rec(activity::API, 100, 200));
    g.step(100, 200);
    // Step 2 [200, 300): the copy's 30 and a memset.
    g.record(&rec(activity::MEMSET, 250, 260));
    g.step(200, 300);
    // Step 3 [300, 400): nothing ran.
    g.step(300, 400);
    assert_eq!(busy(g), [Some(50 + 10), Some(30 + 10), Some(0)]);
}

#[test]
fn records_that_come_after_their_step_closed_still_count() {
    let mut g = GpuBusy::default();
    g.state(0, state::ENABLED);
    let s = LAG_NS; // steps a lag long, so each close folds the one before
    g.step(s, 2 * s); // folds up to s: nothing yet
    // Delivered after its step closed, within the lag.
    g.record(&rec(activity::KERNEL, s + 10, s + 40));
    g.step(2 * s, 3 * s); // folds up to 2s: the first step is final
    // Later than the lag: its part before the fold is cut, the rest is the second step's.
    g.record(&rec(activity::KERNEL, s + 50, 2 * s + 5));
    g.step(3 * s, 4 * s);
    assert_eq!(busy(g), [Some(30), Some(5), Some(0)]);
}

#[test]
fn only_steps_the_library_listened_from_the_start_of_are_measured() {
    let mut g = GpuBusy::default();
    g.step(0, 100); // before any report: not measured
    g.state(150, state::ENABLED);
    g.record(&rec(activity::KERNEL, 160, 170));
    g.step(100, 200); // enabled mid-step: not measured
    g.step(200, 300);
    g.state(350, state::YIELDED);
    g.step(300, 400); // yielded mid-step: its start was measured
    g.step(400, 500);
    assert_eq!(busy(g), [None, None, Some(0), Some(0), None]);
    // With no report at all, from the first record's start.
    let mut g = GpuBusy::default();
    g.record(&rec(activity::KERNEL, 120, 130));
    g.record(&rec(activity::KERNEL, 210, 230));
    g.step(100, 200);
    g.step(200, 300);
    assert_eq!(busy(g), [None, Some(20)]);
}

#[test]
fn a_large_buffer_is_merged_in_place_without_changing_the_sum() {
    let mut g = GpuBusy::default();
    g.state(0, state::ENABLED);
    // Twice the compaction threshold of back-to-back kernels on two streams.
    for i in 0..COMPACT_AT as u64 {
        g.record(&rec(activity::KERNEL, 1000 + i * 10, 1000 + i * 10 + 10));
        g.record(&rec(
            activity::KERNEL,
            1000 + i * 10 + 5,
            1000 + i * 10 + 15,
        ));
    }
    assert!(g.all.pending.len() < COMPACT_AT, "{}", g.all.pending.len());
    let end = 1000 + COMPACT_AT as u64 * 10 + 5;
    g.step(0, end + 100);
    assert_eq!(busy(g), [Some(end - 1000)]);
}

#[test]
fn nccl_kernels_are_communication_and_exposed_where_nothing_else_ran() {
    let mut g = GpuBusy::default();
    g.state(0, state::ENABLED);
    g.name(&name(1, "_Z4gemmPKfS0_Pfiii"));
    g.name(&name(
        2,
        "_Z29ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE",
    ));
    g.name(&name(
        3,
        "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)",
    ));
    // Step [0, 1000): compute [100, 400); an all-reduce [300, 600) overlaps it for 100, so
    // 200 of it is exposed; an all-gather [800, 900) with a copy [850, 870) beside it: 80
    // exposed.
    g.record(&kernel(1, 100, 400));
    g.record(&kernel(2, 300, 600));
    g.record(&kernel(3, 800, 900));
    g.record(&rec(activity::MEMCPY, 850, 870));
    g.step(0, 1000);
    // After the library's next enable, id 2 names a compute kernel: no longer communication.
    g.name(&name(2, "_Z4reluPfi"));
    g.record(&kernel(2, 1100, 1200));
    g.step(1000, 2000);
    assert_eq!(
        g.finish(),
        [
            Some(Busy {
                busy: 300 + 200 + 100,
                comm: 300 + 100,
                comm_exposed: 200 + 80,
            }),
            Some(Busy {
                busy: 100,
                comm: 0,
                comm_exposed: 0,
            }),
        ]
    );
}

#[test]
fn nccl_kernels_are_told_by_their_names() {
    for (n, yes) in [
        (
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            true,
        ),
        (
            "_Z28ncclKernel_Broadcast_RING_LL_Sum_int8_t14ncclWorkElem",
            true,
        ),
        ("ncclDevKernelArgs", false),
        ("_Z4gemmPKfS0_Pfiii", false),
        ("my_nccl_helper", false),
    ] {
        assert_eq!(is_nccl_kernel(n.as_bytes()), yes, "{n}");
    }
}
