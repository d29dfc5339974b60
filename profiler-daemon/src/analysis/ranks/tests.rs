//! Merging captures of one job: ranks named and matched, steps matched across shifted clocks,
//! the straggler named with exact figures, and each kind of bad input refused or noted.

use super::*;
use serde_json::{Value, json};

const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;

/// A process with one communicator `(id, rank, nranks, device)` and `calls` all-reduces of
/// `bytes` each, plus a job.
fn process(
    tgid: u32,
    comm: Option<(&str, i32, i32, u32)>,
    calls: u64,
    bytes: u64,
    job: &str,
) -> Value {
    let z = json!({"calls": 0, "bytes": 0});
    let nccl = comm.map(|(id, rank, nranks, dev)| {
        json!({"calls": calls, "bytes": calls * bytes, "communicators": [{
            "handle": "0x10", "id": id, "rank": rank, "nranks": nranks, "device": dev,
            "created_by": "ncclCommInitRank", "ended": null,
            "ops": [{"op": "AllReduce", "calls": calls, "bytes": calls * bytes, "in_group": 0,
                     "datatypes": {"float32": calls}, "reductions": {"sum": calls},
                     "streams": ["0x1"], "devices": {"0": calls}}]}]})
    });
    json!({
        "tgid": tgid, "comm": "python3", "cmdline": "python3 train.py", "exited": false,
        "job": {"kind": "slurm", "id": job, "cgroup": "/"}, "launches": 1, "unnamed_launches": 0,
        "kernels": [], "copies": [], "api": [], "graphs": {"launches": 0},
        "allocations": {"calls": 0, "failed": 0, "bytes": 0, "frees": 0, "live_bytes": 0,
                        "peak_bytes": 0, "untracked": 0,
                        "by_kind": {"device": z, "host_pinned": z, "managed": z, "async": z,
                                    "pitched": z, "vmm": z}},
        "nccl": nccl
    })
}

fn report(host: &str, processes: Vec<Value>) -> Report {
    serde_json::from_value(json!({
        "schema": "gpuprofd.report/1", "host": host, "started_at": "2026-11-27T07:00:00Z",
        "duration_ns": 10 * S, "drops": {}, "submitted": {}, "decode_errors": 0, "jobs": [],
        "processes": processes
    }))
    .unwrap()
}

fn header(host: &str, unix_ns: u64, mono_ns: u64) -> FileHeader {
    FileHeader {
        writer: "gpuprofd test".into(),
        host: host.into(),
        kernel: "6.18".into(),
        started_at_unix_ns: unix_ns,
        started_at_monotonic_ns: mono_ns,
        target: "all jobs".into(),
    }
}

/// A step starting `start` ns after its capture's start.
fn step(start: u64, wall: u64, blocked: u64, first: u64) -> Step {
    Step {
        start_ns: start,
        wall_ns: wall,
        launches: 5,
        blocked_ns: blocked,
        copy_bytes: 0,
        first_enqueue_ns: first,
        live_bytes: 0,
        regular: true,
        derived_gpu_idle_ns: None,
        derived_launch_ahead_ns: None,
        gpu_ns: None,
        gpu_busy_ns: None,
        gpu_comm_ns: None,
        gpu_comm_exposed_ns: None,
    }
}

/// `n` lockstep steps of 40 ms from `from` (capture-relative), each launching at once: the
/// straggler works 38 ms, the others 8 ms and wait 32 ms blocked (in the sync that waits for
/// the all-reduce, as DDP's ranks do).
fn steps(tgid: u32, from: u64, n: u64, straggler: bool) -> ProcessSteps {
    ProcessSteps {
        tgid,
        generation: 0,
        boundary: "cudaStreamSynchronize 0x1".into(),
        steps: (0..n)
            .map(|k| {
                if straggler {
                    step(from + k * 40 * MS, 40 * MS, 2 * MS, 0)
                } else {
                    step(from + k * 40 * MS, 40 * MS, 32 * MS, 0)
                }
            })
            .collect(),
    }
}

pub(crate) struct Fixture {
    headers: Vec<FileHeader>,
    clocks: Vec<Vec<WallPair>>,
    pub(crate) reports: Vec<Report>,
    pub(crate) steps: Vec<Vec<ProcessSteps>>,
    files: Vec<String>,
}

