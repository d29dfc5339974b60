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
    // A whole GPU: no MIG instance.
    assert_eq!(pg.get("mig"), None, "{pg}");
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

/// Two processes on two MIG instances of one GPU, each given its instance as CUDA does
/// (`CUDA_VISIBLE_DEVICES=MIG-<uuid>`, and the older `MIG-GPU-<uuid>/<gi>/<ci>`); in MIG mode
/// NVML lists each process on the whole GPU with its GPU and compute instance. Each process's
/// report names its instance (NVML's list) and its device 0's calls went to it (its
/// environment, NVML's instances), read back from the capture file, in JSON and text.
#[test]
fn processes_on_mig_instances_are_placed_on_them() {
    let dir = TempDir::new("nvml-mig");
    let mut a = Workload::spawn("workload", &[("CUDA_VISIBLE_DEVICES", "MIG-aaaa1111")]);
    let mut b = Workload::spawn("workload", &[("CUDA_VISIBLE_DEVICES", "MIG-GPU-mig0/2/0")]);
    let (pa, pb) = (a.tgid, b.tgid);
    let config = format!(
        "device NVIDIA_H100_80GB_HBM3 GPU-mig0 {total}\nutil 60 20\n\
         mig MIG-aaaa1111 1 0\nmig MIG-bbbb2222 2 0\n\
         proc {pa} {GIB} 0 0 1 0\nproc {pb} {half} 0 0 2 0\n",
        total = 80 * GIB,
        half = GIB / 2,
    );
    let d = daemon(&config, &dir, None);
    a.cmd("rt_launch gemm 2 1 1 1 32 1 1 0 0");
    b.cmd("rt_launch gemm 3 1 1 1 32 1 1 0 0");
    std::thread::sleep(std::time::Duration::from_millis(800));
    a.exit();
    b.exit();
    let f = d.stop();
    let r = &f.report;
    let mig = |gi| serde_json::json!({"device": 0, "gpu_instance": gi, "compute_instance": 0});
    for (pid, gi, held, launches) in [(pa, 1, GIB, 2), (pb, 2, GIB / 2, 3)] {
        let p = process(r, pid);
        assert_eq!(
            (
                p["gpu"]["devices"].clone(),
                p["gpu"]["mig"].clone(),
                p["gpu"]["memory_max_bytes"].as_u64()
            ),
            (
                serde_json::json!([0]),
                serde_json::json!([mig(gi)]),
                Some(held)
            ),
            "{p}"
        );
        let dev = &p["devices"][0];
        assert_eq!(
            (
                dev["device"].clone(),
                dev["nvml_gpu"].clone(),
                dev["mig"].clone()
            ),
            (0.into(), 0.into(), mig(gi)),
            "{dev}"
        );
        assert_eq!(dev["launches"], launches);
    }
    // The report of the file says it in text too.
    let (code, out, err) = run_daemon(&["report", f.output.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    for (pid, gi) in [(pa, 1), (pb, 2)] {
        let line = out
            .lines()
            .skip_while(|l| !l.starts_with(&format!("process {pid} ")))
            .find(|l| l.trim_start().starts_with("GPU (NVML"))
            .unwrap_or_else(|| panic!("no NVML line for {pid}: {out}"));
        assert!(
            line.contains(&format!("on device 0, MIG instance {gi}/0)")),
            "{line}"
        );
    }
}

/// GPM lines for the fake NVML: SM activity 62.5 %, occupancy 25 %, tensor 40 % (all HMMA,
/// IMMA 0), DRAM 55.5 %, FP16/32/64 10/20/0 %, PCIe tx/rx 100/200 MiB/s, NVLink tx/rx
/// 400/300 MiB/s in all and 150/250 on link 0; nothing else (graphics, integer, DFMA).
const GPM_LINES: &str = "gpm 2 62.5\ngpm 3 25\ngpm 5 40\ngpm 7 40\ngpm 9 0\ngpm 10 55.5\n\
    gpm 11 0\ngpm 12 20\ngpm 13 10\ngpm 20 100\ngpm 21 200\ngpm 60 300\ngpm 61 400\n\
    gpm 62 250\ngpm 63 150\n";

/// The value of the first sample of `name` whose labels contain every one of `labels`.
fn metric(body: &str, name: &str, labels: &[&str]) -> Option<f64> {
    body.lines()
        .find(|l| l.starts_with(&format!("{name}{{")) && labels.iter().all(|x| l.contains(x)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// GPM: the scripted figures, exactly, in the report read back from the capture file, the text
/// report, `/metrics`, the timeline and the overview page. The GPU one job's process holds
/// gives that job its figures; the GPU two jobs share is shown shared, never split; the GPU
/// without GPM says so and keeps its utilisation.
#[test]
fn gpm_figures_are_measured_given_to_the_holding_job_and_unsupported_is_said() {
    let dir = TempDir::new("nvml-gpm");
    let (cg_a, cg_b) = (Cgroup::new("job_77/step_0"), Cgroup::new("job_78/step_0"));
    let mut a = Workload::spawn_in("workload", &cg_a);
    let mut b = Workload::spawn_in("workload", &cg_b);
    let (pa, pb) = (a.tgid, b.tgid);
    let config = format!(
        "device NVIDIA_H100_80GB_HBM3 GPU-gpm0 {total}\nutil 90 40\nproc {pa} {GIB} 80 30\n\
         {GPM_LINES}\
         device NVIDIA_H100_80GB_HBM3 GPU-gpm1 {total}\nutil 50 20\nproc {pa} {GIB} 40 10\n\
         proc {pb} {GIB} 40 10\n{GPM_LINES}\
         device NVIDIA_A100-SXM4-80GB GPU-a100 {total}\nutil 10 5\n\
         device NVIDIA_H100_80GB_HBM3 GPU-gpm3 {total}\nutil 20 5\n{GPM_LINES}gpm_fail_after 2\n",
        total = 80 * GIB,
    );
    let cfg = dir.path().join("nvml.conf");
    std::fs::write(&cfg, config).unwrap();
    let lib = fakecuda().join("lib");
    let fake = fakecuda().join("lib-nvml/libnvidia-ml.so.1");
    let addr = format!("127.0.0.1:{}", free_port());
    let mut args = all_jobs_args(&lib).to_vec();
    args.extend([
        "--nvml-lib",
        fake.to_str().unwrap(),
        "--nvml-interval",
        "100ms",
        "--metrics-addr",
        &addr,
    ]);
    let d = Daemon::start_with(
        "capture.gpuprof",
        &args,
        &[("FAKENVML_CONFIG", cfg.to_str().unwrap())],
    );
    a.cmd("rt_launch gemm 4 1 1 1 32 1 1 0 0");
    b.cmd("rt_launch gemm 2 1 1 1 32 1 1 0 0");
    // Once gpuprofd knows both jobs, GPU 0 is job 77's and GPU 1 shared (bounded wait).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let body = loop {
        let (_, body) = http_get(&addr, "/metrics").expect("/metrics answers");
        let held = |gpu: &str, who: &str| {
            metric(
                &body,
                "gpuprofd_gpu_gpm_holder",
                &[gpu, &format!("workload=\"{who}\"")],
            ) == Some(1.0)
        };
        if held("gpu=\"0\"", "slurm:77") && held("gpu=\"1\"", "shared") {
            break body;
        }
        assert!(std::time::Instant::now() < deadline, "{body}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let g0 = ["gpu=\"0\"", "uuid=\"GPU-gpm0\""];
    let with = |extra: &'static str| [g0[0], g0[1], extra];
    assert_eq!(
        metric(
            &body,
            "gpuprofd_gpu_gpm_ratio",
            &with("what=\"sm_activity\"")
        ),
        Some(0.625)
    );
    assert_eq!(
        metric(
            &body,
            "gpuprofd_gpu_gpm_ratio",
            &with("what=\"dram_bandwidth\"")
        ),
        Some(0.555)
    );
    assert_eq!(
        metric(
            &body,
            "gpuprofd_gpu_gpm_ratio",
            &with("what=\"tensor_hmma\"")
        ),
        Some(0.4)
    );
    assert_eq!(
        metric(
            &body,
            "gpuprofd_gpu_gpm_ratio",
            &with("what=\"tensor_dfma\"")
        ),
        None,
        "a metric the device does not report has no series"
    );
    assert_eq!(
        metric(
            &body,
            "gpuprofd_gpu_gpm_pcie_bytes_per_second",
            &with("what=\"tx\"")
        ),
        Some(100.0 * 1048576.0)
    );
    assert_eq!(
        metric(
            &body,
            "gpuprofd_gpu_gpm_nvlink_bytes_per_second",
            &[g0[0], "what=\"tx\"", "link=\"0\""]
        ),
        Some(150.0 * 1048576.0)
    );
    assert_eq!(
        metric(
            &body,
            "gpuprofd_gpu_gpm_nvlink_bytes_per_second",
            &[g0[0], "what=\"rx\"", "link=\"total\""]
        ),
        Some(300.0 * 1048576.0)
    );
    assert_eq!(
        metric(
            &body,
            "gpuprofd_workload_gpm_ratio",
            &["workload=\"slurm:77\"", "gpu=\"0\"", "what=\"sm_activity\""]
        ),
        Some(0.625)
    );
    assert_eq!(
        metric(&body, "gpuprofd_workload_gpm_ratio", &["gpu=\"1\""]),
        None,
        "a shared GPU's figures are no workload's"
    );
    for (gpu, supported) in [
        ("gpu=\"0\"", 1.0),
        ("gpu=\"1\"", 1.0),
        ("gpu=\"2\"", 0.0),
        ("gpu=\"3\"", 1.0),
    ] {
        assert_eq!(
            metric(&body, "gpuprofd_gpu_gpm_supported", &[gpu]),
            Some(supported),
            "{gpu}"
        );
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    let f = d.stop(); // the report read back from the capture file
    let r = &f.report;
    let figures = serde_json::json!({
        "graphics_activity_pct": null, "sm_activity_pct": 62.5, "sm_occupancy_pct": 25.0,
        "integer_activity_pct": null, "tensor_activity_pct": 40.0, "tensor_hmma_pct": 40.0,
        "tensor_imma_pct": 0.0, "tensor_dfma_pct": null, "dram_bandwidth_pct": 55.5,
        "fp16_activity_pct": 10.0, "fp32_activity_pct": 20.0, "fp64_activity_pct": 0.0,
        "pcie_tx_mib_per_s": 100.0, "pcie_rx_mib_per_s": 200.0,
        "nvlink_tx_mib_per_s": 400.0, "nvlink_rx_mib_per_s": 300.0,
        "nvlink_links": [{"link": 0, "tx_mib_per_s": 150.0, "rx_mib_per_s": 250.0}]
    });
    // GPU 0: every round but the first (GPM needs two samples) measured; the rounds after
    // gpuprofd learnt job 77's process are job 77's, those before unattributed.
    let g = &r["gpus"][0]["gpm"];
    let rounds = r["gpus"][0]["samples"].as_u64().unwrap();
    let n = g["samples"].as_u64().unwrap();
    assert_eq!(n, rounds - 1, "{g}");
    assert_eq!(
        (&g["state"], &g["source"], &g["avg"], &g["max"]),
        (
            &serde_json::json!("measured"),
            &serde_json::json!("measured"),
            &figures,
            &figures
        )
    );
    let held = g["jobs"][0]["samples"].as_u64().unwrap();
    assert_eq!(
        (
            g["jobs"].as_array().unwrap().len(),
            &g["jobs"][0]["workload"],
            &g["jobs"][0]["avg"],
            held + g["unattributed_samples"].as_u64().unwrap(),
            g["shared_samples"].as_u64(),
            g["idle_samples"].as_u64()
        ),
        (
            1,
            &serde_json::json!("slurm:77"),
            &figures,
            n,
            Some(0),
            Some(0)
        ),
        "{g}"
    );
    assert!(held >= 1, "{g}");
    // GPU 1: the two jobs' processes share it: no job's.
    let g1 = &r["gpus"][1]["gpm"];
    assert_eq!(g1["jobs"], serde_json::Value::Null, "{g1}");
    assert!(g1["shared_samples"].as_u64().unwrap() >= 1, "{g1}");
    assert_eq!(
        g1["shared_samples"].as_u64().unwrap() + g1["unattributed_samples"].as_u64().unwrap(),
        g1["samples"].as_u64().unwrap(),
        "{g1}"
    );
    // GPU 2: no GPM, and why; its utilisation as before.
    let g2 = &r["gpus"][2];
    assert_eq!(
        (
            &g2["gpm"]["state"],
            &g2["gpm"]["detail"],
            &g2["gpm"]["samples"]
        ),
        (
            &serde_json::json!("unsupported"),
            &serde_json::json!("the device does not support GPM (it needs a Hopper or later GPU)"),
            &serde_json::json!(0)
        )
    );
    assert_eq!(g2["gpm"]["avg"], serde_json::Value::Null);
    assert_eq!(g2["gpu_util_avg"].as_f64(), Some(10.0));
    // GPU 3: GPM worked for one interval, then its sample call failed 3 rounds in a row:
    // failed, and why; the interval it measured stays.
    assert!(rounds >= 5, "{rounds} rounds: too few for GPU 3 to fail");
    let g3 = &r["gpus"][3]["gpm"];
    assert_eq!(
        (&g3["state"], &g3["samples"], &g3["avg"]),
        (
            &serde_json::json!("failed"),
            &serde_json::json!(1),
            &figures
        ),
        "{g3}"
    );
    assert!(
        g3["detail"]
            .as_str()
            .unwrap()
            .starts_with("GPM failed 3 rounds in a row: nvmlGpmSampleGet failed: "),
        "{g3}"
    );
    // Each job: job 77 held GPU 0 alone; job 78 held nothing alone.
    let job = |id: &str| {
        r["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["kind"] == "slurm" && j["id"] == id)
            .unwrap_or_else(|| panic!("job {id}: {}", r["jobs"]))
    };
    assert_eq!(
        job("77")["gpm"],
        serde_json::json!([{"gpu": 0, "samples": held, "source": "measured", "avg": figures}])
    );
    assert_eq!(job("78")["gpm"], serde_json::Value::Null);
    // The text report.
    assert!(
        f.stdout.contains(&format!(
            "    gpm (measured, {n} samples): SM activity avg 62.5% (max 62.5%), SM occupancy avg \
             25.0%, tensor avg 40.0% (HMMA 40.0%, IMMA 0.0%, DFMA -), DRAM bandwidth avg 55.5%\n"
        )),
        "{}",
        f.stdout
    );
    assert!(
        f.stdout.contains(
            "    gpm: unsupported: the device does not support GPM (it needs a Hopper or later GPU)\n"
        ),
        "{}",
        f.stdout
    );
    assert!(
        f.stdout
            .contains("    gpm (measured, 1 samples, then failed): SM activity avg 62.5%"),
        "{}",
        f.stdout
    );
    // The timeline: a measured counter per GPU and round.
    let file = f.output.to_str().unwrap();
    let trace = f.output.with_extension("trace.json");
    let (code, _, err) = run_daemon(&["export", file, "-o", trace.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let c: Vec<&serde_json::Value> = t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "GPU 0 activity % (GPM, measured)")
        .collect();
    assert_eq!(c.len() as u64, n);
    assert_eq!(
        c[0]["args"],
        serde_json::json!({"dram_bandwidth": 56, "fp16": 10, "fp32": 20, "fp64": 0,
                           "sm_activity": 63, "sm_occupancy": 25, "tensor": 40,
                           "tensor_hmma": 40})
    );
    // The overview page.
    let dom = overview_dom(&f.output, "report-gpm");
    assert!(
        dom.contains("data-k=\"gpm_sm_activity_avg\">62.5</td>"),
        "{dom}"
    );
    assert!(
        dom.contains("data-k=\"gpm_dram_bandwidth_avg\">55.5</td>"),
        "{dom}"
    );
    assert!(dom.contains("data-k=\"gpm\">unsupported</td>"), "{dom}");
    a.exit();
    b.exit();
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

/// `report --gpu N` keeps the calls that went to the node's GPU N: two processes each see one
/// of two GPUs as their device 0 (`CUDA_VISIBLE_DEVICES`), and each one's launches are kept
/// under its own GPU only. A GPU NVML did not list is refused.
#[test]
fn report_gpu_selects_the_node_gpu_through_each_process_environment() {
    let dir = TempDir::new("nvml-gpu");
    let config = "device NVIDIA_H100_80GB_HBM3 GPU-aaaa0000 85899345920\nutil 10 5\n\
                  device NVIDIA_H100_80GB_HBM3 GPU-bbbb1111 85899345920\nutil 20 5\n";
    let d = daemon(config, &dir, None);
    let mut on1 = Workload::spawn("workload", &[("CUDA_VISIBLE_DEVICES", "1")]);
    let mut on0 = Workload::spawn("workload", &[("CUDA_VISIBLE_DEVICES", "0")]);
    on1.cmd("rt_launch gemm 5 1 1 1 32 1 1 0 0");
    on0.cmd("rt_launch gemm 3 1 1 1 32 1 1 0 0");
    std::thread::sleep(std::time::Duration::from_millis(400));
    let (p1, p0) = (on1.tgid, on0.tgid);
    on1.exit();
    on0.exit();
    let f = d.stop();
    // The devices view names each process's device 0 as its node GPU.
    let gpu_of = |pid| process(&f.report, pid)["devices"][0]["nvml_gpu"].clone();
    assert_eq!((gpu_of(p1), gpu_of(p0)), (1.into(), 0.into()));
    let capture = f.output.to_str().unwrap();
    let launches = |gpu: &str| {
        let (code, out, err) = run_daemon(&["report", capture, "--gpu", gpu, "--format", "json"]);
        assert_eq!(code, 0, "{err}");
        let r: serde_json::Value = serde_json::from_str(&out).unwrap();
        let of = |pid| {
            r["processes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["tgid"] == pid)
                .map_or(0, |p| p["launches"].as_u64().unwrap())
        };
        (of(p1), of(p0))
    };
    assert_eq!(launches("1"), (5, 0));
    assert_eq!(launches("0"), (0, 3));
    // The timeline names each stream's GPU both ways where they differ.
    let trace = chrome_trace(&f.output);
    let streams: Vec<(u64, &str)> = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .filter_map(|e| Some((e["pid"].as_u64()?, e["args"]["name"].as_str()?)))
        .filter(|(_, n)| n.contains("stream"))
        .collect();
    assert!(
        streams.contains(&(p1.into(), "GPU 0 (node GPU 1): default stream")),
        "{streams:?}"
    );
    assert!(
        streams.contains(&(p0.into(), "GPU 0: default stream")),
        "{streams:?}"
    );
    let (code, _, err) = run_daemon(&["report", capture, "--gpu", "5"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("NVML listed no GPU 5 on this node (it listed 0, 1)"),
        "{err}"
    );
}
