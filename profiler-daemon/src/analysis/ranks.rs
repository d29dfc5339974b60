//! One job across its ranks and nodes (`gpuprofd report A.gpuprof B.gpuprof …`, or `--view
//! ranks` of one capture): the captures' processes as the job's ranks, side by side.
//!
//! Method.
//! * **Ranks.** A process's rank is its rank in its largest NCCL communicator whose id and rank
//!   are known (the world communicator of a torchrun/DeepSpeed job; its subgroups are smaller).
//!   A process is named `node/rank`, or `node/pid N` where it has no such communicator but has
//!   training steps. The node is the capture's host name, or its file name where two captures
//!   name the same host. A process holding several ranks of its communicator (one process
//!   driving several GPUs) is named by its lowest, and said so.
//! * **One job.** Captures belong together when they share a communicator id (every rank of a
//!   communicator derives the same id from its unique id) or a Slurm job id (the one job
//!   identity the same on every node: pods, containers and process trees differ per node).
//!   The job's ranks are the processes of the world communicator most processes share; other
//!   processes in the captures (other jobs on the same nodes) are left out, and said.
//!   Captures of different jobs, a capture given twice and a rank that appears twice are
//!   refused with a message that says which.
//! * **Clocks.** Each capture pairs CLOCK_MONOTONIC (the records' clock) with the wall clock at
//!   its start and end (`store::Frame::Clock`; the header's pair in older files). The merged
//!   time axis is the wall clock: it is as good as the nodes' clock synchronisation (NTP: about
//!   a millisecond; PTP: microseconds), which the captures cannot measure. What they can
//!   measure is reported: the uncertainty of each pair, how far each capture's wall clock moved
//!   against its monotonic clock while it ran (NTP slewing or steps), and how far apart the
//!   ranks' matched steps began (an upper bound on clock error plus the ranks' real skew).
//! * **Steps.** Each rank's steps are found on their own (`analysis::steps`). Ranks of a
//!   synchronous job step together, so steps are matched by order, from the step of each rank
//!   whose first launch lies nearest the latest rank's first one (a capture that began later
//!   has fewer steps; the others' earlier ones stay unmatched).
//! * **The slowest rank.** In a synchronous job every rank's step takes as long as the slowest
//!   one's, so wall time does not name it: the ranks that finish early wait. Each rank's *work*
//!   in a step is its wall time less its waiting: **measured** where the injection library timed
//!   NCCL's kernels (wall − exposed communication: what remained when the GPU ran only NCCL,
//!   which waits for the other ranks); otherwise **derived** from the host (wall − time blocked
//!   in CUDA calls − the wait before the step's first launch), which names a rank slowed on its
//!   host (input, CPU work) and not one slowed on its GPU. The rank with the most work is the
//!   step's slowest.
//!
//! Written here rather than taken from a crate: merging is specific to gpuprofd's report.

use crate::analysis::steps::{ProcessSteps, Step};
use crate::model::snapshot::{ProcessReport, Report};
use crate::store::FileHeader;
use crate::sys::clock::WallPair;
use crate::sys::units;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

mod matched;
use matched::{match_steps, median, rank_row, stragglers};

/// A straggler is named when it was the slowest rank in at least this share of the matched
/// steps (and in at least [`MIN_MATCHED`] of them)…
const STRAGGLER_SHARE: f64 = 0.5;
/// … and its median work is at least this many times the median rank's.
const STRAGGLER_RATIO: f64 = 1.1;
/// Fewest matched steps to name a straggler.
const MIN_MATCHED: usize = 3;

/// One capture, as `report` read it.
pub struct Capture<'a> {
    /// The file's path as given.
    pub file: String,
    pub header: &'a FileHeader,
    /// Its `Frame::Clock`s (start, end; none in files from before schema 10).
    pub clocks: &'a [WallPair],
    pub report: &'a Report,
    pub steps: &'a [ProcessSteps],
    /// The daemon stopped cleanly (the closing frame is there).
    pub complete: bool,
}

