//! Step detection on captures whose step structure is known.

use super::*;
use crate::api::Layer;
use crate::store::tests::{Tmp, header};
use crate::store::{Frame, Writer};
use profiler_common::decode::encode;
use profiler_common::{CopyBody, Header, LaunchBody, MemBody, Record, SyncBody, dir, kind};

const LAUNCH: u32 = 0;
const STREAM_SYNC: u32 = 1;
const DEVICE_SYNC: u32 = 2;
const MEMCPY: u32 = 3;
const MALLOC: u32 = 4;

fn hdr(kind: u32, api: u32, tgid: u32, ts_ns: u64) -> Header {
    Header {
        kind,
        api,
        tgid,
        tid: tgid,
        ts_ns,
    }
}

struct Rec<'a>(&'a mut Writer, u32);

impl Rec<'_> {
    fn launch(&mut self, ts: u64, func: u64) {
        self.0.record(encode(&Record {
            header: hdr(kind::LAUNCH, LAUNCH, self.1, ts),
            body: LaunchBody {
                func,
                ..Default::default()
            },
        }));
    }
    fn sync(&mut self, api: u32, ts: u64, handle: u64, dur_ns: u64) {
        self.0.record(encode(&Record {
            header: hdr(kind::SYNC, api, self.1, ts),
            body: SyncBody {
                handle,
                dur_ns,
                ret: 0,
                flags: flags::HAS_RETURN,
            },
        }));
    }
    fn copy(&mut self, ts: u64, direction: u32, bytes: u64, dur_ns: u64) {
        self.0.record(encode(&Record {
            header: hdr(kind::COPY, MEMCPY, self.1, ts),
            body: CopyBody {
                bytes,
                direction,
                dur_ns,
                flags: flags::HAS_RETURN,
                ..Default::default()
            },
        }));
    }
    fn malloc(&mut self, ts: u64, ptr: u64, bytes: u64) {
        self.0.record(encode(&Record {
            header: hdr(kind::MEM, MALLOC, self.1, ts),
            body: MemBody {
                ptr,
                bytes,
                dur_ns: 100,
                op: profiler_common::memop::ALLOC,
                mem_kind: profiler_common::memkind::DEVICE,
                flags: flags::HAS_RETURN,
                ..Default::default()
            },
        }));
    }
}

const A: u64 = 0xa0;
const B: u64 = 0xb0;
const MIB: u64 = 1 << 20;

/// pid 100: warm-up, then 5 iterations of [input 200 µs, A×3, B×2, blocking h2d 4 KiB,
/// stream sync] 1 ms apart (the third also allocates 2 MiB), then a short last one (A×1).
/// pid 200: a few launches and two syncs, no loop. pid 300: a sync per iteration, but a
/// different kernel every time.
fn capture(path: &std::path::Path) {
    let f = std::fs::File::create(path).unwrap();
    let mut w = Writer::new(f, path, header()); // t0 = 1_000 ns
    let mut api = ApiTable::new();
    for (n, l) in [
        ("cudaLaunchKernel", Layer::Runtime),
        ("cudaStreamSynchronize", Layer::Runtime),
        ("cudaDeviceSynchronize", Layer::Runtime),
        ("cudaMemcpy", Layer::Runtime),
        ("cudaMalloc", Layer::Runtime),
    ] {
        api.intern(n, l);
    }
    w.frame(&Frame::Api(api.list().to_vec()));
    let mut p = Rec(&mut w, 100);
    p.malloc(10_000, 0x1000, MIB);
    p.sync(DEVICE_SYNC, 20_000, 0, 500);
    for i in 0..5u64 {
        let base = 100_000 + i * 1_000_000;
        for k in 0..3 {
            p.launch(base + 200_000 + k, A);
        }
        for k in 0..2 {
            p.launch(base + 250_000 + k, B);
        }
        p.copy(base + 300_000, dir::H2D, 4096, 50_000);
        if i == 2 {
            p.malloc(base + 400_000, 0x2000, 2 * MIB);
        }
        p.sync(STREAM_SYNC, base + 900_000, 0x10, 80_000);
    }
    let base = 100_000 + 5 * 1_000_000;
    p.launch(base + 200_000, A);
    p.sync(STREAM_SYNC, base + 500_000, 0x10, 80_000);
    let mut q = Rec(&mut w, 200);
    q.launch(50_000, A);
    q.sync(STREAM_SYNC, 60_000, 0, 10);
    q.launch(70_000, B);
    q.sync(STREAM_SYNC, 80_000, 0, 10);
    let mut r = Rec(&mut w, 300);
    for i in 0..6u64 {
        r.launch(1_000_000 * i, 0x300 + i);
        r.sync(DEVICE_SYNC, 1_000_000 * i + 10, 0, 10);
    }
    w.flush();
}

