use super::*;

fn api(corr: u32, tid: u32, start: u64, end: u64) -> GpuActivity {
    GpuActivity {
        kind: activity::API,
        correlation: corr,
        name: 307,
        start_ns: start,
        end_ns: end,
        bytes: u64::from(tid),
        ..Default::default()
    }
}

fn kernel(corr: u32, start: u64, end: u64) -> GpuActivity {
    GpuActivity {
        kind: activity::KERNEL,
        correlation: corr,
        name: 1,
        stream: 7,
        start_ns: start,
        end_ns: end,
        ..Default::default()
    }
}

/// Feeds `recs`, returning (kernel correlation, launch) for each join, in order.
fn feed(
    j: &mut Joiner<&'static str>,
    tids: &Tids,
    recs: &[GpuActivity],
) -> Vec<(u32, &'static str)> {
    let mut out = vec![];
    for r in recs {
        j.record(r, tids, &mut |a, l| {
            if let Some(l) = l {
                out.push((a.correlation, *l))
            }
        });
    }
    out
}

#[test]
fn batches_arriving_later_join_the_launch_on_their_thread_with_interleaved_threads() {
    let mut j = Joiner::default();
    // Two threads launching in turn; the probes' records come first (the ring, at the call).
    j.launch(100, 1_000, "t100-a");
    j.launch(200, 1_100, "t200-a");
    j.launch(100, 2_000, "t100-b");
    j.launch(200, 2_100, "t200-b");
    // CUPTI's batch, much later: API records (start after the probe's entry), kernels after.
    let got = feed(
        &mut j,
        &Tids::Same,
        &[
            api(1, 100, 1_010, 1_050),
            api(2, 200, 1_120, 1_150),
            api(3, 100, 2_005, 2_060),
            api(4, 200, 2_110, 2_190),
            kernel(1, 5_000, 6_000),
            kernel(3, 6_000, 7_000),
            kernel(2, 7_000, 7_500),
            kernel(4, 7_500, 9_000),
        ],
    );
    assert_eq!(
        got,
        vec![(1, "t100-a"), (3, "t100-b"), (2, "t200-a"), (4, "t200-b")]
    );
    let c = j.counts();
    assert_eq!((c.joined, c.unjoined_total()), (4, 0));
    assert_eq!((c.calls_joined, c.calls_unjoined), (4, 0));
}

#[test]
fn kernel_records_before_their_launch_call_wait_for_it() {
    let mut j = Joiner::default();
    j.launch(7, 100, "a");
    j.launch(7, 300, "b");
    let got = feed(
        &mut j,
        &Tids::Same,
        &[kernel(11, 1_000, 2_000), kernel(12, 2_000, 2_500)],
    );
    assert_eq!(got, vec![]);
    assert_eq!(
        j.counts().unjoined,
        BTreeMap::from([(why::NO_LAUNCH_CALL, 2)])
    );
    let got = feed(
        &mut j,
        &Tids::Same,
        &[api(11, 7, 110, 150), api(12, 7, 310, 330)],
    );
    assert_eq!(got, vec![(11, "a"), (12, "b")]);
    assert_eq!((j.counts().joined, j.counts().unjoined_total()), (2, 0));
}

#[test]
fn a_graph_launch_gives_all_its_kernels_to_one_launch() {
    let mut j = Joiner::default();
    j.launch(9, 50, "graph");
    let got = feed(
        &mut j,
        &Tids::Same,
        &[
            GpuActivity {
                name: 514,
                ..api(40, 9, 60, 90)
            },
            kernel(40, 100, 200),
            kernel(40, 200, 300),
            kernel(40, 300, 400),
        ],
    );
    assert_eq!(got, vec![(40, "graph"), (40, "graph"), (40, "graph")]);
    assert_eq!(j.counts().joined, 3);
    assert_eq!(j.counts().calls_joined, 1);
}