/// The job across ranks (`--format json`: `{"job": …}`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobRanks {
    pub captures: Vec<CaptureInfo>,
    pub alignment: Alignment,
    /// The communicators of more than one rank (or of one capture's ranks), by id.
    pub communicators: Vec<JobComm>,
    /// By node, then rank (processes without a rank last on their node, by pid).
    pub ranks: Vec<Rank>,
    /// How a step's work was found: `measured` (wall − exposed communication, CUPTI) or
    /// `derived` (wall − host waits).
    pub work: &'static str,
    /// Matched steps; each list has one entry per rank, in `ranks`' order (`null`: the rank has
    /// no step there).
    pub steps: Vec<JobStep>,
    pub stragglers: Vec<Straggler>,
    /// What the reader should know (clocks, missing ranks, captures cut short).
    pub notes: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CaptureInfo {
    pub file: String,
    pub node: String,
    pub host: String,
    pub target: String,
    /// Wall clock at the capture's start, ns since the Unix epoch.
    pub started_at_unix_ns: u64,
    pub duration_ns: u64,
    pub complete: bool,
    /// How far the capture's wall clock moved against CLOCK_MONOTONIC between its start and
    /// end (`null`: no pair at the end, a file before schema 10 or a daemon that was killed).
    pub clock_drift_ns: Option<i64>,
    /// The widest gap between the two wall-clock reads of a pair (`null`: the header's pair
    /// only, whose gap was not recorded).
    pub clock_uncertainty_ns: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Alignment {
    /// `wall_clock`: each capture placed by its node's wall clock.
    pub method: &'static str,
    /// The merged time axis's zero: the earliest capture's start (ns since the Unix epoch).
    pub origin_unix_ns: u64,
    /// The largest |drift| of a capture's clock pairs.
    pub max_capture_drift_ns: Option<u64>,
    /// Across matched steps, the median spread (latest − earliest) of the ranks' first launch;
    /// `null` with fewer than two ranks with steps.
    pub matched_step_spread_ns: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobComm {
    pub id: String,
    pub nranks: Option<i32>,
    /// The ranks seen, by rank: the process's name.
    pub ranks: BTreeMap<i32, String>,
    /// Ranks `0..nranks` that no capture holds.
    pub missing: Vec<i32>,
    pub calls: u64,
    pub bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Rank {
    /// `node/rank`, or `node/pid N`.
    pub name: String,
    pub node: String,
    pub pid: u32,
    pub comm: String,
    pub rank: Option<i32>,
    pub nranks: Option<i32>,
    /// Every rank the process holds in that communicator, where it holds several (one process
    /// driving several GPUs); empty otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ranks_held: Vec<i32>,
    /// The communicator that gives the rank.
    pub communicator: Option<String>,
    /// That communicator's CUDA device.
    pub device: Option<u32>,
    pub steps: usize,
    pub step_p50_ns: Option<u64>,
    pub step_p99_ns: Option<u64>,
    /// Median work per step (see the module's method).
    pub work_p50_ns: Option<u64>,
    /// Median of wall − work per step: the time the rank waited.
    pub wait_p50_ns: Option<u64>,
    /// NCCL collectives and sends/receives over all its communicators.
    pub nccl_calls: u64,
    pub nccl_bytes: u64,
    /// Bytes per operation (`AllReduce`, …).
    pub bytes_by_op: BTreeMap<String, u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobStep {
    /// 1-based, in the matched sequence.
    pub index: usize,
    /// The earliest rank's start, ns after the merged origin.
    pub start_ns: u64,
    pub wall_ns: Vec<Option<u64>>,
    pub work_ns: Vec<Option<u64>>,
    /// The rank with the most work (two ranks with steps at least).
    pub slowest: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Straggler {
    pub rank: String,
    /// Matched steps in which it was the slowest, of `of`.
    pub slowest_in: usize,
    pub of: usize,
    pub work_p50_ns: u64,
    /// The median over the other ranks of their median work.
    pub others_work_p50_ns: u64,
    pub evidence: String,
}

/// Why captures cannot be merged.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    #[error(
        "\"{0}\" and \"{1}\" are the same capture (same host, same start): give each node's \
         capture once"
    )]
    SameCapture(String, String),
    #[error(
        "these captures are not of one job: they share no NCCL communicator and no job id \
         ({0}). Give `report` the captures of one job's ranks; report the others on their own"
    )]
    DifferentJobs(String),
    #[error(
        "rank {rank} of communicator {comm} appears twice ({a} and {b}): two captures of the \
         same node, or two jobs made from one unique id. Give each rank's capture once"
    )]
    RankTwice {
        comm: String,
        rank: i32,
        a: String,
        b: String,
    },
}

