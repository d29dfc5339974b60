//! What the aggregator task knows about processes besides their counters: which it has seen,
//! which ended, whether a record comes from a new process that was given an old pid; and the
//! first sight of a process (procfs read while it is still there).

use super::driver_names;
use super::taps::{SETTLE_ALL, Taps};
use crate::capture::Batch;
use crate::enrich::driver_objects::DriverObjects;
use crate::enrich::process::{ProcSymbols, read_proc_info};
use crate::model::{Aggregator, ProcessMeta};
use crate::store::{Frame, StoredProcess};
use profiler_common::decode::{DecodeError, Event, decode};
use std::collections::HashSet;
use std::sync::Arc;
use tokio::sync::mpsc;

/// What the aggregator tells the session's run loop about processes.
pub(crate) enum Sighting {
    /// A process mapped a file executable (`tgid`, address, length): maybe a CUDA library.
    Map(u32, u64, u64),
    /// A process made its first recorded CUDA call.
    New(u32),
    /// A selected process replaced its image (`exec`): probes tied to its main thread may
    /// need making again.
    Exec,
    /// A process ended and was dropped from the model (service mode): what the session keeps
    /// about it goes too.
    Gone(u32),
}

pub(crate) struct Seen {
    /// Processes that produced records (first sight done).
    pub known: HashSet<u32>,
    /// Known processes whose end the kernel reported (their tgid may come back, reused).
    ended: HashSet<u32>,
    /// The kernel reports a process's end when its last thread exits: nothing of the old
    /// process follows its end in the ring, so any later record is a new process's.
    exit_final: bool,
    pub symbols: Arc<ProcSymbols>,
    /// Executable file mappings, for the session to look for new CUDA libraries.
    maps_tx: mpsc::UnboundedSender<Sighting>,
    /// The probes' launch mode, when launches are counted in the kernel (service mode): a
    /// record per launch while a deep capture runs.
    launch_mode: Option<crate::capture::counted::LaunchMode>,
    /// Names of handles made before the attach, read from the driver's objects.
    driver: DriverObjects,
    /// The launch probes' duty cycle (held attached while a deep capture runs).
    pub duty: Option<(String, crate::attach::duty::DutyControl)>,
}

impl Seen {
    pub fn new(
        exit_final: bool,
        symbols: Arc<ProcSymbols>,
        maps_tx: mpsc::UnboundedSender<Sighting>,
        launch_mode: Option<crate::capture::counted::LaunchMode>,
        remembered: crate::enrich::driver_objects::remembered::Remembered,
    ) -> Seen {
        Seen {
            known: HashSet::new(),
            ended: HashSet::new(),
            exit_final,
            symbols,
            maps_tx,
            launch_mode,
            driver: DriverObjects::live(remembered),
            duty: None,
        }
    }

    /// Whether launches are counted in the kernel (at least while no deep capture runs).
    pub fn counts_launches(&self) -> bool {
        self.launch_mode.is_some()
    }

    /// The launch probes run under `cycle`; `control` holds them attached for deep captures.
    pub fn set_duty(&mut self, cycle: String, control: crate::attach::duty::DutyControl) {
        self.duty = Some((cycle, control));
    }

    /// Applies a batch of raw records: decoded, each handed to the taps and the aggregator.
    pub fn apply_batch(&mut self, agg: &mut Aggregator, taps: &mut Taps, batch: &Batch) {
        for rec in batch.iter() {
            match decode(rec) {
                Ok(Event::Map(h, m)) => {
                    // Discovery only, handed to the session: not a sign of CUDA use, so no procfs
                    // reads here for the thousands of short-lived processes a busy node runs.
                    let _ = self.maps_tx.send(Sighting::Map(h.tgid, m.addr, m.len));
                }
                Ok(ev @ Event::Window(..)) => {
                    // The node's duty-cycle window: no process's, closes every one's.
                    taps.record(rec, Some(&ev), agg);
                    agg.apply(&ev);
                }
                Ok(ev @ Event::Exit(..)) => self.exit(agg, taps, rec, &ev),
                Ok(ev @ Event::Exec(..)) => self.exec(agg, taps, rec, &ev),
                Ok(ev) => self.call(agg, taps, rec, &ev),
                Err(e) => {
                    taps.record(rec, None, agg);
                    match e {
                        DecodeError::UnknownKind { kind }
                        | DecodeError::WrongLength { kind, .. } => agg.record_decode_error(kind),
                        DecodeError::Short { .. } => agg.record_decode_error(0),
                    }
                }
            }
        }
        driver_names::record(&mut self.driver, agg, taps);
        // Native names found while the batch was applied, of any process.
        taps.names_out(agg, None);
    }