#[test]
fn each_launch_is_claimed_once_and_older_unclaimed_ones_go() {
    let mut j = Joiner::default();
    j.launch(1, 10, "before-attach"); // its API record never comes
    j.launch(1, 20, "x");
    j.launch(1, 30, "y");
    // The call of "x" ends at 25: not "y" (later), and "x" only once.
    let got = feed(
        &mut j,
        &Tids::Same,
        &[
            api(1, 1, 22, 25),
            kernel(1, 100, 200),
            api(2, 1, 32, 35),
            kernel(2, 200, 300),
        ],
    );
    assert_eq!(got, vec![(1, "x"), (2, "y")]);
    // Nothing is left on the thread: a third call finds no launch.
    let got = feed(
        &mut j,
        &Tids::Same,
        &[api(3, 1, 40, 45), kernel(3, 300, 400)],
    );
    assert_eq!(got, vec![]);
    let c = j.counts();
    assert_eq!(c.joined, 2);
    assert_eq!(c.unjoined, BTreeMap::from([(why::NO_LAUNCH_RECORD, 1)]));
    assert_eq!((c.calls_joined, c.calls_unjoined), (2, 1));
}

#[test]
fn thread_ids_are_mapped_or_the_records_are_unjoined() {
    // A process in its own PID namespace: CUPTI says 1 and 5, the kernel 4242 and 4250.
    let tids = Tids::Map(BTreeMap::from([(1, 4242), (5, 4250)]));
    let mut j = Joiner::default();
    j.launch(4242, 100, "main");
    j.launch(4250, 110, "worker");
    j.launch(4260, 120, "unmapped");
    let got = feed(
        &mut j,
        &tids,
        &[
            api(1, 1, 105, 130),
            api(2, 5, 115, 140),
            api(3, 9, 125, 150),
            kernel(1, 200, 300),
            kernel(2, 300, 400),
            kernel(3, 400, 500),
        ],
    );
    assert_eq!(got, vec![(1, "main"), (2, "worker")]);
    assert_eq!(
        j.counts().unjoined,
        BTreeMap::from([(why::THREAD_NOT_MAPPED, 1)])
    );
    // Unknown namespace: nothing is guessed, even where the numbers would match.
    let mut j = Joiner::default();
    j.launch(77, 100, "same number");
    let got = feed(
        &mut j,
        &Tids::Unknown,
        &[api(1, 77, 105, 130), kernel(1, 200, 300)],
    );
    assert_eq!(got, vec![]);
    assert_eq!(
        j.counts().unjoined,
        BTreeMap::from([(why::THREAD_NOT_MAPPED, 1)])
    );
}

#[test]
fn bounds_push_out_and_count() {
    use profiler_common::gpu::state;
    let mut j = Joiner::default();
    j.state(state::ENABLED);
    for i in 0..PER_THREAD as u64 + 3 {
        j.launch(1, i, "l");
    }
    assert_eq!(j.counts().launches_evicted, 3);
    for t in 0..THREADS as u32 + 2 {
        j.launch(1000 + t, 0, "t");
    }
    // Thread 1 already had a slot; 1,023 new threads fit, 3 do not.
    assert_eq!(j.counts().launches_evicted, 3 + 3);
    assert_eq!(j.queued, PER_THREAD + THREADS - 1);
    // The library leaves: each thread keeps its last PER_THREAD_IDLE, silently.
    j.state(state::DISABLED);
    assert_eq!(j.queued, PER_THREAD_IDLE + THREADS - 1);
    assert_eq!(
        j.threads[&1].front().map(|x| x.0),
        Some((PER_THREAD + 3 - PER_THREAD_IDLE) as u64)
    );
    j.launch(1, 1 << 40, "l");
    assert_eq!(
        j.counts().launches_evicted,
        6,
        "not listening: not an eviction"
    );
    assert_eq!(j.threads[&1].len(), PER_THREAD_IDLE);

    // The bound of the whole process: four threads of PER_PROCESS / 4, then a fifth.
    let mut j = Joiner::default();
    j.state(state::DROPPED); // still listening
    let quarter = (PER_PROCESS / 4) as u64;
    for t in 1..=4 {
        for i in 0..quarter {
            j.launch(t, i, "q");
        }
    }
    assert_eq!((j.queued, j.counts().launches_evicted), (PER_PROCESS, 0));
    // A thread with launches pushes out its own oldest; a new thread's launch is not kept.
    j.launch(1, quarter, "q");
    j.launch(5, 0, "new");
    assert_eq!((j.queued, j.counts().launches_evicted), (PER_PROCESS, 2));
    assert_eq!(j.threads[&1].front().map(|x| x.0), Some(1));
    // A claim gives room back: the launch and the older ones it passes.
    assert_eq!(j.claim(2, 9), Some("q"));
    assert_eq!(j.queued, PER_PROCESS - 10);
    // Kernel records waiting past their bound: the oldest are unjoined.
    let mut j: Joiner<&str> = Joiner::default();
    for c in 0..WAITING as u32 + 5 {
        feed(&mut j, &Tids::Same, &[kernel(c, 0, 1)]);
    }
    let c = j.counts();
    assert_eq!(
        c.unjoined,
        BTreeMap::from([(why::NO_LAUNCH_CALL, WAITING as u64 + 5)])
    );
    // Correlations past their bound are forgotten: a late kernel record of the first waits.
    let mut j: Joiner<&str> = Joiner::default();
    for c in 0..CORRELATIONS as u32 + 1 {
        feed(&mut j, &Tids::Same, &[api(c, 1, 0, 1)]);
    }
    assert_eq!(feed(&mut j, &Tids::Same, &[kernel(0, 5, 6)]), vec![]);
    assert_eq!(
        j.counts().unjoined,
        BTreeMap::from([(why::NO_LAUNCH_CALL, 1)])
    );
    assert_eq!(j.counts().calls_unjoined, CORRELATIONS as u64 + 1);
}

