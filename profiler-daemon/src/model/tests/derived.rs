//! The derived GPU idle as the report carries it (the derivation itself: `model::busy`'s tests).

use super::*;

fn at(mut ev: Event, ts_ns: u64) -> Event {
    match &mut ev {
        Event::Launch(h, _) | Event::Sync(h, _) | Event::Copy(h, _) => h.ts_ns = ts_ns,
        _ => unreachable!(),
    }
    ev
}

fn stream_sync(handle: u64, dur_ns: u64) -> Event {
    let Event::Sync(h, mut s) = sync(STREAM_SYNC, dur_ns, flags::HAS_RETURN) else {
        unreachable!()
    };
    s.handle = handle;
    Event::Sync(h, s)
}

#[test]
fn report_carries_derived_idle_per_process_and_stream() {
    let mut a = agg();
    let p = only(
        &mut a,
        &[
            at(launch(100, LAUNCH_RT, 0xf, 1, 0x10), 1_000),
            at(launch(100, LAUNCH_RT, 0xf, 1, 0x20), 1_500),
            // 0x10 drains at 5_000 (blocked 3_000); 0x20 stays maybe busy.
            at(stream_sync(0x10, 3_000), 2_000),
            // 0x20 drains at 6_000 (blocked 100): the process's GPU is idle from 6_000.
            // (Blocked times below 128 ns are exact in the histogram; above, within 1 %.)
            at(stream_sync(0x20, 100), 5_900),
            at(launch(100, LAUNCH_RT, 0xf, 1, 0x10), 9_000),
        ],
    );
    assert_eq!(
        p["derived_gpu_idle"],
        json!({
            "basis": "derived",
            "unavailable": null,
            "span_ns": 8_000,
            "idle_lower_bound_ns": 3_000,
            "idle_share": 0.375,
            "drains": 2,
            "launch_ahead_p50_ns": 100,
            "launch_ahead_max_ns": 3_000,
        })
    );
    let streams: Vec<_> = p["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["stream"].as_str().unwrap().to_owned(),
                s["derived_idle_ns"].as_u64().unwrap(),
                s["drains"].as_u64().unwrap(),
                s["derived_launch_ahead_max_ns"].as_u64().unwrap(),
            )
        })
        .collect();
    // 0x10: known empty 5_000..9_000; 0x20: from 6_000 to the last record (9_000).
    assert_eq!(
        streams,
        [
            ("0x10".to_owned(), 4_000, 1, 3_000),
            ("0x20".to_owned(), 3_000, 1, 100)
        ]
    );
}

#[test]
fn counted_launches_make_the_derived_idle_unavailable() {
    let mut a = agg();
    let counted = Event::Launches(
        hdr(kind::LAUNCHES, LAUNCH_RT, 100),
        profiler_common::LaunchesBody {
            count: 5,
            ..Default::default()
        },
    );
    let p = only(
        &mut a,
        &[at(launch(100, LAUNCH_RT, 0xf, 1, 0), 10), counted],
    );
    assert_eq!(
        p["derived_gpu_idle"]["unavailable"],
        json!(busy::BLIND_COUNTED)
    );
    assert_eq!(p["derived_gpu_idle"]["idle_lower_bound_ns"], json!(0));
    assert_eq!(p["streams"][0]["derived_idle_ns"], Value::Null);
}

#[test]
fn a_process_without_queue_work_has_no_derived_idle() {
    let mut a = agg();
    let p = only(
        &mut a,
        &[mem(MALLOC, memop::ALLOC, 0x1000, 64, memkind::DEVICE, 0)],
    );
    assert_eq!(p["derived_gpu_idle"], Value::Null);
}

#[test]
fn a_session_counting_launches_or_under_a_duty_cycle_derives_nothing() {
    let events = [
        at(launch(100, LAUNCH_RT, 0xf, 1, 0x10), 1_000),
        at(stream_sync(0x10, 3_000), 2_000),
        at(launch(100, LAUNCH_RT, 0xf, 1, 0x10), 9_000),
    ];
    let mut a = agg();
    a.set_launches_counted();
    let p = only(&mut a, &events);
    assert_eq!(
        p["derived_gpu_idle"]["unavailable"],
        json!(busy::BLIND_COUNTED)
    );
    let mut a = agg();
    a.apply(&Event::Window(
        hdr(kind::WINDOW, 0, 0),
        profiler_common::WindowBody::default(),
    ));
    let p = only(&mut a, &events);
    assert_eq!(
        p["derived_gpu_idle"]["unavailable"],
        json!(busy::BLIND_DUTY)
    );
    assert_eq!(p["streams"][0]["derived_idle_ns"], Value::Null);
}

#[test]
fn a_process_nvml_lists_on_two_gpus_derives_nothing() {
    use crate::nvml::{ProcessSample, Sample};
    let mut a = agg();
    a.apply(&at(launch(100, LAUNCH_RT, 0xf, 1, 0x10), 1_000));
    a.apply(&at(stream_sync(0x10, 3_000), 2_000));
    let on = |device| ProcessSample {
        device,
        pid: 100,
        used_bytes: None,
        sm_util: None,
        mem_util: None,
    };
    a.apply_nvml(&Sample {
        ts_ns: 1,
        devices: vec![],
        processes: vec![on(0), on(1)],
        mig: Default::default(),
        health: None,
        gpm: None,
    });
    let p = only(&mut a, &[]);
    assert_eq!(
        p["derived_gpu_idle"]["unavailable"],
        json!(busy::BLIND_DEVICES)
    );
}