impl Fixture {
    pub(crate) fn caps(&self) -> Vec<Capture<'_>> {
        (0..self.reports.len())
            .map(|i| Capture {
                file: self.files[i].clone(),
                header: &self.headers[i],
                clocks: &self.clocks[i],
                report: &self.reports[i],
                steps: &self.steps[i],
                complete: true,
            })
            .collect()
    }
}

const T0: u64 = 1_795_800_000 * S;

/// Node A (ranks 0 and 1) from wall T0, its monotonic clock at 100 s; node B (ranks 2 and 3)
/// from T0 + 2 s, its monotonic clock at 5,000 s, its wall clock slewed 3 µs over the capture.
/// Rank 2 is the straggler. A saw 8 steps from 0.5 s; B the last 6 of them.
pub(crate) fn two_nodes() -> Fixture {
    let id = "00000000000000aa";
    let a = report(
        "node-a",
        vec![
            process(11, Some((id, 0, 4, 0)), 8, 4096, "77"),
            process(12, Some((id, 1, 4, 1)), 8, 4096, "77"),
        ],
    );
    let b = report(
        "node-b",
        vec![
            process(11, Some((id, 2, 4, 0)), 6, 4096, "77"),
            process(13, Some((id, 3, 4, 1)), 6, 4096, "77"),
        ],
    );
    // A's step k starts at T0 + 0.5 s + 40k ms; B's capture starts 2 s later, so its steps
    // (k = 2..8) start at 0.5 s + 80 ms − 2 s ... a negative time: B started first in truth.
    // Take B's start at T0 + 0.1 s instead: its step j (k = j + 2) at 0.48 s capture-relative.
    let pair = |unix, mono, unc| WallPair {
        unix_ns: unix,
        monotonic_ns: mono,
        uncertainty_ns: unc,
    };
    Fixture {
        headers: vec![
            header("node-a", T0, 100 * S),
            header("node-b", T0 + S / 10, 5_000 * S),
        ],
        clocks: vec![
            vec![pair(T0, 100 * S, 800), pair(T0 + 10 * S, 110 * S, 900)],
            vec![
                pair(T0 + S / 10, 5_000 * S, 700),
                pair(T0 + S / 10 + 10 * S + 3_000, 5_010 * S, 600),
            ],
        ],
        reports: vec![a, b],
        steps: vec![
            vec![steps(11, S / 2, 8, false), steps(12, S / 2, 8, false)],
            vec![
                steps(11, S / 2 - S / 10 + 80 * MS, 6, true),
                steps(13, S / 2 - S / 10 + 80 * MS, 6, false),
            ],
        ],
        files: vec!["/tmp/a.gpuprof".into(), "/tmp/b.gpuprof".into()],
    }
}

#[test]
fn ranks_are_named_matched_and_the_straggler_found() {
    let f = two_nodes();
    let j = merge(&f.caps()).unwrap();
    let names: Vec<&str> = j.ranks.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["node-a/0", "node-a/1", "node-b/2", "node-b/3"]);
    assert_eq!(j.ranks[2].pid, 11);
    assert_eq!(j.ranks[3].device, Some(1));
    assert_eq!(
        (j.ranks[0].nccl_calls, j.ranks[0].nccl_bytes),
        (8, 8 * 4096)
    );
    assert_eq!(j.ranks[2].bytes_by_op["AllReduce"], 6 * 4096);
    assert_eq!(j.ranks[0].steps, 8);
    assert_eq!(j.ranks[0].step_p50_ns, Some(40 * MS));
    assert_eq!(j.ranks[0].work_p50_ns, Some(8 * MS));
    assert_eq!(j.ranks[0].wait_p50_ns, Some(32 * MS));
    assert_eq!(j.ranks[2].work_p50_ns, Some(38 * MS));

    // One communicator, all four ranks.
    assert_eq!(j.communicators.len(), 1);
    let c = &j.communicators[0];
    assert_eq!((c.nranks, c.calls, c.bytes), (Some(4), 28, 28 * 4096));
    assert!(c.missing.is_empty());
    assert_eq!(c.ranks[&2], "node-b/2");

    // B's six steps match A's last six, by wall clock despite the monotonic clocks 4,900 s
    // apart: the first matched step begins at A's third (0.58 s after A's start).
    assert_eq!(j.steps.len(), 6);
    assert_eq!(j.steps[0].start_ns, S / 2 + 80 * MS);
    assert_eq!(j.steps[5].start_ns, S / 2 + 280 * MS);
    assert_eq!(j.alignment.origin_unix_ns, T0);
    assert_eq!(j.alignment.matched_step_spread_ns, Some(0));
    assert_eq!(j.alignment.max_capture_drift_ns, Some(3_000));
    assert_eq!(j.captures[1].clock_drift_ns, Some(3_000));
    assert_eq!(j.captures[1].clock_uncertainty_ns, Some(700));
    assert_eq!(j.captures[1].started_at_unix_ns, T0 + S / 10);
    assert_eq!(j.work, "derived");
    for s in &j.steps {
        assert_eq!(s.slowest.as_deref(), Some("node-b/2"));
        assert_eq!(s.wall_ns, vec![Some(40 * MS); 4]);
        assert_eq!(
            s.work_ns,
            vec![Some(8 * MS), Some(8 * MS), Some(38 * MS), Some(8 * MS)]
        );
    }
    assert_eq!(j.stragglers.len(), 1);
    let s = &j.stragglers[0];
    assert_eq!((s.rank.as_str(), s.slowest_in, s.of), ("node-b/2", 6, 6));
    assert_eq!((s.work_p50_ns, s.others_work_p50_ns), (38 * MS, 8 * MS));
    assert!(
        s.evidence.contains("in 6 of 6 matched steps"),
        "{}",
        s.evidence
    );
    assert!(j.notes.is_empty(), "{:?}", j.notes);
}

