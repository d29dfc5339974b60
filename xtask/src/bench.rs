//! `cargo xtask bench`: the probe cost per hooked call against the uprobe floor, the userspace
//! pipeline's ceiling, a launch storm through the ring buffer, and the cost of non-CUDA process
//! churn. Medians over repeated runs; ratios against a baseline measured in the same run.
//! Without `--quick` it writes docs/PERFORMANCE.md.

use crate::bench_onset::{
    Capped, LAUNCH_RING_BYTES, ONSET_RANGE, ONSET_SECS, ONSET_SHARES, RING_BYTES, capped_run,
    loss_onset,
};
use anyhow::{Context as _, Result, bail};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub(crate) struct Ctx {
    pub bin: PathBuf,
    pub fake: PathBuf,
    pub calls: u64,
    pub reps: usize,
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Runs a workload with `lines` on stdin; returns the `result=` of each reply, in order.
pub(crate) fn workload(
    ctx: &Ctx,
    name: &str,
    env: &[(&str, &Path)],
    lines: &[String],
) -> Result<Vec<f64>> {
    let mut cmd = Command::new(ctx.fake.join("bin").join(name));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("start {name}"))?;
    {
        let mut stdin = child.stdin.take().unwrap();
        for l in lines {
            writeln!(stdin, "{l}")?;
        }
    }
    let out = child.wait_with_output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut results = Vec::new();
    for l in text.lines() {
        if l.starts_with("err ") {
            bail!("{name}: {l}");
        }
        if let Some(v) = l.split("result=").nth(1) {
            results.push(v.trim().parse()?);
        }
    }
    Ok(results)
}

/// A background process that is ready once a line on its stderr contains `ready`.
pub(crate) struct Bg {
    daemon: bool,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Bg {
    pub fn start(bin: &Path, args: &[String]) -> Result<Bg> {
        Bg::start_env(bin, args, &[])
    }

    /// [`Bg::start`] with extra environment variables.
    pub fn start_env(bin: &Path, args: &[String], env: &[(&str, &str)]) -> Result<Bg> {
        let mut child = Command::new(bin)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("start {}", bin.display()))?;
        let (tx, rx) = mpsc::channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        let bg = Bg {
            daemon: args.first().is_none_or(|a| a != "floor"),
            stdin: child.stdin.take(),
            child,
            lines: rx,
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut why = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match bg.lines.recv_timeout(left) {
                Ok(l) if l.contains("ready") => {
                    // The floor attaches through uprobe_multi links where the kernel has them;
                    // a daemon that fell back to perf-event uprobes there would be measured
                    // against a floor attached another way (it happened once, silently: a map
                    // type the link loader did not know).
                    if bg.daemon && l.contains("perf-event uprobes") && kernel_has_uprobe_multi() {
                        bail!(
                            "{} attached perf-event uprobes on a kernel with uprobe_multi links \
                             (6.6+), so its figures would not compare with the floor's: {}",
                            bin.display(),
                            why.join(" / ")
                        );
                    }
                    return Ok(bg);
                }
                Ok(l) => {
                    if l.contains("uprobe_multi") {
                        why.push(l);
                    }
                }
                Err(_) => bail!("{} {args:?} never became ready", bin.display()),
            }
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Closes stdin (which stops a floor) and, for the daemon, sends SIGINT; waits. Returns
    /// the lines it wrote to stderr after "ready".
    pub fn stop(mut self) -> Result<Vec<String>> {
        let st = self.end()?;
        let mut rest = Vec::new();
        // The reader thread ends at the pipe's end, which came with the exit.
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(5)) {
            rest.push(l);
        }
        if !st.success() {
            bail!("background process exited with {st}");
        }
        Ok(rest)
    }

    fn end(&mut self) -> std::io::Result<std::process::ExitStatus> {
        drop(self.stdin.take());
        if self.daemon {
            // SAFETY: signalling our own child, not yet reaped.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        }
        self.child.wait()
    }
}

impl Drop for Bg {
    /// A step that failed half-way (or a process that never became ready) stops its process
    /// too, rather than leave a root daemon with its probes attached behind the benchmark.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.end();
        }
    }
}

/// Whether the running kernel is 6.6 or later, where `uprobe_multi` links exist.
fn kernel_has_uprobe_multi() -> bool {
    let rel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut it = rel
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|v| v.parse::<u32>().unwrap_or(0));
    let (major, minor) = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    (major, minor) >= (6, 6)
}

/// CPU ticks (utime + stime) and resident set (KiB, now and peak) of `pid`.
pub(crate) fn usage(pid: u32) -> (u64, u64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (ticks, kib("VmRSS:"), kib("VmHWM:"))
}

pub(crate) struct Shape {
    pub name: &'static str,
    /// What the kernel does at the probe site gpuprofd picks.
    pub site: &'static str,
    pub lib_dir: &'static str,
    pub mode: &'static str,
    pub floor_symbols: &'static [(&'static str, &'static str)],
}

/// The per-shape table probes both layers of a runtime launch, as its floors do (two empty
/// probes); one trap per launch has its own section (`bench_traps`).
const TWO_TRAPS: &[&str] = &["--launch-traps", "two"];

pub(crate) const SHAPES: [Shape; 3] = [
    Shape {
        name: "driver trampoline (cuLaunchKernel)",
        site: "je after cmpl: emulated",
        lib_dir: "lib",
        mode: "drv",
        floor_symbols: &[("libcuda.so.1", "cuLaunchKernel")],
    },
    Shape {
        name: "runtime, push %rbp (cudaLaunchKernel → cuLaunchKernel)",
        site: "push: emulated (2 probes per call)",
        lib_dir: "lib",
        mode: "rt",
        floor_symbols: &[
            ("libcudart.so.12", "cudaLaunchKernel"),
            ("libcuda.so.1", "cuLaunchKernel"),
        ],
    },
    Shape {
        name: "runtime, endbr64 (cudaLaunchKernel → cuLaunchKernel)",
        site: "push after endbr64: emulated (2 probes per call)",
        lib_dir: "lib-cet",
        mode: "rt",
        floor_symbols: &[
            ("libcudart.so.12", "cudaLaunchKernel"),
            ("libcuda.so.1", "cuLaunchKernel"),
        ],
    },
];

