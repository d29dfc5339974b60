//! Golden traces: `gpuprofd export` of one synthetic capture that makes every kind of event the
//! exporter writes, compared byte for byte with the files in `src/output/trace/fixtures/`
//! (first written by the exporter of the time, before its events were typed; a refactoring of
//! the exporter must leave them as they are). `GPUPROFD_BLESS=1` rewrites them: only for a
//! change of the trace that is meant, and said in the commit.
//!
//! The capture: three processes (one pid reused, one exited, jobs with and without a name),
//! two threads in one, launches through the runtime and the driver (named by a Symbols frame,
//! by a Name record, and unknown) on the default stream and on others, copies timed and not, a
//! memset, syncs timed, untimed, GPU-side and failed, allocations and frees (a failed one, an unknown
//! pointer), a graph launch, a stack named with characters JSON escapes, a counted launch
//! record, an exec, an exit, NVML rounds before, inside and after the window, a training loop
//! (steps), a burst of launches longer than the Perfetto writer holds slices for, and a call
//! an hour in.

use super::run;
use crate::api::{ApiTable, Layer};
use crate::enrich::stacks::{NativeFrame, StackSym};
use crate::nvml::{DeviceSample, ProcessSample, Sample};
use crate::output::trace::{ExportArgs, ExportFormat, JSON_LIMIT_BYTES};
use crate::store::{End, FileHeader, Frame, StoredJob, StoredProcess, Writer};
use profiler_common::decode::encode;
use profiler_common::{
    CopyBody, ExitBody, GraphBody, Header, LaunchBody, LaunchesBody, MapBody, MemBody, NameBody,
    Record, StackBody, SyncBody, dir, flags, kind, memkind, memop, namesrc,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The capture's start (CLOCK_MONOTONIC ns); record times below are offsets from it.
const T0: u64 = 5_000_000;

// API ids, in the order `api_table` interns them.
const LAUNCH_RT: u32 = 0;
const LAUNCH_DRV: u32 = 1;
const MEMCPY_ASYNC: u32 = 2;
const MEMCPY: u32 = 3;
const STREAM_SYNC: u32 = 4;
const EVENT_SYNC: u32 = 5;
const MALLOC: u32 = 6;
const FREE: u32 = 7;
const GRAPH_LAUNCH: u32 = 8;
const DEVICE_SYNC: u32 = 9;
const MODULE_GET_FUNCTION: u32 = 10;
const MEMSET: u32 = 11;

fn api_table() -> ApiTable {
    let mut t = ApiTable::new();
    for (name, layer) in [
        ("cudaLaunchKernel", Layer::Runtime),
        ("cuLaunchKernel", Layer::Driver),
        ("cudaMemcpyAsync", Layer::Runtime),
        ("cudaMemcpy", Layer::Runtime),
        ("cudaStreamSynchronize", Layer::Runtime),
        ("cudaEventSynchronize", Layer::Runtime),
        ("cudaMalloc", Layer::Runtime),
        ("cudaFree", Layer::Runtime),
        ("cudaGraphLaunch", Layer::Runtime),
        ("cudaDeviceSynchronize", Layer::Runtime),
        ("cuModuleGetFunction", Layer::Driver),
        ("cudaMemset", Layer::Runtime),
    ] {
        t.intern(name, layer);
    }
    t
}

fn rec<B: Copy>(kind: u32, api: u32, tgid: u32, tid: u32, at: u64, body: B) -> Vec<u8> {
    let header = Header {
        kind,
        api,
        tgid,
        tid,
        ts_ns: T0 + at,
    };
    encode(&Record { header, body }).to_vec()
}

fn launch(api: u32, tgid: u32, tid: u32, at: u64, func: u64, stream: u64) -> Vec<u8> {
    let body = LaunchBody {
        func,
        stream,
        grid: [256, 2, 1],
        block: [32, 8, 1],
        shared_bytes: 4096,
        ..Default::default()
    };
    rec(kind::LAUNCH, api, tgid, tid, at, body)
}

fn copy(api: u32, tgid: u32, at: u64, body: CopyBody) -> Vec<u8> {
    rec(kind::COPY, api, tgid, tgid, at, body)
}

fn sync(api: u32, tgid: u32, at: u64, handle: u64, dur_ns: u64, ret: i32, fl: u32) -> Vec<u8> {
    let body = SyncBody {
        handle,
        dur_ns,
        ret,
        flags: fl,
    };
    rec(kind::SYNC, api, tgid, tgid, at, body)
}

fn mem(api: u32, tgid: u32, at: u64, op: u32, ptr: u64, bytes: u64, ret: i32) -> Vec<u8> {
    let body = MemBody {
        ptr,
        bytes,
        dur_ns: 2_500,
        stream: 0,
        op,
        mem_kind: memkind::DEVICE,
        ret,
        flags: flags::HAS_RETURN,
    };
    rec(kind::MEM, api, tgid, tgid, at, body)
}

fn name(tgid: u32, at: u64, handle: u64, mangled: &str) -> Vec<u8> {
    let mut body = NameBody {
        handle,
        scope: 0xbeef,
        source: namesrc::MODULE_GET_FUNCTION,
        len: mangled.len() as u32,
        flags: 0,
        _pad: 0,
        name: [0; profiler_common::NAME_CAP],
    };
    body.name[..mangled.len()].copy_from_slice(mangled.as_bytes());
    rec(kind::NAME, MODULE_GET_FUNCTION, tgid, tgid, at, body)
}

fn comm(s: &str) -> [u8; 16] {
    let mut c = [0; 16];
    c[..s.len()].copy_from_slice(s.as_bytes());
    c
}

fn process(comm: &str, job: Option<(&str, Option<&str>)>) -> StoredProcess {
    StoredProcess {
        comm: comm.into(),
        cmdline: format!("{comm} --train"),
        exited: false,
        job: job.map(|(id, name)| StoredJob {
            kind: "slurm".into(),
            id: id.into(),
            step: Some("0".into()),
            container: None,
            name: name.map(Into::into),
            namespace: None,
            cgroup: format!("/system.slice/slurmstepd.scope/job_{id}/step_0"),
        }),
        start_time: 77,
    }
}

fn nvml(at: u64, util: Option<u32>, held: Option<u64>) -> Frame {
    let device = |index| DeviceSample {
        index,
        name: "NVIDIA H100".into(),
        uuid: format!("GPU-{index}"),
        gpu_util: util,
        mem_util: util.map(|u| u / 2).filter(|_| index == 0),
        mem_used: Some(1 << 30),
        mem_total: Some(80 << 30),
        sm_clock_mhz: Some(1980),
        power_mw: Some(350_000),
        temp_c: Some(61),
    };
    let proc = |device, pid, used_bytes| ProcessSample {
        device,
        pid,
        used_bytes,
        sm_util: None,
        mem_util: None,
    };
    Frame::Nvml(Sample {
        ts_ns: T0 + at,
        devices: vec![device(0), device(1)],
        processes: vec![
            proc(0, 100, held),
            proc(1, 100, None),
            proc(0, 200, Some(3 << 30)),
            // Not a captured process.
            proc(1, 999, Some(1 << 20)),
        ],
        mig: Default::default(),
        health: None,
        gpm: None,
    })
}

/// Process 100: a training loop of five steps on two threads and two streams, then the rest.
fn python(w: &mut Writer) {
    w.frame(&Frame::Process {
        tgid: 100,
        process: process("python3", Some(("4242", None))),
    });
    w.record(&name(100, 500, 0x5000, "_Z7softmaxPKfPfi"));
    w.record(&mem(MALLOC, 100, 1_000, memop::ALLOC, 0xa000, 1 << 20, 0));
    // Out of memory: no pointer, nothing live changes.
    w.record(&mem(MALLOC, 100, 1_500, memop::ALLOC, 0, 1 << 40, 2));
    for i in 0..5u64 {
        let at = 10_000 + i * 100_001;
        w.record(&launch(LAUNCH_RT, 100, 100, at, 0x4000, 0));
        w.record(&launch(LAUNCH_DRV, 100, 101, at + 333, 0x5000, 0x7f00));
        let h2d = CopyBody {
            bytes: 4096,
            stream: 0x7f00,
            direction: dir::H2D,
            flags: flags::ASYNC,
            ..Default::default()
        };
        w.record(&copy(MEMCPY_ASYNC, 100, at + 1_000, h2d));
        w.record(&mem(
            MALLOC,
            100,
            at + 1_500,
            memop::ALLOC,
            0xb000 + i,
            1000 + i,
            0,
        ));
        let fl = flags::HAS_RETURN;
        w.record(&sync(
            STREAM_SYNC,
            100,
            at + 2_000,
            0x7f00,
            12_345 + i,
            0,
            fl,
        ));
        if i == 2 {
            w.frame(&nvml(at + 2_100, Some(87), Some(2 << 30)));
        }
    }
    let d2h = CopyBody {
        bytes: 8192,
        stream: 0,
        dur_ns: 7_777,
        direction: dir::D2H,
        flags: flags::HAS_RETURN,
        ..Default::default()
    };
    w.record(&copy(MEMCPY, 100, 600_000, d2h));
    w.record(&mem(FREE, 100, 600_100, memop::FREE, 0xa000, 0, 0));
    w.record(&mem(FREE, 100, 600_200, memop::FREE, 0xdead, 0, 0));
    let graph = GraphBody {
        graph_exec: 0x6000,
        stream: 0x7f00,
    };
    w.record(&rec(kind::GRAPH, GRAPH_LAUNCH, 100, 101, 600_300, graph));
    let gpu_side = flags::GPU_SIDE;
    w.record(&sync(EVENT_SYNC, 100, 600_400, 0xe0, 0, 0, gpu_side));
    w.record(&sync(
        DEVICE_SYNC,
        100,
        600_500,
        0,
        0,
        -1,
        flags::HAS_RETURN,
    ));
    w.frame(&Frame::StackSyms(vec![StackSym::Native {
        tgid: 100,
        addr: 0x7000,
        frame: Some(NativeFrame {
            module: "python3".into(),
            symbol: Some("op<\"x\">\\ü".into()),
            offset: 0x7000,
            source: Vec::new(),
        }),
    }]));
    let mut stack = StackBody {
        of_kind: kind::LAUNCH,
        native_len: 2,
        period: 8,
        ..Default::default()
    };
    stack.native[0] = 0x7000;
    stack.native[1] = 0x7100;
    w.record(&rec(kind::STACK, LAUNCH_RT, 100, 100, 600_600, stack));
    let counted = LaunchesBody {
        func: 0x4000,
        stream: 0x7f00,
        count: 1000,
        grid: [1, 1, 1],
        block: [64, 1, 1],
        ..Default::default()
    };
    w.record(&rec(kind::LAUNCHES, LAUNCH_RT, 100, 100, 600_700, counted));
    let map = MapBody {
        addr: 0x7000_0000,
        len: 4096,
    };
    w.record(&rec(kind::MAP, 0, 100, 100, 600_800, map));
    let exec = ExitBody {
        comm: comm("python3.11"),
        uid: 1000,
        _reserved: 0,
    };
    w.record(&rec(kind::EXEC, 0, 100, 100, 600_900, exec));
    // A blocking memset: a copy of direction memset, named by its API alone.
    let memset = CopyBody {
        dst: 0xa000,
        bytes: 65536,
        dur_ns: 2_222,
        direction: dir::MEMSET,
        flags: flags::HAS_RETURN,
        ..Default::default()
    };
    w.record(&copy(MEMSET, 100, 610_000, memset));
}

/// Process 200, twice: the first exits and its pid is reused.
fn trainers(w: &mut Writer) {
    w.frame(&Frame::Process {
        tgid: 200,
        process: process("trainer", Some(("4343", Some("big \"run\"")))),
    });
    w.record(&mem(MALLOC, 200, 20_000, memop::ALLOC, 0xc000, 5 << 20, 0));
    w.record(&launch(LAUNCH_RT, 200, 200, 20_100, 0x9000, 0));
    let exit = ExitBody {
        comm: comm("trainer"),
        uid: 1000,
        _reserved: 0,
    };
    w.record(&rec(kind::EXIT, 0, 200, 200, 30_000, exit));
    w.frame(&Frame::Retire { tgid: 200 });
    w.frame(&Frame::Process {
        tgid: 200,
        process: process("trainer2", Some(("4343", Some("big \"run\"")))),
    });
    w.record(&mem(MALLOC, 200, 250_000, memop::ALLOC, 0xc000, 7 << 20, 0));
    w.record(&launch(LAUNCH_RT, 200, 201, 250_100, 0x9000, 0x1));
    w.frame(&Frame::Exited { tgid: 200 });
}

/// Process 300: more launches in a row than the Perfetto writer holds slices for.
fn burst(w: &mut Writer) {
    w.frame(&Frame::Process {
        tgid: 300,
        process: process("burst", None),
    });
    for i in 0..70 {
        w.record(&launch(LAUNCH_RT, 300, 300, 400_000 + 7 * i, 0x4000, 0x300));
    }
    // An hour in, a long copy: times far from the start, in ns to the last digit.
    let late = CopyBody {
        bytes: 3,
        stream: 0x300,
        dur_ns: 1_234_567_891,
        direction: dir::D2D,
        flags: flags::HAS_RETURN | flags::ASYNC,
        ..Default::default()
    };
    w.record(&copy(MEMCPY_ASYNC, 300, 3_600_000_123_457, late));
}

fn header() -> FileHeader {
    FileHeader {
        writer: "gpuprofd test".into(),
        host: "node7".into(),
        kernel: "6.18.0".into(),
        started_at_unix_ns: 1_795_417_200_000_000_000,
        started_at_monotonic_ns: T0,
        target: "all CUDA processes".into(),
    }
}

/// The closing frame of a capture stopped by the user 800 µs in.
fn end() -> Frame {
    Frame::End(End {
        duration_ns: 800_000,
        drops: BTreeMap::new(),
        submitted: BTreeMap::new(),
        stop_reason: "interrupted".into(),
    })
}

fn write_capture(path: &Path) {
    let f = std::fs::File::create(path).unwrap();
    let mut w = Writer::new(f, path, header());
    w.frame(&Frame::Api(api_table().list().to_vec()));
    w.frame(&nvml(0, Some(5), None));
    python(&mut w);
    trainers(&mut w);
    burst(&mut w);
    w.flush();
    w.frame(&nvml(700_000, None, Some(1 << 31)));
    w.frame(&Frame::Symbols(vec![(100, 0x4000, "_Z4gemmPfi".into())]));
    w.frame(&end());
    w.flush();
    assert_eq!(w.failure(), None);
}

/// A folder of its own, removed at the end.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("gpuprofd-golden-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        let d = Dir(p);
        write_capture(&d.capture());
        d
    }
    fn capture(&self) -> PathBuf {
        self.0.join("capture.gpuprof")
    }
    fn args(&self, output: &str, format: Option<ExportFormat>) -> ExportArgs {
        ExportArgs {
            files: vec![self.capture()],
            format,
            output: self.0.join(output),
            from: None,
            to: None,
            json_limit: JSON_LIMIT_BYTES,
            max_size: crate::output::trace::guard::DEFAULT_MAX_BYTES,
            pid: None,
            rank: None,
        }
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/output/trace/fixtures")
        .join(name)
}

