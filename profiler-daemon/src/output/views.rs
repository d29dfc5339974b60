//! The report's views (`gpuprofd report FILE --view …`): the report whole or as one view,
//! selected and ordered like tfprof's `-select`, `-order_by`, `-min_*` and
//! `-show_name_regexes`.
//!
//! Views are built from the [`Report`] alone, so a report replayed from a file and one taken
//! from a running daemon render the same.

use crate::analysis::steps::ProcessSteps;
use crate::model::snapshot::Report;
use crate::output::{self, fmt};
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
}

#[derive(Clone, Debug, clap::Args)]
pub struct ReportArgs {
    /// A capture file written with `--output FILE.gpuprof` (or `gpuprofd ctl capture`).
    #[arg(required_unless_present = "live")]
    pub file: Option<PathBuf>,
    /// The running service's figures now (its control socket's snapshot) instead of a file.
    /// Every view but `steps` (and the HTML page, whose step and memory charts need a file).
    #[arg(long, conflicts_with = "file")]
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
    /// Only these columns, comma-separated, in this order (names as in the JSON/CSV output).
    #[arg(long, value_name = "COLS", value_delimiter = ',')]
    pub select: Vec<String>,
    /// Write to this file instead of standard output (never through a symbolic link).
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// One row of a view: what selection and ordering look at, and its columns.
#[derive(Clone, Debug)]
struct Row {
    tgid: Option<u32>,
    job: Option<(String, Option<String>)>,
    name: String,
    calls: u64,
    bytes: u64,
    blocked_ns: u64,
    /// Column name → value, in column order.
    cols: Vec<(&'static str, Value)>,
}

/// Renders `view` of `r` (with the `steps` found in its capture) with the selection in `a`.
pub fn render(
    r: &Report,
    steps: &[ProcessSteps],
    a: &ReportArgs,
    name_re: Option<&regex::Regex>,
) -> Result<String, String> {
    if a.view == View::Code {
        let start = a
            .start_name_regex
            .as_deref()
            .map(regex::Regex::new)
            .transpose()
            .map_err(|e| format!("--start-name-regex: {e}"))?;
        return crate::output::code::render_code(r, a, name_re, start.as_ref());
    }
    if a.view == View::Callers {
        return crate::output::code::render_callers(r, a, name_re);
    }
    if a.format == Format::Folded {
        return Err("--format folded is for --view code".into());
    }
    if a.view == View::Summary {
        return Ok(match a.format {
            Format::Table => output::table::render(r),
            Format::Json => output::json::to_string_pretty(r) + "\n",
            Format::Csv => return Err("--format csv needs a --view other than summary".into()),
            Format::Html => return Err("--format html is rendered by `run`".into()),
            Format::Folded => return Err("--format folded is for --view code".into()),
        });
    }
    if a.view == View::Advice {
        let mut advice = crate::analysis::advice::advise(r, steps);
        advice.retain(|x| {
            a.pid.is_none_or(|p| x.pid == Some(p)) && name_re.is_none_or(|re| re.is_match(x.rule))
        });
        return Ok(match a.format {
            Format::Table | Format::Html | Format::Folded if advice.is_empty() => {
                "no advice: nothing stood out\n".to_owned()
            }
            Format::Table | Format::Html | Format::Folded => {
                crate::analysis::advice::render(&advice)
                    .trim_start()
                    .to_owned()
            }
            Format::Json => serde_json::to_string_pretty(&advice).unwrap_or_default() + "\n",
            Format::Csv => {
                let mut out = "rule,pid,comm,evidence,suggestion\n".to_owned();
                for x in &advice {
                    let cells = [
                        json!(x.rule),
                        x.pid.map_or(Value::Null, |p| json!(p)),
                        x.comm.as_ref().map_or(Value::Null, |c| json!(c)),
                        json!(x.evidence),
                        json!(x.suggestion),
                    ];
                    let cells: Vec<String> = cells.iter().map(csv_cell).collect();
                    out.push_str(&cells.join(","));
                    out.push('\n');
                }
                out
            }
        });
    }
    let mut rows = if a.view == View::Steps {
        step_rows(r, steps)
    } else {
        rows(r, a.view)
    };
    rows.retain(|row| {
        row.calls >= a.min_calls
            && row.bytes >= a.min_bytes
            && a.pid.is_none_or(|p| row.tgid == Some(p))
            && a.job.as_deref().is_none_or(|j| {
                row.job
                    .as_ref()
                    .is_some_and(|(id, name)| id == j || name.as_deref() == Some(j))
            })
            && name_re.is_none_or(|re| re.is_match(&row.name))
    });
    let order = a.order_by.unwrap_or(match a.view {
        View::Memcpy | View::Memory => OrderBy::Bytes,
        _ => OrderBy::Calls,
    });
    if order == OrderBy::Rate && !columns(a.view).iter().any(|c| c.0 == "rate") {
        return Err(format!(
            "--order-by rate: the {:?} view has no rate; the kernels, api, processes, streams \
             and timeline views have one",
            a.view
        ));
    }
    let rate = |row: &Row| value(row, "rate").as_f64().unwrap_or(-1.0);
    rows.sort_by(|x, y| {
        let main = match order {
            OrderBy::Calls => y.calls.cmp(&x.calls),
            OrderBy::Bytes => y.bytes.cmp(&x.bytes),
            OrderBy::Blocked => y.blocked_ns.cmp(&x.blocked_ns),
            OrderBy::Rate => rate(y).total_cmp(&rate(x)),
            OrderBy::Name => x.name.cmp(&y.name),
        };
        main.then_with(|| x.name.cmp(&y.name))
            .then_with(|| x.tgid.cmp(&y.tgid))
    });
    if let Some(n) = a.top {
        rows.truncate(n);
    }
    let all: Vec<&'static str> = columns(a.view).iter().map(|c| c.0).collect();
    let picked: Vec<&'static str> = if a.select.is_empty() {
        // Tables leave out what would not fit 80 columns; --select brings it back.
        let narrow = narrow_columns(a.view);
        all.iter()
            .copied()
            .filter(|c| a.format != Format::Table || !narrow.contains(c))
            .filter(|c| a.format == Format::Json || !matches!(*c, "steps" | "bins"))
            .collect()
    } else {
        let mut v = Vec::new();
        for s in &a.select {
            match all.iter().find(|c| **c == s.as_str()) {
                Some(c) => v.push(*c),
                None => {
                    return Err(format!(
                        "--select: the {:?} view has no column \"{s}\"; it has {}",
                        a.view,
                        all.join(", ")
                    ));
                }
            }
        }
        v
    };
    Ok(match a.format {
        Format::Json => {
            let arr: Vec<Value> = rows
                .iter()
                .map(|row| {
                    let mut m = serde_json::Map::new();
                    for c in &picked {
                        m.insert((*c).to_owned(), value(row, c).clone());
                    }
                    Value::Object(m)
                })
                .collect();
            serde_json::to_string_pretty(&Value::Array(arr)).unwrap_or_default() + "\n"
        }
        Format::Csv => {
            let mut out = picked.join(",") + "\n";
            for row in &rows {
                let cells: Vec<String> = picked.iter().map(|c| csv_cell(value(row, c))).collect();
                out.push_str(&cells.join(","));
                out.push('\n');
            }
            out
        }
        Format::Table | Format::Html | Format::Folded => {
            let heads: Vec<&str> = picked.iter().map(|c| head(a.view, c)).collect();
            let align: Vec<fmt::Align> = picked.iter().map(|c| align(a.view, c)).collect();
            let cells: Vec<Vec<String>> = rows
                .iter()
                .map(|row| picked.iter().map(|c| human(c, value(row, c))).collect())
                .collect();
            if cells.is_empty() {
                "(no rows match)\n".to_owned()
            } else {
                fmt::table("", &heads, &align, &cells)
            }
        }
    })
}

fn value<'a>(row: &'a Row, col: &str) -> &'a Value {
    row.cols
        .iter()
        .find(|(c, _)| *c == col)
        .map_or(&Value::Null, |(_, v)| v)
}

