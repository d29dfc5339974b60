//! `cargo xtask bench`, the loss-onset section: where a daemon held to a small share of one CPU
//! starts to lose records, found by paced runs and bisection. Moved out of bench.rs (which
//! keeps the report that prints these runs) to keep that file to one job per room.

use crate::bench::{
    Bg, Ctx, daemon_args, drops_in, launches_in, report, ticks_per_second, usage, workload,
};
use anyhow::Result;
use std::path::Path;
use std::time::{Duration, Instant};

/// The CPU shares (percent of one CPU) the loss-onset search holds the daemon to: small enough
/// that one launching thread outruns it on a two-CPU machine, two of them to show how the
/// onset scales with the share.
pub(crate) const ONSET_SHARES: [u32; 2] = [1, 2];
/// Seconds per paced run of the loss-onset search.
pub(crate) const ONSET_SECS: u64 = 15;
/// Launches/s the loss-onset search starts from (the top is within what one thread launches
/// through two probes per call on this machine kind).
pub(crate) const ONSET_RANGE: (u64, u64) = (10_000, 250_000);
/// A launch record's bytes in the ring buffer (24-byte record header, 56-byte body, the
/// ring's own 8-byte header), to say how large a backlog the 16 MiB ring absorbs.
pub(crate) const LAUNCH_RING_BYTES: u64 = 88;
pub(crate) const RING_BYTES: u64 = 16 << 20;

/// One run with the daemon held to `share` percent of one CPU.
pub(crate) struct Capped {
    pub(crate) share: u32,
    /// "full capture" or "counted" (`--count-launches`: no record per launch).
    pub(crate) mode: &'static str,
    /// Launches per second asked of the paced workload (0 for a storm, which goes as fast as
    /// the probes let it).
    pub(crate) rate: u64,
    pub(crate) secs: f64,
    pub(crate) achieved: f64,
    pub(crate) made: u64,
    pub(crate) counted: u64,
    /// Launch records dropped (every one counted by the probe that could not reserve it).
    pub(crate) dropped_launch: u64,
    /// Records of every kind dropped (stacks, exits, ...).
    pub(crate) dropped_all: u64,
    pub(crate) cpu_s: f64,
}

impl Capped {
    pub(crate) fn lossy(&self) -> bool {
        self.dropped_all > 0 || self.counted != self.made
    }
    /// Every launch made is either in the report or counted as dropped.
    pub(crate) fn accounted(&self) -> bool {
        self.counted + self.dropped_launch == self.made
    }
}

/// Runs the workload command `line` (which makes `made` launches) under full capture, or with
/// launches counted in the kernel when `counted`, the daemon moved into a cgroup that holds it
/// to `share` percent of one CPU once its probes are in.
pub(crate) fn capped_run(
    ctx: &Ctx,
    tmp: &Path,
    (share, counted): (u32, bool),
    rate: u64,
    line: String,
    made: u64,
) -> Result<Capped> {
    let cap = crate::cpucap::CpuCap::new(&format!("gpuprofd-bench-{}", std::process::id()), share)?;
    let out = tmp.join("capped.json");
    let extra: &[&str] = if counted {
        &["--count-launches", "1s"]
    } else {
        &[]
    };
    let d = Bg::start(&ctx.bin, &daemon_args(ctx, &out, extra))?;
    let pid = d.pid();
    if let Err(e) = cap.add(pid) {
        let _ = d.stop();
        return Err(e);
    }
    let (c0, _, _) = usage(pid);
    let t = Instant::now();
    let achieved = workload(ctx, "workload", &[], &[line]);
    let secs = t.elapsed().as_secs_f64();
    // The daemon is still held to its share while it drains what the ring buffer holds.
    std::thread::sleep(Duration::from_secs(1));
    let (c1, _, _) = usage(pid);
    d.stop()?;
    drop(cap);
    let achieved = achieved?;
    let r = report(&out)?;
    Ok(Capped {
        share,
        mode: if counted { "counted" } else { "full capture" },
        rate,
        secs,
        achieved: achieved.first().copied().unwrap_or(f64::NAN),
        made,
        counted: launches_in(&r),
        dropped_launch: r["drops"]["launch"].as_u64().unwrap_or(0),
        dropped_all: drops_in(&r),
        cpu_s: (c1 - c0) as f64 / ticks_per_second() as f64,
    })
}

/// Where a daemon held to `share` percent of one CPU starts to lose records: paced runs of
/// `secs` seconds, first at `hi` and `lo` launches/s, then bisecting between the highest
/// loss-free and the lowest lossy rate `steps` times (rates in whole thousands, as `pace`
/// makes them exactly). Every run is returned, in the order run.
pub(crate) fn loss_onset(
    ctx: &Ctx,
    tmp: &Path,
    share: u32,
    secs: u64,
    (lo, hi): (u64, u64),
    steps: u32,
) -> Result<Vec<Capped>> {
    let run = |rate: u64| -> Result<Capped> {
        eprintln!("bench: daemon held to {share}% of a CPU, {rate} launches/s for {secs} s");
        capped_run(
            ctx,
            tmp,
            (share, false),
            rate,
            format!("pace {rate} {secs}"),
            rate * secs,
        )
    };
    let mut runs = vec![run(hi)?];
    if !runs[0].lossy() {
        return Ok(runs);
    }
    runs.push(run(lo)?);
    if runs[1].lossy() {
        return Ok(runs);
    }
    let (mut ok, mut bad) = (lo, hi);
    for _ in 0..steps {
        let mid = (ok + bad) / 2 / 1000 * 1000;
        if mid <= ok || mid >= bad {
            break;
        }
        let r = run(mid)?;
        if r.lossy() {
            bad = mid;
        } else {
            ok = mid;
        }
        runs.push(r);
    }
    Ok(runs)
}
