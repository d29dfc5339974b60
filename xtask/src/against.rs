//! `cargo xtask bench --against OTHER`: this build's probes against another gpuprofd binary's,
//! per hooked call, in interleaved rounds. A probe change saves tens of nanoseconds where one
//! machine's runs drift by more than that over minutes, so the two builds are measured turn
//! about (which goes first alternates by round) and each round is one pair.

use crate::bench::{Bg, Ctx, SHAPES, daemon_args, median, program_time_once, time_calls};
use anyhow::Result;
use std::path::Path;

/// The capture modes compared: a record per launch, and launches counted in the kernel.
const MODES: [(&str, &[&str]); 2] = [
    ("full capture", &[]),
    ("counted", &["--count-launches", "1s"]),
];

/// One build's figures for one shape and mode, a pair per round: [timed ns per call, probe
/// program ns per call].
type Series = Vec<[f64; 2]>;

pub fn run(this: &Path, other: &Path, fake: &Path, rounds: usize, calls: u64) -> Result<()> {
    let builds = [("this", this), ("other", other)];
    // [mode][shape][build]
    let mut got: Vec<Vec<[Series; 2]>> = MODES
        .iter()
        .map(|_| SHAPES.iter().map(|_| [Vec::new(), Vec::new()]).collect())
        .collect();
    let tmp = std::env::temp_dir().join(format!("gpuprofd-against-{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    for round in 0..rounds {
        for (m, (mode, args)) in MODES.iter().enumerate() {
            for turn in 0..2 {
                let b = (turn + round) % 2;
                let (label, bin) = builds[b];
                eprintln!(
                    "against: round {}/{rounds}, {mode}, {label} build",
                    round + 1
                );
                let ctx = Ctx {
                    bin: bin.to_owned(),
                    fake: fake.to_owned(),
                    calls,
                    reps: 1,
                };
                let out = tmp.join("against.json");
                let d = Bg::start(&ctx.bin, &daemon_args(&ctx, &out, args))?;
                for (s, shape) in SHAPES.iter().enumerate() {
                    let timed = time_calls(&ctx, shape)?;
                    let (prog, _) = program_time_once(&ctx, shape)?;
                    got[m][s][b].push([timed, prog]);
                }
                d.stop()?;
            }
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);

    println!(
        "Per hooked call, {rounds} interleaved rounds of {calls} calls: this build ({}) against \
         the other ({}). Medians; `lower` counts the rounds in which this build's figure was the \
         lower of the pair.\n",
        this.display(),
        other.display()
    );
    println!(
        "| mode | entry shape | timed ns/call: this | other | lower | probe program ns/call: \
         this | other | lower |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (m, (mode, _)) in MODES.iter().enumerate() {
        for (s, shape) in SHAPES.iter().enumerate() {
            let [a, b] = &got[m][s];
            // Column `i` of each pair (0 timed, 1 program): this build's median, the other's,
            // and the rounds in which this build's was the lower.
            let col = |v: &Series, i: usize| median(v.iter().map(|p| p[i]).collect());
            // "-" where the kernel kept no program statistics (NaN), rather than "0/N".
            let lower = |i: usize| {
                if a.iter().chain(b).any(|p| p[i].is_nan()) {
                    return "-".to_owned();
                }
                let n = a.iter().zip(b).filter(|(x, y)| x[i] < y[i]).count();
                format!("{n}/{rounds}")
            };
            println!(
                "| {mode} | {} | {:.0} | {:.0} | {} | {:.0} | {:.0} | {} |",
                shape.name,
                col(a, 0),
                col(b, 0),
                lower(0),
                col(a, 1),
                col(b, 1),
                lower(1),
            );
        }
    }
    Ok(())
}