pub(crate) fn time_calls(ctx: &Ctx, shape: &Shape) -> Result<f64> {
    let dir = ctx.fake.join(shape.lib_dir);
    let lines: Vec<String> = (0..ctx.reps)
        .map(|_| format!("time_launch {} {}", shape.mode, ctx.calls))
        .collect();
    Ok(median(workload(
        ctx,
        "workload",
        &[("LD_LIBRARY_PATH", &dir)],
        &lines,
    )?))
}

/// Runs of the loop that [`program_time`] makes.
const PROGRAM_TIME_RUNS: usize = 3;

/// The probes' own time per call of `shape` (every program that ran, summed), measured by the
/// kernel (`BPF_ENABLE_STATS`): the median of 3 extra runs of the loop, and that run's time by
/// program (programs under 1 ns per call left out). Statistics cost each program run two clock
/// reads, so they are on only for these runs, never for the timed ones; NaN when the kernel
/// cannot keep them.
fn program_time(ctx: &Ctx, shape: &Shape) -> Result<(f64, Vec<(String, f64)>)> {
    let mut runs = (0..PROGRAM_TIME_RUNS)
        .map(|_| program_time_once(ctx, shape))
        .collect::<Result<Vec<_>>>()?;
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (total, split) = runs.swap_remove(1);
    Ok((
        total,
        split.into_iter().filter(|(_, ns)| *ns >= 1.0).collect(),
    ))
}

pub(crate) fn program_time_once(ctx: &Ctx, shape: &Shape) -> Result<(f64, Vec<(String, f64)>)> {
    let Ok(on) = crate::bpfstats::Enabled::new() else {
        return Ok((f64::NAN, Vec::new()));
    };
    let dir = ctx.fake.join(shape.lib_dir);
    let before = crate::bpfstats::snapshot();
    workload(
        ctx,
        "workload",
        &[("LD_LIBRARY_PATH", &dir)],
        &[format!("time_launch {} {}", shape.mode, ctx.calls)],
    )?;
    let after = crate::bpfstats::snapshot();
    drop(on);
    let calls = ctx.calls as f64;
    let per: Vec<(String, f64)> = crate::bpfstats::delta(&before, &after)
        .into_iter()
        .map(|(name, _, ns)| (name, ns as f64 / calls))
        .collect();
    Ok((per.iter().map(|(_, ns)| ns).sum(), per))
}

pub(crate) fn floor(ctx: &Ctx, shape: &Shape, entry: bool) -> Result<f64> {
    floor_with(ctx, shape, entry, "empty", &mut None)
}

/// [`floor`] with `program` (`gpuprofd floor --program`) at the outermost call's probe and the
/// empty program at the rest (the driver call that a runtime launch makes), also measuring the
/// programs' own time into `prog` when it is `Some`. A program that writes records must have
/// written one for every call: the floor process reads them, and its count is checked.
fn floor_with(
    ctx: &Ctx,
    shape: &Shape,
    entry: bool,
    program: &str,
    prog: &mut Option<f64>,
) -> Result<f64> {
    let dir = ctx.fake.join(shape.lib_dir);
    let outer = shape.floor_symbols[0].0;
    let mut bg_all = Vec::new();
    // one floor process per library file
    for lib in ["libcuda.so.1", "libcudart.so.12"] {
        let syms: Vec<&str> = shape
            .floor_symbols
            .iter()
            .filter(|(l, _)| *l == lib)
            .map(|(_, s)| *s)
            .collect();
        if syms.is_empty() {
            continue;
        }
        let mut args = vec![
            "floor".to_string(),
            "--lib".into(),
            dir.join(lib).display().to_string(),
            "--program".into(),
            if lib == outer { program } else { "empty" }.into(),
        ];
        for s in syms {
            args.push("--symbol".into());
            args.push(s.into());
        }
        if entry {
            args.push("--entry".into());
        }
        bg_all.push((lib, Bg::start(&ctx.bin, &args)?));
    }
    let t = time_calls(ctx, shape)?;
    let mut runs = ctx.reps;
    if let Some(p) = prog.as_mut() {
        *p = program_time(ctx, shape)?.0;
        // NaN: the kernel keeps no statistics, and the loop was not run for them.
        if !p.is_nan() {
            runs += PROGRAM_TIME_RUNS;
        }
    }
    let made = runs as u64 * ctx.calls;
    // Only the outermost library's floor runs `program`; a program that writes records says
    // how many it read when it stops.
    let writes = program == "record" || program == "ring";
    for (lib, b) in bg_all {
        let counted = b.stop()?.iter().find_map(|l| {
            l.strip_prefix("gpuprofd floor: records ")
                .map(|n| n.trim().parse::<u64>())
        });
        match counted {
            Some(Ok(n)) if n != made => bail!(
                "the {program} probe recorded {n} of {made} calls ({})",
                shape.name
            ),
            Some(Ok(_)) => {}
            Some(Err(e)) => bail!("the floor's record count: {e}"),
            None if writes && lib == outer => bail!(
                "the {program} probe's floor said nothing of the records it read ({})",
                shape.name
            ),
            None => {}
        }
    }
    Ok(t)
}

/// One sustained-rate run.
struct Paced {
    rate: u64,
    secs: u64,
    mode: &'static str,
    achieved: f64,
    asked: u64,
    counted: u64,
    dropped: u64,
    cpu_s: f64,
    /// RSS in KiB: at the start, at the end, and the least and most seen while it ran.
    rss: (u64, u64, Option<u64>, Option<u64>),
}

struct Row {
    shape: &'static str,
    site: &'static str,
    none: f64,
    floor_entry: f64,
    floor: f64,
    /// Default capture (a stack on one call in 64, drawn at random).
    full: f64,
    /// `--stack-period 0`.
    no_stacks: f64,
    /// `--stack-period 1`.
    all_stacks: f64,
    /// Launches counted in the kernel (`--count-launches`, the service's default), default
    /// stack sampling.
    counted: f64,
    /// The same launch probes written in bpftrace (at the symbol entry, counting in a map).
    bpftrace: Option<f64>,
    /// The probes' own time per call (kernel statistics): the empty floor program, full
    /// capture without stacks, default, a stack every call, counted.
    prog: [f64; 5],
    /// Default full capture's time per call by program.
    prog_split: Vec<(String, f64)>,
    /// ns per call with `gpuprofd floor --program` [`LOWER_PARTS`] at the outermost probe
    /// (NaN: not measured; quick mode measures the first only).
    lower: [f64; 4],
    /// The `record` program's own time per call (kernel statistics), with the empty driver
    /// probe's in the runtime shapes.
    prog_lower: f64,
}

