//! Capture files: written by [`Writer`], read back by [`replay`]; damaged, cut, foreign and
//! newer files.

use super::*;
use crate::api::{ApiTable, Layer};
use crate::enrich::names::NoSymbols;
use crate::model::snapshot::{Report, ReportMeta};
use crate::model::{Aggregator, ProcessMeta};
use profiler_common::decode::{decode, encode};
use profiler_common::{Header, LaunchBody, Record, kind};
use std::time::Duration;

pub(crate) fn launch(tgid: u32, api: u32, func: u64, ts_ns: u64) -> Vec<u8> {
    encode(&Record {
        header: Header {
            kind: kind::LAUNCH,
            api,
            tgid,
            tid: tgid,
            ts_ns,
        },
        body: LaunchBody {
            func,
            grid: [4, 1, 1],
            block: [128, 1, 1],
            ..Default::default()
        },
    })
    .to_vec()
}

pub(crate) fn header() -> FileHeader {
    FileHeader {
        writer: "gpuprofd test".into(),
        host: "node7".into(),
        kernel: "6.18.0".into(),
        started_at_unix_ns: 1_795_417_200_000_000_000,
        started_at_monotonic_ns: 1_000,
        target: "all CUDA processes".into(),
    }
}

pub(crate) fn api() -> ApiTable {
    let mut t = ApiTable::new();
    t.intern("cudaLaunchKernel", Layer::Runtime);
    t.intern("cuLaunchKernel", Layer::Driver);
    t
}

fn meta(comm: &str) -> StoredProcess {
    StoredProcess {
        comm: comm.into(),
        cmdline: format!("{comm} --train"),
        exited: false,
        job: Some(StoredJob {
            kind: "slurm".into(),
            id: "4242".into(),
            step: Some("0".into()),
            container: None,
            name: None,
            namespace: None,
            cgroup: "/system.slice/slurmstepd.scope/job_4242/step_0".into(),
        }),
        start_time: 77,
    }
}

/// A capture of two processes: 7 launches (5 + 2), a pid reuse, and a named host stub.
pub(crate) fn write_capture(path: &Path, with_end: bool) {
    write_capture_as(path, with_end, header());
}

/// [`write_capture`] under another header (another node, another start).
pub(crate) fn write_capture_as(path: &Path, with_end: bool, header: FileHeader) {
    let f = File::create(path).unwrap();
    let mut w = Writer::new(f, path, header);
    w.frame(&Frame::Api(api().list().to_vec()));
    w.frame(&Frame::Process {
        tgid: 100,
        process: meta("python3"),
    });
    for i in 0..5 {
        w.record(&launch(100, 0, 0x4000, 2_000 + i));
    }
    w.flush();
    w.frame(&Frame::Process {
        tgid: 200,
        process: meta("trainer"),
    });
    w.record(&launch(200, 1, 0x9000, 3_000));
    w.frame(&Frame::Retire { tgid: 200 });
    w.frame(&Frame::Process {
        tgid: 200,
        process: meta("trainer2"),
    });
    w.record(&launch(200, 1, 0x9000, 4_000));
    w.frame(&Frame::Exited { tgid: 200 });
    if with_end {
        w.frame(&Frame::Symbols(vec![(100, 0x4000, "_Z4gemmPfi".into())]));
        w.frame(&Frame::Faults(BTreeMap::from([
            ("launch_counts_full".to_owned(), 0),
            ("user_read".to_owned(), 4),
        ])));
        w.frame(&Frame::End(End {
            duration_ns: 9_000,
            drops: BTreeMap::from([("launch".to_owned(), 3)]),
            submitted: BTreeMap::from([("launch".to_owned(), 10)]),
            stop_reason: "interrupted".into(),
        }));
    }
    w.flush();
    assert_eq!(w.failure(), None);
}

/// What the live aggregator reports for the same calls (no symbols: the stub stays unnamed,
/// so compare against a replay without the Symbols frame).
fn live_equivalent() -> Report {
    let mut a = Aggregator::new(api(), Box::new(NoSymbols));
    let set = |a: &mut Aggregator, tgid, m: StoredProcess| {
        a.set_process_meta(
            tgid,
            ProcessMeta {
                owner: None,
                gpu_env: None,
                comm: m.comm,
                cmdline: m.cmdline,
                exited: m.exited,
                job: m.job.map(Into::into),
                start_time: m.start_time,
            },
        )
    };
    set(&mut a, 100, meta("python3"));
    for i in 0..5 {
        a.apply(&decode(&launch(100, 0, 0x4000, 2_000 + i)).unwrap());
    }
    set(&mut a, 200, meta("trainer"));
    a.apply(&decode(&launch(200, 1, 0x9000, 3_000)).unwrap());
    a.retire(200);
    set(&mut a, 200, meta("trainer2"));
    a.apply(&decode(&launch(200, 1, 0x9000, 4_000)).unwrap());
    a.mark_exited(200);
    a.report(ReportMeta {
        host: "node7".into(),
        started_at: UNIX_EPOCH + Duration::from_nanos(1_795_417_200_000_000_000),
        started_mono_ns: 1_000,
        duration_ns: 3_000,
        drops: BTreeMap::new(),
        submitted: BTreeMap::new(),
        faults: Default::default(),
    })
}

