//! `report --view code` (tfprof's code view: calls and blocked time per line of code, as a
//! tree of call stacks), `--view callers` (per library that made the calls) and `--format
//! folded` (collapsed stacks for flame graph tools).

use crate::model::snapshot::{CodeReport, ProcessReport, Report};
use crate::output::views::columns::{self, Cell, Column, LEFT, RIGHT, Rows, all};
use crate::output::views::{Format, OrderBy, ReportArgs};
use serde_json::json;
use std::collections::BTreeMap;

fn processes<'a>(r: &'a Report, a: &ReportArgs) -> impl Iterator<Item = &'a ProcessReport> {
    r.processes.iter().filter(move |p| {
        a.pid.is_none_or(|pid| p.tgid == pid)
            && a.job.as_deref().is_none_or(|j| {
                p.job
                    .as_ref()
                    .is_some_and(|x| x.id == j || x.name.as_deref() == Some(j))
            })
    })
}

fn weight(c: &CodeReport, order: OrderBy) -> u64 {
    match order {
        OrderBy::Blocked => c.blocked_ns,
        OrderBy::GpuTime => c.gpu_ns,
        _ => c.calls,
    }
}

/// The rows of a process a view shows: stacks cut to start at the first frame matching
/// `--start-name-regex`, kept when a frame matches `--name-regex`, with `--min-calls`.
fn selected(
    p: &ProcessReport,
    a: &ReportArgs,
    show: Option<&regex::Regex>,
    start: Option<&regex::Regex>,
) -> Vec<CodeReport> {
    let mut out = Vec::new();
    for c in &p.code {
        if c.calls < a.min_calls {
            continue;
        }
        let mut c = c.clone();
        if let Some(re) = start {
            match c.stack.iter().position(|f| re.is_match(f)) {
                Some(i) => {
                    c.stack.drain(..i);
                }
                None => continue,
            }
        }
        if let Some(re) = show
            && !c.stack.iter().any(|f| re.is_match(f))
            && !c.kernels.iter().any(|k| re.is_match(&k.name))
        {
            continue;
        }
        out.push(c);
    }
    out
}

#[derive(Default)]
struct Node {
    calls: u64,
    launches: u64,
    syncs: u64,
    copies: u64,
    blocked_ns: u64,
    gpu_ns: u64,
    /// A launched kernel's leaf: its GPU time is its stack's, not split per kernel (`-`).
    kernel: bool,
    children: BTreeMap<String, Node>,
}

impl Node {
    fn add(&mut self, c: &CodeReport) {
        self.calls += c.calls;
        self.launches += c.launches;
        self.syncs += c.syncs;
        self.copies += c.copies;
        self.blocked_ns += c.blocked_ns;
        self.gpu_ns += c.gpu_ns;
    }

    fn weight(&self, order: OrderBy) -> u64 {
        match order {
            OrderBy::Blocked => self.blocked_ns,
            OrderBy::GpuTime => self.gpu_ns,
            _ => self.calls,
        }
    }
}

/// A line of the code tree: a frame (or launched kernel) and the calls under it.
struct Line<'a> {
    node: &'a Node,
    name: &'a str,
    depth: usize,
}

/// The lines of the code tree.
struct Tree;

impl Rows for Tree {
    type Row<'a> = Line<'a>;
}

const TREE: &[Column<Tree>] = &[
    Column::new("calls", "CALLS", RIGHT, |l| Cell::Int(l.node.calls)),
    Column::new("launches", "LAUNCHES", RIGHT, |l| {
        Cell::Int(l.node.launches)
    }),
    Column::new("syncs", "SYNCS", RIGHT, |l| Cell::Int(l.node.syncs)),
    Column::new("copies", "COPIES", RIGHT, |l| Cell::Int(l.node.copies)),
    Column::new("blocked_ns", "BLOCKED", RIGHT, |l| {
        Cell::Ms(l.node.blocked_ns)
    }),
    // Measured by CUPTI (the injection library), for the sampled launches, scaled like LAUNCHES.
    Column::new("gpu_ns", "GPU ms", RIGHT, |l| {
        if l.node.kernel {
            Cell::Null
        } else {
            Cell::Ms(l.node.gpu_ns)
        }
    }),
    Column::new("code", "CODE", LEFT, |l| {
        Cell::Text(format!("{}{}", "  ".repeat(l.depth), l.name))
    }),
];

