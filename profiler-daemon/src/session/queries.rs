//! The door into a running session for what runs beside it (the metrics server, the control
//! socket): questions go to the aggregator task and wait for its answer; the loss counters,
//! the reader's counts and the maps' fill are read as the run loop last refreshed them.

use super::aggregator::Ctl;
use super::deep;
use crate::capture::{KindCounts, MapFill, ReaderStats};
use crate::model::snapshot::{MetricsFacts, Report, ReportMeta};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::{mpsc, oneshot};

/// What the run loop refreshes every tick for the questioners.
#[derive(Default)]
pub(crate) struct Gauges {
    /// The probes' loss and submission counters (DROPS, SUBMITTED).
    pub counters: Mutex<(KindCounts, KindCounts)>,
    /// The probes' rare paths (FAULTS), by name.
    pub faults: Mutex<BTreeMap<String, u64>>,
    /// The state maps' fill.
    pub fill: Mutex<Vec<MapFill>>,
    /// Probes attached now.
    pub probes: AtomicU64,
}

/// Asks the running session; cheap to clone. Every answer is `None` once the session ends.
#[derive(Clone)]
pub struct Queries {
    ctl: mpsc::WeakSender<Ctl>,
    gauges: Arc<Gauges>,
    stats: Arc<ReaderStats>,
    started_at: SystemTime,
    started: Instant,
    started_mono: u64,
}

/// The session's own figures, beside the report: what `status` and `/metrics` show of it.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SelfFigures {
    pub uptime_s: f64,
    pub probes: u64,
    pub records_read: u64,
    pub launches_counted_in_kernel: u64,
    /// Bytes the daemon has allocated and not freed ([`crate::sys::heap::in_use`]).
    pub heap_in_use_bytes: Option<u64>,
    pub bpf_maps: Vec<MapFill>,
}

impl Queries {
    pub(crate) fn new(
        ctl: mpsc::WeakSender<Ctl>,
        gauges: Arc<Gauges>,
        stats: Arc<ReaderStats>,
        (started_at, started, started_mono): (SystemTime, Instant, u64),
    ) -> Queries {
        Queries {
            ctl,
            gauges,
            stats,
            started_at,
            started,
            started_mono,
        }
    }

    /// The report's meta now: start, duration, loss counters.
    pub fn meta(&self) -> Option<ReportMeta> {
        let (drops, submitted) = self.gauges.counters.lock().ok()?.clone();
        let faults = self.gauges.faults.lock().ok()?.clone();
        Some(report_meta(
            (self.started_at, self.started_mono),
            self.started.elapsed(),
            (&drops, &submitted, faults),
            &self.stats,
        ))
    }

    /// Asks the aggregator `what` (built from the report's meta and a reply channel) and waits
    /// for the answer.
    async fn ask<T>(&self, what: impl FnOnce(ReportMeta, oneshot::Sender<T>) -> Ctl) -> Option<T> {
        let meta = self.meta()?;
        let (reply, rx) = oneshot::channel();
        self.ctl.upgrade()?.send(what(meta, reply)).await.ok()?;
        rx.await.ok()
    }

    /// The live report, each process with its owner.
    pub async fn report(&self) -> Option<Report> {
        self.ask(|meta, reply| Ctl::Snapshot { meta, reply }).await
    }

    /// The report and the model's figures for a scrape (processes that ended more than
    /// `grace` ago are named as expired).
    pub async fn metrics(&self, grace: Duration) -> Option<(Report, MetricsFacts)> {
        self.ask(|meta, reply| Ctl::Metrics { meta, grace, reply })
            .await
    }

    /// The live dashboard page.
    pub async fn dashboard(&self) -> Option<String> {
        self.ask(|meta, reply| Ctl::Dashboard { meta, reply }).await
    }

    /// Starts a deep capture; its id, or why not.
    pub async fn deep_start(&self, req: deep::Request) -> Result<u64, deep::Refused> {
        let ctl = self.ctl.upgrade().ok_or(deep::Refused::Stopping)?;
        let (reply, rx) = oneshot::channel();
        if ctl.send(Ctl::DeepStart { req, reply }).await.is_err() {
            return Err(deep::Refused::Stopping);
        }
        rx.await.unwrap_or(Err(deep::Refused::Stopping))
    }

    /// The session's own figures now.
    pub fn figures(&self) -> SelfFigures {
        SelfFigures {
            uptime_s: self.started.elapsed().as_secs_f64(),
            probes: self.gauges.probes.load(Ordering::Relaxed),
            records_read: self.stats.read.load(Ordering::Relaxed),
            launches_counted_in_kernel: self.stats.counted_launches.load(Ordering::Relaxed),
            heap_in_use_bytes: crate::sys::heap::in_use(),
            bpf_maps: self
                .gauges
                .fill
                .lock()
                .map(|f| f.clone())
                .unwrap_or_default(),
        }
    }
}

/// The report's meta. `started`: the capture's start, wall clock and CLOCK_MONOTONIC ns;
/// then the probes' counters: lost and submitted records by kind, faults by name.
pub(crate) fn report_meta(
    (started_at, started_mono_ns): (SystemTime, u64),
    elapsed: Duration,
    (drops, submitted, faults): (&KindCounts, &KindCounts, BTreeMap<String, u64>),
    stats: &ReaderStats,
) -> ReportMeta {
    let mut d: BTreeMap<String, u64> = drops
        .named()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    d.insert(
        "channel".to_owned(),
        stats.channel_dropped.load(Ordering::Relaxed),
    );
    // Launches read from the in-kernel counters that the aggregator's channel could not take.
    let counted_lost = stats.counted_dropped.load(Ordering::Relaxed);
    if counted_lost > 0 {
        d.insert("counted_launches_channel".to_owned(), counted_lost);
    }
    ReportMeta {
        host: crate::sys::kernel::hostname(),
        started_at,
        started_mono_ns,
        duration_ns: elapsed.as_nanos() as u64,
        drops: d,
        submitted: submitted
            .named()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
        faults,
    }
}
