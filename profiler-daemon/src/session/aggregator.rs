//! The aggregator task: the single owner of the model. It applies the reader's batches, hands
//! them to the taps, and answers the run loop (ticks, NVML, new libraries, the end) and the
//! questions of the metrics server and the control socket, each from the same state.

use super::deep::{self, DeepCapture};
use super::seen::Seen;
use super::taps::{SETTLE_ALL, Taps};
use crate::api::{ApiInfo, ApiTable, LibraryReport};
use crate::capture::Batch;
use crate::enrich::names::SymbolResolver;
use crate::enrich::process::ProcSymbols;
use crate::model::Aggregator;
use crate::model::history::History;
use crate::model::snapshot::{MetricsFacts, Report, ReportMeta};
use crate::store::{self, Frame};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Messages to the aggregator task.
pub(crate) enum Ctl {
    /// The API table and the libraries attached, whenever a library is added.
    Api(ApiTable, Vec<LibraryReport>),
    Nvml(Option<crate::nvml::Message>),
    /// The report and the model's figures for a scrape.
    Metrics {
        meta: ReportMeta,
        grace: Duration,
        reply: oneshot::Sender<(Report, MetricsFacts)>,
    },
    /// The live dashboard page (`GET /` on the metrics address).
    Dashboard {
        meta: ReportMeta,
        reply: oneshot::Sender<String>,
    },
    /// The live report, each process with its owner (the control socket's `snapshot`).
    Snapshot {
        meta: ReportMeta,
        reply: oneshot::Sender<Report>,
    },
    Tick {
        interval: Duration,
        /// The loss counters now (for deep captures' end frames).
        drops: BTreeMap<String, u64>,
        /// Service mode: drop processes that ended longer ago than this.
        forget_after: Option<Duration>,
    },
    /// Start a deep capture (control socket); the reply is its id or why not.
    DeepStart {
        req: deep::Request,
        reply: oneshot::Sender<Result<u64, deep::Refused>>,
    },
    Finish {
        meta: ReportMeta,
        stop_reason: String,
        reply: oneshot::Sender<(Report, Option<Journaled>)>,
    },
}

/// What went into the capture file.
pub(crate) struct Journaled {
    pub path: PathBuf,
    pub frames: u64,
    pub records: u64,
    pub failure: Option<String>,
}

/// Resolver handed to the aggregator: host-stub addresses → ELF symbols. With a capture file,
/// what it named is kept for the file (a replay cannot read the processes' files).
struct Resolver(Arc<ProcSymbols>, Option<ResolvedLog>);

type ResolvedLog = Arc<std::sync::Mutex<Vec<(u32, u64, String)>>>;

impl SymbolResolver for Resolver {
    fn resolve(&self, tgid: u32, addr: u64) -> Option<String> {
        let name = self.0.symbol_at(tgid, addr)?;
        if let Some(log) = &self.1
            && let Ok(mut l) = log.lock()
        {
            l.push((tgid, addr, name.clone()));
        }
        Some(name)
    }
}

/// The aggregator task's state.
struct Task {
    agg: Aggregator,
    seen: Seen,
    taps: Taps,
    /// Host-stub names resolved, for the capture file's `Symbols` frame.
    resolved: Option<ResolvedLog>,
    api_list: Vec<ApiInfo>,
    libs_list: Vec<LibraryReport>,
    drops_now: BTreeMap<String, u64>,
    next_deep: u64,
    finished: bool,
    history: History,
    /// Print the live lines every tick.
    live: bool,
}

/// What the aggregator task hears from: the reader's batches, the run loop, and the
/// questioners (metrics server, control socket), in that order of precedence.
pub(crate) struct Inbox {
    pub batches: mpsc::Receiver<Batch>,
    pub ctl: mpsc::Receiver<Ctl>,
    pub queries: mpsc::Receiver<Ctl>,
}

