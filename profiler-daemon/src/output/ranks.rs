//! The job across its ranks (`report A.gpuprof B.gpuprof …`, `--view ranks`): captures and
//! their clocks, communicators, one row per rank, the matched steps side by side with the
//! slowest rank, and the stragglers. `--format json` is [`JobRanks`] under `"job"`.

use crate::analysis::ranks::JobRanks;
use crate::output::fmt::{Align, table};
use crate::sys::units;

/// Ranks shown as columns of the steps table; more and the table shows the spread instead.
const RANK_COLUMNS: usize = 8;
/// Steps listed (the slowest rank's count covers them all).
const STEPS_SHOWN: usize = 50;

fn opt_ms(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_owned(), units::ms)
}

/// The JSON: `{"job": …}`.
pub fn json(j: &JobRanks) -> String {
    serde_json::to_string_pretty(&serde_json::json!({ "job": j })).expect("serialisable") + "\n"
}

/// The text view.
pub fn text(j: &JobRanks) -> String {
    let mut out = String::new();
    let nodes: std::collections::BTreeSet<&str> = j.ranks.iter().map(|r| r.node.as_str()).collect();
    out.push_str(&format!(
        "job: {} rank{} on {} node{}, from {} capture{}\n",
        j.ranks.len(),
        if j.ranks.len() == 1 { "" } else { "s" },
        nodes.len(),
        if nodes.len() == 1 { "" } else { "s" },
        j.captures.len(),
        if j.captures.len() == 1 { "" } else { "s" },
    ));
    out.push_str("\ncaptures (aligned by each node's wall clock; see docs/NCCL.md)\n");
    let rows: Vec<Vec<String>> = j
        .captures
        .iter()
        .map(|c| {
            vec![
                c.node.clone(),
                c.file.clone(),
                format!(
                    "{:.3}",
                    (c.started_at_unix_ns
                        .saturating_sub(j.alignment.origin_unix_ns)) as f64
                        / 1e9
                ),
                format!("{:.3}", c.duration_ns as f64 / 1e9),
                // Below 0.05 µs either way is 0.0 (no "-0.0").
                c.clock_drift_ns.map_or_else(
                    || "-".to_owned(),
                    |d| format!("{:.1}", if d.abs() < 50 { 0.0 } else { d as f64 / 1e3 }),
                ),
                c.clock_uncertainty_ns
                    .map_or_else(|| "-".to_owned(), units::us),
                if c.complete { "yes" } else { "no" }.to_owned(),
            ]
        })
        .collect();
    out.push_str(&table(
        "  ",
        &[
            "NODE",
            "FILE",
            "START s",
            "LENGTH s",
            "DRIFT µs",
            "PAIR ±µs",
            "COMPLETE",
        ],
        &[
            Align::Left,
            Align::Left,
            Align::Right,
            Align::Right,
            Align::Right,
            Align::Right,
            Align::Left,
        ],
        &rows,
    ));
    if let Some(sp) = j.alignment.matched_step_spread_ns {
        out.push_str(&format!(
            "  matched steps of the ranks began {} ms apart (median): clock error and the ranks' \
             own skew together stay within it\n",
            units::ms(sp)
        ));
    }
    if !j.communicators.is_empty() {
        out.push_str("\ncommunicators\n");
        let rows: Vec<Vec<String>> = j
            .communicators
            .iter()
            .map(|c| {
                vec![
                    c.id.clone(),
                    c.nranks.map_or_else(|| "?".to_owned(), |n| n.to_string()),
                    c.ranks.len().to_string(),
                    if c.missing.is_empty() {
                        "-".to_owned()
                    } else {
                        c.missing
                            .iter()
                            .map(i32::to_string)
                            .collect::<Vec<_>>()
                            .join(",")
                    },
                    c.calls.to_string(),
                    units::bytes(c.bytes),
                ]
            })
            .collect();
        out.push_str(&table(
            "  ",
            &[
                "COMMUNICATOR",
                "RANKS",
                "CAPTURED",
                "MISSING",
                "CALLS",
                "BYTES",
            ],
            &[
                Align::Left,
                Align::Right,
                Align::Right,
                Align::Left,
                Align::Right,
                Align::Right,
            ],
            &rows,
        ));
    }
    out.push_str(&format!(
        "\nranks (work: {}; see docs/NCCL.md)\n",
        if j.work == "measured" {
            "measured, step wall time less exposed communication"
        } else {
            "derived, step wall time less the host's waits"
        }
    ));
    let rows: Vec<Vec<String>> = j
        .ranks
        .iter()
        .map(|r| {
            vec![
                r.name.clone(),
                r.pid.to_string(),
                r.comm.clone(),
                r.device.map_or_else(|| "-".to_owned(), |d| d.to_string()),
                r.steps.to_string(),
                opt_ms(r.step_p50_ns),
                opt_ms(r.step_p99_ns),
                opt_ms(r.work_p50_ns),
                opt_ms(r.wait_p50_ns),
                r.nccl_calls.to_string(),
                units::bytes(r.nccl_bytes),
            ]
        })
        .collect();
    out.push_str(&table(
        "  ",
        &[
            "RANK",
            "PID",
            "COMM",
            "DEVICE",
            "STEPS",
            "STEP p50 ms",
            "STEP p99 ms",
            "WORK p50 ms",
            "WAIT p50 ms",
            "NCCL CALLS",
            "NCCL BYTES",
        ],
        &[
            Align::Left,
            Align::Right,
            Align::Left,
            Align::Right,
            Align::Right,
            Align::Right,
            Align::Right,
            Align::Right,
            Align::Right,
            Align::Right,
            Align::Right,
        ],
        &rows,
    ));
    if !j.steps.is_empty() {
        out.push_str(&steps_table(j));
    }
    if !j.stragglers.is_empty() {
        out.push_str("\nstragglers\n");
        for s in &j.stragglers {
            out.push_str(&format!("  {}\n", s.evidence));
        }
    }
    if !j.notes.is_empty() {
        out.push_str("\nnotes\n");
        for n in &j.notes {
            out.push_str(&format!("  {n}\n"));
        }
    }
    out
}

