//! Call stacks on the real eBPF object: the code and callers views, frame by frame, for a C
//! workload with known call chains (with and without frame pointers) and a CPython program
//! calling the fake runtime through ctypes from known lines.
//!
//! Run through `cargo xtask test` (as root, `--test-threads=1`).

use gpuprofd_tests::*;
use serde_json::Value;
use std::process::Command;

const RELU: &str = "relu(float*, int)";
const VEC_ADD: &str = "vecAdd(float const*, float const*, float*, int)";
const WORKLOAD_C: &str = include_str!("../fakecuda/workload.c");

/// `workload.c:LINE FUNCTION (EXE)`, LINE being the line marked `/* MARKER */` (a frame named
/// from DWARF: the line of the call the return address follows).
fn fr(marker: &str, func: &str, exe: &str) -> String {
    let tag = format!("/* {marker} */");
    let line = WORKLOAD_C
        .lines()
        .position(|l| l.contains(&tag))
        .unwrap_or_else(|| panic!("no {tag} in workload.c"))
        + 1;
    format!("workload.c:{line} {func} ({exe})")
}

/// Frames are named while their process runs (its maps, its code objects); the daemon drains
/// the ring every 10 ms. A workload that exited at once would leave its stacks unnamed (the
/// limitation docs/LIMITATIONS.md states), so each test lets the daemon catch up first.
fn let_the_daemon_drain() {
    std::thread::sleep(std::time::Duration::from_millis(300));
}

/// Runs `lines` in a fresh `bin/<exe>` under a capturing daemon taking a stack every `period`th
/// call; the finished daemon (its report read back from the capture file) and the workload's pid.
fn capture_workload(exe: &str, period: &str, lines: &[&str]) -> (Finished, u32) {
    let d = daemon(period);
    let mut w = Workload::spawn(exe, &[]);
    w.script(lines);
    let tgid = w.tgid;
    let_the_daemon_drain();
    w.exit();
    (d.stop(), tgid)
}

/// The daemon on all jobs, fake libraries only, a stack on every `period`th call.
fn daemon(period: &str) -> Daemon {
    let lib = fakecuda().join("lib");
    let mut args = all_jobs_args(&lib).to_vec();
    args.extend(["--stack-period", period, "--no-nvml"]);
    Daemon::capturing(&args)
}

/// [`daemon`] with both layers of a runtime launch probed: the Python model launches a made-up
/// host stub, which the runtime refuses before calling the driver, so with one trap per launch
/// (the driver's) those launches are never seen (docs/USAGE.md, "One trap per launch").
fn daemon_two_traps(period: &str) -> Daemon {
    let lib = fakecuda().join("lib");
    let mut args = all_jobs_args(&lib).to_vec();
    args.extend([
        "--stack-period",
        period,
        "--no-nvml",
        "--launch-traps",
        "two",
    ]);
    Daemon::capturing(&args)
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|s| s.as_str().expect("string").to_owned())
        .collect()
}

/// The code row whose stack ends with `tail` (exactly one).
fn row<'a>(p: &'a Value, tail: &[String]) -> &'a Value {
    let rows: Vec<&Value> = p["code"]
        .as_array()
        .expect("code rows")
        .iter()
        .filter(|r| strings(&r["stack"]).ends_with(tail))
        .collect();
    assert_eq!(
        rows.len(),
        1,
        "one row ending with {tail:?}: {:#}",
        p["code"]
    );
    rows[0]
}

