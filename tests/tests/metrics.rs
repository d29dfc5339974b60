//! Prometheus `/metrics` of a running daemon: exact values, validated by promtool, scraped by a
//! real Prometheus server (both from Debian's prometheus package, unpacked by
//! `scripts/setup.sh --test-tools` under /opt/gpuprofd-test-tools).
//!
//! Run through `cargo xtask test` (as root, `--test-threads=1`).

use gpuprofd_tests::*;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn value(body: &str, name: &str, label: &str) -> Option<f64> {
    body.lines()
        .find(|l| l.starts_with(name) && l.contains(label))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Polls until `f` gives a value (bounded).
fn wait_for<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn metrics_are_exact_valid_and_scraped_by_prometheus() {
    let addr = format!("127.0.0.1:{}", free_port());
    let lib = fakecuda().join("lib");
    let d = Daemon::start(&[
        "--all-jobs",
        "--no-system-libs",
        "--no-nvml",
        "--lib",
        lib.to_str().unwrap(),
        "--metrics-addr",
        &addr,
        "--metrics-per-process",
    ]);
    let mut w = Workload::start();
    w.script(&["rt_launch gemm 7 1 1 1 32 1 1 0 0", "rt_memcpy h2d 4096 3"]);
    let pid = format!("pid=\"{}\"", w.tgid);
    let body = wait_for("7 launches in /metrics", Duration::from_secs(10), || {
        let (status, body) = http_get(&addr, "/metrics")?;
        assert_eq!(status, "HTTP/1.1 200 OK");
        (value(&body, "gpuprofd_kernel_launches_total{", &pid) == Some(7.0)).then_some(body)
    });
    assert_eq!(
        value(&body, "gpuprofd_copy_bytes_total{", &pid),
        Some(12288.0)
    );
    assert_eq!(
        value(
            &body,
            "gpuprofd_top_kernel_launches_total{",
            "gemm(float const*, float const*"
        ),
        Some(7.0)
    );
    assert_eq!(
        value(&body, "gpuprofd_records_lost_total{", "kind=\"launch\""),
        Some(0.0)
    );
    assert_eq!(
        http_get(&addr, "/nope").unwrap().0,
        "HTTP/1.1 404 Not Found"
    );
    let (status, page) = http_get(&addr, "/").unwrap();
    assert_eq!(status, "HTTP/1.1 200 OK", "the live dashboard");
    assert!(page.contains("<title>gpuprofd live</title>"), "{page}");

    // Prometheus's own linter accepts it.
    let mut lint = Command::new(format!("{PROMETHEUS_TOOLS}/promtool"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool missing: run scripts/setup.sh --test-tools");
    lint.stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = lint.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // And a real Prometheus server scrapes it.
    let prom = Prometheus::start("gpuprofd", &[&addr]);
    let web = prom.web.clone();
    // Prometheus's own `job` label (the scrape job's name) arrives intact: ours is `workload`.
    let query = format!(
        "/api/v1/query?query=gpuprofd_kernel_launches_total%7Bjob%3D%22gpuprofd%22%2Cpid%3D%22{}%22%7D",
        w.tgid
    );
    let got = std::panic::catch_unwind(|| {
        wait_for(
            "Prometheus to scrape gpuprofd",
            Duration::from_secs(60),
            || {
                let (_, body) = http_get(&web, &query)?;
                let v: serde_json::Value = serde_json::from_str(&body).ok()?;
                v["data"]["result"][0]["value"][1]
                    .as_str()
                    .map(str::to_owned)
            },
        )
    });
    drop(prom);
    assert_eq!(got.expect("prometheus query"), "7");
    w.exit();
    let r = d.stop().report;
    assert_eq!(r["nvml"]["state"], "off");
}

/// The per-workload default (no pid, no comm), on a wrapped command's tree so that no other
/// process on the machine adds to the one workload series.
#[test]
fn by_default_series_are_per_workload() {
    require_bpf();
    let addr = format!("127.0.0.1:{}", free_port());
    let dir = TempDir::new("metrics-workload");
    let go = dir.path().join("go");
    let workload = fakecuda().join("bin/workload");
    let cmd = format!(
        "printf 'rt_launch gemm 7 1 1 1 32 1 1 0 0\\n' | {w} >/dev/null; \\
         while [ ! -e {go} ]; do sleep 0.02; done",
        w = workload.display(),
        go = go.display()
    );
    let lib = fakecuda().join("lib");
    let mut child = Command::new(daemon_bin())
        .args([
            "--no-system-libs",
            "--no-nvml",
            "--no-live",
            "--no-state",
            "--lib",
        ])
        .arg(&lib)
        .args(["--metrics-addr", &addr, "--", "/bin/sh", "-c", &cmd])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = Lines::new(child.stderr.take().unwrap());
    err.wait_for("the ready line", |l| l.contains("gpuprofd: ready"));
    let body = wait_for("7 launches in /metrics", Duration::from_secs(10), || {
        let (_, body) = http_get(&addr, "/metrics")?;
        let lines: Vec<String> = body
            .lines()
            .filter(|l| l.starts_with("gpuprofd_kernel_launches_total{"))
            .map(str::to_owned)
            .collect();
        (lines.len() == 1 && lines[0].ends_with(" 7")).then_some(body)
    });
    std::fs::write(&go, "").unwrap();
    assert_eq!(wait_bounded(&mut child).code(), Some(0));
    let launches: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("gpuprofd_kernel_launches_total{"))
        .collect();
    assert!(
        launches[0].starts_with("gpuprofd_kernel_launches_total{workload=\""),
        "{}",
        launches[0]
    );
    for l in body.lines().filter(|l| !l.starts_with('#')) {
        assert!(
            !l.contains("pid=") && !l.contains("comm=") && !l.contains("job="),
            "{l}"
        );
    }
    assert_eq!(
        value(
            &body,
            "gpuprofd_top_kernel_launches_total{",
            "gemm(float const*"
        ),
        Some(7.0)
    );
    assert_eq!(value(&body, "gpuprofd_processes", ""), Some(1.0));
}

/// A metrics address another program holds: the daemon stops with exit 2 and names the
/// holder, as the kernel tells it (here: this test process).
#[test]
fn a_taken_metrics_port_names_its_holder() {
    require_bpf();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let comm = std::fs::read_to_string("/proc/self/comm").unwrap();
    let (code, _, err) = run_all_jobs(&["--no-nvml", "--metrics-addr", &addr, "--duration", "5s"]);
    assert_eq!(code, 2, "{err}");
    let want = format!(
        "cannot serve /metrics on {addr}: Address already in use (os error 98) (held by process \
         {}, {}). Choose a free address with --metrics-addr (the service: metrics.listen)",
        std::process::id(),
        comm.trim()
    );
    assert!(err.contains(&want), "{want}\nnot in:\n{err}");
}