/// Matched steps: each rank's step time side by side (up to [`RANK_COLUMNS`] ranks; the
/// median and the spread beyond), the slowest rank and its work.
fn steps_table(j: &JobRanks) -> String {
    let with: Vec<usize> = (0..j.ranks.len())
        .filter(|&i| j.steps.iter().any(|s| s.wall_ns[i].is_some()))
        .collect();
    let columns = with.len() <= RANK_COLUMNS;
    let mut headers: Vec<String> = vec!["STEP".into(), "START s".into()];
    let mut align = vec![Align::Right, Align::Right];
    if columns {
        for &i in &with {
            headers.push(format!("{} ms", j.ranks[i].name));
            align.push(Align::Right);
        }
    } else {
        headers.extend(["MEDIAN ms".into(), "MAX ms".into()]);
        align.extend([Align::Right, Align::Right]);
    }
    headers.extend([
        "SLOWEST".into(),
        "ITS WORK ms".into(),
        "MEDIAN WORK ms".into(),
    ]);
    align.extend([Align::Left, Align::Right, Align::Right]);
    let rows: Vec<Vec<String>> = j
        .steps
        .iter()
        .take(STEPS_SHOWN)
        .map(|s| {
            let mut row = vec![
                s.index.to_string(),
                format!("{:.3}", s.start_ns as f64 / 1e9),
            ];
            let walls: Vec<u64> = with.iter().filter_map(|&i| s.wall_ns[i]).collect();
            if columns {
                row.extend(with.iter().map(|&i| opt_ms(s.wall_ns[i])));
            } else {
                let mut w = walls.clone();
                w.sort_unstable();
                row.push(opt_ms(w.get(w.len() / 2).copied()));
                row.push(opt_ms(w.last().copied()));
            }
            let slowest = s
                .slowest
                .as_ref()
                .and_then(|n| j.ranks.iter().position(|r| &r.name == n));
            let mut works: Vec<u64> = s.work_ns.iter().flatten().copied().collect();
            works.sort_unstable();
            row.push(s.slowest.clone().unwrap_or_else(|| "-".into()));
            row.push(opt_ms(slowest.and_then(|i| s.work_ns[i])));
            row.push(opt_ms(works.get(works.len() / 2).copied()));
            row
        })
        .collect();
    let h: Vec<&str> = headers.iter().map(String::as_str).collect();
    let mut out = format!(
        "\nsteps, matched across ranks ({} step{}{})\n",
        j.steps.len(),
        if j.steps.len() == 1 { "" } else { "s" },
        if j.steps.len() > STEPS_SHOWN {
            format!("; the first {STEPS_SHOWN} shown, --format json has all")
        } else {
            String::new()
        }
    );
    out.push_str(&table("  ", &h, &align, &rows));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::ranks::{merge, tests::two_nodes};

    #[test]
    fn the_text_lists_ranks_steps_side_by_side_and_the_straggler() {
        let f = two_nodes();
        let j = merge(&f.caps()).unwrap();
        let t = text(&j);
        assert!(
            t.starts_with("job: 4 ranks on 2 nodes, from 2 captures\n"),
            "{t}"
        );
        let lines: Vec<&str> = t.lines().collect();
        let at = |head: &str| {
            lines
                .iter()
                .position(|l| l.starts_with(head))
                .unwrap_or_else(|| panic!("no {head:?} in\n{t}"))
        };
        let r = at("  RANK");
        assert_eq!(
            lines[r..r + 5],
            [
                "  RANK      PID  COMM     DEVICE  STEPS  STEP p50 ms  STEP p99 ms  WORK p50 ms  WAIT p50 ms  NCCL CALLS  NCCL BYTES",
                "  node-a/0   11  python3       0      8       40.000       40.000        8.000       32.000           8    32.0 KiB",
                "  node-a/1   12  python3       1      8       40.000       40.000        8.000       32.000           8    32.0 KiB",
                "  node-b/2   11  python3       0      6       40.000       40.000       38.000        2.000           6    24.0 KiB",
                "  node-b/3   13  python3       1      6       40.000       40.000        8.000       32.000           6    24.0 KiB",
            ]
        );
        let s = at("  STEP");
        assert_eq!(
            lines[s..s + 2],
            [
                "  STEP  START s  node-a/0 ms  node-a/1 ms  node-b/2 ms  node-b/3 ms  SLOWEST   ITS WORK ms  MEDIAN WORK ms",
                "     1    0.580       40.000       40.000       40.000       40.000  node-b/2       38.000           8.000",
            ]
        );
        assert!(
            t.contains("\nstragglers\n  node-b/2 was the slowest rank in 6 of 6 matched steps"),
            "{t}"
        );
        assert!(
            t.contains("  node-b  /tmp/b.gpuprof    0.100    10.000       3.0       0.7  yes\n"),
            "{t}"
        );
        let v: serde_json::Value = serde_json::from_str(&json(&j)).unwrap();
        assert_eq!(v["job"]["stragglers"][0]["rank"], "node-b/2");
        assert_eq!(v["job"]["steps"][0]["wall_ns"][2], 40_000_000);
    }
}