pub(crate) struct Tmp(pub(crate) PathBuf);
impl Tmp {
    pub(crate) fn new(name: &str) -> Tmp {
        let p = std::env::temp_dir().join(format!(
            "gpuprofd-store-{}-{name}.gpuprof",
            std::process::id()
        ));
        Tmp(p)
    }
}
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn a_replay_is_the_report_the_daemon_made() {
    let t = Tmp::new("same");
    write_capture(&t.0, false);
    let r = replay(&t.0).unwrap();
    assert_eq!(r.header, header());
    // No closing frame: the duration runs to the last record (4_000 - 1_000).
    assert_eq!(r.report, live_equivalent());
    assert_eq!(
        r.recovery,
        Recovery {
            frames: 10,
            records: 7,
            bytes: std::fs::metadata(&t.0).unwrap().len(),
            damage: None,
            complete: false,
        }
    );
    assert!(
        r.recovery
            .warning("x")
            .unwrap()
            .contains("no closing frame")
    );
}

#[test]
fn a_file_of_the_first_schema_still_reads() {
    let t = Tmp::new("schema1");
    write_capture(&t.0, false);
    let mut bytes = std::fs::read(&t.0).unwrap();
    assert_eq!(bytes[8..12], SCHEMA_VERSION.to_le_bytes());
    bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
    std::fs::write(&t.0, &bytes).unwrap();
    assert_eq!(replay(&t.0).unwrap().report, live_equivalent());
}

#[test]
fn a_schema_3_file_ends_cleanly_without_faults() {
    // Written before the Faults frame existed: an End, no Faults; the report has no
    // probe_faults (not zeros: unknown).
    let t = Tmp::new("schema3");
    let f = File::create(&t.0).unwrap();
    let mut w = Writer::new(f, &t.0, header());
    w.frame(&Frame::Api(api().list().to_vec()));
    w.frame(&Frame::Process {
        tgid: 100,
        process: meta("python3"),
    });
    w.record(&launch(100, 0, 0x4000, 2_000));
    w.frame(&Frame::End(End {
        duration_ns: 9_000,
        drops: BTreeMap::new(),
        submitted: BTreeMap::new(),
        stop_reason: "interrupted".into(),
    }));
    w.flush();
    drop(w);
    let mut bytes = std::fs::read(&t.0).unwrap();
    bytes[8..12].copy_from_slice(&3u32.to_le_bytes());
    std::fs::write(&t.0, &bytes).unwrap();
    let r = replay(&t.0).unwrap();
    assert!(r.recovery.complete);
    assert_eq!(r.report.duration_ns, 9_000);
    assert!(r.report.probe_faults.is_empty());
    assert!(
        !serde_json::to_string(&r.report)
            .unwrap()
            .contains("probe_faults")
    );
}

#[test]
fn a_clean_end_brings_drops_duration_and_stub_names() {
    let t = Tmp::new("end");
    write_capture(&t.0, true);
    let r = replay(&t.0).unwrap();
    assert!(r.recovery.complete);
    assert_eq!(r.recovery.warning("x"), None);
    assert_eq!(r.report.duration_ns, 9_000);
    assert_eq!(r.report.drops["launch"], 3);
    assert_eq!(r.report.submitted["launch"], 10);
    assert_eq!(r.report.probe_faults["user_read"], 4);
    assert_eq!(r.report.probe_faults["launch_counts_full"], 0);
    let p100 = r.report.processes.iter().find(|p| p.tgid == 100).unwrap();
    assert_eq!(p100.kernels[0].name, "gemm(float*, int)");
    assert_eq!(p100.kernels[0].calls, 5);
    assert_eq!(p100.job.as_ref().unwrap().id, "4242");
    // The reused pid: two entries, the first retired (exited) with its own launch.
    let p200: Vec<(&str, u64, bool)> = r
        .report
        .processes
        .iter()
        .filter(|p| p.tgid == 200)
        .map(|p| (p.comm.as_str(), p.launches, p.exited))
        .collect();
    assert_eq!(p200, [("trainer", 1, true), ("trainer2", 1, true)]);
    assert_eq!(r.end.unwrap().stop_reason, "interrupted");
}

