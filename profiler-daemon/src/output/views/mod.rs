//! The report's views (`gpuprofd report FILE --view …`): the report whole or as one view,
//! selected and ordered like tfprof's `-select`, `-order_by`, `-min_*` and
//! `-show_name_regexes`.
//!
//! Views are built from the [`Report`] alone, so a report replayed from a file and one taken
//! from a running daemon render the same. Each view declares its columns once (`columns`):
//! its table, CSV and JSON are rendered from that declaration (`select`).

mod calls;
mod collectives;
pub(crate) mod columns;
mod processes;
mod select;
mod steps;
mod timeline;

pub use timeline::{STRIP, rebin, strip};

use crate::analysis::advice::{self, Advice};
use crate::analysis::steps::ProcessSteps;
use crate::model::snapshot::{ProcessReport, Report};
use crate::output;
use columns::{Cell, Column, LEFT, RIGHT, Rows};
// The tests read these through `use super::*`.
#[cfg(test)]
use serde_json::{Value, json};
use std::path::PathBuf;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum View {
    /// The end-of-run report the daemon printed.
    Summary,
    /// Per kernel and launch configuration (tfprof's op view).
    Kernels,
    /// Per hooked API function: calls and time blocked in them.
    Api,
    /// Copies per direction: calls, bytes, time blocked, bandwidth of blocking copies.
    Memcpy,
    /// Device memory per process: allocations, frees, live and peak bytes.
    Memory,
    Processes,
    Jobs,
    /// Per stream of each process: launches, copies, bytes, share of the process's launches.
    Streams,
    /// Per CUDA device each process's calls went to (`unknown`: a context made current before
    /// the attach, never revealed): launches, copies, bytes, memsets, syncs, allocations.
    Devices,
    /// NCCL per process, communicator and operation: rank, ranks, device, communicator id
    /// (the same in every rank), calls, bytes (count × datatype size), datatypes, reductions,
    /// streams, calls inside a group.
    Collectives,
    /// What the figures suggest trying, with the evidence (also at the end of the summary).
    Advice,
    /// Training steps found per process (see `steps` for the method): step time, launches,
    /// blocked time and input delay per step; `--format json` adds every step.
    Steps,
    /// Calls and blocked time per line of code, as a tree of the call stacks sampled (Python
    /// `file:line function` and native `function (library)` frames, outermost first).
    Code,
    /// Calls per library that made them (the innermost frame outside libcuda/libcudart).
    Callers,
    /// When each process was active: first and last call, launch rate, share of its active
    /// time blocked in calls, and its activity over the capture as a strip.
    Timeline,
    /// The job across its ranks (NCCL rank, node) from one or several captures: each rank's
    /// steps, work and waits, NCCL bytes, the matched steps side by side, the slowest rank
    /// per step, stragglers and how well the nodes' clocks align. The default view of several
    /// capture files.
    Ranks,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
    Csv,
    /// The overview page (summary view only): one self-contained HTML file.
    Html,
    /// Collapsed stacks, one `frame;frame;… count` line per stack (code view only), for
    /// flame graph tools.
    Folded,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OrderBy {
    Calls,
    Bytes,
    Blocked,
    /// Calls (launches) per second of the process's active span (first to last call).
    Rate,
    Name,
    /// GPU time CUPTI measured (the injection library; kernels and processes views): rows
    /// without it last.
    #[value(name = "gpu_time", alias = "gpu-time")]
    GpuTime,
}

#[derive(Clone, Debug, clap::Args)]
pub struct ReportArgs {
    /// A capture file written with `--output FILE.gpuprof` (or `gpuprofd ctl capture`). Several
    /// captures of one job (one per node) are merged into the job across its ranks (`--view
    /// ranks`, the only view of several files).
    #[arg(required_unless_present = "live", value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// The running service's figures now (its control socket's snapshot) instead of a file.
    /// Every view but `steps` (and the HTML page, whose step and memory charts need a file).
    #[arg(long, conflicts_with = "files")]
    pub live: bool,
    /// The service's control socket, with --live.
    #[arg(long, default_value = "/run/gpuprofd.sock", value_name = "PATH")]
    pub socket: PathBuf,
    #[arg(long, value_enum, default_value_t = View::Summary)]
    pub view: View,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Sort rows by this, largest first (`name`: alphabetical). Default: the view's main figure.
    #[arg(long, value_enum)]
    pub order_by: Option<OrderBy>,
    /// At most this many rows.
    #[arg(long, value_name = "N")]
    pub top: Option<usize>,
    /// Rows with fewer calls are left out.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub min_calls: u64,
    /// Rows with fewer bytes are left out.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub min_bytes: u64,
    /// Only rows whose name (kernel, API, direction, comm, job) matches this regular expression;
    /// in the code view, stacks with a frame (or kernel) that matches; in the callers view,
    /// callers that match.
    #[arg(long, visible_alias = "show-name-regex", value_name = "RE")]
    pub name_regex: Option<String>,
    /// Code view: start each stack at its first frame matching this regular expression
    /// (stacks without one are left out).
    #[arg(long, value_name = "RE")]
    pub start_name_regex: Option<String>,
    /// Code view: show the tree this many frames deep.
    #[arg(long, value_name = "N")]
    pub max_depth: Option<usize>,
    /// Only this process.
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// Only processes of this job (its id or name, as the report shows them).
    #[arg(long, value_name = "JOB")]
    pub job: Option<String>,
    /// Only the calls that went to this CUDA device (its ordinal): launches, copies, memsets,
    /// syncs and memory operations on other devices, or on a device gpuprofd could not learn,
    /// are left out. Reads a capture file.
    #[arg(long, value_name = "N", conflicts_with = "gpu")]
    pub device: Option<u32>,
    /// Only the calls that went to the node's GPU `N` (its NVML index, as `nvidia-smi` numbers
    /// it): each process's CUDA device is mapped through its `CUDA_VISIBLE_DEVICES` /
    /// `NVIDIA_VISIBLE_DEVICES` and NVML's GPUs, as the devices view's `nvml_gpu` is. Calls
    /// that cannot be mapped are left out and counted. Reads a capture file taken with NVML.
    #[arg(long, value_name = "N")]
    pub gpu: Option<u32>,
    /// Only these columns, comma-separated, in this order (names as in the JSON/CSV output).
    #[arg(long, value_name = "COLS", value_delimiter = ',')]
    pub select: Vec<String>,
    /// Write to this file instead of standard output (never through a symbolic link).
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// Renders `view` of `r` (with the `steps` found in its capture) with the selection in `a`.
pub fn render(
    r: &Report,
    steps: &[ProcessSteps],
    a: &ReportArgs,
    name_re: Option<&regex::Regex>,
) -> Result<String, String> {
    match a.view {
        View::Code => {
            let start = a
                .start_name_regex
                .as_deref()
                .map(regex::Regex::new)
                .transpose()
                .map_err(|e| format!("--start-name-regex: {e}"))?;
            output::code::render_code(r, a, name_re, start.as_ref())
        }
        View::Callers => output::code::render_callers(r, a, name_re),
        _ if a.format == Format::Folded => Err("--format folded is for --view code".into()),
        View::Summary => summary(r, a.format),
        View::Advice => Ok(render_advice(r, steps, a, name_re)),
        View::Kernels => select::render::<calls::Kernels>(r, steps, a, name_re),
        View::Api => select::render::<calls::Api>(r, steps, a, name_re),
        View::Memcpy => select::render::<calls::Memcpy>(r, steps, a, name_re),
        View::Streams => select::render::<calls::Streams>(r, steps, a, name_re),
        View::Devices => select::render::<calls::Devices>(r, steps, a, name_re),
        View::Collectives => select::render::<collectives::Collectives>(r, steps, a, name_re),
        View::Memory => select::render::<processes::Memory>(r, steps, a, name_re),
        View::Processes => select::render::<processes::Processes>(r, steps, a, name_re),
        View::Jobs => select::render::<processes::Jobs>(r, steps, a, name_re),
        View::Steps => select::render::<steps::Steps>(r, steps, a, name_re),
        View::Timeline => select::render::<timeline::Timeline>(r, steps, a, name_re),
        View::Ranks => Err("--view ranks reads capture files: give one or more".into()),
    }
}

// Cells several views show.

/// `p`'s job as a cell: `kind:id (name)`.
fn job_text(p: &ProcessReport) -> Cell {
    Cell::or_null(p.job.as_ref(), |j| {
        Cell::Text(match &j.name {
            Some(n) => format!("{}:{} ({n})", j.kind, j.id),
            None => format!("{}:{}", j.kind, j.id),
        })
    })
}

/// `n` per second of `p`'s active span (first to last call; derived from the measured call
/// times), to 0.1; nothing when the span is empty.
fn per_second(n: u64, p: &ProcessReport) -> Cell {
    let span = p
        .timeline
        .as_ref()
        .map(|t| t.last_call_ns.saturating_sub(t.first_call_ns))
        .filter(|span| *span > 0);
    Cell::or_null(span, |span| {
        Cell::Rate((n as f64 / (span as f64 / 1e9) * 10.0).round() / 10.0)
    })
}

/// `--view summary`: the end-of-run report the daemon printed, or its JSON.
fn summary(r: &Report, format: Format) -> Result<String, String> {
    Ok(match format {
        Format::Table => output::table::render(r),
        Format::Json => output::json::to_string_pretty(r) + "\n",
        Format::Csv => return Err("--format csv needs a --view other than summary".into()),
        Format::Html => return Err("--format html is rendered by `run`".into()),
        Format::Folded => return Err("--format folded is for --view code".into()),
    })
}

/// The advice's rows.
struct AdviceRows;

impl Rows for AdviceRows {
    type Row<'a> = Advice;
}

/// The advice's CSV columns (its table is prose, its JSON the advice itself).
const ADVICE: &[Column<AdviceRows>] = &[
    Column::new("rule", "RULE", LEFT, |x| Cell::text(x.rule)),
    Column::new("pid", "PID", RIGHT, |x| {
        Cell::or_null(x.pid, |p| Cell::Int(p.into()))
    }),
    Column::new("comm", "COMM", LEFT, |x| {
        Cell::or_null(x.comm.as_deref(), Cell::text)
    }),
    Column::new("evidence", "EVIDENCE", LEFT, |x| Cell::text(&x.evidence)),
    Column::new("suggestion", "SUGGESTION", LEFT, |x| {
        Cell::text(&x.suggestion)
    }),
];

/// `--view advice`, of `--pid`'s process and the rules `--name-regex` matches.
fn render_advice(
    r: &Report,
    steps: &[ProcessSteps],
    a: &ReportArgs,
    name_re: Option<&regex::Regex>,
) -> String {
    let mut advice = advice::advise(r, steps);
    advice.retain(|x| {
        a.pid.is_none_or(|p| x.pid == Some(p)) && name_re.is_none_or(|re| re.is_match(x.rule))
    });
    match a.format {
        Format::Table | Format::Html | Format::Folded if advice.is_empty() => {
            "no advice: nothing stood out\n".to_owned()
        }
        Format::Table | Format::Html | Format::Folded => {
            advice::render(&advice).trim_start().to_owned()
        }
        Format::Json => serde_json::to_string_pretty(&advice).unwrap_or_default() + "\n",
        Format::Csv => columns::csv(&columns::all(ADVICE), &advice),
    }
}

#[cfg(test)]
mod tests;
