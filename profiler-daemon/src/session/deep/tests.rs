//! A deep capture cut out of a running aggregator, read back as a capture file.

use super::*;
use crate::enrich::names::NoSymbols;
use crate::model::{Aggregator, ProcessMeta};
use crate::session::taps::RecordTap;
use crate::store::tests::{api, launch};
use profiler_common::decode::decode;
use profiler_common::namesrc;

fn name(tgid: u32, handle: u64, mangled: &str) -> Vec<u8> {
    let mut body = NameBody {
        handle,
        scope: 0,
        source: namesrc::REGISTER_FUNCTION,
        len: mangled.len() as u32,
        flags: 0,
        _pad: 0,
        name: [0; NAME_CAP],
    };
    body.name[..mangled.len()].copy_from_slice(mangled.as_bytes());
    encode(&Record {
        header: Header {
            kind: kind::NAME,
            api: 0,
            tgid,
            tid: tgid,
            ts_ns: 1,
        },
        body,
    })
    .to_vec()
}

fn alias(tgid: u32, from: u64, to: u64) -> Vec<u8> {
    encode(&Record {
        header: Header {
            kind: kind::ALIAS,
            api: 0,
            tgid,
            tid: tgid,
            ts_ns: 1,
        },
        body: AliasBody { from, to },
    })
    .to_vec()
}

/// Feeds one record to the aggregator and to the capture (as the session does).
fn feed(agg: &mut Aggregator, d: &mut DeepCapture, rec: &[u8]) {
    let ev = decode(rec).unwrap();
    RecordTap::record(d, rec, Some(&ev), agg);
    agg.apply(&ev);
}

/// What the client would have written: the streamed chunks as a file, read back (the replay
/// and its NVML samples).
fn read_back(
    rx: &mut mpsc::Receiver<Vec<u8>>,
    tag: &str,
) -> (store::Replay, Vec<crate::nvml::Sample>) {
    let (r, samples, _) = read_back_mig(rx, tag);
    (r, samples)
}

/// [`read_back`], and every MIG placement the capture holds.
fn read_back_mig(
    rx: &mut mpsc::Receiver<Vec<u8>>,
    tag: &str,
) -> (
    store::Replay,
    Vec<crate::nvml::Sample>,
    Vec<crate::nvml::MigPlacement>,
) {
    let mut bytes = Vec::new();
    while let Ok(c) = rx.try_recv() {
        bytes.extend(c);
    }
    let path = std::env::temp_dir().join(format!(
        "gpuprofd-deep-{tag}-{}.gpuprof",
        std::process::id()
    ));
    std::fs::write(&path, &bytes).unwrap();
    let r = store::replay(&path).unwrap();
    let samples = store::nvml_samples(&path).unwrap();
    let mut mig = Vec::new();
    let mut reader = store::Reader::open(&path).unwrap();
    while let Some(f) = reader.next_frame() {
        if let Frame::NvmlMig(round) = f {
            mig.extend(round.placements);
        }
    }
    std::fs::remove_file(&path).unwrap();
    (r, samples, mig)
}

/// A sync record (under API 0, the test table's cudaLaunchKernel: its kind is what counts).
fn sync_rec(tgid: u32, ts_ns: u64) -> Vec<u8> {
    encode(&Record {
        header: Header {
            kind: kind::SYNC,
            api: 0,
            tgid,
            tid: tgid,
            ts_ns,
        },
        body: profiler_common::SyncBody::default(),
    })
    .to_vec()
}

fn meta(comm: &str) -> ProcessMeta {
    ProcessMeta {
        owner: None,
        gpu_env: None,
        comm: comm.into(),
        cmdline: format!("{comm} train.py"),
        exited: false,
        job: None,
        start_time: 42,
    }
}