/// The lower bound's program and its parts, in [`Row::lower`]'s order.
const LOWER_PARTS: [&str; 4] = ["record", "read", "clock", "ring"];

/// The launch probes of a shape as a bpftrace program: at the symbol entry (where bpftrace puts
/// a uprobe), each call counted in a map keyed by process and the arguments gpuprofd's key
/// holds in registers, the idiomatic bpftrace equivalent of gpuprofd's in-kernel counting.
fn bpftrace_program(ctx: &Ctx, shape: &Shape) -> String {
    let dir = ctx.fake.join(shape.lib_dir);
    shape
        .floor_symbols
        .iter()
        .map(|(lib, sym)| {
            format!(
                "uprobe:{}:{sym} {{ @{sym}[pid, arg0, arg1, arg2, arg3] = count(); }}\n",
                dir.join(lib).display()
            )
        })
        .collect()
}

/// The per-call time of `shape` under bpftrace running its launch probes, when bpftrace is
/// installed (Debian's package); `None` otherwise.
fn bpftrace_time(ctx: &Ctx, shape: &Shape) -> Result<Option<f64>> {
    let Ok(bt) = which("bpftrace") else {
        return Ok(None);
    };
    let mut child = Command::new(bt)
        .args(["-e", &bpftrace_program(ctx, shape)])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("start bpftrace")?;
    // bpftrace prints "Attaching N probes..." once they are in.
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(l) if l.starts_with("Attaching") => {}
        other => {
            let _ = child.kill();
            let _ = child.wait();
            bail!("bpftrace did not attach: {other:?}");
        }
    }
    // Attached when it says so; the uprobes are registered a moment before the message.
    std::thread::sleep(Duration::from_millis(500));
    let t = time_calls(ctx, shape);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let _ = child.wait();
    Ok(Some(t?))
}

fn which(name: &str) -> Result<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .with_context(|| format!("{name} not found"))
}

pub(crate) fn daemon_args(ctx: &Ctx, out: &Path, extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "--all-jobs".into(),
        "--no-system-libs".into(),
        "--no-live".into(),
        "--lib".into(),
        ctx.fake.join("lib").display().to_string(),
        "--lib".into(),
        ctx.fake.join("lib-cet").display().to_string(),
        "-o".into(),
        out.display().to_string(),
    ];
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

/// The goal the overhead issue set: gpuprofd's added time per call at most this many times the
/// empty probe's.
const GOAL_RATIO: f64 = 1.2;

/// The lower-bound table and what it says about [`GOAL_RATIO`] on this host, from the figures
/// measured in this run.
fn lower_bound_section(rows: &[Row]) -> String {
    let f = |v: f64| {
        if v.is_nan() {
            "not measured".to_owned()
        } else {
            format!("{v:+.0}")
        }
    };
    let mut md = format!(
        "\nWhat any recording probe costs on this host, measured at the same sites in this run \
         (`gpuprofd floor --program`): the least a probe that records a launch must do is one \
         user-memory read of the stack-passed arguments and the return address, one clock read \
         and one launch-sized ring-buffer record with the thread's ids (no filter, attach cookie, \
         pairing, counters or stack sampling; the empty tail call that keeps a program off the \
         per-CPU stack is in it, see `NO_PRIV_STACK`). In the runtime shapes it sits on the \
         runtime probe and the driver probe stays empty, as if pairing were free. The parts \
         columns are each part alone, over the empty probe (a negative figure is noise). The \
         goal of issue 7 is gpuprofd's added time at most {GOAL_RATIO}× the floor's.\n\n\
         | entry shape | floor added ns | stack read alone, ns over the floor | clock read alone | ring record alone | all three: the lower bound, ns per call | lower bound added ÷ floor added | gpuprofd full capture added ÷ floor added | gpuprofd's own work above the lower bound, ns | program time ns: lower bound / gpuprofd full capture |\n\
         |---|---|---|---|---|---|---|---|---|---|\n"
    );
    let mut verdict = Vec::new();
    for r in rows {
        let added = r.floor - r.none;
        let ratio = |t: f64| (t - r.none) / added;
        let lower = r.lower[0];
        md.push_str(&format!(
            "| {} | {:.0} | {} | {} | {} | {:.0} | {:.2} | {:.2} | {:.0} | {:.0} / {:.0} |\n",
            r.shape,
            added,
            f(r.lower[1] - r.floor),
            f(r.lower[2] - r.floor),
            f(r.lower[3] - r.floor),
            lower,
            ratio(lower),
            ratio(r.full),
            r.full - lower,
            r.prog_lower,
            r.prog[2],
        ));
        // What the goal leaves above the empty probe, and the lower bound's share of it.
        let budget = (GOAL_RATIO - 1.0) * added;
        let taken = lower - r.floor;
        let rest = if taken >= budget {
            "none left".to_owned()
        } else {
            format!("{:.0} ns left", budget - taken)
        };
        verdict.push(format!(
            "* {}: {GOAL_RATIO}× leaves {budget:.0} ns per call above the empty probe; the lower \
             bound takes {taken:.0} ns of it ({:.0} %): {rest}. gpuprofd's own work above the \
             lower bound: {:.0} ns.\n",
            r.shape,
            100.0 * taken / budget,
            r.full - lower,
        ));
    }
    md.push_str(&format!(
        "\nThe goal's budget against the lower bound. Where the lower bound takes all of it, no \
         full capture can meet the goal on this host; where it leaves some, everything else a \
         correct probe does (process filter, attach cookie, runtime/driver pairing) has to fit \
         in what is left. One run does not tell a share near 100 % from 100 %: these figures \
         move by about a tenth of the floor between runs.\n\n{}",
        verdict.concat()
    ));
    md.push('\n');
    md
}

pub(crate) fn report(path: &Path) -> Result<serde_json::Value> {
    Ok(serde_json::from_str(&std::fs::read_to_string(path)?)?)
}

/// Launches of every process in a report.
pub(crate) fn launches_in(r: &serde_json::Value) -> u64 {
    r["processes"]
        .as_array()
        .map(|ps| ps.iter().filter_map(|p| p["launches"].as_u64()).sum())
        .unwrap_or(0)
}

