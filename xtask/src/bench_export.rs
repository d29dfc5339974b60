//! The export benchmark: a capture exported whole as a Perfetto trace, the median of a few
//! runs. Issue 32 sets its goals (at least 1 M records a second, at most 50 bytes a record) as
//! measured by `cargo xtask bench` on a capture it makes; the bench hands it the pipeline
//! benchmark's.

use anyhow::{Result, bail};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

/// Exports `capture` (`records` records) with `bin` into `tmp`, `runs` times; the median
/// records per second and the bytes per record of the trace.
pub fn measure(
    bin: &Path,
    capture: &Path,
    tmp: &Path,
    records: u64,
    runs: usize,
) -> Result<(f64, f64)> {
    eprintln!("bench: export of the pipeline's capture (Perfetto's format, {runs} runs)");
    let mut rates = Vec::new();
    let mut bytes = 0.0;
    for _ in 0..runs.max(1) {
        let (rate, b) = once(bin, capture, tmp, records)?;
        rates.push(rate);
        bytes = b;
    }
    rates.sort_by(f64::total_cmp);
    Ok((rates[rates.len() / 2], bytes))
}

/// One export: records per second and bytes per record.
fn once(bin: &Path, capture: &Path, tmp: &Path, records: u64) -> Result<(f64, f64)> {
    let trace = tmp.join("pipeline.pftrace");
    let t = Instant::now();
    let st = Command::new(bin)
        .arg("export")
        .arg(capture)
        .arg("-o")
        .arg(&trace)
        .args(["--max-size", "0"])
        .stderr(Stdio::null())
        .status()?;
    let secs = t.elapsed().as_secs_f64();
    let bytes = std::fs::metadata(&trace).map(|m| m.len()).unwrap_or(0);
    let _ = std::fs::remove_file(&trace);
    // A capture without a closing frame exports with exit 0 and a warning.
    if !st.success() || bytes == 0 {
        bail!("export of the pipeline's capture failed: {st}");
    }
    Ok((records as f64 / secs, bytes as f64 / records as f64))
}
