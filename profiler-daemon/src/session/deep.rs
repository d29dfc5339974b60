//! Deep captures on demand (`gpuprofd ctl capture`): a capture file of one process or job for a
//! while, cut out of the service's event stream and streamed to the client that asked for it,
//! which writes it with its own ownership.
//!
//! A deep capture starts mid-run, so the names a process gave its kernels before the start are
//! written into it first (as the name and alias records the probes would have sent), then every
//! record of the process from then on. It ends when its duration is over, when its process
//! ends, when the client stops it (closes its half of the connection), or when the daemon stops
//! — always with an end frame, so `gpuprofd report` reads it as complete.

use super::taps::RecordTap;
use crate::api::LibraryReport;
use crate::enrich::stacks::StackSym;
use crate::model::Aggregator;
use crate::store::{self, Frame, Writer};
use profiler_common::decode::Event;
use profiler_common::{AliasBody, Header, NAME_CAP, NameBody, Record, decode::encode, kind};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Who asked for a deep capture (the control socket decides, from the peer's credentials).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Root or a member of `control.group`.
    Admin,
    /// Any other user: their own processes only.
    User(u32),
}

/// What a deep capture takes in.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    Pid(u32),
    /// A job as `--job` names it: id (Slurm job, pod UID, unit), `kind:id`, or a name.
    Job(String),
}

impl Target {
    pub fn describe(&self) -> String {
        match self {
            Target::Pid(p) => format!("process {p}"),
            Target::Job(j) => format!("job {j}"),
        }
    }
}

/// Chunks of the capture on their way to the client. Bounded: a client that stops reading
/// ends its capture (the writer fails) instead of growing the daemon: at most
/// `CHUNKS * CHUNK_BYTES` (16 MiB) wait for one client.
pub const CHUNKS: usize = 64;
/// Deep captures running at once, all users.
pub const MAX_DEEP: usize = 8;
/// ...of which users other than admins may hold this many (so admins always have room)...
pub const MAX_DEEP_USERS: usize = 6;
/// ...and one user this many.
pub const MAX_DEEP_PER_USER: usize = 2;

/// A chunk goes out when it is this big, or at the next tick (every second).
const CHUNK_BYTES: usize = 256 << 10;

/// The writer's sink: every flush hands its bytes to the connection task.
pub struct ChannelSink {
    buf: Vec<u8>,
    tx: mpsc::Sender<Vec<u8>>,
}

impl ChannelSink {
    pub fn new(tx: mpsc::Sender<Vec<u8>>) -> ChannelSink {
        ChannelSink {
            buf: Vec::new(),
            tx,
        }
    }
}

impl Write for ChannelSink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(b);
        if self.buf.len() >= CHUNK_BYTES {
            self.flush()?;
        }
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::take(&mut self.buf);
        self.tx.try_send(chunk).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => std::io::Error::other(
                "the client is not reading the capture fast enough; it was ended",
            ),
            mpsc::error::TrySendError::Closed(_) => std::io::Error::other("the client went away"),
        })
    }
}

/// A deep capture asked for on the control socket, on its way to the aggregator.
pub struct Request {
    pub target: Target,
    pub duration: Duration,
    pub role: Role,
    pub sink: ChannelSink,
    /// Set when the client closes its sending half.
    pub stop: Arc<AtomicBool>,
}

pub struct DeepCapture {
    pub id: u64,
    pub target: Target,
    /// Who asked: a user's capture holds no other process's figures (NVML's included).
    pub role: Role,
    /// A pid target's start time when the capture was granted: a process that takes the pid
    /// later is not it.
    pid_start: Option<u64>,
    writer: Writer,
    until: Instant,
    /// Set by the connection when its client closes its sending half: stop now.
    stop: Arc<AtomicBool>,
    /// tgid → whether it belongs to this capture (decided at its first record here).
    matched: HashMap<u32, bool>,
    /// The pid's process ended (its exit record came).
    ended: bool,
    /// Ticks the pid has been missing from procfs (the fallback when no exit record comes).
    missing: u32,
    /// Whether a pid is in procfs now ([`crate::discovery::process_exists`]; tests stand in
    /// for it, their pids being made up).
    alive: fn(u32) -> bool,
    started: Instant,
    /// The capture's start on the records' clock (CLOCK_MONOTONIC, the file header's origin).
    from_ns: u64,
    drops_at_start: std::collections::BTreeMap<String, u64>,
}