/// `node`'s children down to `max_depth`, heaviest first, each followed by its own.
fn tree_lines<'a>(
    node: &'a Node,
    depth: usize,
    max_depth: usize,
    order: OrderBy,
    lines: &mut Vec<Line<'a>>,
) {
    if depth >= max_depth {
        return;
    }
    let mut kids: Vec<(&String, &Node)> = node.children.iter().collect();
    kids.sort_by(|x, y| y.1.weight(order).cmp(&x.1.weight(order)).then(x.0.cmp(y.0)));
    for (name, n) in kids {
        lines.push(Line {
            node: n,
            name,
            depth,
        });
        tree_lines(n, depth + 1, max_depth, order, lines);
    }
}

/// A sampled stack of a process's.
struct Stack<'a> {
    p: &'a ProcessReport,
    c: CodeReport,
}

/// The code view's CSV: a line per stack.
struct Stacks;

impl Rows for Stacks {
    type Row<'a> = Stack<'a>;
}

const STACKS: &[Column<Stacks>] = &[
    Column::new("pid", "PID", RIGHT, |s| Cell::Int(s.p.tgid.into())),
    Column::new("comm", "COMM", LEFT, |s| Cell::text(&s.p.comm)),
    Column::new("stack", "STACK", LEFT, |s| Cell::Text(s.c.stack.join(";"))),
    Column::new("caller", "CALLER", LEFT, |s| Cell::text(&s.c.caller)),
    Column::new("samples", "SAMPLES", RIGHT, |s| Cell::Int(s.c.samples)),
    Column::new("calls", "CALLS", RIGHT, |s| Cell::Int(s.c.calls)),
    Column::new("launches", "LAUNCHES", RIGHT, |s| Cell::Int(s.c.launches)),
    Column::new("syncs", "SYNCS", RIGHT, |s| Cell::Int(s.c.syncs)),
    Column::new("copies", "COPIES", RIGHT, |s| Cell::Int(s.c.copies)),
    Column::new("blocked_ns", "BLOCKED", RIGHT, |s| Cell::Ms(s.c.blocked_ns)),
    // Empty where the process has no measured GPU time.
    Column::new("gpu_ns", "GPU ms", RIGHT, |s| gpu_cell(s.p, s.c.gpu_ns)),
    Column::new("gpu_measured_ns", "GPU ms sampled", RIGHT, |s| {
        gpu_cell(s.p, s.c.gpu_measured_ns)
    }),
    Column::new("kernels", "KERNELS", LEFT, |s| {
        let k: Vec<String> =
            s.c.kernels
                .iter()
                .map(|k| format!("{}={}", k.name, k.launches))
                .collect();
        Cell::Text(k.join(";"))
    }),
];

/// `ns` of process `p` in milliseconds where CUPTI measured its GPU time, else nothing.
fn gpu_cell(p: &ProcessReport, ns: u64) -> Cell {
    if p.gpu_time.basis == "measured" {
        Cell::Ms(ns)
    } else {
        Cell::Null
    }
}

/// Process `p`'s part of the code view: how its stacks were taken, then the tree of `rows`
/// down to `max_depth` frames.
fn tree(p: &ProcessReport, rows: &[CodeReport], max_depth: usize, order: OrderBy) -> String {
    let mut out = format!(
        "process {} ({}): {} stacks sampled{}{}\n",
        p.tgid,
        p.comm,
        p.stacks.samples,
        p.stacks
            .python
            .as_ref()
            .map(|py| format!("; {py}"))
            .unwrap_or_default(),
        if p.stacks.dropped > 0 {
            format!("; {} on stacks past the 4,096 kept", p.stacks.dropped)
        } else {
            String::new()
        }
    );
    if p.stacks.python_fault > 0 {
        out.push_str(&format!(
            "  note: {} of {} stacks could not read all of the interpreter's frames (its memory \
             was not where this CPython version keeps them): Python frames may be missing from \
             them\n",
            p.stacks.python_fault, p.stacks.samples
        ));
    }
    if p.stacks.shallow > 0 {
        out.push_str(&format!(
            "  note: {} of {} stacks name fewer than 3 native frames: the code was probably \
             built without frame pointers; only the innermost frame (the direct caller) is \
             certain\n",
            p.stacks.shallow, p.stacks.samples
        ));
    }
    let mut root = Node::default();
    for c in rows {
        root.add(c);
        let mut n = &mut root;
        for f in &c.stack {
            n = n.children.entry(f.clone()).or_default();
            n.add(c);
        }
        for k in &c.kernels {
            let leaf = n
                .children
                .entry(format!("[kernel] {}", k.name))
                .or_default();
            leaf.calls += k.launches;
            leaf.launches += k.launches;
            leaf.kernel = true;
        }
    }
    let mut lines = Vec::new();
    tree_lines(&root, 0, max_depth, order, &mut lines);
    // GPU time only where CUPTI measured it (the injection library): no column of zeros for
    // the others.
    let measured = p.gpu_time.basis == "measured";
    let cols: Vec<&Column<Tree>> = TREE
        .iter()
        .filter(|c| measured || c.name != "gpu_ns")
        .collect();
    out.push_str(&columns::table("  ", &cols, &lines));
    out.push('\n');
    out
}

