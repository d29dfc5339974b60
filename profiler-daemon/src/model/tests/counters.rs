//! Aggregator tests: copies, API durations, allocations, decode errors, process meta, live view.

use super::*;

#[test]
fn copies_per_direction() {
    let r = flags::HAS_RETURN;
    let v = only(
        &mut agg(),
        &[
            copy(MEMCPY, dir::D2H, 4096, r, 50, 0),
            copy(MEMCPY, dir::H2D, 1 << 20, r, 100, 0),
            copy(MEMCPY, dir::H2D, 1 << 20, r, 200, 0),
            copy(MEMCPY, dir::H2D, 10, r, 7, 1), // failed: no bytes, the time still blocked
            copy(MEMCPY_ASYNC, dir::D2H, 512, flags::ASYNC, 0, 0),
            copy(MEMCPY, 42, 8, r, 1, 0), // a direction we do not know
            copy(MEMCPY, dir::PEER, 64, r, 3, 0),
        ],
    );
    assert_eq!(
        v["copies"],
        json!([
            // Sizes: < 4 KiB, < 64 KiB, < 1 MiB, < 16 MiB, < 256 MiB, more (bounds exclusive:
            // 4096 is in the second bucket, 1 MiB in the fourth).
            {"direction": "h2d", "calls": 3, "bytes": 2_097_152, "async_calls": 0, "blocked_ns": 307,
             "pageable_calls": 3, "pageable_bytes": 2_097_152,
             "size_histogram": [1, 0, 0, 2, 0, 0]},
            {"direction": "d2h", "calls": 2, "bytes": 4608, "async_calls": 1, "blocked_ns": 50,
             "pageable_calls": 2, "pageable_bytes": 4608, "size_histogram": [1, 1, 0, 0, 0, 0]},
            {"direction": "peer", "calls": 1, "bytes": 64, "async_calls": 0, "blocked_ns": 3,
             "pageable_calls": 0, "pageable_bytes": 0, "size_histogram": [1, 0, 0, 0, 0, 0]},
            {"direction": "unknown", "calls": 1, "bytes": 8, "async_calls": 0, "blocked_ns": 1,
             "pageable_calls": 0, "pageable_bytes": 0, "size_histogram": [1, 0, 0, 0, 0, 0]},
        ])
    );
    assert_eq!(
        v["api"][0],
        json!({"name": "cudaMemcpy", "calls": 6, "blocked_ns": 361, "p50_ns": 7, "p99_ns": 200, "max_ns": 200})
    );
    assert_eq!(v["api"][1]["name"], "cudaMemcpyAsync");
    assert_eq!(v["api"][1]["blocked_ns"], 0);
}

#[test]
fn memsets_are_a_direction_of_their_own() {
    let r = flags::HAS_RETURN;
    let v = only(
        &mut agg(),
        &[
            copy(MEMSET_ASYNC, dir::MEMSET, 1 << 20, flags::ASYNC, 0, 0),
            copy(MEMCPY, dir::H2D, 100, r, 10, 0),
            copy(MEMSET_ASYNC, dir::MEMSET, 4000, flags::ASYNC, 0, 0),
            copy(MEMSET_ASYNC, dir::MEMSET, 64, r, 25, 0),
            copy(MEMSET_ASYNC, dir::MEMSET, 99, r, 5, 2), // failed: no bytes
        ],
    );
    // After every copy direction; no host side, so never pageable.
    assert_eq!(
        v["copies"],
        json!([
            {"direction": "h2d", "calls": 1, "bytes": 100, "async_calls": 0, "blocked_ns": 10,
             "pageable_calls": 1, "pageable_bytes": 100, "size_histogram": [1, 0, 0, 0, 0, 0]},
            {"direction": "memset", "calls": 4, "bytes": 1_052_640, "async_calls": 2,
             "blocked_ns": 30, "pageable_calls": 0, "pageable_bytes": 0,
             "size_histogram": [3, 0, 0, 1, 0, 0]},
        ])
    );
    // Memory operations: the stream's copy figures count memsets too.
    assert_eq!(
        v["streams"],
        json!([{"stream": "default", "launches": 0, "copies": 5, "copy_bytes": 1_052_740,
               "derived_idle_ns": 0, "drains": 0, "derived_launch_ahead_max_ns": 0}])
    );
    assert_eq!(
        v["api"][0],
        json!({"name": "cudaMemsetAsync", "calls": 4, "blocked_ns": 30, "p50_ns": 5, "p99_ns": 25, "max_ns": 25})
    );
}