impl DeepCapture {
    pub fn new(
        id: u64,
        req: Request,
        pid_start: Option<u64>,
        api: &[crate::api::ApiInfo],
        drops_at_start: std::collections::BTreeMap<String, u64>,
        host: String,
    ) -> DeepCapture {
        let Request {
            target,
            duration,
            sink,
            stop,
            role,
        } = req;
        let header = store::header_now(host, format!("deep capture of {}", target.describe()));
        let label = format!("(deep capture {id} of {})", target.describe());
        let from_ns = header.started_at_monotonic_ns;
        let mut writer = Writer::to_sink(Box::new(sink), Path::new(&label), header);
        writer.clock();
        writer.frame(&Frame::Api(api.to_vec()));
        DeepCapture {
            id,
            target,
            role,
            pid_start,
            writer,
            until: Instant::now() + duration,
            stop,
            matched: HashMap::new(),
            ended: false,
            missing: 0,
            alive: crate::discovery::process_exists,
            started: Instant::now(),
            from_ns,
            drops_at_start,
        }
    }

    /// Starts the capture's window at `ns` instead of its creation (tests).
    #[cfg(test)]
    pub fn from_ns(mut self, ns: u64) -> Self {
        self.from_ns = ns;
        self
    }

    /// Takes every pid for a live process (tests: their pids are made up, and whether a real
    /// process has one, say a kernel worker with pid 10, is up to the machine).
    #[cfg(test)]
    pub fn pids_alive(mut self) -> Self {
        self.alive = |_| true;
        self
    }

    /// Whether `tgid`'s records go into this capture; at a process's first one, what the
    /// capture must know of it first: who it is and the names it gave its kernels so far.
    pub fn wants(&mut self, tgid: u32, agg: &Aggregator) -> bool {
        if let Some(&m) = self.matched.get(&tgid) {
            return m;
        }
        let meta = agg.process_meta(tgid);
        let m = match &self.target {
            Target::Pid(p) if *p == tgid => {
                // A process whose start time is unknown (gone before procfs was read) is
                // not taken for the one asked for: it may be another user's that got the pid.
                let same = match (self.pid_start, meta.map(|m| m.start_time)) {
                    (Some(want), Some(st)) => st == want,
                    (Some(_), None) => false,
                    (None, _) => true,
                };
                if !same {
                    // Its pid went to another process: the capture is over.
                    self.ended = true;
                }
                same
            }
            Target::Pid(_) => false,
            Target::Job(want) => meta.and_then(|m| m.job.as_ref()).is_some_and(|j| {
                &j.id == want || &j.key() == want || j.name.as_ref() == Some(want)
            }),
        };
        self.matched.insert(tgid, m);
        if m {
            if let Some(meta) = meta {
                self.writer.frame(&Frame::Process {
                    tgid,
                    process: store::StoredProcess::from(meta),
                });
                if let Some(env) = meta.gpu_env.clone() {
                    self.writer.frame(&Frame::GpuEnv { tgid, env });
                }
                let tids = agg.tids(tgid);
                self.writer.frame(&Frame::Tids { tgid, tids });
            }
            if let Some(names) = agg.names(tgid) {
                for rec in name_records(tgid, names) {
                    self.writer.record(&rec);
                }
            }
        }
        m
    }

    /// A record of the process. The capture is of what happened from its start: a call made
    /// before it is left out even when its record arrives after it (the reader hands records
    /// over in batches, and one can still be on its way when the capture is granted). Name and
    /// alias records are kept whenever they were made: they name the calls that follow.
    pub fn keep(&mut self, tgid: u32, rec: &[u8], exit: bool) {
        if made_before(rec, self.from_ns) {
            return;
        }
        self.writer.record(rec);
        if exit && self.target == Target::Pid(tgid) {
            self.ended = true;
        }
    }

    /// The process behind `tgid` changed (pid reuse): the new one is judged afresh, and a
    /// capture of that pid is over.
    pub fn retire(&mut self, tgid: u32) {
        if self.target == Target::Pid(tgid) {
            self.ended = true;
        }
        if self.matched.remove(&tgid) == Some(true) {
            self.writer.frame(&Frame::Retire { tgid });
        }
    }

