//! The OTLP figures are `/metrics`' figures: same series, same labels, same values.

use super::*;
use crate::output::prometheus::tests::{extra, report};

/// The exposition's samples of `name`: `{labels}` → value.
fn samples(text: &str, name: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let (labels, value) = rest.rsplit_once(' ')?;
            (labels.is_empty() || labels.starts_with('{'))
                .then(|| (labels.to_owned(), value.parse().unwrap()))
        })
        .collect()
}

/// `attrs` written as Prometheus writes labels (`hw.id`, the conventions' extra, left out).
fn label_text(a: &Attrs) -> String {
    let l: Vec<String> = a
        .iter()
        .filter(|(k, _)| *k != "hw.id")
        .map(|(k, v)| format!("{k}=\"{v}\""))
        .collect();
    if l.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", l.join(","))
    }
}

#[test]
fn every_instrument_carries_the_exposition_s_samples_exactly() {
    let (mut r, e) = (report(), extra());
    // Measured GPU time in one process (the injection library), on two of its kernels.
    let p = &mut r.processes[1];
    p.gpu_time.basis = "measured".into();
    p.gpu_time.kernel_ns = 1_500_000_000;
    for (k, ns) in p.kernels.iter_mut().zip([1_000_000_000, 500_000_000]) {
        k.gpu_time = Some(crate::model::kernel_time::KernelGpuTime {
            total_ns: ns,
            ..Default::default()
        });
    }
    // NCCL in the same process: one communicator, all-reduces with measured kernel time, and
    // a send on a communicator made before the attach (unknown id and rank).
    p.nccl = Some(
        serde_json::from_value(
            serde_json::json!({"calls": 13, "bytes": 4608, "communicators": [
            {"handle": "0x10", "id": "a117559ee47cd405", "rank": 2, "nranks": 4, "device": 0,
             "created_by": "ncclCommInitRank", "ended": null,
             "ops": [{"op": "AllReduce", "calls": 12, "bytes": 4096, "in_group": 0,
                      "datatypes": {"float32": 12}, "reductions": {"sum": 12},
                      "streams": ["0x1"], "devices": {"0": 12},
                      "gpu_kernels": 12, "gpu_ns": 30_000_000}]},
            {"handle": "0x20", "id": null, "rank": null, "nranks": null, "device": null,
             "created_by": "before_attach", "ended": null,
             "ops": [{"op": "Send", "calls": 1, "bytes": 512, "in_group": 1,
                      "datatypes": {"int64": 1}, "reductions": {}, "streams": ["0x1"],
                      "devices": {"0": 1}}]}]}),
        )
        .unwrap(),
    );
    let text = prometheus::render(&r, &e);
    let f = figures(&r, &e);
    assert_eq!(f.of(NCCL_CALLS).count(), 2);
    assert_eq!(f.of(NCCL_GPU_TIME).count(), 1);
    for spec in METRICS {
        let want = samples(&text, spec.prometheus);
        let got: BTreeMap<String, f64> = f
            .of(spec.name)
            .map(|(a, v)| {
                let x = match v {
                    Value::Int(n) => n as f64,
                    Value::Float(x) => x,
                };
                (label_text(a), x)
            })
            .collect();
        assert_eq!(got, want, "{} (/metrics: {})", spec.name, spec.prometheus);
    }
    // The fixture reaches every instrument but the duty cycle's (no duty cycle in it).
    let empty: Vec<&str> = METRICS
        .iter()
        .filter(|s| f.of(s.name).next().is_none())
        .map(|s| s.name)
        .collect();
    assert_eq!(empty, [LAUNCHES_ESTIMATED, LAUNCHES_STDERR]);
    assert_eq!(
        f.of(LAUNCHES).collect::<Vec<_>>(),
        [(
            &vec![
                ("pid", "100".to_owned()),
                ("comm", "python3".to_owned()),
                ("workload", "slurm:77".to_owned())
            ],
            Value::Int(1000)
        )]
    );
    let gpu: Vec<_> = f.of(GPU_UTIL).collect();
    assert_eq!(gpu.len(), 1);
    assert!(gpu[0].0.contains(&("hw.id", "GPU-1".to_owned())));
    assert_eq!(gpu[0].1, Value::Float(0.87));
}

/// Every family of the exposition is sent, but GPM's (per GPU and link, see docs/SERVICE.md).
#[test]
fn every_exposition_family_but_gpm_has_an_instrument() {
    let text = prometheus::render(&report(), &extra());
    let missing: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .filter(|n| !METRICS.iter().any(|s| s.prometheus == *n))
        .collect();
    assert_eq!(
        missing,
        [
            "gpuprofd_gpu_gpm_supported",
            "gpuprofd_gpu_gpm_ratio",
            "gpuprofd_gpu_gpm_pcie_bytes_per_second",
            "gpuprofd_gpu_gpm_nvlink_bytes_per_second",
            "gpuprofd_gpu_gpm_holder",
            "gpuprofd_workload_gpm_ratio",
        ]
    );
}

/// What an OpenTelemetry Collector's Prometheus exporter makes of a name and unit (the
/// translation its `prometheus` exporter applies by default).
fn collector_name(s: &Spec) -> String {
    let mut n = s.name.replace('.', "_");
    let unit = match s.unit {
        "By" => "bytes",
        "s" => "seconds",
        "By/s" => "bytes_per_second",
        "1" if s.kind == Kind::Gauge => "ratio",
        _ => "",
    };
    if !unit.is_empty() && !n.ends_with(unit) {
        n = format!("{n}_{unit}");
    }
    if s.kind == Kind::Counter {
        n.push_str("_total");
    }
    n
}

#[test]
fn through_a_collector_the_names_are_gpuprofd_s_own_but_the_conventions() {
    for s in METRICS {
        if s.name.starts_with("hw.") {
            assert_ne!(collector_name(s), s.prometheus);
        } else {
            assert_eq!(collector_name(s), s.prometheus, "{}", s.name);
        }
    }
}
