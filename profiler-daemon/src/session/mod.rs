//! One capture session: check the target, load and attach, run the reader, the aggregator and
//! the run loop, and at the end drain the ring buffer and write the results — nothing captured
//! is lost.
//!
//! The ring-buffer reader (capture) runs on a thread of its own; the single-owner aggregator
//! (model) runs as a task ([`aggregator`]); the run loop ([`run_loop`]) keeps the eBPF object
//! (attach, counters) and the once-a-second chores. The capture file and deep captures are
//! taps ([`taps`]) the aggregator hands every record to. What runs beside a session and
//! answers for it (the service's control socket and systemd, the metrics server) is a
//! [`Companion`]: the session calls it and never names it.

mod aggregator;
pub mod command;
pub mod console;
pub mod deep;
mod driver_names;
mod python;
mod queries;
mod run_loop;
mod seen;
mod selection;
mod setup;
mod stop;
mod taps;

pub use queries::{Queries, SelfFigures};

use crate::capture::{self, Batch, CaptureError, ReaderStats};
use crate::enrich::process::ProcSymbols;
use crate::store;
use aggregator::Ctl;
use queries::Gauges;
use run_loop::{Ends, RunLoop};
use seen::{Seen, Sighting};
use setup::Probes;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// What to capture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    AllJobs,
    Pid(u32),
    /// The wrapped command's processes: it and every process it starts, at any depth.
    Command,
}

impl Target {
    /// Whether the libraries are searched for on the whole node before the start (`--all-jobs`,
    /// and a command's tree, whose libraries are not mapped yet and are mostly those other
    /// processes already use); else in the one process.
    fn scans_node(&self) -> bool {
        matches!(self, Target::AllJobs | Target::Command)
    }
}

#[derive(Clone, Debug)]
pub struct CaptureOptions {
    pub target: Target,
    pub wait: bool,
    pub duration: Option<Duration>,
    pub output: Option<PathBuf>,
    pub libs: Vec<PathBuf>,
    pub system_libs: bool,
    pub live: bool,
    pub ring_bytes: u32,
    /// A call stack every this many launches / blocking syncs / blocking copies per thread
    /// (0: none).
    pub stack_period: u32,
    /// Count launches in the kernel and read the counts this often (`None`: a record per
    /// launch). Never with a capture file.
    pub count_launches: Option<Duration>,
    /// One or two probes per runtime kernel launch (see [`crate::attach::LaunchTraps`]).
    pub launch_traps: crate::attach::LaunchTraps,
    /// Launch probes attached for a window of each period only (service mode; needs
    /// `count_launches`). `None`: attached all the time.
    pub launch_duty: Option<crate::attach::duty::DutyCycle>,
    pub verbose: bool,
    /// Run this command under the profiler; the session ends when it exits.
    pub command: Vec<String>,
    /// The injection library to load into the command, where it was looked for (`None`: not
    /// asked for: no command, or `--no-inject`).
    pub inject_lib: Option<crate::sys::inject_lib::Located>,
    pub command_stdin: Option<PathBuf>,
    /// Whom the command runs as (`None`: as gpuprofd runs).
    pub run_as: Option<crate::sys::account::Account>,
    /// `--cgroup`: only processes in these cgroups (with --all-jobs semantics otherwise).
    pub cgroups: Vec<String>,
    /// `--job`: only processes of these jobs (by their cgroups, found now and on every tick).
    pub jobs: Vec<String>,
    /// How often to rescan /proc for CUDA library files (`None`: 30 s with the kernel mmap
    /// watcher, 1 s without; zero: never).
    pub rescan: Option<Duration>,
    /// NVML sampling (`None`: off).
    pub nvml: Option<NvmlOptions>,
    /// The state directory: driver object layouts remembered across runs (`None`: no state,
    /// nothing read or written).
    pub state_dir: Option<PathBuf>,
}

