//! The benchmark's injection-library figures: what `libgpuprofd_inject.so` costs a program's
//! launches while gpuprofd is absent. The library hooks nothing on the launch path (it only
//! starts a thread that reads its semaphore every 100 ms), so the goal is "not measurable
//! against no library". Runtime launches through the fake libraries, with the fake CUPTI on
//! the library path (found, never loaded while nobody listens); interleaved rounds, medians.
//!
//! The cost with gpuprofd listening is CUPTI's own (it timestamps every kernel on the GPU and
//! fills buffers): on the fake CUPTI it would measure the fake, so it belongs to the GPU
//! validation (`scripts/gpu-validate.sh --only gputime`, beside torch.profiler's).

use crate::bench::{Ctx, median, workload};
use anyhow::{Result, bail};

/// (no library, library loaded with nobody listening): ns per runtime launch, medians of
/// `rounds` interleaved rounds.
pub(crate) fn measure(ctx: &Ctx, rounds: usize) -> Result<(f64, f64)> {
    let lib = ctx.bin.with_file_name("libgpuprofd_inject.so");
    if !lib.exists() {
        bail!(
            "{} does not exist: `cargo xtask build` builds it",
            lib.display()
        );
    }
    let libs = std::env::join_paths([ctx.fake.join("lib"), ctx.fake.join("lib-cupti")])?;
    let libs = std::path::PathBuf::from(libs);
    let lines: Vec<String> = (0..ctx.reps)
        .map(|_| format!("time_launch rt {}", ctx.calls))
        .collect();
    let (mut none, mut loaded) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        eprintln!(
            "bench: the injection library, absent gpuprofd, round {}",
            round + 1
        );
        none.push(median(workload(
            ctx,
            "workload",
            &[("LD_LIBRARY_PATH", &libs)],
            &lines,
        )?));
        loaded.push(median(workload(
            ctx,
            "workload",
            &[("LD_LIBRARY_PATH", &libs), ("CUDA_INJECTION64_PATH", &lib)],
            &lines,
        )?));
    }
    Ok((median(none), median(loaded)))
}

/// The injection library's paragraph for the benchmark's report.
pub(crate) fn section((none, loaded): (f64, f64), rounds: usize) -> String {
    format!(
        "\nThe injection library while gpuprofd is absent (`CUDA_INJECTION64_PATH` set, nobody \
         listening; docs/INJECTION.md): {loaded:.1} ns per runtime launch against {none:.1} ns \
         with no library ({:+.1} ns, {:.3}×; medians of {rounds} interleaved rounds). Goal: not \
         measurable. Its cost while gpuprofd listens is CUPTI's and is measured on a GPU \
         (`scripts/gpu-validate.sh --only gputime`).\n",
        loaded - none,
        loaded / none
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn section_states_both_figures_and_the_difference() {
        assert_eq!(
            super::section((400.0, 402.5), 3),
            "\nThe injection library while gpuprofd is absent (`CUDA_INJECTION64_PATH` set, \
             nobody listening; docs/INJECTION.md): 402.5 ns per runtime launch against 400.0 ns \
             with no library (+2.5 ns, 1.006×; medians of 3 interleaved rounds). Goal: not \
             measurable. Its cost while gpuprofd listens is CUPTI's and is measured on a GPU \
             (`scripts/gpu-validate.sh --only gputime`).\n"
        );
    }
}