/// Runs the aggregator until the run loop has hung up.
pub(crate) async fn aggregate(
    inbox: Inbox,
    api: ApiTable,
    libraries: Vec<LibraryReport>,
    seen: Seen,
    journal: Option<store::Writer>,
    live: bool,
) {
    let Inbox {
        batches: mut rx,
        mut ctl,
        mut queries,
    } = inbox;
    let resolved: Option<ResolvedLog> = journal.as_ref().map(|_| Default::default());
    let mut agg = Aggregator::new(
        api.clone(),
        Box::new(Resolver(seen.symbols.clone(), resolved.clone())),
    )
    .with_stacks(crate::enrich::stacks::StackResolver::live(
        seen.symbols.clone(),
    ));
    agg.set_libraries(libraries.clone());
    if let Some((cycle, control)) = &seen.duty {
        agg.set_duty(cycle.clone(), control.cost.clone());
    }
    if seen.counts_launches() {
        agg.set_launches_counted();
    }
    let mut taps = Taps {
        journal,
        deep: Vec::new(),
    };
    taps.frame(&Frame::Api(api.list().to_vec()));
    taps.frame(&Frame::Libraries(libraries.clone()));
    let mut t = Task {
        agg,
        seen,
        taps,
        resolved,
        api_list: api.list().to_vec(),
        libs_list: libraries,
        drops_now: BTreeMap::new(),
        next_deep: 0,
        finished: false,
        history: History::default(),
        live,
    };
    let mut batches_open = true;
    loop {
        tokio::select! {
            biased;
            b = rx.recv(), if batches_open => match b {
                Some(batch) => t.seen.apply_batch(&mut t.agg, &mut t.taps, &batch),
                None => batches_open = false,
            },
            c = async {
                tokio::select! {
                    biased;
                    c = ctl.recv() => c,
                    Some(q) = queries.recv() => Some(q),
                }
            } => match c {
                Some(c) => t.on(c, &mut rx),
                None => break,
            },
        }
    }
}

impl Task {
    /// A message from the run loop or a questioner (`rx`: the reader's batches, drained before
    /// the final report).
    fn on(&mut self, c: Ctl, rx: &mut mpsc::Receiver<Batch>) {
        match c {
            Ctl::Nvml(m) => self.nvml(m),
            Ctl::DeepStart { req, reply } => {
                let _ = reply.send(self.deep_start(req));
            }
            Ctl::Metrics { meta, grace, reply } => {
                let _ = reply.send((self.agg.report(meta), self.agg.metrics_facts(grace)));
            }
            Ctl::Dashboard { meta, reply } => {
                let report = self.agg.report(meta);
                let advice = crate::analysis::advice::advise(&report, &[]);
                let mut data = crate::output::html::page_data(
                    &report,
                    &[],
                    &advice,
                    &crate::output::html::MemorySeries::new(),
                );
                data["live"] = self.history.to_json();
                let _ = reply.send(crate::output::html::live_page(&data));
            }
            Ctl::Snapshot { meta, reply } => {
                let _ = reply.send(self.agg.report(meta));
            }
            Ctl::Api(table, libs) => self.api(table, libs),
            Ctl::Tick {
                interval,
                drops,
                forget_after,
            } => self.tick(interval, drops, forget_after),
            Ctl::Finish {
                meta,
                stop_reason,
                reply,
            } => {
                // Everything the reader handed over is applied before the report.
                while let Ok(batch) = rx.try_recv() {
                    self.seen.apply_batch(&mut self.agg, &mut self.taps, &batch);
                }
                let _ = reply.send(self.finish(meta, stop_reason));
            }
        }
    }

    fn nvml(&mut self, m: Option<crate::nvml::Message>) {
        let frame = match m {
            Some(crate::nvml::Message::Sample(mut s)) => {
                self.agg.apply_nvml(&s);
                let health = s.health.take();
                let gpm = s.gpm.take();
                let mig = std::mem::take(&mut s.mig);
                // The round, then its MIG placements, its health, then its GPM (which the
                // round's process list attributes), each a frame, in the order the aggregator
                // applied them.
                let mut last = Frame::Nvml(s);
                if !mig.is_empty() {
                    self.agg.apply_nvml_mig(&mig);
                    self.taps.frame(&last);
                    last = Frame::NvmlMig(mig);
                }
                if let Some(h) = health {
                    self.agg.apply_nvml_health(&h);
                    self.taps.frame(&last);
                    last = Frame::NvmlHealth(h);
                }
                if let Some(g) = gpm {
                    self.agg.apply_nvml_gpm(&g);
                    self.taps.frame(&last);
                    last = Frame::NvmlGpm(g);
                }
                last
            }
            Some(crate::nvml::Message::Stopped(why)) => {
                self.agg.nvml_stopped(&why);
                Frame::NvmlStopped(why)
            }
            None => {
                self.agg.nvml_off();
                Frame::NvmlOff
            }
        };
        self.taps.frame(&frame);
    }