/// Asserts that `written` holds exactly the fixture `name` (rewriting it first when blessing).
fn assert_golden(written: &Path, name: &str) {
    let got = std::fs::read(written).unwrap();
    if std::env::var_os("GPUPROFD_BLESS").is_some() {
        std::fs::write(fixture(name), &got).unwrap();
    }
    let want = std::fs::read(fixture(name)).unwrap();
    assert!(
        got == want,
        "{} differs from the golden {name} ({} bytes written, {} expected)",
        written.display(),
        got.len(),
        want.len()
    );
}

/// The window: 150 µs to 300.5 µs after the start (part of the steps and NVML rounds).
fn window(a: &mut ExportArgs) {
    a.from = Some(150e-6);
    a.to = Some(300.5e-6);
}

#[test]
fn the_chrome_trace_is_the_golden_one() {
    let d = Dir::new("chrome");
    let a = d.args("trace.json", Some(ExportFormat::Chrome));
    assert_eq!(run(&a), 0);
    assert_golden(&a.output, "full.json");
}

#[test]
fn the_perfetto_trace_is_the_golden_one() {
    let d = Dir::new("perfetto");
    let a = d.args("trace.pftrace", Some(ExportFormat::Perfetto));
    assert_eq!(run(&a), 0);
    assert_golden(&a.output, "full.pftrace");
}