/// `--view code`.
pub fn render_code(
    r: &Report,
    a: &ReportArgs,
    show: Option<&regex::Regex>,
    start: Option<&regex::Regex>,
) -> Result<String, String> {
    let order = a.order_by.unwrap_or(OrderBy::Calls);
    let max_depth = a.max_depth.unwrap_or(usize::MAX);
    let mut out = String::new();
    match a.format {
        Format::Table | Format::Html => {
            for p in processes(r, a).filter(|p| p.stacks.samples > 0) {
                out.push_str(&tree(p, &selected(p, a, show, start), max_depth, order));
            }
            if out.is_empty() {
                out = "no call stacks in this capture (stacks are taken with --stack-period N, \
                       N > 0)\n"
                    .into();
            } else {
                out.push_str(
                    "CALLS, LAUNCHES, SYNCS, COPIES and BLOCKED are estimates from the stacks \
                     sampled (each stands for the sampling period's calls); exact with \
                     --stack-period 1.\n",
                );
            }
        }
        Format::Json => {
            let v: Vec<_> = processes(r, a)
                .map(|p| {
                    let mut rows = selected(p, a, show, start);
                    rows.sort_by_key(|c| std::cmp::Reverse(weight(c, order)));
                    json!({"pid": p.tgid, "comm": p.comm, "stacks": p.stacks, "code": rows})
                })
                .collect();
            out = serde_json::to_string_pretty(&v).unwrap_or_default() + "\n";
        }
        Format::Csv => {
            let rows: Vec<Stack> = processes(r, a)
                .flat_map(|p| {
                    selected(p, a, show, start)
                        .into_iter()
                        .map(move |c| Stack { p, c })
                })
                .collect();
            out = columns::csv(&all(STACKS), &rows);
        }
        Format::Folded => {
            out = folded(r, a, show, start, order);
        }
    }
    Ok(out)
}

/// Collapsed stacks: `comm (pid);outer;…;inner;leaf weight` per line, the leaf being the
/// launched kernel, `[sync]` or `[copy]`; the weight is calls (or blocked ns with
/// `--order-by blocked`, or the measured GPU ns of the stack's kernels, leaf `[gpu]`, with
/// `--order-by gpu_time`).
fn folded(
    r: &Report,
    a: &ReportArgs,
    show: Option<&regex::Regex>,
    start: Option<&regex::Regex>,
    order: OrderBy,
) -> String {
    let clean = |s: &str| s.replace(';', ":");
    let mut lines: BTreeMap<String, u64> = BTreeMap::new();
    for p in processes(r, a) {
        for c in selected(p, a, show, start) {
            let mut base = format!("{} ({})", clean(&p.comm), p.tgid);
            for f in &c.stack {
                base.push(';');
                base.push_str(&clean(f));
            }
            if order == OrderBy::Blocked {
                if c.blocked_ns > 0 {
                    *lines.entry(base).or_default() += c.blocked_ns;
                }
                continue;
            }
            if order == OrderBy::GpuTime {
                if c.gpu_ns > 0 {
                    *lines.entry(format!("{base};[gpu]")).or_default() += c.gpu_ns;
                }
                continue;
            }
            for k in &c.kernels {
                *lines
                    .entry(format!("{base};[kernel] {}", clean(&k.name)))
                    .or_default() += k.launches;
            }
            if c.syncs > 0 {
                *lines.entry(format!("{base};[sync]")).or_default() += c.syncs;
            }
            if c.copies > 0 {
                *lines.entry(format!("{base};[copy]")).or_default() += c.copies;
            }
        }
    }
    lines
        .into_iter()
        .map(|(k, v)| format!("{k} {v}\n"))
        .collect()
}

