//! The benchmark's neighbour figures: what a CUDA process that `gpuprofd --pid` does not watch
//! pays per call, with the probes in the selected process only (the default) and in every
//! process that maps the library (`GPUPROFD_PER_PROCESS=0`, as before), against no daemon.

use crate::bench::{Bg, Ctx, SHAPES, median, time_calls};
use anyhow::{Context as _, Result, bail};
use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A workload that maps the fake libraries and waits (the process `--pid` selects); it ends
/// when dropped.
struct Selected(Child);

impl Selected {
    fn start(ctx: &Ctx) -> Result<Selected> {
        let mut child = Command::new(ctx.fake.join("bin/workload"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("start the selected workload")?;
        let out = child.stdout.take().context("its stdout")?;
        let mut line = String::new();
        BufReader::new(out).read_line(&mut line)?;
        if !line.starts_with("ready ") {
            bail!("the selected workload said {line:?}, not its ready line");
        }
        Ok(Selected(child))
    }
}

impl Drop for Selected {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Per shape: (no daemon, probes in the selected process only, probes in every process), ns
/// per call of a process the daemon does not watch; medians of interleaved rounds.
pub(crate) fn measure(ctx: &Ctx, tmp: &Path, rounds: usize) -> Result<Vec<[f64; 3]>> {
    let selected = Selected::start(ctx)?;
    let pid = selected.0.id().to_string();
    let out = tmp.join("neighbour.json");
    let args: Vec<String> = [
        "--pid",
        &pid,
        "--no-system-libs",
        "--no-live",
        "--no-nvml",
        "--lib",
        &ctx.fake.join("lib").display().to_string(),
        "--lib",
        &ctx.fake.join("lib-cet").display().to_string(),
        "-o",
        &out.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut runs: Vec<[Vec<f64>; 3]> = SHAPES.iter().map(|_| Default::default()).collect();
    for round in 0..rounds {
        eprintln!("bench: neighbour of --pid, round {}", round + 1);
        for (i, env) in [None, Some("1"), Some("0")].into_iter().enumerate() {
            let d = match env {
                Some(v) => Some(Bg::start_env(
                    &ctx.bin,
                    &args,
                    &[("GPUPROFD_PER_PROCESS", v)],
                )?),
                None => None,
            };
            for (r, s) in runs.iter_mut().zip(SHAPES.iter()) {
                r[i].push(time_calls(ctx, s)?);
            }
            if let Some(d) = d {
                d.stop()?;
            }
        }
    }
    drop(selected);
    Ok(runs
        .into_iter()
        .map(|[a, b, c]| [median(a), median(b), median(c)])
        .collect())
}

/// The neighbour table for the benchmark's report.
pub(crate) fn section(figures: &[[f64; 3]], rounds: usize) -> String {
    let mut md = format!(
        "\nA neighbour under `--pid`: ns per call of a CUDA process the daemon does not watch, \
         while `gpuprofd --pid` captures another process on the same libraries (medians of {rounds} \
         interleaved rounds). With `uprobe_multi` links gpuprofd puts the breakpoints into the \
         selected process only; `GPUPROFD_PER_PROCESS=0` attaches them for every process that \
         maps the library, as before, where the neighbour takes the trap and the in-kernel \
         filter turns it away. Goal: no measurable added time.\n\n\
         | entry shape | no daemon | `--pid`, probes in the selected process only | added | `--pid`, probes in every process | added |\n|---|---|---|---|---|---|\n"
    );
    for (s, [none, only, every]) in SHAPES.iter().zip(figures) {
        md.push_str(&format!(
            "| {} | {none:.1} | {only:.1} | {:+.1} | {every:.1} | {:+.1} |\n",
            s.name,
            only - none,
            every - none
        ));
    }
    md
}
