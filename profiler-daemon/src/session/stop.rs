//! The end of a session: drain the ring buffer into the aggregator, take the final report,
//! write the results (the JSON report or the capture file, the table), then detach — results
//! first, because detaching is slow.

use super::aggregator::{Ctl, Journaled};
use super::queries::report_meta;
use super::setup::Probes;
use super::{CaptureOptions, Companion, SessionError, console};
use crate::capture::{self, CaptureError, ReaderStats};
use crate::model::snapshot::Report;
use crate::output;
use std::fs::File;
use std::io::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// Deep captures still streaming get this long to send their last bytes.
const STREAMING_GRACE: Duration = Duration::from_secs(10);

pub(super) struct Stopping<'a> {
    pub opts: &'a CaptureOptions,
    pub probes: Probes,
    pub companion: &'a mut dyn Companion,
    pub ctl_tx: mpsc::Sender<Ctl>,
    /// The questioners' channel: closed here, so the aggregator can end.
    pub query_tx: mpsc::Sender<Ctl>,
    pub nvml_rx: Option<mpsc::Receiver<crate::nvml::Message>>,
    pub cancel: CancellationToken,
    pub reader: oneshot::Receiver<Result<(), CaptureError>>,
    pub agg: tokio::task::JoinHandle<()>,
    pub stats: Arc<ReaderStats>,
    pub started: (SystemTime, Instant, u64),
    /// The JSON report's file (not a capture file's: the aggregator has that).
    pub out_file: Option<File>,
}

impl Stopping<'_> {
    pub async fn stop(mut self, stop_reason: String) -> Result<(), SessionError> {
        console::say(format_args!(
            "stopping: {stop_reason}; draining the ring buffer"
        ));
        self.companion.stopping(&format!("stopping: {stop_reason}"));
        // NVML news that arrived while stopping still belongs in the report (a sampler that
        // could not start says so within milliseconds, maybe just after a quick Ctrl-C).
        if let Some(rx) = self.nvml_rx.as_mut() {
            while let Ok(m) = rx.try_recv() {
                if let crate::nvml::Message::Stopped(why) = &m {
                    super::console::warn(why);
                }
                let _ = self.ctl_tx.send(Ctl::Nvml(Some(m))).await;
            }
        }
        // The duty cycle's last (partial) window goes to the reader before its last drain.
        if let Some((stop, thread)) = self.probes.duty_thread.take() {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        self.cancel.cancel();
        (&mut self.reader)
            .await
            .map_err(|_| SessionError::Internal("the ring-buffer reader thread died".into()))??;
        let (report, journaled) = self.final_report(stop_reason).await?;
        // Every sender gone: the aggregator ends.
        let Stopping {
            opts,
            probes,
            companion,
            ctl_tx,
            query_tx,
            agg,
            mut out_file,
            ..
        } = self;
        drop((ctl_tx, query_tx));
        let _ = agg.await;
        // Deep captures got their end frames; let their last bytes reach the clients (bounded).
        let deadline = Instant::now() + STREAMING_GRACE;
        while companion.streaming() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Results first: detaching is slow (see Attacher::link_count) and must not delay them.
        let written = write(opts, out_file.as_mut(), &report, journaled.as_ref());
        companion.finished(&report);
        companion.stopped();
        if companion.prints_report() {
            print!("{}", output::table::render(&report));
            let _ = std::io::stdout().flush();
        }
        detach(probes);
        written
    }

    /// The aggregator's last report, after everything read has been applied.
    async fn final_report(
        &mut self,
        stop_reason: String,
    ) -> Result<(Report, Option<Journaled>), SessionError> {
        let ebpf = &self.probes.ebpf;
        let drops = capture::read_counts(ebpf, profiler_common::maps::DROPS)?;
        let submitted = capture::read_counts(ebpf, profiler_common::maps::SUBMITTED)?;
        // A diagnostic counter must not cost the user the report.
        let faults = capture::read_faults(ebpf).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "the probes' fault counters cannot be read");
            Default::default()
        });
        let (started_at, started, started_mono) = self.started;
        let meta = report_meta(
            (started_at, started_mono),
            started.elapsed(),
            (&drops, &submitted, faults),
            &self.stats,
        );
        let attacher = &self.probes.attacher;
        let _ = self
            .ctl_tx
            .send(Ctl::Api(attacher.api().clone(), attacher.library_list()))
            .await;
        let (reply_tx, reply_rx) = oneshot::channel();
        let stopped_early = || SessionError::Internal("aggregator stopped early".into());
        self.ctl_tx
            .send(Ctl::Finish {
                meta,
                stop_reason,
                reply: reply_tx,
            })
            .await
            .map_err(|_| stopped_early())?;
        let answer = reply_rx.await.map_err(|_| stopped_early())?;
        let read = self.stats.read.load(std::sync::atomic::Ordering::Relaxed);
        tracing::debug!(read, submitted = submitted.total(), "records");
        Ok(answer)
    }
}

/// The JSON report to its file; the capture file's fate said.
fn write(
    opts: &CaptureOptions,
    out_file: Option<&mut File>,
    report: &Report,
    journaled: Option<&Journaled>,
) -> Result<(), SessionError> {
    if let (Some(f), Some(p)) = (out_file, &opts.output) {
        let json = output::json::to_string_pretty(report);
        f.write_all(json.as_bytes())
            .and_then(|_| f.write_all(b"\n"))
            .and_then(|_| f.flush())
            .map_err(|source| SessionError::Output {
                path: p.display().to_string(),
                source,
            })?;
        console::say(format_args!("report written to {}", p.display()));
    }
    if let Some(j) = journaled {
        if let Some(e) = &j.failure {
            return Err(SessionError::Output {
                path: j.path.display().to_string(),
                source: std::io::Error::other(format!(
                    "{e}; the file holds what was written before that"
                )),
            });
        }
        console::say(format_args!(
            "capture written to {} ({} records in {} frames); `gpuprofd report {}` shows it \
             again",
            j.path.display(),
            j.records,
            j.frames,
            j.path.display()
        ));
    }
    Ok(())
}

/// Releases the probes (the kernel takes a while for each perf-event uprobe).
fn detach(probes: Probes) {
    let Probes {
        ebpf, mut attacher, ..
    } = probes;
    attacher.release_links();
    let links = attacher.link_count();
    if links > 0 {
        console::say(format_args!(
            "detaching {links} probes (the kernel takes about 0.1 s for each)"
        ));
    }
    let t = Instant::now();
    drop(ebpf);
    tracing::debug!(
        links,
        elapsed_ms = t.elapsed().as_millis() as u64,
        "probes detached"
    );
}