#[test]
fn measured_work_is_the_wall_less_exposed_communication() {
    let mut f = two_nodes();
    for (ci, caps) in f.steps.iter_mut().enumerate() {
        for (pi, p) in caps.iter_mut().enumerate() {
            for s in &mut p.steps {
                // Rank 3 (B's second) computes longest on its GPU: it waits 5 ms, the others 25.
                let exposed = if (ci, pi) == (1, 1) { 5 * MS } else { 25 * MS };
                s.gpu_comm_exposed_ns = Some(exposed);
            }
        }
    }
    let j = merge(&f.caps()).unwrap();
    assert_eq!(j.work, "measured");
    assert_eq!(
        j.steps[0].work_ns,
        vec![Some(15 * MS), Some(15 * MS), Some(15 * MS), Some(35 * MS)]
    );
    assert_eq!(j.stragglers[0].rank, "node-b/3");
    assert!(
        j.stragglers[0].evidence.contains("measured"),
        "{}",
        j.stragglers[0].evidence
    );
}

#[test]
fn captures_of_other_jobs_twice_or_with_a_rank_twice_are_refused() {
    // No shared communicator or job.
    let mut f = two_nodes();
    f.reports[1] = report(
        "node-b",
        vec![process(11, Some(("00000000000000bb", 0, 2, 0)), 1, 8, "78")],
    );
    let e = merge(&f.caps()).unwrap_err();
    assert!(matches!(e, MergeError::DifferentJobs(_)), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("\"/tmp/a.gpuprof\": communicator 00000000000000aa, slurm job 77"),
        "{msg}"
    );
    assert!(
        msg.contains("\"/tmp/b.gpuprof\": communicator 00000000000000bb, slurm job 78"),
        "{msg}"
    );
    // A shared Slurm job is enough without NCCL.
    f.reports[1] = report("node-b", vec![process(11, None, 0, 0, "77")]);
    assert!(merge(&f.caps()).is_ok());

    // The same capture twice.
    let mut f = two_nodes();
    f.headers[1] = f.headers[0].clone();
    assert_eq!(
        merge(&f.caps()).unwrap_err(),
        MergeError::SameCapture("/tmp/a.gpuprof".into(), "/tmp/b.gpuprof".into())
    );

    // Rank 1 in both captures.
    let mut f = two_nodes();
    f.reports[1] = report(
        "node-b",
        vec![process(
            11,
            Some(("00000000000000aa", 1, 4, 0)),
            6,
            4096,
            "77",
        )],
    );
    assert_eq!(
        merge(&f.caps()).unwrap_err(),
        MergeError::RankTwice {
            comm: "00000000000000aa".into(),
            rank: 1,
            a: "node-a/1".into(),
            b: "node-b/1".into()
        }
    );
}