/// The calls one library of a process made (on the stacks sampled).
#[derive(Default, serde::Serialize)]
struct Caller {
    pid: u32,
    comm: String,
    caller: String,
    calls: u64,
    launches: u64,
    syncs: u64,
    copies: u64,
    blocked_ns: u64,
    kernels: BTreeMap<String, u64>,
}

impl Caller {
    /// The kernel it launched most (the first by name among equals), or nothing.
    fn top_kernel(&self) -> &str {
        self.kernels
            .iter()
            .max_by(|x, y| x.1.cmp(y.1).then(y.0.cmp(x.0)))
            .map_or("", |k| k.0)
    }
}

/// The callers view's table and CSV (its JSON is the callers themselves, kernels and all).
struct Callers;

impl Rows for Callers {
    type Row<'a> = Caller;
}

const CALLERS: &[Column<Callers>] = &[
    Column::new("pid", "PID", RIGHT, |c| Cell::Int(c.pid.into())),
    Column::new("comm", "COMM", LEFT, |c| Cell::text(&c.comm)),
    Column::new("caller", "CALLER", LEFT, |c| Cell::text(&c.caller)),
    Column::new("calls", "CALLS", RIGHT, |c| Cell::Int(c.calls)),
    Column::new("launches", "LAUNCHES", RIGHT, |c| Cell::Int(c.launches)),
    Column::new("syncs", "SYNCS", RIGHT, |c| Cell::Int(c.syncs)),
    Column::new("copies", "COPIES", RIGHT, |c| Cell::Int(c.copies)),
    Column::new("blocked_ns", "BLOCKED", RIGHT, |c| Cell::Ms(c.blocked_ns)),
    Column::new("top_kernel", "TOP KERNEL", LEFT.cut(48), |c| {
        Cell::text(c.top_kernel())
    }),
];

/// `--view callers`: per process, per library that made the calls.
pub fn render_callers(
    r: &Report,
    a: &ReportArgs,
    show: Option<&regex::Regex>,
) -> Result<String, String> {
    let mut rows: Vec<Caller> = Vec::new();
    for p in processes(r, a) {
        let mut by: BTreeMap<String, Caller> = BTreeMap::new();
        for c in selected(p, a, None, None) {
            let e = by.entry(c.caller.clone()).or_insert_with(|| Caller {
                pid: p.tgid,
                comm: p.comm.clone(),
                caller: c.caller.clone(),
                ..Default::default()
            });
            e.calls += c.calls;
            e.launches += c.launches;
            e.syncs += c.syncs;
            e.copies += c.copies;
            e.blocked_ns += c.blocked_ns;
            for k in &c.kernels {
                *e.kernels.entry(k.name.clone()).or_default() += k.launches;
            }
        }
        rows.extend(
            by.into_values()
                .filter(|c| show.is_none_or(|re| re.is_match(&c.caller))),
        );
    }
    let order = a.order_by.unwrap_or(OrderBy::Calls);
    rows.sort_by(|x, y| {
        let (wx, wy) = match order {
            OrderBy::Blocked => (x.blocked_ns, y.blocked_ns),
            _ => (x.calls, y.calls),
        };
        wy.cmp(&wx)
            .then(x.pid.cmp(&y.pid))
            .then(x.caller.cmp(&y.caller))
    });
    Ok(match a.format {
        Format::Json => serde_json::to_string_pretty(&rows).unwrap_or_default() + "\n",
        Format::Csv => columns::csv(&all(CALLERS), &rows),
        _ if rows.is_empty() => {
            "no call stacks in this capture (stacks are taken with --stack-period N, N > 0)\n"
                .to_owned()
        }
        _ => columns::table("", &all(CALLERS), &rows),
    })
}
