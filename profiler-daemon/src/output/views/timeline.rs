//! `--view timeline`: when each process was active (first and last call, launch rate, share
//! of its active time blocked) and its activity over the capture drawn as a strip.

use super::columns::{Cell, Column, LEFT, RIGHT, Rows};
use super::select::{Key, Tabular};
use super::{job_text, per_second};
use crate::analysis::steps::ProcessSteps;
use crate::model::activity::TimelineReport;
use crate::model::snapshot::{ProcessReport, Report};
use serde_json::json;

/// A process that made calls, with its timeline.
pub struct Active<'a> {
    p: &'a ProcessReport,
    t: &'a TimelineReport,
    /// What the strip covers: the capture (or up to the last call, if later).
    span_ns: u64,
}

impl Active<'_> {
    fn calls(&self) -> u64 {
        self.t.calls.iter().sum()
    }

    fn blocked_ns(&self) -> u64 {
        self.t.blocked_ns.iter().sum()
    }

    /// Of the time from its first call to its last, the share blocked in calls (to 0.1%).
    fn blocked_share(&self) -> Cell {
        let active = self.t.last_call_ns - self.t.first_call_ns;
        if active > 0 {
            Cell::Share(((self.blocked_ns() as f64 / active as f64) * 1000.0).round() / 1000.0)
        } else {
            Cell::Null
        }
    }

    fn activity(&self) -> Cell {
        let t = self.t;
        let cols = rebin(
            (t.first_call_ns, t.last_call_ns),
            t.bin_ns,
            &t.calls,
            self.span_ns,
        );
        Cell::Text(format!("|{}|", strip(&cols)))
    }
}

/// `--view timeline`.
pub struct Timeline;

impl Rows for Timeline {
    type Row<'a> = Active<'a>;
}

impl Tabular for Timeline {
    const COLUMNS: &'static [Column<Self>] = &[
        Column::new("pid", "PID", RIGHT, |r| Cell::Int(r.p.tgid.into())),
        Column::new("comm", "COMM", LEFT.cut(24), |r| Cell::text(&r.p.comm)),
        Column::new("job", "JOB", LEFT.cut(24).wide(), |r| job_text(r.p)),
        Column::new("first_call_ns", "FROM s", RIGHT, |r| {
            Cell::Secs(r.t.first_call_ns)
        }),
        Column::new("last_call_ns", "TO s", RIGHT, |r| {
            Cell::Secs(r.t.last_call_ns)
        }),
        Column::new("calls", "CALLS", RIGHT.wide(), |r| Cell::Int(r.calls())),
        Column::new("launches", "LAUNCHES", RIGHT.wide(), |r| {
            Cell::Int(r.p.launches)
        }),
        Column::new("rate", "PER s", RIGHT, |r| per_second(r.p.launches, r.p)),
        Column::new("blocked_share", "BLOCKED", RIGHT, |r| r.blocked_share()),
        Column::new("activity", "ACTIVITY", LEFT, |r| r.activity()),
        Column::new("bins", "", LEFT.json_only(), |r| Cell::Json(json!(r.t))),
    ];

    fn rows<'a>(r: &'a Report, _: &'a [ProcessSteps]) -> Vec<Active<'a>> {
        r.processes
            .iter()
            .filter_map(|p| {
                let t = p.timeline.as_ref()?;
                let span_ns = r.duration_ns.max(t.last_call_ns + 1);
                Some(Active { p, t, span_ns })
            })
            .collect()
    }

    fn key(r: &Active<'_>) -> Key {
        Key::process(r.p, &r.p.comm, r.calls(), 0, r.blocked_ns())
    }
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