/// Per view: (column, table heading, right-aligned).
fn columns(view: View) -> &'static [(&'static str, &'static str, bool)] {
    match view {
        View::Summary | View::Advice | View::Code | View::Callers => &[],
        View::Steps => &[
            ("pid", "PID", true),
            ("boundary", "BOUNDARY", false),
            ("calls", "STEPS", true),
            ("irregular", "IRREG", true),
            ("wall_p50_ns", "P50 ms", true),
            ("wall_p90_ns", "P90 ms", true),
            ("launches", "LAUNCH/STEP", true),
            ("blocked_ns", "BLOCKED ms", true),
            ("first_enqueue_ns", "INPUT ms", true),
            ("copy_bytes", "COPIED/STEP", true),
            ("steps", "", false),
        ],
        View::Kernels => &[
            ("pid", "PID", true),
            ("kernel", "KERNEL", false),
            ("calls", "CALLS", true),
            ("rate", "PER s", true),
            ("share", "SHARE", true),
            ("grid", "GRID", false),
            ("block", "BLOCK", false),
            ("shared_bytes", "SMEM", true),
            ("streams", "STREAMS", true),
            ("api", "API", false),
        ],
        View::Api => &[
            ("pid", "PID", true),
            ("api", "API", false),
            ("calls", "CALLS", true),
            ("rate", "PER s", true),
            ("blocked_ns", "BLOCKED ms", true),
            ("p50_ns", "P50 us", true),
            ("p99_ns", "P99 us", true),
            ("max_ns", "MAX us", true),
        ],
        View::Memcpy => &[
            ("pid", "PID", true),
            ("direction", "DIR", false),
            ("calls", "CALLS", true),
            ("async_calls", "ASYNC", true),
            ("pageable_calls", "PAGEABLE", true),
            ("bytes", "BYTES", true),
            ("blocked_ns", "BLOCKED ms", true),
            ("bandwidth_bps", "BW (sync)", true),
            ("size_histogram", "<4K/<64K/<1M/<16M/<256M/more", false),
        ],
        View::Memory => &[
            ("pid", "PID", true),
            ("comm", "COMM", false),
            ("calls", "ALLOCS", true),
            ("bytes", "BYTES", true),
            ("frees", "FREES", true),
            ("live_bytes", "LIVE", true),
            ("peak_bytes", "PEAK", true),
            ("failed", "FAILED", true),
            ("never_freed_bytes", "NEVER FREED", true),
        ],
        View::Processes => &[
            ("pid", "PID", true),
            ("comm", "COMM", false),
            ("job", "JOB", false),
            ("launches", "LAUNCHES", true),
            ("rate", "PER s", true),
            ("copy_bytes", "COPIED", true),
            ("blocked_ns", "BLOCKED ms", true),
            ("peak_bytes", "PEAK MEM", true),
            ("exited", "EXITED", false),
        ],
        View::Streams => &[
            ("pid", "PID", true),
            ("stream", "STREAM", false),
            ("launches", "LAUNCHES", true),
            ("rate", "PER s", true),
            ("share", "SHARE", true),
            ("copies", "COPIES", true),
            ("copy_bytes", "COPIED", true),
        ],
        View::Timeline => &[
            ("pid", "PID", true),
            ("comm", "COMM", false),
            ("job", "JOB", false),
            ("first_call_ns", "FROM s", true),
            ("last_call_ns", "TO s", true),
            ("calls", "CALLS", true),
            ("launches", "LAUNCHES", true),
            ("rate", "PER s", true),
            ("blocked_share", "BLOCKED", true),
            ("activity", "ACTIVITY", false),
            ("bins", "", false),
        ],
        View::Jobs => &[
            ("kind", "KIND", false),
            ("job", "JOB", false),
            ("processes", "PROCS", true),
            ("launches", "LAUNCHES", true),
            ("copy_bytes", "COPIED", true),
            ("blocked_ns", "BLOCKED ms", true),
        ],
    }
}

