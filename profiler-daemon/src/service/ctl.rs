//! The control socket: a Unix stream socket speaking JSON lines (protocol `gpuprofd.ctl/1`).
//!
//! Each request is one line, `{"cmd": "status"}`, and gets one line back:
//! `{"ok": true, "result": ...}` or `{"ok": false, "error": "..."}`. Commands:
//!
//! | cmd         | result                                                        | who            |
//! |-------------|---------------------------------------------------------------|----------------|
//! | `status`    | the daemon: version, pid, uptime, probes, config, reloads      | anyone         |
//! | `processes` | one row per process: pid, comm, job, owner, launches, exited  | anyone (*)     |
//! | `snapshot`  | the live report (schema `gpuprofd.report/1`, as `--output`)   | anyone (*)     |
//! | `reload`    | re-read the configuration file (as SIGHUP)                    | admins         |
//! | `capture`   | a deep capture, streamed back (below)                         | anyone (**)    |
//!
//! `{"cmd": "capture", "pid": N, "duration": "30s"}` (or `"job": "ID"` instead of `pid`): the
//! answer line (`{"ok": true, "result": {"id": ..}}`) is followed by the bytes of a capture file
//! (the `.gpuprof` format) until the capture ends — duration over, process ended, daemon
//! stopping, or the client shutting down its sending half (how `gpuprofd ctl capture` stops on
//! Ctrl-C) — then the daemon closes the connection. The client writes the file, so it is the
//! client's. (**) a process's owner may capture it; a job, only admins.
//!
//! Admins are root and members of `control.group`; (*) anyone else gets only the processes
//! whose owner (real uid when first seen, or from the kernel's exit record) is their own uid. Who is asking is the kernel's
//! word (`SO_PEERCRED`/`SO_PEERGROUPS` at connect time), never the client's.

use super::peer::{self, Peer};
use crate::model::snapshot::Report;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};

pub const PROTOCOL: &str = "gpuprofd.ctl/1";
/// Longest request line accepted.
const MAX_LINE: usize = 64 * 1024;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    Status,
    Processes,
    Snapshot,
    Reload,
    Capture {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pid: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        job: Option<String>,
        duration: String,
    },
}

/// Longest deep capture one request may ask for.
pub const MAX_CAPTURE: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

pub type CaptureFuture = Pin<Box<dyn Future<Output = Result<u64, String>> + Send>>;

