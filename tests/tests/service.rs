//! Service mode (`gpuprofd serve`) on real eBPF: systemd readiness and watchdog through a real
//! notify socket, SIGHUP reloads with a good and a bad file, SIGTERM, the control socket's
//! answers, and its authorisation with real unprivileged users created for the test.
//!
//! Run through `cargo xtask test` (as root, `--test-threads=1`).

use gpuprofd_tests::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

/// systemd's side of `sd_notify`: a datagram socket whose messages arrive on a channel.
struct NotifySocket {
    path: PathBuf,
    rx: Receiver<String>,
    seen: Vec<String>,
}

impl NotifySocket {
    fn new(dir: &Path) -> NotifySocket {
        let path = dir.join("notify.sock");
        let sock = UnixDatagram::bind(&path).expect("bind the notify socket");
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 4096];
            while let Ok(n) = sock.recv(&mut buf) {
                if tx
                    .send(String::from_utf8_lossy(&buf[..n]).into_owned())
                    .is_err()
                {
                    break;
                }
            }
        });
        NotifySocket {
            path,
            rx,
            seen: Vec::new(),
        }
    }

    /// The next message that starts with `prefix` (bounded wait); returns it.
    fn expect(&mut self, prefix: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(m) => {
                    self.seen.push(m.clone());
                    if m.starts_with(prefix) {
                        return m;
                    }
                }
                Err(_) => panic!(
                    "no sd_notify message starting with {prefix:?}; got {:?}",
                    self.seen
                ),
            }
        }
    }

    /// Messages other than watchdog keep-alives received so far and now (not waiting).
    fn states(&mut self) -> Vec<String> {
        while let Ok(m) = self.rx.try_recv() {
            self.seen.push(m);
        }
        self.seen
            .iter()
            .filter(|m| *m != "WATCHDOG=1")
            .cloned()
            .collect()
    }
}

/// What each of a process's descriptors points at (`socket:[…]`, `anon_inode:bpf-map`, a path).
fn fd_targets(pid: u32) -> Vec<String> {
    let mut targets: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .map(|t| t.to_string_lossy().into_owned())
        .collect();
    targets.sort();
    targets
}

/// The daemon's descriptors at rest and its resident size. A descriptor can be open for a moment
/// while the daemon serves a request that has already been answered (the client reads the reply
/// before the daemon's side of the connection is closed), so the descriptors are read several
/// times over half a second and the fewest seen are returned: one held for good is in every read.
fn footprint(pid: u32) -> (Vec<String>, u64) {
    let mut fds = fd_targets(pid);
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(100));
        let now = fd_targets(pid);
        if now.len() < fds.len() {
            fds = now;
        }
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    (fds, rss)
}

/// A running `gpuprofd ctl capture` (as `user`, or root), started once it says it captures.
struct DeepClient {
    child: Child,
    stderr: Lines,
}

impl DeepClient {
    fn start(bin: &Path, socket: &Path, args: &[&str], user: Option<&str>) -> DeepClient {
        let mut c = match user {
            Some(u) => {
                let mut c = Command::new("setpriv");
                c.arg(format!("--reuid={u}"))
                    .arg(format!("--regid={u}"))
                    .args(["--init-groups", "--"])
                    .arg(bin);
                c
            }
            None => Command::new(bin),
        };
        let mut child = c
            .args(["ctl", "--socket"])
            .arg(socket)
            .arg("capture")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start gpuprofd ctl capture");
        let mut stderr = Lines::new(child.stderr.take().unwrap());
        stderr.wait_for("the capture's start", |l| {
            l.contains("capturing") || l.contains("refused")
        });
        DeepClient { child, stderr }
    }

    /// `ctl capture --pid PID --duration 1h -o OUT`: runs until stopped.
    fn of_pid(bin: &Path, socket: &Path, pid: u32, out: &Path, user: Option<&str>) -> DeepClient {
        let pid = pid.to_string();
        let args = [
            "--pid",
            &pid,
            "--duration",
            "1h",
            "-o",
            out.to_str().unwrap(),
        ];
        DeepClient::start(bin, socket, &args, user)
    }

    /// Ctrl-C, as a user would stop it.
    fn interrupt(&self) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
    }

    /// Waits for the end (bounded): exit code and everything it said.
    fn finish(mut self) -> (i32, String) {
        let st = wait_bounded(&mut self.child);
        (st.code().unwrap_or(-1), self.stderr.rest().join("\n"))
    }
}

/// The report of a capture file, which must be complete (end frame in, nothing damaged).
fn complete_report(path: &Path) -> Value {
    let (code, out, err) = run_daemon(&["report", path.to_str().unwrap(), "--format", "json"]);
    assert_eq!(code, 0, "gpuprofd report {}: {err}", path.display());
    assert!(!err.contains("warning"), "{err}");
    serde_json::from_str(&out).expect("report is JSON")
}

