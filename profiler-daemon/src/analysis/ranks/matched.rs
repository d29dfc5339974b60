//! The job's steps across its ranks: matched by order, each rank's work and waits, the
//! slowest rank per step and the stragglers (the method is in the parent module's header).

use super::{
    JobStep, MIN_MATCHED, Member, Rank, STRAGGLER_RATIO, STRAGGLER_SHARE, Straggler, ranks_held,
};
use crate::analysis::steps::Step;
use crate::sys::units;
use std::collections::BTreeMap;

/// The matched steps and the median spread of their first launches.
pub(super) fn match_steps(
    members: &[Member<'_>],
    names: &[String],
    with_steps: &[usize],
    work: &dyn Fn(&Step) -> u64,
) -> (Vec<JobStep>, Option<u64>) {
    // A step's anchor: its first launch (its start where it launched nothing), merged time.
    let anchor = |m: &Member<'_>, s: &Step| -> i128 {
        m.shift + i128::from(s.start_ns) + i128::from(s.first_enqueue_ns.min(s.wall_ns))
    };
    let series: Vec<(usize, &[Step])> = with_steps
        .iter()
        .map(|&i| (i, members[i].steps.map_or(&[][..], |s| &s.steps[..])))
        .collect();
    let Some(latest) = series
        .iter()
        .filter_map(|(i, s)| s.first().map(|x| anchor(&members[*i], x)))
        .max()
    else {
        return (Vec::new(), None);
    };
    let starts: Vec<usize> = series
        .iter()
        .map(|(i, s)| {
            (0..s.len())
                .min_by_key(|&k| (anchor(&members[*i], &s[k]) - latest).unsigned_abs())
                .unwrap_or(0)
        })
        .collect();
    let n = series
        .iter()
        .zip(&starts)
        .map(|((_, s), a)| s.len() - a)
        .min()
        .unwrap_or(0);
    let mut out = Vec::with_capacity(n);
    let mut spreads = Vec::new();
    for k in 0..n {
        let mut wall = vec![None; members.len()];
        let mut wk = vec![None; members.len()];
        let mut anchors = Vec::new();
        let mut start = i128::MAX;
        let mut slowest: Option<(u64, usize)> = None;
        for ((i, s), a) in series.iter().zip(&starts) {
            let st = &s[a + k];
            let w = work(st);
            wall[*i] = Some(st.wall_ns);
            wk[*i] = Some(w);
            anchors.push(anchor(&members[*i], st));
            start = start.min(members[*i].shift + i128::from(st.start_ns));
            if slowest.is_none_or(|(b, _)| w > b) {
                slowest = Some((w, *i));
            }
        }
        if anchors.len() >= 2 {
            let (lo, hi) = (anchors.iter().min(), anchors.iter().max());
            if let (Some(lo), Some(hi)) = (lo, hi) {
                spreads.push((hi - lo) as u64);
            }
        }
        out.push(JobStep {
            index: k + 1,
            start_ns: start.max(0) as u64,
            wall_ns: wall,
            work_ns: wk,
            slowest: slowest
                .filter(|_| series.len() >= 2)
                .map(|(_, i)| names[i].clone()),
        });
    }
    (out, median(spreads))
}

pub(super) fn rank_row(m: &Member<'_>, name: &str, work: &dyn Fn(&Step) -> u64) -> Rank {
    let steps: &[Step] = m.steps.map_or(&[], |s| &s.steps);
    let walls: Vec<u64> = steps.iter().map(|s| s.wall_ns).collect();
    let works: Vec<u64> = steps.iter().map(work).collect();
    let waits: Vec<u64> = steps
        .iter()
        .map(|s| s.wall_ns.saturating_sub(work(s)))
        .collect();
    let mut bytes_by_op = BTreeMap::new();
    let (mut calls, mut bytes) = (0, 0);
    for c in m.p.nccl.iter().flat_map(|n| &n.communicators) {
        for o in &c.ops {
            *bytes_by_op.entry(o.op.clone()).or_insert(0) += o.bytes;
        }
    }
    if let Some(n) = &m.p.nccl {
        calls = n.calls;
        bytes = n.bytes;
    }
    Rank {
        name: name.to_owned(),
        node: m.node.clone(),
        pid: m.p.tgid,
        comm: m.p.comm.clone(),
        rank: m.world.and_then(|w| w.rank),
        nranks: m.world.and_then(|w| w.nranks),
        ranks_held: m
            .world
            .and_then(|w| w.id.as_deref())
            .map(|id| ranks_held(m.p, id))
            .filter(|v| v.len() > 1)
            .unwrap_or_default(),
        communicator: m.world.and_then(|w| w.id.clone()),
        device: m.world.and_then(|w| w.device),
        steps: steps.len(),
        step_p50_ns: median(walls.clone()),
        step_p99_ns: percentile(walls, 99),
        work_p50_ns: median(works),
        wait_p50_ns: median(waits),
        nccl_calls: calls,
        nccl_bytes: bytes,
        bytes_by_op,
    }
}

/// Ranks that were the slowest in most matched steps by a clear margin.
pub(super) fn stragglers(steps: &[JobStep], names: &[String], measured: bool) -> Vec<Straggler> {
    if steps.len() < MIN_MATCHED {
        return Vec::new();
    }
    let n = names.len();
    let mut out = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let slowest_in = steps
            .iter()
            .filter(|s| s.slowest.as_deref() == Some(name))
            .count();
        if (slowest_in as f64) < STRAGGLER_SHARE * steps.len() as f64 {
            continue;
        }
        let own: Vec<u64> = steps.iter().filter_map(|s| s.work_ns[i]).collect();
        let others: Vec<u64> = (0..n)
            .filter(|&j| j != i)
            .filter_map(|j| median(steps.iter().filter_map(|s| s.work_ns[j]).collect()))
            .collect();
        let (Some(w), Some(o)) = (median(own), median(others)) else {
            continue;
        };
        if (w as f64) < STRAGGLER_RATIO * o as f64 {
            continue;
        }
        let how = if measured {
            "measured: the step's wall time less the communication it waited for"
        } else {
            "derived: the step's wall time less the host's waits in CUDA calls and before its \
             first launch"
        };
        out.push(Straggler {
            rank: name.clone(),
            slowest_in,
            of: steps.len(),
            work_p50_ns: w,
            others_work_p50_ns: o,
            evidence: format!(
                "{name} was the slowest rank in {slowest_in} of {} matched steps: its work per \
                 step ({how}) is {} ms median against {} ms for the other ranks; they wait for it",
                steps.len(),
                units::ms(w),
                units::ms(o),
            ),
        });
    }
    out
}

pub(super) fn median(v: Vec<u64>) -> Option<u64> {
    percentile(v, 50)
}

/// The `p`th percentile by nearest rank.
fn percentile(mut v: Vec<u64>, p: usize) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    let k = (p * v.len()).div_ceil(100).max(1) - 1;
    Some(v[k.min(v.len() - 1)])
}