/// What a capture request asks for, checked: (target, duration).
pub fn capture_target(
    pid: Option<u32>,
    job: Option<String>,
    duration: &str,
) -> Result<(crate::session::deep::Target, std::time::Duration), String> {
    use crate::session::deep::Target;
    let target = match (pid, job) {
        (Some(p), None) => Target::Pid(p),
        (None, Some(j)) if !j.is_empty() => Target::Job(j),
        _ => return Err("a capture names either a pid or a job".into()),
    };
    let d = crate::sys::duration::parse_duration(duration).map_err(|e| e.to_string())?;
    if d > MAX_CAPTURE {
        return Err(format!("\"{duration}\": a deep capture lasts at most 24h"));
    }
    Ok((target, d))
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Response {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Response {
    fn ok(v: impl Serialize) -> Response {
        Response {
            ok: true,
            result: Some(serde_json::to_value(v).unwrap_or(serde_json::Value::Null)),
            error: None,
        }
    }
    fn err(e: impl Into<String>) -> Response {
        Response {
            ok: false,
            result: None,
            error: Some(e.into()),
        }
    }
}

/// One row of `processes`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProcessRow {
    pub pid: u32,
    pub comm: String,
    pub job: Option<String>,
    /// Effective uid when first seen (`None`: it was gone before it could be read).
    pub owner: Option<u32>,
    pub launches: u64,
    pub copy_bytes: u64,
    pub blocked_ns: u64,
    pub exited: bool,
}

/// A snapshot of the live model (each process with its owner: `ProcessReport::owner`).
pub struct Snapshot {
    pub report: Report,
}

pub type SnapshotFuture = Pin<Box<dyn Future<Output = Option<Snapshot>> + Send>>;

/// What the socket's handlers reach in the running daemon.
pub struct Handler {
    /// The daemon's status (built fresh for each `status`), minus the caller-specific part.
    pub status: Box<dyn Fn() -> serde_json::Value + Send + Sync>,
    pub snapshot: Box<dyn Fn() -> SnapshotFuture + Send + Sync>,
    /// Asks the main loop to reload the configuration; the reply says what changed.
    pub reload: mpsc::Sender<oneshot::Sender<Result<serde_json::Value, String>>>,
    /// The admin group's id now (the group is reloadable).
    pub admin_gid: Box<dyn Fn() -> Option<u32> + Send + Sync>,
    pub admin_group: Box<dyn Fn() -> String + Send + Sync>,
    /// Starts a deep capture whose bytes go to the sink; its id or why not.
    pub capture: Box<dyn Fn(crate::session::deep::Request) -> CaptureFuture + Send + Sync>,
    /// Deep captures still streaming to their clients (the daemon waits for them at exit).
    pub streaming: Arc<std::sync::atomic::AtomicUsize>,
}

pub use crate::session::deep::Role;

impl Handler {
    fn role(&self, p: &Peer) -> Role {
        if p.uid == 0 || (self.admin_gid)().is_some_and(|g| p.in_group(g)) {
            Role::Admin
        } else {
            Role::User(p.uid)
        }
    }

    async fn answer(&self, peer: &Peer, req: Request) -> Response {
        let role = self.role(peer);
        match req {
            Request::Status => {
                let mut s = (self.status)();
                if let Some(o) = s.as_object_mut() {
                    o.insert(
                        "you".into(),
                        serde_json::json!({
                            "uid": peer.uid,
                            "pid": peer.pid,
                            "role": match role { Role::Admin => "admin", Role::User(_) => "user" },
                        }),
                    );
                    if role != Role::Admin {
                        o.remove("config");
                    }
                }
                Response::ok(s)
            }
            Request::Processes | Request::Snapshot => {
                let Some(snap) = (self.snapshot)().await else {
                    return Response::err("the daemon is stopping; try again when it is back");
                };
                let report = match role {
                    Role::Admin => snap.report,
                    // By each entry's own owner, not the pid's current one: the counters of an
                    // ended process stay a while, and its pid may be another user's by now.
                    Role::User(uid) => restrict(snap.report, |p| p.owner == Some(uid)),
                };
                if req == Request::Snapshot {
                    Response::ok(report)
                } else {
                    Response::ok(rows(&report))
                }
            }
            Request::Capture { .. } => {
                Response::err("internal: a capture is answered by the connection")
            }
            Request::Reload => {
                if role != Role::Admin {
                    let group = (self.admin_group)();
                    return Response::err(if group.is_empty() {
                        format!(
                            "reload is for root only (you are uid {}); set control.group in the \
                             configuration to let a group do it",
                            peer.uid
                        )
                    } else {
                        format!(
                            "reload is for root and members of group \"{group}\" (you are uid {})",
                            peer.uid
                        )
                    });
                }
                let (tx, rx) = oneshot::channel();
                if self.reload.send(tx).await.is_err() {
                    return Response::err("the daemon is stopping");
                }
                match rx.await {
                    Ok(Ok(v)) => Response::ok(v),
                    Ok(Err(e)) => Response::err(e),
                    Err(_) => Response::err("the daemon is stopping"),
                }
            }
        }
    }
}

/// The report with only the processes `keep` allows (jobs recomputed from them; node-wide
/// figures — GPUs, loss counters — stay, as `nvidia-smi` shows them to anyone, but a GPU's
/// GPM names only the jobs left). The libraries keep their SONAME, version and build id but
/// lose their directory: a library's path can name another user's home or container.
pub fn restrict(
    mut r: Report,
    keep: impl Fn(&crate::model::snapshot::ProcessReport) -> bool,
) -> Report {
    r.processes.retain(|p| keep(p));
    r.jobs = crate::model::report::jobs(&r.processes);
    // GPM per job: only the jobs left are named (the others' rounds stay counted in the
    // GPU's figures, which are node-wide).
    for g in &mut r.gpus {
        g.unprofiled_pids.clear();
        if let Some(m) = &mut g.gpm {
            m.jobs.retain(|h| {
                r.jobs
                    .iter()
                    .any(|j| format!("{}:{}", j.kind, j.id) == h.workload)
            });
        }
    }
    crate::model::report::job_gpm(&mut r.jobs, &r.gpus);
    for l in &mut r.libraries {
        l.without_directory();
    }
    r
}

fn rows(r: &Report) -> Vec<ProcessRow> {
    r.processes
        .iter()
        .map(|p| ProcessRow {
            pid: p.tgid,
            comm: p.comm.clone(),
            job: p.job.as_ref().map(|j| j.key()),
            owner: p.owner,
            launches: p.launches,
            copy_bytes: p.copies.iter().map(|c| c.bytes).sum(),
            blocked_ns: p.api.iter().map(|a| a.blocked_ns).sum(),
            exited: p.exited,
        })
        .collect()
}

#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error(
        "another gpuprofd is already serving the control socket \"{0}\"; stop it first \
         (`systemctl stop gpuprofd`) or choose another control.socket"
    )]
    InUse(String),
    #[error("cannot create the control socket \"{path}\": {source}; choose another control.socket")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// Binds the control socket: a stale file from a dead daemon is replaced, a live one refused.