#[test]
fn every_kernel_record_is_settled_once_and_finish_settles_the_waiting() {
    let mut j = Joiner::default();
    j.launch(1, 10, "a");
    let mut seen = vec![];
    for r in [
        kernel(5, 0, 1),
        kernel(6, 1, 2),
        api(5, 1, 11, 12),
        kernel(7, 2, 3),
    ] {
        j.record(&r, &Tids::Same, &mut |a, l| {
            seen.push((a.correlation, l.copied()))
        });
    }
    j.finish(&mut |a, l| seen.push((a.correlation, l.copied())));
    assert_eq!(seen, vec![(5, Some("a")), (6, None), (7, None)]);
    assert_eq!(
        j.counts().unjoined,
        BTreeMap::from([(why::NO_LAUNCH_CALL, 2)])
    );
}

#[test]
fn copies_and_memsets_are_not_joined() {
    let mut j: Joiner<&str> = Joiner::default();
    let copy = GpuActivity {
        kind: activity::MEMCPY,
        correlation: 3,
        ..Default::default()
    };
    assert_eq!(feed(&mut j, &Tids::Same, &[copy]), vec![]);
    assert_eq!(j.counts(), JoinCounts::default());
}

#[test]
fn records_that_stop_while_launches_go_on_are_told() {
    use profiler_common::gpu::state;
    const S: u64 = 1_000_000_000;
    let mut j: Joiner<&str> = Joiner::default();
    // Not listening: nothing is expected, nothing to tell.
    j.launch(1, 0, "a");
    j.launch(1, 3 * S, "a");
    assert_eq!(j.records_stopped(), None);
    j.state(state::ENABLED);
    j.launch(1, 4 * S, "b");
    assert_eq!(
        feed(
            &mut j,
            &Tids::Same,
            &[api(1, 1, 4 * S, 4 * S + 10), kernel(1, 5, 6)]
        ),
        vec![(1, "b")]
    );
    // Launches after the last call record: within 2 s their records may still come.
    j.launch(1, 10 * S, "c");
    j.launch(2, 11 * S, "c");
    assert_eq!(j.records_stopped(), None);
    j.launch(1, 12 * S + 1, "c");
    assert_eq!(j.records_stopped(), Some((10 * S, 3)));
    // A call record comes: they flow again.
    feed(&mut j, &Tids::Same, &[api(2, 1, 12 * S, 12 * S + 10)]);
    assert_eq!(j.records_stopped(), None);
    // The library leaves: launches are not expected to have records.
    j.launch(1, 13 * S, "d");
    j.state(state::DISABLED);
    j.launch(1, 20 * S, "d");
    assert_eq!(j.records_stopped(), None);
}