    fn deep_start(&mut self, req: deep::Request) -> Result<u64, deep::Refused> {
        if self.finished {
            return Err(deep::Refused::Stopping);
        }
        let start = deep::may_start(&self.taps.deep, &req.target, req.role)?;
        // Every launch from now on is a record, for the capture to keep.
        self.seen.follow_deep(&self.taps, true);
        let (target, duration) = (req.target.clone(), req.duration);
        self.next_deep += 1;
        let mut d = DeepCapture::new(
            self.next_deep,
            req,
            start,
            &self.api_list,
            self.drops_now.clone(),
            crate::sys::kernel::hostname(),
        );
        d.frame(&Frame::Libraries(self.libs_list.clone()));
        self.taps.deep.push(d);
        tracing::info!(id = self.next_deep, target = %target.describe(), ?duration, "deep capture started");
        Ok(self.next_deep)
    }

    fn api(&mut self, table: ApiTable, libs: Vec<LibraryReport>) {
        self.taps.frame(&Frame::Api(table.list().to_vec()));
        if libs != self.libs_list {
            self.taps.frame(&Frame::Libraries(libs.clone()));
        }
        self.api_list = table.list().to_vec();
        self.agg.set_api_table(table);
        self.agg.set_libraries(libs.clone());
        self.libs_list = libs;
    }

    fn tick(
        &mut self,
        interval: Duration,
        drops: BTreeMap<String, u64>,
        forget_after: Option<Duration>,
    ) {
        let (agg, taps) = (&mut self.agg, &mut self.taps);
        self.seen.mark_gone(agg, taps);
        taps.names_out(agg, None);
        if let Some(grace) = forget_after {
            // Their names are settled first (see `Taps::names_out`).
            for t in agg.exited_for(grace) {
                taps.names_out(agg, Some(t));
            }
            for t in agg.forget_exited(grace) {
                self.seen.forget(taps, t);
            }
        }
        if let Some(j) = taps.journal.as_mut() {
            j.flush();
        }
        self.drops_now = drops;
        self.history
            .push(agg.launches_total(), interval.as_secs_f64(), agg.gpu_now());
        let mut i = 0;
        while i < taps.deep.len() {
            match taps.deep[i].tick() {
                Some(why) => {
                    // Every name its stacks need, before its file ends.
                    taps.names_out(agg, Some(SETTLE_ALL));
                    taps.deep.swap_remove(i).finish(&why, &self.drops_now)
                }
                None => i += 1,
            }
        }
        self.seen.follow_deep(taps, false);
        if self.live {
            for row in agg.live_rows(interval.as_secs_f64()) {
                super::console::say(crate::output::live::render_line(&row));
            }
        }
    }

    /// The end: the report, the deep captures' and the capture file's last frames.
    fn finish(&mut self, meta: ReportMeta, stop_reason: String) -> (Report, Option<Journaled>) {
        self.seen.settle_jobs(&mut self.agg, &mut self.taps);
        self.finished = true;
        for d in self.taps.deep.drain(..) {
            d.finish("the daemon stopped", &meta.drops);
        }
        let report = self.agg.report(meta.clone());
        let journaled = self.taps.journal.take().map(|mut j| {
            let names = self
                .resolved
                .as_ref()
                .and_then(|l| l.lock().ok().map(|mut v| std::mem::take(&mut *v)))
                .unwrap_or_default();
            if !names.is_empty() {
                j.frame(&Frame::Symbols(names));
            }
            j.frame(&Frame::Faults(meta.faults.clone()));
            j.clock();
            j.frame(&Frame::End(store::End {
                duration_ns: meta.duration_ns,
                drops: meta.drops.clone(),
                submitted: meta.submitted.clone(),
                stop_reason,
            }));
            j.flush();
            Journaled {
                path: j.path().to_owned(),
                frames: j.frames,
                records: j.records,
                failure: j.failure().map(str::to_owned),
            }
        });
        (report, journaled)
    }
}