/// Mode 0666: every local user may connect; what each may do is decided per request.
pub fn bind(path: &Path) -> Result<UnixListener, BindError> {
    let io = |source| BindError::Io {
        path: path.display().to_string(),
        source,
    };
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(BindError::InUse(path.display().to_string()));
        }
        std::fs::remove_file(path).map_err(io)?;
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let l = UnixListener::bind(path).map_err(io)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).map_err(io)?;
    Ok(l)
}

/// Connections served at once, all users.
pub const MAX_CONNECTIONS: usize = 64;
/// Connections one non-root user may hold at once.
pub const MAX_CONNECTIONS_PER_USER: usize = 8;
/// A connection with no request for this long is closed (a capture's stream is exempt).
pub const IDLE: std::time::Duration = std::time::Duration::from_secs(120);
/// How long one reply (or one chunk of a capture) may take to go out: a client that stops
/// reading would otherwise hold its connection, its slot and the queued bytes for ever.
#[cfg(not(test))]
const WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
#[cfg(test)]
const WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// `write_all`, given up after [`WRITE_TIMEOUT`] (the connection is then closed).
async fn write_bounded(
    w: &mut tokio::net::unix::OwnedWriteHalf,
    bytes: &[u8],
) -> std::io::Result<()> {
    match tokio::time::timeout(WRITE_TIMEOUT, w.write_all(bytes)).await {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the client did not read its reply",
        )),
    }
}

/// Open connections per uid.
#[derive(Default)]
struct Connections(std::sync::Mutex<HashMap<u32, usize>>);

impl Connections {
    /// Takes a slot for `uid`, or says why not.
    fn enter(&self, uid: u32) -> Result<(), String> {
        let mut m = self.0.lock().map_err(|_| "internal error".to_string())?;
        let total: usize = m.values().sum();
        let mine = m.get(&uid).copied().unwrap_or(0);
        if total >= MAX_CONNECTIONS {
            return Err(format!(
                "{MAX_CONNECTIONS} connections are open; try again later"
            ));
        }
        if uid != 0 && mine >= MAX_CONNECTIONS_PER_USER {
            return Err(format!(
                "you have {MAX_CONNECTIONS_PER_USER} connections open already; close one"
            ));
        }
        *m.entry(uid).or_insert(0) += 1;
        Ok(())
    }

    fn leave(&self, uid: u32) {
        if let Ok(mut m) = self.0.lock()
            && let Some(n) = m.get_mut(&uid)
        {
            *n -= 1;
            if *n == 0 {
                m.remove(&uid);
            }
        }
    }
}

/// Accepts connections until the task is dropped; each connection is served on its own task.
pub async fn serve(listener: UnixListener, handler: Arc<Handler>) {
    let open = Arc::new(Connections::default());
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                // Out of fds or memory: wait instead of spinning on the error.
                tracing::warn!(error = %e, "control socket: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                continue;
            }
        };
        let (h, open) = (handler.clone(), open.clone());
        tokio::spawn(async move {
            let peer = match peer::of(&stream) {
                Ok(p) => p,
                Err(e) => {
                    tracing::debug!(error = %e, "control connection without credentials");
                    return;
                }
            };
            if let Err(why) = open.enter(peer.uid) {
                let (_, mut wr) = stream.into_split();
                let _ = write(&mut wr, &Response::err(why)).await;
                return;
            }
            if let Err(e) = connection(stream, &peer, h).await {
                tracing::debug!(error = %e, "control connection ended");
            }
            open.leave(peer.uid);
        });
    }
}