/// The state directory when none is given: systemd's `$STATE_DIRECTORY` (its first path: the
/// unit's `StateDirectory=`), else `/var/lib/gpuprofd`.
pub fn default_state_dir(env: impl Fn(&str) -> Option<std::ffi::OsString>) -> PathBuf {
    env("STATE_DIRECTORY")
        .and_then(|v| {
            let first = v.to_str()?.split(':').next()?.to_owned();
            Path::new(&first)
                .is_absolute()
                .then(|| PathBuf::from(first))
        })
        .unwrap_or_else(|| PathBuf::from(crate::enrich::driver_objects::remembered::DEFAULT_DIR))
}

#[derive(Clone, Debug)]
pub struct NvmlOptions {
    /// The library to load (`None`: libnvidia-ml.so.1 through the dynamic linker).
    pub lib: Option<PathBuf>,
    pub interval: Duration,
}

/// Errors a user can act on; each maps to an exit code.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("no process with PID {0} is running (check with `ps -p {0}`)")]
    NoSuchProcess(u32),
    #[error(
        "process {pid} ({comm}) has not loaded CUDA: no libcuda.so.1 or libcudart.so.* in its \
         memory maps. Start gpuprofd with `--wait` to wait until it does, or pick the PID of the \
         process that runs the GPU work (`nvidia-smi` lists them)"
    )]
    NoCuda { pid: u32, comm: String },
    #[error("process {0} exited before it loaded CUDA; nothing was captured")]
    ExitedBeforeCuda(u32),
    #[error(
        "cannot write the report to \"{path}\": {source}. Choose a writable path with --output"
    )]
    Output {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "no CUDA library to attach to: none was given with --lib or found in the dynamic \
         linker's cache, and the libraries processes load cannot be found without following \
         /proc/PID/map_files (CAP_CHECKPOINT_RESTORE or CAP_SYS_ADMIN). Give the daemon one of \
         those capabilities, or point --lib at libcuda.so.1 / libcudart.so.* (files or \
         directories)"
    )]
    NothingToAttach,
    #[error(
        "cannot follow the command's processes: {0}. Give --all-jobs to capture every CUDA \
         process on the node until the command ends instead"
    )]
    FollowForks(#[source] crate::capture::WatchError),
    #[error("{source} (after the command ran: gpuprofd exits with its status, {})", command::describe(*status))]
    AfterCommand {
        status: ExitStatus,
        #[source]
        source: Box<SessionError>,
    },
    #[error("could not start \"{cmd}\": {source}")]
    Spawn {
        cmd: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Capture(#[from] CaptureError),
    #[error(transparent)]
    Attach(#[from] crate::attach::AttachError),
    #[error(
        "--cgroup and --job need the cgroup v2 hierarchy, and none is mounted here; use --pid \
         instead"
    )]
    NoCgroup2,
    #[error(transparent)]
    NoSuchCgroup(#[from] crate::enrich::jobs::NoSuchCgroup),
    #[error("internal error: {0}")]
    Internal(String),
}

impl SessionError {
    pub fn exit_code(&self) -> u8 {
        match self {
            SessionError::NoSuchProcess(_) | SessionError::NoCuda { .. } => 3,
            SessionError::ExitedBeforeCuda(_) => 3,
            SessionError::Output { .. } => 4,
            SessionError::NothingToAttach => 5,
            SessionError::Capture(CaptureError::Permission { .. })
            | SessionError::Attach(crate::attach::AttachError::Permission { .. }) => 6,
            SessionError::Capture(_) | SessionError::Attach(_) | SessionError::FollowForks(_) => 7,
            // Once the command ran, its status is gpuprofd's, whatever failed here.
            SessionError::AfterCommand { status, .. } => command::exit_code(*status),
            SessionError::Spawn { .. } => 8,
            SessionError::NoCgroup2 | SessionError::NoSuchCgroup(_) => 2,
            SessionError::Internal(_) => 1,
        }
    }
}

/// What runs beside a capture session and answers for it while it runs: the service's control
/// socket and systemd notifications, the metrics and dashboard server. The session calls it at
/// its moments; it never names what is behind it (the service sits above the session).
pub trait Companion: Send {
    /// Probes are attached and records flow: answer questions through `queries` from now on.
    fn started(&mut self, _queries: Queries) {}
    /// The ready line was printed (`probes` on `libs` libraries).
    fn ready(&mut self, _probes: usize, _libs: usize) {}
    /// Whether anything asks the session questions while it runs: its loss counters and map
    /// fill are then refreshed every tick.
    fn asks(&self) -> bool {
        false
    }
    /// How often the run loop must say it is alive ([`Self::alive`]); `None`: never.
    fn alive_every(&self) -> Option<Duration> {
        None
    }
    /// The run loop is alive (systemd's watchdog keep-alive).
    fn alive(&mut self) {}
    /// How often to rescan /proc now, if a reload changed it.
    fn rescan_every(&self) -> Option<Duration> {
        None
    }
    /// Drop processes that ended longer ago than this from the model (a service runs for
    /// weeks); `None`: keep them.
    fn forget_after(&self) -> Option<Duration> {
        None
    }
    /// The capture is stopping (`why`), before the ring buffer is drained.
    fn stopping(&mut self, _why: &str) {}
    /// Deep captures still streaming to their clients (the session waits a while for them).
    fn streaming(&self) -> usize {
        0
    }
    /// The final report, once the results are written (just before [`Self::stopped`]).
    fn finished(&mut self, _report: &crate::model::snapshot::Report) {}
    /// The capture stopped and its results are written.
    fn stopped(&mut self) {}
    /// Whether the end-of-run table goes to standard output (not into a service's log).
    fn prints_report(&self) -> bool {
        true
    }
}

/// The default stack sampling period of `--all-jobs` captures and the service: one call in 64
/// per thread keeps the always-on cost of stacks small (a stack costs a few microseconds).
pub const ALL_JOBS_STACK_PERIOD: u32 = 64;

/// Runs one capture until it ends; the results are written before this returns. With a
/// command, its exit status (the capture may stop before it ends: `--duration`; it is then
/// waited for).
pub async fn run(
    opts: CaptureOptions,
    companion: &mut dyn Companion,
) -> Result<Option<ExitStatus>, SessionError> {
    // Signal handlers first: a Ctrl-C or SIGTERM that arrives while attaching (or right after
    // the ready line) must stop the capture cleanly, not kill the process with the default
    // action and lose the report.
    use tokio::signal::unix::{SignalKind, signal};
    let sigint = signal(SignalKind::interrupt())
        .map_err(|e| SessionError::Internal(format!("SIGINT handler: {e}")))?;
    let sigterm = signal(SignalKind::terminate())
        .map_err(|e| SessionError::Internal(format!("SIGTERM handler: {e}")))?;
    // Fail on an unwritable output before attaching anything; a run that fails before its
    // capture starts leaves the path as it was (see `EarlyOutput`).
    let output_error = |p: &std::path::Path, source| SessionError::Output {
        path: p.display().to_string(),
        source,
    };
    let early = match &opts.output {
        Some(p) => Some(crate::sys::files::EarlyOutput::open(p).map_err(|e| output_error(p, e))?),
        None => None,
    };
    let mut probes = Probes::start(&opts).await?;
    let (mut out_file, created_output) = match (early, &opts.output) {
        (Some(early), Some(p)) => {
            let (f, created) = early.keep().map_err(|e| output_error(p, e))?;
            (Some(f), created)
        }
        _ => (None, false),
    };

    let started_at = SystemTime::now();
    let started = Instant::now();
    let started_mono = crate::sys::clock::monotonic_ns();
    let cancel = CancellationToken::new();
    let stats = Arc::new(ReaderStats::default());
    let (tx, rx) = mpsc::channel::<Batch>(4096);
    let (ctl_tx, ctl_rx) = mpsc::channel::<Ctl>(16);
    // Questions from the metrics server and the control socket wait in a channel of their own:
    // however many clients ask, the run loop's messages (ticks, NVML) are never held up
    // behind them (the aggregator also serves the run loop first).
    let (query_tx, query_rx) = mpsc::channel::<Ctl>(4);
    let symbols = Arc::new(ProcSymbols::new());
    // A capture file takes the output file; a JSON report keeps it for the end.
    let journal = match &opts.output {
        Some(p) if store::is_capture_path(p) => out_file.take().map(|f| {
            let mut header = store::header_now(crate::sys::kernel::hostname(), describe(&opts));
            // The file's origin is the report's (timelines read from either agree).
            header.started_at_monotonic_ns = started_mono;
            header.started_at_unix_ns = started_at
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            let mut w = store::Writer::new(f, p, header);
            w.clock();
            w
        }),
        _ => None,
    };
    let ring = probes.ring.take().expect("taken once");
    let counting = probes.counting.take();
    let origin =
        crate::enrich::launch_origin::Origins::new(probes.seen_at_driver.clone(), symbols.clone());
    let (windows, duty) = start_duty(&mut probes)?;
    let reader = capture::spawn_reader(
        ring,
        tx,
        cancel.clone(),
        stats.clone(),
        counting,
        Box::new(origin),
        windows,
    )?;
    let (maps_tx, maps_rx) = mpsc::unbounded_channel::<Sighting>();
    let remembered = match &opts.state_dir {
        Some(d) => crate::enrich::driver_objects::remembered::Remembered::open(d),
        None => crate::enrich::driver_objects::remembered::Remembered::none(),
    };
    let mut seen = Seen::new(
        probes.exit_final,
        symbols.clone(),
        maps_tx,
        probes.launch_mode.take(),
        remembered,
    );
    if let Some((cycle, control)) = duty {
        seen.set_duty(cycle, control);
    }
    let inbox = aggregator::Inbox {
        batches: rx,
        ctl: ctl_rx,
        queries: query_rx,
    };
    let agg = tokio::spawn(aggregator::aggregate(
        inbox,
        probes.attacher.api().clone(),
        probes.attacher.library_list(),
        seen,
        journal,
        opts.live,
    ));
    let nvml_rx = start_nvml(&opts, &ctl_tx).await;

    let gauges = Arc::new(Gauges::default());
    gauges
        .probes
        .store(probes.probe_count() as u64, Ordering::Relaxed);
    if let Ok(mut f) = gauges.fill.lock() {
        *f = capture::fill(&probes.ebpf, &stats, opts.count_launches.is_some());
    }
    let queries = Queries::new(
        query_tx.downgrade(),
        gauges.clone(),
        stats.clone(),
        (started_at, started, started_mono),
    );
    companion.started(queries.clone());
    let (n_probes, libs) = (probes.probe_count(), probes.attacher.libraries().count());
    if libs == 0 {
        console::say(format_args!(
            "ready: waiting for the first CUDA library: no running process maps libcuda.so.1 \
             or libcudart.so.* and none was found on disk; each is attached as a process maps \
             it ({})",
            describe(&opts)
        ));
    } else {
        console::say(format_args!(
            "ready: {n_probes} probes on {libs} CUDA libraries ({}); capturing ({})",
            if probes.attacher.per_process() {
                "uprobe_multi links in the selected processes only"
            } else if probes.attacher.uses_multi() {
                "uprobe_multi links"
            } else {
                "perf-event uprobes"
            },
            describe(&opts)
        ));
    }
    companion.ready(n_probes, libs);

    let command = match opts.command.first() {
        Some(_) => match command::Wrapped::spawn(
            &mut probes.ebpf,
            opts.target == Target::Command,
            &opts.command,
            opts.command_stdin.as_deref(),
            opts.run_as.as_ref(),
            opts.inject_lib.as_ref(),
        ) {
            Ok(c) => Some(c),
            Err(e) => {
                // Nothing ran: no output file of this run is left behind.
                if let (true, Some(p)) = (created_output, &opts.output) {
                    let _ = std::fs::remove_file(p);
                }
                return Err(e);
            }
        },
        None => None,
    };
    let mut ends = Ends {
        sigint,
        sigterm,
        command,
        deadline: opts.duration.map(|d| tokio::time::Instant::now() + d),
    };
    let (stop_reason, nvml_rx) = {
        let mut run_loop = RunLoop {
            opts: &opts,
            probes: &mut probes,
            companion: &mut *companion,
            ctl_tx: &ctl_tx,
            maps_rx,
            nvml_rx,
            gauges,
            stats: stats.clone(),
            queries,
            symbols,
        };
        let ran = run_loop.run(&mut ends).await;
        (ran, run_loop.nvml_rx.take())
    };
    let stopped = match stop_reason {
        Ok(why) => {
            stop::Stopping {
                opts: &opts,
                probes,
                companion,
                ctl_tx,
                query_tx,
                nvml_rx,
                cancel,
                reader,
                agg,
                stats,
                started: (started_at, started, started_mono),
                out_file,
            }
            .stop(why)
            .await
        }
        Err(e) => Err(e),
    };
    let status = run_loop::finish_command(&mut ends).await;
    match (stopped, status) {
        (Ok(()), status) => Ok(status),
        (Err(e), Some(status)) => Err(SessionError::AfterCommand {
            status,
            source: Box::new(e),
        }),
        (Err(e), None) => Err(e),
    }
}

impl crate::attach::duty::Gate for capture::counted::LaunchGate {
    fn set(&mut self, open: bool) -> Result<u64, String> {
        capture::counted::LaunchGate::set(self, open).map_err(|e| e.to_string())
    }
}

/// Starts the launch probes' duty cycle on a thread of its own, when the setup kept their sites
/// for it: the windows' receiver for the reader, and what the session shares with the cycle.
#[allow(clippy::type_complexity)]
fn start_duty(
    probes: &mut setup::Probes,
) -> Result<
    (
        Option<capture::Windows>,
        Option<(String, crate::attach::duty::DutyControl)>,
    ),
    SessionError,
> {
    let Some((cycle, sites, gate)) = probes.duty.take() else {
        return Ok((None, None));
    };
    let (wtx, wrx) = mpsc::unbounded_channel();
    let control = crate::attach::duty::DutyControl::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let thread = {
        let (control, stop) = (control.clone(), stop.clone());
        std::thread::Builder::new()
            .name("gpuprofd-duty".into())
            .spawn(move || {
                crate::attach::duty::run(cycle, sites, control, wtx, stop, Box::new(gate))
            })
            .map_err(|e| SessionError::Internal(format!("cannot start the duty cycle: {e}")))?
    };
    probes.duty_thread = Some((stop, thread));
    Ok((Some(wrx), Some((cycle.to_string(), control))))
}

/// Starts NVML sampling; the aggregator hears of it either way (a report says whether NVML
/// was on, and why not).
async fn start_nvml(
    opts: &CaptureOptions,
    ctl_tx: &mpsc::Sender<Ctl>,
) -> Option<mpsc::Receiver<crate::nvml::Message>> {
    let Some(n) = &opts.nvml else {
        let _ = ctl_tx.send(Ctl::Nvml(None)).await;
        return None;
    };
    match crate::nvml::start(n.lib.clone(), n.interval) {
        Ok(rx) => Some(rx),
        Err(why) => {
            console::warn(&why);
            let _ = ctl_tx
                .send(Ctl::Nvml(Some(crate::nvml::Message::Stopped(why))))
                .await;
            None
        }
    }
}

fn describe(opts: &CaptureOptions) -> String {
    let what = match opts.target {
        Target::AllJobs if !opts.jobs.is_empty() || !opts.cgroups.is_empty() => {
            let mut parts = Vec::new();
            if !opts.jobs.is_empty() {
                parts.push(format!("job {}", opts.jobs.join(", ")));
            }
            if !opts.cgroups.is_empty() {
                parts.push(format!("cgroup {}", opts.cgroups.join(", ")));
            }
            format!("CUDA processes of {}", parts.join(" and "))
        }
        Target::AllJobs => "all CUDA processes".to_string(),
        Target::Pid(p) => format!("process {p}"),
        Target::Command => "the command's processes".to_string(),
    };
    match opts.duration {
        Some(d) => format!("{what} for {d:?}"),
        None => format!("{what} until Ctrl-C"),
    }
}