#[test]
fn a_known_loop_is_found_and_measured() {
    let t = Tmp::new("steps");
    capture(&t.0);
    let found = find(&t.0, header().started_at_monotonic_ns).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    let p = &found[0];
    assert_eq!((p.tgid, p.generation), (100, 0));
    assert_eq!(p.boundary, "cudaStreamSynchronize 0x10");
    // Iteration 0 and the warm-up before it are not a step; iterations 1..4 are, then the
    // short last one (irregular).
    let step = |i: u64, live: u64, blocked: u64| Step {
        start_ns: 100_000 + (i - 1) * 1_000_000 + 980_000 - 1_000,
        wall_ns: 1_000_000,
        launches: 5,
        blocked_ns: blocked,
        copy_bytes: 4096,
        first_enqueue_ns: 220_000,
        live_bytes: live,
        regular: true,
        // The syncs wait on 0x10, which got no work; the launches and copies went to the
        // default stream, never drained after the warm-up: nothing is known idle.
        derived_gpu_idle_ns: Some(0),
        derived_launch_ahead_ns: None,
        gpu_ns: None,
        gpu_busy_ns: None,
        gpu_comm_ns: None,
        gpu_comm_exposed_ns: None,
    };
    let last = Step {
        start_ns: 100_000 + 4 * 1_000_000 + 980_000 - 1_000,
        wall_ns: 600_000,
        launches: 1,
        blocked_ns: 80_000,
        copy_bytes: 0,
        first_enqueue_ns: 220_000,
        live_bytes: 3 * MIB,
        regular: false,
        derived_gpu_idle_ns: Some(0),
        derived_launch_ahead_ns: None,
        gpu_ns: None,
        gpu_busy_ns: None,
        gpu_comm_ns: None,
        gpu_comm_exposed_ns: None,
    };
    assert_eq!(
        p.steps,
        vec![
            step(1, MIB, 130_000),
            step(2, 3 * MIB, 130_100),
            step(3, 3 * MIB, 130_000),
            step(4, 3 * MIB, 130_000),
            last
        ]
    );
    assert_eq!(p.regular().count(), 4);
}

#[test]
fn quantiles_by_nearest_rank() {
    assert_eq!(quantile(vec![], 0.5), 0);
    assert_eq!(quantile(vec![5, 1, 3], 0.5), 3);
    assert_eq!(quantile(vec![4, 1, 3, 2], 0.5), 2);
    assert_eq!(quantile(vec![4, 1, 3, 2], 0.9), 4);
    assert_eq!(quantile(vec![7], 0.0), 7);
}

#[test]
fn steps_fed_from_the_replay_pass_are_the_steps_found_alone() {
    let t = Tmp::new("steps-one-pass");
    capture(&t.0);
    let alone = find(&t.0, header().started_at_monotonic_ns).unwrap();
    // As `gpuprofd report` does: the first pass rides along with the replay.
    let mut search = StepSearch::default();
    let replay = crate::store::replay_visiting(&t.0, |_, g, ev| search.first(g, ev)).unwrap();
    assert!(search.chosen(replay.header.started_at_monotonic_ns));
    read(&t.0, |api, g, ev| search.second(api, g, ev)).unwrap();
    assert_eq!(search.steps(), alone);
    assert_eq!(alone.len(), 1);
}

/// pid 400: a sync of 0x10 (no work on it: the step boundary, seen first), then 4 iterations
/// 1 ms apart of [launch A on the default stream at +200 µs, device sync at +500 µs blocking
/// 100 µs, sync of 0x10 at +900 µs]. The device sync's idle gap (+600 µs to the next
/// iteration's +200 µs) straddles the boundary at +900 µs.
fn drained_capture(path: &std::path::Path) {
    let f = std::fs::File::create(path).unwrap();
    let mut w = Writer::new(f, path, header()); // t0 = 1_000 ns
    let mut api = ApiTable::new();
    for (n, l) in [
        ("cudaLaunchKernel", Layer::Runtime),
        ("cudaStreamSynchronize", Layer::Runtime),
        ("cudaDeviceSynchronize", Layer::Runtime),
    ] {
        api.intern(n, l);
    }
    w.frame(&Frame::Api(api.list().to_vec()));
    let mut p = Rec(&mut w, 400);
    p.sync(STREAM_SYNC, 10_000, 0x10, 0);
    for i in 0..5u64 {
        let base = 100_000 + i * 1_000_000;
        p.launch(base + 200_000, A);
        p.sync(DEVICE_SYNC, base + 500_000, 0, 100_000);
        p.sync(STREAM_SYNC, base + 900_000, 0x10, 0);
    }
    w.flush();
}