fn kernels(r: &Value) -> Vec<(String, u64)> {
    r["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["name"].as_str().unwrap().to_owned(),
                k["launches"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Whether the stack has a `main` frame of `exe` (named from DWARF) before its last `n` frames.
fn has_main(r: &Value, exe: &str, n: usize) -> bool {
    let s = strings(&r["stack"]);
    let is_main = |f: &str| {
        f.strip_prefix("workload.c:")
            .and_then(|r| r.strip_suffix(&format!(" main ({exe})")))
            .is_some_and(|line| !line.is_empty() && line.bytes().all(|b| b.is_ascii_digit()))
    };
    s.len() > n && s[..s.len() - n].iter().any(|f| is_main(f))
}

#[test]
fn native_call_chains_named_frame_by_frame() {
    let (fin, tgid) = capture_workload("workload", "1", &["stack_chain 5 3 2"]);
    let p = process(&fin.report, tgid);
    assert_eq!(p["launches"], 8);
    assert_eq!(p["stacks"]["samples"], 10);
    assert_eq!(p["stacks"]["truncated"], 0);
    assert_eq!(p["stacks"]["shallow"], 0);
    assert_eq!(p["stacks"]["python"], Value::Null);
    assert_eq!(p["code"].as_array().unwrap().len(), 3, "{:#}", p["code"]);

    let w = |m: &str, f: &str| fr(m, f, "workload");
    let abc_tail = [
        w("STACK_CMD_A", "cmd_stack_chain"),
        w("STACK_A_B", "stack_chain_a"),
        w("STACK_B", "stack_chain_b"),
        w("STACK_C", "stack_chain_c"),
    ];
    let abc = row(p, &abc_tail);
    assert!(has_main(abc, "workload", 4), "{abc:#}");
    assert_eq!(
        (
            abc["samples"].as_u64(),
            abc["calls"].as_u64(),
            abc["launches"].as_u64()
        ),
        (Some(5), Some(5), Some(5))
    );
    assert_eq!(kernels(abc), [(RELU.to_owned(), 5)]);
    assert_eq!(abc["caller"], "workload");

    let ac = row(
        p,
        &[
            w("STACK_CMD_A", "cmd_stack_chain"),
            w("STACK_A_C", "stack_chain_a"),
            w("STACK_C", "stack_chain_c"),
        ],
    );
    assert!(has_main(ac, "workload", 3), "{ac:#}");
    assert_eq!(
        (
            ac["samples"].as_u64(),
            ac["launches"].as_u64(),
            ac["syncs"].as_u64()
        ),
        (Some(3), Some(3), Some(0))
    );
    assert_eq!(kernels(ac), [(RELU.to_owned(), 3)]);

    // Syncs: stacks taken at the return probe, with the time blocked, which must be the API
    // view's figure for the same calls.
    let sy = row(
        p,
        &[
            w("STACK_CMD_SYNC", "cmd_stack_chain"),
            w("STACK_SYNC", "stack_chain_sync"),
        ],
    );
    assert!(has_main(sy, "workload", 2), "{sy:#}");
    assert_eq!(
        (
            sy["samples"].as_u64(),
            sy["syncs"].as_u64(),
            sy["launches"].as_u64()
        ),
        (Some(2), Some(2), Some(0))
    );
    assert_eq!(
        sy["blocked_ns"],
        api(p, "cudaDeviceSynchronize").unwrap()["blocked_ns"]
    );
    assert!(sy["blocked_ns"].as_u64().unwrap() > 0);
    assert_eq!(kernels(sy), []);

    let file = fin.output.to_str().unwrap();
    // Folded stacks: one line per stack and leaf, `comm (pid);frames…;leaf count`.
    let (code, out, err) = run_daemon(&["report", file, "--view", "code", "--format", "folded"]);
    assert_eq!(code, 0, "{err}");
    let line = |r: &Value, leaf: &str, n: u64| {
        format!(
            "workload ({tgid});{};{leaf} {n}",
            strings(&r["stack"]).join(";")
        )
    };
    let mut want = vec![
        line(abc, &format!("[kernel] {RELU}"), 5),
        line(ac, &format!("[kernel] {RELU}"), 3),
        line(sy, "[sync]", 2),
    ];
    want.sort();
    let got: Vec<&str> = out.lines().collect();
    assert_eq!(got, want);

    // The tree: --start-name-regex roots it at stack_chain_a, --max-depth cuts it.
    let (code, out, err) = run_daemon(&[
        "report",
        file,
        "--view",
        "code",
        "--start-name-regex",
        r" stack_chain_a \(workload\)$",
        "--max-depth",
        "2",
    ]);
    assert_eq!(code, 0, "{err}");
    let tree: Vec<&str> = out
        .lines()
        .filter(|l| {
            !l.starts_with("process ") && (l.contains("(workload)") || l.contains("[kernel]"))
        })
        .collect();
    let cells = |l: &str| l.split_whitespace().collect::<Vec<_>>().join(" ");
    assert_eq!(
        tree.iter().map(|l| cells(l)).collect::<Vec<_>>(),
        [
            format!("5 5 0 0 0.000 {}", w("STACK_A_B", "stack_chain_a")),
            format!("5 5 0 0 0.000 {}", w("STACK_B", "stack_chain_b")),
            format!("3 3 0 0 0.000 {}", w("STACK_A_C", "stack_chain_a")),
            format!("3 3 0 0 0.000 {}", w("STACK_C", "stack_chain_c")),
        ]
    );

    // Callers: the library that called the runtime.
    let (code, out, err) = run_daemon(&["report", file, "--view", "callers", "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let callers: Value = serde_json::from_str(&out).unwrap();
    let c = callers.as_array().unwrap();
    assert_eq!(c.len(), 1, "{callers:#}");
    assert_eq!(
        (
            c[0]["caller"].as_str(),
            c[0]["calls"].as_u64(),
            c[0]["launches"].as_u64(),
            c[0]["syncs"].as_u64()
        ),
        (Some("workload"), Some(10), Some(8), Some(2))
    );

    // The timeline carries each stack next to its call.
    let trace = fin.output.with_extension("trace.json");
    let (code, _, err) = run_daemon(&["export", file, "--output", trace.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let t: Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let events = t["traceEvents"]
        .as_array()
        .or(t.as_array())
        .expect("trace events");
    let stacks: Vec<&Value> = events.iter().filter(|e| e["cat"] == "stack").collect();
    assert_eq!(stacks.len(), 10);
    let launch_stacks = stacks
        .iter()
        .filter(|e| e["name"] == "launch stack")
        .count();
    assert_eq!(launch_stacks, 8);
    let first = stacks.iter().find(|e| e["name"] == "launch stack").unwrap();
    assert_eq!(strings(&first["args"]["stack"]), strings(&abc["stack"]));
}

#[test]
fn sampling_does_not_alias_with_a_periodic_call_pattern() {
    // 4,000 steps of a fixed pattern: attention() from three call sites, then mlp(). With
    // --stack-period 4, a counter taking every 4th call would sample one site every time and
    // never the others; each call is drawn with probability 1/4 instead.
    const STEPS: u64 = 4_000;
    const PERIOD: u64 = 4;
    let (fin, tgid) = capture_workload(
        "workload",
        &PERIOD.to_string(),
        &[&format!("stack_steps {STEPS}")],
    );
    let p = process(&fin.report, tgid);
    assert_eq!(p["launches"], 4 * STEPS);
    let w = |m: &str, f: &str| fr(m, f, "workload");
    let c = w("STACK_C", "stack_chain_c");
    let sites = [
        ("STEP_ATTN_1", "STEP_ATTN", "step_attention", RELU),
        ("STEP_ATTN_2", "STEP_ATTN", "step_attention", RELU),
        ("STEP_ATTN_3", "STEP_ATTN", "step_attention", RELU),
        ("STEP_MLP_1", "STEP_MLP", "step_mlp", VEC_ADD),
    ];
    // Each site makes STEPS calls; its samples are binomial(STEPS, 1/PERIOD): mean 1,000,
    // standard deviation √(4000 · ¼ · ¾) ≈ 27.4. The bound is 5 standard deviations (a false
    // failure about once in 400,000 runs per site); an aliasing sampler is off by 1,000.
    let mean = STEPS / PERIOD;
    let sd = ((STEPS as f64) * 0.25 * 0.75).sqrt();
    let bound = (5.0 * sd).ceil() as u64;
    let mut total = 0;
    for (site, callee, func, kernel) in sites {
        let r = row(p, &[w(site, "stack_steps"), w(callee, func), c.clone()]);
        let samples = r["samples"].as_u64().unwrap();
        assert!(
            samples.abs_diff(mean) <= bound,
            "{site}: {samples} samples, expected {mean} ± {bound}"
        );
        // Derived: each sample stands for PERIOD calls (the estimator docs/STACKS.md states).
        assert_eq!(r["calls"].as_u64(), Some(samples * PERIOD), "{site}");
        assert_eq!(r["launches"].as_u64(), Some(samples * PERIOD), "{site}");
        assert_eq!(
            kernels(r),
            [(kernel.to_owned(), samples * PERIOD)],
            "{site}"
        );
        total += samples;
    }
    assert_eq!(
        p["stacks"]["samples"], total,
        "no sample outside the four sites"
    );
}

#[test]
fn without_frame_pointers_the_direct_caller_is_kept_and_the_report_says_so() {
    let (fin, tgid) = capture_workload("workload_nofp", "1", &["stack_chain 5 3 2"]);
    let p = process(&fin.report, tgid);
    assert_eq!(p["launches"], 8);
    assert_eq!(p["stacks"]["samples"], 10);
    assert_eq!(p["stacks"]["shallow"], 10);
    // Whatever the walk found past it, the innermost frame is the direct caller.
    let mut launches = 0;
    let mut syncs = 0;
    for r in p["code"].as_array().unwrap() {
        let s = strings(&r["stack"]);
        let inner = s.last().expect("a frame").as_str();
        if r["launches"].as_u64() > Some(0) {
            assert_eq!(
                inner,
                fr("STACK_C", "stack_chain_c", "workload_nofp"),
                "{s:?}"
            );
            launches += r["launches"].as_u64().unwrap();
        } else {
            assert_eq!(
                inner,
                fr("STACK_SYNC", "stack_chain_sync", "workload_nofp"),
                "{s:?}"
            );
            syncs += r["syncs"].as_u64().unwrap();
        }
    }
    assert_eq!((launches, syncs), (8, 2));
    let (code, out, err) = run_daemon(&["report", fin.output.to_str().unwrap(), "--view", "code"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("note: 10 of 10 stacks name fewer than 3 native frames: the code was probably built without frame pointers"),
        "{out}"
    );
}

/// The function of the unstripped `workload` containing file offset `off` (`readelf` for the
/// load segments, `nm` for the symbols).
fn function_at_offset(exe: &std::path::Path, off: u64) -> String {
    let run = |cmd: &str, args: &[&str]| {
        let o = Command::new(cmd).args(args).arg(exe).output().expect(cmd);
        assert!(o.status.success(), "{cmd} failed");
        String::from_utf8(o.stdout).unwrap()
    };
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    let vaddr = run("readelf", &["-lW"])
        .lines()
        .filter(|l| l.trim_start().starts_with("LOAD"))
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (o, v, sz) = (hex(f[1]), hex(f[2]), hex(f[4]));
            (o <= off && off < o + sz).then(|| v + (off - o))
        })
        .expect("offset in a load segment");
    let mut syms: Vec<(u64, String)> = run("nm", &["--defined-only"])
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && matches!(f[1], "T" | "t")).then(|| (hex(f[0]), f[2].to_owned()))
        })
        .collect();
    syms.sort();
    syms.iter()
        .rev()
        .find(|(a, _)| *a <= vaddr)
        .map(|(_, n)| n.clone())
        .expect("a function")
}

#[test]
fn a_stripped_executable_names_frames_by_file_offset() {
    let (fin, tgid) = capture_workload("workload_stripped", "1", &["stack_chain 5 3 2"]);
    let p = process(&fin.report, tgid);
    assert_eq!(p["stacks"]["samples"], 10);
    let rows = p["code"].as_array().unwrap();
    assert_eq!(rows.len(), 3, "{:#}", p["code"]);
    // Frames in the stripped file read `workload_stripped+0xOFFSET`; each offset, looked up in
    // the unstripped copy of the same file, is the function the unstripped run names.
    let unstripped = fakecuda().join("bin/workload");
    let named = |r: &Value| -> Vec<String> {
        strings(&r["stack"])
            .iter()
            .filter_map(|f| f.strip_prefix("workload_stripped+0x"))
            .map(|h| function_at_offset(&unstripped, u64::from_str_radix(h, 16).unwrap()))
            .collect()
    };
    let by_calls = |n: u64| rows.iter().find(|r| r["calls"] == n).expect("row");
    assert_eq!(
        named(by_calls(5)),
        ["main", "stack_chain_a", "stack_chain_b", "stack_chain_c"]
    );
    assert_eq!(
        named(by_calls(3)),
        ["main", "stack_chain_a", "stack_chain_c"]
    );
    let sy = by_calls(2);
    assert_eq!(sy["syncs"], 2);
    assert_eq!(named(sy), ["main", "stack_chain_sync"]);
}

#[test]
fn a_stripped_executable_with_minidebuginfo_is_named_from_it() {
    let (fin, tgid) = capture_workload("workload_minidebug", "1", &["stack_chain 5 3 2"]);
    let p = process(&fin.report, tgid);
    assert_eq!(p["stacks"]["samples"], 10);
    // No DWARF here (no lines, no inlined frames): function symbols from .gnu_debugdata.
    let m = |f: &str| format!("{f} (workload_minidebug)");
    let abc = row(
        p,
        &[
            m("main"),
            m("stack_chain_a"),
            m("stack_chain_b"),
            m("stack_chain_c"),
        ],
    );
    assert_eq!(abc["launches"], 5);
    let ac = row(p, &[m("main"), m("stack_chain_a"), m("stack_chain_c")]);
    assert_eq!(ac["launches"], 3);
    let sy = row(p, &[m("main"), m("stack_chain_sync")]);
    assert_eq!(sy["syncs"], 2);
}

const SCRIPT: &str = r#"import ctypes
import os
import sys


class dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


rt = ctypes.CDLL(sys.argv[1])
rt.cudaLaunchKernel.argtypes = [
    ctypes.c_void_p, dim3, dim3, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
]


def launch(n):
    for _ in range(n):
        rt.cudaLaunchKernel(0x1234, dim3(4, 1, 1), dim3(32, 1, 1), None, 0, None)  # L_LAUNCH


def forward():
    launch(3)  # L_FORWARD


def step():
    forward()  # L_STEP_FORWARD
    launch(2)  # L_STEP_LAUNCH


print("ready", os.getpid(), flush=True)
for line in sys.stdin:
    if line.strip() == "step":
        step()  # L_MAIN
        print("ok step", flush=True)
    elif line.strip() == "exit":
        break
"#;

/// Every CPython 3.9–3.13 on this machine, one per minor version: the system's `python3`
/// (3.11 on the CI machine) and the builds pyenv keeps under `$PYENV_ROOT` (`/root/.pyenv`),
/// which the machine image carries for 3.9, 3.10, 3.12 and 3.13.
fn pythons() -> Vec<(u8, std::path::PathBuf)> {
    let root = std::env::var_os("PYENV_ROOT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "/root/.pyenv".into());
    let mut candidates = vec![std::path::PathBuf::from("/usr/bin/python3")];
    if let Ok(rd) = std::fs::read_dir(root.join("versions")) {
        let mut dirs: Vec<_> = rd.flatten().map(|e| e.path()).collect();
        dirs.sort();
        candidates.extend(dirs.into_iter().map(|d| d.join("bin/python3")));
    }
    let mut found: Vec<(u8, std::path::PathBuf)> = Vec::new();
    for exe in candidates {
        let Ok(out) = Command::new(&exe)
            .args([
                "-c",
                "import sys; print(sys.version_info[0], sys.version_info[1])",
            ])
            .output()
        else {
            continue;
        };
        let v = String::from_utf8_lossy(&out.stdout);
        let mut it = v.split_whitespace().map(|x| x.parse::<u8>().ok());
        if let (Some(Some(3)), Some(Some(minor))) = (it.next(), it.next())
            && (9..=13).contains(&minor)
            && !found.iter().any(|(m, _)| *m == minor)
        {
            found.push((minor, exe));
        }
    }
    found.sort();
    found
}

/// The model script run by each interpreter, and what its report must show.
struct PyModel {
    _dir: TempDir,
    script: std::path::PathBuf,
}

impl PyModel {
    /// Every CPython 3.9–3.13 found (the system's 3.11 at least) and the script.
    fn new() -> (PyModel, Vec<(u8, std::path::PathBuf)>) {
        let interpreters = pythons();
        eprintln!("CPython versions checked: {interpreters:?}");
        assert!(
            interpreters.iter().any(|(m, _)| *m == 11),
            "the system's CPython 3.11 (/usr/bin/python3) is missing: {interpreters:?}"
        );
        let dir = TempDir::new("pystack");
        let script = dir.path().join("model.py");
        std::fs::write(&script, SCRIPT).unwrap();
        (PyModel { _dir: dir, script }, interpreters)
    }

    /// `exe` running the model, past its `ready` line: the CUDA runtime is mapped by then.
    fn spawn(&self, exe: &std::path::Path) -> Workload {
        let mut cmd = Command::new(exe);
        cmd.arg(&self.script)
            .arg(fakecuda().join("lib/libcudart.so.12"));
        Workload::spawn_command(cmd)
    }

    /// Every one of the process's 5 launches (one `step`, a stack taken on every call) under
    /// its Python frames: file, line and function of each, outermost first, then the native
    /// frames called from Python.
    fn check(&self, report: &Value, tgid: u32, minor: u8, what: &str) {
        let s = self.script.to_str().unwrap();
        let line = |marker: &str| {
            SCRIPT
                .lines()
                .position(|l| l.ends_with(marker))
                .unwrap_or_else(|| panic!("{marker}"))
                + 1
        };
        let f = |marker: &str, func: &str| format!("{s}:{} {func}", line(marker));
        let p = process(report, tgid);
        assert_eq!(p["launches"], 5, "{what}");
        assert_eq!(p["stacks"]["samples"], 5, "{what}");
        assert_eq!(p["stacks"]["python_no_thread"], 0, "{what}");
        assert_eq!(p["stacks"]["python_fault"], 0, "{what}");
        let py = p["stacks"]["python"].as_str().unwrap_or_else(|| {
            panic!("{what}: no Python frames: {:#}", p["stacks"]);
        });
        assert!(
            py.starts_with(&format!("CPython 3.{minor} (")) && py.contains("python3."),
            "{what}: {py}"
        );
        assert!(!py.contains("not read"), "{what}: {py}");
        let rows = p["code"].as_array().unwrap();
        assert_eq!(rows.len(), 2, "{what}: {:#}", p["code"]);
        let py_frames = |r: &Value| -> Vec<String> {
            strings(&r["stack"])
                .into_iter()
                .filter(|f| f.starts_with(s))
                .collect()
        };
        let via_forward = rows
            .iter()
            .find(|r| r["calls"] == 3)
            .expect("the three launches through forward()");
        assert_eq!(
            py_frames(via_forward),
            [
                f("# L_MAIN", "<module>"),
                f("# L_STEP_FORWARD", "step"),
                f("# L_FORWARD", "forward"),
                f("# L_LAUNCH", "launch"),
            ],
            "{what}"
        );
        let direct = rows
            .iter()
            .find(|r| r["calls"] == 2)
            .expect("the two launches from step()");
        assert_eq!(
            py_frames(direct),
            [
                f("# L_MAIN", "<module>"),
                f("# L_STEP_LAUNCH", "step"),
                f("# L_LAUNCH", "launch")
            ],
            "{what}"
        );
        // Python frames come first: the interpreter's own native frames are replaced by them.
        for r in rows {
            let st = strings(&r["stack"]);
            assert!(st[0].starts_with(s), "{what}: {st:?}");
            assert_eq!(
                kernels(r),
                [("<unknown 0x1234>".to_owned(), r["calls"].as_u64().unwrap())],
                "{what}"
            );
        }
    }
}

#[test]
fn python_frames_by_file_line_and_function() {
    // One daemon; the same model run by every interpreter found, one after the other, each
    // started after the daemon.
    let (model, interpreters) = PyModel::new();
    let d = daemon_two_traps("1");
    let mut tgids = Vec::new();
    for (_, exe) in &interpreters {
        let mut w = model.spawn(exe);
        // The daemon learns that the process is a CPython when the kernel reports that it
        // maps the CUDA runtime; calls made before the daemon has read that report carry
        // native frames only. The first call comes after this pause.
        std::thread::sleep(std::time::Duration::from_millis(1000));
        w.cmd("step");
        tgids.push(w.tgid);
        let_the_daemon_drain();
        w.exit();
    }
    let fin = d.stop();
    for ((minor, exe), tgid) in interpreters.iter().zip(tgids) {
        let what = format!("CPython 3.{minor} ({}), started after", exe.display());
        model.check(&fin.report, tgid, *minor, &what);
    }
}

#[test]
fn python_frames_of_interpreters_running_before_the_attach() {
    // Live attach: every interpreter has loaded the CUDA runtime before the daemon starts, and
    // its first call comes right after the daemon's ready line (no pause): all of its stacks
    // must carry the same Python frames as one started after. Once with `--all-jobs` (all
    // interpreters at once), once with `--pid` for each.
    let (model, interpreters) = PyModel::new();
    let mut running: Vec<Workload> = interpreters.iter().map(|(_, e)| model.spawn(e)).collect();
    let d = daemon_two_traps("1");
    let mut tgids = Vec::new();
    for mut w in running.drain(..) {
        w.cmd("step");
        tgids.push(w.tgid);
        let_the_daemon_drain();
        w.exit();
    }
    let fin = d.stop();
    for ((minor, exe), tgid) in interpreters.iter().zip(tgids) {
        let what = format!("CPython 3.{minor} ({}), --all-jobs", exe.display());
        model.check(&fin.report, tgid, *minor, &what);
    }
    for (minor, exe) in &interpreters {
        let mut w = model.spawn(exe);
        let pid = w.tgid.to_string();
        let d = Daemon::capturing(&["--pid", &pid, "--stack-period", "1", "--no-nvml"]);
        w.cmd("step");
        let_the_daemon_drain();
        let fin = d.stop();
        let what = format!("CPython 3.{minor} ({}), --pid", exe.display());
        model.check(&fin.report, w.tgid, *minor, &what);
        w.exit();
    }
}

/// Watches `path` for opens (inotify): the number seen so far, read without blocking.
struct OpenWatch(i32);

impl OpenWatch {
    fn new(path: &std::path::Path) -> OpenWatch {
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: plain syscalls on a descriptor this value owns.
        unsafe {
            let fd = libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC);
            assert!(fd >= 0, "inotify_init1");
            assert!(libc::inotify_add_watch(fd, c.as_ptr(), libc::IN_OPEN | libc::IN_ACCESS) >= 0);
            OpenWatch(fd)
        }
    }

    fn events(&self) -> usize {
        let mut n = 0;
        let mut buf = [0u8; 4096];
        loop {
            // SAFETY: reads into a buffer of the given length.
            let r = unsafe { libc::read(self.0, buf.as_mut_ptr().cast(), buf.len()) };
            if r <= 0 {
                return n;
            }
            let mut off = 0;
            while off < r as usize {
                // struct inotify_event { int wd; u32 mask, cookie, len; char name[]; }
                let len = u32::from_ne_bytes(buf[off + 12..off + 16].try_into().unwrap());
                n += 1;
                off += 16 + len as usize;
            }
        }
    }
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        // SAFETY: closes the descriptor this value owns.
        unsafe { libc::close(self.0) };
    }
}

#[test]
fn a_symlink_planted_in_a_container_root_is_never_followed_to_the_host() {
    // A "container": the workload chrooted into its own root (the system's /usr and the fake
    // libraries bind-mounted, its executable a copy, /proc for the loader's $ORIGIN). Once it runs, the container replaces its
    // executable's path with an absolute symlink to a host file — another ELF, with other
    // symbols at those offsets. Opening `/proc/PID/root/app/bin/workload` would follow that
    // link out of the container to the host file; the daemon must read the mapped inode, name
    // the frames from the real executable, and never open the host file.
    let tmp = TempDir::new("chroot");
    let root = tmp.path().join("root");
    let decoy = tmp.path().join("host-decoy");
    std::fs::copy(fakecuda().join("bin/workload_nofp"), &decoy).unwrap();
    let watch = OpenWatch::new(&decoy);
    let d = daemon("1");
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "--propagation", "private", "sh", "-c"])
        .arg(format!(
            "set -e; r='{r}'; mkdir -p \"$r/usr\" \"$r/proc\" \"$r/app/bin\" \"$r/app/lib\"; \
             ln -s usr/lib \"$r/lib\"; ln -s usr/lib64 \"$r/lib64\"; \
             cp '{exe}' \"$r/app/bin/workload\"; \
             mount --bind /usr \"$r/usr\"; mount --bind '{lib}' \"$r/app/lib\"; \
             mount -t proc proc \"$r/proc\"; \
             exec chroot \"$r\" /app/bin/workload",
            r = root.display(),
            exe = fakecuda().join("bin/workload").display(),
            lib = fakecuda().join("lib").display(),
        ));
    let mut w = Workload::spawn_command(cmd);
    let planted = root.join("app/bin/workload.new");
    std::os::unix::fs::symlink(&decoy, &planted).unwrap();
    std::fs::rename(&planted, root.join("app/bin/workload")).unwrap();
    w.cmd("stack_chain 2 0 0");
    let tgid = w.tgid;
    let_the_daemon_drain();
    w.exit();
    let fin = d.stop();
    let p = process(&fin.report, tgid);
    assert_eq!(p["launches"], 2);
    let wf = |m: &str, f: &str| fr(m, f, "workload");
    let r = row(
        p,
        &[
            wf("STACK_CMD_A", "cmd_stack_chain"),
            wf("STACK_A_B", "stack_chain_a"),
            wf("STACK_B", "stack_chain_b"),
            wf("STACK_C", "stack_chain_c"),
        ],
    );
    assert_eq!(r["samples"], 2);
    assert_eq!(watch.events(), 0, "the daemon opened the host file");
    // The watch works: reading the decoy is seen.
    std::fs::read(&decoy).unwrap();
    assert!(watch.events() >= 1);
}