#[test]
fn copy_size_buckets_at_their_edges() {
    use crate::model::process::copy_size_bucket;
    let at = [
        0,
        4095,
        4096,
        65_535,
        65_536,
        (1 << 20) - 1,
        1 << 20,
        (16 << 20) - 1,
    ];
    assert_eq!(at.map(copy_size_bucket), [0, 0, 1, 1, 2, 2, 3, 3]);
    let at = [16 << 20, (256 << 20) - 1, 256 << 20, u64::MAX];
    assert_eq!(at.map(copy_size_bucket), [4, 4, 5, 5]);
}

#[test]
fn api_percentiles_and_ordering() {
    let mut events: Vec<Event> = (1..=100u64)
        .map(|us| sync(STREAM_SYNC, us * 1000, flags::HAS_RETURN))
        .collect();
    events.push(sync(WAIT_EVENT, 900, flags::HAS_RETURN | flags::GPU_SIDE));
    events.push(Event::Graph(
        hdr(kind::GRAPH, GRAPH_LAUNCH, 100),
        GraphBody {
            graph_exec: 1,
            stream: 0,
        },
    ));
    events.push(launch(100, LAUNCH_DRV, 0x9, 1, 0));
    let mut a = agg();
    let v = only(&mut a, &events);
    assert_eq!(
        v["api"],
        json!([
            {"name": "cudaStreamSynchronize", "calls": 100, "blocked_ns": 5_050_000, "p50_ns": 49_919, "p99_ns": 98_815, "max_ns": 100_000},
            {"name": "cuLaunchKernel", "calls": 1, "blocked_ns": 0, "p50_ns": 0, "p99_ns": 0, "max_ns": 0},
            {"name": "cuStreamWaitEvent", "calls": 1, "blocked_ns": 900, "p50_ns": 900, "p99_ns": 900, "max_ns": 900},
            {"name": "cudaGraphLaunch", "calls": 1, "blocked_ns": 0, "p50_ns": 0, "p99_ns": 0, "max_ns": 0},
        ])
    );
    assert_eq!(v["graphs"], json!({"launches": 1}));
    // The GPU-side wait is no CPU sync time.
    assert_eq!(a.live_rows(1.0)[0].sync_blocked_ns, 5_050_000);
}

#[test]
fn allocations_live_peak_failed_frees() {
    let v = only(
        &mut agg(),
        &[
            mem(MALLOC, memop::ALLOC, 0x1000, 1 << 20, memkind::DEVICE, 0),
            mem(MALLOC, memop::ALLOC, 0x2000, 1 << 20, memkind::DEVICE, 0),
            mem(MALLOC, memop::ALLOC, 0, 1 << 40, memkind::DEVICE, 2),
            mem(
                MALLOC_HOST,
                memop::ALLOC,
                0x9000,
                4096,
                memkind::HOST_PINNED,
                0,
            ),
            mem(FREE, memop::FREE, 0x1000, 0, 0, 0),
            mem(FREE, memop::FREE, 0x5555, 0, 0, 0),
            mem(
                MEM_CREATE,
                memop::VMM_CREATE,
                0x77,
                2 << 20,
                memkind::VMM,
                0,
            ),
            mem(MEM_RELEASE, memop::VMM_RELEASE, 0x77, 0, 0, 0),
        ],
    );
    let kind = |calls, bytes| json!({"calls": calls, "bytes": bytes});
    assert_eq!(
        v["allocations"],
        json!({"calls": 5, "failed": 1, "bytes": 4_198_400, "frees": 3, "live_bytes": 1_052_672, "peak_bytes": 3_149_824,
               "untracked": 0, "by_kind": {"device": kind(3, 2_097_152), "host_pinned": kind(1, 4096), "managed": kind(0, 0),
               "async": kind(0, 0), "pitched": kind(0, 0), "vmm": kind(1, 2_097_152)}})
    );
    assert_eq!(
        v["api"][0],
        json!({"name": "cudaMalloc", "calls": 3, "blocked_ns": 3000, "p50_ns": 1000, "p99_ns": 1000, "max_ns": 1000})
    );
}