#[test]
fn a_window_s_traces_are_the_golden_ones() {
    let d = Dir::new("window");
    let mut a = d.args("window.json", Some(ExportFormat::Chrome));
    window(&mut a);
    assert_eq!(run(&a), 0);
    assert_golden(&a.output, "window.json");
    let mut a = d.args("window.pftrace", Some(ExportFormat::Perfetto));
    window(&mut a);
    assert_eq!(run(&a), 0);
    assert_golden(&a.output, "window.pftrace");
}

#[test]
fn the_format_follows_the_output_s_name() {
    let d = Dir::new("named");
    let a = d.args("trace.perfetto-trace", None);
    assert_eq!(run(&a), 0);
    assert_golden(&a.output, "full.pftrace");
    let a = d.args("trace.txt", None);
    assert_eq!(run(&a), 0);
    assert_golden(&a.output, "full.json");
}

#[test]
fn past_the_json_limit_perfetto_s_format_is_written_instead() {
    let d = Dir::new("limit");
    // The limit counts every event and the separator before it, not the opening
    // `{"displayTimeUnit":"ns","traceEvents":[` (39 bytes) nor the closing `]}` and newline.
    let counted = std::fs::metadata(fixture("full.json")).unwrap().len() - 39 - 1;
    // Just enough: the JSON is written.
    let mut a = d.args("fits.json", None);
    a.json_limit = counted;
    assert_eq!(run(&a), 0);
    assert_golden(&a.output, "full.json");
    // One byte less: the JSON is removed and the Perfetto trace written beside it.
    let mut a = d.args("big.json", None);
    a.json_limit = counted - 1;
    assert_eq!(run(&a), 0);
    assert!(!a.output.exists());
    assert_golden(&a.output.with_extension("pftrace"), "full.pftrace");
    // An explicit format has no limit.
    let mut a = d.args("forced.json", Some(ExportFormat::Chrome));
    a.json_limit = 10;
    assert_eq!(run(&a), 0);
    assert_golden(&a.output, "full.json");
}

