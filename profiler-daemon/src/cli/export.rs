//! `gpuprofd export FILE`: a capture file as a timeline trace (Chrome JSON or Perfetto's
//! protobuf), written to a file; the trace itself is built in [`crate::output::trace`].
use crate::output::trace::guard;
use crate::output::trace::merge::{Part, trace_merged};
use crate::output::trace::{
    ChromeSink, ExportArgs, ExportFormat, Sink, Summary, TraceError, perfetto, trace_of,
};
use std::collections::HashSet;

/// Runs `gpuprofd export`; the exit code (as `report`'s).
pub fn run(a: &ExportArgs) -> u8 {
    if a.pid.is_some() && a.files.len() > 1 {
        eprintln!(
            "gpuprofd export: --pid names a process of one capture; with several, select with \
             --rank"
        );
        return 2;
    }
    // One capture's selection (several captures select per part, in `parts`).
    let only = if a.files.len() == 1 {
        match only_of_one(a) {
            Ok(o) => o,
            Err(code) => return code,
        }
    } else {
        None
    };
    // Several captures: where each goes in the one trace (said once, used by the guard too).
    let parts = if a.files.len() > 1 {
        match parts(a) {
            Ok(p) => Some(p),
            Err(code) => return code,
        }
    } else {
        None
    };
    // The size guard: a trace that would not open gets its most informative window.
    if a.from.is_none() && a.to.is_none() && a.max_size > 0 {
        let chosen = match &parts {
            None => guard::choose(&a.files[0], a.max_size, only.as_ref()),
            Some(parts) => {
                let sources: Vec<guard::Source> = parts
                    .iter()
                    .map(|p| guard::Source {
                        path: &p.path,
                        shift_ns: p.shift_ns,
                        only: p.only.as_ref(),
                        label: p.node.clone(),
                    })
                    .collect();
                guard::choose_of(&sources, a.max_size)
            }
        };
        match chosen {
            Ok(Some(w)) => {
                eprintln!(
                    "gpuprofd export: the whole trace would be about {} ({} records), more \
                     than --max-size {}: writing the window around {}, --from {:.1} --to {:.1} \
                     ({} records); {} outside it {} left out. Another window: --from/--to \
                     (seconds after the {} start); everything: --max-size 0",
                    crate::output::fmt::bytes(w.records * guard::BYTES_PER_RECORD),
                    w.records,
                    crate::output::fmt::bytes(a.max_size),
                    w.around,
                    w.from_s,
                    w.to_s,
                    w.kept,
                    match w.records - w.kept {
                        1 => "1 record".to_owned(),
                        n => format!("{n} records"),
                    },
                    if w.records - w.kept == 1 { "is" } else { "are" },
                    if parts.is_some() {
                        "earliest capture's"
                    } else {
                        "capture's"
                    },
                );
                let mut narrowed = a.clone();
                narrowed.from = Some(w.from_s);
                narrowed.to = Some(w.to_s);
                return export(&narrowed, only.as_ref(), parts.as_deref());
            }
            Ok(None) => {}
            Err(e) => {
                eprintln!("gpuprofd export: {e}");
                return super::report::EXIT_UNREADABLE;
            }
        }
    }
    export(a, only.as_ref(), parts.as_deref())
}

/// The processes `--pid` or `--rank` keep of `a`'s one capture (`None`: all); on failure, says
/// why and gives the exit code.
fn only_of_one(a: &ExportArgs) -> Result<Option<HashSet<u32>>, u8> {
    if let Some(p) = a.pid {
        return Ok(Some(HashSet::from([p])));
    }
    let Some(rank) = a.rank else {
        return Ok(None);
    };
    let replay = crate::store::replay(&a.files[0]).map_err(|e| {
        eprintln!("gpuprofd export: {e}");
        super::report::EXIT_UNREADABLE
    })?;
    let cap = crate::analysis::ranks::Capture {
        file: a.files[0].display().to_string(),
        header: &replay.header,
        clocks: &replay.clocks,
        report: &replay.report,
        steps: &[],
        complete: replay.recovery.complete,
    };
    let job = crate::analysis::ranks::merge(&[cap]).map_err(|e| {
        eprintln!("gpuprofd export: {e}");
        2
    })?;
    rank_pids(&job, rank).map(|v| Some(v.into_iter().map(|(_, p)| p).collect()))
}

/// The `(node, pid)` of rank `rank` in `job`, or why there is none (said, with the exit code).
fn rank_pids(job: &crate::analysis::ranks::JobRanks, rank: i32) -> Result<Vec<(String, u32)>, u8> {
    let v: Vec<(String, u32)> = job
        .ranks
        .iter()
        .filter(|r| r.rank == Some(rank) || r.ranks_held.contains(&rank))
        .map(|r| (r.node.clone(), r.pid))
        .collect();
    if v.is_empty() {
        let have: Vec<String> = job.ranks.iter().map(|r| r.name.clone()).collect();
        eprintln!(
            "gpuprofd export: no process holds rank {rank} of the job's communicator in the \
             captures (they hold: {})",
            if have.is_empty() {
                "no NCCL rank".to_owned()
            } else {
                have.join(", ")
            }
        );
        return Err(2);
    }
    Ok(v)
}

