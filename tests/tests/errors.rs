//! Bad input through the real binary: a clear message that says what to do, a specific non-zero
//! exit code, and no capture started where none can succeed.

use gpuprofd_tests::*;

#[test]
fn unknown_pid() {
    require_bpf();
    let (code, _out, err) = run_daemon(&["--pid", "4000000", "--duration", "1s"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("no process with PID 4000000"), "{err}");
}

#[test]
fn process_without_cuda_offers_wait() {
    require_bpf();
    let mut sleeper = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let pid = sleeper.id().to_string();
    let (code, _out, err) = run_daemon(&["--pid", &pid, "--duration", "1s"]);
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains(&format!("process {pid} (sleep) has not loaded CUDA")),
        "{err}"
    );
    assert!(err.contains("--wait"), "{err}");
}

#[test]
fn wait_for_a_late_cuda_load() {
    let mut w = Workload::spawn("workload_late", &[]);
    let pid = w.tgid.to_string();
    let d = std::thread::scope(|s| {
        let h = s.spawn(|| Daemon::start(&["--pid", &pid, "--wait"]));
        // The daemon is polling for CUDA; load it now.
        w.cmd("dlopen_runtime");
        h.join().unwrap()
    });
    w.script(&["rt_launch vecAdd 4 1 1 1 32 1 1 0 0"]);
    let tgid = w.tgid;
    let r = d.stop().report;
    assert_eq!(
        kernel_calls(
            process(&r, tgid),
            "vecAdd(float const*, float const*, float*, int)"
        ),
        4
    );
    w.exit();
}

#[test]
fn unwritable_output_fails_before_attaching() {
    require_bpf();
    let (code, _out, err) = run_all_jobs(&["--output", "/nonexistent-dir/report.json"]);
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains("cannot write the report to \"/nonexistent-dir/report.json\""),
        "{err}"
    );
    assert!(
        !err.contains("gpuprofd: ready"),
        "attached before failing: {err}"
    );
}

#[test]
fn not_root_says_which_capability() {
    require_bpf();
    // The unprivileged user must be able to reach the binary and the library even when the
    // checkout lives somewhere it cannot read (CI clones under /root): copy both to /tmp.
    let dir = TempDir::new("nonroot");
    let bin = dir.path().join("gpuprofd");
    let lib = dir.path().join("libcuda.so.1");
    std::fs::copy(daemon_bin(), &bin).unwrap();
    std::fs::copy(fakecuda().join("lib/libcuda.so.1"), &lib).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ])
        .arg(&bin)
        .args([
            "--all-jobs",
            "--no-system-libs",
            "--duration",
            "1s",
            "--lib",
        ])
        .arg(&lib)
        .output()
        .expect("setpriv (util-linux)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{err}");
    assert!(
        err.contains("permission denied loading BPF programs"),
        "{err}"
    );
    assert!(err.contains("CAP_BPF") && err.contains("sudo"), "{err}");
}

#[test]
fn lookalike_library_is_never_attached() {
    let lookalike = fakecuda().join("lib/liblookalike.so");
    let lib = fakecuda().join("lib");
    let d = Daemon::start(&[
        "--all-jobs",
        "--no-system-libs",
        "--lib",
        lib.to_str().unwrap(),
        "--lib",
        lookalike.to_str().unwrap(),
    ]);
    let mut w = Workload::start();
    w.script(&["lookalike_launch 5", "rt_launch relu 2 1 1 1 32 1 1 0 0"]);
    let tgid = w.tgid;
    let f = d.stop();
    let p = process(&f.report, tgid);
    assert_eq!(p["launches"], 2, "look-alike cuLaunchKernel counted");
    assert!(
        f.stderr
            .iter()
            .any(|l| l.contains("liblookalike.so") && l.contains("not a CUDA driver or runtime")),
        "{:?}",
        f.stderr
    );
    w.exit();
}

#[test]
fn bad_arguments() {
    let (code, _o, err) = run_daemon(&[]);
    assert_eq!(code, 2);
    assert!(err.contains("--all-jobs") && err.contains("--pid"), "{err}");
    let (code, _o, err) = run_daemon(&["--all-jobs", "--duration", "ten"]);
    assert_eq!(code, 2);
    assert!(err.contains("\"ten\" is not a duration"), "{err}");
}

#[test]
fn output_through_a_symlink_is_refused() {
    require_bpf();
    let dir = TempDir::new("symlink-out");
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let link = dir.path().join("report.json");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let (code, _out, err) = run_all_jobs(&["--output", link.to_str().unwrap()]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
}

#[test]
fn new_report_files_are_not_world_readable() {
    use std::os::unix::fs::PermissionsExt;
    require_bpf();
    let dir = TempDir::new("mode-out");
    let out = dir.path().join("report.json");
    let (code, _o, err) = run_all_jobs(&[
        "--no-live",
        "--duration",
        "500ms",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
    // 0640 before the umask: never readable by others, always by its owner.
    assert_eq!(
        (mode & 0o007, mode & 0o600),
        (0, 0o600),
        "report mode {mode:o}"
    );
}

#[test]
fn a_metrics_address_in_use_is_refused_before_attaching() {
    // Someone already listens there.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (code, out, err) = run_all_jobs(&["--metrics-addr", &addr]);
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert!(
        err.contains(&format!("cannot serve /metrics on {addr}"))
            && err.contains("Choose a free address with --metrics-addr"),
        "{err}"
    );
    assert!(!err.contains("gpuprofd: ready"), "{err}");
}

/// Every attached library holds descriptors (links, or one perf event per site before 6.6). A
/// shell's soft open-file limit must not cap the probes: the daemon raises it to the hard limit.
/// Where the hard limit itself is too low, the error says so and what to change, not "check that
/// the file exists".
#[test]
fn a_low_open_file_limit_is_raised_or_named() {
    require_bpf();
    let lib = fakecuda().join("lib");
    let cet = fakecuda().join("lib-cet");
    let dir = TempDir::new("rlimit");
    let out = dir.path().join("report.json");
    let run = |ulimit: &str| {
        let o = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit {ulimit}; exec \"$0\" \"$@\""))
            .arg(daemon_bin())
            .args(["--all-jobs", "--no-system-libs", "--no-live", "--no-nvml"])
            .args([
                "--lib",
                lib.to_str().unwrap(),
                "--lib",
                cet.to_str().unwrap(),
            ])
            .args(["--duration", "1s", "-o", out.to_str().unwrap()])
            .output()
            .expect("run gpuprofd under sh");
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    // Soft 48, hard as it was: 280 probes on the 4 libraries attach (one trap per launch:
    // the two runtimes' 6 launch entries each are left unprobed), none fails.
    let (code, err) = run("-Sn 48");
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("ready: 280 probes on 4 CUDA libraries"),
        "{err}"
    );
    assert!(!err.contains("Too many open files"), "{err}");
    // Hard 48 too: nothing can raise it; the failure names the cause and the remedy.
    let (code, err) = run("-n 48");
    assert_eq!(code, 7, "{err}");
    assert!(err.contains("Too many open files"), "{err}");
    assert!(
        err.contains("the daemon has run out of file descriptors") && err.contains("LimitNOFILE="),
        "{err}"
    );
    assert!(!err.contains("gpuprofd: ready"), "{err}");
}
