//! `--all-jobs` on a node where no CUDA library is known yet (pip-installed runtimes,
//! containers, a driver mounted later): the capture waits for the first process that maps one,
//! as "all jobs, now or later" promises; and a run that fails before it captures anything
//! leaves no output file behind.
//!
//! Run through `cargo xtask test` (as root, `--test-threads=1`).

use gpuprofd_tests::*;

const VEC_ADD: &str = "vecAdd(float const*, float const*, float*, int)";

#[test]
fn all_jobs_waits_for_the_first_cuda_library() {
    // No --lib, no linker cache, no process mapping CUDA: nothing to attach at the start.
    let mut d = Daemon::start(&["--all-jobs", "--no-system-libs", "--no-nvml"]);
    let mut w = Workload::spawn("workload_late", &[]);
    w.cmd(&format!(
        "dlopen_runtime {}",
        fakecuda().join("lib").display()
    ));
    let attached = d.stderr.wait_for("the first library attached", |l| {
        l.starts_with("gpuprofd: attached: ") && l.ends_with("; capturing")
    });
    assert!(attached.contains("libcudart.so.12"), "{attached}");
    w.cmd("rt_launch vecAdd 4 2 1 1 64 1 1 0 0");
    let tgid = w.tgid;
    let f = d.stop();
    let p = process(&f.report, tgid);
    assert_eq!(kernel_calls(p, VEC_ADD), 4);
    assert_eq!(api_calls(p, "cudaLaunchKernel"), 4);
    // The wait was said once, on the ready line; nothing repeats it.
    let said: Vec<&String> = f
        .stderr
        .iter()
        .filter(|l| l.contains("waiting for the first"))
        .collect();
    assert_eq!(said.len(), 1, "{:?}", f.stderr);
    assert!(said[0].starts_with("gpuprofd: ready: "), "{said:?}");
    w.exit();
}

#[test]
fn the_ready_line_says_the_capture_is_waiting() {
    require_bpf();
    let mut child = std::process::Command::new(daemon_bin())
        .args([
            "--all-jobs",
            "--no-system-libs",
            "--no-nvml",
            "--no-live",
            "--no-state",
        ])
        .args(["--duration", "1s"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start gpuprofd");
    let mut err = Lines::new(child.stderr.take().unwrap());
    let ready = err.wait_for("the ready line", |l| l.starts_with("gpuprofd: ready"));
    assert!(
        ready.starts_with(
            "gpuprofd: ready: waiting for the first CUDA library: no running process maps \
             libcuda.so.1 or libcudart.so.* and none was found on disk"
        ),
        "{ready}"
    );
    // It runs its full duration and ends normally, with nothing captured.
    let status = wait_bounded(&mut child);
    assert_eq!(status.code(), Some(0), "{:?}", err.rest());
}

#[test]
fn a_run_that_fails_before_capturing_leaves_no_file() {
    require_bpf();
    let dir = TempDir::new("early");
    let fresh = dir.path().join("fresh.gpuprof");
    // An unknown PID: exit 3, and no 0-byte capture file.
    let (rc, _, err) = run_daemon(&["--pid", "999999999", "-o", fresh.to_str().unwrap()]);
    assert_eq!(rc, 3, "{err}");
    assert!(!fresh.exists(), "a failed run left {}", fresh.display());
    // A command that cannot start: nothing ran, no file.
    let (rc, _, err) = run_all_jobs(&[
        "--no-nvml",
        "-o",
        fresh.to_str().unwrap(),
        "--",
        "/nonexistent/train",
    ]);
    assert_ne!(rc, 0, "{err}");
    assert!(
        err.contains("could not start \"/nonexistent/train\""),
        "{err}"
    );
    assert!(!fresh.exists(), "a failed run left {}", fresh.display());
    // An earlier result at the path is left whole by a run that failed before capturing.
    let earlier = dir.path().join("earlier.json");
    std::fs::write(&earlier, "{\"earlier\": true}\n").unwrap();
    let (rc, _, err) = run_daemon(&["--pid", "999999999", "-o", earlier.to_str().unwrap()]);
    assert_eq!(rc, 3, "{err}");
    assert_eq!(
        std::fs::read_to_string(&earlier).unwrap(),
        "{\"earlier\": true}\n"
    );
}