#[test]
fn missing_ranks_shared_hosts_and_clocks_apart_are_noted() {
    let mut f = two_nodes();
    // B holds only rank 2; both captures say the same host; B's wall clock is an hour ahead.
    f.reports[1].processes.truncate(1);
    f.steps[1].truncate(1);
    f.headers[1].host = "node-a".into();
    for c in &mut f.clocks[1] {
        c.unix_ns += 3_600 * S;
    }
    let j = merge(&f.caps()).unwrap();
    let names: Vec<&str> = j.ranks.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["a/0", "a/1", "b/2"]);
    assert_eq!(j.communicators[0].missing, [3]);
    assert_eq!(
        j.notes,
        [
            "two captures name the same host: nodes are named by their files instead".to_owned(),
            "\"/tmp/a.gpuprof\" (a) overlaps no other capture in wall-clock time: it was taken \
             at another time, or its node's clock is off by more than the captures last. Its \
             ranks are listed; its steps are matched by order"
                .to_owned(),
            "\"/tmp/b.gpuprof\" (b) overlaps no other capture in wall-clock time: it was taken \
             at another time, or its node's clock is off by more than the captures last. Its \
             ranks are listed; its steps are matched by order"
                .to_owned(),
            "communicator 00000000000000aa has 4 ranks; no capture holds rank 3".to_owned(),
            "the ranks' matched steps began 3599800.000 ms apart (median), more than half a \
             step (40.000 ms): the nodes' clocks may disagree by that much, or the ranks do not \
             step together. Steps are matched by their order from the nearest start; compare \
             them with care"
                .to_owned(),
        ]
    );
}

#[test]
fn one_capture_of_several_ranks_is_a_job_too() {
    let f = two_nodes();
    let caps = f.caps();
    let j = merge(&caps[..1]).unwrap();
    assert_eq!(j.ranks.len(), 2);
    assert_eq!(j.steps.len(), 8);
    assert_eq!(j.alignment.matched_step_spread_ns, Some(0));
    assert!(j.stragglers.is_empty());
    assert_eq!(j.steps[0].slowest.as_deref(), Some("node-a/0"));
}

#[test]
fn a_process_with_several_ranks_is_named_by_its_lowest_and_noted() {
    let mut f = two_nodes();
    // Node B's second process drives ranks 3 and 2 (ncclCommInitAll); its first is gone.
    let mut p = process(13, Some(("00000000000000aa", 3, 4, 1)), 6, 4096, "77");
    let mut second = p["nccl"]["communicators"][0].clone();
    second["rank"] = json!(2);
    second["handle"] = json!("0x20");
    p["nccl"]["communicators"]
        .as_array_mut()
        .unwrap()
        .push(second);
    p["nccl"]["calls"] = json!(12);
    f.reports[1] = report("node-b", vec![p]);
    f.steps[1].remove(0);
    let j = merge(&f.caps()).unwrap();
    let names: Vec<&str> = j.ranks.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["node-a/0", "node-a/1", "node-b/2"]);
    assert_eq!(j.ranks[2].ranks_held, [2, 3]);
    assert_eq!(j.ranks[2].pid, 13);
    assert!(j.ranks[0].ranks_held.is_empty());
    assert!(j.communicators[0].missing.is_empty());
    assert_eq!(
        j.notes,
        [
            "node-b/2 (pid 13) holds ranks 2, 3 of communicator 00000000000000aa: one process \
          driving several GPUs. It is named by its lowest rank; its steps and bytes are the \
          process's, not split per GPU"
        ]
    );
}

#[test]
fn other_jobs_on_the_same_nodes_are_left_out_and_said() {
    let mut f = two_nodes();
    // Node A also runs another job's rank (its own communicator, slower steps) and a process
    // with steps but no NCCL.
    f.reports[0].processes.push(
        serde_json::from_value(process(21, Some(("00000000000000cc", 0, 2, 2)), 3, 8, "90"))
            .unwrap(),
    );
    f.reports[0]
        .processes
        .push(serde_json::from_value(process(22, None, 0, 0, "91")).unwrap());
    let mut slow = steps(21, S / 2, 8, true);
    for s in &mut slow.steps {
        s.wall_ns = 400 * MS;
    }
    f.steps[0].push(slow);
    f.steps[0].push(steps(22, S / 2, 8, true));
    let j = merge(&f.caps()).unwrap();
    let names: Vec<&str> = j.ranks.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["node-a/0", "node-a/1", "node-b/2", "node-b/3"]);
    assert_eq!(j.stragglers[0].rank, "node-b/2");
    assert_eq!(
        j.notes,
        [
            "2 processes not in the job's communicator 00000000000000aa left out (other jobs, or \
          processes without NCCL): node-a pid 21, node-a pid 22"
        ]
    );
}
