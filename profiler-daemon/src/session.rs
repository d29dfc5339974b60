//! One capture session: check the target, load and attach, run reader and aggregator, report.
//!
//! The ring-buffer reader (capture) runs on a thread of its own; the single-owner aggregator
//! (model) runs on the runtime; this task keeps the eBPF object (attach, counters) and the once-a-second chores
//! (live lines, new libraries, exited processes). Stopping drains the ring buffer before the
//! report is written, so nothing captured is lost.

use crate::api::ApiTable;
use crate::attach::{Attacher, layer_label};
use crate::capture::{self, Batch, CaptureError, KindCounts, ReaderStats};
use crate::discovery::{self, CudaLibrary, Scanner};
use crate::enrich::names::SymbolResolver;
use crate::enrich::process::{ProcSymbols, read_proc_info};
use crate::model::snapshot::{Report, ReportMeta};
use crate::model::{Aggregator, ProcessMeta};
use crate::output;
use crate::store::{self, Frame};
use aya::Ebpf;
use profiler_common::decode::{DecodeError, decode};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// What to capture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    AllJobs,
    Pid(u32),
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
    pub verbose: bool,
    /// Run this command under the profiler; the session ends when it exits.
    pub command: Vec<String>,
    pub command_stdin: Option<PathBuf>,
    /// `--cgroup`: only processes in these cgroups (with --all-jobs semantics otherwise).
    pub cgroups: Vec<String>,
    /// `--job`: only processes of these jobs (by their cgroups, found now and on every tick).
    pub jobs: Vec<String>,
    /// How often to rescan /proc for CUDA library files (`None`: 30 s with the kernel mmap
    /// watcher, 1 s without; zero: never).
    pub rescan: Option<Duration>,
    /// NVML sampling (`None`: off).
    pub nvml: Option<NvmlOptions>,
    /// Serve Prometheus `/metrics` here.
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Service mode (`gpuprofd serve`): configuration reloads, control socket, systemd.
    pub service: Option<Arc<crate::service::Service>>,
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
        "no CUDA library to attach to: none is mapped by a running process, none was found in the \
         dynamic linker's cache, and no --lib was given. Point --lib at libcuda.so.1 / \
         libcudart.so.* (files or directories)"
    )]
    NothingToAttach,
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
    #[error("{0}")]
    Selection(String),
    #[error("cannot serve /metrics on {addr}: {source}. Choose a free address with --metrics-addr")]
    Metrics {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Control(#[from] crate::service::ctl::BindError),
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
            SessionError::Capture(_) | SessionError::Attach(_) => 7,
            SessionError::Spawn { .. } => 8,
            SessionError::Selection(_) | SessionError::Metrics { .. } => 2,
            SessionError::Control(_) => 2,
            SessionError::Internal(_) => 1,
        }
    }
}

/// What went into the capture file.
struct Journaled {
    path: PathBuf,
    frames: u64,
    records: u64,
    failure: Option<String>,
}

/// Messages to the aggregator task.
enum Ctl {
    /// The API table and the libraries attached, whenever a library is added.
    Api(ApiTable, Vec<crate::model::snapshot::LibraryReport>),
    Nvml(Option<crate::nvml::Message>),
    Metrics {
        meta: ReportMeta,
        grace: Duration,
        reply: oneshot::Sender<(Report, crate::output::prometheus::Extra)>,
    },
    /// The live dashboard page (`GET /` on the metrics address).
    Dashboard {
        meta: ReportMeta,
        reply: oneshot::Sender<String>,
    },
    /// The live report and each process's owner (the control socket's `snapshot`).
    Snapshot {
        meta: ReportMeta,
        reply: oneshot::Sender<crate::service::ctl::Snapshot>,
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
        req: crate::service::deep::Request,
        reply: oneshot::Sender<Result<u64, String>>,
    },
    Finish {
        meta: ReportMeta,
        stop_reason: String,
        reply: oneshot::Sender<(Report, Option<Journaled>)>,
    },
}

/// The default stack sampling period of `--all-jobs` captures and the service: one call in 64
/// per thread keeps the always-on cost of stacks small (a stack costs a few microseconds).
pub const ALL_JOBS_STACK_PERIOD: u32 = 64;

