//! `gpuprofd export A.gpuprof B.gpuprof …`: the captures of one job's nodes as one timeline.
//!
//! Each capture's trace is made as on its own ([`super::trace`]) and passed through [`Remap`]
//! on its way to the one sink: its times move by the capture's place on the merged wall-clock
//! axis (`analysis::ranks`' alignment), its processes get track ids of their own (pids of two
//! nodes may be equal; Perfetto's pids are 32-bit, so the tracks are numbered 1, 2, … in the
//! order they appear, and each process's name keeps its real pid), its processes are named
//! `node/rank · comm (pid N)` (or `node: …` where they have no rank), and its flow ids move
//! to a range of their own.

use super::{Sink, Summary, TraceError, TraceEvent, trace_of};
use std::collections::HashMap;
use std::path::PathBuf;

/// One capture's place in the merged trace.
pub struct Part {
    pub path: PathBuf,
    /// The node's name.
    pub node: String,
    /// Ns from the merged origin to the capture's start.
    pub shift_ns: u64,
    /// Rank names of its processes (`node/rank`), by pid.
    pub ranks: HashMap<u32, String>,
    /// Only these processes (`export --rank`); `None`: all.
    pub only: Option<std::collections::HashSet<u32>>,
}

/// Flow ids of part `i` start at `i << FLOW_SHIFT` (a capture's own ids stay far below).
const FLOW_SHIFT: u32 = 48;

/// Writes the merged trace of `parts` to `out`. `--from/--to` are seconds after the merged
/// origin.
pub fn trace_merged(
    parts: &[Part],
    out: &mut dyn Sink,
    from_s: Option<f64>,
    to_s: Option<f64>,
) -> Result<Summary, TraceError> {
    let mut next_pid = 1u64;
    let mut total = Summary {
        events: 0,
        processes: 0,
        damaged: false,
        warning: None,
    };
    let mut warnings = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        let shift_s = p.shift_ns as f64 / 1e9;
        // The window in the capture's own seconds; one that ends before the capture starts
        // keeps none of its calls (it ends at the capture's very start).
        let from = from_s.map(|f| (f - shift_s).max(0.0));
        let to = to_s.map(|t| (t - shift_s).max(0.0));
        let mut remap = Remap {
            inner: &mut *out,
            part: i as u64,
            part_info: p,
            pids: HashMap::new(),
            next_pid: &mut next_pid,
        };
        let s = trace_of(&p.path, &mut remap, from, to, p.only.as_ref())?;
        total.events += s.events;
        total.processes += s.processes;
        total.damaged |= s.damaged;
        if let Some(w) = s.warning {
            warnings.push(format!("{}: {w}", p.path.display()));
        }
    }
    out.finish()?;
    if !warnings.is_empty() {
        total.warning = Some(warnings.join("; "));
    }
    Ok(total)
}

/// A sink that passes one capture's events on, moved to their place in the merged trace. Its
/// `finish` does nothing: the merged sink finishes once, after the last capture.
struct Remap<'a, 'b> {
    inner: &'a mut dyn Sink,
    part: u64,
    part_info: &'b Part,
    /// The capture's track ids → the merged trace's.
    pids: HashMap<u64, u64>,
    next_pid: &'a mut u64,
}

impl Remap<'_, '_> {
    fn pid(&mut self, pid: u64) -> u64 {
        *self.pids.entry(pid).or_insert_with(|| {
            let p = *self.next_pid;
            *self.next_pid += 1;
            p
        })
    }

    fn flow(&self, id: u64) -> u64 {
        id | (self.part << FLOW_SHIFT)
    }
}

