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
    let iwi = irq_work_interrupts();
    w.cmd("storm 4 15000");
    let iwi = irq_work_interrupts() - iwi;
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
    // A reader that is behind is woken once per 512 KiB added to its backlog, not for every
    // record while the backlog is above that: each wakeup is an irq_work, a self-interrupt (a VM
    // exit in a guest), and one per record slowed the profiled threads threefold whenever the
    // daemon fell behind. The 16 MiB ring fills once: 32 wakeups at most, and the machine's own
    // irq_work besides (none in 2 s of idle here; the storm lasts well under a second).
    eprintln!("reliability: overload: irq_work interrupts during the storm: {iwi}");
    assert!(
        iwi <= 32 + 200,
        "{iwi} irq_work interrupts while the storm filled a stopped reader's ring: the probes \
         woke the reader for every record"
    );
    // The loss is told, not only counted.
    assert!(
        fin.stdout.contains(&format!("launch {}", drops("launch"))),
        "{}",
        fin.stdout
    );
    w.exit();
}

/// IRQ work interrupts taken on every CPU so far (`IWI` in /proc/interrupts).
fn irq_work_interrupts() -> u64 {
    let text = std::fs::read_to_string("/proc/interrupts").expect("reading /proc/interrupts");
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("IWI:"))
        .expect("an IWI line in /proc/interrupts (x86 kernels have one)");
    line.split_whitespace()
        .skip(1)
        .map_while(|w| w.parse::<u64>().ok())
        .sum()
}
