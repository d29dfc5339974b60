//! Harness for the privileged end-to-end tests: the real daemon binary with its real eBPF object,
//! attached to the fake CUDA libraries (tests/fakecuda) that scripted workload programs drive.
//!
//! Every wait is bounded; synchronisation is by handshake (the daemon's "ready" line, the
//! workload's "ready"/"ok" lines), never by sleeping.

use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::thread;
use std::time::{Duration, Instant};

mod grafana;
mod prometheus;
pub use grafana::*;
pub use prometheus::*;

/// How long any single wait may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(60);

/// The fake runtime's `gemm` kernel as reports name it (demangled from its registration).
pub const GEMM: &str = "gemm(float const*, float const*, float*, int, int, int)";

fn env_path(var: &str, what: &str) -> PathBuf {
    let p = std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        panic!("{var} is not set: run the privileged tests through `cargo xtask test` (it builds {what})")
    });
    assert!(
        p.exists(),
        "{var}={} does not exist: run `cargo xtask build`",
        p.display()
    );
    p
}

/// The gpuprofd binary under test.
pub fn daemon_bin() -> PathBuf {
    env_path("GPUPROFD_BIN", "the daemon")
}

/// The fake CUDA build (lib/, lib-cet/, bin/).
pub fn fakecuda() -> PathBuf {
    env_path("FAKECUDA_DIR", "the fake CUDA libraries")
}

/// Fails (never skips) when this machine cannot run the probes.
pub fn require_bpf() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "privileged tests need root to load BPF programs and attach uprobes: run `sudo -E cargo xtask test`"
    );
    assert!(
        Path::new("/sys/kernel/btf/vmlinux").exists(),
        "this kernel has no BTF (/sys/kernel/btf/vmlinux): the probes cannot be tested here; use a kernel built with CONFIG_DEBUG_INFO_BTF"
    );
    assert!(
        Path::new("/sys/bus/event_source/devices/uprobe").exists(),
        "this kernel has no uprobe PMU (/sys/bus/event_source/devices/uprobe): CONFIG_UPROBE_EVENTS is needed"
    );
}

/// `gpuprofd serve --config FILE` (stderr collected); with `notify`, as systemd runs it: its
/// `sd_notify` socket and a 1 s watchdog.
pub struct Service {
    child: Child,
    pub stderr: Lines,
    /// Its state directory (`$STATE_DIRECTORY`, as systemd sets it): its own, so that layouts
    /// one test's daemon learns never reach another's.
    _state: TempDir,
}

impl Service {
    pub fn start(config: &Path, notify: Option<&Path>) -> Service {
        require_bpf();
        let mut cmd = Command::new(daemon_bin());
        cmd.args(["serve", "--config"]).arg(config);
        if let Some(n) = notify {
            cmd.env("NOTIFY_SOCKET", n).env("WATCHDOG_USEC", "1000000");
        }
        Service::spawn(cmd)
    }

