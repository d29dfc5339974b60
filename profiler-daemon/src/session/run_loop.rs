//! The session's run loop: waits for whatever ends the capture (a signal, the duration, the
//! command's exit, the process's exit; a signal that comes while a wrapped command runs is passed
//! on to it, and its end ends the capture) and does the chores in between — new CUDA libraries
//! from the kernel's mmap reports and /proc rescans, new cgroups of the selected jobs, NVML
//! samples to the aggregator, the once-a-second tick.

use super::aggregator::Ctl;
use super::queries::{Gauges, Queries};
use super::seen::Sighting;
use super::setup::Probes;
use super::{CaptureOptions, Companion, SessionError, Target};
use crate::capture::{self, ReaderStats};
use crate::enrich::process::ProcSymbols;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// How often the allocator gives free memory back to the kernel (see [`crate::sys::heap::trim`]).
const TRIM_EVERY: Duration = Duration::from_secs(10);

/// What ends a capture besides the run loop's own checks.
pub(super) struct Ends {
    pub sigint: tokio::signal::unix::Signal,
    pub sigterm: tokio::signal::unix::Signal,
    pub command: Option<super::command::Wrapped>,
    pub deadline: Option<tokio::time::Instant>,
}

pub(super) struct RunLoop<'a> {
    pub opts: &'a CaptureOptions,
    pub probes: &'a mut Probes,
    pub companion: &'a mut dyn Companion,
    pub ctl_tx: &'a mpsc::Sender<Ctl>,
    pub maps_rx: mpsc::UnboundedReceiver<Sighting>,
    pub nvml_rx: Option<mpsc::Receiver<crate::nvml::Message>>,
    pub gauges: Arc<Gauges>,
    pub stats: Arc<ReaderStats>,
    pub queries: Queries,
    pub symbols: Arc<ProcSymbols>,
}