#[test]
fn exit_codes_say_what_went_wrong() {
    let d = Dir::new("codes");
    // An output that cannot be created.
    let a = d.args("missing/trace.json", Some(ExportFormat::Chrome));
    assert_eq!(run(&a), 4);
    // An input that is not a capture.
    let mut a = d.args("trace.json", Some(ExportFormat::Perfetto));
    a.files = vec![d.0.join("nothing.gpuprof")];
    assert_eq!(run(&a), super::super::report::EXIT_UNREADABLE);
    // A capture cut in its last frame: exported up to the cut, and said.
    let cut = d.0.join("cut.gpuprof");
    let bytes = std::fs::read(d.capture()).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() - 3]).unwrap();
    let mut a = d.args("cut.json", Some(ExportFormat::Chrome));
    a.files = vec![cut];
    assert_eq!(run(&a), super::super::report::EXIT_DAMAGED);
    // Before is not before after.
    let mut a = d.args("none.json", None);
    a.from = Some(2.0);
    a.to = Some(1.0);
    assert_eq!(run(&a), 2);
}

/// Past `--max-size`, the window around the slowest training step (pid 100's fourth, 0.1 ms):
/// the first 100 ms bin, where everything but the late copy is. The copy an hour in is left
/// out; without the guard (`--max-size 0`) it is there.
#[test]
fn past_the_max_size_the_busiest_window_is_written() {
    use crate::output::trace::guard;
    let d = Dir::new("guard");
    let w = guard::choose(&d.capture(), 80 * guard::BYTES_PER_RECORD, None)
        .unwrap()
        .expect("the capture is over 80 records");
    assert_eq!(
        (w.from_s, w.to_s, w.kept, w.records - w.kept),
        (0.0, 0.1, w.records - 1, 1)
    );
    assert_eq!(w.around, "the slowest step (step 4 of pid 100, 0.100 ms)");
    // It fits whole under a larger limit.
    assert_eq!(
        guard::choose(&d.capture(), w.records * guard::BYTES_PER_RECORD, None).unwrap(),
        None
    );
    let events = |a: &ExportArgs| -> Vec<serde_json::Value> {
        assert_eq!(run(a), 0);
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&a.output).unwrap()).unwrap();
        v["traceEvents"].as_array().unwrap().clone()
    };
    // The copy an hour in (3.6e9 µs).
    let late = |ev: &[serde_json::Value]| {
        ev.iter()
            .any(|e| e["cat"] == "copy" && e["ts"].as_f64().unwrap() > 1e9)
    };
    let mut a = d.args("guarded.json", Some(ExportFormat::Chrome));
    a.max_size = 80 * guard::BYTES_PER_RECORD;
    assert!(!late(&events(&a)));
    a.max_size = 0;
    a.output = d.0.join("whole.json");
    assert!(late(&events(&a)));
}