#[test]
fn a_file_cut_anywhere_gives_back_every_whole_frame_before_the_cut() {
    let t = Tmp::new("full");
    write_capture(&t.0, true);
    let full = std::fs::read(&t.0).unwrap();
    // Frame boundaries, from an intact read.
    let mut bounds = vec![];
    let mut rd = Reader::open(&t.0).unwrap();
    while rd.next_frame().is_some() {
        bounds.push(rd.offset);
    }
    assert_eq!(bounds.len(), 13);
    let cut = Tmp::new("cut");
    for len in 0..full.len() {
        std::fs::write(&cut.0, &full[..len]).unwrap();
        let whole = bounds.iter().filter(|&&b| b <= len as u64).count() as u64;
        match replay(&cut.0) {
            Err(StoreError::NotACapture { .. }) => assert!(len < 8, "cut at {len}"),
            Err(StoreError::NoHeader { .. }) => assert_eq!(whole, 0, "cut at {len}"),
            Err(e) => panic!("cut at {len}: {e}"),
            Ok(r) => {
                assert_eq!(r.recovery.frames, whole, "cut at {len}");
                let at_boundary = bounds.contains(&(len as u64));
                assert_eq!(r.recovery.damage.is_none(), at_boundary, "cut at {len}");
                assert!(!r.recovery.complete);
            }
        }
    }
}

#[test]
fn a_flipped_byte_stops_the_read_at_its_frame() {
    let t = Tmp::new("flip");
    write_capture(&t.0, true);
    let mut bytes = std::fs::read(&t.0).unwrap();
    let mut rd = Reader::open(&t.0).unwrap();
    let mut bounds = vec![12u64];
    while rd.next_frame().is_some() {
        bounds.push(rd.offset);
    }
    // A byte inside the fourth frame's payload (the first run of records).
    let at = bounds[3] as usize + 8 + 3;
    bytes[at] ^= 0x40;
    std::fs::write(&t.0, &bytes).unwrap();
    let r = replay(&t.0).unwrap();
    assert_eq!(r.recovery.frames, 3);
    assert_eq!(r.recovery.records, 0);
    let why = r.recovery.damage.clone().unwrap();
    assert_eq!(
        why,
        format!(
            "the frame at byte {} fails its checksum: damaged",
            bounds[3]
        )
    );
    assert!(r.recovery.warning("run.gpuprof").unwrap().contains(&why));
    assert_eq!(r.report.processes.len(), 0);
}

#[test]
fn a_huge_length_is_refused_without_allocating_it() {
    let t = Tmp::new("huge");
    let mut bytes = MAGIC.to_vec();
    bytes.extend_from_slice(&1u32.to_le_bytes());
    bytes.extend_from_slice(&u32::MAX.to_le_bytes());
    bytes.extend_from_slice(&0u32.to_le_bytes());
    std::fs::write(&t.0, &bytes).unwrap();
    match replay(&t.0) {
        Err(StoreError::NoHeader { reason, .. }) => {
            assert!(reason.contains("claims 4294967295 bytes"), "{reason}")
        }
        other => panic!("{:?}", other.map(|r| r.recovery)),
    }
}

#[test]
fn foreign_newer_and_empty_files_are_refused_with_what_to_do() {
    let t = Tmp::new("foreign");
    std::fs::write(&t.0, b"{\"schema\": \"gpuprofd.report/1\"}").unwrap();
    let e = replay(&t.0).err().unwrap();
    assert!(matches!(e, StoreError::NotACapture { .. }));
    assert!(e.to_string().contains("--output FILE.gpuprof"));

    let mut newer = MAGIC.to_vec();
    newer.extend_from_slice(&(SCHEMA_VERSION + 1).to_le_bytes());
    std::fs::write(&t.0, &newer).unwrap();
    let e = replay(&t.0).err().unwrap();
    assert!(
        matches!(e, StoreError::NewerSchema { found, .. } if found == SCHEMA_VERSION + 1),
        "{e}"
    );
    assert!(e.to_string().contains("upgrade"));

    std::fs::write(&t.0, b"").unwrap();
    assert!(matches!(
        replay(&t.0).err().unwrap(),
        StoreError::NotACapture { .. }
    ));

    let mut only_magic = MAGIC.to_vec();
    only_magic.extend_from_slice(&SCHEMA_VERSION.to_le_bytes());
    std::fs::write(&t.0, &only_magic).unwrap();
    let e = replay(&t.0).err().unwrap();
    assert!(e.to_string().contains("it is empty"), "{e}");

    let e = replay(Path::new("/nonexistent/run.gpuprof")).err().unwrap();
    assert!(matches!(e, StoreError::Io { .. }));
    assert!(e.to_string().contains("/nonexistent/run.gpuprof"));
}

#[test]
fn a_failed_write_is_reported_once_and_writing_stops() {
    // /dev/full fails every write with ENOSPC.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let mut w = Writer::new(f, Path::new("/dev/full"), header());
    for i in 0..100_000 {
        w.record(&launch(1, 0, 0x1, i));
    }
    w.flush();
    assert!(
        w.failure().unwrap().contains("No space left"),
        "{:?}",
        w.failure()
    );
    assert_eq!(w.records, 100_000);
}

