//! Never lose data silently: a launch storm far beyond what the ring buffer holds while the
//! daemon cannot read it, then every record produced is either in the report or counted as
//! dropped, kind by kind, exactly (the fake runtime counts what it did).
//!
//! Run through `cargo xtask test` (as root, `--test-threads=1`).

use gpuprofd_tests::*;

const RELU: &str = "relu(float*, int)";

#[test]
fn a_storm_past_the_ring_buffer_is_captured_or_counted_per_kind() {
    // A stack at every launch: a launch record and a 576-byte stack record per call, about
    // 40 MB for 60,000 launches into a 16 MiB ring the stopped daemon does not drain.
    let lib = fakecuda().join("lib");
    let mut args = all_jobs_args(&lib).to_vec();
    args.extend(["--stack-period", "1", "--no-nvml"]);
    let d = Daemon::start(&args);
    let mut w = Workload::start();
    w.cmd("rt_launch vecAdd 1 1 1 1 32 1 1 0 0"); // seen, named, before the storm
    d.pause();
    w.cmd("storm 4 15000");
    let produced = w.count("cudaLaunchKernel");
    assert_eq!(produced, 1 + 60_000);
    d.resume();
    let tgid = w.tgid;
    let fin = d.stop();
    let r = &fin.report;
    let p = process(r, tgid);
    let drops = |k: &str| r["drops"][k].as_u64().unwrap();
    let launches = p["launches"].as_u64().unwrap();
    assert!(
        drops("launch") > 0,
        "the storm did not overflow the ring: {}",
        r["drops"]
    );
    assert_eq!(
        launches + drops("launch"),
        produced,
        "launches: {}",
        r["drops"]
    );
    assert_eq!(
        kernel_calls(p, RELU) + kernel_calls(p, "vecAdd(float const*, float const*, float*, int)"),
        launches
    );
    let samples = p["stacks"]["samples"].as_u64().unwrap();
    assert_eq!(samples + drops("stack"), produced, "stacks: {}", r["drops"]);
    // What the probes submitted is what the daemon read (this process made every launch).
    assert_eq!(r["submitted"]["launch"].as_u64().unwrap(), launches);
    eprintln!(
        "reliability: overload: {produced} launches with a stack each into a stopped reader's \
         16 MiB ring: launches {launches} captured + {} dropped, stacks {samples} + {} dropped = \
         produced, exactly",
        drops("launch"),
        drops("stack")
    );
    // The loss is told, not only counted.
    assert!(
        fin.stdout.contains(&format!("launch {}", drops("launch"))),
        "{}",
        fin.stdout
    );
    w.exit();
}
