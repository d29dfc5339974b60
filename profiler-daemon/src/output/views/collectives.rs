//! `--view collectives`: NCCL per process, communicator and operation — the communicator's
//! rank, size, device and id (the same in every rank), and the operation's calls, bytes,
//! datatypes, reductions, streams and calls made inside a group, and (`--wide`, measured where
//! the injection library ran) the GPU time of the kernels the calls launched. A communicator
//! that made no collective yet is one row without an operation.

use super::columns::{Cell, Column, LEFT, RIGHT, Rows};
use super::select::{Key, Tabular};
use crate::analysis::steps::ProcessSteps;
use crate::model::nccl::{CollectiveReport, CommReport};
use crate::model::snapshot::{ProcessReport, Report};
use std::collections::BTreeMap;

/// One operation (or none) of one communicator of one process.
pub struct Row<'a> {
    p: &'a ProcessReport,
    c: &'a CommReport,
    op: Option<&'a CollectiveReport>,
}

pub struct Collectives;

impl Rows for Collectives {
    type Row<'a> = Row<'a>;
}

/// `name:count` pairs, most first, comma-separated (`float32:3,bfloat16:1`).
fn counts(m: &BTreeMap<String, u64>) -> Cell {
    if m.is_empty() {
        return Cell::Null;
    }
    let mut v: Vec<(&String, &u64)> = m.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
    Cell::Text(
        v.iter()
            .map(|(k, n)| format!("{k}:{n}"))
            .collect::<Vec<_>>()
            .join(","),
    )
}

fn int(v: Option<i32>) -> Cell {
    Cell::or_null(v.and_then(|v| u64::try_from(v).ok()), Cell::Int)
}

impl Tabular for Collectives {
    const COLUMNS: &'static [Column<Self>] = &[
        Column::new("pid", "PID", RIGHT, |r| Cell::Int(r.p.tgid.into())),
        Column::new("comm_id", "COMM ID", LEFT, |r| {
            Cell::or_null(r.c.id.as_deref(), Cell::text)
        }),
        Column::new("rank", "RANK", RIGHT, |r| int(r.c.rank)),
        Column::new("nranks", "RANKS", RIGHT, |r| int(r.c.nranks)),
        Column::new("device", "DEVICE", RIGHT, |r| {
            Cell::or_null(r.c.device, |d| Cell::Int(d.into()))
        }),
        Column::new("op", "OP", LEFT, |r| {
            Cell::or_null(r.op, |o| Cell::text(&o.op))
        }),
        Column::new("calls", "CALLS", RIGHT, |r| {
            Cell::Int(r.op.map_or(0, |o| o.calls))
        }),
        Column::new("bytes", "BYTES", RIGHT, |r| {
            Cell::Bytes(r.op.map_or(0, |o| o.bytes))
        }),
        Column::new("in_group", "IN GROUP", RIGHT, |r| {
            Cell::Int(r.op.map_or(0, |o| o.in_group))
        }),
        Column::new("datatypes", "DATATYPES", LEFT.cut(24), |r| {
            r.op.map_or(Cell::Null, |o| counts(&o.datatypes))
        }),
        Column::new("reductions", "REDUCTIONS", LEFT.cut(16), |r| {
            r.op.map_or(Cell::Null, |o| counts(&o.reductions))
        }),
        Column::new("streams", "STREAMS", RIGHT, |r| {
            Cell::Int(r.op.map_or(0, |o| o.streams.len() as u64))
        }),
        // Measured (CUPTI): the GPU time of the kernels the calls launched.
        Column::new("gpu_ns", "GPU ms", RIGHT.wide(), |r| {
            Cell::or_null(r.op.and_then(|o| o.gpu_ns), Cell::Ms)
        }),
        Column::new("created_by", "MADE BY", LEFT.wide(), |r| {
            Cell::text(&r.c.created_by)
        }),
        Column::new("handle", "HANDLE", LEFT.wide(), |r| {
            Cell::or_null(r.c.handle.as_deref(), Cell::text)
        }),
        Column::new("ended", "ENDED", LEFT.wide(), |r| {
            Cell::or_null(r.c.ended.as_deref(), Cell::text)
        }),
    ];

    fn rows<'a>(r: &'a Report, _: &'a [ProcessSteps]) -> Vec<Row<'a>> {
        let mut out = Vec::new();
        for p in &r.processes {
            let Some(n) = &p.nccl else { continue };
            for c in &n.communicators {
                if c.ops.is_empty() {
                    out.push(Row { p, c, op: None });
                }
                out.extend(c.ops.iter().map(|o| Row { p, c, op: Some(o) }));
            }
        }
        out
    }

    fn key(r: &Row<'_>) -> Key {
        let name = r.op.map_or("", |o| o.op.as_str());
        let (calls, bytes) = r.op.map_or((0, 0), |o| (o.calls, o.bytes));
        Key::process(r.p, name, calls, bytes, 0)
    }
}
