//! The OTLP/HTTP metrics push, received by a local receiver that decodes each request with
//! OpenTelemetry's own protobuf definitions (tests/tools/otlp_receiver.py, PyPI's
//! opentelemetry-proto in the venv `scripts/setup.sh --test-tools` makes): exact values,
//! attributes, resource, units and temporality; and an endpoint that is down or never answers:
//! the capture goes on with exact counts, failures are counted, at most one export is in flight.
//!
//! Every capture here selects its own workload only (a wrapped command's tree, or a service
//! filtered to a cgroup made for the test), so that other processes on the machine cannot add to
//! the counts. Run through `cargo xtask test` (as root, `--test-threads=1`).

use gpuprofd_tests::*;
use serde_json::Value;
use std::io::BufRead;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const PYTHON: &str = "/opt/gpuprofd-test-tools/otlp/bin/python3";
const CUMULATIVE: &str = "AGGREGATION_TEMPORALITY_CUMULATIVE";

/// `tests/tools/otlp_receiver.py`, listening on a port of its choosing.
struct Receiver {
    child: Child,
    out: PathBuf,
    port: u16,
}

impl Receiver {
    fn start(dir: &Path) -> Receiver {
        Receiver::start_on(dir, 0)
    }

    /// On `port` (0: one the kernel picks).
    fn start_on(dir: &Path, port: u16) -> Receiver {
        assert!(
            Path::new(PYTHON).exists(),
            "{PYTHON} is missing: run scripts/setup.sh --test-tools"
        );
        let out = dir.join("received.jsonl");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/otlp_receiver.py");
        let mut child = Command::new(PYTHON)
            .arg(script)
            .arg(&out)
            .arg(port.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start otlp_receiver.py");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("otlp_receiver.py printed {line:?}, not its port"));
        Receiver { child, out, port }
    }

    /// Every request received so far, decoded.
    fn requests(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        text.lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                assert!(v.get("undecodable").is_none(), "undecodable request: {v}");
                v
            })
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port that accepts connections and never answers (an endpoint that hangs): the
/// connections are held until the test ends. The count of connections made.
fn black_hole() -> (u16, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let n = Arc::new(AtomicUsize::new(0));
    let count = n.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in l.incoming().flatten() {
            count.fetch_add(1, Ordering::SeqCst);
            held.push(s);
        }
    });
    (port, n)
}

/// `attributes` (a list of `{key, value: {string_value}}`) as (key, value) pairs, sorted.
fn attrs(v: &Value) -> Vec<(String, String)> {
    let mut a: Vec<(String, String)> = v
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|kv| {
            let val = &kv["value"];
            let s = val["string_value"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| val.to_string());
            (kv["key"].as_str().unwrap().to_owned(), s)
        })
        .collect();
    a.sort();
    a
}

/// The metric `name` of a request's first resource and scope.
fn metric<'a>(req: &'a Value, name: &str) -> &'a Value {
    req["request"]["resource_metrics"][0]["scope_metrics"][0]["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("no metric {name} in {req}"))
}

/// The data points of a metric (its sum or gauge).
fn points(m: &Value) -> &Vec<Value> {
    let data = if m.get("sum").is_some() {
        &m["sum"]
    } else {
        &m["gauge"]
    };
    data["data_points"].as_array().unwrap()
}

/// An integer point's value (the JSON mapping writes 64-bit integers as strings).
fn int(p: &Value) -> u64 {
    p["as_int"]
        .as_str()
        .unwrap_or_else(|| panic!("not an integer point: {p}"))
        .parse()
        .unwrap()
}

fn kv(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    v.sort();
    v
}

/// A wrapped workload: 7 launches of gemm, 3 host-to-device copies of 4096 bytes.
fn wrapped(extra: &[&str], report: &Path) -> (i32, String) {
    let workload = fakecuda().join("bin/workload");
    let cmd = format!(
        "printf 'rt_launch gemm 7 1 1 1 32 1 1 0 0\\nrt_memcpy h2d 4096 3\\n' | {} >/dev/null",
        workload.display()
    );
    let lib = fakecuda().join("lib");
    let mut args = vec![
        "--no-system-libs",
        "--no-nvml",
        "--no-live",
        "--no-state",
        "--lib",
        lib.to_str().unwrap(),
        "-o",
        report.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "/bin/sh", "-c", &cmd]);
    let (code, _out, err) = run_daemon(&args);
    (code, err)
}