/// Columns a table shows only when `--select`ed (`steps`, the whole series, only in JSON).
fn narrow_columns(view: View) -> &'static [&'static str] {
    match view {
        View::Kernels => &["shared_bytes", "streams", "api"],
        View::Timeline => &["job", "calls", "launches"],
        View::Processes => &["rate"],
        View::Memcpy => &["size_histogram"],
        View::Memory => &["never_freed_bytes"],
        View::Steps => &["irregular", "wall_p90_ns", "copy_bytes"],
        _ => &[],
    }
}

fn head(view: View, col: &str) -> &'static str {
    columns(view)
        .iter()
        .find(|c| c.0 == col)
        .map_or("", |c| c.1)
}

fn align(view: View, col: &str) -> fmt::Align {
    match columns(view).iter().find(|c| c.0 == col) {
        Some((_, _, true)) => fmt::Align::Right,
        _ => fmt::Align::Left,
    }
}

/// A cell for people: bytes and times in human units, long names cut to fit 80 columns.
fn human(col: &str, v: &Value) -> String {
    match (col, v) {
        (_, Value::Null) => "-".to_owned(),
        (
            "bytes" | "copy_bytes" | "live_bytes" | "peak_bytes" | "shared_bytes"
            | "never_freed_bytes",
            Value::Number(n),
        ) => fmt::bytes(n.as_u64().unwrap_or(0)),
        ("bandwidth_bps", Value::Number(n)) => {
            format!("{}/s", fmt::bytes(n.as_f64().unwrap_or(0.0) as u64))
        }
        ("blocked_ns" | "wall_p50_ns" | "wall_p90_ns" | "first_enqueue_ns", Value::Number(n)) => {
            fmt::ms(n.as_u64().unwrap_or(0))
        }
        ("p50_ns" | "p99_ns" | "max_ns", Value::Number(n)) => fmt::us(n.as_u64().unwrap_or(0)),
        ("share" | "blocked_share", Value::Number(n)) => {
            format!("{:.1}%", n.as_f64().unwrap_or(0.0) * 100.0)
        }
        ("rate", Value::Number(n)) => fmt::rate(n.as_f64().unwrap_or(0.0)),
        ("first_call_ns" | "last_call_ns", Value::Number(n)) => {
            format!("{:.1}", n.as_u64().unwrap_or(0) as f64 / 1e9)
        }
        ("kernel", Value::String(s)) => fmt::truncate(s, 32),
        ("api" | "comm" | "job" | "boundary", Value::String(s)) => fmt::truncate(s, 24),
        ("size_histogram", Value::Array(a)) => a
            .iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join("/"),
        (_, Value::String(s)) => s.clone(),
        (_, other) => other.to_string(),
    }
}