#[test]
fn a_frame_the_reader_would_refuse_is_never_written() {
    let t = Tmp::new("huge-frame");
    let f = File::create(&t.0).unwrap();
    let mut w = Writer::new(f, &t.0, header());
    let names: Vec<(u32, u64, String)> = (0..70_000u64).map(|i| (1, i, "x".repeat(1000))).collect();
    w.frame(&Frame::Symbols(names));
    w.flush();
    assert!(
        w.failure().unwrap().contains("encoding a frame"),
        "{:?}",
        w.failure()
    );
    // What was written before still reads back whole.
    let r = replay(&t.0).unwrap();
    assert_eq!((r.recovery.frames, r.recovery.damage), (1, None));
}

#[test]
fn capture_paths_are_picked_by_extension() {
    assert!(is_capture_path(Path::new("/tmp/run.gpuprof")));
    assert!(!is_capture_path(Path::new("/tmp/run.json")));
    assert!(!is_capture_path(Path::new("/tmp/gpuprof")));
}

#[test]
fn the_libraries_frame_names_what_was_attached_and_the_last_list_wins() {
    let t = Tmp::new("libs");
    let lib = |path: &str, soname: &str, layer: &str, version: Option<&str>| {
        crate::model::snapshot::LibraryReport {
            path: path.into(),
            soname: soname.into(),
            layer: layer.into(),
            version: version.map(Into::into),
            build_id: Some("0123abcd".into()),
            probes: 9,
        }
    };
    let driver = lib(
        "/usr/lib/libcuda.so.535.261.03",
        "libcuda.so.1",
        "driver",
        Some("535.261.03"),
    );
    let runtime = lib(
        "/venv/lib/libcudart.so.12",
        "libcudart.so.12",
        "runtime",
        None,
    );
    {
        let f = File::create(&t.0).unwrap();
        let mut w = Writer::new(f, &t.0, header());
        w.frame(&Frame::Api(api().list().to_vec()));
        w.frame(&Frame::Libraries(vec![driver.clone()]));
        w.frame(&Frame::Libraries(vec![driver.clone(), runtime.clone()]));
        w.flush();
    }
    assert_eq!(replay(&t.0).unwrap().report.libraries, [driver, runtime]);
}

/// A native frame's name may be written after the stack that needs it (the daemon names native
/// frames on a thread of its own); a reader that names stacks (export) still names it, with
/// the names of the process that made the stack, not those of a later one given its pid.
#[test]
fn stacks_named_by_names_written_after_them_and_per_process() {
    use crate::enrich::stacks::{NativeFrame, StackKey, StackSym};
    use profiler_common::StackBody;
    let stack = |ts_ns| {
        let mut body = StackBody {
            of_kind: kind::LAUNCH,
            native_len: 1,
            period: 1,
            ..Default::default()
        };
        body.native[0] = 0x7000;
        encode(&Record {
            header: Header {
                kind: kind::STACK,
                api: 0,
                tgid: 200,
                tid: 200,
                ts_ns,
            },
            body,
        })
        .to_vec()
    };
    let named = |symbol: &str| {
        Frame::StackSyms(vec![StackSym::Native {
            tgid: 200,
            addr: 0x7000,
            frame: Some(NativeFrame {
                module: "trainer".into(),
                symbol: Some(symbol.into()),
                offset: 0x7000,
                source: Vec::new(),
            }),
        }])
    };
    let t = Tmp::new("late-names");
    let f = File::create(&t.0).unwrap();
    let mut w = Writer::new(f, &t.0, header());
    w.frame(&Frame::Api(api().list().to_vec()));
    w.record(&stack(2_000));
    w.flush();
    w.frame(&named("old_program_fn"));
    w.frame(&Frame::Retire { tgid: 200 });
    w.record(&stack(3_000));
    w.flush();
    w.frame(&named("new_program_fn"));
    w.flush();
    assert_eq!(w.failure(), None);
    drop(w);
    let mut seen = Vec::new();
    let damage = for_each_record_named(&t.0, |_, g, ev, stacks| {
        if let profiler_common::decode::Event::Stack(h, st) = ev {
            seen.push((g, stacks.labels(h.tgid, &StackKey::of(st))));
        }
        Ok::<(), std::convert::Infallible>(())
    })
    .unwrap();
    assert_eq!(damage, None);
    assert_eq!(
        seen,
        [
            (0, vec!["old_program_fn (trainer)".to_string()]),
            (1, vec!["new_program_fn (trainer)".to_string()])
        ]
    );
}

