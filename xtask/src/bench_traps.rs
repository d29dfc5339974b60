//! `cargo xtask bench`, issue 35's section: what one trap per runtime launch costs against two,
//! and what the service's duty cycle saves a launching process at 10 %, 25 % and 100 % of the
//! time, with the daemon's CPU per million launches in each. Ratios against the baseline (no
//! daemon) and the one-probe floor measured in the same run. Its own module: bench.rs is the
//! long-standing table, this one adds rows without growing it.

use crate::bench::{Bg, Ctx, SHAPES, Shape, daemon_args, time_calls};
use anyhow::Result;
use std::path::Path;

/// The duty cycles measured (`None`: the launch probes attached all the time).
const DUTIES: [(&str, Option<&str>); 3] = [
    ("100 %", None),
    ("25 %", Some("250ms/1s")),
    ("10 %", Some("100ms/1s")),
];

/// The section's markdown (also printed).
pub fn run(ctx: &Ctx, tmp: &Path, quick: bool) -> Result<String> {
    let mut md = String::from(
        "\n## One trap per runtime launch, and the duty cycle (issue 35)\n\n\
         Per call (ns, median of the runs) of a runtime launch (`cudaLaunchKernel` → \
         `cuLaunchKernel`) under full capture with one trap (`--launch-traps one`: the \
         runtime's entry left unprobed, the default but for `--pid`) and with two \
         (`--launch-traps two`), against no daemon and against one empty uprobe on \
         `cuLaunchKernel` at the site gpuprofd picks (the floor of any one-trap design). \
         The ratio is added time over the floor's added time (goal ≤ 1.2).\n\n\
         | shape | none | floor, 1 probe | one trap | two traps | one / floor | two / floor |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for s in SHAPES.iter().filter(|s| s.mode == "rt") {
        let one_probe = Shape {
            floor_symbols: &[("libcuda.so.1", "cuLaunchKernel")],
            ..*s
        };
        eprintln!("bench: {}: one trap / two traps", s.name);
        let none = time_calls(ctx, s)?;
        let floor = crate::bench::floor(ctx, &one_probe, false)?;
        let with = |traps: &str| -> Result<f64> {
            let out = tmp.join(format!("traps-{traps}.json"));
            let d = Bg::start(
                &ctx.bin,
                &daemon_args(ctx, &out, &["--launch-traps", traps, "--stack-period", "0"]),
            )?;
            let t = time_calls(ctx, s)?;
            d.stop()?;
            Ok(t)
        };
        let (one, two) = (with("one")?, with("two")?);
        let ratio = |t: f64| (t - none) / (floor - none);
        md.push_str(&format!(
            "| {} | {none:.0} | {floor:.0} | {one:.0} | {two:.0} | {:.2} | {:.2} |\n",
            s.name,
            ratio(one),
            ratio(two)
        ));
    }

    // The duty cycle: the service's counted launches, the probes attached a share of the time.
    let s = &SHAPES[1];
    let calls = if quick { 2_000_000 } else { 20_000_000 };
    // A duty cycle's run must span many periods at the speed of the launches its windows leave
    // unprobed: counted in launches alone, a run of unprobed launches (about 0.1 µs each here)
    // ended before the first window and measured no probe at all.
    let span_s = if quick { 3.0 } else { 10.0 };
    md.push_str(&format!(
        "\nService mode (launches counted in the kernel, one trap) on the `{}` shape, {calls} \
         launches per run with the probes attached all the time, and under a duty cycle as many \
         as span {span_s:.0} s of 1 s periods at the speed of unprobed launches (one run): the \
         added time per launch \
         against no daemon, and the daemon's CPU per million launches. The duty cycle attaches \
         the launch probes for the window of each period only; the attach and detach of each \
         window run on a thread of the daemon (their median time from the report). The loop \
         launches back to back, so a window (slow, probed launches) holds fewer of its launches \
         than its share of the time, and the added time per launch reads below what a process \
         launching at a steady rate pays: that is about the duty share times the 100 % row's \
         added time.\n\n\
         | launch probes attached | ns per launch | added ns | daemon CPU ms per M launches | \
         attach / detach median |\n|---|---|---|---|---|\n",
        s.name
    ));
    let long = Ctx {
        bin: ctx.bin.clone(),
        fake: ctx.fake.clone(),
        calls,
        reps: ctx.reps.clamp(1, 3),
    };
    let none = time_calls(&long, s)?;
    md.push_str(&format!("| no daemon | {none:.0} | – | – | – |\n"));
    for (label, cycle) in DUTIES {
        let (calls, reps) = match cycle {
            None => (long.calls, long.reps),
            Some(_) => ((span_s * 1e9 / none.max(1.0)).ceil() as u64, 1),
        };
        let row = Ctx {
            bin: ctx.bin.clone(),
            fake: ctx.fake.clone(),
            calls,
            reps,
        };
        eprintln!("bench: service mode, launch probes attached {label}");
        let out = tmp.join("duty.json");
        let mut args = vec!["--count-launches", "1s", "--stack-period", "0"];
        if let Some(c) = cycle {
            args.extend_from_slice(&["--launch-duty", c]);
        }
        let d = Bg::start(&ctx.bin, &daemon_args(ctx, &out, &args))?;
        let pid = d.pid();
        let c0 = crate::bench::usage(pid).0;
        let t = time_calls(&row, s)?;
        let c1 = crate::bench::usage(pid).0;
        d.stop()?;
        let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&out)?)?;
        let cost = |k: &str| {
            r["launch_duty"][k]
                .as_u64()
                .map_or("–".to_owned(), |v| format!("{:.1} ms", v as f64 / 1e3))
        };
        let launches = (row.calls * row.reps as u64) as f64;
        let cpu_ms = (c1 - c0) as f64 * 1e3 / crate::bench::ticks_per_second() as f64;
        md.push_str(&format!(
            "| {label}{} | {t:.0} | {:.0} | {:.1} | {} / {} |\n",
            cycle.map_or(String::new(), |c| format!(" (`{c}`)")),
            t - none,
            cpu_ms / (launches / 1e6),
            cost("attach_us_median"),
            cost("detach_us_median"),
        ));
    }
    println!("{md}");
    Ok(md)
}
