//! `gpuprofd report FILE` (or `--live`): read a capture file or ask the running service, then
//! render the view asked for (see [`crate::output::views`]) to standard output or a file.
use crate::analysis::ranks;
use crate::analysis::steps::{self, StepSearch};
use crate::model::snapshot::Report;
use crate::output::html::{self, MemoryCollector};
use crate::output::views::{Format, ReportArgs, View, render};
use crate::store;

/// Exit codes of `report`.
pub const EXIT_UNREADABLE: u8 = 10;
pub const EXIT_DAMAGED: u8 = 11;

/// Runs `gpuprofd report`; the exit code.
pub fn run(a: &ReportArgs) -> u8 {
    let name_re = match a.name_regex.as_deref().map(regex::Regex::new).transpose() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("gpuprofd report: --name-regex: {e}");
            return 2;
        }
    };
    if a.format == Format::Folded && a.view != View::Code {
        eprintln!("gpuprofd report: --format folded is for --view code");
        return 2;
    }
    if a.format == Format::Html && a.view != View::Summary {
        eprintln!("gpuprofd report: --format html is the overview page: leave out --view");
        return 2;
    }
    if a.live || a.files.is_empty() {
        return run_live(a, name_re.as_ref());
    }
    if a.files.len() > 1 || a.view == View::Ranks {
        return run_ranks(a);
    }
    let want_steps = matches!(a.view, View::Steps | View::Advice) || a.format == Format::Html;
    let html = a.format == Format::Html;
    let loaded = match load(&a.files[0], Pick::of(a), want_steps, html) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let Loaded {
        replay,
        steps,
        memory,
    } = loaded;
    let rendered = if html {
        let t0 = replay.header.started_at_monotonic_ns;
        let advice = crate::analysis::advice::advise(&replay.report, &steps);
        let mem = memory.series(t0);
        Ok(html::page(&html::page_data(
            &replay.report,
            &steps,
            &advice,
            &mem,
        )))
    } else {
        render(&replay.report, &steps, a, name_re.as_ref())
    };
    let written = emit(a, rendered);
    if written != 0 {
        return written;
    }
    if replay.recovery.damage.is_some() {
        EXIT_DAMAGED
    } else {
        0
    }
}

/// One capture, read: its report, its steps (when asked for) and the page's memory curves.
struct Loaded {
    replay: store::Replay,
    steps: Vec<steps::ProcessSteps>,
    memory: MemoryCollector,
}

/// Which records a report keeps: all, a CUDA device's (`--device`) or a node GPU's (`--gpu`).
#[derive(Clone, Copy)]
enum Pick {
    All,
    Device(u32),
    Gpu(u32),
}

impl Pick {
    fn of(a: &ReportArgs) -> Pick {
        match (a.device, a.gpu) {
            (Some(d), _) => Pick::Device(d),
            (None, Some(g)) => Pick::Gpu(g),
            (None, None) => Pick::All,
        }
    }
}

/// Reads `file` (only the records `pick` keeps); on failure, says why and gives the exit code.
fn load(file: &std::path::Path, pick: Pick, want_steps: bool, html: bool) -> Result<Loaded, u8> {
    use crate::model::devices::NodeGpuOf;
    // `--gpu`: each process's CUDA devices as the node's GPUs.
    let map = match pick {
        Pick::Gpu(n) => {
            let map = match store::node_gpu_map(file) {
                Ok(m) => m,
                Err(e) => {
                    eprintln!("gpuprofd report: {e}");
                    return Err(EXIT_UNREADABLE);
                }
            };
            if map.gpus.is_empty() {
                eprintln!(
                    "gpuprofd report: --gpu {n} names a GPU as NVML numbers them, and \"{}\" \
                     holds no NVML round (taken with --no-nvml, or where NVML could not start): \
                     select by the processes' CUDA device with --device instead",
                    file.display()
                );
                return Err(2);
            }
            if !map.gpus.iter().any(|g| g.index == n) {
                let have: Vec<String> = map.gpus.iter().map(|g| g.index.to_string()).collect();
                eprintln!(
                    "gpuprofd report: NVML listed no GPU {n} on this node (it listed {})",
                    have.join(", ")
                );
                return Err(2);
            }
            Some(map)
        }
        _ => None,
    };
    // Records with a device that cannot be named as a node GPU (`--gpu`), left out.
    let unnamed = std::cell::Cell::new(0u64);
    // One pass rebuilds the report and, on the way, takes what steps (first pass) and the
    // page's memory curves need from the same records; a second pass only where a process has
    // a step loop to cut.
    let mut search = StepSearch::default();
    let mut memory = MemoryCollector::default();
    let keep = |ev: &profiler_common::decode::Event| match (pick, &map) {
        (Pick::Device(d), _) => crate::model::devices::selected(ev, d),
        (Pick::Gpu(n), Some(m)) => match m.of(ev) {
            NodeGpuOf::NoDevice => true,
            NodeGpuOf::Gpu(g) => g == n,
            NodeGpuOf::Unknown => {
                unnamed.set(unnamed.get() + 1);
                false
            }
        },
        _ => true,
    };
    let replay = match store::replay_selecting(file, keep, |_, g, ev| {
        if want_steps {
            search.first(g, ev);
        }
        if html {
            memory.on(g, ev);
        }
    }) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("gpuprofd report: {e}");
            return Err(EXIT_UNREADABLE);
        }
    };
    if let Some(w) = replay.recovery.warning(&file.display().to_string()) {
        eprintln!("gpuprofd report: warning: {w}");
    }
    if let (Pick::Gpu(n), k @ 1..) = (pick, unnamed.get()) {
        eprintln!(
            "gpuprofd report: --gpu {n}: {k} calls were left out: their CUDA device is not \
             known, or their process's environment was not read, or CUDA's numbering rules \
             cannot tell which of the node's GPUs it is (`--view devices` lists them per \
             process and device)"
        );
    }
    let t0 = replay.header.started_at_monotonic_ns;
    // The processes whose kernel records can join their launches (their library recorded
    // launch calls): their steps get measured GPU time.
    let calls = |tgid: u32| {
        replay
            .report
            .processes
            .iter()
            .any(|p| p.tgid == tgid && p.gpu_time.calls > 0)
    };
    search.set_tids(
        replay
            .tids
            .iter()
            .filter(|((tgid, _), _)| calls(*tgid))
            .map(|(k, t)| (*k, t.clone()))
            .collect(),
    );
    if want_steps
        && search.chosen(t0)
        && let Err(e) = steps::read(file, |api, g, ev| {
            if keep(ev) {
                search.second(api, g, ev)
            }
        })
    {
        eprintln!("gpuprofd report: finding steps: {e}");
        return Err(EXIT_UNREADABLE);
    }
    Ok(Loaded {
        steps: search.steps(),
        replay,
        memory,
    })
}

