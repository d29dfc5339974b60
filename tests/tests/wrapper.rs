//! `gpuprofd [options] -- COMMAND` behaves as a wrapper: the command's exit status is
//! gpuprofd's, SIGTERM reaches the command, the command runs as the user who ran sudo (or
//! `--user`), and only the command's process tree is captured unless `--all-jobs` says
//! otherwise. Real eBPF on the fake CUDA libraries.
//!
//! Run through `cargo xtask test` (as root, `--test-threads=1`).

use gpuprofd_tests::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// gpuprofd with the fake libraries, no NVML, no live lines, `extra` options, then `-- argv`.
fn wrapper(extra: &[&str], argv: &[&str]) -> Command {
    require_bpf();
    let lib = fakecuda().join("lib");
    let mut c = Command::new(daemon_bin());
    c.args([
        "--no-system-libs",
        "--no-nvml",
        "--no-live",
        "--no-state",
        "--lib",
    ])
    .arg(&lib)
    .args(extra)
    .arg("--")
    .args(argv)
    .stdin(Stdio::null());
    c
}

/// Runs to the end: (exit code, stdout, stderr).
fn run(mut c: Command) -> (i32, String, String) {
    let out = c.output().expect("run gpuprofd");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Waits (bounded) until `path` exists.
fn wait_for_file(path: &Path) {
    let deadline = Instant::now() + WAIT;
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn sh(script: &str) -> [&str; 3] {
    ["/bin/sh", "-c", script]
}

#[test]
fn the_exit_status_is_the_commands() {
    for (script, want) in [("exit 0", 0), ("exit 3", 3), ("kill -KILL $$", 137)] {
        let (rc, _, err) = run(wrapper(&[], &sh(script)));
        assert_eq!(rc, want, "`{script}`: {err}");
        assert!(err.contains("gpuprofd: ready"), "{err}");
    }
    // A command that cannot start: gpuprofd's own code (8), nothing ran.
    let (rc, _, err) = run(wrapper(&[], &["/nonexistent/train"]));
    assert_eq!(rc, 8, "{err}");
}

#[test]
fn sigterm_is_passed_on_and_the_report_is_written_after_the_command_ends() {
    let dir = TempDir::new("wrap-term");
    let (started, got) = (dir.path().join("started"), dir.path().join("got"));
    let report = dir.path().join("report.json");
    let script = format!(
        "trap 'echo term > {}; exit 42' TERM; touch {}; while :; do sleep 0.05; done",
        got.display(),
        started.display()
    );
    let mut c = wrapper(&["-o", report.to_str().unwrap()], &sh(&script));
    let mut child = c
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = Lines::new(child.stderr.take().unwrap());
    wait_for_file(&started);
    // SAFETY: plain kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let st = wait_bounded(&mut child);
    let err = err.rest().join("\n");
    assert_eq!(st.code(), Some(42), "{err}");
    assert_eq!(std::fs::read_to_string(&got).unwrap(), "term\n");
    assert!(
        err.contains("SIGTERM: passed on to the command (pid "),
        "{err}"
    );
    assert!(
        err.contains("command exited (exit status 42)"),
        "the capture ends with the command: {err}"
    );
    let r = read_report(&report);
    assert_eq!(r["schema"], "gpuprofd.report/1");
    assert_eq!(r["processes"], serde_json::json!([]));
}

/// A user and a group it belongs to (besides its own), removed at the end.
struct Account {
    user: &'static str,
    group: &'static str,
}

impl Account {
    fn create() -> Account {
        let a = Account {
            user: "gpuprofd-t-wrap",
            group: "gpuprofd-t-wrapg",
        };
        a.remove();
        let ok = |c: &mut Command| assert!(c.status().unwrap().success(), "{c:?}");
        ok(Command::new("groupadd").arg(a.group));
        ok(Command::new("useradd").args([
            "--no-create-home",
            "--user-group",
            "--shell",
            "/bin/sh",
            "--groups",
            a.group,
            a.user,
        ]));
        a
    }

    fn id(&self, flag: &str, name: &str) -> u32 {
        let out = Command::new("id").args([flag, name]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    }

    fn gid_of(&self, group: &str) -> u32 {
        let out = Command::new("getent")
            .args(["group", group])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .split(':')
            .nth(2)
            .unwrap()
            .parse()
            .unwrap()
    }

    fn remove(&self) {
        let _ = Command::new("userdel")
            .arg(self.user)
            .stderr(Stdio::null())
            .status();
        let _ = Command::new("groupdel")
            .arg(self.group)
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for Account {
    fn drop(&mut self) {
        self.remove();
    }
}

#[test]
fn the_command_runs_as_the_user_who_ran_sudo_or_the_one_named() {
    let a = Account::create();
    let (uid, gid) = (a.id("-u", a.user), a.id("-g", a.user));
    let extra_gid = a.gid_of(a.group);
    let dir = TempDir::new("wrap-user");
    let who = dir.path().join("who");
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let script = format!(
        "echo \"$(id -u) $(id -g) $(id -G | tr ' ' '\\n' | sort -n | tr '\\n' ' ')$HOME $USER $LOGNAME\" > {}",
        who.display()
    );
    let mut groups = [gid, extra_gid];
    groups.sort();
    let want = format!(
        "{uid} {gid} {} {} /home/{u} {u} {u}\n",
        groups[0],
        groups[1],
        u = a.user
    );
    // Under sudo: the invoking user's uid, gid and groups; HOME, USER, LOGNAME as a login's.
    let mut c = wrapper(&[], &sh(&script));
    c.env("SUDO_UID", uid.to_string())
        .env("SUDO_GID", gid.to_string())
        .env("SUDO_USER", a.user)
        .env("HOME", "/root")
        .env("USER", "root");
    let (rc, _, err) = run(c);
    assert_eq!(rc, 0, "{err}");
    assert_eq!(std::fs::read_to_string(&who).unwrap(), want);
    std::fs::remove_file(&who).unwrap();
    // --user by name, without sudo.
    let (rc, _, err) = run(wrapper(&["--user", a.user], &sh(&script)));
    assert_eq!(rc, 0, "{err}");
    assert_eq!(std::fs::read_to_string(&who).unwrap(), want);
    std::fs::remove_file(&who).unwrap();
    // No sudo, no --user: as gpuprofd runs (root).
    let (rc, _, err) = run(wrapper(&[], &sh(&format!("id -u > {}", who.display()))));
    assert_eq!(rc, 0, "{err}");
    assert_eq!(std::fs::read_to_string(&who).unwrap(), "0\n");
    // A user that does not exist: refused before anything runs.
    let (rc, _, err) = run(wrapper(&["--user", "gpuprofd-t-nobody"], &sh("exit 0")));
    assert_eq!(rc, 2, "{err}");
    assert!(
        err.contains("--user \"gpuprofd-t-nobody\": no such user"),
        "{err}"
    );
}

/// The command of the tree test: waits for `go`, then runs the workload on `script` as its
/// grandchild (sh → sh → workload), its `ready PID` line into `pid_file`.
fn tree_command(dir: &Path) -> (String, PathBuf, PathBuf) {
    let go = dir.join("go");
    let pid_file = dir.join("pid");
    let script = dir.join("script");
    std::fs::write(
        &script,
        "rt_launch gemm 5 1 1 1 32 1 1 0 0\nrt_memcpy h2d 4096 2\n",
    )
    .unwrap();
    let workload = fakecuda().join("bin/workload");
    let cmd = format!(
        "while [ ! -e {go} ]; do sleep 0.02; done; /bin/sh -c '{w} < {s} > {p}; true'",
        go = go.display(),
        w = workload.display(),
        s = script.display(),
        p = pid_file.display()
    );
    (cmd, go, pid_file)
}

/// Runs the tree test's command under gpuprofd (`extra` options) while an outside workload
/// launches 3 kernels; the report and the two processes' pids (grandchild, outside).
fn tree_run(extra: &[&str]) -> (serde_json::Value, u32, u32) {
    let dir = TempDir::new("wrap-tree");
    let (cmd, go, pid_file) = tree_command(dir.path());
    let report = dir.path().join("report.json");
    let mut args = extra.to_vec();
    args.extend(["-o", report.to_str().unwrap()]);
    let mut outside = Workload::start();
    let mut child: Child = wrapper(&args, &sh(&cmd))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = Lines::new(child.stderr.take().unwrap());
    err.wait_for("the ready line", |l| l.contains("gpuprofd: ready"));
    // While the command runs (it waits for `go`), a CUDA process outside its tree launches.
    outside.cmd("rt_launch gemm 3 1 1 1 32 1 1 0 0");
    std::fs::write(&go, "").unwrap();
    let st = wait_bounded(&mut child);
    let rest = err.rest().join("\n");
    assert_eq!(st.code(), Some(0), "{rest}");
    let ready = std::fs::read_to_string(&pid_file).unwrap();
    let grandchild: u32 = ready
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("ready "))
        .unwrap()
        .parse()
        .unwrap();
    let outside_tgid = outside.tgid;
    outside.exit();
    (read_report(&report), grandchild, outside_tgid)
}

#[test]
fn only_the_commands_tree_is_captured_unless_all_jobs() {
    let (r, grandchild, outside) = tree_run(&[]);
    let tgids: Vec<u64> = r["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["tgid"].as_u64().unwrap())
        .collect();
    assert_eq!(tgids, [u64::from(grandchild)], "outside: {outside}");
    let p = process(&r, grandchild);
    assert_eq!(p["launches"], 5);
    assert_eq!(kernel_calls(p, GEMM), 5);
    assert_eq!(copies(p, "h2d").unwrap()["bytes"], 8192);
    // --all-jobs with a command: every CUDA process until it ends, the outside one included.
    let (r, grandchild, outside) = tree_run(&["--all-jobs"]);
    assert_eq!(process(&r, grandchild)["launches"], 5);
    assert_eq!(process(&r, outside)["launches"], 3);
}
