//! The Grafana dashboards of deploy/grafana/dashboards: every query of every panel, run by a
//! real Prometheus server scraping a running gpuprofd that captures a scripted fake workload on
//! a fake NVML, returns exactly the series the panel is meant to show, with the values the
//! script implies. (tests/tests/dashboard_files.rs checks that Grafana can load the files.)
//!
//! Rates are checked exactly: the workload works in two phases, each one followed by a scrape;
//! every series exists from the first phase on, so the panels' `rate(...[$__rate_interval])`,
//! evaluated at the scrape after the second phase over a window that starts 1 ms before the
//! scrape after the first, is Prometheus's rate without extrapolation past the samples:
//! (increase in phase two) / (the time between the two scrapes).
//!
//! Run through `cargo xtask test` (as root, `--test-threads=1`).

use gpuprofd_tests::*;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

const MIB: f64 = 1048576.0;
const GIB: f64 = 1073741824.0;
const RELU: &str = "relu(float*, int)";
const NODE: &str = "gpuprofd-node.json";
const JOB: &str = "gpuprofd-job.json";
/// The Slurm job the workload runs in (its cgroup is this test's own, so no other process on
/// the machine is captured, whatever its job).
const JOB_ID: &str = "4242";

// ---- expectations ---------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum V {
    /// This value (a gauge, a total).
    Is(f64),
    /// A rate: this increase over the second phase, per second of the window (of a counter
    /// that phase one left above 0, which `diff` checks).
    Increase(f64),
    /// The sum of the rates of counters, each (its value after phase one, its increase).
    Counters(Vec<(f64, f64)>),
    /// A measured figure within these bounds.
    Within(f64, f64),
}

/// What each query (dashboard, panel title, refId) must return: exactly these series.
#[derive(Default)]
struct Wants(BTreeMap<(String, String, String), Vec<(Labels, V)>>);