    /// A frame for every capture; a user's gets NVML's per-process figures of its own
    /// processes only.
    pub fn frame(&mut self, f: &Frame) {
        match (f, self.role) {
            (Frame::Nvml(s), Role::User(_)) => {
                let mut mine = s.clone();
                let mut others = std::collections::BTreeSet::new();
                mine.processes.retain(|p| {
                    let keep = self.matched.get(&p.pid) == Some(&true);
                    if !keep {
                        others.insert(p.device);
                    }
                    keep
                });
                // Other users' processes leave, but each GPU they were on keeps one entry of
                // pid 0 ("someone else", never a real process): GPM's figures of a GPU shared
                // with them must not become this user's job's at replay.
                mine.processes.extend(others.into_iter().map(|device| {
                    crate::nvml::ProcessSample {
                        device,
                        pid: 0,
                        used_bytes: None,
                        sm_util: None,
                        mem_util: None,
                    }
                }));
                self.writer.frame(&Frame::Nvml(mine));
            }
            // Where other users' processes run is theirs: only the user's own placements.
            (Frame::NvmlMig(round), Role::User(_)) => {
                let mut mine = round.clone();
                mine.placements
                    .retain(|m| self.matched.get(&m.pid) == Some(&true));
                self.writer.frame(&Frame::NvmlMig(mine));
            }
            (Frame::Libraries(v), Role::User(_)) => {
                let mut v = v.clone();
                v.iter_mut().for_each(LibraryReport::without_directory);
                self.writer.frame(&Frame::Libraries(v));
            }
            _ => self.writer.frame(f),
        }
    }

    /// A frame about `tgid`, if its process is in this capture.
    pub fn frame_for(&mut self, tgid: u32, f: &Frame) {
        if self.matched.get(&tgid) == Some(&true) {
            self.writer.frame(f);
        }
    }

    /// Called every tick: flushes; says why the capture is over, if it is.
    pub fn tick(&mut self) -> Option<String> {
        self.writer.flush();
        if let Some(e) = self.writer.failure() {
            return Some(e.to_string());
        }
        if let Target::Pid(p) = self.target {
            self.missing = if (self.alive)(p) { 0 } else { self.missing + 1 };
        }
        // Two ticks without the process: its last records have been read by now.
        if self.ended || self.missing >= 2 {
            return Some(format!("{} ended", self.target.describe()));
        }
        if self.stop.load(Ordering::Relaxed) {
            return Some("stopped by the client".into());
        }
        (Instant::now() >= self.until).then(|| "duration reached".into())
    }

    /// The end frame, the last bytes out; the client's connection then closes. `drops`: the
    /// daemon's loss counters now (the capture's own are what they grew by meanwhile).
    pub fn finish(mut self, reason: &str, drops: &std::collections::BTreeMap<String, u64>) {
        let lost = drops
            .iter()
            .map(|(k, v)| {
                let before = self.drops_at_start.get(k).copied().unwrap_or(0);
                (k.clone(), v.saturating_sub(before))
            })
            .collect();
        self.writer.clock();
        self.writer.frame(&Frame::End(store::End {
            duration_ns: self.started.elapsed().as_nanos() as u64,
            drops: lost,
            submitted: Default::default(),
            stop_reason: reason.to_string(),
        }));
        self.writer.flush();
        tracing::info!(
            id = self.id,
            target = %self.target.describe(),
            records = self.writer.records,
            reason,
            "deep capture finished"
        );
    }
}

/// Why a deep capture was not started (the control socket sends the text to the client).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("the daemon is stopping")]
    Stopping,
    #[error("{0} deep captures are running already; wait for one to end")]
    Busy(usize),
    #[error("you have {MAX_DEEP_PER_USER} deep captures running already; wait for one to end")]
    YoursBusy,
    #[error(
        "capturing a whole job is for root and members of control.group (a job may hold other \
         users' processes; you are uid {0}); capture one of your processes with --pid"
    )]
    JobForAdmins(u32),
    #[error("no process with PID {0} is running (check with `ps -p {0}`)")]
    NoSuchProcess(u32),
    #[error(
        "process {pid} is not yours (you are uid {uid}); you may capture only your own processes"
    )]
    NotYours { pid: u32, uid: u32 },
}