impl RunLoop<'_> {
    /// Runs until the capture ends; why it ended.
    pub async fn run(&mut self, ends: &mut Ends) -> Result<String, SessionError> {
        let mut watchdog = self.companion.alive_every().map(tokio::time::interval);
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.tick().await;
        let mut last_tick = Instant::now();
        let mut last_trim = Instant::now();
        let mut last_rescan = Instant::now();
        loop {
            let deadline = async {
                match ends.deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            let child_exit = async {
                match ends.command.as_mut() {
                    Some(c) if c.status.is_none() => c.wait().await,
                    _ => std::future::pending().await,
                }
            };
            let alive = async {
                match watchdog.as_mut() {
                    Some(w) => w.tick().await,
                    None => std::future::pending().await,
                }
            };
            let nvml = async {
                match self.nvml_rx.as_mut() {
                    Some(r) => r.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = ends.sigint.recv() => {
                    if !ends.command.as_ref().is_some_and(|c| c.forward(libc::SIGINT)) {
                        return Ok("interrupted".into());
                    }
                }
                _ = ends.sigterm.recv() => {
                    if !ends.command.as_ref().is_some_and(|c| c.forward(libc::SIGTERM)) {
                        return Ok("terminated".into());
                    }
                }
                _ = alive => self.companion.alive(),
                _ = deadline => return Ok("duration reached".into()),
                st = child_exit => {
                    let st = st.map(super::command::describe).unwrap_or_default();
                    return Ok(format!("command exited ({st})"));
                }
                Some(m) = nvml => self.nvml(m).await,
                Some(first) = self.maps_rx.recv() => self.mappings(first).await?,
                _ = tick.tick() => {
                    let interval = last_tick.elapsed();
                    last_tick = Instant::now();
                    if last_trim.elapsed() >= TRIM_EVERY {
                        last_trim = Instant::now();
                        crate::sys::heap::trim();
                    }
                    if let Some(why) = self.tick(interval, &mut last_rescan).await? {
                        return Ok(why);
                    }
                }
            }
        }
    }

    /// An NVML sample (or the sampler's end) for the aggregator.
    async fn nvml(&mut self, m: crate::nvml::Message) {
        if let crate::nvml::Message::Stopped(why) = &m {
            super::console::warn(why);
            self.nvml_rx = None;
        }
        let _ = self.ctl_tx.send(Ctl::Nvml(Some(m))).await;
    }

    /// Processes mapped files, made their first call, or were dropped. Most mappings are not
    /// CUDA (every process start maps its libc): the mapped file's name is one readlink of
    /// /proc/PID/map_files away; only a CUDA-looking one (or one that cannot be read) costs a
    /// scan of that process's maps, once per burst.
    async fn mappings(&mut self, first: Sighting) -> Result<(), SessionError> {
        let stack_period = self.opts.stack_period;
        let mut tgids = HashSet::new();
        let mut one = Some(first);
        while let Some(s) = one.take().or_else(|| self.maps_rx.try_recv().ok()) {
            let (t, addr, len) = match s {
                Sighting::Map(t, addr, len) => (t, addr, len),
                Sighting::New(t) => {
                    self.probes
                        .python
                        .seen(&mut self.probes.ebpf, t, stack_period);
                    continue;
                }
                Sighting::Exec => {
                    self.revive();
                    continue;
                }
                Sighting::Gone(t) => {
                    self.probes.python.forget(t);
                    self.probes.scanner.forget(t);
                    continue;
                }
            };
            if matches!(self.opts.target, Target::Pid(p) if p != t) || tgids.contains(&t) {
                continue;
            }
            if self.probes.scanner.mapping_may_be_cuda(t, addr, len) {
                tgids.insert(t);
            }
        }
        for &t in &tgids {
            // Its files, while it runs: the stacks of a process that ends before its records
            // are read are still named from this.
            self.symbols.remember(t);
            self.probes
                .python
                .seen(&mut self.probes.ebpf, t, stack_period);
        }
        let mut new = Vec::new();
        for t in tgids {
            new.extend(self.probes.scanner.scan_process(t));
        }
        self.attach(new).await;
        Ok(())
    }

    /// New probes for a selected process whose probes the kernel let go (see
    /// [`crate::attach::Attacher::revive`]).
    fn revive(&mut self) {
        for t in self.probes.attacher.revive() {
            super::console::warn(format_args!(
                "process {t} ran exec from a thread other than its main one, which ends the \
                 kernel's hold of its probes: probes made again; calls its new program made \
                 before now are missing"
            ));
        }
    }

    /// Attaches libraries found while running; the aggregator hears of the API table's growth.
    async fn attach(&mut self, found: Vec<crate::discovery::CudaLibrary>) {
        let waiting = self.probes.attacher.libraries().next().is_none();
        if self.probes.attach_new(found, self.opts.verbose) {
            if waiting {
                // The end of the wait the ready line announced.
                let first = self.probes.attacher.library_list();
                super::console::say(format_args!(
                    "attached: {} probes on {}; capturing",
                    self.probes.probe_count(),
                    first
                        .iter()
                        .map(|l| l.path.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            let api = self.probes.attacher.api().clone();
            let libs = self.probes.attacher.library_list();
            let _ = self.ctl_tx.send(Ctl::Api(api, libs)).await;
        }
    }

    /// The once-a-second chores; why the capture ends, when the process it follows is gone.
    async fn tick(
        &mut self,
        interval: Duration,
        last_rescan: &mut Instant,
    ) -> Result<Option<String>, SessionError> {
        let asks = self.companion.asks();
        if asks {
            self.refresh_gauges();
        }
        if let Target::Pid(p) = self.opts.target
            && !crate::discovery::process_exists(p)
        {
            return Ok(Some(format!("process {p} exited")));
        }
        // (Also here: an exec record lost to a full ring must not leave the process unprobed.)
        self.revive();
        self.probes.attacher.end_learning();
        if let Some(r) = self.companion.rescan_every() {
            self.probes.rescan_every = r;
        }
        let every = self.probes.rescan_every;
        let rescan = !every.is_zero() && last_rescan.elapsed() >= every;
        if rescan {
            *last_rescan = Instant::now();
        }
        let new = match self.opts.target {
            _ if !rescan => Vec::new(),
            Target::Pid(p) => self.probes.scanner.scan_process(p),
            Target::AllJobs => self.probes.scanner.scan_all(),
            // The command's tree as the kernel's filter holds it now.
            Target::Command => capture::selected_tgids(&mut self.probes.ebpf)?
                .into_iter()
                .flat_map(|t| self.probes.scanner.scan_process(t))
                .collect(),
        };
        if rescan {
            // Processes the rescan found (the kernel's mmap reports missed or unavailable).
            let p = &mut *self.probes;
            p.python
                .seen_cuda(&mut p.ebpf, &p.scanner, self.opts.stack_period);
        }
        self.attach(new).await;
        let fresh = self.probes.selection.refresh();
        if !fresh.is_empty() {
            let ids: Vec<u64> = fresh.iter().map(|c| c.id).collect();
            capture::add_cgroups(&mut self.probes.ebpf, &ids)?;
        }
        let drops = match asks {
            true => self.queries.meta().map(|m| m.drops).unwrap_or_default(),
            false => BTreeMap::new(),
        };
        let forget_after = self.companion.forget_after();
        let _ = self
            .ctl_tx
            .send(Ctl::Tick {
                interval,
                drops,
                forget_after,
            })
            .await;
        Ok(None)
    }

    /// The loss counters, probe count and maps' fill the questioners read.
    fn refresh_gauges(&self) {
        let ebpf = &self.probes.ebpf;
        if let (Ok(d), Ok(s)) = (
            capture::read_counts(ebpf, profiler_common::maps::DROPS),
            capture::read_counts(ebpf, profiler_common::maps::SUBMITTED),
        ) && let Ok(mut c) = self.gauges.counters.lock()
        {
            *c = (d, s);
        }
        if let Ok(f) = capture::read_faults(ebpf)
            && let Ok(mut c) = self.gauges.faults.lock()
        {
            *c = f;
        }
        self.gauges
            .probes
            .store(self.probes.probe_count() as u64, Ordering::Relaxed);
        let now = capture::fill(ebpf, &self.stats, self.opts.count_launches.is_some());
        if let Ok(mut f) = self.gauges.fill.lock() {
            *f = now;
        }
    }
}

/// After the capture stopped: waits for a wrapped command that still runs (the capture ended
/// at its `--duration`, or failed), passing on the signals gpuprofd gets; its exit status.
pub(super) async fn finish_command(ends: &mut Ends) -> Option<std::process::ExitStatus> {
    let c = ends.command.as_mut()?;
    if c.status.is_none() {
        super::console::say(format_args!(
            "capture ended; waiting for the command to end"
        ));
    }
    while c.status.is_none() {
        tokio::select! {
            st = c.wait() => if st.is_none() { break },
            _ = ends.sigint.recv() => { c.forward(libc::SIGINT); }
            _ = ends.sigterm.recv() => { c.forward(libc::SIGTERM); }
        }
    }
    c.status
}