#[test]
fn decode_errors_counted() {
    let mut a = agg();
    a.record_decode_error(99);
    a.record_decode_error(99);
    a.apply(&launch(100, 70_000, 0x1, 1, 0)); // an API id no cookie can carry
    let r = a.report(meta());
    assert_eq!(r.decode_errors, 3);
    assert_eq!(
        a.decode_errors_by_kind()
            .iter()
            .map(|(&k, &n)| (k, n))
            .collect::<Vec<_>>(),
        [(kind::LAUNCH, 1), (99, 2)]
    );
    assert_eq!((r.processes[0].launches, r.processes[0].api.len()), (1, 0));
}

#[test]
fn exited_process_kept_with_meta() {
    let mut a = agg();
    a.apply(&launch(7, LAUNCH_RT, 0x1, 1, 0));
    a.set_process_meta(
        7,
        ProcessMeta {
            owner: None,
            gpu_env: None,
            comm: "python3".into(),
            cmdline: "python3 train.py".into(),
            exited: false,
            start_time: 0,
            job: None,
        },
    );
    a.mark_exited(7);
    // A late procfs refresh does not bring it back to life.
    a.set_process_meta(
        7,
        ProcessMeta {
            owner: None,
            gpu_env: None,
            comm: "python3".into(),
            cmdline: "python3 train.py".into(),
            exited: false,
            start_time: 0,
            job: None,
        },
    );
    a.mark_exited(8); // never produced a record: not reported
    let r = a.report(meta());
    let got: Vec<(u32, &str, &str, bool)> = r
        .processes
        .iter()
        .map(|p| (p.tgid, &*p.comm, &*p.cmdline, p.exited))
        .collect();
    assert_eq!(got, [(7, "python3", "python3 train.py", true)]);
}

#[test]
fn a_process_gone_before_procfs_is_named_by_its_end_record() {
    let exit = |tgid, comm: &[u8]| {
        let mut body = profiler_common::ExitBody::default();
        body.comm[..comm.len()].copy_from_slice(comm);
        Event::Exit(hdr(kind::EXIT, 0, tgid), body)
    };
    let gone = || ProcessMeta {
        comm: EXITED_COMM.into(),
        exited: true,
        ..ProcessMeta::default()
    };
    let mut a = agg();
    a.apply(&launch(7, LAUNCH_RT, 0x1, 1, 0));
    a.set_process_meta(7, gone());
    a.apply(&exit(7, b"short_lived"));
    a.apply(&launch(8, LAUNCH_RT, 0x1, 1, 0));
    a.set_process_meta(
        8,
        ProcessMeta {
            comm: "python3".into(),
            ..ProcessMeta::default()
        },
    );
    a.apply(&exit(8, b"pt_autograd_0")); // read while alive: procfs's name stays
    a.apply(&exit(9, b"never_seen")); // made no record: not reported
    let r = a.report(meta());
    let got: Vec<(u32, &str, bool)> = r
        .processes
        .iter()
        .map(|p| (p.tgid, &*p.comm, p.exited))
        .collect();
    assert_eq!(got, [(7, "short_lived", true), (8, "python3", true)]);
}

#[test]
fn live_rates_since_previous_call() {
    let mut a = agg();
    for _ in 0..10 {
        a.apply(&launch(100, LAUNCH_RT, 0x1, 1, 0));
    }
    a.apply(&copy(MEMCPY, dir::H2D, 3 << 20, flags::HAS_RETURN, 10, 0));
    a.apply(&sync(STREAM_SYNC, 1_500_000, flags::HAS_RETURN));
    a.apply(&mem(
        MALLOC,
        memop::ALLOC,
        0x10,
        1 << 24,
        memkind::DEVICE,
        0,
    ));
    a.set_process_meta(
        100,
        ProcessMeta {
            comm: "python3".into(),
            ..Default::default()
        },
    );
    assert_eq!(
        a.live_rows(2.0),
        [crate::model::snapshot::LiveRow {
            job: String::new(),
            tgid: 100,
            comm: "python3".into(),
            exited: false,
            launches: 10,
            launches_per_s: 5.0,
            copies: 1,
            copy_bytes: 3 << 20,
            sync_blocked_ns: 1_500_000,
            live_bytes: 16 << 20,
            gpu_sm_util: None,
            gpu_held_bytes: None,
            launches_estimated: None,
            gpm_sm_activity_pct: None,
            gpm_tensor_pct: None,
        }]
    );
    for _ in 0..4 {
        a.apply(&launch(100, LAUNCH_RT, 0x1, 1, 0));
    }
    assert_eq!(a.live_rows(0.5)[0].launches_per_s, 8.0);
    assert_eq!(a.live_rows(1.0)[0].launches_per_s, 0.0);
}