/// The processes of one capture that take part: their rank communicator, if any.
struct Member<'a> {
    capture: usize,
    node: String,
    p: &'a ProcessReport,
    world: Option<&'a crate::model::nccl::CommReport>,
    steps: Option<&'a ProcessSteps>,
    /// Ns to add to a capture-relative time (ns after its start) for merged time.
    shift: i128,
}

/// Merges `caps` (one or more captures) into the job's ranks.
pub fn merge(caps: &[Capture<'_>]) -> Result<JobRanks, MergeError> {
    for (i, a) in caps.iter().enumerate() {
        for b in &caps[i + 1..] {
            if a.header.host == b.header.host
                && a.header.started_at_unix_ns == b.header.started_at_unix_ns
                && a.header.started_at_monotonic_ns == b.header.started_at_monotonic_ns
            {
                return Err(MergeError::SameCapture(a.file.clone(), b.file.clone()));
            }
        }
    }
    one_job(caps)?;
    let mut notes = Vec::new();
    let nodes = node_names(caps, &mut notes);
    // The merged time axis: the wall clock, from the earliest start.
    let start_pair = |c: &Capture<'_>| {
        c.clocks.first().copied().unwrap_or(WallPair {
            unix_ns: c.header.started_at_unix_ns,
            monotonic_ns: c.header.started_at_monotonic_ns,
            uncertainty_ns: 0,
        })
    };
    let wall_start = |c: &Capture<'_>| {
        let p = start_pair(c);
        i128::from(c.header.started_at_monotonic_ns) + p.offset_ns()
    };
    let origin = caps.iter().map(wall_start).min().unwrap_or(0).max(0);
    let infos: Vec<CaptureInfo> = caps
        .iter()
        .zip(&nodes)
        .map(|(c, node)| CaptureInfo {
            file: c.file.clone(),
            node: node.clone(),
            host: c.header.host.clone(),
            target: c.header.target.clone(),
            started_at_unix_ns: wall_start(c).max(0) as u64,
            duration_ns: c.report.duration_ns,
            complete: c.complete,
            clock_drift_ns: match c.clocks {
                [a, .., b] => Some((b.offset_ns() - a.offset_ns()) as i64),
                _ => None,
            },
            clock_uncertainty_ns: c.clocks.iter().map(|p| p.uncertainty_ns).max(),
        })
        .collect();
    overlap_notes(&infos, &mut notes);
    for i in infos.iter().filter(|i| !i.complete) {
        notes.push(format!(
            "\"{}\" has no closing frame (the daemon was killed or is still running): its \
             figures end at its last flush",
            i.file
        ));
    }

    let mut members = Vec::new();
    for (ci, c) in caps.iter().enumerate() {
        let shift = wall_start(c) - origin;
        for p in &c.report.processes {
            let world = world_comm(p);
            let steps = c
                .steps
                .iter()
                .filter(|s| s.tgid == p.tgid && !s.steps.is_empty())
                .max_by_key(|s| s.generation);
            if world.is_none() && steps.is_none() {
                continue;
            }
            members.push(Member {
                capture: ci,
                node: nodes[ci].clone(),
                p,
                world,
                steps,
                shift,
            });
        }
    }
    // The job's communicator: the world communicator most processes share. Processes of other
    // communicators, and those without one, are other jobs on the same nodes (a node-wide
    // capture holds them all): left out, and said.
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for m in &members {
        if let Some(id) = m.world.and_then(|w| w.id.as_deref()) {
            *counts.entry(id).or_default() += 1;
        }
    }
    if let Some(main) = counts
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .map(|(id, _)| (*id).to_owned())
    {
        let (keep, other): (Vec<Member<'_>>, Vec<Member<'_>>) = members
            .into_iter()
            .partition(|m| m.world.and_then(|w| w.id.as_deref()) == Some(main.as_str()));
        members = keep;
        if !other.is_empty() {
            let mut who: Vec<String> = other
                .iter()
                .map(|m| format!("{} pid {}", m.node, m.p.tgid))
                .collect();
            who.truncate(8);
            notes.push(format!(
                "{} process{} not in the job's communicator {main} left out (other jobs, or \
                 processes without NCCL): {}{}",
                other.len(),
                if other.len() == 1 { "" } else { "es" },
                who.join(", "),
                if other.len() > 8 { ", …" } else { "" }
            ));
        }
    }
    if counts.is_empty() && members.len() > 1 {
        notes.push(
            "no process has an NCCL communicator with a known rank: the processes with steps \
             are compared as if they were the job's ranks (named node/pid)"
                .to_owned(),
        );
    }
    members.sort_by(|a, b| {
        (
            a.capture,
            a.world.and_then(|w| w.rank).is_none(),
            a.world.and_then(|w| w.rank),
            a.p.tgid,
        )
            .cmp(&(
                b.capture,
                b.world.and_then(|w| w.rank).is_none(),
                b.world.and_then(|w| w.rank),
                b.p.tgid,
            ))
    });
    let names: Vec<String> = members
        .iter()
        .map(|m| match m.world.and_then(|w| w.rank) {
            Some(r) => format!("{}/{r}", m.node),
            None => format!("{}/pid {}", m.node, m.p.tgid),
        })
        .collect();
    let communicators = communicators(&members, &names, &mut notes)?;
    for (m, name) in members.iter().zip(&names) {
        let Some(id) = m.world.and_then(|w| w.id.as_deref()) else {
            continue;
        };
        let held = ranks_held(m.p, id);
        if held.len() > 1 {
            notes.push(format!(
                "{name} (pid {}) holds ranks {} of communicator {id}: one process driving \
                 several GPUs. It is named by its lowest rank; its steps and bytes are the \
                 process's, not split per GPU",
                m.p.tgid,
                held.iter()
                    .map(i32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }

    // Work per step, measured where every rank with steps has NCCL's exposed time per step.
    let with_steps: Vec<usize> = (0..members.len())
        .filter(|&i| members[i].steps.is_some())
        .collect();
    let measured = !with_steps.is_empty()
        && with_steps.iter().all(|&i| {
            members[i]
                .steps
                .is_some_and(|s| s.steps.iter().all(|x| x.gpu_comm_exposed_ns.is_some()))
        });
    let work = |s: &Step| -> u64 {
        if measured {
            s.wall_ns.saturating_sub(s.gpu_comm_exposed_ns.unwrap_or(0))
        } else {
            s.wall_ns
                .saturating_sub(s.blocked_ns)
                .saturating_sub(s.first_enqueue_ns)
        }
    };
    let (steps, spread) = match_steps(&members, &names, &with_steps, &work);
    let ranks: Vec<Rank> = members
        .iter()
        .zip(&names)
        .map(|(m, name)| rank_row(m, name, &work))
        .collect();
    let median_wall = median(
        steps
            .iter()
            .flat_map(|s| s.wall_ns.iter().flatten().copied())
            .collect(),
    );
    if let (Some(sp), Some(w)) = (spread, median_wall)
        && sp > w / 2
    {
        notes.push(format!(
            "the ranks' matched steps began {} ms apart (median), more than half a step ({} ms): the \
             nodes' clocks may disagree by that much, or the ranks do not step together. Steps \
             are matched by their order from the nearest start; compare them with care",
            units::ms(sp),
            units::ms(w)
        ));
    }
    let stragglers = stragglers(&steps, &names, measured);
    Ok(JobRanks {
        alignment: Alignment {
            method: "wall_clock",
            origin_unix_ns: origin as u64,
            max_capture_drift_ns: infos
                .iter()
                .filter_map(|i| i.clock_drift_ns.map(i64::unsigned_abs))
                .max(),
            matched_step_spread_ns: spread,
        },
        captures: infos,
        communicators,
        ranks,
        work: if measured { "measured" } else { "derived" },
        steps,
        stragglers,
        notes,
    })
}

/// The captures form one job (see the module's method), or which do not.
fn one_job(caps: &[Capture<'_>]) -> Result<(), MergeError> {
    if caps.len() < 2 {
        return Ok(());
    }
    let keys: Vec<BTreeSet<String>> = caps
        .iter()
        .map(|c| {
            let mut k = BTreeSet::new();
            for p in &c.report.processes {
                for cm in p.nccl.iter().flat_map(|n| &n.communicators) {
                    if let Some(id) = &cm.id {
                        k.insert(format!("communicator {id}"));
                    }
                }
                // Only a Slurm job id names one job on every node; a pod's UID, a container
                // id or a process tree's pid differ per node (or repeat by chance).
                if let Some(j) = &p.job
                    && j.kind == "slurm"
                {
                    k.insert(format!("{} job {}", j.kind, j.id));
                }
            }
            k
        })
        .collect();
    // Connected components over shared keys, from the first capture.
    let mut joined = vec![false; caps.len()];
    joined[0] = true;
    let mut grew = true;
    while grew {
        grew = false;
        for i in 0..caps.len() {
            if joined[i] {
                continue;
            }
            if (0..caps.len()).any(|j| joined[j] && !keys[i].is_disjoint(&keys[j])) {
                joined[i] = true;
                grew = true;
            }
        }
    }
    if joined.iter().all(|j| *j) {
        return Ok(());
    }
    let list = caps
        .iter()
        .zip(&keys)
        .map(|(c, k)| {
            let what = if k.is_empty() {
                "no NCCL communicator with an id, no job id".to_owned()
            } else {
                k.iter().take(3).cloned().collect::<Vec<_>>().join(", ")
            };
            format!("\"{}\": {what}", c.file)
        })
        .collect::<Vec<_>>()
        .join("; ");
    Err(MergeError::DifferentJobs(list))
}

/// Node names: the hosts, or the files' names where two captures share a host.
fn node_names(caps: &[Capture<'_>], notes: &mut Vec<String>) -> Vec<String> {
    let hosts: Vec<&str> = caps.iter().map(|c| c.header.host.as_str()).collect();
    let unique = hosts.iter().collect::<BTreeSet<_>>().len() == hosts.len();
    if unique {
        return hosts.iter().map(|h| (*h).to_owned()).collect();
    }
    notes
        .push("two captures name the same host: nodes are named by their files instead".to_owned());
    let mut seen = BTreeMap::<String, usize>::new();
    caps.iter()
        .map(|c| {
            let stem = std::path::Path::new(&c.file)
                .file_stem()
                .map_or_else(|| c.file.clone(), |s| s.to_string_lossy().into_owned());
            let n = seen.entry(stem.clone()).or_insert(0);
            *n += 1;
            if *n == 1 { stem } else { format!("{stem}#{n}") }
        })
        .collect()
}

/// A note for each capture that overlaps no other in (wall-clock) time.
fn overlap_notes(infos: &[CaptureInfo], notes: &mut Vec<String>) {
    if infos.len() < 2 {
        return;
    }
    let span = |i: &CaptureInfo| (i.started_at_unix_ns, i.started_at_unix_ns + i.duration_ns);
    for (k, i) in infos.iter().enumerate() {
        let (a0, a1) = span(i);
        let overlaps = infos.iter().enumerate().any(|(j, o)| {
            let (b0, b1) = span(o);
            j != k && a0 < b1 && b0 < a1
        });
        if !overlaps {
            notes.push(format!(
                "\"{}\" ({}) overlaps no other capture in wall-clock time: it was taken at \
                 another time, or its node's clock is off by more than the captures last. Its \
                 ranks are listed; its steps are matched by order",
                i.file, i.node
            ));
        }
    }
}

/// The communicator that gives `p` its rank: its largest with a known id and rank (most calls
/// among equals).
fn world_comm(p: &ProcessReport) -> Option<&crate::model::nccl::CommReport> {
    p.nccl
        .iter()
        .flat_map(|n| &n.communicators)
        .filter(|c| c.id.is_some() && c.rank.is_some())
        .max_by_key(|c| {
            let calls: u64 = c.ops.iter().map(|o| o.calls).sum();
            // A process holding several ranks of one communicator (one process, several GPUs:
            // `ncclCommInitAll`) is named by its lowest.
            (
                c.nranks.unwrap_or(0),
                std::cmp::Reverse(c.rank.unwrap_or(i32::MAX)),
                calls,
            )
        })
}

/// Every rank `p` holds in communicator `id` (more than one where one process drives several
/// GPUs), in order.
fn ranks_held(p: &ProcessReport, id: &str) -> Vec<i32> {
    let mut v: Vec<i32> = p
        .nccl
        .iter()
        .flat_map(|n| &n.communicators)
        .filter(|c| c.id.as_deref() == Some(id))
        .filter_map(|c| c.rank)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Every communicator id any member uses, its ranks, and notes on missing ones.
fn communicators(
    members: &[Member<'_>],
    names: &[String],
    notes: &mut Vec<String>,
) -> Result<Vec<JobComm>, MergeError> {
    let mut by_id: BTreeMap<String, JobComm> = BTreeMap::new();
    for (m, name) in members.iter().zip(names) {
        for c in m.p.nccl.iter().flat_map(|n| &n.communicators) {
            let Some(id) = &c.id else { continue };
            let e = by_id.entry(id.clone()).or_insert_with(|| JobComm {
                id: id.clone(),
                nranks: c.nranks,
                ranks: BTreeMap::new(),
                missing: Vec::new(),
                calls: 0,
                bytes: 0,
            });
            e.nranks = e.nranks.or(c.nranks);
            e.calls += c.ops.iter().map(|o| o.calls).sum::<u64>();
            e.bytes += c.ops.iter().map(|o| o.bytes).sum::<u64>();
            if let Some(r) = c.rank {
                if let Some(other) = e.ranks.get(&r)
                    && other != name
                {
                    return Err(MergeError::RankTwice {
                        comm: id.clone(),
                        rank: r,
                        a: other.clone(),
                        b: name.clone(),
                    });
                }
                e.ranks.insert(r, name.clone());
            }
        }
    }
    let mut out: Vec<JobComm> = by_id.into_values().collect();
    for c in &mut out {
        if let Some(n) = c.nranks {
            c.missing = (0..n).filter(|r| !c.ranks.contains_key(r)).collect();
        }
        if !c.missing.is_empty() && c.missing.len() <= 16 {
            notes.push(format!(
                "communicator {} has {} ranks; no capture holds rank{} {}",
                c.id,
                c.nranks.unwrap_or(0),
                if c.missing.len() == 1 { "" } else { "s" },
                c.missing
                    .iter()
                    .map(i32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        } else if !c.missing.is_empty() {
            notes.push(format!(
                "communicator {} has {} ranks; {} of them are in no capture",
                c.id,
                c.nranks.unwrap_or(0),
                c.missing.len()
            ));
        }
    }
    // Largest first: the world communicator leads.
    out.sort_by(|a, b| b.ranks.len().cmp(&a.ranks.len()).then(a.id.cmp(&b.id)));
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests;