fn config_text(lib: &Path, socket: &Path, extra: &str) -> String {
    format!(
        "[capture]\nlibs = [\"{}\"]\nsystem_libs = false\n\n[nvml]\nenabled = false\n\n\
         [metrics]\nenabled = false\n{extra}\n[control]\nsocket = \"{}\"\n",
        lib.display(),
        socket.display()
    )
}

#[test]
fn service_readiness_watchdog_reload_and_stop() {
    let dir = TempDir::new("serve");
    let bin = daemon_bin();
    let lib = fakecuda().join("lib");
    let socket = dir.path().join("ctl.sock");
    let config = dir.path().join("config.toml");
    std::fs::write(&config, config_text(&lib, &socket, "")).unwrap();
    let mut notify = NotifySocket::new(dir.path());
    let svc = Service::start(&config, Some(&notify.path));

    // Readiness comes after the probes are attached; keep-alives follow every half second.
    let ready = notify.expect("READY=1");
    assert_eq!(
        ready,
        "READY=1\nSTATUS=capturing: 140 probes on 2 CUDA libraries"
    );
    notify.expect("WATCHDOG=1");
    notify.expect("WATCHDOG=1");

    let mut w = Workload::start();
    w.script(&["rt_launch gemm 7 1 1 1 32 1 1 0 0", "rt_memcpy h2d 4096 2"]);
    // The launches are counted in the kernel, the copies come through the ring: both, then.
    let snap = snapshot_until(&bin, &socket, "7 launches and the copies", |snap| {
        has_process(snap, w.tgid)
            && process(snap, w.tgid)["launches"] == 7
            && copies(process(snap, w.tgid), "h2d").is_some_and(|c| c["calls"] == 2)
    });
    let p = process(&snap, w.tgid);
    assert_eq!(kernel_calls(p, GEMM), 7);
    assert_eq!(copies(p, "h2d").unwrap()["bytes"], 8192);
    assert_eq!(snap["schema"], "gpuprofd.report/1");
    let status = ctl_json(&bin, &socket, &["status"], None);
    assert_eq!(status["protocol"], "gpuprofd.ctl/1");
    assert_eq!(status["probes"], 140);
    assert_eq!(status["reloads"], 0);
    assert_eq!(status["config_file"], config.to_str().unwrap());
    assert_eq!(status["config"]["metrics"]["top_kernels"], 10);
    assert_eq!(status["config"]["metrics"]["per_process"], false);
    assert_eq!(status["you"]["role"], "admin");
    let (rc, table, _) = ctl(&bin, &socket, &["processes"], None);
    assert_eq!(rc, 0);
    let row = table
        .lines()
        .find(|l| l.trim_start().starts_with(&w.tgid.to_string()))
        .unwrap_or_else(|| panic!("no row for {} in\n{table}", w.tgid));
    // PID COMM JOB UID LAUNCHES COPIED BLOCKED STATE (the job depends on where CI runs us).
    let tok: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(tok[0], w.tgid.to_string(), "{row}");
    assert_eq!(tok[1], "workload", "{row}");
    assert_eq!(&tok[3..7], ["0", "7", "8.0", "KiB"], "{row}");
    assert_eq!(tok.last(), Some(&"running"), "{row}");
    // `gpuprofd top --once`: the live table, as `--all-jobs` prints it at the end.
    let top = std::process::Command::new(&bin)
        .args(["top", "--once", "--socket"])
        .arg(&socket)
        .output()
        .unwrap();
    assert!(top.status.success());
    let top = String::from_utf8_lossy(&top.stdout);
    assert!(
        top.lines()
            .any(|l| l == format!("process {} workload", w.tgid)),
        "{top}"
    );
    assert!(top.contains("kernel launches 7 (0 unnamed)"), "{top}");
    // `gpuprofd report --live`: the views of a capture file, on the service's snapshot.
    let pid = w.tgid.to_string();
    let sock = socket.to_str().unwrap();
    let live = [
        "report", "--live", "--socket", sock, "--view", "kernels", "--pid", &pid,
    ];
    let (code, out, err) = run_daemon(&[&live[..], &["--format", "json"]].concat());
    assert_eq!(code, 0, "{err}");
    let rows: Value = serde_json::from_str(&out).unwrap();
    let rows: Vec<(String, u64)> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["kernel"].as_str().unwrap().to_owned(),
                r["calls"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(rows, [(GEMM.to_owned(), 7)]);
    let (code, _, err) = run_daemon(&["report", "--live", "--socket", sock, "--view", "steps"]);
    assert_eq!(code, 2);
    assert!(err.contains("gpuprofd ctl capture --pid PID"), "{err}");

    // A good reload: the reloadable keys now, the others named as waiting for a restart.
    std::fs::write(
        &config,
        config_text(
            &lib,
            &socket,
            "top_kernels = 3\nper_process = true\n\n[log]\nlevel = \"debug\"\n",
        )
        .replace(
            "system_libs = false\n",
            "system_libs = false\nring_buffer_mb = 32\n",
        ),
    )
    .unwrap();
    svc.signal(libc::SIGHUP);
    notify.expect("RELOADING=1\nMONOTONIC_USEC=");
    assert_eq!(
        notify.expect("READY=1"),
        "READY=1\nSTATUS=configuration reloaded"
    );
    let status = ctl_json(&bin, &socket, &["status"], None);
    assert_eq!(status["reloads"], 1);
    assert_eq!(status["failed_reloads"], 0);
    assert_eq!(status["config"]["metrics"]["top_kernels"], 3);
    assert_eq!(status["config"]["metrics"]["per_process"], true);
    assert_eq!(status["config"]["log"]["level"], "debug");
    assert_eq!(status["config"]["capture"]["ring_buffer_mb"], 16);
    assert_eq!(
        status["pending_restart"],
        serde_json::json!(["capture.ring_buffer_mb"])
    );

    // A bad reload keeps everything as it was, says why, and capture goes on.
    std::fs::write(&config, "[metrics]\ntop_kernel = 5\n").unwrap();
    svc.signal(libc::SIGHUP);
    notify.expect("RELOADING=1");
    assert_eq!(
        notify.expect("READY=1"),
        "READY=1\nSTATUS=reload refused; the running configuration is unchanged"
    );
    let (rc, _, err) = ctl(&bin, &socket, &["reload"], None);
    assert_eq!(rc, 13, "{err}");
    assert!(
        err.contains("line 2, column 1: unknown field `top_kernel`")
            && err.contains("the running configuration is unchanged"),
        "{err}"
    );
    let status = ctl_json(&bin, &socket, &["status"], None);
    assert_eq!(status["reloads"], 1);
    assert_eq!(status["failed_reloads"], 2);
    assert_eq!(status["config"]["metrics"]["top_kernels"], 3);
    w.cmd("rt_launch gemm 2 1 1 1 32 1 1 0 0");
    snapshot_when(&bin, &socket, w.tgid, 9);

    // A deep capture of the workload, ended by Ctrl-C on the client: only what happened while it
    // ran, its kernels named although they were registered before it started.
    let early = dir.path().join("early.gpuprof");
    let client = DeepClient::of_pid(&bin, &socket, w.tgid, &early, None);
    w.script(&["rt_launch gemm 3 1 1 1 32 1 1 0 0", "rt_memcpy h2d 512 1"]);
    snapshot_when(&bin, &socket, w.tgid, 12);
    client.interrupt();
    let (rc, said) = client.finish();
    assert_eq!(rc, 0, "{said}");
    let r = complete_report(&early);
    let p = process(&r, w.tgid);
    assert_eq!(p["launches"], 3, "{r}");
    assert_eq!(kernel_calls(p, GEMM), 3);
    assert_eq!(copies(p, "h2d").unwrap()["bytes"], 512);
    assert_eq!(p["comm"], "workload");

    // Another one still running when the daemon is told to stop: its file is complete too.
    let late = dir.path().join("late.gpuprof");
    let client = DeepClient::of_pid(&bin, &socket, w.tgid, &late, None);
    w.cmd("rt_launch gemm 2 1 1 1 32 1 1 0 0");
    snapshot_when(&bin, &socket, w.tgid, 14);

    // SIGTERM: STOPPING=1, a clean exit, the socket file gone.
    let (st, stderr) = svc.stop();
    assert!(st.success(), "{st}: {}", stderr.join("\n"));
    notify.expect("STOPPING=1\nSTATUS=stopping: terminated");
    let (rc, said) = client.finish();
    assert_eq!(rc, 0, "{said}");
    let r = complete_report(&late);
    assert_eq!(process(&r, w.tgid)["launches"], 2, "{r}");
    assert!(!socket.exists(), "the control socket is removed at exit");
    let log = stderr.join("\n");
    assert!(
        log.contains("reload refused; keeping the running configuration")
            && log.contains("unknown field `top_kernel`"),
        "{log}"
    );
    assert!(
        log.contains("configuration reloaded") && log.contains("capture.ring_buffer_mb"),
        "{log}"
    );
    // Every state change, in order (keep-alives aside).
    let states: Vec<String> = notify
        .states()
        .iter()
        .map(|m| m.lines().next().unwrap().to_owned())
        .filter(|m| !m.starts_with("MONOTONIC"))
        .collect();
    assert_eq!(
        states,
        [
            "READY=1",
            "RELOADING=1",
            "READY=1",
            "RELOADING=1",
            "READY=1",
            "RELOADING=1",
            "READY=1",
            "STOPPING=1"
        ]
    );
    w.exit();
}

/// Users and a group made for the test, removed again at the end (also after a failure).
struct Accounts {
    users: Vec<String>,
    group: String,
}

impl Accounts {
    fn create(group: &str, users: &[(&str, bool)]) -> Accounts {
        let mut a = Accounts {
            users: Vec::new(),
            group: group.to_owned(),
        };
        a.remove(users.iter().map(|u| u.0));
        run(Command::new("groupadd").arg(group));
        for (u, member) in users {
            let mut c = Command::new("useradd");
            c.args(["--no-create-home", "--user-group", "--shell", "/bin/sh"]);
            if *member {
                c.args(["--groups", group]);
            }
            run(c.arg(u));
            a.users.push((*u).to_owned());
        }
        a
    }

    fn remove<'a>(&self, users: impl Iterator<Item = &'a str>) {
        for u in users {
            let _ = Command::new("userdel")
                .arg(u)
                .stderr(Stdio::null())
                .status();
        }
        let _ = Command::new("groupdel")
            .arg(&self.group)
            .stderr(Stdio::null())
            .status();
    }

    fn uid(&self, user: &str) -> u32 {
        let out = Command::new("id").args(["-u", user]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    }
}

impl Drop for Accounts {
    fn drop(&mut self) {
        let users = self.users.clone();
        self.remove(users.iter().map(String::as_str));
    }
}

fn run(c: &mut Command) {
    let st = c.status().unwrap_or_else(|e| panic!("{c:?}: {e}"));
    assert!(st.success(), "{c:?}: {st}");
}

/// The processes `ctl processes --json` shows: (pid, owner).
fn visible(bin: &Path, socket: &Path, user: Option<&str>) -> Vec<(u64, Option<u64>)> {
    let rows = ctl_json(bin, socket, &["processes", "--json"], user);
    let mut v: Vec<(u64, Option<u64>)> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["pid"].as_u64().unwrap(), r["owner"].as_u64()))
        .collect();
    v.sort();
    v
}