/// The workload label of the report's one process (`kind:id` of its job, or empty).
fn workload_of(report: &Value) -> (u64, String) {
    let procs = report["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 1, "{procs:?}");
    let p = &procs[0];
    let w = match p["job"].as_object() {
        Some(j) => format!(
            "{}:{}",
            j["kind"].as_str().unwrap(),
            j["id"].as_str().unwrap()
        ),
        None => String::new(),
    };
    (p["launches"].as_u64().unwrap(), w)
}

#[test]
fn otlp_push_sends_the_capture_s_exact_figures() {
    require_bpf();
    let dir = TempDir::new("otlp");
    let rx = Receiver::start(dir.path());
    let url = format!("http://127.0.0.1:{}", rx.port);
    let report = dir.path().join("report.json");
    let (code, err) = wrapped(&["--otlp", &url, "--otlp-interval", "200ms"], &report);
    assert_eq!(code, 0, "{err}");
    let r = read_report(&report);
    let (launches, workload) = workload_of(&r);
    assert_eq!(launches, 7, "the capture's own report");

    let reqs = rx.requests();
    // The last push is the one made at the end, with the final figures.
    let last = reqs.last().expect("no OTLP request received");
    assert_eq!(last["path"], "/v1/metrics");
    assert_eq!(last["content_type"], "application/x-protobuf");
    let rm = &last["request"]["resource_metrics"][0];
    let res = attrs(&rm["resource"]["attributes"]);
    let get = |k: &str| {
        res.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(get("service.name"), Some("gpuprofd"), "{res:?}");
    assert_eq!(get("service.version"), Some(env!("CARGO_PKG_VERSION")));
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(get("host.name"), Some(host.trim()));
    assert_eq!(rm["scope_metrics"][0]["scope"]["name"], "gpuprofd");

    let w = workload.as_str();
    let launches = metric(last, "gpuprofd.kernel.launches");
    assert_eq!(launches["unit"], "{launch}");
    assert_eq!(launches["sum"]["is_monotonic"], true);
    assert_eq!(launches["sum"]["aggregation_temporality"], CUMULATIVE);
    let p = points(launches);
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(attrs(&p[0]["attributes"]), kv(&[("workload", w)]));
    assert_eq!(int(&p[0]), 7);

    let bytes = metric(last, "gpuprofd.copy");
    assert_eq!(bytes["unit"], "By");
    assert_eq!(bytes["sum"]["aggregation_temporality"], CUMULATIVE);
    let p = points(bytes);
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(
        attrs(&p[0]["attributes"]),
        kv(&[("workload", w), ("direction", "h2d")])
    );
    assert_eq!(int(&p[0]), 12288);
    let copies = points(metric(last, "gpuprofd.copies"));
    assert_eq!(copies.iter().map(int).collect::<Vec<_>>(), [3]);

    let top = points(metric(last, "gpuprofd.top_kernel.launches"));
    assert_eq!(top.len(), 1, "{top:?}");
    assert_eq!(
        attrs(&top[0]["attributes"]),
        kv(&[("workload", w), ("kernel", GEMM)])
    );
    assert_eq!(int(&top[0]), 7);

    let procs = metric(last, "gpuprofd.processes");
    assert!(procs.get("gauge").is_some(), "{procs}");
    assert_eq!(procs["unit"], "{process}");
    assert_eq!(points(procs).iter().map(int).collect::<Vec<_>>(), [1]);

    let lost = points(metric(last, "gpuprofd.records.lost"));
    let launch_lost: Vec<u64> = lost
        .iter()
        .filter(|p| attrs(&p["attributes"]) == kv(&[("kind", "launch")]))
        .map(int)
        .collect();
    assert_eq!(launch_lost, [0]);

    // Cumulative: no push carries more than the last one.
    for req in &reqs {
        let n: u64 = points(metric(req, "gpuprofd.kernel.launches"))
            .iter()
            .map(int)
            .sum();
        assert!(n <= 7, "{n} launches in an earlier push");
    }
}

#[test]
fn otlp_endpoint_refusing_connections_leaves_the_capture_alone() {
    require_bpf();
    let dir = TempDir::new("otlp-refused");
    // A port nothing listens on: connections are refused at once.
    let url = format!("http://127.0.0.1:{}", free_port());
    let report = dir.path().join("report.json");
    let (code, err) = wrapped(&["--otlp", &url, "--otlp-interval", "100ms"], &report);
    assert_eq!(code, 0, "{err}");
    let (launches, _) = workload_of(&read_report(&report));
    assert_eq!(launches, 7, "the capture's own report");
    let failed: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("OTLP export failed"))
        .collect();
    assert_eq!(failed.len(), 1, "logged once per outage: {err}");
    assert!(failed[0].contains("/v1/metrics"), "{}", failed[0]);
    assert!(
        err.contains("OTLP push stopped") && err.contains("exports=0"),
        "{err}"
    );
}

/// The service's /metrics (per process), its `status`, and its log, while its OTLP endpoint
/// accepts connections and never answers.
#[test]
fn otlp_endpoint_that_hangs_is_bounded_counted_and_logged_once() {
    let dir = TempDir::new("otlp-hang");
    let (hole, connections) = black_hole();
    let cg = Cgroup::new("otlp_hang");
    let lib = fakecuda().join("lib");
    let socket = dir.path().join("ctl.sock");
    let addr = format!("127.0.0.1:{}", free_port());
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[capture]\nlibs = [\"{}\"]\nsystem_libs = false\ncgroups = [\"{}\"]\n\n\
             [nvml]\nenabled = false\n\n[metrics]\nlisten = \"{addr}\"\nper_process = true\n\n\
             [otlp]\nendpoint = \"http://127.0.0.1:{hole}\"\ninterval = \"100ms\"\n\
             timeout = \"300ms\"\nheaders = {{ authorization = \"Bearer s3cret\" }}\n\n\
             [control]\nsocket = \"{}\"\n",
            lib.display(),
            cg.rel(),
            socket.display()
        ),
    )
    .unwrap();
    let mut svc = Service::start(&config, None);
    svc.stderr.wait_for("the service's ready line", |l| {
        l.contains("control socket ready")
    });
    let mut w = Workload::spawn_in("workload", &cg);
    w.script(&["rt_launch gemm 7 1 1 1 32 1 1 0 0", "rt_memcpy h2d 4096 3"]);
    let pid = format!("pid=\"{}\"", w.tgid);
    let value = |body: &str, name: &str, label: &str| -> Option<f64> {
        body.lines()
            .find(|l| l.starts_with(name) && l.contains(label))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    };
    // The capture's figures are exact while exports fail; wait for several failures.
    let deadline = Instant::now() + Duration::from_secs(20);
    let body = loop {
        let body = http_get(&addr, "/metrics")
            .map(|(_, b)| b)
            .unwrap_or_default();
        let copied = value(&body, "gpuprofd_copy_bytes_total{", &pid) == Some(12288.0);
        let failed = value(&body, "gpuprofd_otlp_exports_failed_total", "").unwrap_or(0.0);
        if copied && failed >= 5.0 {
            break body;
        }
        assert!(Instant::now() < deadline, "no 5 failed exports: {body}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        value(&body, "gpuprofd_kernel_launches_total{", &pid),
        Some(7.0)
    );
    assert_eq!(value(&body, "gpuprofd_otlp_exports_total", ""), Some(0.0));
    let in_flight = value(&body, "gpuprofd_otlp_exports_in_flight", "").unwrap();
    assert!(in_flight <= 1.0, "{in_flight} exports in flight");

    let st = ctl_json(&daemon_bin(), &socket, &["status"], None);
    let o = &st["otlp"];
    assert_eq!(o["url"], format!("http://127.0.0.1:{hole}/v1/metrics"));
    assert_eq!(o["exports"], 0);
    assert_eq!(o["in_flight_max"], 1, "{o}");
    assert_eq!(o["down"], true);
    assert!(o["exports_failed"].as_u64().unwrap() >= 5, "{o}");
    // One connection per export, none queued behind another: no more connections than exports
    // tried (failed, plus the one in flight).
    let tried = o["exports_failed"].as_u64().unwrap() + o["in_flight"].as_u64().unwrap();
    assert!(
        connections.load(Ordering::SeqCst) as u64 <= tried + 1,
        "{} connections for {tried} exports",
        connections.load(Ordering::SeqCst)
    );
    assert_eq!(
        st["config"]["otlp"]["headers"]["authorization"], "(hidden)",
        "credentials stay out of status"
    );

    w.exit();
    let (status, log) = svc.stop();
    assert!(status.success(), "{status:?}: {log:?}");
    let said: Vec<&String> = svc_lines(&log, "OTLP export failed");
    assert_eq!(said.len(), 1, "logged once per outage: {log:?}");
}

fn svc_lines<'a>(log: &'a [String], what: &str) -> Vec<&'a String> {
    log.iter().filter(|l| l.contains(what)).collect()
}