pub async fn run(opts: CaptureOptions) -> Result<(), SessionError> {
    // Signal handlers first: a Ctrl-C or SIGTERM that arrives while attaching (or right after
    // the ready line) must stop the capture cleanly, not kill the process with the default
    // action and lose the report.
    use tokio::signal::unix::{SignalKind, signal};
    let mut sigint = signal(SignalKind::interrupt())
        .map_err(|e| SessionError::Internal(format!("SIGINT handler: {e}")))?;
    let mut sigterm = signal(SignalKind::terminate())
        .map_err(|e| SessionError::Internal(format!("SIGTERM handler: {e}")))?;
    // SIGHUP reloads the service's configuration (elsewhere it keeps its default action).
    let svc = opts.service.clone();
    let mut sighup = match &svc {
        Some(_) => Some(
            signal(SignalKind::hangup())
                .map_err(|e| SessionError::Internal(format!("SIGHUP handler: {e}")))?,
        ),
        None => None,
    };
    // Fail on an unwritable output before attaching anything.
    let mut out_file =
        match &opts.output {
            Some(p) => Some(crate::sys::files::create_output(p).map_err(|source| {
                SessionError::Output {
                    path: p.display().to_string(),
                    source,
                }
            })?),
            None => None,
        };
    // Sockets systemd holds for the service (socket activation): the control socket, and the
    // metrics port when gpuprofd-metrics.socket is enabled. They stay systemd's when we stop.
    let inherited = match &svc {
        Some(_) => crate::service::activation::inherited(),
        None => Default::default(),
    };
    use crate::service::activation::{MetricsSocket, metrics_socket};
    let metrics_listener = match metrics_socket(inherited.metrics, opts.metrics_addr) {
        MetricsSocket::Bind(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| SessionError::Metrics { addr, source })?,
        ),
        MetricsSocket::Passed(l) => {
            let addr = l
                .local_addr()
                .unwrap_or_else(|_| std::net::SocketAddr::from(([0, 0, 0, 0], 0)));
            let l = l
                .set_nonblocking(true)
                .and_then(|_| tokio::net::TcpListener::from_std(l))
                .map_err(|source| SessionError::Metrics { addr, source })?;
            tracing::info!(%addr, "metrics on the socket systemd passed");
            if !addr.ip().is_loopback() {
                tracing::warn!(
                    %addr,
                    "the metrics socket systemd passed is not on a loopback address: the \
                     figures are exposed to the network"
                );
            }
            Some(l)
        }
        MetricsSocket::Off => None,
    };
    // The control socket: systemd's (socket activation; it stays when we stop) or our own.
    let mut owned_socket = None;
    let ctl_listener = match &svc {
        Some(s) => {
            let path = s.config().control.socket;
            match inherited.control {
                Some(l) => Some((
                    l.set_nonblocking(true)
                        .and_then(|_| tokio::net::UnixListener::from_std(l))
                        .map_err(|source| crate::service::ctl::BindError::Io {
                            path: "(socket passed by systemd)".into(),
                            source,
                        })?,
                    PathBuf::from("(socket passed by systemd)"),
                )),
                None => {
                    owned_socket = Some(path.clone());
                    Some((crate::service::ctl::bind(&path)?, path))
                }
            }
        }
        None => None,
    };
    // A bad --cgroup / --job is refused before anything is scanned or attached.
    let mut selection = Selection::new(&opts)?;
    let mut scanner = Scanner::new();
    // Said before the search, which it cripples (and which may then find nothing).
    if let Err(e) = crate::discovery::map_files_followable() {
        eprintln!(
            "gpuprofd: warning: {e}: {}",
            crate::discovery::MAP_FILES_HINT
        );
    }
    let initial = initial_libraries(&opts, &mut scanner).await?;

    // Every attached library holds descriptors (links, or perf events before 6.6): a node with
    // many runtime copies outgrows a shell's soft limit of 1,024 (see `rlimit`).
    match crate::sys::rlimit::raise_open_files() {
        Ok(l) if l.after != l.before => {
            tracing::debug!(before = l.before, after = l.after, "open-file limit raised")
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(
            "could not raise the open-file limit ({e}); probes on many libraries may fail to \
             attach with \"Too many open files\""
        ),
    }
    let mut ebpf = capture::load(opts.ring_bytes)?;
    let filter = match opts.target {
        Target::Pid(p) => capture::Filter::Tgids(vec![p]),
        Target::AllJobs if selection.active() => {
            capture::Filter::Cgroups(selection.refresh().iter().map(|c| c.id).collect())
        }
        Target::AllJobs => capture::Filter::All,
    };
    capture::set_filter(&mut ebpf, &filter)?;
    capture::set_stack_period(&mut ebpf, opts.stack_period)?;
    let mut attacher = Attacher::new();
    // Now, while the eBPF object still holds every map (the ring and the counters are taken
    // below): `uprobe_multi` programs are loaded against them.
    attacher.load_programs(&mut ebpf)?;
    // A library the kernel refused every probe of for want of privilege is reported and
    // skipped; the capture stops only when that left it no probe at all.
    let mut denied = None;
    for lib in &initial {
        match attach_and_report(&mut attacher, &mut ebpf, lib, opts.verbose) {
            Err(SessionError::Attach(e @ crate::attach::AttachError::Permission { .. })) => {
                eprintln!("gpuprofd: warning: {e}");
                denied.get_or_insert(e);
            }
            r => r?,
        }
    }
    if let Some(e) = denied
        && attacher.libraries().all(|l| l.attached() == 0)
    {
        return Err(e.into());
    }
    // Late loads: an mmap watcher in the kernel reports executable file mappings as they
    // happen; the /proc rescan is then only a slow safety net.
    let (mut rescan_every, exit_final) = match capture::watch_processes(&mut ebpf) {
        Ok(final_exit) => (opts.rescan.unwrap_or(Duration::from_secs(30)), final_exit),
        Err(e) => {
            eprintln!(
                "gpuprofd: warning: cannot watch mmap in the kernel ({e}); new CUDA library files \
                 are found by rescanning /proc every second instead"
            );
            (opts.rescan.unwrap_or(Duration::from_secs(1)), false)
        }
    };
    let ring = capture::take_ring(&mut ebpf)?;
    // Service mode's default: launches are counted in the kernel, read every period.
    let (counting, launch_mode) = match opts.count_launches {
        Some(period) => {
            let (counts, mut mode) = capture::counted::take(&mut ebpf)?;
            mode.set(true)?;
            (Some(capture::Counting::new(counts, period)), Some(mode))
        }
        None => (None, None),
    };

    let started_at = SystemTime::now();
    let started = Instant::now();
    let started_mono = crate::sys::clock::monotonic_ns();
    let cancel = CancellationToken::new();
    let stats = Arc::new(ReaderStats::default());
    let (tx, rx) = mpsc::channel::<Batch>(4096);
    let (ctl_tx, ctl_rx) = mpsc::channel::<Ctl>(16);
    // Questions from the metrics server and the control socket wait in a channel of their own:
    // however many clients ask, the main loop's messages (ticks, NVML) are never held up
    // behind them (the aggregator also serves the main loop first).
    let (query_tx, query_rx) = mpsc::channel::<Ctl>(4);
    let symbols = Arc::new(ProcSymbols::new());
    let journal = match (&opts.output, &out_file) {
        (Some(p), Some(_)) if store::is_capture_path(p) => {
            let f = out_file.take().expect("checked above");
            let mut header = store::header_now(crate::sys::kernel::hostname(), describe(&opts));
            // The file's origin is the report's (timelines read from either agree).
            header.started_at_monotonic_ns = started_mono;
            header.started_at_unix_ns = started_at
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            Some(store::Writer::new(f, p, header))
        }
        _ => None,
    };
    let reader = capture::spawn_reader(ring, tx, cancel.clone(), stats.clone(), counting)?;
    let (maps_tx, mut maps_rx) = mpsc::unbounded_channel::<Sighting>();
    let seen = Seen {
        known: HashSet::new(),
        ended: HashSet::new(),
        exit_final,
        symbols: symbols.clone(),
        maps_tx,
        journal,
        deep: Vec::new(),
        launch_mode,
    };
    let agg = tokio::spawn(aggregate(
        rx,
        ctl_rx,
        query_rx,
        attacher.api().clone(),
        attacher.library_list(),
        seen,
        opts.live,
    ));
    let mut last_rescan = Instant::now();
    let mut python = PythonProcs::default();
    let mut nvml_rx = match &opts.nvml {
        Some(n) => match crate::nvml::start(n.lib.clone(), n.interval) {
            Ok(rx) => Some(rx),
            Err(why) => {
                eprintln!("gpuprofd: warning: {why}");
                let _ = ctl_tx
                    .send(Ctl::Nvml(Some(crate::nvml::Message::Stopped(why))))
                    .await;
                None
            }
        },
        None => {
            let _ = ctl_tx.send(Ctl::Nvml(None)).await;
            None
        }
    };

    let probes: usize = attacher.libraries().map(|l| l.attached()).sum();
    let libs = attacher.libraries().count();
    // Loss counters for the metrics, refreshed every tick.
    let counters = Arc::new(std::sync::Mutex::new((
        KindCounts::default(),
        KindCounts::default(),
    )));
    let probe_count = Arc::new(std::sync::atomic::AtomicU64::new(probes as u64));
    let counting_launches = opts.count_launches.is_some();
    let fill = Arc::new(std::sync::Mutex::new(capture::fill(
        &ebpf,
        &stats,
        counting_launches,
    )));
    let snapper = Arc::new(Snapper {
        ctl: query_tx.downgrade(),
        counters: counters.clone(),
        fill: fill.clone(),
        stats: stats.clone(),
        started_at,
        started,
        started_mono,
    });
    if let Some(listener) = metrics_listener {
        let served_at = listener.local_addr().ok();
        let (snapper, probe_count, svc) = (snapper.clone(), probe_count.clone(), svc.clone());
        let snapshot = move |page: crate::output::prometheus::Page| {
            let (snapper, probe_count, svc) = (snapper.clone(), probe_count.clone(), svc.clone());
            async move {
                if page == crate::output::prometheus::Page::Dashboard {
                    return snapper
                        .ask(|meta, reply| Ctl::Dashboard { meta, reply })
                        .await;
                }
                let (top, grace) = match &svc {
                    Some(s) => {
                        let c = s.config();
                        (c.metrics.top_kernels, c.metrics.expire_after.0)
                    }
                    None => (
                        crate::output::prometheus::TOP_KERNELS,
                        crate::output::prometheus::EXITED_GRACE,
                    ),
                };
                let (report, mut extra) = snapper
                    .ask(|meta, reply| Ctl::Metrics { meta, grace, reply })
                    .await?;
                extra.records_read = snapper.stats.read.load(Ordering::Relaxed);
                extra.launches_counted = snapper.stats.counted_launches.load(Ordering::Relaxed);
                extra.probes = probe_count.load(Ordering::Relaxed);
                extra.bpf_maps = snapper.fill.lock().map(|f| f.clone()).unwrap_or_default();
                extra.heap_in_use = crate::sys::heap::in_use();
                extra.top_kernels = top;
                Some(crate::output::prometheus::render(&report, &extra))
            }
        };
        tokio::spawn(crate::output::prometheus::serve(listener, snapshot));
        if let Some(addr) = served_at {
            eprintln!(
                "gpuprofd: serving Prometheus metrics on http://{addr}/metrics and the live \
                 dashboard on http://{addr}/"
            );
        }
    }
    eprintln!(
        "gpuprofd: ready: {probes} probes on {libs} CUDA libraries ({}); capturing ({})",
        if attacher.uses_multi() {
            "uprobe_multi links"
        } else {
            "perf-event uprobes"
        },
        describe(&opts)
    );
    // Service: the control socket answers from now on; systemd hears that we are ready.
    let streaming = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (reload_tx, mut reload_rx) =
        mpsc::channel::<oneshot::Sender<Result<serde_json::Value, String>>>(4);
    let mut watchdog = None;
    if let (Some(s), Some((listener, path))) = (&svc, ctl_listener) {
        let handler = service_handler(
            s.clone(),
            snapper.clone(),
            probe_count.clone(),
            reload_tx,
            streaming.clone(),
        );
        tokio::spawn(crate::service::ctl::serve(listener, Arc::new(handler)));
        tracing::info!(socket = %path.display(), "control socket ready");
        s.notifier.ready(&format!(
            "capturing: {probes} probes on {libs} CUDA libraries"
        ));
        // The interval's first tick is immediate: the first keep-alive goes out now.
        watchdog = s.notifier.watchdog_every().map(tokio::time::interval);
    } else {
        drop(reload_tx);
    }

    let mut child = match opts.command.first() {
        Some(prog) => Some(spawn(
            prog,
            &opts.command[1..],
            opts.command_stdin.as_deref(),
        )?),
        None => None,
    };
    let deadline = opts.duration.map(|d| tokio::time::Instant::now() + d);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    let mut last_tick = Instant::now();
    let mut last_trim = Instant::now();
    let stop_reason = loop {
        let sleep_until = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let child_exit = async {
            match child.as_mut() {
                Some(c) => c.wait().await.ok(),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = sigint.recv() => break "interrupted".to_string(),
            _ = sigterm.recv() => break "terminated".to_string(),
            _ = async {
                match watchdog.as_mut() {
                    Some(w) => w.tick().await,
                    None => std::future::pending().await,
                }
            } => {
                if let Some(s) = &svc {
                    s.notifier.watchdog();
                }
            }
            _ = async {
                match sighup.as_mut() {
                    Some(h) => h.recv().await,
                    None => std::future::pending().await,
                }
            } => {
                if let Some(s) = &svc {
                    let _ = reload_service(s, &mut rescan_every);
                }
            }
            Some(reply) = reload_rx.recv() => {
                if let Some(s) = &svc {
                    let _ = reply.send(reload_service(s, &mut rescan_every));
                }
            }
            _ = sleep_until => break "duration reached".to_string(),
            st = child_exit => break format!("command exited ({})", st.map(|s| s.to_string()).unwrap_or_default()),
            Some(m) = async {
                match nvml_rx.as_mut() {
                    Some(r) => r.recv().await,
                    None => std::future::pending().await,
                }
            } => {
                if let crate::nvml::Message::Stopped(why) = &m {
                    eprintln!("gpuprofd: warning: {why}");
                    nvml_rx = None;
                }
                let _ = ctl_tx.send(Ctl::Nvml(Some(m))).await;
            }
            Some(first) = maps_rx.recv() => {
                // Most mappings are not CUDA (every process start maps its libc): the mapped
                // file's name is one readlink of /proc/PID/map_files away; only a CUDA-looking
                // one (or one that cannot be read) costs a scan of that process's maps, once
                // per burst.
                let mut tgids = HashSet::new();
                let mut one = Some(first);
                while let Some(s) = one.take().or_else(|| maps_rx.try_recv().ok()) {
                    let (t, addr, len) = match s {
                        Sighting::Map(t, addr, len) => (t, addr, len),
                        Sighting::New(t) => {
                            python.seen(&mut ebpf, t, opts.stack_period);
                            continue;
                        }
                        Sighting::Gone(t) => {
                            python.checked.remove(&t);
                            scanner.forget(t);
                            continue;
                        }
                    };
                    if matches!(opts.target, Target::Pid(p) if p != t) || tgids.contains(&t) {
                        continue;
                    }
                    if scanner.mapping_may_be_cuda(t, addr, len) {
                        tgids.insert(t);
                    }
                }
                for &t in &tgids {
                    // Its files, while it runs: the stacks of a process that ends before its
                    // records are read are still named from this.
                    symbols.remember(t);
                    python.seen(&mut ebpf, t, opts.stack_period);
                }
                let mut new = Vec::new();
                for t in tgids {
                    new.extend(scanner.scan_process(t));
                }
                if attach_new(&mut attacher, &mut ebpf, new, opts.verbose)? {
                    let _ = ctl_tx.send(Ctl::Api(attacher.api().clone(), attacher.library_list())).await;
                }
            }
            _ = tick.tick() => {
                let interval = last_tick.elapsed();
                last_tick = Instant::now();
                if opts.metrics_addr.is_some() || svc.is_some() {
                    if let (Ok(d), Ok(s)) = (
                        capture::read_counts(&ebpf, profiler_common::maps::DROPS),
                        capture::read_counts(&ebpf, profiler_common::maps::SUBMITTED),
                    ) && let Ok(mut c) = counters.lock()
                    {
                        *c = (d, s);
                    }
                    probe_count.store(
                        attacher.libraries().map(|l| l.attached() as u64).sum(),
                        Ordering::Relaxed,
                    );
                    let now = capture::fill(&ebpf, &stats, counting_launches);
                    if let Ok(mut f) = fill.lock() {
                        *f = now;
                    }
                }
                if let Target::Pid(p) = opts.target
                    && !discovery::process_exists(p)
                {
                    break format!("process {p} exited");
                }
                if last_trim.elapsed() >= TRIM_EVERY {
                    last_trim = Instant::now();
                    crate::sys::heap::trim();
                }
                let rescan = !rescan_every.is_zero() && last_rescan.elapsed() >= rescan_every;
                if rescan {
                    last_rescan = Instant::now();
                }
                let new = match opts.target {
                    _ if !rescan => Vec::new(),
                    Target::Pid(p) => scanner.scan_process(p),
                    Target::AllJobs => scanner.scan_all(),
                };
                if attach_new(&mut attacher, &mut ebpf, new, opts.verbose)? {
                    let _ = ctl_tx.send(Ctl::Api(attacher.api().clone(), attacher.library_list())).await;
                }
                let fresh = selection.refresh();
                if !fresh.is_empty() {
                    let ids: Vec<u64> = fresh.iter().map(|c| c.id).collect();
                    capture::add_cgroups(&mut ebpf, &ids)?;
                }
                let drops = if svc.is_some() {
                    snapper.meta().map(|m| m.drops).unwrap_or_default()
                } else {
                    BTreeMap::new()
                };
                let forget_after = svc.as_ref().map(|s| s.config().metrics.expire_after.0);
                let _ = ctl_tx
                    .send(Ctl::Tick {
                        interval,
                        drops,
                        forget_after,
                    })
                    .await;
            }
        }
    };
    eprintln!("gpuprofd: stopping: {stop_reason}; draining the ring buffer");
    if let Some(s) = &svc {
        s.notifier.stopping(&format!("stopping: {stop_reason}"));
    }
    // NVML news that arrived while stopping still belongs in the report (a sampler that could
    // not start says so within milliseconds, maybe just after a quick Ctrl-C).
    if let Some(rx) = nvml_rx.as_mut() {
        while let Ok(m) = rx.try_recv() {
            if let crate::nvml::Message::Stopped(why) = &m {
                eprintln!("gpuprofd: warning: {why}");
            }
            let _ = ctl_tx.send(Ctl::Nvml(Some(m))).await;
        }
    }
    cancel.cancel();
    reader
        .await
        .map_err(|_| SessionError::Internal("the ring-buffer reader thread died".into()))??;

    let drops = capture::read_counts(&ebpf, profiler_common::maps::DROPS)?;
    let submitted = capture::read_counts(&ebpf, profiler_common::maps::SUBMITTED)?;
    let meta = report_meta(
        (started_at, started_mono),
        started.elapsed(),
        &drops,
        &submitted,
        &stats,
    );
    let _ = ctl_tx
        .send(Ctl::Api(attacher.api().clone(), attacher.library_list()))
        .await;
    let (reply_tx, reply_rx) = oneshot::channel();
    ctl_tx
        .send(Ctl::Finish {
            meta,
            stop_reason: stop_reason.clone(),
            reply: reply_tx,
        })
        .await
        .map_err(|_| SessionError::Internal("aggregator stopped early".into()))?;
    let (report, journaled) = reply_rx
        .await
        .map_err(|_| SessionError::Internal("aggregator stopped early".into()))?;
    drop(ctl_tx);
    drop(query_tx);
    let _ = agg.await;
    // Deep captures got their end frames; let their last bytes reach the clients (bounded).
    let deadline = Instant::now() + Duration::from_secs(10);
    while streaming.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let read = stats.read.load(Ordering::Relaxed);
    tracing::debug!(read, submitted = submitted.total(), "records");
    // Results first: detaching is slow (see Attacher::link_count) and must not delay them.
    let written = (|| {
        if let (Some(f), Some(p)) = (out_file.as_mut(), &opts.output) {
            let json = output::json::to_string_pretty(&report);
            f.write_all(json.as_bytes())
                .and_then(|_| f.write_all(b"\n"))
                .and_then(|_| f.flush())
                .map_err(|source| SessionError::Output {
                    path: p.display().to_string(),
                    source,
                })?;
            eprintln!("gpuprofd: report written to {}", p.display());
        }
        if let Some(j) = &journaled {
            if let Some(e) = &j.failure {
                return Err(SessionError::Output {
                    path: j.path.display().to_string(),
                    source: std::io::Error::other(format!(
                        "{e}; the file holds what was written before that"
                    )),
                });
            }
            eprintln!(
                "gpuprofd: capture written to {} ({} records in {} frames); \
                 `gpuprofd report {}` shows it again",
                j.path.display(),
                j.records,
                j.frames,
                j.path.display()
            );
        }
        Ok::<(), SessionError>(())
    })();
    if let Some(p) = &owned_socket {
        let _ = std::fs::remove_file(p);
    }
    // A service's figures live on in its metrics and snapshots; its log gets no report table.
    if svc.is_none() {
        print!("{}", output::table::render(&report));
        let _ = std::io::stdout().flush();
    }

    attacher.release_links();
    let links = attacher.link_count();
    if links > 0 {
        eprintln!("gpuprofd: detaching {links} probes (the kernel takes about 0.1 s for each)");
    }
    let t = std::time::Instant::now();
    drop(ebpf);
    tracing::debug!(
        links,
        elapsed_ms = t.elapsed().as_millis() as u64,
        "probes detached"
    );
    written?;
    Ok(())
}

/// Re-reads the service's configuration and applies what can change while running.
fn reload_service(
    s: &crate::service::Service,
    rescan_every: &mut Duration,
) -> Result<serde_json::Value, String> {
    s.notifier.reloading();
    let result = s.reload();
    *rescan_every = s.config().capture.rescan_interval.0;
    s.notifier.ready(match &result {
        Ok(_) => "configuration reloaded",
        Err(_) => "reload refused; the running configuration is unchanged",
    });
    result
}

/// Builds report snapshots for the metrics and the control socket, from the aggregator task.
struct Snapper {
    ctl: mpsc::WeakSender<Ctl>,
    counters: Arc<std::sync::Mutex<(KindCounts, KindCounts)>>,
    /// The state maps' fill, refreshed every tick.
    fill: Arc<std::sync::Mutex<Vec<capture::MapFill>>>,
    stats: Arc<ReaderStats>,
    started_at: SystemTime,
    started: Instant,
    started_mono: u64,
}

impl Snapper {
    fn meta(&self) -> Option<ReportMeta> {
        let (drops, submitted) = self.counters.lock().ok()?.clone();
        Some(report_meta(
            (self.started_at, self.started_mono),
            self.started.elapsed(),
            &drops,
            &submitted,
            &self.stats,
        ))
    }

    /// Asks the aggregator `what` (built from the report's meta and a reply channel) and waits
    /// for the answer; `None` once the session is ending.
    async fn ask<T>(&self, what: impl FnOnce(ReportMeta, oneshot::Sender<T>) -> Ctl) -> Option<T> {
        let meta = self.meta()?;
        let (reply, rx) = oneshot::channel();
        self.ctl.upgrade()?.send(what(meta, reply)).await.ok()?;
        rx.await.ok()
    }

    async fn snapshot(&self) -> Option<crate::service::ctl::Snapshot> {
        self.ask(|meta, reply| Ctl::Snapshot { meta, reply }).await
    }
}

/// The control socket's view of the running session.
fn service_handler(
    svc: Arc<crate::service::Service>,
    snapper: Arc<Snapper>,
    probes: Arc<std::sync::atomic::AtomicU64>,
    reload: mpsc::Sender<oneshot::Sender<Result<serde_json::Value, String>>>,
    streaming: Arc<std::sync::atomic::AtomicUsize>,
) -> crate::service::ctl::Handler {
    let (s1, s2, s3) = (svc.clone(), svc.clone(), svc);
    let sn = snapper.clone();
    let deep_ctl = snapper.ctl.clone();
    crate::service::ctl::Handler {
        streaming,
        capture: Box::new(move |req| {
            let ctl = deep_ctl.clone();
            Box::pin(async move {
                let (reply, rx) = oneshot::channel();
                let gone = || "the daemon is stopping".to_string();
                ctl.upgrade()
                    .ok_or_else(gone)?
                    .send(Ctl::DeepStart { req, reply })
                    .await
                    .map_err(|_| gone())?;
                rx.await.map_err(|_| gone())?
            })
        }),
        status: Box::new(move || {
            let mut v = s1.status();
            if let Some(o) = v.as_object_mut() {
                o.insert("protocol".into(), crate::service::ctl::PROTOCOL.into());
                o.insert("version".into(), env!("CARGO_PKG_VERSION").into());
                o.insert("pid".into(), std::process::id().into());
                o.insert("host".into(), crate::sys::kernel::hostname().into());
                o.insert(
                    "uptime_s".into(),
                    snapper.started.elapsed().as_secs_f64().into(),
                );
                o.insert("probes".into(), probes.load(Ordering::Relaxed).into());
                o.insert(
                    "records_read".into(),
                    snapper.stats.read.load(Ordering::Relaxed).into(),
                );
                o.insert(
                    "launches_counted_in_kernel".into(),
                    snapper
                        .stats
                        .counted_launches
                        .load(Ordering::Relaxed)
                        .into(),
                );
                let fill = snapper.fill.lock().map(|f| f.clone()).unwrap_or_default();
                o.insert(
                    "heap_in_use_bytes".into(),
                    crate::sys::heap::in_use().into(),
                );
                o.insert(
                    "bpf_maps".into(),
                    serde_json::to_value(fill).unwrap_or_default(),
                );
            }
            v
        }),
        snapshot: Box::new(move || {
            let sn = sn.clone();
            Box::pin(async move { sn.snapshot().await })
        }),
        reload,
        admin_gid: Box::new(move || s2.admin_gid()),
        admin_group: Box::new(move || s3.config().control.group),
    }
}

/// The `--cgroup` / `--job` selection: which cgroups are in it, and which were added since.
struct Selection {
    root: Option<PathBuf>,
    jobs: Vec<String>,
    known: HashSet<u64>,
    fixed: Vec<crate::enrich::jobs::SelectedCgroup>,
    announced_empty: bool,
}

impl Selection {
    fn new(opts: &CaptureOptions) -> Result<Selection, SessionError> {
        let mut s = Selection {
            root: None,
            jobs: opts.jobs.clone(),
            known: HashSet::new(),
            fixed: Vec::new(),
            announced_empty: false,
        };
        if opts.cgroups.is_empty() && opts.jobs.is_empty() {
            return Ok(s);
        }
        let root = crate::enrich::jobs::cgroup2_root().ok_or_else(|| {
            SessionError::Selection(
                "--cgroup and --job need the cgroup v2 hierarchy, and none is mounted here; \
                 use --pid instead"
                    .into(),
            )
        })?;
        for c in &opts.cgroups {
            s.fixed.push(
                crate::enrich::jobs::resolve_cgroup_arg(&root, c)
                    .map_err(SessionError::Selection)?,
            );
        }
        s.root = Some(root);
        Ok(s)
    }

    fn active(&self) -> bool {
        self.root.is_some()
    }

    /// Cgroups selected now that were not before (all of them on the first call).
    fn refresh(&mut self) -> Vec<crate::enrich::jobs::SelectedCgroup> {
        let Some(root) = &self.root else {
            return Vec::new();
        };
        let mut all = self.fixed.clone();
        if !self.jobs.is_empty() {
            all.extend(crate::enrich::jobs::job_cgroups(root, &self.jobs));
        }
        let fresh: Vec<_> = all
            .into_iter()
            .filter(|c| self.known.insert(c.id))
            .collect();
        for c in &fresh {
            eprintln!("gpuprofd: selecting cgroup {} (id {})", c.rel, c.id);
        }
        if self.known.is_empty() && !self.announced_empty {
            self.announced_empty = true;
            eprintln!(
                "gpuprofd: no cgroup of job {} exists yet; waiting for it (checked every second; \
                 a Slurm job confined in cgroup v1 controllers only never has one: use --pid)",
                self.jobs.join(", ")
            );
        }
        fresh
    }
}

/// Attaches the libraries in `found` not attached yet; whether any was (the API table grew).
/// Attaches the libraries found while running. One that cannot be attached (its process
/// ended and took the file with it, a file that is not what it looked like, out of fds) is
/// reported and skipped: a library a process offers must not stop the capture of all others.
fn attach_new(
    attacher: &mut Attacher,
    ebpf: &mut Ebpf,
    found: Vec<CudaLibrary>,
    verbose: bool,
) -> Result<bool, SessionError> {
    let mut grew = false;
    for lib in found {
        if !attacher.is_attached(&lib) {
            match attach_and_report(attacher, ebpf, &lib, verbose) {
                Ok(()) => grew = true,
                Err(e) => eprintln!(
                    "gpuprofd: warning: not attached to \"{}\": {e}; capture goes on without it",
                    lib.display
                ),
            }
        }
    }
    Ok(grew)
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
    };
    match opts.duration {
        Some(d) => format!("{what} for {d:?}"),
        None => format!("{what} until Ctrl-C"),
    }
}

