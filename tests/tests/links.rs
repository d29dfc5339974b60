//! How the probes are attached: `uprobe_multi` links where the kernel has them (one per
//! program, library and direction), else one perf-event uprobe per probe
//! (`GPUPROFD_UPROBE_MULTI=0` forces that, as on kernels before 6.6). Both must record the same.
//!
//! Run through `cargo xtask test` (as root, `--test-threads=1`).

use gpuprofd_tests::*;

/// One `uprobe_multi` link of the daemon's, from its fdinfo.
struct Link {
    path: String,
    prog_id: u64,
    /// A return probe link (`uretprobe_multi`).
    ret: bool,
    /// (file offset, cookie) of each probe site.
    sites: Vec<(u64, u64)>,
}

/// The daemon's `uprobe_multi` links. A link's fdinfo says `link_type:\tuprobe_multi` (or
/// `uretprobe_multi` for return probes), then
/// `prog_id`, `uprobe_cnt`, `path` and a table of `cookie offset ref_ctr_offset` lines (cookie
/// in decimal, offsets in hex).
fn multi_links(pid: u32) -> Vec<Link> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fdinfo")).expect("daemon fdinfo") {
        let text = std::fs::read_to_string(e.unwrap().path()).unwrap_or_default();
        let ret = text.contains("link_type:\turetprobe_multi");
        if !ret && !text.contains("link_type:\tuprobe_multi") {
            continue;
        }
        let field = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(k))
                .map(|v| v.trim().to_owned())
                .unwrap_or_else(|| panic!("no {k} in {text}"))
        };
        let cnt: usize = field("uprobe_cnt:").parse().unwrap();
        let header = text
            .lines()
            .position(|l| l.starts_with("cookie"))
            .unwrap_or_else(|| panic!("no site table in {text}"));
        let sites: Vec<(u64, u64)> = text
            .lines()
            .skip(header + 1)
            .map(|l| {
                let v: Vec<&str> = l.split_whitespace().collect();
                let off = u64::from_str_radix(v[1].trim_start_matches("0x"), 16).unwrap();
                (off, v[0].parse().unwrap())
            })
            .collect();
        assert_eq!(sites.len(), cnt, "{text}");
        out.push(Link {
            path: field("path:"),
            prog_id: field("prog_id:").parse().unwrap(),
            ret,
            sites,
        });
    }
    out
}

/// The same launches, syncs and copies, under each attach mechanism.
fn workload_counts(d: Daemon) -> Finished {
    let mut w = Workload::start();
    w.script(&[
        "rt_launch vecAdd 3 64 1 1 256 1 1 0 0",
        "drv_launch triton_poi_fused_add_0 2 10 1 1 128 1 1 0 0",
        "rt_memcpy h2d 4096 2",
        "rt_sync_device 3",
    ]);
    let tgid = w.tgid;
    // The daemon stops first: with one trap per launch a runtime launch is told from the
    // program's own driver launch by the process's mappings, read while it runs.
    let f = d.stop();
    w.exit();
    let p = process(&f.report, tgid);
    assert_eq!(p["launches"], 5);
    assert_eq!(api_calls(p, "cudaLaunchKernel"), 3);
    assert_eq!(api_calls(p, "cuLaunchKernel"), 2);
    assert_eq!(api_calls(p, "cudaMemcpy"), 2);
    assert_eq!(api_calls(p, "cudaDeviceSynchronize"), 3);
    f
}

/// The daemon's links once its learning probes are let go: `cudaGetDevice`, linked for the
/// first second only (profiler-daemon/src/attach/learn.rs), through a second link of the
/// context program on the runtime. Waits (bounded) until no program has two links on one
/// library.
fn settled_links(pid: u32) -> Vec<Link> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let links = multi_links(pid);
        let mut seen = std::collections::HashSet::new();
        if links
            .iter()
            .all(|l| seen.insert((l.path.clone(), l.prog_id)))
        {
            return links;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the learning probes' links were not let go within 10 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn one_uprobe_multi_link_per_program_library_and_direction() {
    let d = Daemon::all_jobs();
    let links = settled_links(d.pid());
    let lib = fakecuda().join("lib");
    let mut seen = std::collections::HashSet::new();
    for l in &links {
        assert!(
            l.path.starts_with(lib.to_str().unwrap()),
            "link on {}, not a fake library",
            l.path
        );
        // Within one link each site is a different symbol, so a different API and cookie.
        let mut cookies: Vec<u64> = l.sites.iter().map(|s| s.1).collect();
        cookies.sort();
        cookies.dedup();
        assert_eq!(
            cookies.len(),
            l.sites.len(),
            "duplicate cookie on {}",
            l.path
        );
        // One link per program and library (entry and return programs differ).
        assert!(
            seen.insert((l.path.clone(), l.prog_id)),
            "two links of one program"
        );
    }
    assert!(links.iter().any(|l| l.ret), "no return probe link");
    let f = workload_counts(d);
    // Every attached symbol has exactly one entry probe, whose cookie carries its API; a
    // return probe carries the same cookie as its symbol's entry probe.
    for lr in f.report["libraries"].as_array().unwrap() {
        let path = lr["path"].as_str().unwrap();
        let of = |ret: bool| -> Vec<(u64, u64)> {
            links
                .iter()
                .filter(|l| l.path == path && l.ret == ret)
                .flat_map(|l| l.sites.iter().copied())
                .collect()
        };
        let (entry, rets) = (of(false), of(true));
        assert_eq!(entry.len() as u64, lr["probes"].as_u64().unwrap(), "{path}");
        for r in &rets {
            assert!(
                entry.contains(r),
                "return probe {r:?} without its entry probe"
            );
        }
    }
    assert_eq!(f.report["libraries"].as_array().unwrap().len(), 2);
    assert!(
        f.stderr.iter().all(|l| !l.contains("detaching")),
        "{:?}",
        f.stderr
    );
}

/// The daemon's perf-event uprobe links (`link_type: perf`, `event_type: uprobe` or
/// `uretprobe`; its tracepoints are perf links too, of another event type).
fn perf_uprobe_links(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .expect("daemon fdinfo")
        .filter(|e| {
            let t = std::fs::read_to_string(e.as_ref().unwrap().path()).unwrap_or_default();
            t.contains("link_type:\tperf")
                && (t.contains("event_type:\tuprobe") || t.contains("event_type:\turetprobe"))
        })
        .count()
}

#[test]
fn perf_event_uprobes_when_uprobe_multi_is_off_attach_and_record_the_same() {
    let lib = fakecuda().join("lib");
    let d = Daemon::all_jobs();
    let sites: usize = settled_links(d.pid()).iter().map(|l| l.sites.len()).sum();
    assert_eq!(perf_uprobe_links(d.pid()), 0);
    workload_counts(d);

    let d = Daemon::start_with(
        "report.json",
        &all_jobs_args(&lib),
        &[("GPUPROFD_UPROBE_MULTI", "0")],
    );
    assert_eq!(multi_links(d.pid()).len(), 0);
    // One perf-event link per probe site, entry or return.
    assert_eq!(perf_uprobe_links(d.pid()), sites);
    let f = workload_counts(d);
    let line = f
        .stderr
        .iter()
        .find(|l| l.contains("detaching"))
        .unwrap_or_else(|| panic!("no detaching line: {:?}", f.stderr));
    assert!(
        line.contains(&format!("detaching {sites} probes")),
        "{line}"
    );
}