    /// Starts `cmd` with its stderr read line by line.
    fn spawn(mut cmd: Command) -> Service {
        let state = TempDir::new("state");
        let mut child = cmd
            .env("STATE_DIRECTORY", state.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start gpuprofd serve");
        let stderr = Lines::new(child.stderr.take().unwrap());
        Service {
            child,
            stderr,
            _state: state,
        }
    }

    /// `gpuprofd serve` as systemd starts it with sockets to hand over (socket activation):
    /// `sockets` at fds 3, 4, … in this order, `$LISTEN_FDS` and `$LISTEN_PID` set (through a
    /// shell that execs the daemon, so that the pid is the daemon's).
    pub fn start_activated(config: &Path, sockets: &[std::os::fd::RawFd]) -> Service {
        use std::os::unix::process::CommandExt;
        require_bpf();
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(format!(
                "export LISTEN_PID=$$ LISTEN_FDS={}; exec \"$0\" serve --config \"$1\"",
                sockets.len()
            ))
            .arg(daemon_bin())
            .arg(config);
        const MAX: usize = 8;
        assert!(sockets.len() <= MAX, "at most {MAX} sockets");
        let n = sockets.len();
        let mut fds = [-1; MAX];
        fds[..n].copy_from_slice(sockets);
        // SAFETY: between fork and exec only async-signal-safe calls (fcntl, dup2) and no
        // allocation: the buffers are fixed arrays made before the fork.
        unsafe {
            cmd.pre_exec(move || {
                // Out of the way first, so that moving one to 3 + i cannot close another.
                let mut high = [-1; MAX];
                for (h, &fd) in high[..n].iter_mut().zip(&fds[..n]) {
                    *h = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 100);
                    if *h < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                for (i, &h) in high[..n].iter().enumerate() {
                    // dup2 leaves the new fd without close-on-exec: it is inherited.
                    if libc::dup2(h, 3 + i as i32) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        Service::spawn(cmd)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// SIGTERM, wait (bounded): how it ended and everything it said.
    pub fn stop(mut self) -> (std::process::ExitStatus, Vec<String>) {
        self.signal(libc::SIGTERM);
        let st = wait_bounded(&mut self.child);
        (st, self.stderr.rest())
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Lines from a child's pipe, read on a thread so waits can time out.
pub struct Lines {
    rx: Receiver<String>,
    pub seen: Vec<String>,
}

impl Lines {
    pub fn new(r: impl std::io::Read + Send + 'static) -> Lines {
        let (tx, rx) = channel();
        thread::spawn(move || {
            for line in BufReader::new(r).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Lines {
            rx,
            seen: Vec::new(),
        }
    }

    /// The next line that satisfies `f` (earlier lines are kept in `seen`).
    pub fn wait_for(&mut self, what: &str, f: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if f(&l) {
                        return l;
                    }
                }
                Err(_) => panic!(
                    "timed out waiting for {what}; output so far:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
    }

    /// Everything until the pipe closes.
    pub fn rest(&mut self) -> Vec<String> {
        while let Ok(l) = self.rx.recv_timeout(WAIT) {
            self.seen.push(l);
        }
        self.seen.clone()
    }
}

/// A running gpuprofd.
pub struct Daemon {
    child: Child,
    pub stderr: Lines,
    stdout: Option<std::process::ChildStdout>,
    pub output: PathBuf,
    _dir: TempDir,
}

/// The outcome of a stopped daemon.
pub struct Finished {
    pub report: Value,
    pub stdout: String,
    pub stderr: Vec<String>,
    /// The daemon's output file (kept until this is dropped).
    pub output: PathBuf,
    _dir: TempDir,
}

impl Daemon {
    /// Starts `gpuprofd ARGS --output <tmp>.json` and waits for its ready line.
    pub fn start(args: &[&str]) -> Daemon {
        Daemon::start_to("report.json", args)
    }

    /// Starts `gpuprofd ARGS --output <tmp>/capture.gpuprof` (a capture file; `stop` reads its
    /// report back with `gpuprofd report`).
    pub fn capturing(args: &[&str]) -> Daemon {
        Daemon::start_to("capture.gpuprof", args)
    }

    fn start_to(file: &str, args: &[&str]) -> Daemon {
        Daemon::start_with(file, args, &[])
    }

    /// Starts `gpuprofd ARGS --output <tmp>/FILE` with extra environment variables.
    pub fn start_with(file: &str, args: &[&str], env: &[(&str, &str)]) -> Daemon {
        require_bpf();
        let dir = TempDir::new("daemon");
        let output = dir.path().join(file);
        // Its own state directory (tests that share one pass --state-dir).
        let mut child = Command::new(daemon_bin())
            .env("STATE_DIRECTORY", dir.path().join("state"))
            .envs(env.iter().copied())
            .args(args)
            .arg("--output")
            .arg(&output)
            .arg("--no-live")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start gpuprofd");
        let mut stderr = Lines::new(child.stderr.take().unwrap());
        stderr.wait_for("the daemon's ready line", |l| l.contains("gpuprofd: ready"));
        let stdout = child.stdout.take();
        Daemon {
            child,
            stderr,
            stdout,
            output,
            _dir: dir,
        }
    }

    /// Starts gpuprofd on all jobs with only the fake libraries attached.
    pub fn all_jobs() -> Daemon {
        let lib = fakecuda().join("lib");
        Daemon::start(&all_jobs_args(&lib))
    }

    /// [`Daemon::all_jobs`] writing a capture file (see [`Daemon::capturing`]).
    pub fn all_jobs_capturing() -> Daemon {
        let lib = fakecuda().join("lib");
        Daemon::capturing(&all_jobs_args(&lib))
    }

    /// gpuprofd on all jobs with only the fake *driver* attached up front and the /proc rescan
    /// off: any other library must be found by the in-kernel mmap watcher.
    pub fn watcher_only() -> Daemon {
        let driver = fakecuda().join("lib/libcuda.so.1");
        Daemon::start(&[
            "--all-jobs",
            "--no-system-libs",
            "--rescan-interval",
            "0",
            "--lib",
            driver.to_str().unwrap(),
        ])
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the daemon (SIGSTOP): the probes keep recording into the ring buffer, and the
    /// daemon reads it all only after [`Daemon::resume`], when the processes may be gone.
    pub fn pause(&self) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGSTOP) };
    }

    pub fn resume(&self) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGCONT) };
    }

    /// SIGINT, wait for exit (bounded), parse the JSON report.
    pub fn stop(mut self) -> Finished {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let status = wait_bounded(&mut self.child);
        let mut out = String::new();
        if let Some(mut s) = self.stdout.take() {
            std::io::Read::read_to_string(&mut s, &mut out).unwrap();
        }
        let stderr = self.stderr.rest();
        assert!(
            status.success(),
            "gpuprofd exited with {status}; stderr:\n{}",
            stderr.join("\n")
        );
        let report = read_report(&self.output);
        let dir = std::mem::replace(&mut self._dir, TempDir::new("stopped"));
        Finished {
            report,
            stdout: out,
            stderr,
            output: self.output.clone(),
            _dir: dir,
        }
    }

    /// SIGKILL: the daemon gets no chance to finish anything. Returns what it left.
    pub fn kill9(mut self) -> Finished {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGKILL) };
        let status = wait_bounded(&mut self.child);
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGKILL)
        );
        let dir = std::mem::replace(&mut self._dir, TempDir::new("killed"));
        Finished {
            report: Value::Null,
            stdout: String::new(),
            stderr: self.stderr.rest(),
            output: self.output.clone(),
            _dir: dir,
        }
    }
}

/// The Chrome trace `gpuprofd export` makes of `capture` (written beside it).
pub fn chrome_trace(capture: &std::path::Path) -> Value {
    let trace = capture.with_extension("json");
    let (code, _, err) = run_daemon(&[
        "export",
        capture.to_str().unwrap(),
        "-o",
        trace.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap()
}

/// Renders the capture file `capture` as the HTML overview page with `gpuprofd report` and
/// returns the DOM headless Chromium made of it (see [`chromium_dom`]).
pub fn overview_dom(capture: &Path, name: &str) -> String {
    let html = capture.with_extension("html");
    let (code, _, err) = run_daemon(&[
        "report",
        capture.to_str().unwrap(),
        "--format",
        "html",
        "-o",
        html.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let dom = chromium_dom(&html, name);
    assert!(
        dom.contains("data-rendered=\"yes\""),
        "the page's script did not run"
    );
    dom
}

/// Checks the Perfetto protobuf trace `pftrace` against the Chrome JSON trace `json` of the
/// same capture with Perfetto's own schema (`tests/tools/check_pftrace.py`, in the venv that
/// `scripts/setup.sh --test-tools` makes); the counts it printed.
pub fn check_pftrace(pftrace: &Path, json: &Path) -> serde_json::Value {
    let python = "/opt/gpuprofd-test-tools/perfetto/bin/python3";
    assert!(
        Path::new(python).exists(),
        "{python} is missing: run scripts/setup.sh --test-tools"
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/check_pftrace.py");
    let out = std::process::Command::new(python)
        .arg(script)
        .arg(pftrace)
        .arg(json)
        .output()
        .expect("running check_pftrace.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the Perfetto trace does not match: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).expect("check_pftrace.py prints JSON")
}

/// Loads `html` in headless Chromium (installed by `scripts/setup.sh --test-tools`, which the
/// test command runs) and returns the DOM after its scripts ran; saves a screenshot as
/// `target/test-artifacts/<name>.png`.
pub fn chromium_dom(html: &Path, name: &str) -> String {
    chromium_url(&format!("file://{}", html.display()), name)
}

/// [`chromium_dom`] of any URL (a page served by the daemon).
pub fn chromium_url(url: &str, name: &str) -> String {
    let chromium = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .expect("chromium is not installed: run scripts/setup.sh --test-tools");
    let common = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
    ];
    let out = Command::new(chromium)
        .args(common)
        .arg("--dump-dom")
        .arg(url)
        .output()
        .expect("run chromium");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shots = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-artifacts");
    std::fs::create_dir_all(&shots).unwrap();
    let shot = shots.join(format!("{name}.png"));
    let st = Command::new(chromium)
        .args(common)
        .arg("--window-size=1200,2400")
        .arg(format!("--screenshot={}", shot.display()))
        .arg(url)
        .output()
        .expect("run chromium");
    assert!(st.status.success() && shot.exists(), "no screenshot");
    String::from_utf8(out.stdout).expect("UTF-8 DOM")
}

/// gpuprofd on all jobs with the fake driver and runtime in `lib` attached up front.
pub fn all_jobs_args(lib: &Path) -> [&str; 4] {
    [
        "--all-jobs",
        "--no-system-libs",
        "--lib",
        lib.to_str().expect("UTF-8 path"),
    ]
}

/// The JSON report in `path`, or for a capture file the one `gpuprofd report` rebuilds from it.
pub fn read_report(path: &Path) -> Value {
    let text = if path.extension().is_some_and(|e| e == "gpuprof") {
        let (code, out, err) = run_daemon(&["report", path.to_str().unwrap(), "--format", "json"]);
        assert_eq!(code, 0, "gpuprofd report failed: {err}");
        out
    } else {
        std::fs::read_to_string(path).expect("report written")
    };
    serde_json::from_str(&text).expect("report is JSON")
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits for `child` to exit (bounded by [`WAIT`]).
pub fn wait_bounded(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(st) = child.try_wait().expect("wait") {
            return st;
        }
        assert!(
            Instant::now() < deadline,
            "process {} did not exit within {WAIT:?}",
            child.id()
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// Runs gpuprofd with ARGS to completion (for error cases): (exit code, stdout, stderr).
pub fn run_daemon(args: &[&str]) -> (i32, String, String) {
    run_daemon_env(args, &[])
}

/// [`run_daemon`] on all jobs with the fake libraries attached up front, plus `extra`.
pub fn run_all_jobs(extra: &[&str]) -> (i32, String, String) {
    let lib = fakecuda().join("lib");
    let mut args = all_jobs_args(&lib).to_vec();
    args.extend_from_slice(extra);
    run_daemon(&args)
}

/// [`run_daemon`] with extra environment variables.
pub fn run_daemon_env(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let state = TempDir::new("state");
    let mut child = Command::new(daemon_bin())
        .env("STATE_DIRECTORY", state.path())
        .envs(env.iter().copied())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start gpuprofd");
    let mut out = Lines::new(child.stdout.take().unwrap());
    let mut err = Lines::new(child.stderr.take().unwrap());
    let st = wait_bounded(&mut child);
    (
        st.code().unwrap_or(-1),
        out.rest().join("\n"),
        err.rest().join("\n"),
    )
}

/// A scripted workload process (tests/fakecuda/workload.c).
pub struct Workload {
    child: Child,
    stdin: Option<ChildStdin>,
    out: Lines,
    pub tgid: u32,
}

impl Workload {
    /// Starts `bin/<name>` with extra environment and waits for `ready <pid>`.
    pub fn spawn(name: &str, env: &[(&str, &str)]) -> Workload {
        Workload::spawn_with(name, env, None)
    }

    pub fn start() -> Workload {
        Workload::spawn("workload", &[])
    }

    /// Starts `bin/<name>` inside the cgroup `cg` (it moves itself there before exec, as Slurm,
    /// kubelet and container runtimes place their tasks).
    pub fn spawn_in(name: &str, cg: &Cgroup) -> Workload {
        Workload::spawn_with(name, &[], Some(cg.path()))
    }

    /// Starts an arbitrary command that ends up exec'ing a workload in the same process (e.g.
    /// `unshare -m sh -c '... && exec workload'`), and waits for its ready line.
    pub fn spawn_command(cmd: Command) -> Workload {
        Workload::spawn_prepared(cmd, "command", None)
    }

    fn spawn_with(name: &str, env: &[(&str, &str)], cgroup: Option<&Path>) -> Workload {
        let mut cmd = Command::new(fakecuda().join("bin").join(name));
        for (k, v) in env {
            cmd.env(k, v);
        }
        Workload::spawn_prepared(cmd, name, cgroup)
    }

    fn spawn_prepared(mut cmd: Command, name: &str, cgroup: Option<&Path>) -> Workload {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(cg) = cgroup {
            use std::os::unix::ffi::OsStrExt;
            use std::os::unix::process::CommandExt;
            let procs = std::ffi::CString::new(cg.join("cgroup.procs").as_os_str().as_bytes())
                .expect("cgroup path without NUL");
            // SAFETY: only async-signal-safe calls (open, write, close) between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
                    if fd < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    let n = libc::write(fd, b"0".as_ptr().cast(), 1);
                    let err = std::io::Error::last_os_error();
                    libc::close(fd);
                    if n != 1 {
                        return Err(err);
                    }
                    Ok(())
                });
            }
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("start workload {name}: {e}"));
        let stdin = child.stdin.take();
        let mut out = Lines::new(child.stdout.take().unwrap());
        let ready = out.wait_for("the workload's ready line", |l| l.starts_with("ready "));
        let tgid: u32 = ready[6..].trim().parse().expect("ready <pid>");
        assert_eq!(tgid, child.id());
        Workload {
            child,
            stdin,
            out,
            tgid,
        }
    }

    /// Sends one command and waits for its `ok`; panics on `err`.
    pub fn cmd(&mut self, line: &str) -> String {
        self.send(line);
        self.ok(line)
    }

    /// Sends one command without waiting for its reply (several workloads run at once this
    /// way); [`Workload::ok`] waits for it.
    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("workload stdin open");
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// Waits for the reply to `line` (sent with [`Workload::send`]); panics on `err`.
    pub fn ok(&mut self, line: &str) -> String {
        let name = line.split_whitespace().next().unwrap_or("").to_owned();
        let reply = self.out.wait_for(&format!("reply to `{line}`"), |l| {
            l.starts_with("ok ") || l.starts_with("err ")
        });
        assert!(
            reply.starts_with(&format!("ok {name}")),
            "`{line}` failed: {reply}"
        );
        reply
    }

    /// Runs several commands.
    pub fn script(&mut self, lines: &[&str]) {
        for l in lines {
            self.cmd(l);
        }
    }

    /// `exec PATH [ARG...]`: the process replaces its image (same pid). With `workload`, the
    /// new image is a workload (under any name): waits for its ready line, before which nothing
    /// more may be sent (the old image's input buffer goes with it). Otherwise returns at once.
    pub fn exec(&mut self, line: &str, workload: bool) {
        self.exec_by("exec", line, workload);
    }

    /// [`Workload::exec`] from a second thread (`exec_thread`): the kernel gives that thread
    /// the pid and ends the main thread.
    pub fn exec_thread(&mut self, line: &str) {
        self.exec_by("exec_thread", line, true);
    }

    fn exec_by(&mut self, how: &str, line: &str, workload: bool) {
        let stdin = self.stdin.as_mut().expect("workload stdin open");
        writeln!(stdin, "{how} {line}").unwrap();
        stdin.flush().unwrap();
        if workload {
            let ready = self.out.wait_for("the new image's ready line", |l| {
                l.starts_with("ready ") || l.starts_with("err ")
            });
            assert_eq!(ready, format!("ready {}", self.tgid), "exec {line}");
        }
    }

    /// Waits (bounded) for the process to end by itself.
    pub fn wait(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        wait_bounded(&mut self.child)
    }

    /// `count SYMBOL`: how many times the fake driver/runtime ran that function.
    pub fn count(&mut self, symbol: &str) -> u64 {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "count {symbol}").unwrap();
        stdin.flush().unwrap();
        let line = self
            .out
            .wait_for("count reply", |l| l.starts_with("count "));
        let n = line.rsplit(' ').next().unwrap().parse().unwrap();
        self.out.wait_for("ok count", |l| l.starts_with("ok count"));
        n
    }

    /// Sends `exit` and waits for the process to end.
    pub fn exit(mut self) {
        if let Some(mut s) = self.stdin.take() {
            let _ = writeln!(s, "exit");
        }
        let st = wait_bounded(&mut self.child);
        assert!(st.success(), "workload exited with {st}");
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The cgroup v2 mount point (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on hybrid hosts).
pub fn cgroup2_root() -> PathBuf {
    let text = std::fs::read_to_string("/proc/self/mountinfo").expect("read /proc/self/mountinfo");
    for line in text.lines() {
        // ... mount-point ... - fstype source options
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        if right.split_whitespace().next() == Some("cgroup2")
            && let Some(mp) = left.split_whitespace().nth(4)
        {
            return PathBuf::from(mp);
        }
    }
    panic!("no cgroup2 file system is mounted: the job-attribution tests need one")
}

/// A cgroup (v2) made for one test under `<root>/gpuprofd-test-<pid>-<n>/`, removed on drop.
pub struct Cgroup {
    base: PathBuf,
    path: PathBuf,
}

impl Cgroup {
    /// Creates `rel` (e.g. `job_77/step_0`) under a fresh per-test base.
    pub fn new(rel: &str) -> Cgroup {
        let base =
            cgroup2_root().join(format!("gpuprofd-test-{}-{}", std::process::id(), unique()));
        let path = base.join(rel);
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("create cgroup {}: {e}", path.display()));
        Cgroup { base, path }
    }
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// The path as `/proc/PID/cgroup` shows it (relative to the cgroup2 root).
    pub fn rel(&self) -> String {
        format!(
            "/{}",
            self.path
                .strip_prefix(cgroup2_root())
                .unwrap()
                .to_string_lossy()
        )
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Deepest first; a cgroup with live processes stays (and says so in the test log).
        let mut p = self.path.clone();
        while p.starts_with(&self.base) {
            if let Err(e) = std::fs::remove_dir(&p) {
                eprintln!("cgroup {} not removed: {e}", p.display());
                break;
            }
            if !p.pop() {
                break;
            }
        }
    }
}

/// A temporary directory removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!(
            "gpuprofd-test-{tag}-{}-{}",
            std::process::id(),
            unique()
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

// ---- report access -----------------------------------------------------------------------

/// The report's entry for `tgid`; panics with the list of processes when absent.
pub fn process(report: &Value, tgid: u32) -> &Value {
    let procs = report["processes"].as_array().expect("processes array");
    procs.iter().find(|p| p["tgid"] == tgid).unwrap_or_else(|| {
        let tgids: Vec<_> = procs.iter().map(|p| p["tgid"].clone()).collect();
        panic!("no process {tgid} in the report; processes: {tgids:?}")
    })
}

pub fn has_process(report: &Value, tgid: u32) -> bool {
    report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["tgid"] == tgid)
}

/// Kernel entries of a process with this demangled name.
pub fn kernels<'a>(p: &'a Value, name: &str) -> Vec<&'a Value> {
    p["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| k["name"] == name)
        .collect()
}

/// Total launches of kernels named `name`.
pub fn kernel_calls(p: &Value, name: &str) -> u64 {
    kernels(p, name)
        .iter()
        .map(|k| k["calls"].as_u64().unwrap())
        .sum()
}

/// The `api` entry for `name` (calls 0 when absent).
pub fn api<'a>(p: &'a Value, name: &str) -> Option<&'a Value> {
    p["api"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == name)
}

pub fn api_calls(p: &Value, name: &str) -> u64 {
    api(p, name)
        .map(|a| a["calls"].as_u64().unwrap())
        .unwrap_or(0)
}

/// The `copies` entry for a direction.
pub fn copies<'a>(p: &'a Value, direction: &str) -> Option<&'a Value> {
    p["copies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["direction"] == direction)
}

/// All API names with calls, sorted (for whole-sequence assertions).
pub fn api_table(p: &Value) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = p["api"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["name"].as_str().unwrap().to_owned(),
                a["calls"].as_u64().unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

// ---- the service's control socket ----------------------------------------------------------

/// `gpuprofd ctl ARGS` (optionally as another user, with that user's groups): exit code,
/// stdout, stderr.
pub fn ctl(bin: &Path, socket: &Path, args: &[&str], user: Option<&str>) -> (i32, String, String) {
    let mut c = match user {
        Some(u) => {
            let mut c = Command::new("setpriv");
            c.args([
                &format!("--reuid={u}"),
                &format!("--regid={u}"),
                "--init-groups",
                "--",
            ])
            .arg(bin);
            c
        }
        None => Command::new(bin),
    };
    let out = c
        .arg("ctl")
        .arg("--socket")
        .arg(socket)
        .args(args)
        .output()
        .expect("run gpuprofd ctl");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub fn ctl_json(bin: &Path, socket: &Path, args: &[&str], user: Option<&str>) -> Value {
    let (rc, out, err) = ctl(bin, socket, args, user);
    assert_eq!(rc, 0, "gpuprofd ctl {args:?} as {user:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("ctl {args:?}: {e}: {out}"))
}

/// Polls the service's live snapshot until process `tgid` shows `launches` (bounded); returns
/// that snapshot.
pub fn snapshot_when(bin: &Path, socket: &Path, tgid: u32, launches: u64) -> Value {
    snapshot_until(
        bin,
        socket,
        &format!("process {tgid} at {launches} launches"),
        |snap| has_process(snap, tgid) && process(snap, tgid)["launches"] == launches,
    )
}

/// The service's snapshot once `done` holds of it (bounded wait). Counted launches and ring
/// records reach the service on their own schedules (the counters are read every period, the
/// ring every 10 ms), so a test that needs both waits for both.
pub fn snapshot_until(
    bin: &Path,
    socket: &Path,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let snap = ctl_json(bin, socket, &["snapshot"], None);
        if done(&snap) {
            return snap;
        }
        assert!(Instant::now() < deadline, "never: {what}: {snap}");
        thread::sleep(Duration::from_millis(100));
    }
}

// ---- HTTP ------------------------------------------------------------------------------------

/// A TCP port free on loopback now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` over plain HTTP/1.1: (status line, body).
pub fn http_get(addr: &str, path: &str) -> Option<(String, String)> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut resp = String::new();
    std::io::Read::read_to_string(&mut s, &mut resp).ok()?;
    let (head, body) = resp.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_owned(), body.to_owned()))
}

/// What the injection library asks of the fake CUPTI when it enables (its `FAKECUPTI_LOG`
/// lines, in order): kernels, copies and memsets, then the driver API records of the eight launch calls
/// (cuLaunchKernel 307, _ptsz 442, Ex 652/653, cooperative 477/478, graph 514/515) with
/// `gettid` thread ids (type 1, SYSTEM).
pub const CUPTI_ENABLE: [&str; 16] = [
    "subscribe ok",
    "unsubscribe",
    "register",
    "enable 10",
    "enable 1",
    "enable 2",
    "threadidtype 1",
    "driverapi 307 1",
    "driverapi 442 1",
    "driverapi 652 1",
    "driverapi 653 1",
    "driverapi 477 1",
    "driverapi 478 1",
    "driverapi 514 1",
    "driverapi 515 1",
    "period 200",
];