#[test]
fn derived_gpu_idle_is_split_at_the_step_edges() {
    let t = Tmp::new("steps-derived");
    drained_capture(&t.0);
    let found = find(&t.0, header().started_at_monotonic_ns).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].boundary, "cudaStreamSynchronize 0x10");
    let got: Vec<_> = found[0]
        .steps
        .iter()
        .map(|s| {
            (
                s.wall_ns,
                s.derived_gpu_idle_ns,
                s.derived_launch_ahead_ns,
                s.regular,
            )
        })
        .collect();
    // Each step: 300 µs known idle from its start to its launch, 300 µs from the device
    // sync's return to its end; the device sync found work queued and blocked 100 µs. The
    // first step starts at the first sync of 0x10 (10 µs): known idle from there (nothing
    // was enqueued yet) to its launch at 300 µs.
    let step = (1_000_000, Some(600_000), Some(100_000), true);
    let first = (990_000, Some(290_000 + 300_000), Some(100_000), true);
    assert_eq!(got, [first, step, step, step, step]);
}

/// Measured GPU time per step: pid 100 launches A once per iteration (5 iterations, a stream
/// sync closing each); the injection library's batch for iteration i's launch (its launch call
/// and a kernel of (i + 1) µs) arrives after the sync, in the next step's time: each kernel
/// still counts in the step that launched it. Without the thread map, `null`.
#[test]
fn each_step_gets_the_measured_gpu_time_of_the_kernels_it_launched() {
    use crate::model::gpu_join::Tids;
    use profiler_common::gpu::{BATCH, GpuActivity, GpuActivityBody, activity};
    let t = Tmp::new("steps-gpu");
    let f = std::fs::File::create(&t.0).unwrap();
    let mut w = Writer::new(f, &t.0, header());
    let mut api = ApiTable::new();
    for (n, l) in [
        ("cudaLaunchKernel", Layer::Runtime),
        ("cudaStreamSynchronize", Layer::Runtime),
    ] {
        api.intern(n, l);
    }
    w.frame(&Frame::Api(api.list().to_vec()));
    for i in 0..5u64 {
        let base = 100_000 + i * 1_000_000;
        let mut p = Rec(&mut w, 100);
        p.launch(base + 200_000, A);
        p.sync(STREAM_SYNC, base + 900_000, 0x10, 80_000);
        let mut items = [GpuActivity::default(); BATCH];
        items[0] = GpuActivity {
            kind: activity::KERNEL,
            correlation: i as u32 + 1,
            start_ns: base + 300_000,
            end_ns: base + 300_000 + (i + 1) * 1_000,
            ..GpuActivity::default()
        };
        items[1] = GpuActivity {
            kind: activity::API,
            name: 307,
            correlation: i as u32 + 1,
            start_ns: base + 200_010,
            end_ns: base + 200_500,
            bytes: 100,
            ..GpuActivity::default()
        };
        // A copy on another stream overlapping the kernel's last half microsecond and running
        // half a microsecond longer: busy time counts the overlap once.
        items[2] = GpuActivity {
            kind: activity::MEMCPY,
            start_ns: base + 300_000 + (i + 1) * 1_000 - 500,
            end_ns: base + 300_000 + (i + 1) * 1_000 + 500,
            ..GpuActivity::default()
        };
        w.record(encode(&Record {
            header: hdr(kind::GPU_ACTIVITY, LAUNCH, 100, base + 990_000),
            body: GpuActivityBody {
                n: 3,
                _pad: 0,
                items,
            },
        }));
    }
    w.flush();
    let run = |tids: Option<Tids>| {
        let mut s = StepSearch::default();
        if let Some(t) = tids {
            s.set_tids(HashMap::from([((100, 0), t)]));
        }
        read(&t.0, |_, g, ev| s.first(g, ev)).unwrap();
        assert!(s.chosen(header().started_at_monotonic_ns));
        read(&t.0, |api, g, ev| s.second(api, g, ev)).unwrap();
        let found = s.steps();
        let gpu = found[0].steps.iter().map(|s| s.gpu_ns).collect::<Vec<_>>();
        let busy = found[0].steps.iter().map(|s| s.gpu_busy_ns);
        (gpu, busy.collect::<Vec<_>>())
    };
    // Each step's window holds the next iteration's kernel and copy; busy time needs no join.
    let busy = [Some(2_500), Some(3_500), Some(4_500), Some(5_500)];
    assert_eq!(
        run(Some(Tids::Same)),
        (
            vec![Some(2_000), Some(3_000), Some(4_000), Some(5_000)],
            busy.to_vec()
        )
    );
    assert_eq!(run(None), (vec![None, None, None, None], busy.to_vec()));
}