/// The libraries to attach before capture starts; validates `--pid`.
async fn initial_libraries(
    opts: &CaptureOptions,
    scanner: &mut Scanner,
) -> Result<Vec<CudaLibrary>, SessionError> {
    let mut libs: Vec<CudaLibrary> = Vec::new();
    let add = |l: CudaLibrary, libs: &mut Vec<CudaLibrary>| {
        if !libs.iter().any(|x| x.dev == l.dev && x.ino == l.ino) {
            libs.push(l);
        }
    };
    for p in discovery::expand_lib_args(&opts.libs) {
        match scanner.add_file(&p) {
            Some(l) => add(l, &mut libs),
            None => {
                tracing::warn!(path = %p.display(), "--lib: not a CUDA driver or runtime (SONAME libcuda.so.1 / libcudart.so.N); ignored")
            }
        }
    }
    match opts.target {
        Target::Pid(pid) => {
            if !discovery::process_exists(pid) {
                return Err(SessionError::NoSuchProcess(pid));
            }
            loop {
                let found = scanner.scan_process(pid);
                if !found.is_empty() {
                    for l in found {
                        add(l, &mut libs);
                    }
                    break;
                }
                if !discovery::process_exists(pid) {
                    return Err(SessionError::ExitedBeforeCuda(pid));
                }
                if !opts.wait {
                    let comm = read_proc_info(pid)
                        .map(|i| i.comm)
                        .unwrap_or_else(|| "?".into());
                    return Err(SessionError::NoCuda { pid, comm });
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Target::AllJobs => {
            for l in scanner.scan_all() {
                add(l, &mut libs);
            }
            if opts.system_libs {
                for p in discovery::system_libraries() {
                    if let Some(l) = scanner.add_file(&p) {
                        add(l, &mut libs);
                    }
                }
            }
        }
    }
    if libs.is_empty() {
        return Err(SessionError::NothingToAttach);
    }
    Ok(libs)
}

fn attach_and_report(
    attacher: &mut Attacher,
    ebpf: &mut Ebpf,
    lib: &CudaLibrary,
    verbose: bool,
) -> Result<(), SessionError> {
    let la = attacher.attach_library(ebpf, lib)?;
    tracing::info!(
        lib = %lib.display,
        soname = %lib.soname,
        layer = layer_label(lib.layer),
        attached = la.attached(),
        failed = la.failed(),
        "attached"
    );
    for s in &la.symbols {
        if let Some(err) = &s.error {
            tracing::warn!(symbol = %s.symbol, lib = %lib.display, "not attached: {err}");
        } else if verbose {
            eprintln!(
                "  {:<34} {:<8} entry {:#08x} probe +{:<2} ({}){}",
                s.symbol,
                layer_label(lib.layer),
                s.entry_offset,
                s.placement.offset,
                s.placement.reason,
                if s.has_return { " +return" } else { "" }
            );
        }
    }
    Ok(())
}

fn spawn(
    prog: &str,
    args: &[String],
    stdin: Option<&Path>,
) -> Result<tokio::process::Child, SessionError> {
    let mut cmd = tokio::process::Command::new(prog);
    cmd.args(args);
    if let Some(p) = stdin {
        let f = File::open(p).map_err(|source| SessionError::Spawn {
            cmd: p.display().to_string(),
            source,
        })?;
        cmd.stdin(Stdio::from(f));
        cmd.stdout(Stdio::null());
    }
    cmd.spawn().map_err(|source| SessionError::Spawn {
        cmd: prog.to_owned(),
        source,
    })
}

/// `started`: the capture's start, wall clock and CLOCK_MONOTONIC ns.
fn report_meta(
    (started_at, started_mono_ns): (SystemTime, u64),
    elapsed: Duration,
    drops: &KindCounts,
    submitted: &KindCounts,
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
    }
}

/// What the aggregator tells the session about processes.
enum Sighting {
    /// A process mapped a file executable (`tgid`, address, length): maybe a CUDA library.
    Map(u32, u64, u64),
    /// A process made its first recorded CUDA call.
    New(u32),
    /// A process ended and was dropped from the model (service mode): what the session keeps
    /// about it goes too.
    Gone(u32),
}

/// How often the allocator gives free memory back to the kernel (see [`crate::sys::heap::trim`]).
const TRIM_EVERY: Duration = Duration::from_secs(10);

/// The CPython processes whose Python frames the probes read (`PY_PROCS`).
#[derive(Default)]
struct PythonProcs {
    /// Processes looked at, with their start time (a reused tgid is looked at again).
    checked: HashMap<u32, u64>,
}

/// Processes remembered as looked at, at most (then the oldest knowledge is dropped).
const MAX_PYTHON_CHECKED: usize = 65536;

impl PythonProcs {
    /// Looks at `tgid` once (per process): if it runs a supported CPython, the probes read its
    /// Python frames from now on.
    fn seen(&mut self, ebpf: &mut Ebpf, tgid: u32, stack_period: u32) {
        if stack_period == 0 {
            return;
        }
        let start = crate::enrich::process::start_time(tgid).unwrap_or(0);
        if self.checked.get(&tgid) == Some(&start) {
            return;
        }
        if self.checked.len() >= MAX_PYTHON_CHECKED {
            self.checked.clear();
        }
        self.checked.insert(tgid, start);
        let found = crate::enrich::stacks::python::detect(tgid);
        let value = found.as_ref().and_then(|p| p.probe());
        if let Err(e) = capture::set_python(ebpf, tgid, value) {
            eprintln!("gpuprofd: warning: Python frames of process {tgid} not read: {e}");
        }
    }
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

/// The aggregator task: owns all state; decodes batches; answers ticks and the final report.
async fn aggregate(
    mut rx: mpsc::Receiver<Batch>,
    mut ctl: mpsc::Receiver<Ctl>,
    mut queries: mpsc::Receiver<Ctl>,
    api: ApiTable,
    libraries: Vec<crate::model::snapshot::LibraryReport>,
    mut seen: Seen,
    live: bool,
) {
    let resolved: Option<ResolvedLog> = seen.journal.as_ref().map(|_| Default::default());
    let mut agg = Aggregator::new(
        api.clone(),
        Box::new(Resolver(seen.symbols.clone(), resolved.clone())),
    )
    .with_stacks(crate::enrich::stacks::StackResolver::live(
        seen.symbols.clone(),
    ));
    if let Some(j) = seen.journal.as_mut() {
        j.frame(&Frame::Api(api.list().to_vec()));
        j.frame(&Frame::Libraries(libraries.clone()));
    }
    let mut api_list = api.list().to_vec();
    agg.set_libraries(libraries.clone());
    let mut libs_list = libraries;
    let mut drops_now = BTreeMap::new();
    let mut next_deep = 0u64;
    let mut finished = false;
    let mut history = crate::service::live::History::default();
    let mut batches_open = true;
    loop {
        tokio::select! {
            biased;
            b = rx.recv(), if batches_open => match b {
                Some(batch) => seen.apply_batch(&mut agg, &batch),
                None => batches_open = false,
            },
            c = async {
                tokio::select! {
                    biased;
                    c = ctl.recv() => c,
                    Some(q) = queries.recv() => Some(q),
                }
            } => match c {
                Some(Ctl::Nvml(m)) => {
                    let frame = match m {
                        Some(crate::nvml::Message::Sample(mut s)) => {
                            agg.apply_nvml(&s);
                            if let Some(h) = s.health.take() {
                                agg.apply_nvml_health(&h);
                                let sample = Frame::Nvml(s);
                                if let Some(j) = seen.journal.as_mut() {
                                    j.frame(&sample);
                                }
                                for d in &mut seen.deep {
                                    d.frame(&sample);
                                }
                                Frame::NvmlHealth(h)
                            } else {
                                Frame::Nvml(s)
                            }
                        }
                        Some(crate::nvml::Message::Stopped(why)) => {
                            agg.nvml_stopped(&why);
                            Frame::NvmlStopped(why)
                        }
                        None => {
                            agg.nvml_off();
                            Frame::NvmlOff
                        }
                    };
                    if let Some(j) = seen.journal.as_mut() {
                        j.frame(&frame);
                    }
                    for d in &mut seen.deep {
                        d.frame(&frame);
                    }
                }
                Some(Ctl::DeepStart { req, reply }) => {
                    let verdict = if finished {
                        Err("the daemon is stopping".to_string())
                    } else {
                        seen.may_capture(&req.target, req.role)
                    };
                    let (target, duration) = (req.target.clone(), req.duration);
                    if verdict.is_ok() {
                        // Every launch from now on is a record, for the capture to keep.
                        seen.follow_deep(true);
                    }
                    let _ = reply.send(verdict.map(|start| {
                        next_deep += 1;
                        let mut d = crate::service::deep::DeepCapture::new(
                            next_deep,
                            req,
                            start,
                            &api_list,
                            drops_now.clone(),
                            crate::sys::kernel::hostname(),
                        );
                        d.frame(&Frame::Libraries(libs_list.clone()));
                        seen.deep.push(d);
                        tracing::info!(id = next_deep, target = %target.describe(), ?duration, "deep capture started");
                        next_deep
                    }));
                }
                Some(Ctl::Metrics { meta, grace, reply }) => {
                    let extra = crate::output::prometheus::Extra {
                        facts: agg.metrics_facts(grace),
                        top_kernels: crate::output::prometheus::TOP_KERNELS,
                        ..Default::default()
                    };
                    let _ = reply.send((agg.report(meta), extra));
                }
                Some(Ctl::Dashboard { meta, reply }) => {
                    let report = agg.report(meta);
                    let advice = crate::analysis::advice::advise(&report, &[]);
                    let mut data = crate::output::html::page_data(
                        &report,
                        &[],
                        &advice,
                        &crate::output::html::MemorySeries::new(),
                    );
                    data["live"] = history.to_json();
                    let _ = reply.send(crate::output::html::live_page(&data));
                }
                Some(Ctl::Snapshot { meta, reply }) => {
                    let _ = reply.send(crate::service::ctl::Snapshot {
                        report: agg.report(meta),
                    });
                }
                Some(Ctl::Api(t, libs)) => {
                    let grew = libs != libs_list;
                    if let Some(j) = seen.journal.as_mut() {
                        j.frame(&Frame::Api(t.list().to_vec()));
                        if grew {
                            j.frame(&Frame::Libraries(libs.clone()));
                        }
                    }
                    for d in &mut seen.deep {
                        d.frame(&Frame::Api(t.list().to_vec()));
                        if grew {
                            d.frame(&Frame::Libraries(libs.clone()));
                        }
                    }
                    api_list = t.list().to_vec();
                    agg.set_api_table(t);
                    agg.set_libraries(libs.clone());
                    libs_list = libs;
                }
                Some(Ctl::Tick { interval, drops, forget_after }) => {
                    seen.mark_gone(&mut agg);
                    names_out(&mut agg, &mut seen.journal, &mut seen.deep, None);
                    if let Some(grace) = forget_after {
                        // Their names are settled first (see `names_out`).
                        for t in agg.exited_for(grace) {
                            names_out(&mut agg, &mut seen.journal, &mut seen.deep, Some(t));
                        }
                        for t in agg.forget_exited(grace) {
                            seen.forget(t);
                        }
                    }
                    if let Some(j) = seen.journal.as_mut() {
                        j.flush();
                    }
                    drops_now = drops;
                    history.push(agg.launches_total(), interval.as_secs_f64(), agg.gpu_now());
                    let mut i = 0;
                    while i < seen.deep.len() {
                        match seen.deep[i].tick() {
                            Some(why) => {
                                // Every name its stacks need, before its file ends.
                                names_out(&mut agg, &mut seen.journal, &mut seen.deep, Some(SETTLE_ALL));
                                seen.deep.swap_remove(i).finish(&why, &drops_now)
                            }
                            None => i += 1,
                        }
                    }
                    seen.follow_deep(false);
                    if live {
                        for line in agg.live_rows(interval.as_secs_f64()).iter().map(crate::output::live::render_line) {
                            eprintln!("gpuprofd: {line}");
                        }
                    }
                }
                Some(Ctl::Finish { meta, stop_reason, reply }) => {
                    // Everything the reader handed over is applied before the report.
                    while let Ok(batch) = rx.try_recv() {
                        seen.apply_batch(&mut agg, &batch);
                    }
                    seen.mark_gone(&mut agg);
                    for tgid in seen.known.iter().copied() {
                        if agg.is_exited(tgid) {
                            continue;
                        }
                        if let Some(job) = crate::enrich::jobs::job_of(tgid) {
                            // A live process's job is its cgroup now (it may have been moved
                            // into its job's cgroup after its first CUDA call).
                            if let Some(j) = seen.journal.as_mut() {
                                j.frame(&Frame::Job { tgid, job: (&job).into() });
                            }
                            agg.set_job(tgid, job);
                        }
                    }
                    finished = true;
                    // Every name the stacks need, for the report, the deep captures and the file.
                    names_out(&mut agg, &mut seen.journal, &mut seen.deep, Some(SETTLE_ALL));
                    for d in seen.deep.drain(..) {
                        d.finish("the daemon stopped", &meta.drops);
                    }
                    let report = agg.report(meta.clone());
                    let journaled = seen.journal.take().map(|mut j| {
                        let names = resolved
                            .as_ref()
                            .and_then(|l| l.lock().ok().map(|mut v| std::mem::take(&mut *v)))
                            .unwrap_or_default();
                        if !names.is_empty() {
                            j.frame(&Frame::Symbols(names));
                        }
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
                    let _ = reply.send((report, journaled));
                }
                None => break,
            },
        }
    }
}

/// The names the stack resolver learned since last time, into the capture file and to the deep
/// captures of their processes. With `settle_for`, first waits for the native frames of that
/// process still being named: before it is retired, runs another program or is forgotten (its
/// names would otherwise arrive after, as the next program's).
fn names_out(
    agg: &mut Aggregator,
    journal: &mut Option<store::Writer>,
    deep: &mut [crate::service::deep::DeepCapture],
    settle_for: Option<u32>,
) {
    use crate::enrich::stacks::StackSym;
    let stacks = agg.stacks_mut();
    match settle_for {
        Some(t) if t == SETTLE_ALL || stacks.naming(t) => stacks.settle(),
        _ => stacks.poll(),
    }
    let learned = stacks.take_log();
    if learned.is_empty() {
        return;
    }
    if !deep.is_empty() {
        let mut by_process: BTreeMap<u32, Vec<StackSym>> = BTreeMap::new();
        for s in &learned {
            by_process.entry(s.tgid()).or_default().push(s.clone());
        }
        for (tgid, names) in by_process {
            let f = Frame::StackSyms(names);
            for d in deep.iter_mut() {
                if d.wants(tgid, agg) {
                    d.frame_for(tgid, &f);
                }
            }
        }
    }
    if let Some(j) = journal.as_mut() {
        j.frame(&Frame::StackSyms(learned));
    }
}

/// [`names_out`]'s `settle_for` for every process.
const SETTLE_ALL: u32 = u32::MAX;

/// What the aggregator task knows about processes besides their counters.
struct Seen {
    /// Processes that produced records (first sight done).
    known: HashSet<u32>,
    /// Known processes whose end the kernel reported (their tgid may come back, reused).
    ended: HashSet<u32>,
    /// The kernel reports a process's end when its last thread exits: nothing of the old
    /// process follows its end in the ring, so any later record is a new process's.
    exit_final: bool,
    symbols: Arc<ProcSymbols>,
    /// Executable file mappings, for the session to look for new CUDA libraries.
    maps_tx: mpsc::UnboundedSender<Sighting>,
    /// The capture file, when one is written: every call on the aggregator, in order.
    journal: Option<store::Writer>,
    /// Deep captures running (control socket).
    deep: Vec<crate::service::deep::DeepCapture>,
    /// The probes' launch mode, when launches are counted in the kernel (service mode): a
    /// record per launch while a deep capture runs.
    launch_mode: Option<crate::capture::counted::LaunchMode>,
}

impl Seen {
    fn apply_batch(&mut self, agg: &mut Aggregator, batch: &Batch) {
        let Seen {
            known,
            ended,
            exit_final,
            symbols,
            maps_tx,
            journal,
            deep,
            launch_mode: _,
        } = self;
        use profiler_common::decode::Event;
        for rec in batch.iter() {
            match decode(rec) {
                Ok(Event::Map(h, m)) => {
                    // Discovery only, handed to the session: not a sign of CUDA use, so no procfs
                    // reads here for the thousands of short-lived processes a busy node runs.
                    let _ = maps_tx.send(Sighting::Map(h.tgid, m.addr, m.len));
                }
                Ok(ev @ Event::Exit(..)) => {
                    let tgid = ev.header().tgid;
                    if known.contains(&tgid) {
                        ended.insert(tgid);
                        // A process gone before its first sight is owned by the uid its end
                        // record carries (the kernel's word).
                        if let Event::Exit(_, x) = &ev
                            && x.uid != profiler_common::UID_UNKNOWN
                        {
                            agg.set_owner_if_unknown(tgid, x.uid);
                        }
                        if let Some(j) = journal.as_mut() {
                            j.record(rec);
                        }
                        for d in deep.iter_mut() {
                            if d.wants(tgid, agg) {
                                d.record(tgid, rec, true);
                            }
                        }
                        agg.apply(&ev);
                    }
                }
                Ok(Event::Exec(h, _)) => {
                    // The process runs another program from now on: what it did is the old
                    // program's, and its next record starts the new one (read afresh).
                    let tgid = h.tgid;
                    if known.contains(&tgid) && !ended.contains(&tgid) {
                        names_out(agg, journal, deep, Some(tgid));
                        let renamed = agg.exec(tgid, h.ts_ns);
                        if let Some(j) = journal.as_mut() {
                            j.record(rec);
                            if let Some(meta) = &renamed {
                                j.frame(&Frame::Process {
                                    tgid,
                                    process: store::StoredProcess::from(meta),
                                });
                            }
                            j.frame(&Frame::Retire { tgid });
                        }
                        symbols.forget(tgid);
                        known.remove(&tgid);
                        for d in deep.iter_mut() {
                            d.retire(tgid);
                        }
                        let _ = maps_tx.send(Sighting::Gone(tgid));
                    }
                }
                Ok(ev) => {
                    let tgid = ev.header().tgid;
                    // After its process ended, a tgid's records belong to a new process that was
                    // given the same pid. Where the end was taken at the group leader's exit
                    // (older kernels), they may also be stragglers of the old process's last
                    // threads: the start time tells them apart.
                    if ended.contains(&tgid) {
                        let reused = *exit_final || {
                            let now = crate::enrich::process::start_time(tgid);
                            now.is_some_and(|st| st != agg.start_time(tgid))
                        };
                        if reused {
                            names_out(agg, journal, deep, Some(tgid));
                            if let Some(j) = journal.as_mut() {
                                j.frame(&Frame::Retire { tgid });
                            }
                            agg.retire(tgid);
                            symbols.forget(tgid);
                            known.remove(&tgid);
                            ended.remove(&tgid);
                            for d in deep.iter_mut() {
                                d.retire(tgid);
                            }
                        }
                    }
                    if known.insert(tgid) {
                        let _ = maps_tx.send(Sighting::New(tgid));
                        let owner = crate::service::peer::process_uid(tgid);
                        let read_at = crate::sys::clock::monotonic_ns();
                        let mut meta = first_sight(tgid, ev.header().ts_ns, symbols);
                        // Who may see it through the control socket (real uid at first sight,
                        // else the uid its end record carries).
                        meta.owner = owner.filter(|_| !meta.exited);
                        if let Some(j) = journal.as_mut() {
                            j.frame(&Frame::Process {
                                tgid,
                                process: store::StoredProcess::from(&meta),
                            });
                        }
                        agg.set_process_meta_read_at(tgid, meta, read_at);
                    }
                    if let Event::Stack(_, st) = &ev {
                        // Names while the process is there: a capture gets its Python names
                        // before the stack that needs them, native ones as they are found.
                        agg.stacks_mut().prepare(tgid, st);
                        names_out(agg, journal, deep, None);
                    }
                    if let Some(j) = journal.as_mut() {
                        j.record(rec);
                    }
                    // Counted launches were counted before any deep capture running now
                    // started: from its start, the probes record every launch (`follow_deep`).
                    if !matches!(ev, Event::Launches(..)) {
                        for d in deep.iter_mut() {
                            if d.wants(tgid, agg) {
                                d.record(tgid, rec, false);
                            }
                        }
                    }
                    agg.apply(&ev);
                }
                Err(e) => {
                    if let Some(j) = journal.as_mut() {
                        j.record(rec);
                    }
                    match e {
                        DecodeError::UnknownKind { kind }
                        | DecodeError::WrongLength { kind, .. } => agg.record_decode_error(kind),
                        DecodeError::Short { .. } => agg.record_decode_error(0),
                    }
                }
            }
        }
        // Native names found while the batch was applied, of any process.
        names_out(agg, journal, deep, None);
    }

    /// Sets the probes' launch mode for the deep captures running (or `starting` one): a
    /// record per launch while any runs, counting otherwise.
    fn follow_deep(&mut self, starting: bool) {
        let Some(m) = self.launch_mode.as_mut() else {
            return;
        };
        let counting = !starting && self.deep.is_empty();
        if m.counting() != counting
            && let Err(e) = m.set(counting)
        {
            tracing::error!(error = %e, counting, "cannot switch the probes' launch mode");
        }
    }

    /// `tgid`'s process was dropped from the model (service mode): its next record, if its pid
    /// is reused, is a new process's.
    fn forget(&mut self, tgid: u32) {
        for d in &mut self.deep {
            d.retire(tgid);
        }
        self.known.remove(&tgid);
        self.ended.remove(&tgid);
        self.symbols.forget(tgid);
        let _ = self.maps_tx.send(Sighting::Gone(tgid));
    }

    /// Whether `role` may start a deep capture of `target` now; else why not.
    fn may_capture(
        &self,
        target: &crate::service::deep::Target,
        role: crate::service::ctl::Role,
    ) -> Result<Option<u64>, String> {
        use crate::service::ctl::Role;
        use crate::service::deep::{MAX_DEEP, MAX_DEEP_PER_USER, MAX_DEEP_USERS, Target};
        let users: Vec<u32> = self
            .deep
            .iter()
            .filter_map(|d| match d.role {
                Role::User(u) => Some(u),
                Role::Admin => None,
            })
            .collect();
        let busy = |n: usize| format!("{n} deep captures are running already; wait for one to end");
        if self.deep.len() >= MAX_DEEP {
            return Err(busy(MAX_DEEP));
        }
        if let Role::User(uid) = role {
            if users.iter().filter(|&&u| u == uid).count() >= MAX_DEEP_PER_USER {
                return Err(format!(
                    "you have {MAX_DEEP_PER_USER} deep captures running already; wait for one to end"
                ));
            }
            if users.len() >= MAX_DEEP_USERS {
                return Err(busy(users.len()));
            }
        }
        let p = match (target, role) {
            (Target::Job(_), Role::User(uid)) => {
                return Err(format!(
                    "capturing a whole job is for root and members of control.group (a job may \
                     hold other users' processes; you are uid {uid}); capture one of your \
                     processes with --pid"
                ));
            }
            (Target::Job(_), Role::Admin) => return Ok(None),
            (Target::Pid(p), _) => *p,
        };
        let gone = || format!("no process with PID {p} is running (check with `ps -p {p}`)");
        // The process is named by pid and start time: the owner read between two reads of the
        // start time belongs to that process, not to one that took its pid meanwhile.
        let start = crate::enrich::process::start_time(p).ok_or_else(gone)?;
        if let Role::User(uid) = role {
            let owner = crate::service::peer::process_uid(p);
            if crate::enrich::process::start_time(p) != Some(start) {
                return Err(gone());
            }
            if owner != Some(uid) {
                return Err(format!(
                    "process {p} is not yours (you are uid {uid}); you may capture only your \
                     own processes"
                ));
            }
        }
        Ok(Some(start))
    }

    /// Known processes that are gone now are marked exited (once each).
    fn mark_gone(&mut self, agg: &mut Aggregator) {
        for tgid in self.known.iter().copied() {
            if !agg.is_exited(tgid) && !discovery::process_exists(tgid) {
                if let Some(j) = self.journal.as_mut() {
                    j.frame(&Frame::Exited { tgid });
                }
                for d in &mut self.deep {
                    d.frame_for(tgid, &Frame::Exited { tgid });
                }
                agg.mark_exited(tgid);
            }
        }
    }
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
            }
        }
        _ => ProcessMeta {
            comm: crate::model::EXITED_COMM.into(),
            cmdline: String::new(),
            exited: true,
            job: None,
            start_time: 0,
            owner: None,
        },
    }
}