pub(crate) fn csv_cell(v: &Value) -> String {
    let s = match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

fn job_label(p: &crate::model::snapshot::ProcessReport) -> Option<(String, Option<String>)> {
    p.job.as_ref().map(|j| (j.id.clone(), j.name.clone()))
}

fn job_text(p: &crate::model::snapshot::ProcessReport) -> Value {
    match &p.job {
        Some(j) => json!(match &j.name {
            Some(n) => format!("{}:{} ({n})", j.kind, j.id),
            None => format!("{}:{}", j.kind, j.id),
        }),
        None => Value::Null,
    }
}

/// Per process with a step loop: medians over its regular steps (what the loop usually does).
fn step_rows(r: &Report, steps: &[ProcessSteps]) -> Vec<Row> {
    use crate::analysis::steps::{Step, quantile};
    steps
        .iter()
        .map(|s| {
            let reg: Vec<&Step> = s.regular().collect();
            let q = |f: fn(&Step) -> u64, at: f64| quantile(reg.iter().map(|x| f(x)).collect(), at);
            // The report entry of this process generation, for its job.
            let p = r
                .processes
                .iter()
                .filter(|p| p.tgid == s.tgid)
                .nth(s.generation as usize);
            Row {
                tgid: Some(s.tgid),
                job: p.and_then(job_label),
                name: s.boundary.clone(),
                calls: reg.len() as u64,
                bytes: q(|x| x.copy_bytes, 0.5),
                blocked_ns: q(|x| x.blocked_ns, 0.5),
                cols: vec![
                    ("pid", json!(s.tgid)),
                    ("boundary", json!(s.boundary)),
                    ("calls", json!(reg.len())),
                    ("irregular", json!(s.steps.len() - reg.len())),
                    ("wall_p50_ns", json!(q(|x| x.wall_ns, 0.5))),
                    ("wall_p90_ns", json!(q(|x| x.wall_ns, 0.9))),
                    ("launches", json!(q(|x| x.launches, 0.5))),
                    ("blocked_ns", json!(q(|x| x.blocked_ns, 0.5))),
                    ("first_enqueue_ns", json!(q(|x| x.first_enqueue_ns, 0.5))),
                    ("copy_bytes", json!(q(|x| x.copy_bytes, 0.5))),
                    ("steps", json!(s.steps)),
                ],
            }
        })
        .collect()
}

/// `n` per second of `p`'s active span (first to last call; derived from the measured call
/// times); `null` when the span is empty.
fn per_second(n: u64, p: &crate::model::snapshot::ProcessReport) -> Value {
    p.timeline
        .as_ref()
        .map(|t| t.last_call_ns.saturating_sub(t.first_call_ns))
        .filter(|span| *span > 0)
        .map_or(Value::Null, |span| {
            json!((n as f64 / (span as f64 / 1e9) * 10.0).round() / 10.0)
        })
}

/// Width of the timeline view's activity strip, in characters.
pub const STRIP: usize = 16;

/// `calls` (bins of `bin_ns` from `first_ns`, the calls made up to `last_ns`) spread over
/// `STRIP` columns covering `[0, span_ns)`, each bin shared among the columns it overlaps in
/// proportion (the last bin ends at the last call).
pub fn rebin(
    (first_ns, last_ns): (u64, u64),
    bin_ns: u64,
    calls: &[u64],
    span_ns: u64,
) -> [f64; STRIP] {
    let mut cols = [0f64; STRIP];
    let col_ns = (span_ns.max(1) as f64) / STRIP as f64;
    let end = last_ns.max(first_ns) as f64 + 1.0;
    for (j, &v) in calls.iter().enumerate() {
        if v == 0 {
            continue;
        }
        let a = first_ns as f64 + j as f64 * bin_ns as f64;
        let b = (first_ns as f64 + (j + 1) as f64 * bin_ns as f64).min(end);
        if b <= a {
            continue;
        }
        let (c0, c1) = ((a / col_ns) as usize, (b / col_ns).ceil() as usize);
        for (c, col) in cols
            .iter_mut()
            .enumerate()
            .take(c1.min(STRIP))
            .skip(c0.min(STRIP - 1))
        {
            let (lo, hi) = (c as f64 * col_ns, (c + 1) as f64 * col_ns);
            let overlap = (b.min(hi) - a.max(lo)).max(0.0);
            *col += v as f64 * overlap / (b - a);
        }
        // A bin past the end (the last one runs beyond the capture) lands in the last column.
        if b > col_ns * STRIP as f64 {
            let past = (b - a.max(col_ns * STRIP as f64)) / (b - a);
            cols[STRIP - 1] += v as f64 * past;
        }
    }
    cols
}

/// One character per column: blank where nothing was called, else one of eight heights
/// scaled to the busiest column.
pub fn strip(cols: &[f64]) -> String {
    const LEVELS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let max = cols.iter().copied().fold(0.0, f64::max);
    cols.iter()
        .map(|&v| {
            if v <= 0.0 || max <= 0.0 {
                ' '
            } else {
                LEVELS[(((v / max) * 8.0).ceil() as usize).clamp(1, 8) - 1]
            }
        })
        .collect()
}

fn rows(r: &Report, view: View) -> Vec<Row> {
    let mut out = Vec::new();
    match view {
        View::Summary | View::Advice | View::Steps | View::Code | View::Callers => {}
        View::Timeline => {
            for p in &r.processes {
                let Some(t) = &p.timeline else { continue };
                let span = r.duration_ns.max(t.last_call_ns + 1);
                let active = t.last_call_ns - t.first_call_ns;
                let blocked: u64 = t.blocked_ns.iter().sum();
                let calls: u64 = t.calls.iter().sum();
                out.push(Row {
                    tgid: Some(p.tgid),
                    job: job_label(p),
                    name: p.comm.clone(),
                    calls,
                    bytes: 0,
                    blocked_ns: blocked,
                    cols: vec![
                        ("pid", json!(p.tgid)),
                        ("comm", json!(p.comm)),
                        ("job", job_text(p)),
                        ("first_call_ns", json!(t.first_call_ns)),
                        ("last_call_ns", json!(t.last_call_ns)),
                        ("calls", json!(calls)),
                        ("launches", json!(p.launches)),
                        ("rate", per_second(p.launches, p)),
                        (
                            "blocked_share",
                            if active > 0 {
                                json!(((blocked as f64 / active as f64) * 1000.0).round() / 1000.0)
                            } else {
                                Value::Null
                            },
                        ),
                        (
                            "activity",
                            json!(format!(
                                "|{}|",
                                strip(&rebin(
                                    (t.first_call_ns, t.last_call_ns),
                                    t.bin_ns,
                                    &t.calls,
                                    span
                                ))
                            )),
                        ),
                        ("bins", json!(t)),
                    ],
                });
            }
        }
        View::Kernels => {
            for p in &r.processes {
                for k in &p.kernels {
                    let share = if p.launches == 0 {
                        0.0
                    } else {
                        k.calls as f64 / p.launches as f64
                    };
                    out.push(Row {
                        tgid: Some(p.tgid),
                        job: job_label(p),
                        name: k.name.clone(),
                        calls: k.calls,
                        bytes: 0,
                        blocked_ns: 0,
                        cols: vec![
                            ("pid", json!(p.tgid)),
                            ("kernel", json!(k.name)),
                            ("calls", json!(k.calls)),
                            ("rate", per_second(k.calls, p)),
                            ("share", json!(share)),
                            ("grid", json!(fmt::dim3(k.grid))),
                            ("block", json!(fmt::dim3(k.block))),
                            ("shared_bytes", json!(k.shared_bytes)),
                            ("streams", json!(k.streams)),
                            ("api", json!(k.api)),
                        ],
                    });
                }
            }
        }
        View::Api => {
            for p in &r.processes {
                for a in &p.api {
                    out.push(Row {
                        tgid: Some(p.tgid),
                        job: job_label(p),
                        name: a.name.clone(),
                        calls: a.calls,
                        bytes: 0,
                        blocked_ns: a.blocked_ns,
                        cols: vec![
                            ("pid", json!(p.tgid)),
                            ("api", json!(a.name)),
                            ("calls", json!(a.calls)),
                            ("rate", per_second(a.calls, p)),
                            ("blocked_ns", json!(a.blocked_ns)),
                            ("p50_ns", json!(a.p50_ns)),
                            ("p99_ns", json!(a.p99_ns)),
                            ("max_ns", json!(a.max_ns)),
                        ],
                    });
                }
            }
        }
        View::Memcpy => {
            for p in &r.processes {
                for c in &p.copies {
                    // Only for directions whose copies all blocked: then the CPU time in the
                    // calls is the copies' time, and bytes over it is what the program got.
                    let bw = (c.async_calls == 0 && c.blocked_ns > 0)
                        .then(|| c.bytes as f64 / (c.blocked_ns as f64 / 1e9));
                    out.push(Row {
                        tgid: Some(p.tgid),
                        job: job_label(p),
                        name: c.direction.clone(),
                        calls: c.calls,
                        bytes: c.bytes,
                        blocked_ns: c.blocked_ns,
                        cols: vec![
                            ("pid", json!(p.tgid)),
                            ("direction", json!(c.direction)),
                            ("calls", json!(c.calls)),
                            ("async_calls", json!(c.async_calls)),
                            ("bytes", json!(c.bytes)),
                            ("blocked_ns", json!(c.blocked_ns)),
                            ("pageable_calls", json!(c.pageable_calls)),
                            ("pageable_bytes", json!(c.pageable_bytes)),
                            ("size_histogram", json!(c.size_histogram)),
                            (
                                "bandwidth_bps",
                                bw.map_or(Value::Null, |b| json!(b.round())),
                            ),
                        ],
                    });
                }
            }
        }
        View::Memory => {
            for p in &r.processes {
                let a = &p.allocations;
                out.push(Row {
                    tgid: Some(p.tgid),
                    job: job_label(p),
                    name: p.comm.clone(),
                    calls: a.calls,
                    bytes: a.bytes,
                    blocked_ns: 0,
                    cols: vec![
                        ("pid", json!(p.tgid)),
                        ("comm", json!(p.comm)),
                        ("calls", json!(a.calls)),
                        ("bytes", json!(a.bytes)),
                        ("frees", json!(a.frees)),
                        ("live_bytes", json!(a.live_bytes)),
                        ("peak_bytes", json!(a.peak_bytes)),
                        ("failed", json!(a.failed)),
                        (
                            "never_freed_bytes",
                            if p.exited {
                                json!(a.live_bytes)
                            } else {
                                Value::Null
                            },
                        ),
                    ],
                });
            }
        }
        View::Processes => {
            for p in &r.processes {
                let copy_bytes: u64 = p.copies.iter().map(|c| c.bytes).sum();
                let blocked: u64 = p.api.iter().map(|a| a.blocked_ns).sum();
                out.push(Row {
                    tgid: Some(p.tgid),
                    job: job_label(p),
                    name: p.comm.clone(),
                    calls: p.launches,
                    bytes: copy_bytes,
                    blocked_ns: blocked,
                    cols: vec![
                        ("pid", json!(p.tgid)),
                        ("comm", json!(p.comm)),
                        ("job", job_text(p)),
                        ("launches", json!(p.launches)),
                        ("rate", per_second(p.launches, p)),
                        ("copy_bytes", json!(copy_bytes)),
                        ("blocked_ns", json!(blocked)),
                        ("peak_bytes", json!(p.allocations.peak_bytes)),
                        ("exited", json!(p.exited)),
                    ],
                });
            }
        }
        View::Streams => {
            for p in &r.processes {
                for s in &p.streams {
                    out.push(Row {
                        tgid: Some(p.tgid),
                        job: job_label(p),
                        name: s.stream.clone(),
                        calls: s.launches,
                        bytes: s.copy_bytes,
                        blocked_ns: 0,
                        cols: vec![
                            ("pid", json!(p.tgid)),
                            ("stream", json!(s.stream)),
                            ("launches", json!(s.launches)),
                            ("rate", per_second(s.launches, p)),
                            (
                                "share",
                                json!(if p.launches > 0 {
                                    ((s.launches as f64 / p.launches as f64) * 1000.0).round()
                                        / 1000.0
                                } else {
                                    0.0
                                }),
                            ),
                            ("copies", json!(s.copies)),
                            ("copy_bytes", json!(s.copy_bytes)),
                        ],
                    });
                }
            }
        }
        View::Jobs => {
            for j in &r.jobs {
                let label = match &j.name {
                    Some(n) => format!("{} ({n})", j.id),
                    None => j.id.clone(),
                };
                out.push(Row {
                    tgid: None,
                    job: Some((j.id.clone(), j.name.clone())),
                    name: label.clone(),
                    calls: j.launches,
                    bytes: j.copy_bytes,
                    blocked_ns: j.blocked_ns,
                    cols: vec![
                        ("kind", json!(j.kind)),
                        ("job", json!(label)),
                        ("processes", json!(j.processes.len())),
                        ("launches", json!(j.launches)),
                        ("copy_bytes", json!(j.copy_bytes)),
                        ("blocked_ns", json!(j.blocked_ns)),
                    ],
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
