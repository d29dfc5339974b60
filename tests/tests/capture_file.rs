//! Capture files end to end: `--output FILE.gpuprof` on the real probes, read back by
//! `gpuprofd report`, including after the daemon was killed.
//!
//! Run through `cargo xtask test` (as root, `--test-threads=1`).

use gpuprofd_tests::*;
use std::time::{Duration, Instant};

const RELU: &str = "relu(float*, int)";

#[test]
fn a_capture_file_replays_to_the_report_the_daemon_printed() {
    let d = Daemon::all_jobs_capturing();
    let mut w = Workload::start();
    w.script(&[
        "rt_launch gemm 6 16 16 1 16 16 1 0 0",
        "rt_launch relu 4 8 1 1 256 1 1 0 1",
        "rt_memcpy h2d 4096 3",
        "rt_memcpy_async d2h 100 2 1",
        "rt_sync_stream 1 2",
        "rt_malloc 1048576 2",
        "rt_free_all",
    ]);
    let tgid = w.tgid;
    let f = d.stop();
    assert!(
        f.stderr
            .iter()
            .any(|l| l.contains("capture written to") && l.contains("capture.gpuprof")),
        "{:?}",
        f.stderr
    );
    // The file's report is the one the daemon printed at the end, table for table.
    let (code, table, err) = run_daemon(&["report", f.output.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(table.trim_end(), f.stdout.trim_end());
    // And holds exactly what the workload did.
    let p = process(&f.report, tgid);
    assert_eq!(
        (
            p["launches"].as_u64(),
            kernel_calls(p, GEMM),
            kernel_calls(p, RELU)
        ),
        (Some(10), 6, 4)
    );
    assert_eq!(copies(p, "h2d").unwrap()["bytes"], 4096 * 3);
    assert_eq!(
        (
            copies(p, "d2h").unwrap()["bytes"].as_u64(),
            copies(p, "d2h").unwrap()["async_calls"].as_u64()
        ),
        (Some(200), Some(2))
    );
    assert_eq!(api_calls(p, "cudaStreamSynchronize"), 2);
    assert_eq!(
        (
            p["allocations"]["calls"].as_u64(),
            p["allocations"]["bytes"].as_u64(),
            p["allocations"]["frees"].as_u64(),
            p["allocations"]["live_bytes"].as_u64()
        ),
        (Some(2), Some(2 << 20), Some(2), Some(0))
    );
    assert_eq!(p["comm"], "workload");
    // The libraries the probes went on: the fake driver and runtime, named only by their
    // SONAMEs (no version in the file names), with the build ids readelf reads.
    let libs: Vec<(&str, &str, &str, bool)> = f.report["libraries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["soname"].as_str().unwrap(),
                l["layer"].as_str().unwrap(),
                l["path"].as_str().unwrap(),
                l["version"].is_null(),
            )
        })
        .collect();
    let lib = fakecuda().join("lib");
    let (cuda, cudart) = (lib.join("libcuda.so.1"), lib.join("libcudart.so.12"));
    assert_eq!(
        libs,
        [
            ("libcuda.so.1", "driver", cuda.to_str().unwrap(), true),
            ("libcudart.so.12", "runtime", cudart.to_str().unwrap(), true)
        ]
    );
    for (l, file) in f.report["libraries"]
        .as_array()
        .unwrap()
        .iter()
        .zip([&cuda, &cudart])
    {
        let notes = std::process::Command::new("readelf")
            .args(["-n", file.to_str().unwrap()])
            .output()
            .expect("readelf (binutils)");
        let notes = String::from_utf8_lossy(&notes.stdout);
        let id = notes
            .lines()
            .find_map(|x| x.trim().strip_prefix("Build ID: "))
            .expect("the fake libraries are built with a build id");
        assert_eq!(l["build_id"], id);
    }
    assert!(
        f.stdout
            .contains("\nCUDA libraries: libcuda.so.1 (driver, "),
        "{}",
        f.stdout
    );
    // A view of it, as CSV.
    let (code, csv, err) = run_daemon(&[
        "report",
        f.output.to_str().unwrap(),
        "--view",
        "kernels",
        "--format",
        "csv",
        "--pid",
        &tgid.to_string(),
        "--select",
        "kernel,calls,grid",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        csv,
        format!("kernel,calls,grid\n\"{GEMM}\",6,16x16x1\n\"{RELU}\",4,8x1x1")
    );
    // The timeline: every call of the workload on its thread, launches by kernel name.
    let trace = f.output.with_extension("trace.json");
    let (code, _, err) = run_daemon(&[
        "export",
        f.output.to_str().unwrap(),
        "--format",
        "chrome",
        "-o",
        trace.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let on_thread = |cat: &str| -> Vec<(String, String)> {
        t["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["pid"] == tgid && e["tid"] == tgid && e["cat"] == cat)
            .map(|e| {
                (
                    e["name"].as_str().unwrap().to_owned(),
                    e["ph"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let launches = on_thread("launch");
    assert_eq!(launches.len(), 10);
    assert_eq!(launches.iter().filter(|(n, _)| n == GEMM).count(), 6);
    assert_eq!(launches.iter().filter(|(n, _)| n == RELU).count(), 4);
    // Blocking copies are timed slices; async copies returned at once: slices too (the
    // runtime's return probe times the call), 3 + 2 in all.
    let copies_ = on_thread("copy");
    assert_eq!(copies_.len(), 5, "{copies_:?}");
    assert_eq!(
        on_thread("sync"),
        vec![("cudaStreamSynchronize".to_owned(), "X".to_owned()); 2]
    );
    w.exit();
}

#[test]
fn a_killed_daemon_leaves_a_readable_capture_and_no_probes() {
    let d = Daemon::all_jobs_capturing();
    let mut w = Workload::start();
    w.cmd("rt_launch gemm 9 1 1 1 32 1 1 0 0");
    // The daemon flushes every second: wait for two ticks, then kill it without warning.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let f = d.kill9();
    let (code, out, err) = run_daemon(&["report", f.output.to_str().unwrap(), "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("no closing frame") && err.contains("drop counts are unknown"),
        "{err}"
    );
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(kernel_calls(process(&r, w.tgid), GEMM), 9);
    // The kernel took the probes away with the daemon: the fake runtime's launches still work,
    // and a new daemon attaches to the same libraries and counts only what follows.
    w.cmd("rt_launch gemm 5 1 1 1 32 1 1 0 0");
    let d2 = Daemon::all_jobs();
    w.cmd("rt_launch relu 3 1 1 1 32 1 1 0 0");
    let tgid = w.tgid;
    let r2 = d2.stop().report;
    let p = process(&r2, tgid);
    assert_eq!((kernel_calls(p, GEMM), kernel_calls(p, RELU)), (0, 3));
    w.exit();
}

#[test]
fn captures_killed_at_random_points_open_with_everything_up_to_their_last_flush() {
    // Kill points drawn at random (the seed is printed: GPUPROFD_KILL_SEED replays a run),
    // while a workload launches in bursts and the writer is busy. The file must open every
    // time, hold only what was launched, and hold everything launched well before the kill:
    // the daemon flushes every second, so launches acknowledged 2 s before it are on disk.
    let seed: u64 = std::env::var("GPUPROFD_KILL_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    let mut x = seed;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut seen = Vec::new();
    for round in 0..3 {
        let kill_after = Duration::from_millis(2500 + next() % 2500);
        let d = Daemon::all_jobs_capturing();
        let mut w = Workload::start();
        let started = Instant::now();
        // (when acknowledged, launches so far)
        let mut acked: Vec<(Instant, u64)> = Vec::new();
        let mut total = 0u64;
        while started.elapsed() < kill_after {
            w.cmd("rt_launch gemm 5 1 1 1 32 1 1 0 0");
            w.cmd("storm 2 10");
            total += 25;
            acked.push((Instant::now(), total));
            std::thread::sleep(Duration::from_millis(2));
        }
        let killed_at = Instant::now();
        let f = d.kill9();
        let (code, out, err) =
            run_daemon(&["report", f.output.to_str().unwrap(), "--format", "json"]);
        assert!(
            code == 0 || code == 11,
            "seed {seed} round {round}: report exited {code}: {err}"
        );
        let r: serde_json::Value = serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("seed {seed} round {round}: {e}: {out}\n{err}"));
        let got = if has_process(&r, w.tgid) {
            process(&r, w.tgid)["launches"].as_u64().unwrap()
        } else {
            0
        };
        let flushed = acked
            .iter()
            .take_while(|(at, _)| killed_at.duration_since(*at) >= Duration::from_secs(2))
            .last()
            .map_or(0, |a| a.1);
        assert!(
            flushed <= got && got <= total,
            "seed {seed} round {round}: killed after {kill_after:?}: {got} launches recovered, \
             {flushed} acknowledged 2 s before the kill, {total} in all; {err}"
        );
        assert_eq!(r["decode_errors"], 0, "seed {seed} round {round}");
        seen.push((kill_after.as_millis(), flushed, got, total));
        w.exit();
    }
    eprintln!(
        "reliability: capture killed at random points (seed {seed}): (ms, launches acknowledged \
         2 s before, recovered, launched) {seen:?}"
    );
}

#[test]
fn report_refuses_what_is_not_a_capture() {
    let dir = TempDir::new("notcapture");
    let json = dir.path().join("report.json");
    std::fs::write(&json, "{\"schema\": \"gpuprofd.report/1\"}").unwrap();
    let (code, out, err) = run_daemon(&["report", json.to_str().unwrap()]);
    assert_eq!((code, out.as_str()), (10, ""));
    assert!(err.contains("is not a gpuprofd capture file"), "{err}");
    let (code, _, err) = run_daemon(&["report", "/nonexistent/x.gpuprof"]);
    assert_eq!(code, 10);
    assert!(
        err.contains("cannot read \"/nonexistent/x.gpuprof\""),
        "{err}"
    );
}

#[test]
fn a_damaged_capture_reports_what_was_recovered() {
    let d = Daemon::all_jobs_capturing();
    let mut w = Workload::start();
    w.cmd("rt_launch gemm 4 1 1 1 32 1 1 0 0");
    let tgid = w.tgid;
    w.exit();
    let f = d.stop();
    // Cut the last 10 bytes (inside the closing frame).
    let mut bytes = std::fs::read(&f.output).unwrap();
    bytes.truncate(bytes.len() - 10);
    std::fs::write(&f.output, &bytes).unwrap();
    let (code, out, err) = run_daemon(&["report", f.output.to_str().unwrap(), "--format", "json"]);
    assert_eq!(code, 11, "{err}");
    assert!(
        err.contains("is damaged: the file ends inside the frame at byte"),
        "{err}"
    );
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(kernel_calls(process(&r, tgid), GEMM), 4);
}

#[test]
fn advice_names_the_sync_bound_process_and_only_it() {
    let d = Daemon::all_jobs_capturing();
    let mut calm = Workload::start();
    calm.script(&[
        "rt_launch gemm 20 1 1 1 32 1 1 0 0",
        "rt_memcpy h2d 1048576 2",
    ]);
    let mut waiting = Workload::start();
    // 40 device synchronisations of 50 ms each: 2 s of the host waiting for the "GPU".
    waiting.script(&["set_delay_us 50000", "rt_sync_device 40"]);
    let (calm_pid, waiting_pid) = (calm.tgid, waiting.tgid);
    let f = d.stop();
    let (code, out, err) = run_daemon(&[
        "report",
        f.output.to_str().unwrap(),
        "--view",
        "advice",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let advice: serde_json::Value = serde_json::from_str(&out).unwrap();
    let got: Vec<(&str, u64)> = advice
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["rule"].as_str().unwrap(), a["pid"].as_u64().unwrap()))
        .collect();
    assert_eq!(got, [("sync_bound", u64::from(waiting_pid))], "{advice}");
    assert!(
        advice[0]["evidence"]
            .as_str()
            .unwrap()
            .contains("most in cudaDeviceSynchronize (40 calls, p50 "),
        "{advice}"
    );
    assert!(
        f.stdout
            .contains(&format!("[sync_bound] process {waiting_pid} workload"))
    );
    assert!(!f.stdout.contains(&format!("process {calm_pid} workload:")));
    calm.exit();
    waiting.exit();
}

#[test]
fn a_training_loop_is_cut_into_its_steps() {
    let d = Daemon::all_jobs_capturing();
    let mut w = Workload::start();
    // Warm-up, then 6 iterations of [200 ms preparing input, 5 launches, a 4 KiB copy, the
    // stream sync that closes the step], then a short last iteration.
    let mut script = vec!["rt_malloc 1048576 1", "rt_sync_device 1"];
    for _ in 0..6 {
        script.extend([
            "sleep_ms 200",
            "rt_launch gemm 3 1 1 1 32 1 1 0 1",
            "rt_launch relu 2 1 1 1 32 1 1 0 1",
            "rt_memcpy h2d 4096 1",
            "rt_sync_stream 1 1",
        ]);
    }
    script.extend(["rt_launch gemm 1 1 1 1 32 1 1 0 1", "rt_sync_stream 1 1"]);
    w.script(&script);
    let tgid = w.tgid;
    let f = d.stop();
    let file = f.output.to_str().unwrap();
    let (code, out, err) = run_daemon(&["report", file, "--view", "steps", "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{v}");
    let s = &rows[0];
    assert_eq!(s["pid"], tgid);
    assert!(
        s["boundary"]
            .as_str()
            .unwrap()
            .starts_with("cudaStreamSynchronize 0x"),
        "{s}"
    );
    // The first iteration closes the warm-up; iterations 2..6 are the loop's steps, the short
    // last one is irregular.
    assert_eq!(
        (
            s["calls"].as_u64(),
            s["irregular"].as_u64(),
            s["launches"].as_u64(),
            s["copy_bytes"].as_u64()
        ),
        (Some(5), Some(1), Some(5), Some(4096))
    );
    let input = s["first_enqueue_ns"].as_u64().unwrap();
    let wall = s["wall_p50_ns"].as_u64().unwrap();
    assert!((200_000_000..400_000_000).contains(&input), "{s}");
    assert!(wall >= input, "{s}");
    let steps = s["steps"].as_array().unwrap();
    assert_eq!(
        steps
            .iter()
            .map(|x| (
                x["launches"].as_u64().unwrap(),
                x["regular"].as_bool().unwrap()
            ))
            .collect::<Vec<_>>(),
        [
            (5, true),
            (5, true),
            (5, true),
            (5, true),
            (5, true),
            (1, false)
        ]
    );
    // The advice names the input wait; nothing else stands out.
    let (code, out, _) = run_daemon(&["report", file, "--view", "advice", "--format", "json"]);
    assert_eq!(code, 0);
    let a: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rules: Vec<&str> = a
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["rule"].as_str().unwrap())
        .collect();
    assert_eq!(rules, ["input_bound"], "{a}");
    // The timeline view: 46 calls (malloc, device sync, 6 × [5 launches, copy, sync], launch,
    // sync), 31 launches, active for at least the six 200 ms waits, rate over that span.
    let (code, out, err) = run_daemon(&[
        "report",
        file,
        "--view",
        "timeline",
        "--format",
        "json",
        "--pid",
        &tgid.to_string(),
    ]);
    assert_eq!(code, 0, "{err}");
    let t: serde_json::Value = serde_json::from_str(&out).unwrap();
    let row = &t[0];
    let api_calls: u64 = process(&f.report, tgid)["api"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["calls"].as_u64().unwrap())
        .sum();
    assert_eq!(
        (row["calls"].as_u64(), row["launches"].as_u64(), api_calls),
        (Some(46), Some(31), 46),
        "{t}"
    );
    let (first, last) = (
        row["first_call_ns"].as_u64().unwrap(),
        row["last_call_ns"].as_u64().unwrap(),
    );
    let span = last - first;
    assert!((1_200_000_000..3_000_000_000).contains(&span), "{t}");
    assert!(last <= f.report["duration_ns"].as_u64().unwrap(), "{t}");
    let rate = row["rate"].as_f64().unwrap();
    assert!((rate - 31.0 / (span as f64 / 1e9)).abs() <= 0.05, "{t}");
    let bins = &row["bins"];
    assert_eq!(
        bins["calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .sum::<u64>(),
        46
    );
    // And the timeline has a span per step.
    let trace = f.output.with_extension("trace.json");
    let (code, _, err) = run_daemon(&["export", file, "-o", trace.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let spans = t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "step" && e["pid"] == tgid)
        .count();
    assert_eq!(spans, 6);
    // The same trace in Perfetto's protobuf format holds exactly the same events, read with
    // Perfetto's own schema: every slice, instant, counter value and flow arrow (none here:
    // no GPU records to point at; a launch's thread and stream events are not linked). An
    // instant on a thread is a slice of duration 0 to the trace processor, as an X of dur 0.
    let pf = f.output.with_extension("pftrace");
    let (code, _, err) = run_daemon(&["export", file, "-o", pf.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let events = t["traceEvents"].as_array().unwrap();
    let count = |ph: &str, scope: Option<&str>| {
        events
            .iter()
            .filter(|e| e["ph"] == ph && scope.is_none_or(|s| e["s"] == s))
            .count() as u64
    };
    let got = check_pftrace(&pf, &trace);
    assert_eq!(
        (
            got["slices"].as_u64(),
            got["instants"].as_u64(),
            got["flows"].as_u64()
        ),
        (
            Some(count("X", None) + count("i", Some("t"))),
            Some(count("i", Some("p"))),
            Some(0)
        ),
        "{got}"
    );
    // The 31 launches: on their thread and on their stream.
    let launches = events.iter().filter(|e| e["cat"] == "launch").count();
    assert_eq!((launches, count("s", None)), (62, 0));
    // Past --json-limit, a JSON export is written in Perfetto's format instead, and says so.
    let small = f.output.with_extension("small.json");
    let (code, _, err) = run_daemon(&[
        "export",
        file,
        "-o",
        small.to_str().unwrap(),
        "--json-limit",
        "4096",
    ]);
    assert_eq!(code, 0, "{err}");
    let switched = small.with_extension("pftrace");
    assert!(
        err.contains("writing Perfetto's protobuf format to"),
        "{err}"
    );
    assert!(!small.exists() && switched.exists(), "{err}");
    assert_eq!(
        std::fs::read(&switched).unwrap(),
        std::fs::read(&pf).unwrap()
    );
    // The overview page, as headless Chromium renders it, shows the report's numbers.
    let dom = overview_dom(&f.output, "report-training-loop");
    let launches: u64 = f.report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["launches"].as_u64().unwrap())
        .sum();
    assert_eq!(launches, 31);
    assert!(dom.contains("<td data-k=\"launches\">31</td>"), "{dom}");
    assert!(
        dom.contains(&format!(
            "<td class=\"l\" data-k=\"name\">{GEMM}</td><td class=\"\" data-k=\"calls\">19</td>"
        )),
        "{dom}"
    );
    assert!(
        dom.contains(&format!("data-pid=\"{tgid}\" data-points=\"6\"")),
        "step chart: {dom}"
    );
    assert!(dom.contains("data-rule=\"input_bound\""), "{dom}");
    w.exit();
}

/// The GPU idle derived from the syncs, on a loop whose true figures the script sets: the fake
/// driver blocks every sync 30 ms (the GPU "had" 30 ms of work queued), and the host prepares
/// each step for 100 ms with nothing queued.
#[test]
fn derived_gpu_idle_and_launch_ahead_of_a_known_loop() {
    const MS: u64 = 1_000_000;
    // Sleeps overshoot, and each scripted command is a round trip through a pipe: on a loaded
    // 2-core CI machine, 30 ms of slack on the 100 ms gap and 10 ms on the 30 ms sync.
    let gap = 100 * MS..130 * MS;
    let ahead = 30 * MS..40 * MS;
    let d = Daemon::all_jobs_capturing();
    let mut w = Workload::start();
    let mut script = vec!["set_delay_us 30000", "rt_malloc 1048576 1"];
    for _ in 0..5 {
        script.extend([
            "sleep_ms 100",
            "rt_launch gemm 3 1 1 1 32 1 1 0 1",
            "rt_launch relu 2 1 1 1 32 1 1 0 1",
            "rt_sync_stream 1 1",
        ]);
    }
    w.script(&script);
    let tgid = w.tgid;
    let f = d.stop();
    let p = process(&f.report, tgid);
    let g = &p["derived_gpu_idle"];
    assert_eq!(
        (g["basis"].as_str(), &g["unavailable"], g["drains"].as_u64()),
        (Some("derived"), &serde_json::Value::Null, Some(5)),
        "{g}"
    );
    // Known empty from each sync's return to the next iteration's first launch: 4 gaps.
    let idle = g["idle_lower_bound_ns"].as_u64().unwrap();
    assert!((4 * gap.start..4 * gap.end).contains(&idle), "{g}");
    for k in ["launch_ahead_p50_ns", "launch_ahead_max_ns"] {
        assert!(ahead.contains(&g[k].as_u64().unwrap()), "{k}: {g}");
    }
    // One stream got all the work: its figures are the process's.
    let streams = p["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 1, "{streams:?}");
    assert_eq!(streams[0]["derived_idle_ns"].as_u64(), Some(idle));
    assert_eq!(streams[0]["drains"].as_u64(), Some(5));
    // The steps: the first sync opens the loop, iterations 2..5 are its steps. The boundary
    // drains everything, so each step's derived idle is exactly its wait for its first launch.
    let file = f.output.to_str().unwrap();
    let (code, out, err) = run_daemon(&["report", file, "--view", "steps", "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let s = &v.as_array().unwrap()[0];
    let steps = s["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 4, "{s}");
    for st in steps {
        let idle = st["derived_gpu_idle_ns"].as_u64().unwrap();
        assert_eq!(Some(idle), st["first_enqueue_ns"].as_u64(), "{st}");
        assert!(gap.contains(&idle), "{st}");
        let a = st["derived_launch_ahead_ns"].as_u64().unwrap();
        assert!(ahead.contains(&a), "{st}");
    }
    assert!(
        f.stdout
            .contains("GPU idle (derived from syncs, a lower bound): >= "),
        "{}",
        f.stdout
    );
    // The overview page shows the same figures, labelled derived.
    let dom = overview_dom(&f.output, "derived-gpu-idle");
    assert!(
        dom.contains("GPU idle per process (derived from the syncs: a lower bound, not measured)"),
        "{dom}"
    );
    let ms = |ns: u64| format!("{:.3}", ns as f64 / 1e6);
    for (k, v) in [
        ("idle_ms", ms(idle)),
        ("drains", "5".to_owned()),
        (
            "ahead_p50_ms",
            ms(g["launch_ahead_p50_ns"].as_u64().unwrap()),
        ),
        (
            "ahead_max_ms",
            ms(g["launch_ahead_max_ns"].as_u64().unwrap()),
        ),
        ("span_ms", ms(g["span_ns"].as_u64().unwrap())),
    ] {
        let cell = format!("<td class=\"\" data-k=\"{k}\">{v}</td>");
        assert!(dom.contains(&cell), "{cell} not on the page: {dom}");
    }
    w.exit();
}

/// The export's golden traces (a synthetic capture with every kind of event, and a window of
/// it; `profiler-daemon/src/output/trace/fixtures`): the Perfetto one holds exactly the JSON
/// one's events, read with Perfetto's own schema and the trace processor's rules (sequences,
/// incremental clocks, interned strings), counter series NVML did not report included (null
/// in JSON, no value in Perfetto).
#[test]
fn the_golden_perfetto_traces_hold_their_json_twins_events() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../profiler-daemon/src/output/trace/fixtures");
    for (name, slices, instants, counters) in [("full", 205, 2, 20), ("window", 12, 0, 7)] {
        let got = check_pftrace(
            &dir.join(format!("{name}.pftrace")),
            &dir.join(format!("{name}.json")),
        );
        assert_eq!(
            got,
            serde_json::json!({"slices": slices, "instants": instants,
                               "counter_values": counters, "flows": 0}),
            "{name}"
        );
    }
}