#[test]
fn a_memset_replays_as_one_and_schema_4_files_still_read() {
    use profiler_common::{CopyBody, dir, flags};
    let copy = |direction, bytes, ts_ns| {
        encode(&Record {
            header: Header {
                kind: kind::COPY,
                api: 0,
                tgid: 100,
                tid: 100,
                ts_ns,
            },
            body: CopyBody {
                dst: 0x7000,
                bytes,
                direction,
                flags: flags::ASYNC,
                ..Default::default()
            },
        })
        .to_vec()
    };
    let t = Tmp::new("memset");
    let f = File::create(&t.0).unwrap();
    let mut w = Writer::new(f, &t.0, header());
    w.frame(&Frame::Api(api().list().to_vec()));
    w.frame(&Frame::Process {
        tgid: 100,
        process: meta("python3"),
    });
    w.record(&copy(dir::MEMSET, 4096, 2_000));
    w.record(&copy(dir::H2D, 100, 2_100));
    w.flush();
    drop(w);
    let got = |bytes: &[u8]| {
        std::fs::write(&t.0, bytes).unwrap();
        let r = replay(&t.0).unwrap().report;
        r.processes[0]
            .copies
            .iter()
            .map(|c| (c.direction.clone(), c.calls, c.bytes, c.async_calls))
            .collect::<Vec<_>>()
    };
    let mut bytes = std::fs::read(&t.0).unwrap();
    assert_eq!(bytes[8..12], SCHEMA_VERSION.to_le_bytes());
    assert_eq!(
        got(&bytes),
        [("h2d".into(), 1, 100, 1), ("memset".into(), 1, 4096, 1)]
    );
    // The record layout did not change: a schema-4 file (which has no memsets) reads the same.
    bytes[8..12].copy_from_slice(&4u32.to_le_bytes());
    assert_eq!(
        got(&bytes),
        [("h2d".into(), 1, 100, 1), ("memset".into(), 1, 4096, 1)]
    );
}

/// A capture of one process (slurm job 4242) alone on GPU 0 for three NVML rounds: GPM's
/// first sample, then SM activity 60 and 70 %, HMMA 12.5 % (at 3, 4 and 5 µs).
pub(crate) fn write_gpm_capture(path: &Path) {
    use crate::nvml::gpm::{DeviceGpm, Figures, Gpm, State};
    let f = File::create(path).unwrap();
    let mut w = Writer::new(f, path, header());
    w.frame(&Frame::Api(api().list().to_vec()));
    w.frame(&Frame::Process {
        tgid: 100,
        process: meta("python3"),
    });
    w.record(&launch(100, 0, 0x4000, 2_000));
    w.flush();
    let gpm = |ts_ns, state| Gpm {
        ts_ns,
        devices: vec![DeviceGpm { index: 0, state }],
    };
    let figures = |sm| {
        State::Measured(Box::new(Figures {
            sm_activity_pct: Some(sm),
            tensor_hmma_pct: Some(12.5),
            ..Figures::default()
        }))
    };
    w.frame(&Frame::Nvml(gpm_round(3_000)));
    w.frame(&Frame::NvmlGpm(gpm(3_000, State::First)));
    w.frame(&Frame::Nvml(gpm_round(4_000)));
    w.frame(&Frame::NvmlGpm(gpm(4_000, figures(60.0))));
    w.frame(&Frame::Nvml(gpm_round(5_000)));
    w.frame(&Frame::NvmlGpm(gpm(5_000, figures(70.0))));
    w.flush();
    assert_eq!(w.failure(), None);
}

