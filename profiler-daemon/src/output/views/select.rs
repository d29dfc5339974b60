//! Selection and ordering of a view's rows, tfprof-style (`--min-calls`, `--min-bytes`,
//! `--name-regex`, `--pid`, `--job`, `--order-by`, `--top`, `--select`), and the view rendered
//! as a table, CSV or JSON from its columns.

use super::columns::{self, Column, Rows, Show};
use super::{Format, OrderBy, ReportArgs};
use crate::analysis::steps::ProcessSteps;
use crate::model::snapshot::{ProcessReport, Report};

/// A view with a row per item: its columns, its rows, and what selection looks at.
pub trait Tabular: Rows + Sized + 'static {
    /// Every column, in order.
    const COLUMNS: &'static [Column<Self>];
    /// The order without `--order-by`.
    const ORDER: OrderBy = OrderBy::Calls;

    /// The rows, in the report's order.
    fn rows<'a>(r: &'a Report, steps: &'a [ProcessSteps]) -> Vec<Self::Row<'a>>;

    /// What selection and ordering look at.
    fn key(row: &Self::Row<'_>) -> Key;
}

/// What the options select and order a row by.
pub struct Key {
    pub tgid: Option<u32>,
    /// The job's id and name.
    pub job: Option<(String, Option<String>)>,
    /// What `--name-regex` matches and `--order-by name` sorts.
    pub name: String,
    pub calls: u64,
    pub bytes: u64,
    pub blocked_ns: u64,
}

impl Key {
    /// The key of a row of process `p`'s.
    pub fn process(p: &ProcessReport, name: &str, calls: u64, bytes: u64, blocked_ns: u64) -> Key {
        Key {
            tgid: Some(p.tgid),
            job: job_label(p),
            name: name.to_owned(),
            calls,
            bytes,
            blocked_ns,
        }
    }

    /// Whether the options keep the row.
    fn selected(&self, a: &ReportArgs, name_re: Option<&regex::Regex>) -> bool {
        self.calls >= a.min_calls
            && self.bytes >= a.min_bytes
            && a.pid.is_none_or(|p| self.tgid == Some(p))
            && a.job.as_deref().is_none_or(|j| {
                self.job
                    .as_ref()
                    .is_some_and(|(id, name)| id == j || name.as_deref() == Some(j))
            })
            && name_re.is_none_or(|re| re.is_match(&self.name))
    }
}

/// `p`'s job: its id and name.
pub fn job_label(p: &ProcessReport) -> Option<(String, Option<String>)> {
    p.job.as_ref().map(|j| (j.id.clone(), j.name.clone()))
}

/// View `V` of `r` (with the `steps` found in its capture), selected and ordered as `a` asks.
pub fn render<V: Tabular>(
    r: &Report,
    steps: &[ProcessSteps],
    a: &ReportArgs,
    name_re: Option<&regex::Regex>,
) -> Result<String, String> {
    let order = a.order_by.unwrap_or(V::ORDER);
    // Orders by a column's value: rate, GPU time.
    let (col, has) = match order {
        OrderBy::Rate => (
            "rate",
            "the kernels, api, processes, streams and timeline views have one",
        ),
        OrderBy::GpuTime => ("gpu_total_ns", "the kernels and processes views have it"),
        _ => ("", ""),
    };
    let rate = V::COLUMNS.iter().find(|c| !col.is_empty() && c.name == col);
    if !col.is_empty() && rate.is_none() {
        return Err(format!(
            "--order-by {}: the {:?} view has no {col}; {has}",
            if order == OrderBy::Rate {
                "rate"
            } else {
                "gpu_time"
            },
            a.view
        ));
    }
    let picked = pick(V::COLUMNS, a)?;
    let mut rows: Vec<(Key, f64, V::Row<'_>)> = V::rows(r, steps)
        .into_iter()
        .map(|row| (V::key(&row), row))
        .filter(|(k, _)| k.selected(a, name_re))
        .map(|(k, row)| {
            // Ordered by rate or GPU time, rows without one (no active span, no CUPTI) last.
            let rate = rate.map_or(-1.0, |c| (c.get)(&row).as_f64().unwrap_or(-1.0));
            (k, rate, row)
        })
        .collect();
    rows.sort_by(|(x, xr, _), (y, yr, _)| {
        let main = match order {
            OrderBy::Calls => y.calls.cmp(&x.calls),
            OrderBy::Bytes => y.bytes.cmp(&x.bytes),
            OrderBy::Blocked => y.blocked_ns.cmp(&x.blocked_ns),
            OrderBy::Rate | OrderBy::GpuTime => yr.total_cmp(xr),
            OrderBy::Name => x.name.cmp(&y.name),
        };
        main.then_with(|| x.name.cmp(&y.name))
            .then_with(|| x.tgid.cmp(&y.tgid))
    });
    if let Some(n) = a.top {
        rows.truncate(n);
    }
    let rows: Vec<V::Row<'_>> = rows.into_iter().map(|(_, _, row)| row).collect();
    Ok(match a.format {
        Format::Json => columns::json(&picked, &rows),
        Format::Csv => columns::csv(&picked, &rows),
        Format::Table | Format::Html | Format::Folded if rows.is_empty() => {
            "(no rows match)\n".to_owned()
        }
        Format::Table | Format::Html | Format::Folded => columns::table("", &picked, &rows),
    })
}

/// The columns to show: those `--select` names, in its order; else all but those a table
/// leaves out to fit 80 columns (`--select` brings them back) and the series only JSON shows.
fn pick<S: Rows>(
    all: &'static [Column<S>],
    a: &ReportArgs,
) -> Result<Vec<&'static Column<S>>, String> {
    if a.select.is_empty() {
        return Ok(all
            .iter()
            .filter(|c| match c.style.show {
                Show::Always => true,
                Show::Wide => a.format != Format::Table,
                Show::JsonOnly => a.format == Format::Json,
            })
            .collect());
    }
    a.select
        .iter()
        .map(|s| {
            all.iter().find(|c| c.name == s.as_str()).ok_or_else(|| {
                let names: Vec<&str> = all.iter().map(|c| c.name).collect();
                format!(
                    "--select: the {:?} view has no column \"{s}\"; it has {}",
                    a.view,
                    names.join(", ")
                )
            })
        })
        .collect()
}