async fn connection(stream: UnixStream, peer: &Peer, h: Arc<Handler>) -> std::io::Result<()> {
    let peer = peer.clone();
    let (rd, mut wr) = stream.into_split();
    let mut rd = BufReader::new(rd);
    let mut line = Vec::new();
    loop {
        line.clear();
        let mut limited = (&mut rd).take(MAX_LINE as u64 + 1);
        let read = limited.read_until(b'\n', &mut line);
        let Ok(n) = tokio::time::timeout(IDLE, read).await else {
            return Ok(()); // idle: closed
        };
        let n = n?;
        if n == 0 {
            return Ok(());
        }
        let resp = if line.len() > MAX_LINE {
            let r = Response::err(format!("request longer than {MAX_LINE} bytes"));
            write(&mut wr, &r).await?;
            return Ok(());
        } else {
            match serde_json::from_slice::<Request>(&line) {
                Ok(Request::Capture { pid, job, duration }) => {
                    tracing::debug!(uid = peer.uid, pid = peer.pid, ?job, "capture request");
                    match capture_target(pid, job, &duration) {
                        Ok((target, d)) => {
                            return stream_capture(&h, &peer, target, d, &mut rd, &mut wr).await;
                        }
                        Err(e) => Response::err(e),
                    }
                }
                Ok(req) => {
                    tracing::debug!(uid = peer.uid, pid = peer.pid, ?req, "control request");
                    h.answer(&peer, req).await
                }
                Err(e) => Response::err(format!(
                    "bad request ({e}); send one JSON object per line, e.g. {{\"cmd\":\"status\"}} \
                     (commands: status, processes, snapshot, reload)"
                )),
            }
        };
        write(&mut wr, &resp).await?;
    }
}

