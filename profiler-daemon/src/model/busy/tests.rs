//! The derivation on scripted record sequences whose true queue states are known.

use super::*;
use profiler_common::{
    CopyBody, GraphBody, Header, LaunchBody, LaunchesBody, MemBody, SyncBody, kind,
};

const S1: u64 = 0x51;
const S2: u64 = 0x52;
const STREAM: Role = Role::StreamSync { per_thread: false };
const OTHER: Role = Role::Other { per_thread: false };

fn h(kind: u32, ts_ns: u64) -> Header {
    Header {
        kind,
        api: 0,
        tgid: 7,
        tid: 7,
        ts_ns,
    }
}

fn launch(d: &mut Derived, stream: u64, t: u64) {
    let l = LaunchBody {
        stream,
        ..Default::default()
    };
    assert_eq!(d.apply(&Event::Launch(h(kind::LAUNCH, t), l), OTHER), None);
}

fn sync(d: &mut Derived, role: Role, handle: u64, t: u64, dur_ns: u64) -> Option<u64> {
    let s = SyncBody {
        handle,
        dur_ns,
        ret: 0,
        flags: flags::HAS_RETURN,
    };
    d.apply(&Event::Sync(h(kind::SYNC, t), s), role)
}

fn copy(d: &mut Derived, direction: u32, fl: u32, t: u64, dur_ns: u64) -> Option<u64> {
    let c = CopyBody {
        bytes: 4096,
        direction,
        dur_ns,
        flags: fl,
        ..Default::default()
    };
    d.apply(&Event::Copy(h(kind::COPY, t), c), OTHER)
}

/// Stream `handle`'s known-empty time up to `t`.
fn lane_idle(d: &Derived, handle: u64, t: u64) -> u64 {
    d.lane(handle).expect("lane").idle_through(t)
}

#[test]
fn one_stream_idle_between_drain_and_next_launch() {
    let mut d = Derived::default();
    launch(&mut d, S1, 0);
    launch(&mut d, S1, 10);
    // Blocks 30: the GPU had ≥ 30 queued at 20; empty from 50.
    assert_eq!(sync(&mut d, STREAM, S1, 20, 30), Some(30));
    assert_eq!(
        d.idle_through(60),
        10,
        "open interval counted to the asking time"
    );
    launch(&mut d, S1, 80);
    // Did not block: the queue had drained already; still a drain (ahead ≥ 0).
    assert_eq!(sync(&mut d, STREAM, S1, 90, 0), Some(0));
    // A second sync of an empty stream shows nothing queued: no launch-ahead.
    assert_eq!(sync(&mut d, STREAM, S1, 95, 2), None);
    launch(&mut d, S1, 100);
    assert_eq!(d.idle_through(1000), 30 + 10);
    assert_eq!(lane_idle(&d, S1, 1000), 40);
    let l = d.lane(S1).unwrap();
    assert_eq!((l.drains, l.ahead_sum_ns, l.ahead_max_ns), (2, 30, 30));
    assert_eq!((d.ahead.count(), d.ahead.max()), (2, 30));
    assert_eq!((d.first_ns, d.last_ns), (Some(0), 100));
}

#[test]
fn work_on_a_second_stream_keeps_the_gpu_maybe_busy() {
    let mut d = Derived::default();
    launch(&mut d, S1, 0);
    launch(&mut d, S2, 5);
    assert_eq!(sync(&mut d, STREAM, S1, 10, 20), Some(20));
    launch(&mut d, S1, 50);
    // S1 was known empty 30..50; S2 never: the process's GPU is not counted idle.
    assert_eq!(lane_idle(&d, S1, 50), 20);
    assert_eq!(d.idle_through(50), 0);
    // A device-wide sync drains both: ahead 40 recorded once for the process, per lane each.
    assert_eq!(sync(&mut d, Role::DeviceSync, 0, 60, 40), Some(40));
    assert_eq!(d.idle_through(100), 0);
    launch(&mut d, S2, 130);
    assert_eq!(d.idle_through(200), 30);
    assert_eq!(lane_idle(&d, S1, 200), 20 + 100);
    assert_eq!(lane_idle(&d, S2, 200), 30);
    assert_eq!(d.lane(S2).unwrap().drains, 1);
    assert_eq!(d.lane(S1).unwrap().drains, 2);
    assert_eq!(d.ahead.count(), 2);
}

#[test]
fn work_enqueued_during_the_wait_is_not_covered() {
    let mut d = Derived::default();
    launch(&mut d, S1, 0);
    // Another thread launches at 20 while the sync (entered at 10) waits: its record comes
    // first (a sync's record is written at its return).
    launch(&mut d, S1, 20);
    assert_eq!(sync(&mut d, STREAM, S1, 10, 40), None);
    assert_eq!(d.idle_through(100), 0);
    assert_eq!(lane_idle(&d, S1, 100), 0);
}

#[test]
fn late_records_do_not_open_or_fake_idle() {
    let mut d = Derived::default();
    launch(&mut d, S1, 0);
    assert_eq!(sync(&mut d, STREAM, S1, 10, 40), Some(40));
    // Arrives late, stamped before the sync began: work it waited for.
    launch(&mut d, S1, 5);
    assert_eq!(d.idle_through(70), 20);
    // Arrives late, stamped during the wait: the queue was not empty at 50 after all.
    launch(&mut d, S1, 30);
    assert_eq!(d.idle_through(1000), 0);
    assert_eq!(lane_idle(&d, S1, 1000), 0);
}