/// Records lost, every kind, in a report.
pub(crate) fn drops_in(r: &serde_json::Value) -> u64 {
    r["drops"]
        .as_object()
        .map(|m| m.values().filter_map(|v| v.as_u64()).sum())
        .unwrap_or(0)
}

pub fn run(root: &Path, bin: &Path, fake: &Path, quick: bool, sustain_secs: u64) -> Result<()> {
    let ctx = Ctx {
        bin: bin.to_owned(),
        fake: fake.to_owned(),
        calls: if quick { 20_000 } else { 1_000_000 },
        reps: if quick { 1 } else { 5 },
    };
    let tmp = std::env::temp_dir().join(format!("gpuprofd-bench-{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    eprintln!(
        "bench: {} calls per run, {} runs per figure (median){}",
        ctx.calls,
        ctx.reps,
        if quick { ", quick mode" } else { "" }
    );

    // 1. Per-call cost by entry shape.
    let mut rows = Vec::new();
    for s in &SHAPES {
        eprintln!("bench: {}: no probes, floors", s.name);
        let mut prog_floor = Some(f64::NAN);
        rows.push(Row {
            shape: s.name,
            site: s.site,
            none: time_calls(&ctx, s)?,
            floor_entry: floor(&ctx, s, true)?,
            floor: floor_with(&ctx, s, false, "empty", &mut prog_floor)?,
            full: f64::NAN,
            no_stacks: f64::NAN,
            all_stacks: f64::NAN,
            counted: f64::NAN,
            bpftrace: if quick { None } else { bpftrace_time(&ctx, s)? },
            prog: [
                prog_floor.unwrap_or(f64::NAN),
                f64::NAN,
                f64::NAN,
                f64::NAN,
                f64::NAN,
            ],
            prog_split: Vec::new(),
            lower: [f64::NAN; 4],
            prog_lower: f64::NAN,
        });
    }
    // The least any recording probe does, and its parts alone, at the same sites.
    for (r, s) in rows.iter_mut().zip(SHAPES.iter()) {
        let parts = if quick { 1 } else { LOWER_PARTS.len() };
        for (i, part) in LOWER_PARTS.iter().enumerate().take(parts) {
            eprintln!("bench: {}: lower bound, {part}", s.name);
            let mut prog = (i == 0).then_some(f64::NAN);
            r.lower[i] = floor_with(&ctx, s, false, part, &mut prog)?;
            if let Some(p) = prog {
                r.prog_lower = p;
            }
        }
    }
    // Call stacks cost a frame-pointer walk and a 576-byte record each: the same capture
    // without them, with the default sampling and with a stack on every call.
    for (label, args) in [
        ("full capture, no stacks", &["--stack-period", "0"][..]),
        (
            "full capture, a stack every call",
            &["--stack-period", "1"][..],
        ),
        (
            "launches counted in the kernel",
            &["--count-launches", "1s"][..],
        ),
    ] {
        eprintln!("bench: gpuprofd {label}");
        let out = tmp.join("variant.json");
        let d = Bg::start(
            &ctx.bin,
            &daemon_args(&ctx, &out, &[args, TWO_TRAPS].concat()),
        )?;
        for (r, s) in rows.iter_mut().zip(SHAPES.iter()) {
            let t = time_calls(&ctx, s)?;
            let p = program_time(&ctx, s)?.0;
            match args[1] {
                "0" => (r.no_stacks, r.prog[1]) = (t, p),
                "1" => (r.all_stacks, r.prog[3]) = (t, p),
                _ => (r.counted, r.prog[4]) = (t, p),
            }
        }
        d.stop()?;
    }
    eprintln!("bench: gpuprofd full capture (one daemon for all shapes)");
    let full_out = tmp.join("full.json");
    let d = Bg::start(&ctx.bin, &daemon_args(&ctx, &full_out, TWO_TRAPS))?;
    for (r, s) in rows.iter_mut().zip(SHAPES.iter()) {
        r.full = time_calls(&ctx, s)?;
        (r.prog[2], r.prog_split) = program_time(&ctx, s)?;
    }
    d.stop()?;
    let full_drops = drops_in(&report(&full_out)?);
    // A process outside a `--pid` selection, with and without per-process probes.
    let neighbour_rounds = if quick { 1 } else { 3 };
    let neighbour = crate::neighbour::measure(&ctx, &tmp, neighbour_rounds)?;
    // The injection library in a program while gpuprofd is absent.
    let inject = crate::bench_inject::measure(&ctx, neighbour_rounds)?;

    // 2. Userspace pipeline ceiling.
    eprintln!("bench: pipeline (decode + aggregate, one thread)");
    let events = if quick { 200_000 } else { 5_000_000 };
    let capture = tmp.join("pipeline.gpuprof");
    let (mut pipe, mut pipe_cap) = (Vec::new(), Vec::new());
    for _ in 0..ctx.reps.max(3) {
        for (with_file, into) in [(false, &mut pipe), (true, &mut pipe_cap)] {
            let mut cmd = Command::new(&ctx.bin);
            cmd.args(["bench-pipeline", "--events", &events.to_string()]);
            if with_file {
                cmd.arg("--capture").arg(&capture);
            }
            let out = cmd.output()?;
            let text = String::from_utf8_lossy(&out.stdout);
            let v: f64 = text
                .split_whitespace()
                .nth(1)
                .context("bench-pipeline output")?
                .parse()?;
            into.push(v);
        }
    }
    let capture_bytes = std::fs::metadata(&capture).map(|m| m.len()).unwrap_or(0);
    let (export_rate, export_bytes) =
        crate::bench_export::measure(&ctx.bin, &capture, &tmp, events, ctx.reps.max(3))?;
    let _ = std::fs::remove_file(&capture);
    let (pipe, pipe_cap) = (median(pipe), median(pipe_cap));

    // 3. Launch storm through the ring buffer, end to end.
    eprintln!("bench: launch storm through the ring buffer");
    let (threads, per) = if quick { (1, 20_000) } else { (2, 1_000_000) };
    let storm_out = tmp.join("storm.json");
    let d = Bg::start(&ctx.bin, &daemon_args(&ctx, &storm_out, &[]))?;
    let (c0, _, _) = usage(d.pid());
    let t = Instant::now();
    let rate = workload(&ctx, "workload", &[], &[format!("storm {threads} {per}")])?;
    let storm_secs = t.elapsed().as_secs_f64();
    let (c1, rss, hwm) = usage(d.pid());
    d.stop()?;
    let sr = report(&storm_out)?;
    let storm_launches = launches_in(&sr);
    let storm_drops = sr["drops"]["launch"].as_u64().unwrap_or(0);
    let asked = threads as u64 * per;

    // 4. Sustained rates: a paced launcher, full capture and counted, daemon CPU and RSS.
    let paced_runs: Vec<(u64, u64)> = if quick {
        vec![(200_000, sustain_secs)]
    } else {
        vec![(10_000, 20), (100_000, 20), (200_000, sustain_secs)]
    };
    let mut paced = Vec::new();
    for &(rate, secs) in &paced_runs {
        for (mode, args) in [
            ("full capture", &[][..]),
            ("counted", &["--count-launches", "1s"][..]),
        ] {
            eprintln!("bench: {rate} launches/s for {secs} s, {mode}");
            let out = tmp.join("paced.json");
            let d = Bg::start(&ctx.bin, &daemon_args(&ctx, &out, args))?;
            let pid = d.pid();
            let (c0, rss0, _) = usage(pid);
            // RSS once a second while it runs (the sampler ends with the workload).
            let (stop_tx, stop_rx) = mpsc::channel::<()>();
            let sampler = std::thread::spawn(move || {
                let mut v = Vec::new();
                while stop_rx.recv_timeout(Duration::from_secs(1)).is_err() {
                    v.push(usage(pid).1);
                }
                v
            });
            let achieved = workload(&ctx, "workload", &[], &[format!("pace {rate} {secs}")])?;
            let _ = stop_tx.send(());
            let rss_seen = sampler.join().unwrap_or_default();
            let (c1, rss1, _) = usage(pid);
            d.stop()?;
            let r = report(&out)?;
            let (counted, dropped) = (launches_in(&r), drops_in(&r));
            paced.push(Paced {
                rate,
                secs,
                mode,
                achieved: achieved.first().copied().unwrap_or(f64::NAN),
                asked: rate * secs,
                counted,
                dropped,
                cpu_s: (c1 - c0) as f64 / ticks_per_second() as f64,
                rss: (
                    rss0,
                    rss1,
                    rss_seen.iter().copied().min(),
                    rss_seen.iter().copied().max(),
                ),
            });
        }
    }

    // 5. Where loss starts. The storm above cannot outrun a daemon with a core of its own on a
    // small machine, so the daemon is held to a small share of one CPU (as an operator's
    // `CPUQuota=` would) and the paced rate is bisected for the first loss. Quick mode runs one
    // storm at 1 % to check that everything lost is counted.
    let onset: std::result::Result<(&str, Vec<Capped>), String> =
        match crate::cpucap::CpuCap::new(&format!("gpuprofd-bench-{}", std::process::id()), 1) {
            Err(e) => Err(format!("{e:#}")),
            Ok(cap) => {
                let kind = cap.kind;
                drop(cap);
                let mut runs = Vec::new();
                if quick {
                    eprintln!("bench: storms with the daemon held to 1% of a CPU");
                    for counted in [false, true] {
                        runs.push(capped_run(
                            &ctx,
                            &tmp,
                            (1, counted),
                            0,
                            "storm 2 300000".into(),
                            600_000,
                        )?);
                    }
                } else {
                    for share in ONSET_SHARES {
                        runs.extend(loss_onset(&ctx, &tmp, share, ONSET_SECS, ONSET_RANGE, 5)?);
                    }
                    // The service's default, at the top of the range and the smallest share:
                    // launches are counted in a map, so no launch records wait for the daemon.
                    let (share, rate) = (ONSET_SHARES[0], ONSET_RANGE.1);
                    eprintln!("bench: daemon held to {share}% of a CPU, counted, {rate}/s");
                    runs.push(capped_run(
                        &ctx,
                        &tmp,
                        (share, true),
                        rate,
                        format!("pace {rate} {ONSET_SECS}"),
                        rate * ONSET_SECS,
                    )?);
                }
                Ok((kind, runs))
            }
        };
    let unaccounted: Vec<String> = onset
        .as_ref()
        .map(|(_, runs)| {
            runs.iter()
                .filter(|c| !c.accounted())
                .map(|c| {
                    format!(
                        "{} held to {}% at {}/s: {} launches counted + {} dropped != {} made",
                        c.mode, c.share, c.rate, c.counted, c.dropped_launch, c.made
                    )
                })
                .collect()
        })
        .unwrap_or_default();

    // 6. Churn of short non-CUDA processes.
    let churn_n = if quick { 100 } else { 2000 };
    eprintln!("bench: {churn_n} short non-CUDA processes, without and with the daemon");
    let spawn_loop = || -> Result<f64> {
        let t = Instant::now();
        for _ in 0..churn_n {
            Command::new("/bin/true").status()?;
        }
        Ok(t.elapsed().as_secs_f64())
    };
    let churn_base = median((0..3).map(|_| spawn_loop()).collect::<Result<Vec<_>>>()?);
    let churn_out = tmp.join("churn.json");
    let d = Bg::start(&ctx.bin, &daemon_args(&ctx, &churn_out, &[]))?;
    let (k0, _, _) = usage(d.pid());
    let churn_with = median((0..3).map(|_| spawn_loop()).collect::<Result<Vec<_>>>()?);
    let (k1, _, _) = usage(d.pid());
    d.stop()?;
    let tick = 1e3 / ticks_per_second() as f64; // ms per tick
    let churn_cpu_ms = (k1 - k0) as f64 * tick;

    // ---- report
    let mut md = String::new();
    md.push_str("| entry shape | probe site | no probes ns/call | empty uprobe at entry | empty uprobe at gpuprofd's site (floor) | gpuprofd full capture (stack on 1 call in 64) | gpuprofd added ÷ floor added | launches counted in the kernel (service default) | counted added ÷ floor added | full capture, no stacks | full capture, stack every call | bpftrace, same probes at the entry, counting |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for r in &rows {
        let ratio = |t: f64| (t - r.none) / (r.floor - r.none);
        md.push_str(&format!(
            "| {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2} | {:.0} | {:.2} | {:.0} | {:.0} | {} |\n",
            r.shape,
            r.site,
            r.none,
            r.floor_entry,
            r.floor,
            r.full,
            ratio(r.full),
            r.counted,
            ratio(r.counted),
            r.no_stacks,
            r.all_stacks,
            r.bpftrace
                .map_or("not run".to_owned(), |t| format!("{t:.0}")),
        ));
    }
    md.push_str("\nThe probes' own time per call, as the kernel accounts it (`BPF_ENABLE_STATS`: run time of every BPF program that ran, summed over the call's probes; median of 3 more runs of the loop with statistics on, the timed runs above ran without them). This is the part of the added cost that gpuprofd's code decides; it leaves out the trap into the kernel and back (the floor column above). The statistics' own bookkeeping (two clock reads per program run) is inside every figure: the empty program, which does nothing, shows its size. The runtime shapes run two programs per call (the driver probe finds it is inside the runtime call and stops early):\n\n| entry shape | empty program (floor) ns | full capture, no stacks | full capture (stack on 1 call in 64) | full capture, stack every call | counted | full capture by program (ns per call) |\n|---|---|---|---|---|---|---|\n");
    for r in &rows {
        let f = |v: f64| {
            if v.is_nan() {
                "not measured".to_owned()
            } else {
                format!("{v:.0}")
            }
        };
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            r.shape,
            f(r.prog[0]),
            f(r.prog[1]),
            f(r.prog[2]),
            f(r.prog[3]),
            f(r.prog[4]),
            r.prog_split
                .iter()
                .map(|(n, ns)| format!("{n} {ns:.0}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    md.push_str(&lower_bound_section(&rows));
    md.push_str(&crate::neighbour::section(&neighbour, neighbour_rounds));
    md.push_str(&crate::bench_inject::section(inject, neighbour_rounds));
    md.push_str("\nSustained rates (one thread launching at a fixed rate through the runtime, in 1 ms slices; daemon CPU is utime + stime over the run):\n\n| launches/s asked | seconds | mode | launches/s achieved | launches made | launches counted | records dropped | daemon CPU s | daemon CPU per 1 M launches | RSS KiB start → end (min–max while running) |\n|---|---|---|---|---|---|---|---|---|---|\n");
    for p in &paced {
        md.push_str(&format!(
            "| {} | {} | {} | {:.0} | {} | {} | {} | {:.2} | {:.2} s | {} → {} ({}–{}) |\n",
            p.rate,
            p.secs,
            p.mode,
            p.achieved,
            p.asked,
            p.counted,
            p.dropped,
            p.cpu_s,
            p.cpu_s * 1e6 / p.asked as f64,
            p.rss.0,
            p.rss.1,
            p.rss.2.map_or("-".into(), |v| v.to_string()),
            p.rss.3.map_or("-".into(), |v| v.to_string()),
        ));
    }
    match &onset {
        Err(why) => md.push_str(&format!(
            "\nWhere loss starts: not measured (the daemon could not be held to a CPU share: \
             {why}).\n"
        )),
        Ok((kind, runs)) => {
            let how = if runs.iter().all(|c| c.rate == 0) {
                "a storm of launches from two threads, under full capture and counted"
            } else {
                "one thread launching at a paced rate, the rate bisected between the highest run \
                 that lost nothing and the lowest that lost records; then the service's default, \
                 launches counted in the kernel, at the top rate"
            };
            md.push_str(&format!(
                "\nWhere loss starts: the daemon held to a share of one CPU \
                 ({kind} CPU bandwidth control, 100 ms period, joined once its probes are in), \
                 {how}. Every run's launches made = counted + dropped is checked.\n\n\
                 | daemon's CPU share | mode | launches/s asked | achieved | seconds | launches made | \
                 launches counted | launch records dropped | other records dropped | counted + \
                 dropped = made | daemon CPU s |\n|---|---|---|---|---|---|---|---|---|---|---|\n"
            ));
            for c in runs {
                md.push_str(&format!(
                    "| {} % | {} | {} | {:.0} | {:.1} | {} | {} | {} | {} | {} | {:.2} |\n",
                    c.share,
                    c.mode,
                    if c.rate == 0 {
                        "storm".to_owned()
                    } else {
                        c.rate.to_string()
                    },
                    c.achieved,
                    c.secs,
                    c.made,
                    c.counted,
                    c.dropped_launch,
                    c.dropped_all.saturating_sub(c.dropped_launch),
                    if c.accounted() { "yes" } else { "**no**" },
                    c.cpu_s,
                ));
            }
            let mut shares: Vec<u32> = runs.iter().map(|c| c.share).collect();
            shares.sort_unstable();
            shares.dedup();
            for share in shares {
                let of = || {
                    runs.iter()
                        .filter(|c| c.share == share && c.rate > 0 && c.mode == "full capture")
                };
                let ok = of().filter(|c| !c.lossy()).map(|c| c.rate).max();
                let bad = of().filter(|c| c.lossy()).map(|c| c.rate).min();
                let per_core = |r: u64| r as f64 * 100.0 / f64::from(share) / 1e6;
                md.push_str(&match (ok, bad) {
                    (Some(ok), Some(bad)) => format!(
                        "\nHeld to {share} % of one CPU: nothing lost at {ok} launches/s, records \
                         lost from {bad} launches/s. *Derived*, assuming the drain rate scales \
                         with the share: a daemon with a whole core starts to lose records \
                         between {:.1} and {:.1} M launches/s.\n",
                        per_core(ok),
                        per_core(bad),
                    ),
                    (None, Some(bad)) => format!(
                        "\nHeld to {share} % of one CPU: records lost already at {bad} \
                         launches/s, the lowest rate tried.\n"
                    ),
                    (Some(ok), None) => format!(
                        "\nHeld to {share} % of one CPU: nothing lost up to {ok} launches/s, the \
                         highest rate tried.\n"
                    ),
                    (None, None) => String::new(),
                });
            }
            for c in runs.iter().filter(|c| c.mode == "counted" && c.rate > 0) {
                md.push_str(&format!(
                    "\nLaunches counted in the kernel (the service's default), the daemon held to \
                     {} % of one CPU, {} launches/s: {} of {} launches counted, {} records \
                     dropped.\n",
                    c.share, c.rate, c.counted, c.made, c.dropped_all
                ));
            }
            if runs.iter().any(|c| c.rate > 0) {
                md.push_str(&format!(
                    "\nA rate just above the daemon's drain rate fills the {} MiB ring buffer \
                     (about {} k launch records of {LAUNCH_RING_BYTES} bytes) before anything is \
                     lost: over {ONSET_SECS} s that hides an excess of up to about {} launches/s, \
                     so the onset of a longer run lies at most that much lower.\n",
                    RING_BYTES >> 20,
                    RING_BYTES / LAUNCH_RING_BYTES / 1000,
                    RING_BYTES / LAUNCH_RING_BYTES / ONSET_SECS,
                ));
            }
        }
    }
    let storm_rate = rate.first().copied().unwrap_or(f64::NAN);
    let traps = crate::bench_traps::run(&ctx, &tmp, quick)?;
    let summary = format!(
        "{md}\nPipeline (decode + aggregate, one thread, synthetic launches): {:.1} M events/s; \
         also writing a capture file: {:.1} M events/s ({:.1} bytes per launch record on disk).\n\n\
         Export of that capture as a Perfetto trace (`gpuprofd export`, median of 3 runs or \
         more): {:.0} k records/s, {:.0} bytes per record (issue 32's goals: ≥ 1,000 k \
         records/s, ≤ 50 bytes).\n\n\
         Launch storm, {threads} thread(s) × {per} runtime launches through the real probes and ring buffer: \
         {:.0} launches/s achieved by the workload under capture, {storm_launches} of {asked} counted, \
         {storm_drops} dropped; daemon CPU {:.2} s over {:.2} s wall, RSS {} KiB (peak {} KiB).\n\n\
         Full-capture run above: {full_drops} records dropped.\n\n\
         Churn: {churn_n} `/bin/true` processes took {:.2} s without the daemon and {:.2} s with it \
         (median of 3); daemon CPU for the {} processes of the 3 runs: {:.0} ms.\n",
        pipe / 1e6,
        pipe_cap / 1e6,
        capture_bytes as f64 / events as f64,
        export_rate / 1e3,
        export_bytes,
        storm_rate,
        (c1 - c0) as f64 * tick / 1e3,
        storm_secs,
        rss,
        hwm,
        churn_base,
        churn_with,
        3 * churn_n,
        churn_cpu_ms,
    ) + &traps;
    println!("{summary}");

    let paced_lost: Vec<String> = paced
        .iter()
        .filter(|p| p.counted != p.asked || p.dropped != 0)
        .map(|p| {
            format!(
                "{} at {}/s: {} of {} launches counted, {} records dropped",
                p.mode, p.rate, p.counted, p.asked, p.dropped
            )
        })
        .collect();
    if !unaccounted.is_empty() {
        // A loss the daemon cannot see is a bug whatever the rate: no document is written.
        bail!(
            "records lost without being counted: {}",
            unaccounted.join("; ")
        );
    }
    if storm_launches != asked || storm_drops != 0 || full_drops != 0 || !paced_lost.is_empty() {
        if quick {
            bail!(
                "records lost at a modest rate: {storm_launches} of {asked} launches counted, \
                 {storm_drops} dropped in the storm, {full_drops} in the full-capture run; {}",
                paced_lost.join("; ")
            );
        }
        eprintln!("bench: WARNING: records were lost (see above)");
    }
    if !quick {
        write_doc(root, &summary, &ctx, sustain_secs)?;
    }
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(())
}

pub(crate) fn ticks_per_second() -> i64 {
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if v > 0 { v } else { 100 }
}

fn write_doc(root: &Path, summary: &str, ctx: &Ctx, sustain_secs: u64) -> Result<()> {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_default();
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let date = Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    // What the kernel does on every function return and user copy decides much of a probe's
    // cost: say which mitigations were in force.
    let vuln = |f: &str| {
        std::fs::read_to_string(format!("/sys/devices/system/cpu/vulnerabilities/{f}"))
            .map(|v| v.trim().to_owned())
            .unwrap_or_else(|_| "unknown".into())
    };
    let mitigations = format!(
        "spectre_v2: {}; spec_rstack_overflow: {}",
        vuln("spectre_v2"),
        vuln("spec_rstack_overflow")
    );
    let rss_note = if sustain_secs >= 600 {
        format!(
            "RSS over a sustained launch rate for {sustain_secs} s: the 200 k launches/s rows of \
             the table above (RSS at start and end, and its range sampled every second)."
        )
    } else {
        "RSS over a 10-minute run at a sustained launch rate: this run's longest is in the table \
         above; `cargo xtask bench --sustain-seconds 600` makes the 200 k launches/s run last ten \
         minutes."
            .to_owned()
    };
    let gpu =
        gpu_section(&std::fs::read_to_string(root.join("docs/VALIDATION.md")).unwrap_or_default());
    let doc = format!(
        "# Performance\n\n\
         Generated by `cargo xtask bench` on {date}: {ncpu} CPUs ({cpu}), kernel {}; CPU \
         mitigations in force: {mitigations}. \
         Regenerate with the same command. These machines are noisy: figures are medians of {} runs \
         of {} calls; compare ratios measured in the same run, not absolute numbers across runs.\n\n\
         ## Method\n\n\
         * **Per hooked call**: the fake CUDA workload launches one kernel {} times in a loop \
         (`time_launch`), with no probes; with an *empty* uprobe (`gpuprofd floor`) at the symbol \
         entry and at the site gpuprofd's placement picks (the floor: the kernel's uprobe cost with \
         none of our work); and under `gpuprofd --all-jobs` (full capture: records into the ring \
         buffer, read and aggregated). The runtime shapes go through two probes per call (the \
         runtime entry and the driver call it makes, which the kernel-side pairing suppresses). \
         The ratio column is gpuprofd's added time per call (default capture: a call stack on \
         one call in 64, drawn at random) divided by the floor's added time; the last two columns \
         are the same capture with `--stack-period 0` (no stacks) and `--stack-period 1` (a stack, \
         frame-pointer walk and 576-byte record, on every call), each from its own daemon run. \
         gpuprofd and the empty probes are attached the same way: one `uprobe_multi` link per \
         program and library where the kernel has them (6.6+), else a perf-event uprobe each.\n\
         * **Counted**: the same loop under `gpuprofd --all-jobs --count-launches 1s`, what \
         `gpuprofd serve` runs by default: launches are added to a counter in a BPF hash map \
         instead of a ring-buffer record each (stacks still sampled on one call in 64).\n\
         * **Lower bound**: the same loop with `gpuprofd floor --program record` at gpuprofd's \
         site of the outermost call: a program that does only what any probe recording a launch \
         must do (one user-memory read of the stack-passed arguments, one clock read, one ring \
         record, read and counted by the floor process, which checks it got one per call), and \
         with each of those three parts alone. It separates what the host charges for a record \
         from what gpuprofd's own bookkeeping adds.\n\
         * **bpftrace**: the same launch probes as a bpftrace program (Debian's bpftrace 0.17, \
         when installed: `apt-get install bpftrace`): a uprobe at each symbol's entry (where \
         bpftrace puts it) counting calls in a map keyed by pid and the first four arguments.\n\
         * **Pipeline**: synthetic launch records through decode and aggregation on one thread \
         (`gpuprofd bench-pipeline`), and the same while journaling every record into a capture \
         file (`--capture`, as `--output FILE.gpuprof` does).\n\
         * **Storm**: runtime launches from several threads as fast as they go, under full \
         capture; counted launches, drops, daemon CPU (utime+stime) and RSS.\n\
         * **Sustained rates**: one thread launching at a fixed rate (`pace RATE SECONDS`: \
         RATE/1000 launches per 1 ms slice) under full capture and under counting: launches \
         counted against launches made, records dropped, the daemon's CPU time and its RSS \
         sampled every second.\n\
         * **Where loss starts**: the storm cannot outrun a daemon that has a core to itself on \
         this machine, so the daemon is held to a small share of one CPU in a cgroup (what an \
         operator's `CPUQuota=` does) and one thread launches at paced rates, bisected between \
         the highest that lost nothing and the lowest that lost records. The onset for a whole \
         core is derived from it, not measured.\n\
         * **Churn**: short `/bin/true` processes next to the daemon: what the late-load watcher \
         costs a node where other jobs start processes.\n\
         * All of this is CPU-side: uprobes cost time on the calling thread; GPU time is not \
         involved (there is no GPU here).\n\n\
         ## Results\n\n{summary}\n\
         ## Not measured here\n\n\
         Where a daemon with a whole core starts to lose records: at the highest rate the probes \
         let this machine's threads launch (the storm above) nothing is lost; the figure above is \
         derived from a daemon held to a share of a core. {rss_note} GPU figures: \
         docs/VALIDATION.md.\n{gpu}",
        kernel.trim(),
        ctx.reps,
        ctx.calls,
        ctx.calls,
    );
    std::fs::create_dir_all(root.join("docs"))?;
    std::fs::write(root.join("docs/PERFORMANCE.md"), doc)?;
    eprintln!("bench: wrote docs/PERFORMANCE.md");
    Ok(())
}

/// The GPU overhead measured by `scripts/gpu-validate.sh` on a lent GPU machine, as recorded in
/// docs/VALIDATION.md (its "### Overhead" section, up to the next heading): carried into
/// docs/PERFORMANCE.md so that regenerating it keeps the GPU figures beside the CPU ones.
/// Empty where VALIDATION.md has none.
fn gpu_section(validation: &str) -> String {
    let Some(start) = validation.find("\n### Overhead") else {
        return String::new();
    };
    let body = &validation[start + 1..];
    let body = body[4..].find("\n#").map_or(body, |end| &body[..end + 4]);
    let body = body.trim_end();
    let body = body.strip_prefix("### ").unwrap_or(body);
    format!(
        "\n## On a GPU: {body}\n\n(Copied from docs/VALIDATION.md, where the runs are described.)\n"
    )
}

#[cfg(test)]
mod tests {
    use super::{Row, lower_bound_section};

    fn row(shape: &'static str, none: f64, floor: f64, full: f64, lower: [f64; 4]) -> Row {
        Row {
            shape,
            site: "",
            none,
            floor_entry: f64::NAN,
            floor,
            full,
            no_stacks: f64::NAN,
            all_stacks: f64::NAN,
            counted: f64::NAN,
            bpftrace: None,
            prog: [69.0, f64::NAN, 571.0, f64::NAN, f64::NAN],
            prog_split: Vec::new(),
            lower,
            prog_lower: 376.0,
        }
    }

    #[test]
    fn the_lower_bound_is_set_against_the_goals_budget() {
        let text = lower_bound_section(&[
            row(
                "driver",
                27.0,
                973.0,
                1415.0,
                [1172.0, 1081.0, 978.0, 1040.0],
            ),
            row(
                "runtime",
                56.0,
                1866.0,
                2805.0,
                [2183.0, f64::NAN, f64::NAN, f64::NAN],
            ),
        ]);
        println!("{text}");
        assert!(
            text.contains(
                "| driver | 946 | +108 | +5 | +67 | 1172 | 1.21 | 1.47 | 243 | 376 / 571 |\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "| runtime | 1810 | not measured | not measured | not measured | 2183 | 1.18 | \
                 1.52 | 622 | 376 / 571 |\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "* driver: 1.2× leaves 189 ns per call above the empty probe; the lower bound \
                 takes 199 ns of it (105 %): none left. gpuprofd's own work above the lower \
                 bound: 243 ns.\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "* runtime: 1.2× leaves 362 ns per call above the empty probe; the lower bound \
                 takes 317 ns of it (88 %): 45 ns left. gpuprofd's own work above the lower \
                 bound: 622 ns.\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn the_gpu_overhead_section_is_carried_over() {
        let v = "# V\n\n### Code view\n\nx\n\n### Overhead (issue 7)\n\n| a |\n|---|\n\n## Next\n";
        assert_eq!(
            super::gpu_section(v),
            "\n## On a GPU: Overhead (issue 7)\n\n| a |\n|---|\n\n(Copied from docs/VALIDATION.md, where the runs are described.)\n"
        );
        assert_eq!(super::gpu_section("# V\n\nnothing yet\n"), "");
        // The last section of the file.
        assert_eq!(
            super::gpu_section("### Overhead\n\nt\n".replace("###", "\n###").as_str()),
            "\n## On a GPU: Overhead\n\nt\n\n(Copied from docs/VALIDATION.md, where the runs are described.)\n"
        );
    }
}
