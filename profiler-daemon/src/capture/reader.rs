//! The ring-buffer reader: its own thread, draining the ring on every wake and every 10 ms,
//! the in-kernel launch counters read between records (each process's before its end), the
//! duty cycle's windows closed after their counts, and launches relabelled by their origin
//! before the batch leaves for the aggregator.

use super::{Batch, CaptureError, ReaderStats, counted, origin};
use aya::maps::{MapData, RingBuf};
use profiler_common::kind;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Records per batch before it is handed over mid-drain.
const BATCH_RECORDS: usize = 8192;

/// The in-kernel launch counters, read by the reader every `period` (service mode).
pub struct Counting {
    pub counts: counted::LaunchCounts,
    pub period: std::time::Duration,
    last: std::time::Instant,
    /// The reader is stopping: the next drain reads the counters whatever the period says.
    last_drain: bool,
}

impl Counting {
    pub fn new(counts: counted::LaunchCounts, period: std::time::Duration) -> Self {
        Counting {
            counts,
            period,
            last: std::time::Instant::now(),
            last_drain: false,
        }
    }

    fn read(&mut self, batch: &mut Batch, origin: &mut dyn origin::LaunchOrigin) {
        self.read_split(batch, None, origin);
    }

    /// A read, holding back what `after` says ([`counted::LaunchCounts::read_split`]); the
    /// records held back are returned, already counted in `batch`'s figures.
    fn read_split(
        &mut self,
        batch: &mut Batch,
        after: Option<(u32, u64)>,
        origin: &mut dyn origin::LaunchOrigin,
    ) -> Vec<Vec<u8>> {
        let before = batch.records;
        match self.counts.read_split(batch, after, origin) {
            Ok((n, held)) => {
                batch.counted_records += batch.records - before + held.len();
                batch.counted_launches += n;
                held.iter()
                    .map(|r| profiler_common::decode::encode(r).to_vec())
                    .collect()
            }
            Err(e) => {
                tracing::error!(error = %e, "the in-kernel launch counters cannot be read");
                Vec::new()
            }
        }
    }

    /// The periodic read, and the removal of entries of processes that ended unseen (their end
    /// record lost, or never selected): gone before the read started, so it has their last
    /// launches.
    fn tick(&mut self, batch: &mut Batch, origin: &mut dyn origin::LaunchOrigin) {
        if !self.last_drain && self.last.elapsed() < self.period {
            return;
        }
        self.last = std::time::Instant::now();
        let gone: Vec<u32> = self
            .counts
            .tgids()
            .into_iter()
            .filter(|&t| !is_live_process(t))
            .collect();
        self.read(batch, origin);
        for t in gone {
            self.counts.forget(t);
            origin.forget(t);
        }
    }
}

/// Whether `tgid` is a running process's id. `/proc/N` also answers for a thread id (a
/// thread's directory is reachable though not listed), so a process's id reused as another
/// process's thread would look alive: its `Tgid` must be itself.
pub(super) fn is_live_process(tgid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{tgid}/status")).is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Tgid:"))
            .is_some_and(|v| v.trim().parse::<u32>() == Ok(tgid))
    })
}

/// [`run_reader`] on a thread of its own, with a single-threaded runtime, so that nothing else
/// the daemon does can keep it from draining every 10 ms. It was a task on the shared
/// two-worker runtime; on a GPU node a deep capture received records made 430 ms before it
/// started, which points at the reader having been held off (blocking work on both workers
/// would do it: a new process's libraries read for symbols, probes attached; not confirmed).
/// A ring buffer that is not read fills and loses records.
/// The receiver says how the reader ended.
pub fn spawn_reader(
    ring: RingBuf<MapData>,
    tx: mpsc::Sender<Batch>,
    cancel: CancellationToken,
    stats: Arc<ReaderStats>,
    counting: Option<Counting>,
    origin: Box<dyn origin::LaunchOrigin>,
    windows: Option<Windows>,
) -> Result<tokio::sync::oneshot::Receiver<Result<(), CaptureError>>, CaptureError> {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("gpuprofd-ring".into())
        .spawn(move || {
            let ended = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .enable_time()
                .build()
                .map_err(CaptureError::Io)
                .and_then(|rt| {
                    rt.block_on(run_reader(
                        ring, tx, cancel, stats, counting, origin, windows,
                    ))
                });
            let _ = done_tx.send(ended);
        })
        .map_err(CaptureError::Io)?;
    Ok(done_rx)
}

/// Reads the ring buffer until `cancel`, then drains it one last time and returns.
async fn run_reader(
    ring: RingBuf<MapData>,
    tx: mpsc::Sender<Batch>,
    cancel: CancellationToken,
    stats: Arc<ReaderStats>,
    mut counting: Option<Counting>,
    mut origin: Box<dyn origin::LaunchOrigin>,
    mut windows: Option<Windows>,
) -> Result<(), CaptureError> {
    let mut windows_open = windows.is_some();
    // SAFETY: the ring buffer owns its fd for as long as the AsyncFd owns the ring buffer.
    let mut afd = unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) }
        .map_err(|e| CaptureError::Io(std::io::Error::other(e.to_string())))?;
    // The probes wake the reader once per 512 KiB added to the backlog (see WAKEUP_BYTES in
    // the eBPF object); a timer drains it at least every 10 ms.
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            _ = cancel.cancelled() => break,
            guard = afd.readable_mut() => {
                let mut guard = guard?;
                drain(guard.get_inner_mut(), &tx, &stats, counting.as_mut(), origin.as_mut());
                guard.clear_ready();
            }
            _ = tick.tick() => drain(afd.get_mut(), &tx, &stats, counting.as_mut(), origin.as_mut()),
            w = next_window(&mut windows), if windows_open => match w {
                Some(w) => {
                    drain(afd.get_mut(), &tx, &stats, counting.as_mut(), origin.as_mut());
                    close_window(&tx, &stats, counting.as_mut(), origin.as_mut(), w);
                }
                None => windows_open = false,
            },
        }
    }
    if let Some(c) = counting.as_mut() {
        c.last_drain = true;
    }
    drain(
        afd.get_mut(),
        &tx,
        &stats,
        counting.as_mut(),
        origin.as_mut(),
    );
    Ok(())
}