/// Starts the deep capture and streams it to the client until it ends (then the connection
/// closes). The client's EOF stops it; the end frame still goes out.
async fn stream_capture(
    h: &Handler,
    peer: &Peer,
    target: crate::session::deep::Target,
    duration: std::time::Duration,
    rd: &mut BufReader<tokio::net::unix::OwnedReadHalf>,
    wr: &mut tokio::net::unix::OwnedWriteHalf,
) -> std::io::Result<()> {
    let (tx, mut rx) = mpsc::channel(crate::session::deep::CHUNKS);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let started = (h.capture)(crate::session::deep::Request {
        target: target.clone(),
        duration,
        role: h.role(peer),
        sink: crate::session::deep::ChannelSink::new(tx),
        stop: stop.clone(),
    })
    .await;
    let id = match started {
        Ok(id) => id,
        Err(e) => return write(wr, &Response::err(e)).await,
    };
    /// Counts this stream while it lives (also when it ends with an error).
    struct Streaming<'a>(&'a std::sync::atomic::AtomicUsize);
    impl Drop for Streaming<'_> {
        fn drop(&mut self) {
            self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
    h.streaming
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let _streaming = Streaming(&h.streaming);
    write(
        wr,
        &Response::ok(serde_json::json!({
            "id": id,
            "target": target,
            "duration_s": duration.as_secs_f64(),
        })),
    )
    .await?;
    let mut buf = [0u8; 512];
    let mut client_open = true;
    loop {
        tokio::select! {
            chunk = rx.recv() => match chunk {
                Some(c) => write_bounded(wr, &c).await?,
                None => break,
            },
            n = rd.read(&mut buf), if client_open => {
                if matches!(n, Ok(0) | Err(_)) {
                    client_open = false;
                    stop.store(true, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }
    }
    wr.shutdown().await
}

async fn write(w: &mut tokio::net::unix::OwnedWriteHalf, r: &Response) -> std::io::Result<()> {
    let mut s = serde_json::to_vec(r).map_err(std::io::Error::other)?;
    s.push(b'\n');
    write_bounded(w, &s).await
}

/// The client side: one request, one answer (blocking; `gpuprofd ctl` and `top` use it).
pub struct Client {
    path: PathBuf,
    stream: std::io::BufReader<std::os::unix::net::UnixStream>,
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(
        "no gpuprofd service is listening on \"{0}\": start it (`systemctl start gpuprofd` or \
         `sudo gpuprofd serve`), or point --socket at its control.socket"
    )]
    NotRunning(String),
    #[error("cannot connect to \"{path}\": {source}")]
    Connect {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the control socket \"{path}\" failed: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the daemon refused: {0}")]
    Refused(String),
    #[error("the daemon's answer is not {PROTOCOL}: {0}")]
    Protocol(String),
}

impl ClientError {
    pub fn exit_code(&self) -> u8 {
        match self {
            ClientError::NotRunning(_) | ClientError::Connect { .. } => 12,
            ClientError::Refused(_) => 13,
            ClientError::Io { .. } | ClientError::Protocol(_) => 1,
        }
    }
}

impl Client {
    pub fn connect(path: &Path) -> Result<Client, ClientError> {
        let s = std::os::unix::net::UnixStream::connect(path).map_err(|source| {
            match source.kind() {
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                    ClientError::NotRunning(path.display().to_string())
                }
                _ => ClientError::Connect {
                    path: path.display().to_string(),
                    source,
                },
            }
        })?;
        let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(30)));
        Ok(Client {
            path: path.to_owned(),
            stream: std::io::BufReader::new(s),
        })
    }

    /// A deep capture: sends `req` (a [`Request::Capture`]), reports the answer to `started`,
    /// then copies the capture's bytes into `out` until the daemon closes the connection. When
    /// `interrupted` turns true (Ctrl-C), asks the daemon to stop (closes the sending half) and
    /// keeps copying until the end frame is in. Returns the bytes written.
    pub fn capture(
        mut self,
        req: &Request,
        out: &mut impl std::io::Write,
        started: impl FnOnce(&serde_json::Value),
        interrupted: &std::sync::atomic::AtomicBool,
    ) -> Result<u64, ClientError> {
        use std::io::Read;
        let answer = self.call(req)?;
        started(&answer);
        let path = self.path.display().to_string();
        let mut buf = vec![0u8; 256 << 10];
        let mut total = 0u64;
        let mut asked_to_stop = false;
        loop {
            if !asked_to_stop && interrupted.load(std::sync::atomic::Ordering::Relaxed) {
                asked_to_stop = true;
                let _ = self.stream.get_ref().shutdown(std::net::Shutdown::Write);
            }
            match self.stream.read(&mut buf) {
                Ok(0) => return Ok(total),
                Ok(n) => {
                    out.write_all(&buf[..n]).map_err(|source| ClientError::Io {
                        path: "the output file".into(),
                        source,
                    })?;
                    total += n as u64;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(source) => return Err(ClientError::Io { path, source }),
            }
        }
    }

    pub fn call(&mut self, req: &Request) -> Result<serde_json::Value, ClientError> {
        use std::io::{BufRead, Write};
        let io = |source| ClientError::Io {
            path: self.path.display().to_string(),
            source,
        };
        let mut line = serde_json::to_vec(req).map_err(|e| ClientError::Protocol(e.to_string()))?;
        line.push(b'\n');
        self.stream.get_mut().write_all(&line).map_err(io)?;
        let mut answer = String::new();
        let n = self
            .stream
            .read_line(&mut answer)
            .map_err(|source| ClientError::Io {
                path: self.path.display().to_string(),
                source,
            })?;
        if n == 0 {
            return Err(ClientError::Protocol(
                "the daemon closed the connection".into(),
            ));
        }
        let r: Response =
            serde_json::from_str(&answer).map_err(|e| ClientError::Protocol(e.to_string()))?;
        match (r.ok, r.result, r.error) {
            (true, Some(v), _) => Ok(v),
            (false, _, Some(e)) => Err(ClientError::Refused(e)),
            _ => Err(ClientError::Protocol(answer.trim().to_string())),
        }
    }
}

#[cfg(test)]
mod tests;