/// An NVML round: GPU 0, process 100 on it.
fn gpm_round(ts_ns: u64) -> crate::nvml::Sample {
    use crate::nvml::{DeviceSample, ProcessSample, Sample};
    Sample {
        ts_ns,
        devices: vec![DeviceSample {
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
        processes: vec![ProcessSample {
            device: 0,
            pid: 100,
            used_bytes: Some(1 << 30),
            sm_util: None,
            mem_util: None,
        }],
        mig: Default::default(),
        health: None,
        gpm: None,
    }
}

/// GPM frames replay into the GPU's figures and the job that held the GPU; a schema-5 file
/// (no GPM frames) reads as before, with no `gpm`.
#[test]
fn gpm_frames_replay_and_schema_5_files_still_read() {
    let t = Tmp::new("gpm");
    write_gpm_capture(&t.0);
    let r = replay(&t.0).unwrap().report;
    let g = r.gpus[0].gpm.as_ref().unwrap();
    assert_eq!((g.state.as_str(), g.samples), ("measured", 2));
    let avg = g.avg.as_ref().unwrap();
    assert_eq!(
        (avg.sm_activity_pct, avg.tensor_hmma_pct),
        (Some(65.0), Some(12.5))
    );
    assert_eq!(g.jobs.len(), 1);
    assert_eq!(
        (g.jobs[0].workload.as_str(), g.jobs[0].samples),
        ("slurm:4242", 2)
    );
    let j = &r.jobs[0];
    assert_eq!(
        (
            j.gpm.len(),
            j.gpm[0].gpu,
            j.gpm[0].samples,
            j.gpm[0].source.as_str()
        ),
        (1, 0, 2, "measured")
    );
    assert_eq!(j.gpm[0].avg.sm_activity_pct, Some(65.0));
    assert_eq!(gpm_samples(&t.0).unwrap().len(), 3);
    // A file without GPM frames, as schema 5 wrote it.
    let f = File::create(&t.0).unwrap();
    let mut w = Writer::new(f, &t.0, header());
    w.frame(&Frame::Nvml(gpm_round(3_000)));
    w.flush();
    drop(w);
    let mut bytes = std::fs::read(&t.0).unwrap();
    bytes[8..12].copy_from_slice(&5u32.to_le_bytes());
    std::fs::write(&t.0, &bytes).unwrap();
    let r = replay(&t.0).unwrap();
    assert!(r.recovery.damage.is_none(), "{:?}", r.recovery.damage);
    assert_eq!(r.report.gpus[0].gpm, None);
    assert!(
        !serde_json::to_string(&r.report.gpus[0])
            .unwrap()
            .contains("gpm")
    );
}

/// Schema 7: NCCL records and the `nccl` layer in the API table come back from a file, and
/// `--device N` keeps a communicator's creation while it drops other devices' collectives.
#[test]
fn nccl_records_and_their_layer_round_trip() {
    use profiler_common::nccl::{NcclBody, call, nflags};
    let t = Tmp::new("nccl");
    let mut api = api();
    let init = api.intern("ncclCommInitRank", Layer::Nccl);
    let ar = api.intern("ncclAllReduce", Layer::Nccl);
    let rec = |api: u16, ts: u64, b: NcclBody| {
        encode(&Record {
            header: Header {
                kind: kind::NCCL,
                api: api.into(),
                tgid: 100,
                tid: 100,
                ts_ns: ts,
            },
            body: b,
        })
        .to_vec()
    };
    let mut made = NcclBody {
        comm: 0x77,
        call: call::INIT_RANK,
        rank: 1,
        nranks: 2,
        flags: nflags::HAS_ID | nflags::HAS_RETURN | profiler_common::device::with(0, 2),
        ..NcclBody::default()
    };
    made.id = [3; 128];
    let coll = |dev: u32| NcclBody {
        comm: 0x77,
        call: call::ALL_REDUCE,
        count: 10,
        datatype: 7,
        redop: 0,
        flags: profiler_common::device::with(0, dev),
        ..NcclBody::default()
    };
    {
        let f = File::create(&t.0).unwrap();
        let mut w = Writer::new(f, &t.0, header());
        w.frame(&Frame::Api(api.list().to_vec()));
        w.frame(&Frame::Process {
            tgid: 100,
            process: meta("python3"),
        });
        w.record(&rec(init, 2_000, made));
        w.record(&rec(ar, 2_001, coll(2)));
        w.record(&rec(ar, 2_002, coll(2)));
        w.record(&rec(ar, 2_003, coll(1)));
        w.flush();
        assert_eq!(w.failure(), None);
    }
    let r = replay(&t.0).unwrap();
    let p = &r.report.processes[0];
    let calls: Vec<(&str, u64)> = p.api.iter().map(|a| (a.name.as_str(), a.calls)).collect();
    assert_eq!(calls, [("ncclAllReduce", 3), ("ncclCommInitRank", 1)]);
    let n = p.nccl.as_ref().unwrap();
    assert_eq!((n.calls, n.bytes), (3, 120));
    let c = &n.communicators[0];
    assert_eq!((c.rank, c.nranks, c.device), (Some(1), Some(2), Some(1)));
    assert_eq!(
        c.id.as_deref(),
        Some(format!("{:016x}", crate::model::nccl::comm_id(&[3; 128])).as_str())
    );
    // Device 1 (wire 2): the creation and two collectives; device 0's one is left out.
    let one = replay_selecting(
        &t.0,
        |ev| crate::model::devices::selected(ev, 1),
        |_, _, _| {},
    )
    .unwrap();
    let n = one.report.processes[0].nccl.as_ref().unwrap();
    assert_eq!((n.calls, n.communicators[0].rank), (2, Some(1)));
}

/// A capture of process 100 (thread ids as the kernel's: `Tids::Same`): one unnamed launch on
/// thread 100 at 1,000 ns, then the injection library's state, one kernel name (id 1: `_Z1kv`)
/// and one batch: the launch call (cuLaunchKernel, correlation 11, thread 100, CPU 1,010..1,100),
/// a 2 µs kernel on device 0, CUPTI stream 7, and a 500 ns device-to-host copy of 4 KiB on
/// stream 3 (GPU times 10..2,010 and 10..510 ns).
pub(crate) fn write_gpu_capture(path: &Path) {
    write_gpu_capture_with(path, Some(crate::model::gpu_join::Tids::Same));
}

/// [`write_gpu_capture`] with `tids` as the process's thread id map (`None`: no such frame).
pub(crate) fn write_gpu_capture_with(path: &Path, tids: Option<crate::model::gpu_join::Tids>) {
    write_gpu_capture_full(path, tids, false);
}

/// [`write_gpu_capture_with`], with `early`: one more launch on thread 100 at 900 ns, which
/// no launch call claims (it came before the library enabled them).
pub(crate) fn write_gpu_capture_full(
    path: &Path,
    tids: Option<crate::model::gpu_join::Tids>,
    early: bool,
) {
    use profiler_common::gpu::{
        BATCH, GpuActivity, GpuActivityBody, GpuNameBody, GpuStateBody, activity, copykind, state,
    };
    let mut api = api();
    let site = api.intern("gpuprofd_inject_activity", Layer::Inject);
    let hdr = |k: u32, ts: u64| Header {
        kind: k,
        api: site.into(),
        tgid: 100,
        tid: 101,
        ts_ns: ts,
    };
    let mut items = [GpuActivity::default(); BATCH];
    items[0] = GpuActivity {
        kind: activity::API,
        name: profiler_common::gpu::cbid::CU_LAUNCH_KERNEL,
        correlation: 11,
        start_ns: 1_010,
        end_ns: 1_100,
        bytes: 100,
        ..GpuActivity::default()
    };
    items[1] = GpuActivity {
        kind: activity::KERNEL,
        name: 1,
        stream: 7,
        correlation: 11,
        start_ns: 10,
        end_ns: 2_010,
        ..GpuActivity::default()
    };
    items[2] = GpuActivity {
        kind: activity::MEMCPY,
        copy_kind: copykind::DTOH,
        stream: 3,
        correlation: 12,
        start_ns: 10,
        end_ns: 510,
        bytes: 4096,
        ..GpuActivity::default()
    };
    let name = GpuNameBody::new(1, b"_Z1kv");
    let f = File::create(path).unwrap();
    let mut w = Writer::new(f, path, header());
    w.frame(&Frame::Api(api.list().to_vec()));
    w.frame(&Frame::Process {
        tgid: 100,
        process: meta("python3"),
    });
    if let Some(tids) = tids {
        w.frame(&Frame::Tids { tgid: 100, tids });
    }
    if early {
        w.record(&launch(100, 0, 0x1000, 900));
    }
    w.record(&launch(100, 0, 0x1000, 1_000));
    w.record(encode(&Record {
        header: hdr(kind::GPU_STATE, 1_500),
        body: GpuStateBody {
            state: state::ENABLED,
            _pad: 0,
            detail: 130_000,
        },
    }));
    w.record(encode(&Record {
        header: hdr(kind::GPU_NAME, 1_600),
        body: name,
    }));
    w.record(encode(&Record {
        header: hdr(kind::GPU_ACTIVITY, 1_700),
        body: GpuActivityBody {
            n: 3,
            _pad: 0,
            items,
        },
    }));
    w.flush();
    assert_eq!(w.failure(), None);
}

/// Schema 8: the injection library's records (GPU activity, names, state) and the `inject`
/// layer in the API table come back from a file, joined to the kernel rows; schema 9: the
/// kernel record joins its launch through the launch call and the `Tids` frame.
#[test]
fn gpu_activity_records_and_their_layer_round_trip() {
    let t = Tmp::new("gpu-activity");
    write_gpu_capture(&t.0);
    let bytes = std::fs::read(&t.0).unwrap();
    assert_eq!(bytes[8..12], SCHEMA_VERSION.to_le_bytes());
    let r = replay(&t.0).unwrap();
    let p = &r.report.processes[0];
    let g = &p.gpu_time;
    assert_eq!(
        (g.basis.as_str(), g.state.as_deref(), g.kernels, g.kernel_ns),
        ("measured", Some("enabled"), 1, 2_000)
    );
    assert_eq!(
        (g.copies[0].kind.as_str(), g.copies[0].bytes),
        ("d2h", 4096)
    );
    let k: Vec<(&str, u64, Option<u64>)> = p
        .kernels
        .iter()
        .map(|k| {
            (
                k.mangled.as_deref().unwrap_or(""),
                k.calls,
                k.gpu_time.as_ref().map(|g| g.total_ns),
            )
        })
        .collect();
    // The unnamed launch keeps its row; the kernel only CUPTI named gets one of its own.
    assert_eq!(k, [("", 1, None), ("_Z1kv", 0, Some(2_000))]);
    // The launch call is no GPU record; the kernel joined the launch, the copy takes no part.
    assert_eq!(
        (
            g.records,
            g.calls,
            g.joined,
            g.unjoined,
            g.unjoined_by.len()
        ),
        (2, 1, 1, 0, 0)
    );
    assert_eq!(
        r.tids.get(&(100, 0)),
        Some(&crate::model::gpu_join::Tids::Same)
    );
}

/// A capture without the thread id map (a process gone before it was read, or a file of
/// schema 8) joins nothing: the kernel record is counted unjoined, not guessed.
#[test]
fn replayed_records_without_a_thread_map_are_unjoined() {
    let t = Tmp::new("gpu-no-tids");
    write_gpu_capture_with(&t.0, None);
    let r = replay(&t.0).unwrap();
    let g = &r.report.processes[0].gpu_time;
    assert_eq!((g.calls, g.joined, g.unjoined), (1, 0, 1));
    assert_eq!(
        g.unjoined_by,
        BTreeMap::from([("thread_not_mapped".to_owned(), 1)])
    );
    // With the map of another namespace, the launch's thread is found through it.
    let t = Tmp::new("gpu-ns-tids");
    let map = crate::model::gpu_join::Tids::Map(BTreeMap::from([(100, 100)]));
    write_gpu_capture_with(&t.0, Some(map));
    let g = replay(&t.0).unwrap().report.processes[0].gpu_time.clone();
    assert_eq!((g.joined, g.unjoined), (1, 0));
}

/// A process's device-numbering environment travels in the file: replayed, its device 0 is
/// the node GPU its `CUDA_VISIBLE_DEVICES` names.
#[test]
fn the_device_numbering_environment_is_kept() {
    let t = Tmp::new("gpuenv");
    let f = File::create(&t.0).unwrap();
    let mut w = Writer::new(f, &t.0, header());
    w.frame(&Frame::Api(api().list().to_vec()));
    w.frame(&Frame::Nvml(crate::nvml::Sample {
        ts_ns: 1_500,
        devices: (0..2)
            .map(|i| crate::nvml::DeviceSample {
                index: i,
                name: "NVIDIA H200".into(),
                uuid: format!("GPU-{i}"),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }));
    w.frame(&Frame::Process {
        tgid: 100,
        process: meta("python3"),
    });
    let env = crate::enrich::gpu_env::GpuEnv {
        cuda_visible: Some("1".into()),
        ..Default::default()
    };
    w.frame(&Frame::GpuEnv {
        tgid: 100,
        env: env.clone(),
    });
    let on_device_0 = Record {
        header: Header {
            kind: kind::LAUNCH,
            api: 0,
            tgid: 100,
            tid: 100,
            ts_ns: 2_000,
        },
        body: LaunchBody {
            func: 0x4000,
            flags: profiler_common::device::with(0, profiler_common::device::wire(0)),
            ..Default::default()
        },
    };
    w.record(encode(&on_device_0));
    w.flush();
    assert_eq!(w.failure(), None);
    let r = replay(&t.0).unwrap();
    let p = &r.report.processes[0];
    assert_eq!(p.devices.len(), 1);
    assert_eq!(
        (p.devices[0].device, p.devices[0].nvml_gpu),
        (Some(0), Some(1))
    );
}

/// Schema 10: the clock pairs after the header and before the end come back in order, and a
/// file without them (schema 9) replays with none.
#[test]
fn clock_pairs_round_trip_and_older_files_have_none() {
    let t = Tmp::new("clocks");
    let f = File::create(&t.0).unwrap();
    let mut w = Writer::new(f, &t.0, header());
    let first = crate::sys::clock::WallPair {
        unix_ns: 1_795_417_200_000_000_500,
        monotonic_ns: 1_500,
        uncertainty_ns: 40,
    };
    let last = crate::sys::clock::WallPair {
        unix_ns: 1_795_417_210_000_004_500,
        monotonic_ns: 10_000_001_500,
        uncertainty_ns: 60,
    };
    w.frame(&Frame::Clock(first));
    w.frame(&Frame::Api(api().list().to_vec()));
    w.clock();
    w.frame(&Frame::Clock(last));
    w.frame(&Frame::End(End {
        duration_ns: 10_000_000_000,
        drops: BTreeMap::new(),
        submitted: BTreeMap::new(),
        stop_reason: "duration".into(),
    }));
    w.flush();
    let r = replay(&t.0).unwrap();
    assert!(r.recovery.complete);
    assert_eq!(r.clocks.len(), 3);
    assert_eq!((r.clocks[0], r.clocks[2]), (first, last));
    assert_eq!(last.offset_ns() - first.offset_ns(), 4_000);
    // The pair read now: its monotonic half is this machine's clock, its wall half today's.
    let now = r.clocks[1];
    assert!(
        now.monotonic_ns > 0 && now.uncertainty_ns < 1_000_000_000,
        "{now:?}"
    );

    // A file without clock frames.
    let t = Tmp::new("no-clocks");
    let f = File::create(&t.0).unwrap();
    let mut w = Writer::new(f, &t.0, header());
    w.frame(&Frame::Api(api().list().to_vec()));
    w.flush();
    assert_eq!(replay(&t.0).unwrap().clocks, []);
}