#[test]
fn jobs_group_processes_and_sum_their_totals() {
    use crate::enrich::jobs::Job;
    let mut a = agg();
    let job = |kind: &str, id: &str, step: Option<&str>| Job {
        kind: kind.into(),
        id: id.into(),
        step: step.map(Into::into),
        ..Default::default()
    };
    a.apply(&launch(10, LAUNCH_RT, 0x1, 1, 0));
    a.apply(&launch(10, LAUNCH_RT, 0x1, 1, 0));
    a.apply(&launch(11, LAUNCH_RT, 0x1, 1, 0));
    a.apply(&launch(12, LAUNCH_RT, 0x1, 1, 0));
    a.apply(&launch(13, LAUNCH_RT, 0x1, 1, 0));
    for (t, j) in [
        (10, Some(job("slurm", "77", Some("1")))),
        (11, Some(job("slurm", "77", Some("0")))),
        (12, Some(job("docker", "abc", None))),
        (13, None),
    ] {
        a.set_process_meta(
            t,
            ProcessMeta {
                job: j,
                ..Default::default()
            },
        );
    }
    let r = a.report(meta());
    type Row = (String, String, Vec<String>, Vec<u32>, u64);
    let got: Vec<Row> = r
        .jobs
        .iter()
        .map(|j| {
            (
                j.kind.clone(),
                j.id.clone(),
                j.steps.clone(),
                j.processes.clone(),
                j.launches,
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "slurm".into(),
                "77".into(),
                vec!["0".into(), "1".into()],
                vec![10, 11],
                3
            ),
            ("docker".into(), "abc".into(), vec![], vec![12], 1),
        ]
    );
    // The process without a readable job is reported, with job null, outside every job.
    assert_eq!(r.processes.len(), 4);
    assert_eq!(r.processes[3].job, None);
    a.set_job(13, job("systemd", "x.service", None));
    assert_eq!(a.report(meta()).jobs.len(), 3);
}

#[test]
fn a_reused_tgid_is_a_new_process() {
    let mut a = agg();
    a.apply(&launch(7, LAUNCH_RT, 0x1, 1, 0));
    a.set_process_meta(
        7,
        ProcessMeta {
            comm: "old".into(),
            start_time: 100,
            ..Default::default()
        },
    );
    assert_eq!(a.start_time(7), 100);
    a.retire(7);
    assert_eq!(a.start_time(7), 0);
    a.apply(&launch(7, LAUNCH_RT, 0x1, 1, 0));
    a.apply(&launch(7, LAUNCH_RT, 0x1, 1, 0));
    a.set_process_meta(
        7,
        ProcessMeta {
            comm: "new".into(),
            start_time: 200,
            ..Default::default()
        },
    );
    let r = a.report(meta());
    let got: Vec<(u32, &str, bool, u64)> = r
        .processes
        .iter()
        .map(|p| (p.tgid, p.comm.as_str(), p.exited, p.launches))
        .collect();
    assert_eq!(got, [(7, "old", true, 1), (7, "new", false, 2)]);
    a.retire(8); // never seen: nothing happens
    assert_eq!(a.report(meta()).processes.len(), 2);
}