/// `export` of `a` as asked (no guard), of only the processes `only` names (one capture), or of
/// `parts` (several).
fn export(a: &ExportArgs, only: Option<&HashSet<u32>>, parts: Option<&[Part]>) -> u8 {
    if let (Some(f), Some(t)) = (a.from, a.to)
        && f >= t
    {
        eprintln!("gpuprofd export: --from {f} is not before --to {t}");
        return 2;
    }
    let named_perfetto = a
        .output
        .extension()
        .is_some_and(|e| e == "pftrace" || e == "perfetto-trace");
    let format = a.format.unwrap_or(if named_perfetto {
        ExportFormat::Perfetto
    } else {
        ExportFormat::Chrome
    });
    let limit = a.format.is_none().then_some(a.json_limit);
    let mut result = write(a, parts, only, &a.output, format, limit);
    let mut path = a.output.clone();
    if matches!(result, Err(Failure::Trace(TraceError::OverLimit))) {
        let _ = std::fs::remove_file(&a.output);
        path = a.output.with_extension("pftrace");
        eprintln!(
            "gpuprofd export: the JSON trace would pass {} (more than a browser loads): writing \
             Perfetto's protobuf format to {} instead (open it in ui.perfetto.dev; --format \
             chrome forces JSON, --from/--to narrow the window)",
            crate::output::fmt::bytes(a.json_limit),
            path.display()
        );
        result = write(a, parts, only, &path, ExportFormat::Perfetto, None);
    }
    match result {
        Ok(s) => {
            if let Some(w) = &s.warning {
                eprintln!("gpuprofd export: warning: {w}");
            }
            eprintln!(
                "gpuprofd export: {} events of {} processes written to {}",
                s.events,
                s.processes,
                path.display()
            );
            if s.damaged {
                super::report::EXIT_DAMAGED
            } else {
                0
            }
        }
        Err(f) => {
            let (code, e) = f.exit(&path);
            eprintln!("gpuprofd export: {e}");
            code
        }
    }
}

/// Why an export of a trace to a file failed.
enum Failure {
    /// The output file could not be created.
    Create(std::io::Error),
    Trace(TraceError),
}

impl Failure {
    /// The exit code and what to say, for the output at `path`.
    fn exit(self, path: &std::path::Path) -> (u8, String) {
        let path = path.display();
        match self {
            Failure::Create(e) => (4, format!("cannot write \"{path}\": {e}")),
            Failure::Trace(e @ TraceError::Write(_)) => {
                (4, format!("cannot write \"{path}\": {e}"))
            }
            Failure::Trace(e @ TraceError::OverLimit) => (4, e.to_string()),
            Failure::Trace(e @ TraceError::Read(_)) => {
                (super::report::EXIT_UNREADABLE, e.to_string())
            }
        }
    }
}

/// Where each of several captures goes in one trace: its node, its place on the merged
/// wall-clock axis and its ranks' names (`analysis::ranks`); on failure, says why and gives
/// the exit code.
fn parts(a: &ExportArgs) -> Result<Vec<Part>, u8> {
    use crate::analysis::ranks;
    let mut replays = Vec::with_capacity(a.files.len());
    for f in &a.files {
        match crate::store::replay(f) {
            Ok(r) => replays.push(r),
            Err(e) => {
                eprintln!("gpuprofd export: {e}");
                return Err(super::report::EXIT_UNREADABLE);
            }
        }
    }
    // Names and places need no steps (a process without NCCL keeps its own name).
    let caps: Vec<ranks::Capture<'_>> = a
        .files
        .iter()
        .zip(&replays)
        .map(|(f, r)| ranks::Capture {
            file: f.display().to_string(),
            header: &r.header,
            clocks: &r.clocks,
            report: &r.report,
            steps: &[],
            complete: r.recovery.complete,
        })
        .collect();
    let job = ranks::merge(&caps).map_err(|e| {
        eprintln!("gpuprofd export: {e}");
        2
    })?;
    for n in &job.notes {
        eprintln!("gpuprofd export: note: {n}");
    }
    let selected = match a.rank {
        Some(r) => Some(rank_pids(&job, r)?),
        None => None,
    };
    Ok(a.files
        .iter()
        .zip(&job.captures)
        .map(|(f, c)| Part {
            path: f.clone(),
            node: c.node.clone(),
            shift_ns: c
                .started_at_unix_ns
                .saturating_sub(job.alignment.origin_unix_ns),
            ranks: job
                .ranks
                .iter()
                .filter(|r| r.node == c.node && r.rank.is_some())
                .map(|r| (r.pid, r.name.clone()))
                .collect(),
            only: selected.as_ref().map(|v| {
                v.iter()
                    .filter(|(node, _)| *node == c.node)
                    .map(|(_, p)| *p)
                    .collect()
            }),
        })
        .collect())
}

/// Writes the trace of `a`'s capture (or of `parts`, several merged) to `path` in `format`.
fn write(
    a: &ExportArgs,
    parts: Option<&[Part]>,
    only: Option<&HashSet<u32>>,
    path: &std::path::Path,
    format: ExportFormat,
    json_limit: Option<u64>,
) -> Result<Summary, Failure> {
    let file = crate::sys::files::create_output(path).map_err(Failure::Create)?;
    let out = std::io::BufWriter::new(file);
    let go = |sink: &mut dyn Sink| match parts {
        Some(p) => trace_merged(p, sink, a.from, a.to),
        None => trace_of(&a.files[0], sink, a.from, a.to, only),
    };
    let s = match format {
        ExportFormat::Chrome => {
            let mut sink = ChromeSink::new(out);
            sink.limit = json_limit;
            go(&mut sink)
        }
        ExportFormat::Perfetto => go(&mut perfetto::PerfettoSink::new(out)),
    };
    s.map_err(Failure::Trace)
}

#[cfg(test)]
mod golden;