    /// A known process ended (its last thread exited).
    fn exit(&mut self, agg: &mut Aggregator, taps: &mut Taps, rec: &[u8], ev: &Event) {
        let tgid = ev.header().tgid;
        if !self.known.contains(&tgid) {
            return;
        }
        self.ended.insert(tgid);
        // A process gone before its first sight is owned by the uid its end record carries
        // (the kernel's word).
        if let Event::Exit(_, x) = ev
            && x.uid != profiler_common::UID_UNKNOWN
        {
            agg.set_owner_if_unknown(tgid, x.uid);
        }
        taps.record(rec, Some(ev), agg);
        agg.apply(ev);
        self.driver.forget(tgid);
    }

    /// The process runs another program from now on: what it did is the old program's, and
    /// its next record starts the new one (read afresh).
    fn exec(&mut self, agg: &mut Aggregator, taps: &mut Taps, rec: &[u8], ev: &Event) {
        let h = ev.header();
        let tgid = h.tgid;
        let _ = self.maps_tx.send(Sighting::Exec);
        if !self.known.contains(&tgid) || self.ended.contains(&tgid) {
            return;
        }
        taps.names_out(agg, Some(tgid));
        let renamed = agg.exec(tgid, h.ts_ns);
        taps.record(rec, Some(ev), agg);
        if let Some(meta) = &renamed {
            let process = StoredProcess::from(meta);
            taps.frame_for(tgid, &Frame::Process { tgid, process });
        }
        taps.retire(tgid);
        self.symbols.forget(tgid);
        self.driver.forget(tgid);
        self.known.remove(&tgid);
        let _ = self.maps_tx.send(Sighting::Gone(tgid));
    }

    /// A batch with launch calls of threads the process's map lacks (started after it was
    /// read): read the map again, so that they join.
    fn remap_tids(
        &mut self,
        agg: &mut Aggregator,
        taps: &mut Taps,
        tgid: u32,
        b: &profiler_common::gpu::GpuActivityBody,
    ) {
        use crate::model::gpu_join::Tids;
        let Tids::Map(m) = agg.tids(tgid) else {
            return;
        };
        let unknown = b.in_use().iter().any(|a| {
            a.kind == profiler_common::gpu::activity::API && !m.contains_key(&(a.bytes as u32))
        });
        if !unknown {
            return;
        }
        let tids = crate::enrich::nspid::of_process(tgid);
        if matches!(tids, Tids::Map(_)) {
            set_tids(agg, taps, tgid, tids);
        }
    }

    /// A call's record (or a stack, a name): a new process's first is its first sight.
    fn call(&mut self, agg: &mut Aggregator, taps: &mut Taps, rec: &[u8], ev: &Event) {
        let tgid = ev.header().tgid;
        // After its process ended, a tgid's records belong to a new process that was given
        // the same pid. Where the end was taken at the group leader's exit (older kernels),
        // they may also be stragglers of the old process's last threads: the start time tells
        // them apart.
        if self.ended.contains(&tgid) {
            let reused = self.exit_final || {
                let now = crate::enrich::process::start_time(tgid);
                now.is_some_and(|st| st != agg.start_time(tgid))
            };
            if reused {
                taps.names_out(agg, Some(tgid));
                taps.retire(tgid);
                agg.retire(tgid);
                self.symbols.forget(tgid);
                self.driver.forget(tgid);
                self.known.remove(&tgid);
                self.ended.remove(&tgid);
            }
        }
        if self.known.insert(tgid) {
            let _ = self.maps_tx.send(Sighting::New(tgid));
            let owner = crate::enrich::process::process_uid(tgid);
            let read_at = crate::sys::clock::monotonic_ns();
            let mut meta = first_sight(tgid, ev.header().ts_ns, &self.symbols);
            // Who may see it through the control socket (real uid at first sight, else the
            // uid its end record carries).
            meta.owner = owner.filter(|_| !meta.exited);
            let process = StoredProcess::from(&meta);
            taps.frame_for(tgid, &Frame::Process { tgid, process });
            if let Some(env) = meta.gpu_env.clone() {
                taps.frame_for(tgid, &Frame::GpuEnv { tgid, env });
            }
            let tids = if meta.exited {
                crate::model::gpu_join::Tids::Unknown
            } else {
                crate::enrich::nspid::of_process(tgid)
            };
            set_tids(agg, taps, tgid, tids);
            agg.set_process_meta_read_at(tgid, meta, read_at);
        }
        if let Event::GpuActivity(_, b) = ev {
            self.remap_tids(agg, taps, tgid, b);
        }
        if let Event::Stack(_, st) = ev {
            // Names while the process is there: a capture gets its Python names before the
            // stack that needs them, native ones as they are found.
            agg.stacks_mut().prepare(tgid, st);
            taps.names_out(agg, None);
        }
        taps.record(rec, Some(ev), agg);
        agg.apply(ev);
        driver_names::observe(&mut self.driver, agg, ev);
    }