#[test]
fn nvml_figures_reach_the_live_rows_summed_over_devices() {
    use crate::nvml::{ProcessSample, Sample};
    let mut a = agg();
    a.apply(&launch(7, LAUNCH_RT, 0x1, 1, 0));
    let on = |device, sm| ProcessSample {
        device,
        pid: 7,
        used_bytes: Some(1 << 20),
        sm_util: sm,
        mem_util: None,
    };
    a.apply_nvml(&Sample {
        ts_ns: 1,
        devices: vec![],
        processes: vec![
            on(0, Some(30)),
            on(1, Some(25)),
            ProcessSample {
                pid: 8,
                ..on(0, Some(99))
            },
        ],
        mig: Default::default(),
        health: None,
        gpm: None,
    });
    let rows = a.live_rows(1.0);
    assert_eq!(
        (rows[0].tgid, rows[0].gpu_sm_util, rows[0].gpu_held_bytes),
        (7, Some(55), Some(2 << 20))
    );
    // The next round replaces the figures; a round without an SM figure shows none.
    a.apply_nvml(&Sample {
        ts_ns: 2,
        devices: vec![],
        processes: vec![on(0, None)],
        mig: Default::default(),
        health: None,
        gpm: None,
    });
    let rows = a.live_rows(1.0);
    assert_eq!(
        (rows[0].gpu_sm_util, rows[0].gpu_held_bytes),
        (None, Some(1 << 20))
    );
    let r = a.report(meta());
    let g = r.processes[0].gpu.as_ref().unwrap();
    assert_eq!(
        (g.samples, g.devices.clone(), g.sm_util_avg),
        (2, vec![0, 1], Some(27.5))
    );
}

#[test]
fn the_service_forgets_processes_that_ended_long_enough_ago() {
    let mut a = agg();
    for t in [7, 8, 9] {
        a.apply(&launch(t, LAUNCH_RT, 0x1, 1, 0));
    }
    a.set_tids(7, crate::enrich::nspid::Tids::Same);
    a.mark_exited(7);
    a.retire(9); // pid 9 went to a new process, which launches too
    a.apply(&launch(9, LAUNCH_RT, 0x1, 1, 0));
    assert_eq!(a.processes_held(), 4);
    // Within the grace period nothing goes.
    assert!(
        a.forget_exited(std::time::Duration::from_secs(3600))
            .is_empty()
    );
    assert_eq!(a.report(meta()).processes.len(), 4);
    // Past it: the ended one and the set-aside one; live 8 and the new 9 stay, counters intact.
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert_eq!(a.forget_exited(std::time::Duration::ZERO), [7]);
    // Its thread-id map went with it (10,000 short processes held 1 MiB of them).
    assert_eq!(a.tids(7), crate::enrich::nspid::Tids::Unknown);
    let r = a.report(meta());
    let got: Vec<(u32, u64, bool)> = r
        .processes
        .iter()
        .map(|p| (p.tgid, p.launches, p.exited))
        .collect();
    assert_eq!(got, [(8, 1, false), (9, 1, false)]);
    assert_eq!(a.processes_held(), 2);
}