#[test]
fn a_deep_capture_holds_its_window_and_the_names_from_before() {
    let mut agg = Aggregator::new(api(), Box::new(NoSymbols));
    agg.set_process_meta(10, meta("python3"));
    agg.set_process_meta(20, meta("other"));
    // Before the capture: names (a host stub, a driver function aliased to it) and 5 launches.
    agg.apply(&decode(&name(10, 0x1000, "_Z4gemmPfi")).unwrap());
    agg.apply(&decode(&alias(10, 0xf00d, 0x1000)).unwrap());
    for i in 0..5 {
        agg.apply(&decode(&launch(10, 0, 0x1000, i)).unwrap());
    }
    let (tx, mut rx) = mpsc::channel(CHUNKS);
    let stop = Arc::new(AtomicBool::new(false));
    let req = Request {
        target: Target::Pid(10),
        duration: Duration::from_secs(3600),
        role: super::Role::Admin,
        sink: ChannelSink::new(tx),
        stop: stop.clone(),
    };
    let drops = std::collections::BTreeMap::from([("launch".to_string(), 7)]);
    let mut d = DeepCapture::new(1, req, Some(42), api().list(), drops, "node1".into())
        .from_ns(100)
        .pids_alive();
    // Made before the capture started (at 100), read after it: the process's last launch and
    // sync before it, and a name; the calls are not the capture's, the name is needed.
    feed(&mut agg, &mut d, &launch(10, 0, 0x1000, 99));
    feed(&mut agg, &mut d, &sync_rec(10, 99));
    feed(&mut agg, &mut d, &name(10, 0x2000, "_Z4axpyPf"));
    // During: 3 runtime launches and 2 driver launches of the aliased handle in 10; 4 in 20.
    for i in 0..3 {
        feed(&mut agg, &mut d, &launch(10, 0, 0x1000, 100 + i));
    }
    for i in 0..2 {
        feed(&mut agg, &mut d, &launch(10, 1, 0xf00d, 200 + i));
    }
    for i in 0..4 {
        feed(&mut agg, &mut d, &launch(20, 0, 0x1000, 300 + i));
    }
    feed(&mut agg, &mut d, &launch(10, 0, 0x2000, 400));
    assert_eq!(d.tick(), None, "still running");
    stop.store(true, Ordering::Relaxed);
    assert_eq!(d.tick().as_deref(), Some("stopped by the client"));
    let now = std::collections::BTreeMap::from([("launch".to_string(), 9)]);
    d.finish("stopped by the client", &now);
    let (r, _) = read_back(&mut rx, "a");
    assert_eq!(r.header.host, "node1");
    let end = r.end.expect("an end frame");
    assert_eq!(end.stop_reason, "stopped by the client");
    assert_eq!(end.drops["launch"], 2, "the losses of its own window");
    let pids: Vec<u32> = r.report.processes.iter().map(|p| p.tgid).collect();
    assert_eq!(pids, [10], "only the process asked for");
    let p = &r.report.processes[0];
    assert_eq!((p.comm.as_str(), p.launches), ("python3", 6));
    let calls = |n: &str| p.api.iter().find(|a| a.name == n).map(|a| a.calls);
    // 3 + 1 launches; the launch and the sync made before the start are not in it.
    assert_eq!(calls("cudaLaunchKernel"), Some(4), "{:?}", p.api);
    let mut k: Vec<(String, u64, String)> = p
        .kernels
        .iter()
        .map(|k| (k.name.clone(), k.calls, k.api.clone()))
        .collect();
    k.sort();
    assert_eq!(
        k,
        [
            ("axpy(float*)".into(), 1, "cudaLaunchKernel".into()),
            ("gemm(float*, int)".into(), 2, "cuLaunchKernel".into()),
            ("gemm(float*, int)".into(), 3, "cudaLaunchKernel".into()),
        ]
    );
}

#[test]
fn a_client_that_stops_reading_ends_its_capture() {
    let agg = Aggregator::new(api(), Box::new(NoSymbols));
    let (tx, _rx) = mpsc::channel(2);
    let req = Request {
        target: Target::Pid(10),
        duration: Duration::from_secs(3600),
        role: super::Role::Admin,
        sink: ChannelSink::new(tx),
        stop: Arc::new(AtomicBool::new(false)),
    };
    let mut d = DeepCapture::new(
        1,
        req,
        Some(42),
        api().list(),
        Default::default(),
        "n".into(),
    )
    .from_ns(0)
    .pids_alive();
    let mut agg = agg;
    agg.set_process_meta(10, meta("python3"));
    let mut why = None;
    for i in 0..200_000u64 {
        feed(&mut agg, &mut d, &launch(10, 0, 0x1000, i));
        if i % 10_000 == 0 {
            why = d.tick();
            if why.is_some() {
                break;
            }
        }
    }
    assert_eq!(
        why.as_deref(),
        Some("the client is not reading the capture fast enough; it was ended")
    );
}

#[test]
fn a_pid_capture_ends_when_the_pid_is_another_process_and_a_user_sees_only_theirs() {
    // The process that takes the pid over started later (43), or was gone before procfs could
    // be read (start time unknown, 0): either way it is not the one asked for.
    for intruder_start in [43, 0] {
        pid_taken_over(intruder_start);
    }
}