impl Sink for Remap<'_, '_> {
    fn event(&mut self, e: TraceEvent) -> Result<(), TraceError> {
        let shift = self.part_info.shift_ns;
        let e = match e {
            TraceEvent::ProcessName { pid, name } => {
                // Track 0 is the node's GPUs; a reused pid's earlier process has a track id
                // above the pid range and no rank.
                let rank = u32::try_from(pid)
                    .ok()
                    .and_then(|p| self.part_info.ranks.get(&p));
                let name = match rank {
                    Some(r) if pid != 0 => format!("{r} · {name}"),
                    _ => format!("{}: {name}", self.part_info.node),
                };
                TraceEvent::ProcessName {
                    pid: self.pid(pid),
                    name,
                }
            }
            TraceEvent::ThreadName { pid, tid, name } => TraceEvent::ThreadName {
                pid: self.pid(pid),
                tid,
                name,
            },
            TraceEvent::Slice {
                pid,
                tid,
                ts_ns,
                dur,
                cat,
                name,
                args,
            } => TraceEvent::Slice {
                pid: self.pid(pid),
                tid,
                ts_ns: ts_ns + shift,
                dur,
                cat,
                name,
                args,
            },
            TraceEvent::Instant {
                pid,
                tid,
                ts_ns,
                scope,
                cat,
                name,
                args,
            } => TraceEvent::Instant {
                pid: self.pid(pid),
                tid,
                ts_ns: ts_ns + shift,
                scope,
                cat,
                name,
                args,
            },
            TraceEvent::Counter {
                pid,
                ts_ns,
                name,
                values,
            } => TraceEvent::Counter {
                pid: self.pid(pid),
                ts_ns: ts_ns + shift,
                name,
                values,
            },
            TraceEvent::FlowStart {
                id,
                pid,
                tid,
                ts_ns,
                cat,
                name,
            } => TraceEvent::FlowStart {
                id: self.flow(id),
                pid: self.pid(pid),
                tid,
                ts_ns: ts_ns + shift,
                cat,
                name,
            },
            TraceEvent::FlowEnd {
                id,
                pid,
                tid,
                ts_ns,
                cat,
                name,
            } => TraceEvent::FlowEnd {
                id: self.flow(id),
                pid: self.pid(pid),
                tid,
                ts_ns: ts_ns + shift,
                cat,
                name,
            },
        };
        self.inner.event(e)
    }

    fn finish(&mut self) -> Result<(), TraceError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The events a sink was given.
    #[derive(Default)]
    struct Collect(Vec<TraceEvent>);

    impl Sink for Collect {
        fn event(&mut self, e: TraceEvent) -> Result<(), TraceError> {
            self.0.push(e);
            Ok(())
        }
        fn finish(&mut self) -> Result<(), TraceError> {
            Ok(())
        }
    }

    /// Flow ids of two captures do not meet: the second's carry its part number above bit 48,
    /// and its times its shift.
    #[test]
    fn flows_of_each_capture_keep_ids_of_their_own() {
        let mut got = Collect::default();
        let mut next_pid = 1;
        for part in [0u64, 1] {
            let info = Part {
                path: PathBuf::new(),
                node: format!("node{part}"),
                shift_ns: 1_000 * part,
                ranks: HashMap::new(),
                only: None,
            };
            let mut remap = Remap {
                inner: &mut got,
                part,
                part_info: &info,
                pids: HashMap::new(),
                next_pid: &mut next_pid,
            };
            let (id, pid, tid, ts_ns, cat, name) = (5, 100, 100, 10, "gpu", "gpu");
            remap
                .event(TraceEvent::FlowStart {
                    id,
                    pid,
                    tid,
                    ts_ns,
                    cat,
                    name,
                })
                .unwrap();
        }
        let ids: Vec<(u64, u64, u64)> = got
            .0
            .iter()
            .map(|e| match e {
                TraceEvent::FlowStart { id, pid, ts_ns, .. } => (*id, *pid, *ts_ns),
                e => panic!("{e:?}"),
            })
            .collect();
        assert_eq!(ids, [(5, 1, 10), (5 | 1 << FLOW_SHIFT, 2, 1_010)]);
    }
}