/// The service's push through an outage and back: failures counted while nothing listens, then
/// a receiver on the endpoint's port gets the workload's exact figures; the outage is logged
/// once when it starts and once when it ends.
#[test]
fn otlp_outage_ends_with_the_totals_and_two_log_lines() {
    let dir = TempDir::new("otlp-outage");
    let port = free_port();
    let cg = Cgroup::new("otlp_outage");
    let lib = fakecuda().join("lib");
    let socket = dir.path().join("ctl.sock");
    let addr = format!("127.0.0.1:{}", free_port());
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[capture]\nlibs = [\"{}\"]\nsystem_libs = false\ncgroups = [\"{}\"]\n\n\
             [nvml]\nenabled = false\n\n[metrics]\nlisten = \"{addr}\"\nper_process = true\n\n\
             [otlp]\nendpoint = \"http://127.0.0.1:{port}\"\ninterval = \"100ms\"\n\
             resource = {{ \"deployment.environment\" = \"test\" }}\n\n\
             [control]\nsocket = \"{}\"\n",
            lib.display(),
            cg.rel(),
            socket.display()
        ),
    )
    .unwrap();
    let mut svc = Service::start(&config, None);
    svc.stderr.wait_for("the service's ready line", |l| {
        l.contains("control socket ready")
    });
    let mut w = Workload::spawn_in("workload", &cg);
    w.script(&["rt_launch gemm 7 1 1 1 32 1 1 0 0", "rt_memcpy h2d 4096 3"]);
    let scraped = |name: &str| -> f64 {
        let body = http_get(&addr, "/metrics")
            .map(|(_, b)| b)
            .unwrap_or_default();
        body.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(-1.0)
    };
    let until = |what: &str, f: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !f() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    until("3 failed exports", &|| {
        scraped("gpuprofd_otlp_exports_failed_total") >= 3.0
    });
    // The endpoint comes up: the next export carries the totals.
    let rx = Receiver::start_on(dir.path(), port);
    let pid = w.tgid.to_string();
    let launches_of = |req: &Value| -> Option<u64> {
        points(metric_in(req, "gpuprofd.kernel.launches")?)
            .iter()
            .find(|p| attrs(&p["attributes"]).contains(&("pid".to_owned(), pid.clone())))
            .map(int)
    };
    until("a push with the workload's 7 launches", &|| {
        rx.requests().iter().any(|r| launches_of(r) == Some(7))
    });
    until("the accepted export counted", &|| {
        scraped("gpuprofd_otlp_exports_total") >= 1.0
    });
    let reqs = rx.requests();
    let req = reqs.iter().find(|r| launches_of(r) == Some(7)).unwrap();
    let res = attrs(&req["request"]["resource_metrics"][0]["resource"]["attributes"]);
    assert!(
        res.contains(&("deployment.environment".to_owned(), "test".to_owned())),
        "{res:?}"
    );
    let bytes: Vec<u64> = points(metric(req, "gpuprofd.copy"))
        .iter()
        .filter(|p| attrs(&p["attributes"]).contains(&("pid".to_owned(), pid.clone())))
        .map(int)
        .collect();
    assert_eq!(bytes, [12288]);

    w.exit();
    let (status, log) = svc.stop();
    assert!(status.success(), "{status:?}: {log:?}");
    assert_eq!(svc_lines(&log, "OTLP export failed").len(), 1, "{log:?}");
    assert_eq!(
        svc_lines(&log, "OTLP endpoint reachable again").len(),
        1,
        "{log:?}"
    );
}

/// [`metric`], or `None` when the request has no such metric.
fn metric_in<'a>(req: &'a Value, name: &str) -> Option<&'a Value> {
    req["request"]["resource_metrics"][0]["scope_metrics"][0]["metrics"]
        .as_array()?
        .iter()
        .find(|m| m["name"] == name)
}