    /// Sets the probes' launch mode for the deep captures running (or `starting` one): a
    /// record per launch while any runs, counting otherwise.
    pub fn follow_deep(&mut self, taps: &Taps, starting: bool) {
        let Some(m) = self.launch_mode.as_mut() else {
            return;
        };
        let counting = !starting && taps.deep.is_empty();
        if let Some((_, control)) = &self.duty
            && !control.hold_now(!counting, std::time::Duration::from_millis(500))
            && !counting
        {
            tracing::warn!(
                "the launch probes were not attached within 0.5 s of a deep capture's start"
            );
        }
        if m.counting() != counting
            && let Err(e) = m.set(counting)
        {
            tracing::error!(error = %e, counting, "cannot switch the probes' launch mode");
        }
    }

    /// `tgid`'s process was dropped from the model (service mode): its next record, if its pid
    /// is reused, is a new process's.
    pub fn forget(&mut self, taps: &mut Taps, tgid: u32) {
        taps.retire(tgid);
        self.known.remove(&tgid);
        self.ended.remove(&tgid);
        self.symbols.forget(tgid);
        self.driver.forget(tgid);
        let _ = self.maps_tx.send(Sighting::Gone(tgid));
    }

    /// Known processes that are gone now are marked exited (once each).
    pub fn mark_gone(&mut self, agg: &mut Aggregator, taps: &mut Taps) {
        for tgid in self.known.iter().copied() {
            if !agg.is_exited(tgid) && !crate::discovery::process_exists(tgid) {
                taps.frame_for(tgid, &Frame::Exited { tgid });
                agg.mark_exited(tgid);
            }
        }
    }

    /// At the end: a live process's job is its cgroup now (it may have been moved into its
    /// job's cgroup after its first CUDA call); then every name the stacks need.
    pub fn settle_jobs(&mut self, agg: &mut Aggregator, taps: &mut Taps) {
        self.mark_gone(agg, taps);
        for tgid in self.known.iter().copied() {
            if agg.is_exited(tgid) {
                continue;
            }
            if let Some(job) = crate::enrich::jobs::job_of(tgid) {
                taps.frame_for(
                    tgid,
                    &Frame::Job {
                        tgid,
                        job: (&job).into(),
                    },
                );
                agg.set_job(tgid, job);
            }
        }
        taps.names_out(agg, Some(SETTLE_ALL));
    }
}

/// `tgid`'s thread-id map (CUPTI's ids → the kernel's), into the capture file before the
/// model, so a replay joins the same way.
fn set_tids(agg: &mut Aggregator, taps: &mut Taps, tgid: u32, tids: crate::model::gpu_join::Tids) {
    taps.frame_for(
        tgid,
        &Frame::Tids {
            tgid,
            tids: tids.clone(),
        },
    );
    agg.set_tids(tgid, tids);
}

/// A process produced its first record (made at `ts_ns`): remember who it is while it is still
/// there. A short-lived process may be gone by now and its pid given to a later process; what
/// procfs shows then is not this process, and nothing is read from it.
fn first_sight(tgid: u32, ts_ns: u64, symbols: &ProcSymbols) -> ProcessMeta {
    use crate::enrich::process::{read_stat, started_after};
    let start = read_stat(tgid)
        .map(|s| s.start_time)
        .filter(|&st| !started_after(st, ts_ns));
    let info = start.and_then(|_| read_proc_info(tgid));
    match (start, info) {
        (Some(start_time), Some(i)) => {
            symbols.remember(tgid);
            ProcessMeta {
                comm: i.comm,
                cmdline: i.cmdline,
                exited: false,
                job: crate::enrich::jobs::job_of(tgid),
                start_time,
                owner: None,
                gpu_env: crate::enrich::gpu_env::of_process(tgid),
            }
        }
        _ => ProcessMeta {
            comm: crate::model::EXITED_COMM.into(),
            cmdline: String::new(),
            exited: true,
            job: None,
            start_time: 0,
            owner: None,
            gpu_env: None,
        },
    }
}