fn pid_taken_over(intruder_start: u64) {
    let mut agg = Aggregator::new(api(), Box::new(NoSymbols));
    agg.set_process_meta(10, meta("python3"));
    agg.set_process_meta(20, meta("other"));
    let (tx, mut rx) = mpsc::channel(CHUNKS);
    let req = Request {
        target: Target::Pid(10),
        duration: Duration::from_secs(3600),
        role: super::Role::User(1000),
        sink: ChannelSink::new(tx),
        stop: Arc::new(AtomicBool::new(false)),
    };
    let mut d = DeepCapture::new(
        1,
        req,
        Some(42),
        api().list(),
        Default::default(),
        "n".into(),
    )
    .from_ns(0)
    .pids_alive();
    feed(&mut agg, &mut d, &launch(10, 0, 0x1000, 1));
    // NVML lists both processes; the user's capture keeps their own.
    let sample = crate::nvml::Sample {
        ts_ns: 2,
        devices: vec![crate::nvml::DeviceSample {
            index: 0,
            name: "H100".into(),
            uuid: "GPU-1".into(),
            gpu_util: Some(90),
            mem_util: None,
            mem_used: None,
            mem_total: None,
            sm_clock_mhz: None,
            power_mw: None,
            temp_c: None,
        }],
        processes: [10, 20]
            .map(|pid| crate::nvml::ProcessSample {
                device: 0,
                pid,
                used_bytes: Some(1 << 20),
                sm_util: Some(50),
                mem_util: Some(5),
            })
            .to_vec(),
        mig: Default::default(),
        health: None,
        gpm: None,
    };
    d.frame(&Frame::Nvml(sample));
    // Both on MIG instances of the GPU: the user's capture keeps only where theirs ran.
    let on = |pid, gpu_instance| crate::nvml::MigPlacement {
        pid,
        device: 0,
        gpu_instance,
        compute_instance: 0,
    };
    d.frame(&Frame::NvmlMig(crate::nvml::MigRound {
        placements: vec![on(10, 1), on(20, 2)],
        instances: Vec::new(),
    }));
    // GPM of the same round: the GPU is shared with the other user's process.
    d.frame(&Frame::NvmlGpm(crate::nvml::gpm::Gpm {
        ts_ns: 2,
        devices: vec![crate::nvml::gpm::DeviceGpm {
            index: 0,
            state: crate::nvml::gpm::State::Measured(Box::new(crate::nvml::gpm::Figures {
                sm_activity_pct: Some(80.0),
                ..Default::default()
            })),
        }],
    }));
    // Pid 10 goes to a process that started later: not captured, and the capture is over.
    agg.retire(10);
    agg.set_process_meta(
        10,
        ProcessMeta {
            start_time: intruder_start,
            ..meta("intruder")
        },
    );
    d.retire(10);
    feed(&mut agg, &mut d, &launch(10, 0, 0x1000, 3));
    assert_eq!(d.tick().as_deref(), Some("process 10 ended"));
    d.finish("process 10 ended", &Default::default());
    let (r, samples, mig) = read_back_mig(&mut rx, "b");
    assert_eq!(mig, [on(10, 1)]);
    let g = r.report.processes[0].gpu.as_ref().unwrap();
    assert_eq!(
        g.mig.iter().map(|m| m.to_string()).collect::<Vec<_>>(),
        ["GPU 0 MIG 1/0"]
    );
    let got: Vec<(u32, &str, u64)> = r
        .report
        .processes
        .iter()
        .map(|p| (p.tgid, p.comm.as_str(), p.launches))
        .collect();
    assert_eq!(got, [(10, "python3", 1)]);
    assert_eq!(samples.len(), 1);
    // The other user's process is pid 0 ("someone else"): the GPU's GPM goes to no job, and
    // no pid is listed as unprofiled.
    let pids: Vec<u32> = samples[0].processes.iter().map(|p| p.pid).collect();
    assert_eq!(pids, [10, 0]);
    let g = &r.report.gpus[0];
    assert_eq!(g.unprofiled_pids, Vec::<u32>::new());
    let gpm = g.gpm.as_ref().unwrap();
    assert_eq!(
        (
            gpm.samples,
            gpm.jobs.len(),
            gpm.shared_samples + gpm.unattributed_samples
        ),
        (1, 0, 1)
    );
}

#[test]
fn a_capture_ends_when_its_duration_is_over() {
    let (tx, mut rx) = mpsc::channel(CHUNKS);
    let req = Request {
        target: Target::Pid(std::process::id()),
        duration: Duration::ZERO,
        role: super::Role::Admin,
        sink: ChannelSink::new(tx),
        stop: Arc::new(AtomicBool::new(false)),
    };
    let mut d =
        DeepCapture::new(1, req, None, api().list(), Default::default(), "n".into()).from_ns(0);
    let why = d.tick().expect("over at once");
    assert_eq!(why, "duration reached");
    d.finish(&why, &Default::default());
    let (r, _) = read_back(&mut rx, "c");
    assert_eq!(r.end.expect("an end frame").stop_reason, "duration reached");
}