#[test]
fn copies_from_pinned_memory_are_not_pageable() {
    let mut a = agg();
    let base = 0x7000_0000u64;
    let c = |dir_, src: u64, dst: u64| {
        let mut e = copy(MEMCPY, dir_, 4096, 0, 0, 0);
        if let Event::Copy(_, b) = &mut e {
            b.src = src;
            b.dst = dst;
        }
        e
    };
    let events = [
        // 1 MiB pinned at `base` (cudaMallocHost), a managed buffer after it.
        mem(
            MALLOC_HOST,
            memop::ALLOC,
            base,
            1 << 20,
            memkind::HOST_PINNED,
            0,
        ),
        mem(
            MALLOC,
            memop::ALLOC,
            0x9000_0000,
            1 << 16,
            memkind::MANAGED,
            0,
        ),
        c(dir::H2D, base, 0xd000), // start of the pinned buffer
        c(dir::H2D, base + (1 << 20) - 1, 0xd000), // its last byte
        c(dir::D2H, 0xd000, 0x9000_0100), // into managed memory
        c(dir::H2D, base + (1 << 20), 0xd000), // one past its end: pageable
        c(dir::D2H, 0xd000, 0x1234), // a stack or heap buffer: pageable
        // Freed: the same address is pageable from now on.
        mem(FREE, memop::FREE, base, 0, memkind::HOST_PINNED, 0),
        c(dir::H2D, base, 0xd000),
    ];
    let v = only(&mut a, &events);
    let got: Vec<(String, u64, u64)> = v["copies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["direction"].as_str().unwrap().to_owned(),
                c["calls"].as_u64().unwrap(),
                c["pageable_calls"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, [("h2d".into(), 4, 2), ("d2h".into(), 2, 1)]);
}

#[test]
fn work_per_stream_bounded() {
    let mut a = agg();
    let mut events = vec![
        launch(100, LAUNCH_RT, 0x1, 1, 0x55),
        launch(100, LAUNCH_RT, 0x1, 1, 0x55),
        launch(100, LAUNCH_RT, 0x1, 1, 0),
        launch(100, LAUNCH_RT, 0x1, 1, 2),
    ];
    let mut c = copy(MEMCPY_ASYNC, dir::H2D, 4096, flags::ASYNC, 0, 0);
    if let Event::Copy(_, b) = &mut c {
        b.stream = 0x55;
    }
    events.push(c);
    let v = only(&mut a, &events);
    assert_eq!(
        v["streams"],
        json!([
            {"stream": "0x55", "launches": 2, "copies": 1, "copy_bytes": 4096,
             "derived_idle_ns": 0, "drains": 0, "derived_launch_ahead_max_ns": 0},
            {"stream": "default", "launches": 1, "copies": 0, "copy_bytes": 0,
             "derived_idle_ns": 0, "drains": 0, "derived_launch_ahead_max_ns": 0},
            {"stream": "per-thread", "launches": 1, "copies": 0, "copy_bytes": 0,
             "derived_idle_ns": 0, "drains": 0, "derived_launch_ahead_max_ns": 0},
        ])
    );
    // Beyond MAX_STREAMS distinct streams, the rest is summed under "other".
    let mut b = agg();
    let many: Vec<Event> = (0..process::MAX_STREAMS as u64 + 10)
        .map(|s| launch(100, LAUNCH_RT, 0x1, 1, 0x1000 + s))
        .collect();
    let v = only(&mut b, &many);
    let streams = v["streams"].as_array().unwrap();
    assert_eq!(streams.len(), process::MAX_STREAMS + 1);
    let other = streams.iter().find(|s| s["stream"] == "other").unwrap();
    assert_eq!(other["launches"], 10);
}

#[test]
fn an_exec_splits_the_process_and_never_lends_the_new_name_to_the_old_program() {
    let named = |comm: &str| ProcessMeta {
        comm: comm.into(),
        cmdline: format!("{comm} --flag"),
        ..ProcessMeta::default()
    };
    let mut a = agg();
    // Read while the first program ran (at 100 ns, exec at 500 ns): its own name.
    a.apply(&launch(7, LAUNCH_RT, 0x1, 1, 0));
    a.set_process_meta_read_at(7, named("launcher"), 100);
    assert_eq!(a.exec(7, 500), None);
    // The second program's first record: read at 600 ns, but it had exec'd again at 550 ns:
    // procfs showed the third program, whose name must not go to the second.
    a.apply(&launch(7, LAUNCH_RT, 0x1, 2, 0));
    a.set_process_meta_read_at(7, named("sleep"), 600);
    let renamed = a
        .exec(7, 550)
        .expect("the second program's name is withdrawn");
    assert_eq!((&*renamed.comm, &*renamed.cmdline), (BEFORE_EXEC_COMM, ""));
    // An exec of a process that made no record changes nothing.
    assert_eq!(a.exec(8, 700), None);
    let r = a.report(meta());
    let got: Vec<(u32, &str, &str, u64, bool)> = r
        .processes
        .iter()
        .map(|p| (p.tgid, &*p.comm, &*p.cmdline, p.launches, p.exited))
        .collect();
    assert_eq!(
        got,
        [
            (7, "launcher", "launcher --flag", 1, true),
            (7, BEFORE_EXEC_COMM, "", 1, true)
        ]
    );
}

/// The live line of a process gets GPM's latest SM and tensor activity of a GPU its job held
/// alone; not of a GPU another job shares.
#[test]
fn live_rows_show_gpm_of_a_gpu_the_job_holds_alone() {
    use crate::enrich::jobs::Job;
    use crate::nvml::gpm::{DeviceGpm, Figures, Gpm, State};
    use crate::nvml::{DeviceSample, ProcessSample, Sample};
    let mut a = agg();
    let job = |id: &str| Job {
        kind: "slurm".into(),
        id: id.into(),
        ..Default::default()
    };
    for (tgid, id) in [(10, "7"), (11, "8")] {
        a.apply(&launch(tgid, LAUNCH_RT, 0x1, 1, 0));
        a.set_job(tgid, job(id));
    }
    let dev = |index| DeviceSample {
        index,
        name: "H100".into(),
        uuid: format!("GPU-{index}"),
        gpu_util: None,
        mem_util: None,
        mem_used: None,
        mem_total: None,
        sm_clock_mhz: None,
        power_mw: None,
        temp_c: None,
    };
    let on = |device, pid| ProcessSample {
        device,
        pid,
        used_bytes: None,
        sm_util: None,
        mem_util: None,
    };
    // GPU 0: process 10 alone; GPU 1: processes 10 and 11 (two jobs).
    a.apply_nvml(&Sample {
        ts_ns: 1,
        devices: vec![dev(0), dev(1)],
        processes: vec![on(0, 10), on(1, 10), on(1, 11)],
        mig: Default::default(),
        health: None,
        gpm: None,
    });
    let measured = |index, sm| DeviceGpm {
        index,
        state: State::Measured(Box::new(Figures {
            sm_activity_pct: Some(sm),
            tensor_activity_pct: Some(sm / 2.0),
            ..Figures::default()
        })),
    };
    a.apply_nvml_gpm(&Gpm {
        ts_ns: 1,
        devices: vec![measured(0, 62.5), measured(1, 30.0)],
    });
    let rows = a.live_rows(1.0);
    assert_eq!(
        (
            rows[0].tgid,
            rows[0].gpm_sm_activity_pct,
            rows[0].gpm_tensor_pct
        ),
        (10, Some(62.5), Some(31.25))
    );
    assert_eq!(
        (
            rows[1].tgid,
            rows[1].gpm_sm_activity_pct,
            rows[1].gpm_tensor_pct
        ),
        (11, None, None)
    );
    let r = a.report(meta());
    let g1 = r.gpus[1].gpm.as_ref().unwrap();
    assert_eq!((g1.shared_samples, g1.jobs.len()), (1, 0));
    assert_eq!(r.gpus[0].gpm.as_ref().unwrap().jobs[0].workload, "slurm:7");
}

/// Two ranks on a four-GPU node, each "device 0" of its own: `CUDA_VISIBLE_DEVICES` (Slurm's
/// per-task GPUs) and a container's `NVIDIA_VISIBLE_DEVICES` (the Kubernetes device plugin)
/// say which of the node's GPUs that is.
#[test]
fn each_rank_s_device_0_is_named_by_its_node_gpu() {
    use crate::enrich::gpu_env::GpuEnv;
    use crate::nvml::{DeviceSample, Sample};
    let mut a = agg();
    a.apply_nvml(&Sample {
        ts_ns: 5,
        devices: (0..4)
            .map(|i| DeviceSample {
                index: i,
                name: "NVIDIA H100 80GB HBM3".into(),
                uuid: format!("GPU-{i}0000000-aaaa"),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    });
    let on_device_0 = |tgid| {
        let mut l = launch(tgid, LAUNCH_RT, 0x1000, 1, 0);
        if let Event::Launch(_, b) = &mut l {
            b.flags = 1 << profiler_common::flags::DEVICE_SHIFT;
        }
        l
    };
    let env = |cuda: Option<&str>, nvidia: Option<&str>| GpuEnv {
        cuda_visible: cuda.map(str::to_owned),
        nvidia_visible: nvidia.map(str::to_owned),
        device_order: None,
        in_container: nvidia.is_some(),
    };
    for (tgid, e) in [
        (10, Some(env(Some("2"), None))),
        (11, Some(env(None, Some("GPU-30000000-aaaa")))),
        (12, Some(env(None, None))),
        (13, None),
    ] {
        a.apply(&on_device_0(tgid));
        a.set_process_meta(
            tgid,
            ProcessMeta {
                comm: "rank".into(),
                gpu_env: e,
                ..Default::default()
            },
        );
    }
    let ps = a.report(meta()).processes;
    let named: Vec<(u32, Option<u32>, Option<u32>)> = ps
        .iter()
        .map(|p| (p.tgid, p.devices[0].device, p.devices[0].nvml_gpu))
        .collect();
    assert_eq!(
        named,
        [
            (10, Some(0), Some(2)),
            (11, Some(0), Some(3)),
            (12, Some(0), Some(0)),
            // Its environment was not read: not guessed.
            (13, Some(0), None),
        ]
    );
}
