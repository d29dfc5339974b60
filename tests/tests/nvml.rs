//! NVML correlation on a fake libnvidia-ml.so.1 (tests/fakecuda/nvml.c) with scripted values.
//!
//! Run through `cargo xtask test` (as root, `--test-threads=1`).

use gpuprofd_tests::*;

const GIB: u64 = 1 << 30;

/// gpuprofd on all jobs writing a capture file, sampling the fake NVML every 100 ms with the
/// values in `config`.
fn daemon(config: &str, dir: &TempDir, nvml_lib: Option<&str>) -> Daemon {
    let cfg = dir.path().join("nvml.conf");
    std::fs::write(&cfg, config).unwrap();
    let lib = fakecuda().join("lib");
    let fake = fakecuda().join("lib-nvml/libnvidia-ml.so.1");
    let nvml_lib = nvml_lib.unwrap_or(fake.to_str().unwrap()).to_owned();
    let mut args = all_jobs_args(&lib).to_vec();
    args.extend(["--nvml-lib", &nvml_lib, "--nvml-interval", "100ms"]);
    Daemon::start_with(
        "capture.gpuprof",
        &args,
        &[("FAKENVML_CONFIG", cfg.to_str().unwrap())],
    )
}

#[test]
fn nvml_figures_sit_beside_the_processes_they_belong_to() {
    let dir = TempDir::new("nvml");
    let mut w = Workload::start();
    let pid = w.tgid;
    let config = format!(
        "device NVIDIA_H100_80GB_HBM3 GPU-8f0c2e51 {total}\n\
         util 87 40\nmemused {used}\npower 350000\ntemp 65\nsmclock 1980\n\
         proc {pid} {held} 80 30\nproc 999999 1048576 0 0\n\
         throttle 0x44\npcie 2000 1000\necc 3 0\nxid 79\nxid 48\n",
        total = 80 * GIB,
        used = 12 * GIB,
        held = GIB,
    );
    let d = daemon(&config, &dir, None);
    w.cmd("rt_launch gemm 4 1 1 1 32 1 1 0 0");
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let f = d.stop(); // the report read back from the capture file
    let r = &f.report;
    assert_eq!(r["nvml"]["state"], "ok", "{}", r["nvml"]);
    let samples = r["nvml"]["samples"].as_u64().unwrap();
    assert!(samples >= 5, "{samples} samples in over a second at 100 ms");
    let g = &r["gpus"][0];
    assert_eq!(
        (
            &g["name"],
            &g["uuid"],
            g["samples"].as_u64(),
            g["gpu_util_avg"].as_f64(),
            g["gpu_util_max"].as_u64(),
            g["mem_util_avg"].as_f64()
        ),
        (
            &serde_json::json!("NVIDIA_H100_80GB_HBM3"),
            &serde_json::json!("GPU-8f0c2e51"),
            Some(samples),
            Some(87.0),
            Some(87),
            Some(40.0)
        )
    );
    assert_eq!(
        (
            g["memory_used_max_bytes"].as_u64(),
            g["memory_total_bytes"].as_u64(),
            g["power_avg_w"].as_f64(),
            g["temp_max_c"].as_u64(),
            g["sm_clock_avg_mhz"].as_f64()
        ),
        (
            Some(12 * GIB),
            Some(80 * GIB),
            Some(350.0),
            Some(65),
            Some(1980.0)
        )
    );
    // Health: the throttle reasons in force in every round (power cap, HW thermal), PCIe
    // throughput, volatile ECC counts, the two XID events in the order NVML delivered them —
    // all read back from the capture file.
    assert_eq!(
        g["throttle_rounds"],
        serde_json::json!({"hw_thermal_slowdown": samples, "sw_power_cap": samples})
    );
    assert_eq!(
        (
            g["pcie_tx_avg_kbps"].as_f64(),
            g["pcie_rx_avg_kbps"].as_f64(),
            g["ecc_corrected"].as_u64(),
            g["ecc_uncorrected"].as_u64()
        ),
        (Some(2000.0), Some(1000.0), Some(3), Some(0))
    );
    assert_eq!(g["xid_errors"], serde_json::json!([79, 48]));
    assert_eq!(g["xid_count"], 2);
    // A pid NVML lists but that made no CUDA call gpuprofd saw.
    assert_eq!(g["unprofiled_pids"], serde_json::json!([999999]));
    let p = process(r, pid);
    assert_eq!(kernel_calls(p, GEMM), 4);
    let pg = &p["gpu"];
    assert_eq!(
        (
            pg["devices"].clone(),
            pg["memory_max_bytes"].as_u64(),
            pg["sm_util_avg"].as_f64(),
            pg["mem_util_avg"].as_f64()
        ),
        (serde_json::json!([0]), Some(GIB), Some(80.0), Some(30.0))
    );
    let ps = pg["samples"].as_u64().unwrap();
    assert!((1..=samples).contains(&ps), "{pg}");
    assert!(
        f.stdout
            .contains("0 NVIDIA_H100_80GB_HBM3: util avg 87.0% (max 87%), memory util avg 40.0%"),
        "{}",
        f.stdout
    );
    // The timeline has a utilisation counter per sample, the page a row per GPU.
    let file = f.output.to_str().unwrap();
    let trace = f.output.with_extension("trace.json");
    let (code, _, err) = run_daemon(&["export", file, "-o", trace.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let util: Vec<&serde_json::Value> = t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "GPU 0 utilisation % (NVML)")
        .collect();
    assert_eq!(util.len() as u64, samples);
    assert_eq!(
        util[0]["args"],
        serde_json::json!({"gpu": 87, "memory": 40})
    );
    let dom = overview_dom(&f.output, "report-nvml");
    assert!(
        dom.contains("<td class=\"\" data-k=\"gpu_util_avg\">87.0</td>"),
        "{dom}"
    );
    w.exit();
}

#[test]
fn nvml_failing_mid_run_stops_sampling_not_the_capture() {
    let dir = TempDir::new("nvml-fail");
    let mut w = Workload::start();
    // The GPU "falls off the bus" after 3 sampling rounds.
    let d = daemon(
        "fail_after 3\ndevice FAKE GPU-1 1000\nutil 50 50\n",
        &dir,
        None,
    );
    std::thread::sleep(std::time::Duration::from_millis(1200));
    w.cmd("rt_launch gemm 6 1 1 1 32 1 1 0 0");
    let tgid = w.tgid;
    let f = d.stop();
    let n = &f.report["nvml"];
    assert_eq!(
        (n["state"].as_str(), n["samples"].as_u64()),
        (Some("failed"), Some(3)),
        "{n}"
    );
    assert!(
        n["detail"]
            .as_str()
            .unwrap()
            .contains("NVML failed 3 rounds in a row"),
        "{n}"
    );
    assert!(
        f.stderr
            .iter()
            .any(|l| l.contains("warning: NVML failed 3 rounds in a row")),
        "{:?}",
        f.stderr
    );
    assert_eq!(f.report["gpus"][0]["gpu_util_avg"].as_f64(), Some(50.0));
    assert_eq!(kernel_calls(process(&f.report, tgid), GEMM), 6);
    w.exit();
}

#[test]
fn a_machine_without_nvml_is_told_so_and_captures_anyway() {
    let dir = TempDir::new("nvml-none");
    let mut w = Workload::start();
    let d = daemon("", &dir, Some("/nonexistent/libnvidia-ml.so.1"));
    w.cmd("rt_launch gemm 2 1 1 1 32 1 1 0 0");
    let tgid = w.tgid;
    let f = d.stop();
    let n = &f.report["nvml"];
    assert_eq!(
        (n["state"].as_str(), n["samples"].as_u64()),
        (Some("unavailable"), Some(0))
    );
    assert!(
        n["detail"]
            .as_str()
            .unwrap()
            .starts_with("cannot load /nonexistent/libnvidia-ml.so.1"),
        "{n}"
    );
    assert_eq!(f.report["gpus"], serde_json::json!([]));
    assert!(
        f.stdout.contains("NVML: unavailable: cannot load"),
        "{}",
        f.stdout
    );
    assert_eq!(kernel_calls(process(&f.report, tgid), GEMM), 2);
    w.exit();
}