/// Two nodes' captures of one job, the second started 2 s later: sized together, the window
/// around the slowest step (the second node's: the steps tie, and the later wins) keeps the
/// second node's calls, 2 s into the trace, and leaves out the first's.
#[test]
fn past_the_max_size_two_captures_keep_one_window_of_both() {
    use crate::output::trace::guard;
    let d = Dir::new("guard-two");
    let b = d.0.join("b.gpuprof");
    let f = std::fs::File::create(&b).unwrap();
    let mut hb = header();
    hb.host = "node8".into();
    hb.started_at_unix_ns += 2_000_000_000;
    let mut w = Writer::new(f, &b, hb);
    w.frame(&Frame::Api(api_table().list().to_vec()));
    python(&mut w);
    trainers(&mut w);
    burst(&mut w);
    w.frame(&end());
    w.flush();
    let one = guard::choose(&d.capture(), 0, None)
        .unwrap()
        .unwrap()
        .records;
    let mut a = d.args("two.json", Some(ExportFormat::Chrome));
    a.files.push(b);
    a.max_size = 80 * guard::BYTES_PER_RECORD;
    let sources: Vec<guard::Source> = [(0, "node7"), (2_000_000_000, "node8")]
        .into_iter()
        .zip(&a.files)
        .map(|((shift_ns, node), path)| guard::Source {
            path,
            shift_ns,
            only: None,
            label: node.into(),
        })
        .collect();
    let w = guard::choose_of(&sources, a.max_size).unwrap().unwrap();
    assert_eq!(
        (w.from_s, w.to_s, w.records, w.kept),
        (2.0, 2.1, 2 * one, one - 1)
    );
    assert_eq!(
        w.around,
        "the slowest step (step 4 of pid 100 on node8, 0.100 ms)"
    );
    assert_eq!(run(&a), 0);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&a.output).unwrap()).unwrap();
    let launches_of = |node: &str| {
        let pids: Vec<u64> = v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| {
                e["name"] == "process_name"
                    && e["args"]["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with(node))
            })
            .map(|e| e["pid"].as_u64().unwrap())
            .collect();
        v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["cat"] == "launch" && pids.contains(&e["pid"].as_u64().unwrap()))
            .count()
    };
    // Every launch event of the second node (82 launches on their thread and stream, and one
    // instant of counted launches: as in full.json), none of the first's.
    assert_eq!((launches_of("node7"), launches_of("node8")), (0, 165));
}

/// `--pid`: one process's events (and the GPUs' track); an unknown rank is refused with what
/// the capture holds.
#[test]
fn pid_keeps_one_process() {
    let d = Dir::new("pid");
    let mut a = d.args("one.json", Some(ExportFormat::Chrome));
    a.pid = Some(300);
    assert_eq!(run(&a), 0);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&a.output).unwrap()).unwrap();
    let ev = v["traceEvents"].as_array().unwrap();
    let pids: std::collections::BTreeSet<u64> =
        ev.iter().filter_map(|e| e["pid"].as_u64()).collect();
    assert_eq!(pids, [0, 300].into());
    let launches = ev
        .iter()
        .filter(|e| e["cat"] == "launch" && e["tid"] == 300)
        .count();
    assert_eq!(launches, 70);
    // The fixture has no NCCL: no rank to select.
    let mut a = d.args("rank.json", Some(ExportFormat::Chrome));
    a.rank = Some(0);
    assert_eq!(run(&a), 2);
}