/// `report A B …` or `--view ranks`: the job across the ranks in the captures.
fn run_ranks(a: &ReportArgs) -> u8 {
    if !matches!(a.view, View::Summary | View::Ranks) {
        eprintln!(
            "gpuprofd report: several captures show the job across its ranks (--view ranks); \
             give one capture for the other views"
        );
        return 2;
    }
    if !matches!(a.format, Format::Table | Format::Json) {
        eprintln!("gpuprofd report: --view ranks is a table or JSON (--format table|json)");
        return 2;
    }
    let mut loaded = Vec::with_capacity(a.files.len());
    for f in &a.files {
        match load(f, Pick::of(a), true, false) {
            Ok(l) => loaded.push(l),
            Err(code) => return code,
        }
    }
    let caps: Vec<ranks::Capture<'_>> = a
        .files
        .iter()
        .zip(&loaded)
        .map(|(f, l)| ranks::Capture {
            file: f.display().to_string(),
            header: &l.replay.header,
            clocks: &l.replay.clocks,
            report: &l.replay.report,
            steps: &l.steps,
            complete: l.replay.recovery.complete,
        })
        .collect();
    let job = match ranks::merge(&caps) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("gpuprofd report: {e}");
            return 2;
        }
    };
    let out = match a.format {
        Format::Json => crate::output::ranks::json(&job),
        _ => crate::output::ranks::text(&job),
    };
    let written = emit(a, Ok(out));
    if written != 0 {
        return written;
    }
    if loaded.iter().any(|l| l.replay.recovery.damage.is_some()) {
        EXIT_DAMAGED
    } else {
        0
    }
}

/// `report --live`: the view of the service's snapshot (the same [`Report`] a file gives).
fn run_live(a: &ReportArgs, name_re: Option<&regex::Regex>) -> u8 {
    use crate::service::ctl::{Client, ClientError, Request};
    if a.device.is_some() || a.gpu.is_some() {
        eprintln!(
            "gpuprofd report --live: --device and --gpu select a capture's records; the live \
             report has each process's calls per device (and its node GPU) in its `devices` \
             rows"
        );
        return 2;
    }
    if a.view == View::Steps || a.format == Format::Html {
        eprintln!(
            "gpuprofd report --live: steps and the HTML page are found in a capture's records; \
             take one with `gpuprofd ctl capture --pid PID -o FILE.gpuprof` and report that (the \
             service's dashboard is at http://127.0.0.1:19400/)"
        );
        return 2;
    }
    let report = Client::connect(&a.socket)
        .and_then(|mut c| c.call(&Request::Snapshot))
        .and_then(|v| {
            serde_json::from_value::<Report>(v).map_err(|e| ClientError::Protocol(e.to_string()))
        });
    match report {
        Ok(r) => emit(a, render(&r, &[], a, name_re)),
        Err(e) => {
            eprintln!("gpuprofd report --live: {e}");
            e.exit_code()
        }
    }
}

/// Writes what was rendered to `-o` or stdout; 0, or the exit code of the failure.
fn emit(a: &ReportArgs, rendered: Result<String, String>) -> u8 {
    let out = match rendered {
        Ok(s) => s,
        Err(e) => {
            eprintln!("gpuprofd report: {e}");
            return 2;
        }
    };
    match &a.output {
        Some(p) => {
            let written = crate::sys::files::create_output(p)
                .and_then(|mut f| std::io::Write::write_all(&mut f, out.as_bytes()));
            if let Err(e) = written {
                eprintln!("gpuprofd report: cannot write \"{}\": {e}", p.display());
                return 4;
            }
            eprintln!("gpuprofd report: written to {}", p.display());
        }
        None => print!("{out}"),
    }
    0
}
