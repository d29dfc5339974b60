//! What runs beside a capture session: the metrics and dashboard server (`--metrics-addr`, or
//! the service's `metrics.listen`), and in service mode the control socket, configuration
//! reloads (SIGHUP, `gpuprofd ctl reload`) and systemd's readiness and watchdog. It binds its
//! sockets before the session starts (a busy port fails before anything is attached) and
//! answers from the session's [`Queries`] once the probes are attached. With `[otlp]` (or
//! `--otlp`) it also pushes the same figures to an OpenTelemetry Collector.

use super::Service;
use super::activation::{self, MetricsSocket};
use super::ctl::{self, BindError};
use super::http::{self, Page};
use crate::model::snapshot::Report;
use crate::output::{otlp, prometheus};
use crate::session::{Companion, Queries};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{mpsc, oneshot};

/// Why the sockets could not be set up; the daemon exits 2 (a configuration to change).
#[derive(Debug, thiserror::Error)]
pub enum CompanionError {
    #[error(
        "cannot serve /metrics on {addr}: {source}{held}. Choose a free address with --metrics-addr (the service: metrics.listen)"
    )]
    Metrics {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
        /// Who holds the port, where the kernel tells (`" (held by …)"`), else empty.
        held: String,
    },
    #[error(transparent)]
    Control(#[from] BindError),
    #[error("cannot handle SIGHUP: {0}")]
    Signal(#[source] std::io::Error),
}

/// A reload's answer: what changed, or why the file was refused.
type ReloadReply = oneshot::Sender<Result<serde_json::Value, String>>;

/// The servers beside a session.
pub struct Beside {
    svc: Option<Arc<Service>>,
    metrics: Option<TcpListener>,
    /// Whether `/metrics` is served (its figures are then refreshed every tick).
    metrics_on: bool,
    /// Series per process outside the service (`--metrics-per-process`; the service reads
    /// `metrics.per_process` at each scrape).
    per_process: bool,
    control: Option<(UnixListener, PathBuf)>,
    /// The control socket's path when we created it (systemd's stays when we stop).
    owned_socket: Option<PathBuf>,
    sighup: Option<tokio::signal::unix::Signal>,
    /// Deep captures still streaming to their clients.
    streaming: Arc<AtomicUsize>,
    queries: Option<Queries>,
    /// The task that reloads on SIGHUP and `ctl reload`: stopped when the session stops (a
    /// reload then would tell systemd "ready" again after "stopping").
    reloader: Option<tokio::task::JoinHandle<()>>,
    /// Where to push the figures over OTLP (the service's `[otlp]`, or `--otlp`).
    otlp: Option<otlp::Settings>,
    /// The OTLP push, once the session answers questions.
    pusher: Option<Arc<otlp::Pusher>>,
}

impl Beside {
    /// Binds the metrics address (or takes the socket systemd passed) and, for a service, the
    /// control socket, and takes SIGHUP. Without a service and a metrics address: nothing.
    pub async fn bind(
        svc: Option<Arc<Service>>,
        metrics_addr: Option<SocketAddr>,
    ) -> Result<Beside, CompanionError> {
        use tokio::signal::unix::{SignalKind, signal};
        // SIGHUP reloads the service's configuration (elsewhere it keeps its default action).
        let sighup = match &svc {
            Some(_) => Some(signal(SignalKind::hangup()).map_err(CompanionError::Signal)?),
            None => None,
        };
        // Sockets systemd holds for the service (socket activation): the control socket, and
        // the metrics port when gpuprofd-metrics.socket is enabled. They stay systemd's when
        // we stop.
        let inherited = match &svc {
            Some(_) => activation::inherited(),
            None => Default::default(),
        };
        let metrics =
            metrics_listener(activation::metrics_socket(inherited.metrics, metrics_addr)).await?;
        let mut owned_socket = None;
        let control = match &svc {
            Some(s) => Some(match inherited.control {
                Some(l) => {
                    let passed = "(socket passed by systemd)";
                    let l = l
                        .set_nonblocking(true)
                        .and_then(|_| UnixListener::from_std(l))
                        .map_err(|source| BindError::Io {
                            path: passed.into(),
                            source,
                        })?;
                    (l, PathBuf::from(passed))
                }
                None => {
                    let path = s.config().control.socket;
                    owned_socket = Some(path.clone());
                    (ctl::bind(&path)?, path)
                }
            }),
            None => None,
        };
        Ok(Beside {
            svc,
            metrics_on: metrics.is_some(),
            per_process: false,
            metrics,
            control,
            owned_socket,
            sighup,
            streaming: Arc::new(AtomicUsize::new(0)),
            queries: None,
            reloader: None,
            otlp: None,
            pusher: None,
        })
    }

    /// Series per process on `/metrics` outside the service (`--metrics-per-process`).
    pub fn per_process(mut self, on: bool) -> Beside {
        self.per_process = on;
        self
    }

    /// Pushes the figures over OTLP to `s` (`None`: no push).
    pub fn otlp(mut self, s: Option<otlp::Settings>) -> Beside {
        self.otlp = s;
        self
    }

    /// Starts the OTLP push from `queries`. A push that cannot start is logged; the capture
    /// goes on.
    fn start_otlp(&mut self, s: &otlp::Settings, queries: Queries) {
        let handle = tokio::runtime::Handle::current();
        let svc = self.svc.clone();
        let per_process = self.per_process;
        // Asked on the exporter's own thread, once per push; bounded, so that a session that
        // cannot answer delays one push, not the capture.
        let source: otlp::push::Source = Box::new(move || {
            handle.block_on(async {
                let input = metrics_input(&queries, svc.as_deref(), per_process);
                tokio::time::timeout(Duration::from_secs(5), input)
                    .await
                    .ok()
                    .flatten()
            })
        });
        match otlp::Pusher::start(s, source) {
            Ok(p) => self.pusher = Some(Arc::new(p)),
            Err(e) => tracing::error!(error = %e, "OTLP push not started; the capture goes on"),
        }
    }

    /// Serves `/metrics` and the dashboard from `queries`.
    fn serve_metrics(&mut self, listener: TcpListener, queries: Queries) {
        let served_at = listener.local_addr().ok();
        let svc = self.svc.clone();
        let per_process = self.per_process;
        let pusher = self.pusher.clone();
        let page = move |page: Page| {
            let (queries, svc, pusher) = (queries.clone(), svc.clone(), pusher.clone());
            async move {
                match page {
                    Page::Dashboard => queries.dashboard().await,
                    Page::Metrics => {
                        let (report, mut extra) =
                            metrics_input(&queries, svc.as_deref(), per_process).await?;
                        extra.otlp = pusher.map(|p| p.status());
                        Some(prometheus::render(&report, &extra))
                    }
                }
            }
        };
        tokio::spawn(http::serve(listener, page));
        if let Some(addr) = served_at {
            crate::session::console::say(format_args!(
                "serving Prometheus metrics on http://{addr}/metrics and the live dashboard on \
                 http://{addr}/"
            ));
        }
    }

    /// Serves the control socket; reloads on SIGHUP and on its `reload`.
    fn serve_control(&mut self, s: Arc<Service>, listener: UnixListener, path: PathBuf) {
        let Some(queries) = self.queries.clone() else {
            return;
        };
        let (reload_tx, mut reload_rx) = mpsc::channel::<ReloadReply>(4);
        let mut sighup = self.sighup.take();
        let reloader = s.clone();
        self.reloader = Some(tokio::spawn(async move {
            loop {
                let hup = async {
                    match sighup.as_mut() {
                        Some(h) => h.recv().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = hup => {
                        let _ = reload_service(&reloader);
                    }
                    reply = reload_rx.recv() => match reply {
                        Some(reply) => {
                            let _ = reply.send(reload_service(&reloader));
                        }
                        None => return,
                    },
                }
            }
        }));
        let handler = handler(
            s.clone(),
            queries,
            reload_tx,
            self.streaming.clone(),
            self.pusher.clone(),
        );
        tokio::spawn(ctl::serve(listener, Arc::new(handler)));
        tracing::info!(socket = %path.display(), "control socket ready");
    }
}

impl Companion for Beside {
    fn started(&mut self, queries: Queries) {
        if let Some(s) = self.otlp.clone() {
            self.start_otlp(&s, queries.clone());
        }
        if let Some(l) = self.metrics.take() {
            self.serve_metrics(l, queries.clone());
        }
        self.queries = Some(queries);
    }

    fn ready(&mut self, probes: usize, libs: usize) {
        let Some(s) = self.svc.clone() else {
            return;
        };
        if let Some((listener, path)) = self.control.take() {
            self.serve_control(s.clone(), listener, path);
        }
        s.notifier.ready(&if libs == 0 {
            "waiting for the first CUDA library".to_owned()
        } else {
            format!("capturing: {probes} probes on {libs} CUDA libraries")
        });
    }

    fn asks(&self) -> bool {
        self.svc.is_some() || self.metrics_on || self.otlp.is_some()
    }

    fn alive_every(&self) -> Option<Duration> {
        self.svc.as_ref()?.notifier.watchdog_every()
    }

    fn alive(&mut self) {
        if let Some(s) = &self.svc {
            s.notifier.watchdog();
        }
    }

    fn rescan_every(&self) -> Option<Duration> {
        Some(self.svc.as_ref()?.config().capture.rescan_interval.0)
    }

    fn forget_after(&self) -> Option<Duration> {
        Some(self.svc.as_ref()?.config().metrics.expire_after.0)
    }

    fn stopping(&mut self, why: &str) {
        // No reload from now on: `ctl reload` hears that the daemon is stopping.
        if let Some(r) = self.reloader.take() {
            r.abort();
        }
        if let Some(s) = &self.svc {
            s.notifier.stopping(why);
        }
    }

    fn streaming(&self) -> usize {
        self.streaming.load(Ordering::SeqCst)
    }

    fn finished(&mut self, report: &Report) {
        let (Some(p), Some(q)) = (&self.pusher, &self.queries) else {
            return;
        };
        // The model is gone: NVML's facts are the last push's (the pusher keeps them).
        p.finish(
            report,
            extra(q, self.svc.as_deref(), self.per_process, Default::default()),
        );
    }

    fn stopped(&mut self) {
        // The last push (the final figures, after `finished`), bounded by its timeout. The
        // SDK's shutdown waits on its reader thread: called from a thread of its own, never a
        // runtime's.
        if let Some(p) = self.pusher.take() {
            let _ = std::thread::spawn(move || p.shutdown()).join();
        }
        if let Some(p) = self.owned_socket.take() {
            let _ = std::fs::remove_file(p);
        }
    }

    fn prints_report(&self) -> bool {
        // A service's figures live on in its metrics and snapshots; its log gets no table.
        self.svc.is_none()
    }
}

/// Who holds a port the daemon could not bind, in words for its error: another gpuprofd (to
/// stop), or some other program (dcgm-exporter's 9400, say); empty where the kernel does not
/// tell (another user's process without the privilege to see its descriptors).
fn held_by(addr: SocketAddr, e: &std::io::Error) -> String {
    if e.kind() != std::io::ErrorKind::AddrInUse {
        return String::new();
    }
    match crate::sys::sockets::listener_owner(addr) {
        Some((pid, comm)) if comm == "gpuprofd" => format!(
            " (held by another gpuprofd, process {pid}: stop it first, e.g. `systemctl stop \
             gpuprofd`, or give this one another address)"
        ),
        Some((pid, comm)) => format!(" (held by process {pid}, {comm})"),
        None => String::new(),
    }
}

/// The listener for `/metrics`: bound here, passed by systemd, or none.
async fn metrics_listener(m: MetricsSocket) -> Result<Option<TcpListener>, CompanionError> {
    match m {
        MetricsSocket::Bind(addr) => TcpListener::bind(addr).await.map(Some).map_err(|source| {
            let held = held_by(addr, &source);
            CompanionError::Metrics { addr, source, held }
        }),
        MetricsSocket::Passed(l) => {
            let addr = l
                .local_addr()
                .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
            let l = l
                .set_nonblocking(true)
                .and_then(|_| TcpListener::from_std(l))
                .map_err(|source| CompanionError::Metrics {
                    addr,
                    source,
                    held: String::new(),
                })?;
            tracing::info!(%addr, "metrics on the socket systemd passed");
            if !addr.ip().is_loopback() {
                tracing::warn!(
                    %addr,
                    "the metrics socket systemd passed is not on a loopback address: the \
                     figures are exposed to the network"
                );
            }
            Ok(Some(l))
        }
        MetricsSocket::Off => Ok(None),
    }
}

/// The report and extras the figures are made of now (`/metrics`, OTLP).
async fn metrics_input(
    queries: &Queries,
    svc: Option<&Service>,
    per_process: bool,
) -> Option<(Report, prometheus::Extra)> {
    let (report, facts) = queries.metrics(grace(svc)).await?;
    Some((report, extra(queries, svc, per_process, facts)))
}

/// How long an ended process stays in the figures.
fn grace(svc: Option<&Service>) -> Duration {
    match svc {
        Some(s) => s.config().metrics.expire_after.0,
        None => prometheus::EXITED_GRACE,
    }
}

/// The extras of the figures now, with the model's `facts`.
fn extra(
    queries: &Queries,
    svc: Option<&Service>,
    per_process: bool,
    facts: crate::model::snapshot::MetricsFacts,
) -> prometheus::Extra {
    let (top, per_process) = match svc {
        Some(s) => {
            let c = s.config();
            (c.metrics.top_kernels, c.metrics.per_process)
        }
        None => (prometheus::TOP_KERNELS, per_process),
    };
    let me = queries.figures();
    prometheus::Extra {
        facts,
        records_read: me.records_read,
        launches_counted: me.launches_counted_in_kernel,
        probes: me.probes,
        bpf_maps: me.bpf_maps,
        heap_in_use: me.heap_in_use_bytes,
        top_kernels: top,
        per_process,
        otlp: None,
    }
}

/// Re-reads the service's configuration and applies what can change while running (the run
/// loop reads the rescan interval and the expiry from it every tick).
fn reload_service(s: &Service) -> Result<serde_json::Value, String> {
    s.notifier.reloading();
    let result = s.reload().map_err(|e| e.to_string());
    s.notifier.ready(match &result {
        Ok(_) => "configuration reloaded",
        Err(_) => "reload refused; the running configuration is unchanged",
    });
    result
}

/// The control socket's view of the running session.
fn handler(
    svc: Arc<Service>,
    queries: Queries,
    reload: mpsc::Sender<ReloadReply>,
    streaming: Arc<AtomicUsize>,
    pusher: Option<Arc<otlp::Pusher>>,
) -> ctl::Handler {
    let (s1, s2, s3) = (svc.clone(), svc.clone(), svc);
    let (q1, q2, q3) = (queries.clone(), queries.clone(), queries);
    ctl::Handler {
        streaming,
        capture: Box::new(move |req| {
            let q = q1.clone();
            Box::pin(async move { q.deep_start(req).await.map_err(|e| e.to_string()) })
        }),
        status: Box::new(move || status(&s1, &q2, pusher.as_deref())),
        snapshot: Box::new(move || {
            let q = q3.clone();
            Box::pin(async move { q.report().await.map(|report| ctl::Snapshot { report }) })
        }),
        reload,
        admin_gid: Box::new(move || s2.admin_gid()),
        admin_group: Box::new(move || s3.config().control.group),
    }
}

/// `status`: the service's part, the daemon's identity and the session's own figures.
fn status(s: &Service, q: &Queries, pusher: Option<&otlp::Pusher>) -> serde_json::Value {
    let mut v = s.status();
    if let Some(o) = v.as_object_mut() {
        o.insert("protocol".into(), ctl::PROTOCOL.into());
        o.insert("version".into(), env!("CARGO_PKG_VERSION").into());
        o.insert("pid".into(), std::process::id().into());
        o.insert("host".into(), crate::sys::kernel::hostname().into());
        if let Ok(serde_json::Value::Object(me)) = serde_json::to_value(q.figures()) {
            o.extend(me);
        }
        if let Some(p) = pusher
            && let Ok(v) = serde_json::to_value(p.status())
        {
            o.insert("otlp".into(), v);
        }
    }
    v
}