#[test]
fn the_control_socket_answers_each_user_by_the_kernels_word() {
    let accounts = Accounts::create(
        "gpuprofd-t-ops",
        &[
            ("gpuprofd-t-alice", false),
            ("gpuprofd-t-bob", true),
            ("gpuprofd-t-carol", false),
        ],
    );
    let alice = accounts.uid("gpuprofd-t-alice");
    // Everything the other users run lives where they can read it (the checkout may not be).
    let dir = TempDir::new("authz");
    let tree = dir.path();
    for sub in ["bin", "lib"] {
        std::fs::create_dir_all(tree.join(sub)).unwrap();
    }
    std::fs::copy(daemon_bin(), tree.join("bin/gpuprofd")).unwrap();
    std::fs::copy(fakecuda().join("bin/workload"), tree.join("bin/workload")).unwrap();
    for l in ["libcuda.so.1", "libcudart.so.12"] {
        std::fs::copy(fakecuda().join("lib").join(l), tree.join("lib").join(l)).unwrap();
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(tree, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = tree.join("bin/gpuprofd");
    let socket = tree.join("ctl.sock");
    let config = tree.join("config.toml");
    std::fs::write(
        &config,
        config_text(&tree.join("lib"), &socket, "")
            .replace("socket = ", "group = \"gpuprofd-t-ops\"\nsocket = "),
    )
    .unwrap();
    let mut notify = NotifySocket::new(tree);
    let svc = Service::start(&config, Some(&notify.path));
    notify.expect("READY=1");
    assert_eq!(
        std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777,
        0o666,
        "any local user may connect; each request is authorised"
    );

    // One CUDA process of root's, one of alice's.
    let workload = tree.join("bin/workload");
    let mut mine = Workload::spawn_command(Command::new(&workload));
    let mut theirs = {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=gpuprofd-t-alice",
            "--regid=gpuprofd-t-alice",
            "--init-groups",
            "--",
        ])
        .arg(&workload);
        Workload::spawn_command(c)
    };
    mine.cmd("rt_launch gemm 3 1 1 1 32 1 1 0 0");
    theirs.cmd("rt_launch gemm 5 1 1 1 32 1 1 0 0");
    snapshot_when(&bin, &socket, mine.tgid, 3);
    snapshot_when(&bin, &socket, theirs.tgid, 5);
    let (m, t) = (mine.tgid as u64, theirs.tgid as u64);
    let both = {
        let mut v = vec![(m, Some(0)), (t, Some(alice as u64))];
        v.sort();
        v
    };

    // root and a member of control.group: everything.
    assert_eq!(visible(&bin, &socket, None), both);
    assert_eq!(visible(&bin, &socket, Some("gpuprofd-t-bob")), both);
    let s = ctl_json(&bin, &socket, &["status"], Some("gpuprofd-t-bob"));
    assert_eq!(s["you"]["role"], "admin");
    let (rc, _, err) = ctl(&bin, &socket, &["reload"], Some("gpuprofd-t-bob"));
    assert_eq!(rc, 0, "{err}");
    // alice: her own process only, in the snapshot too (and its job totals are hers alone).
    assert_eq!(
        visible(&bin, &socket, Some("gpuprofd-t-alice")),
        [(t, Some(alice as u64))]
    );
    let snap = ctl_json(&bin, &socket, &["snapshot"], Some("gpuprofd-t-alice"));
    let pids: Vec<u64> = snap["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["tgid"].as_u64().unwrap())
        .collect();
    assert_eq!(pids, [t]);
    assert_eq!(kernel_calls(process(&snap, theirs.tgid), GEMM), 5);
    let s = ctl_json(&bin, &socket, &["status"], Some("gpuprofd-t-alice"));
    assert_eq!(s["you"]["role"], "user");
    assert_eq!(s["you"]["uid"], alice);
    assert!(s.get("config").is_none(), "{s}");
    let (rc, _, err) = ctl(&bin, &socket, &["reload"], Some("gpuprofd-t-alice"));
    assert_eq!(rc, 13);
    assert!(
        err.contains(&format!(
            "reload is for root and members of group \"gpuprofd-t-ops\" (you are uid {alice})"
        )),
        "{err}"
    );
    // alice captures her own process into her own file; not root's process, not a job.
    let out = tree.join("alice");
    std::fs::create_dir(&out).unwrap();
    std::os::unix::fs::chown(&out, Some(alice), None).unwrap();
    let mine_file = out.join("mine.gpuprof");
    let alice_user = Some("gpuprofd-t-alice");
    let client = DeepClient::of_pid(&bin, &socket, theirs.tgid, &mine_file, alice_user);
    theirs.cmd("rt_launch gemm 4 1 1 1 32 1 1 0 0");
    snapshot_when(&bin, &socket, theirs.tgid, 9);
    client.interrupt();
    let (rc, said) = client.finish();
    assert_eq!(rc, 0, "{said}");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(&mine_file).unwrap().uid(),
        alice,
        "the file is hers"
    );
    let r = complete_report(&mine_file);
    assert_eq!(kernel_calls(process(&r, theirs.tgid), GEMM), 4);
    let refused = |args: &[&str], why: &str| {
        let (rc, said) = DeepClient::start(&bin, &socket, args, Some("gpuprofd-t-alice")).finish();
        assert_eq!(rc, 13, "{said}");
        assert!(said.contains(why), "{said}");
    };
    let root_pid = m.to_string();
    let f = out.join("root.gpuprof");
    refused(
        &["--pid", &root_pid, "-o", f.to_str().unwrap()],
        &format!("process {m} is not yours (you are uid {alice})"),
    );
    assert!(!f.exists(), "a refused capture leaves no file");
    refused(
        &["--job", "anything", "-o", f.to_str().unwrap()],
        "capturing a whole job is for root and members of control.group",
    );

    // carol: nothing of anyone else's.
    assert_eq!(visible(&bin, &socket, Some("gpuprofd-t-carol")), []);
    let (rc, _, _) = ctl(&bin, &socket, &["reload"], Some("gpuprofd-t-carol"));
    assert_eq!(rc, 13);

    // alice's process ends: she still sees it (owner kept), carol still does not.
    theirs.exit();
    let deadline = Instant::now() + WAIT;
    loop {
        let snap = ctl_json(&bin, &socket, &["snapshot"], Some("gpuprofd-t-alice"));
        if process(&snap, t as u32)["exited"] == true {
            break;
        }
        assert!(Instant::now() < deadline, "exit never seen: {snap}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        visible(&bin, &socket, Some("gpuprofd-t-alice")),
        [(t, Some(alice as u64))]
    );
    assert_eq!(visible(&bin, &socket, Some("gpuprofd-t-carol")), []);

    // A short process of alice's that is over before the daemon looks at it (the daemon is
    // stopped meanwhile): procfs cannot say whose it was; the kernel's end record does.
    let script = tree.join("short.script");
    std::fs::write(&script, "rt_launch gemm 4 1 1 1 32 1 1 0 0\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    svc.signal(libc::SIGSTOP);
    let short = Command::new("setpriv")
        .args([
            "--reuid=gpuprofd-t-alice",
            "--regid=gpuprofd-t-alice",
            "--init-groups",
            "--",
        ])
        .arg(&workload)
        .stdin(std::fs::File::open(&script).unwrap())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let short_pid = short.id() as u64;
    let out = short.wait_with_output().unwrap();
    assert!(out.status.success());
    svc.signal(libc::SIGCONT);
    let deadline = Instant::now() + WAIT;
    let seen = loop {
        let v = visible(&bin, &socket, Some("gpuprofd-t-alice"));
        if v.iter().any(|r| r.0 == short_pid) {
            break v;
        }
        assert!(
            Instant::now() < deadline,
            "the short process never showed: {v:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut expect = vec![(t, Some(alice as u64)), (short_pid, Some(alice as u64))];
    expect.sort();
    assert_eq!(seen, expect);
    assert_eq!(visible(&bin, &socket, Some("gpuprofd-t-carol")), []);
    let (st, stderr) = svc.stop();
    assert!(st.success(), "{}", stderr.join("\n"));
    mine.exit();
    drop(accounts);
}

/// Socket activation (`gpuprofd.socket`, `gpuprofd-metrics.socket`): systemd holds the control
/// socket and the Prometheus port, so that the port stays the daemon's while it is down, and
/// hands both over at start. The daemon tells them apart by family (here the TCP one comes
/// first), serves on them and binds neither the configured socket path nor metrics.listen.
#[test]
fn sockets_handed_over_by_systemd_are_the_ones_served() {
    use std::os::fd::AsRawFd;
    let dir = TempDir::new("activated");
    let bin = daemon_bin();
    let lib = fakecuda().join("lib");
    let configured_socket = dir.path().join("ctl.sock");
    let passed_socket = dir.path().join("passed.sock");
    let metrics = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = metrics.local_addr().unwrap().to_string();
    let control = std::os::unix::net::UnixListener::bind(&passed_socket).unwrap();
    let configured_port = free_port();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        config_text(&lib, &configured_socket, "").replace(
            "[metrics]\nenabled = false\n",
            &format!(
                "[metrics]\nenabled = true\nlisten = \"127.0.0.1:{configured_port}\"\n\
                 per_process = true\n"
            ),
        ),
    )
    .unwrap();
    let mut svc = Service::start_activated(&config, &[metrics.as_raw_fd(), control.as_raw_fd()]);
    svc.stderr
        .wait_for("ready", |l| l.contains("gpuprofd: ready:"));
    let seen = svc.stderr.seen.join("\n");
    assert!(
        seen.contains(&format!(
            "serving Prometheus metrics on http://{addr}/metrics"
        )),
        "{seen}"
    );
    assert!(
        seen.contains("metrics are served on the socket systemd passed, not on metrics.listen"),
        "{seen}"
    );

    let mut w = Workload::start();
    w.script(&["rt_launch gemm 7 1 1 1 32 1 1 0 0"]);
    let snap = snapshot_until(&bin, &passed_socket, "7 launches", |snap| {
        has_process(snap, w.tgid) && process(snap, w.tgid)["launches"] == 7
    });
    assert_eq!(kernel_calls(process(&snap, w.tgid), GEMM), 7);
    let pid = format!("pid=\"{}\"", w.tgid);
    let body = scrape(&addr);
    let launches: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("gpuprofd_kernel_launches_total{") && l.contains(&pid))
        .collect();
    assert_eq!(launches.len(), 1, "{body}");
    assert!(launches[0].ends_with(" 7"), "{}", launches[0]);
    // Neither configured address was bound.
    assert!(!configured_socket.exists());
    assert_eq!(
        std::net::TcpStream::connect(("127.0.0.1", configured_port))
            .map_err(|e| e.kind())
            .err(),
        Some(std::io::ErrorKind::ConnectionRefused)
    );
    let (st, stderr) = svc.stop();
    assert!(st.success(), "{}", stderr.join("\n"));
    w.exit();
}

/// `GET /metrics`: the body.
fn scrape(addr: &str) -> String {
    let (status, body) = http_get(addr, "/metrics").expect("an HTTP response from /metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    body
}

/// The distinct `pid` label values in an exposition.
fn pid_labels(body: &str) -> Vec<u32> {
    let mut v: Vec<u32> = body
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split("pid=\"").nth(1))
        .filter_map(|rest| rest.split('"').next())
        .map(|p| p.parse().unwrap())
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Entries in each of the eBPF object's per-process and per-thread maps, as `ctl status` says.
fn map_fill(bin: &Path, socket: &Path) -> BTreeMap<String, u64> {
    let status = ctl_json(bin, socket, &["status"], None);
    status["bpf_maps"]
        .as_array()
        .unwrap_or_else(|| panic!("no bpf_maps in the status: {status}"))
        .iter()
        .map(|m| {
            (
                m["map"].as_str().unwrap().to_owned(),
                m["entries"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Short CUDA processes the churn test runs, and over how long (`GPUPROFD_CHURN_SECONDS`, 0 =
/// as fast as they go; `cargo xtask reliability --soak` spreads them over 10 minutes).
const CHURN_PROCESSES: usize = 10_000;
const CHURN_ROUNDS: usize = 10;

#[test]
fn ten_thousand_short_processes_leave_nothing_behind() {
    let dir = TempDir::new("churn");
    let bin = daemon_bin();
    let socket = dir.path().join("ctl.sock");
    let config = dir.path().join("config.toml");
    let addr = format!("127.0.0.1:{}", free_port());
    let seconds: f64 = std::env::var("GPUPROFD_CHURN_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    std::fs::write(
        &config,
        config_text(&fakecuda().join("lib"), &socket, "").replace(
            "[metrics]\nenabled = false\n",
            &format!("[metrics]\nlisten = \"{addr}\"\nexpire_after = \"1s\"\nper_process = true\n"),
        ),
    )
    .unwrap();
    let mut notify = NotifySocket::new(dir.path());
    let svc = Service::start(&config, Some(&notify.path));
    notify.expect("READY=1");
    // Two long processes: one launching on its main thread, one from threads that come and go
    // (each round's threads exit, so their per-thread state must go with them).
    let mut long = Workload::start();
    let mut threads = Workload::start();
    let step = |long: &mut Workload, threads: &mut Workload| {
        long.cmd("rt_launch gemm 1 1 1 1 32 1 1 0 0");
        threads.script(&["storm 2 1", "rt_memcpy h2d 4096 1"]);
    };
    long.cmd("rt_launch gemm 2 1 1 1 32 1 1 0 0");
    step(&mut long, &mut threads);
    snapshot_when(&bin, &socket, long.tgid, 3);
    snapshot_when(&bin, &socket, threads.tgid, 2);
    // The status's map fill is refreshed once a second: two refreshes later it counts them.
    std::thread::sleep(Duration::from_millis(2500));
    let fill0 = map_fill(&bin, &socket);

    // Each short process: a launch, a blocking copy (return probes), two threads launching.
    let script = dir.path().join("one.script");
    std::fs::write(
        &script,
        "rt_launch gemm 1 1 1 1 32 1 1 0 0\nrt_memcpy h2d 4096 1\nstorm 2 1\n",
    )
    .unwrap();
    let started = Instant::now();
    let mut done = 0usize;
    let mut short = |n: usize| {
        for _ in 0..n {
            if seconds > 0.0 {
                let due = Duration::from_secs_f64(seconds * done as f64 / CHURN_PROCESSES as f64);
                if let Some(wait) = due.checked_sub(started.elapsed()) {
                    std::thread::sleep(wait);
                }
            }
            let st = Command::new(fakecuda().join("bin/workload"))
                .stdin(std::fs::File::open(&script).unwrap())
                .stdout(Stdio::null())
                .status()
                .unwrap();
            assert!(st.success());
            done += 1;
        }
    };
    // Ended processes leave the snapshot a second after their end: the two long ones remain.
    let settled = |what: &str| {
        let deadline = Instant::now() + WAIT;
        loop {
            let snap = ctl_json(&bin, &socket, &["snapshot"], None);
            if snap["processes"].as_array().unwrap().len() == 2 {
                return snap;
            }
            assert!(
                Instant::now() < deadline,
                "ended processes stayed {what}: {snap}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    };
    // The maps hold what the live processes hold, no more: ended threads and processes leave
    // nothing (a count taken while another process on the node may be mid-mmap: retried).
    let same_fill = |what: &str| {
        let deadline = Instant::now() + WAIT;
        loop {
            let fill = map_fill(&bin, &socket);
            if fill == fill0 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "BPF map entries {what}: {fill:?}, with only the long processes before: {fill0:?}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    };

    // Round 0 warms up (caches, buffers, the allocator's high-water marks); then the
    // footprint after every round of the rest.
    let per_round = CHURN_PROCESSES / CHURN_ROUNDS;
    let mut footprints = Vec::new();
    let mut fd_sets = Vec::new();
    for round in 0..CHURN_ROUNDS {
        short(per_round);
        step(&mut long, &mut threads);
        settled(&format!("after round {round}"));
        same_fill(&format!(
            "after {} short processes",
            (round + 1) * per_round
        ));
        let (fds, rss) = footprint(svc.pid());
        let heap = ctl_json(&bin, &socket, &["status"], None)["heap_in_use_bytes"]
            .as_u64()
            .expect("the daemon's heap in use") as i64;
        footprints.push((fds.len(), rss, heap >> 10));
        fd_sets.push(fds);
    }
    let elapsed = started.elapsed().as_secs_f64();

    // The long processes' counters are whole and nothing was lost.
    let launches = 3 + CHURN_ROUNDS as u64;
    let rounds = CHURN_ROUNDS as u64;
    let snap = snapshot_until(&bin, &socket, "both long processes' last round", |snap| {
        has_process(snap, long.tgid)
            && has_process(snap, threads.tgid)
            && process(snap, long.tgid)["launches"] == launches
            && process(snap, threads.tgid)["launches"] == 2 * (1 + rounds)
            && copies(process(snap, threads.tgid), "h2d").is_some_and(|c| c["calls"] == 1 + rounds)
    });
    assert_eq!(kernel_calls(process(&snap, long.tgid), GEMM), launches);
    let t = process(&snap, threads.tgid);
    assert_eq!(t["launches"], 2 * (1 + CHURN_ROUNDS as u64));
    let h2d = copies(t, "h2d").expect("the threaded process's copies");
    assert_eq!(h2d["calls"], 1 + CHURN_ROUNDS as u64);
    assert_eq!(h2d["bytes"], 4096 * (1 + CHURN_ROUNDS as u64));
    let lost: u64 = snap["drops"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(lost, 0, "{}", snap["drops"]);
    let mut both = vec![long.tgid, threads.tgid];
    both.sort_unstable();
    assert_eq!(pid_labels(&scrape(&addr)), both);

    // Nothing held per ended process: the same descriptors after every round, and the heap in
    // use flat once warm — a KiB kept per process would add 8 MiB over the rounds measured. (The
    // resident size also holds free memory between the daemon's trims every 10 s: printed,
    // bounded loosely.)
    let (fds0, rss0, heap0) = footprints[1];
    let heap_max = footprints[1..].iter().map(|f| f.2).max().unwrap();
    let rss_max = footprints[1..].iter().map(|f| f.1).max().unwrap();
    eprintln!(
        "reliability: churn: {} short CUDA processes (3 threads each) in {elapsed:.0} s next to 2 \
         long ones; after each {per_round}: daemon fds {:?}, heap in use KiB {:?}, RSS KiB {:?}; \
         BPF map entries after each round as with the long ones alone: {fill0:?}",
        CHURN_PROCESSES,
        footprints.iter().map(|f| f.0).collect::<Vec<_>>(),
        footprints.iter().map(|f| f.2).collect::<Vec<_>>(),
        footprints.iter().map(|f| f.1).collect::<Vec<_>>(),
    );
    for (round, &(fds, ..)) in footprints.iter().enumerate().skip(1) {
        let gained: Vec<_> = fd_sets[round]
            .iter()
            .filter(|t| !fd_sets[1].contains(t))
            .collect();
        assert_eq!(
            fds, fds0,
            "descriptors after round {round} (new since round 1: {gained:?}): {footprints:?}"
        );
    }
    assert!(
        heap_max <= heap0 + 1024,
        "the heap in use grew from {heap0} to {heap_max} KiB after warm-up: {footprints:?}"
    );
    assert!(
        rss_max <= rss0 + 64 * 1024,
        "RSS grew from {rss0} to {rss_max} KiB after warm-up: {footprints:?}"
    );
    // The live dashboard at / shows the same, drawn by a real browser.
    let dom = chromium_url(&format!("http://{addr}/"), "service-dashboard");
    assert!(dom.contains("data-rendered=\"yes\""), "{dom}");
    assert!(dom.contains("<title>gpuprofd live</title>"), "{dom}");
    assert!(
        dom.contains(&format!(
            "<td class=\"\" data-k=\"pid\">{}</td><td class=\"l\" data-k=\"name\">{GEMM}</td>\
             <td class=\"\" data-k=\"calls\">{launches}</td>",
            long.tgid
        )),
        "{dom}"
    );
    assert!(dom.contains("<td data-k=\"processes\">2</td>"), "{dom}");
    assert!(
        dom.contains("data-pid=\"0\""),
        "the launch-rate chart is drawn: {dom}"
    );
    let (st, stderr) = svc.stop();
    assert!(st.success(), "{}", stderr.join("\n"));
    long.exit();
    threads.exit();
}