/// Whether `role` may start a deep capture of `target` while `running` run; else why not.
/// `Some(start time)` for a pid target.
pub fn may_start(
    running: &[DeepCapture],
    target: &Target,
    role: Role,
) -> Result<Option<u64>, Refused> {
    let users: Vec<u32> = running
        .iter()
        .filter_map(|d| match d.role {
            Role::User(u) => Some(u),
            Role::Admin => None,
        })
        .collect();
    if running.len() >= MAX_DEEP {
        return Err(Refused::Busy(MAX_DEEP));
    }
    if let Role::User(uid) = role {
        if users.iter().filter(|&&u| u == uid).count() >= MAX_DEEP_PER_USER {
            return Err(Refused::YoursBusy);
        }
        if users.len() >= MAX_DEEP_USERS {
            return Err(Refused::Busy(users.len()));
        }
    }
    let p = match (target, role) {
        (Target::Job(_), Role::User(uid)) => return Err(Refused::JobForAdmins(uid)),
        (Target::Job(_), Role::Admin) => return Ok(None),
        (Target::Pid(p), _) => *p,
    };
    // The process is named by pid and start time: the owner read between two reads of the
    // start time belongs to that process, not to one that took its pid meanwhile.
    let start = crate::enrich::process::start_time(p).ok_or(Refused::NoSuchProcess(p))?;
    if let Role::User(uid) = role {
        let owner = crate::enrich::process::process_uid(p);
        if crate::enrich::process::start_time(p) != Some(start) {
            return Err(Refused::NoSuchProcess(p));
        }
        if owner != Some(uid) {
            return Err(Refused::NotYours { pid: p, uid });
        }
    }
    Ok(Some(start))
}

/// A deep capture keeps its processes' records (not the counted launches: the probes record
/// every launch while one runs, see `follow_deep`), the facts about them, and the names their
/// stacks need, from the first record of each on.
impl RecordTap for DeepCapture {
    fn record(&mut self, rec: &[u8], ev: Option<&Event>, agg: &Aggregator) {
        let Some(ev) = ev else {
            return;
        };
        let exit = match ev {
            Event::Exit(..) => true,
            Event::Exec(..) | Event::Launches(..) | Event::Map(..) => return,
            _ => false,
        };
        let tgid = ev.header().tgid;
        if self.wants(tgid, agg) {
            self.keep(tgid, rec, exit);
        }
    }

    fn frame(&mut self, f: &Frame) {
        DeepCapture::frame(self, f);
    }

    fn frame_for(&mut self, tgid: u32, f: &Frame) {
        DeepCapture::frame_for(self, tgid, f);
    }

    fn names(&mut self, learned: &[StackSym], agg: &Aggregator) {
        let mut by_process: BTreeMap<u32, Vec<StackSym>> = BTreeMap::new();
        for s in learned {
            by_process.entry(s.tgid()).or_default().push(s.clone());
        }
        for (tgid, names) in by_process {
            if self.wants(tgid, agg) {
                self.frame_for(tgid, &Frame::StackSyms(names));
            }
        }
    }

    fn retire(&mut self, tgid: u32) {
        DeepCapture::retire(self, tgid);
    }
}

/// Whether `rec` is a call's record (a launch, copy, sync, allocation, graph launch or stack)
/// made before `from_ns`.
fn made_before(rec: &[u8], from_ns: u64) -> bool {
    crate::capture::peek(rec).is_some_and(|(k, _, ts)| {
        matches!(
            k,
            kind::LAUNCH | kind::COPY | kind::SYNC | kind::MEM | kind::GRAPH | kind::STACK
        ) && ts < from_ns
    })
}

/// The name and alias records that rebuild `names` for `tgid` in a reader.
fn name_records(tgid: u32, names: &crate::enrich::names::NameTable) -> Vec<Vec<u8>> {
    let header = |k| Header {
        kind: k,
        api: 0,
        tgid,
        tid: tgid,
        ts_ns: crate::sys::clock::monotonic_ns(),
    };
    let mut out = Vec::new();
    let mut entries: Vec<_> = names.entries().collect();
    entries.sort_by_key(|e| e.0);
    for (handle, e) in entries {
        let bytes = e.mangled.as_bytes();
        let n = bytes.len().min(NAME_CAP);
        let mut body = NameBody {
            handle,
            scope: 0,
            source: e.source.to_wire(),
            len: n as u32,
            flags: if e.truncated {
                profiler_common::flags::TRUNCATED
            } else {
                0
            },
            _pad: 0,
            name: [0; NAME_CAP],
        };
        body.name[..n].copy_from_slice(&bytes[..n]);
        out.push(
            encode(&Record {
                header: header(kind::NAME),
                body,
            })
            .to_vec(),
        );
    }
    let mut aliases: Vec<_> = names.aliases().collect();
    aliases.sort();
    for (from, to) in aliases {
        out.push(
            encode(&Record {
                header: header(kind::ALIAS),
                body: AliasBody { from, to },
            })
            .to_vec(),
        );
    }
    out
}

#[cfg(test)]
mod tests;