impl Wants {
    fn add(&mut self, file: &str, title: &str, refid: &str, series: Vec<(Labels, V)>) {
        let k = (file.to_owned(), title.to_owned(), refid.to_owned());
        assert!(self.0.insert(k, series).is_none(), "{title} {refid} twice");
    }
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Prometheus's `rate()` over the test's window (`secs` between the scrapes after each phase,
/// plus 1 ms before the first) of a counter at `first` in the first scrape that rose by `n`:
/// the increase over the time between the scrapes, extrapolated into that 1 ms only as far as
/// the counter's zero point (Prometheus's extrapolatedRate), over the whole window.
fn prometheus_rate(first: f64, n: f64, secs: f64) -> f64 {
    if n == 0.0 {
        return 0.0;
    }
    let to_start = (secs * first / n).min(0.001);
    n * (secs + to_start) / secs / (secs + 0.001)
}

/// Whether `got` is `want` (relative 1e-9: the rates' arithmetic in floating point).
fn close(got: f64, want: f64) -> bool {
    got == want || (got - want).abs() <= 1e-9 * want.abs().max(1e-12)
}

// ---- the run --------------------------------------------------------------------------------

/// Phase one makes every series (each kernel, direction, API once); phase two adds the counts
/// the rates are checked against.
const PHASE_1: &[&str] = &[
    "rt_malloc 1048576 2",
    "rt_launch gemm 1 1 1 1 32 1 1 0 0",
    "rt_launch relu 1 1 1 1 32 1 1 0 0",
    "rt_memcpy h2d 4096 1",
    "rt_memcpy d2h 4096 1",
    "rt_memcpy d2d 4096 1",
    "rt_memset 4096 1",
    "rt_graph_launch 1 0",
    "set_delay_us 20000",
    "rt_sync_device 1",
];
const PHASE_2: &[&str] = &[
    "rt_launch gemm 30 1 1 1 32 1 1 0 0",
    "rt_launch relu 12 1 1 1 32 1 1 0 0",
    "rt_memcpy h2d 4096 5",
    "rt_memcpy d2h 8192 3",
    "rt_memcpy d2d 1024 2",
    "rt_memset 512 4",
    "rt_graph_launch 4 0",
    "rt_sync_device 3",
    "rt_malloc 1048576 1",
];

/// `/metrics` once `done` holds of it (bounded wait), and when it was read (Unix ms).
fn scrape_when(addr: &str, what: &str, done: impl Fn(&Exposition) -> bool) -> (Exposition, i64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let t = now_ms();
        if let Some((_, body)) = http_get(addr, "/metrics") {
            let s = Exposition::parse(&body);
            if done(&s) {
                return (s, t);
            }
        }
        assert!(Instant::now() < deadline, "/metrics never showed {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Records of `kind` the probes wrote, as `/metrics` says: the daemon reads these counters
/// from the kernel on a slower schedule than the records themselves, so a scrape that shows a
/// phase's records may not show its counters yet.
fn submitted(s: &Exposition, kind: &str) -> f64 {
    s.one("gpuprofd_records_submitted_total", &[("kind", kind)])
}

#[test]
fn every_panel_shows_its_series_with_the_expected_values() {
    require_bpf();
    let cg = Cgroup::new(&format!("job_{JOB_ID}/step_0"));
    let job_cgroup = cg.rel().trim_end_matches("/step_0").to_owned();
    let workload = format!("slurm:{JOB_ID}");
    let mut w = Workload::spawn_in("workload", &cg);
    // Two GPUs: an H100 with GPM that the workload holds alone, an A100 without GPM.
    let dir = TempDir::new("dashboards");
    let nvml = dir.path().join("nvml.conf");
    std::fs::write(
        &nvml,
        format!(
            "device NVIDIA_H100_80GB_HBM3 GPU-dash0 {total}\nutil 87 40\nmemused {used0}\n\
             proc {pid} {held} 80 30\nthrottle 0x44\npcie 2000 1000\necc 3 0\nxid 79\n\
             gpm 2 62.5\ngpm 3 25\ngpm 5 40\ngpm 10 55.5\ngpm 20 100\ngpm 21 200\n\
             gpm 60 300\ngpm 61 400\n\
             device NVIDIA_A100-SXM4-80GB GPU-dash1 {total}\nutil 10 5\nmemused {used1}\n",
            total = 80u64 << 30,
            used0 = 12u64 << 30,
            used1 = 2u64 << 30,
            held = 1u64 << 30,
            pid = w.tgid
        ),
    )
    .unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let lib = fakecuda().join("lib");
    let fake_nvml = fakecuda().join("lib-nvml/libnvidia-ml.so.1");
    let d = Daemon::start_with(
        "report.json",
        &[
            "--no-system-libs",
            "--lib",
            lib.to_str().unwrap(),
            "--cgroup",
            &job_cgroup,
            "--nvml-lib",
            fake_nvml.to_str().unwrap(),
            "--nvml-interval",
            "100ms",
            "--metrics-addr",
            &addr,
        ],
        &[("FAKENVML_CONFIG", nvml.to_str().unwrap())],
    );
    let prom = Prometheus::start("gpuprofd", &[&addr]);
    let wl = [("workload", workload.as_str())];
    let up = format!("up{{instance=\"{addr}\"}}");

    // Phase one, read back, scraped.
    w.script(PHASE_1);
    let (a, t_a_read) = scrape_when(&addr, "phase one", |s| {
        s.select("gpuprofd_kernel_launches_total", &wl) == vec![(labels(&wl), 2.0)]
            && s.select("gpuprofd_api_blocked_seconds_total", &wl).len() == 4
            && s.select("gpuprofd_copies_total", &wl).len() == 4
            && s.select("gpuprofd_gpu_gpm_holder", &wl).len() == 1
            && submitted(s, "launch") == 2.0
            && submitted(s, "copy") == 4.0
    });
    let t_a = prom.sample_after(&up, t_a_read, |v| v == 1.0);
    // Phase two, read back, scraped.
    w.script(PHASE_2);
    let (b, t_b_read) = scrape_when(&addr, "phase two", |s| {
        s.one("gpuprofd_kernel_launches_total", &wl) == 44.0
            && s.one("gpuprofd_api_calls_total", &[wl[0], ("api", "cudaMalloc")]) == 3.0
            && s.one(
                "gpuprofd_api_calls_total",
                &[wl[0], ("api", "cudaDeviceSynchronize")],
            ) == 4.0
            && submitted(s, "launch") == 44.0
            && submitted(s, "copy") == 18.0
    });
    let t_b = prom.sample_after(&up, t_b_read, |v| v == 1.0);
    let window_ms = t_b - t_a;
    let secs = window_ms as f64 / 1000.0;
    let rate_interval = format!("{}ms", window_ms + 1);

    let wants = expectations(&a, &b, &addr, &workload);
    let vars_node = [
        ("datasource", "prometheus"),
        ("instance", addr.as_str()),
        ("__rate_interval", rate_interval.as_str()),
    ];
    let mut vars_job = vars_node.to_vec();
    vars_job.push(("workload", workload.as_str()));

    // The template variables list this node and this workload.
    for (file, vars) in [(NODE, &vars_node[..]), (JOB, &vars_job[..])] {
        for v in load_dashboard(file)["templating"]["list"]
            .as_array()
            .unwrap()
        {
            let Some(def) = v["query"]["query"].as_str() else {
                continue;
            };
            let inner = def
                .strip_prefix("label_values(")
                .and_then(|s| s.strip_suffix(')'))
                .expect("label_values(SELECTOR, LABEL)");
            let (sel, label) = inner.rsplit_once(", ").unwrap();
            let want = if v["name"] == "workload" {
                &workload
            } else {
                &addr
            };
            assert_eq!(
                prom.label_values(&substitute(sel, vars), label),
                vec![want.clone()],
                "{file}: variable {}",
                v["name"]
            );
        }
    }

    // Every query of every panel.
    let mut failures = Vec::new();
    let mut checked = BTreeSet::new();
    for (file, vars) in [(NODE, &vars_node[..]), (JOB, &vars_job[..])] {
        let d = load_dashboard(file);
        for p in panels(&d) {
            let title = p["title"].as_str().unwrap();
            for t in p["targets"].as_array().unwrap() {
                let refid = t["refId"].as_str().unwrap();
                let key = (file.to_owned(), title.to_owned(), refid.to_owned());
                checked.insert(key.clone());
                let expr = substitute(t["expr"].as_str().unwrap(), vars);
                let Some(want) = wants.0.get(&key) else {
                    failures.push(format!(
                        "{file} / {title} / {refid}: no expectation in this test for `{expr}`"
                    ));
                    continue;
                };
                let data = prom.query(&expr, Some(t_b));
                assert_eq!(data["resultType"], "vector", "{expr}");
                let mut got: BTreeMap<Labels, f64> = BTreeMap::new();
                for s in data["result"].as_array().unwrap() {
                    let l: Labels = serde_json::from_value(s["metric"].clone()).unwrap();
                    let v: f64 = s["value"][1].as_str().unwrap().parse().unwrap();
                    got.insert(l, v);
                }
                let want_labels: BTreeSet<&Labels> = want.iter().map(|(l, _)| l).collect();
                let got_labels: BTreeSet<&Labels> = got.keys().collect();
                if want_labels != got_labels {
                    failures.push(format!(
                        "{file} / {title} / {refid}: `{expr}` gave the series {got:?}, \
                         not {want:?}"
                    ));
                    continue;
                }
                for (l, v) in want {
                    let g = got[l];
                    let ok = match v {
                        V::Is(x) => close(g, *x),
                        V::Increase(n) => close(g, n / secs),
                        V::Counters(c) => {
                            close(g, c.iter().map(|&(f, n)| prometheus_rate(f, n, secs)).sum())
                        }
                        V::Within(lo, hi) => (*lo..=*hi).contains(&g),
                    };
                    if !ok {
                        failures.push(format!(
                            "{file} / {title} / {refid}: {l:?} is {g}, not {v:?} \
                             (window {secs} s)"
                        ));
                    }
                }
            }
        }
    }
    for k in wants.0.keys().filter(|k| !checked.contains(*k)) {
        failures.push(format!(
            "an expectation for a query no dashboard has: {k:?}"
        ));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    drop(prom);
    let tgid = w.tgid;
    w.exit();
    let r = d.stop().report;
    assert_eq!(process(&r, tgid)["launches"], 44);
}

/// The series each query must return. `a` and `b`: `/metrics` after phase one and two (the
/// increases of figures no script fixes, such as records, are theirs; the script's own figures
/// are asserted against the script here too).
fn expectations(a: &Exposition, b: &Exposition, addr: &str, workload: &str) -> Wants {
    let mut w = Wants::default();
    let inst = ("instance", addr);
    let on = |extra: &[(&str, &str)]| {
        let mut l = vec![inst];
        l.extend_from_slice(extra);
        labels(&l)
    };
    let wl = ("workload", workload);
    let diff = |name: &str, having: &[(&str, &str)], by: &str| -> BTreeMap<String, f64> {
        let (before, after) = (a.sum_by(name, having, by), b.sum_by(name, having, by));
        assert_eq!(
            before.keys().collect::<Vec<_>>(),
            after.keys().collect::<Vec<_>>(),
            "{name}: every series from phase one on"
        );
        let out: BTreeMap<String, f64> = after
            .iter()
            .map(|(k, v)| (k.clone(), v - before[k]))
            .collect();
        for (k, n) in &out {
            assert!(
                *n == 0.0 || before[k] > 0.0,
                "{name} {k}: phase one must leave it above 0 for V::Increase"
            );
        }
        out
    };

    // What the script did in phase two (and in all), checked in the exposition first.
    let calls = diff("gpuprofd_api_calls_total", &[wl], "api");
    let scripted = [
        ("cudaLaunchKernel", 42.0),
        ("cudaMemcpy", 10.0),
        ("cudaMemset", 4.0),
        ("cudaGraphLaunch", 4.0),
        ("cudaDeviceSynchronize", 3.0),
        ("cudaMalloc", 1.0),
    ];
    assert_eq!(
        calls,
        scripted.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        "calls in phase two"
    );
    let blocked = diff("gpuprofd_api_blocked_seconds_total", &[wl], "api");
    let sync = blocked["cudaDeviceSynchronize"];
    assert!(
        (0.06..0.06 + 0.2).contains(&sync),
        "3 syncs of 20 ms blocked {sync} s"
    );
    let copies = [
        ("d2d", 2.0, 2048.0),
        ("d2h", 3.0, 24576.0),
        ("h2d", 5.0, 20480.0),
    ];
    let memset = ("memset", 4.0, 2048.0);
    assert_eq!(
        diff("gpuprofd_copy_bytes_total", &[wl], "direction"),
        copies
            .iter()
            .chain([&memset])
            .map(|(d, _, n)| (d.to_string(), *n))
            .collect()
    );

    // ---- node overview: GPUs.
    w.add(NODE, "GPUs", "A", vec![(on(&[]), V::Is(2.0))]);
    w.add(NODE, "GPUs", "B", vec![(on(&[]), V::Is(1.0))]);
    let per_gpu = |v0: f64, v1: f64| {
        vec![
            (on(&[("gpu", "0")]), V::Is(v0)),
            (on(&[("gpu", "1")]), V::Is(v1)),
        ]
    };
    w.add(NODE, "GPU utilisation", "A", per_gpu(0.87, 0.10));
    w.add(NODE, "GPU memory used", "A", per_gpu(12.0 * GIB, 2.0 * GIB));
    let gpm = |extra: &[(&str, &str)]| -> Vec<(Labels, V)> {
        [
            ("sm_activity", 0.625),
            ("sm_occupancy", 0.25),
            ("tensor_activity", 0.4),
            ("dram_bandwidth", 0.555),
        ]
        .iter()
        .map(|(what, v)| {
            let mut l = vec![("gpu", "0"), ("what", *what)];
            l.extend_from_slice(extra);
            (on(&l), V::Is(*v))
        })
        .collect()
    };
    w.add(NODE, "SM, tensor and DRAM activity (GPM)", "A", gpm(&[]));
    let traffic = |tx: f64, rx: f64| {
        vec![
            (on(&[("gpu", "0"), ("what", "tx")]), V::Is(tx * MIB)),
            (on(&[("gpu", "0"), ("what", "rx")]), V::Is(rx * MIB)),
        ]
    };
    w.add(
        NODE,
        "PCIe and NVLink traffic (GPM)",
        "A",
        traffic(100.0, 200.0),
    );
    w.add(
        NODE,
        "PCIe and NVLink traffic (GPM)",
        "B",
        traffic(400.0, 300.0),
    );
    w.add(
        NODE,
        "Who holds each GPU (GPM)",
        "A",
        vec![(on(&[("gpu", "0"), wl]), V::Is(1.0))],
    );
    w.add(
        NODE,
        "Clock throttle reasons in force",
        "A",
        ["sw_power_cap", "hw_thermal_slowdown"]
            .iter()
            .map(|r| (on(&[("gpu", "0"), ("what", r)]), V::Is(1.0)))
            .collect(),
    );
    w.add(
        NODE,
        "ECC and XID errors",
        "A",
        vec![
            (on(&[("gpu", "0"), ("what", "corrected")]), V::Is(3.0)),
            (on(&[("gpu", "0"), ("what", "uncorrected")]), V::Is(0.0)),
        ],
    );
    w.add(NODE, "ECC and XID errors", "B", per_gpu(1.0, 0.0));

    // ---- node overview: workloads.
    let one = |v: V| vec![(on(&[]), v)];
    let of_workload = |v: V| vec![(on(&[wl]), v)];
    w.add(NODE, "CUDA processes", "A", one(V::Is(1.0)));
    w.add(NODE, "Workloads", "A", one(V::Is(1.0)));
    w.add(
        NODE,
        "Kernel launches per second, by workload",
        "A",
        of_workload(V::Increase(42.0)),
    );
    w.add(
        NODE,
        "CUDA graph launches per second, by workload",
        "A",
        of_workload(V::Increase(4.0)),
    );
    let bandwidth: Vec<(Labels, V)> = copies
        .iter()
        .map(|(d, _, n)| (on(&[("direction", d)]), V::Increase(*n)))
        .collect();
    w.add(NODE, "Copy bandwidth, by direction", "A", bandwidth.clone());
    w.add(
        NODE,
        "Copies and memsets per second, by direction",
        "A",
        copies
            .iter()
            .chain([&memset])
            .map(|(d, n, _)| (on(&[("direction", d)]), V::Increase(*n)))
            .collect(),
    );
    w.add(
        NODE,
        "Time blocked in CUDA calls, by workload",
        "A",
        of_workload(V::Increase(blocked.values().sum())),
    );
    let live = 3.0 * MIB;
    w.add(
        NODE,
        "Device memory live, by workload",
        "A",
        of_workload(V::Is(live)),
    );
    w.add(
        NODE,
        "GPU memory held, by workload (NVML)",
        "A",
        of_workload(V::Is(GIB)),
    );
    // The table: the same figures, a row per workload (copies: every direction but memsets).
    let copied: f64 = copies.iter().map(|c| c.2).sum();
    for (refid, v) in [
        ("A", V::Increase(42.0)),
        ("B", V::Increase(copied)),
        ("C", V::Increase(blocked.values().sum())),
        ("D", V::Is(live)),
        ("E", V::Is(GIB)),
    ] {
        w.add(NODE, "Workloads on the nodes", refid, of_workload(v));
    }

    // ---- node overview: the capture's health.
    let kinds = |name: &str, v: &dyn Fn(&str) -> V| -> Vec<(Labels, V)> {
        b.sum_by(name, &[], "kind")
            .keys()
            .map(|k| (on(&[("kind", k)]), v(k)))
            .collect()
    };
    w.add(
        NODE,
        "Records lost per second, by kind",
        "A",
        kinds("gpuprofd_records_lost_total", &|_| V::Increase(0.0)),
    );
    w.add(
        NODE,
        "Probe faults per second, by kind",
        "A",
        kinds("gpuprofd_probe_faults_total", &|_| V::Increase(0.0)),
    );
    // Per kind, some of which (stacks, drawn at random) may be 0 after phase one.
    let (sub_a, sub_b) = (
        a.sum_by("gpuprofd_records_submitted_total", &[], "kind"),
        b.sum_by("gpuprofd_records_submitted_total", &[], "kind"),
    );
    let written: BTreeMap<String, f64> = sub_b
        .iter()
        .map(|(k, v)| (k.clone(), v - sub_a[k]))
        .collect();
    assert_eq!(
        (written["launch"], written["copy"]),
        (42.0, 14.0),
        "a record per launch and per copy: {written:?}"
    );
    w.add(
        NODE,
        "Records per second: written by the probes, read by the daemon",
        "A",
        one(V::Counters(
            sub_a.iter().map(|(k, f)| (*f, written[k])).collect(),
        )),
    );
    let read = diff("gpuprofd_records_read_total", &[], "");
    w.add(
        NODE,
        "Records per second: written by the probes, read by the daemon",
        "B",
        one(V::Increase(read[""])),
    );
    w.add(
        NODE,
        "Records per second: written by the probes, read by the daemon",
        "C",
        one(V::Increase(0.0)),
    );
    w.add(NODE, "Scrape up", "A", one(V::Is(1.0)));
    w.add(
        NODE,
        "Uprobes attached",
        "A",
        one(V::Is(b.one("gpuprofd_probes", &[]))),
    );
    w.add(NODE, "Launch probes attached", "A", one(V::Is(1.0)));
    // Map fill: the cgroup filter holds this test's one cgroup; the other maps follow the
    // machine's processes (another test's start or end moves them), so only their range.
    w.add(
        NODE,
        "BPF map fill",
        "A",
        b.sum_by("gpuprofd_bpf_map_capacity", &[], "map")
            .iter()
            .map(|(m, cap)| {
                let v = if m == "FILTER_CGROUPS" {
                    V::Is(1.0 / cap)
                } else {
                    V::Within(0.0, 0.5)
                };
                (on(&[("map", m)]), v)
            })
            .collect(),
    );
    w.add(
        NODE,
        "Daemon heap in use",
        "A",
        one(V::Within(256.0 * 1024.0, 512.0 * MIB)),
    );

    // ---- workload drill-down.
    w.add(JOB, "Kernel launches", "A", of_workload(V::Is(44.0)));
    w.add(JOB, "CUDA graph launches", "A", of_workload(V::Is(5.0)));
    w.add(JOB, "Device memory live", "A", of_workload(V::Is(live)));
    w.add(JOB, "Device memory live", "B", of_workload(V::Is(GIB)));
    w.add(
        JOB,
        "Launches per second",
        "A",
        of_workload(V::Increase(42.0)),
    );
    w.add(
        JOB,
        "Launches per second",
        "B",
        of_workload(V::Increase(4.0)),
    );
    let kernels = |gemm: V, relu: V| {
        vec![
            (on(&[("kernel", GEMM)]), gemm),
            (on(&[("kernel", RELU)]), relu),
        ]
    };
    w.add(
        JOB,
        "Top kernels, launches per second",
        "A",
        kernels(V::Increase(30.0), V::Increase(12.0)),
    );
    w.add(
        JOB,
        "Top kernels, launches",
        "A",
        kernels(V::Is(31.0), V::Is(13.0)),
    );
    w.add(JOB, "Copy bandwidth, by direction", "A", bandwidth);
    // Totals: phase one copied 4096 bytes once each way and set 4096 once.
    let totals = |f: &dyn Fn(&(&str, f64, f64)) -> f64| -> Vec<(Labels, V)> {
        copies
            .iter()
            .chain([&memset])
            .map(|c| (on(&[("direction", c.0)]), V::Is(f(c))))
            .collect()
    };
    w.add(JOB, "Copies, by direction", "A", totals(&|c| c.1 + 1.0));
    w.add(JOB, "Copies, by direction", "B", totals(&|c| c.2 + 4096.0));
    w.add(
        JOB,
        "Time blocked, by CUDA call",
        "A",
        blocked
            .iter()
            .map(|(api, n)| (on(&[("api", api)]), V::Increase(*n)))
            .collect(),
    );
    w.add(
        JOB,
        "CUDA calls per second, by function",
        "A",
        calls
            .iter()
            .map(|(api, n)| (on(&[("api", api)]), V::Increase(*n)))
            .collect(),
    );
    let all_calls = b.sum_by("gpuprofd_api_calls_total", &[wl], "api");
    let phase_1 = [
        ("cudaLaunchKernel", 2.0),
        ("cudaMemcpy", 3.0),
        ("cudaMemset", 1.0),
        ("cudaGraphLaunch", 1.0),
        ("cudaDeviceSynchronize", 1.0),
        ("cudaMalloc", 2.0),
    ];
    for (api, n) in phase_1 {
        assert_eq!(all_calls[api], n + calls[api], "{api}");
    }
    w.add(
        JOB,
        "CUDA calls, by function",
        "A",
        all_calls
            .iter()
            .map(|(api, n)| (on(&[("api", api)]), V::Is(*n)))
            .collect(),
    );
    w.add(
        JOB,
        "SM, tensor and DRAM activity of the GPUs it held alone (GPM)",
        "A",
        gpm(&[]),
    );
    w
}