#[test]
fn a_step_boundary_splits_an_idle_gap() {
    let mut d = Derived::default();
    launch(&mut d, S1, 0);
    sync(&mut d, STREAM, S1, 0, 100);
    // A step ends at 130 inside the gap 100..180: 30 before, 50 after.
    let at_boundary = d.idle_through(130);
    launch(&mut d, S1, 180);
    assert_eq!(at_boundary, 30);
    assert_eq!(d.idle_through(500) - at_boundary, 50);
}

#[test]
fn blocking_d2h_copy_drains_its_stream_other_copies_do_not() {
    let mut d = Derived::default();
    launch(&mut d, 0, 0);
    // Blocking h2d (may return before the GPU finishes) and memset: enqueue only.
    assert_eq!(copy(&mut d, dir::H2D, flags::HAS_RETURN, 10, 5), None);
    assert_eq!(copy(&mut d, dir::MEMSET, flags::HAS_RETURN, 20, 5), None);
    // Async d2h: enqueue only.
    assert_eq!(copy(&mut d, dir::D2H, flags::ASYNC, 30, 0), None);
    assert_eq!(d.idle_through(100), 0);
    // Blocking d2h on the legacy default stream: done when it returns (40 + 60).
    assert_eq!(copy(&mut d, dir::D2H, flags::HAS_RETURN, 40, 60), Some(60));
    launch(&mut d, 0, 150);
    assert_eq!(d.idle_through(200), 50);
    assert_eq!(lane_idle(&d, 0, 200), 50);
}

#[test]
fn failed_event_and_per_thread_syncs_drain_nothing() {
    let mut d = Derived::default();
    launch(&mut d, 0, 0);
    launch(&mut d, PER_THREAD, 0);
    let failed = SyncBody {
        handle: 0,
        dur_ns: 9,
        ret: 700,
        flags: flags::HAS_RETURN,
    };
    assert_eq!(
        d.apply(&Event::Sync(h(kind::SYNC, 1), failed), STREAM),
        None
    );
    assert_eq!(sync(&mut d, OTHER, 0xe0, 2, 9), None, "event sync");
    let ptsz = Role::StreamSync { per_thread: true };
    assert_eq!(sync(&mut d, ptsz, 0, 3, 9), None);
    assert_eq!(sync(&mut d, STREAM, PER_THREAD, 4, 9), None);
    assert_eq!(d.idle_through(100), 0);
    // The per-thread variant on a created stream drains it.
    launch(&mut d, S1, 5);
    assert_eq!(sync(&mut d, ptsz, S1, 6, 4), Some(4));
    assert_eq!(lane_idle(&d, S1, 20), 10);
}

#[test]
fn graphs_async_memory_and_gpu_side_waits_enqueue() {
    let mut d = Derived::default();
    sync(&mut d, STREAM, S1, 0, 10);
    assert_eq!(
        d.idle_through(20),
        10,
        "a synced stream with no work is known empty"
    );
    let g = GraphBody {
        graph_exec: 1,
        stream: S1,
    };
    d.apply(&Event::Graph(h(kind::GRAPH, 20), g), OTHER);
    assert_eq!(d.idle_through(100), 10);
    sync(&mut d, STREAM, S1, 100, 0);
    let m = MemBody {
        stream: S1,
        flags: flags::ASYNC,
        ..Default::default()
    };
    d.apply(&Event::Mem(h(kind::MEM, 110), m), OTHER);
    assert_eq!(d.idle_through(200), 20);
    sync(&mut d, STREAM, S1, 200, 0);
    let wait = SyncBody {
        handle: S1,
        flags: flags::GPU_SIDE,
        ..Default::default()
    };
    d.apply(&Event::Sync(h(kind::SYNC, 205), wait), OTHER);
    assert_eq!(d.idle_through(300), 25);
}

#[test]
fn launches_counted_in_the_kernel_blind_the_derivation() {
    let mut d = Derived::default();
    assert_eq!(d.blind, None);
    let l = Event::Launches(h(kind::LAUNCHES, 0), LaunchesBody::default());
    d.apply(&l, OTHER);
    assert_eq!(d.blind, Some(BLIND_COUNTED));
}

#[test]
fn roles_from_symbol_names() {
    assert_eq!(Role::of("cuStreamSynchronize"), STREAM);
    assert_eq!(
        Role::of("cudaStreamSynchronize_ptsz"),
        Role::StreamSync { per_thread: true }
    );
    assert_eq!(Role::of("cuCtxSynchronize"), Role::DeviceSync);
    assert_eq!(Role::of("cudaDeviceSynchronize"), Role::DeviceSync);
    assert_eq!(Role::of("cuEventSynchronize"), OTHER);
    assert_eq!(
        Role::of("cuMemcpyDtoH_v2_ptds"),
        Role::Other { per_thread: true }
    );
    let mut t = ApiTable::new();
    t.intern("cuLaunchKernel", crate::api::Layer::Driver);
    let mut r = Roles::default();
    assert_eq!(r.of(&t, 1), OTHER, "an id the table does not know yet");
    t.intern("cuCtxSynchronize", crate::api::Layer::Driver);
    assert_eq!(r.of(&t, 1), Role::DeviceSync);
    assert_eq!(r.of(&t, 0), OTHER);
}