/// The duty cycle's windows, as they end.
pub type Windows = tokio::sync::mpsc::UnboundedReceiver<profiler_common::WindowBody>;

async fn next_window(w: &mut Option<Windows>) -> Option<profiler_common::WindowBody> {
    match w {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// A duty-cycle window ended (the ring was just drained): the launches it counted, then its
/// [`kind::WINDOW`] record, so that every count of the window reaches the model before it.
fn close_window(
    tx: &mpsc::Sender<Batch>,
    stats: &ReaderStats,
    counting: Option<&mut Counting>,
    origin: &mut dyn origin::LaunchOrigin,
    w: profiler_common::WindowBody,
) {
    let mut batch = Batch::default();
    if let Some(c) = counting {
        c.read(&mut batch, origin);
    }
    let rec = profiler_common::Record {
        header: profiler_common::Header {
            kind: kind::WINDOW,
            api: 0,
            tgid: 0,
            tid: 0,
            ts_ns: crate::sys::clock::monotonic_ns(),
        },
        body: w,
    };
    batch.push(profiler_common::decode::encode(&rec));
    // The daemon's own record, not one read from the ring.
    batch.counted_records += 1;
    hand_over(batch, tx, stats);
}

/// Everything in the ring buffer now, in batches; with `counting`, the launches counted in the
/// kernel too, each process's before its end.
pub fn drain(
    ring: &mut RingBuf<MapData>,
    tx: &mpsc::Sender<Batch>,
    stats: &ReaderStats,
    mut counting: Option<&mut Counting>,
    origin: &mut dyn origin::LaunchOrigin,
) {
    let mut batch = Batch::default();
    // A process that ended, or replaced its image: what its mappings said is over once its
    // record (and the counts read for it) went by, so it is forgotten at the next record.
    let mut forget: Option<u32> = None;
    while let Some(item) = ring.next() {
        if let Some(t) = forget.take() {
            origin.forget(t);
        }
        forget = match peek(&item) {
            Some((kind::EXIT | kind::EXEC, tgid, _)) => Some(tgid),
            _ => None,
        };
        if let Some(c) = counting.as_deref_mut()
            && let Some((k, tgid, ts)) = peek(&item)
        {
            // A process's end: every launch it made is counted by now; they go first.
            if k == kind::EXIT {
                if c.counts.needs_read_before(ts) {
                    c.read(&mut batch, origin);
                }
                c.counts.forget(tgid);
            }
            // An exec: launches counted before it are the old program's, after it the new
            // one's. Each count's first launch time tells which program made it.
            if k == kind::EXEC {
                if c.counts.exec_seen(tgid, ts) == counted::ExecSeen::OnlyNewProgram {
                    // Read after the new program's first launches, before this record (the
                    // ring was drained just before that read): the process was first seen, and
                    // named, as the new program already; passing the exec on would split those
                    // launches off as the old program's (a launcher's fork+exec).
                    stats.read.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                if c.counts.needs_read_before(ts) {
                    // The old program's last launches before the exec, the new one's after it.
                    // A count that spans the exec (same kernel and configuration in both)
                    // goes to the old program for the launches since the last read.
                    let held = c.read_split(&mut batch, Some((tgid, ts)), origin);
                    batch.push(&item);
                    for r in held {
                        batch.push(&r);
                    }
                    if batch.records >= BATCH_RECORDS {
                        hand_over(std::mem::take(&mut batch), tx, stats);
                    }
                    continue;
                }
            }
        }
        origin::note_mapping(&item, origin);
        batch.push_from_ring(&item, origin);
        if batch.records >= BATCH_RECORDS {
            hand_over(std::mem::take(&mut batch), tx, stats);
        }
    }
    if let Some(c) = counting.as_deref_mut() {
        c.tick(&mut batch, origin);
    }
    if let Some(t) = forget {
        origin.forget(t);
    }
    if let Some(c) = counting.as_deref() {
        stats
            .counted_entries
            .store(c.counts.entries() as u64, Ordering::Relaxed);
    }
    if batch.records > 0 {
        hand_over(batch, tx, stats);
    }
}

/// A record's kind, tgid and time, from its header's bytes.
pub(crate) fn peek(rec: &[u8]) -> Option<(u32, u32, u64)> {
    let k = u32::from_le_bytes(rec.get(0..4)?.try_into().ok()?);
    let tgid = u32::from_le_bytes(rec.get(8..12)?.try_into().ok()?);
    let ts = u64::from_le_bytes(rec.get(16..24)?.try_into().ok()?);
    Some((k, tgid, ts))
}

fn hand_over(batch: Batch, tx: &mpsc::Sender<Batch>, stats: &ReaderStats) {
    let ring = (batch.records - batch.counted_records) as u64;
    let launches = batch.counted_launches;
    stats.read.fetch_add(ring, Ordering::Relaxed);
    stats
        .counted_launches
        .fetch_add(launches, Ordering::Relaxed);
    if tx.try_send(batch).is_err() {
        stats.channel_dropped.fetch_add(ring, Ordering::Relaxed);
        stats.counted_dropped.fetch_add(launches, Ordering::Relaxed);
    }
}
