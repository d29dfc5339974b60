//! Kernel names after a live attach: driver handles a process made before gpuprofd attached
//! are named from the driver's own function objects, through a layout the daemon confirmed on
//! handles it saw named after the attach (`name_source` `driver_object`), and stay
//! `<unknown 0x…>` when the calibration handles are too few or disagree — never a wrong name.
//!
//! The fake driver keeps a function's (and a kernel's) name pointer at +8 of its object, as the
//! real 550 driver does; `drv_hold NAME [kernel|elsewhere]` makes a handle of its own module
//! (`elsewhere`: an object that keeps no name pointer) and `drv_launch_held` launches it.
//!
//! A confirmed layout is remembered in the state directory (`--state-dir`): a later run names
//! the handles made before its attach from its first launch (`driver_object_remembered`).

use gpuprofd_tests::*;
use serde_json::{Value, json};

/// (name, calls, name_source, api) of every kernel row of `p`, sorted.
fn rows(p: &Value) -> Vec<(String, u64, String, String)> {
    let mut v: Vec<_> = p["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["name"].as_str().unwrap().to_owned(),
                k["calls"].as_u64().unwrap(),
                k["name_source"].as_str().unwrap().to_owned(),
                k["api"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    v.sort();
    v
}

fn row(name: &str, calls: u64, source: &str, api: &str) -> (String, u64, String, String) {
    (name.to_owned(), calls, source.to_owned(), api.to_owned())
}

/// `drv_hold ARGS`: the handle the workload replied with (`0x…`).
fn hold(w: &mut Workload, args: &str) -> String {
    let reply = w.cmd(&format!("drv_hold {args}"));
    reply.rsplit(' ').next().unwrap().to_owned()
}

#[test]
fn handles_made_before_the_attach_are_named_from_the_driver_objects() {
    let mut w = Workload::start();
    // Before the attach: the runtime registers its kernels (at start-up) and makes vecAdd's
    // function at its first launch; the program makes two functions and a kernel of its own.
    w.cmd("rt_launch vecAdd 1 1 1 1 32 1 1 0 0");
    hold(&mut w, "_Z9pre_alphaPf");
    hold(&mut w, "triton_pre_beta_0");
    hold(&mut w, "_Z9pre_gammaPKf kernel");
    let pid = w.tgid.to_string();
    let d = Daemon::capturing(&["--pid", &pid]);
    // After: three new functions the probes see named (calibration), one made by the
    // runtime's lazy loading at relu's first launch, and one library kernel.
    hold(&mut w, "_Z5cal_aPf");
    w.cmd("rt_launch relu 2 1 1 1 32 1 1 0 0");
    hold(&mut w, "triton_cal_b_1");
    hold(&mut w, "_Z5cal_cPKfi");
    hold(&mut w, "_Z5cal_kPf kernel");
    w.script(&[
        "drv_launch_held _Z9pre_alphaPf 3",
        "drv_launch_held triton_pre_beta_0 5",
        "drv_launch_held _Z9pre_gammaPKf 7",
        "drv_launch_held _Z5cal_aPf 2",
        "drv_launch_held triton_cal_b_1 1",
        "drv_launch_held _Z5cal_cPKfi 1",
        "drv_launch_held _Z5cal_kPf 4",
        "rt_launch vecAdd 6 1 1 1 32 1 1 0 0",
    ]);
    let tgid = w.tgid;
    let f = d.stop();
    // The report is the one the capture file replays: the names read are in the file.
    let p = process(&f.report, tgid);
    assert_eq!(
        rows(p),
        vec![
            row("cal_a(float*)", 2, "module_get_function", "cuLaunchKernel"),
            row(
                "cal_c(float const*, int)",
                1,
                "module_get_function",
                "cuLaunchKernel"
            ),
            row("cal_k(float*)", 4, "library_get_kernel", "cuLaunchKernel"),
            row("pre_alpha(float*)", 3, "driver_object", "cuLaunchKernel"),
            row(
                "pre_gamma(float const*)",
                7,
                "driver_object",
                "cuLaunchKernel"
            ),
            row("relu(float*, int)", 2, "symbols", "cudaLaunchKernel"),
            row("triton_cal_b_1", 1, "module_get_function", "cuLaunchKernel"),
            row("triton_pre_beta_0", 5, "driver_object", "cuLaunchKernel"),
            row(
                "vecAdd(float const*, float const*, float*, int)",
                6,
                "symbols",
                "cudaLaunchKernel"
            ),
        ]
    );
    assert_eq!(
        (&p["launches"], &p["unnamed_launches"]),
        (&json!(31), &json!(0))
    );
    // The kernels view says where each name came from.
    let (code, csv, err) = run_daemon(&[
        "report",
        f.output.to_str().unwrap(),
        "--view",
        "kernels",
        "--select",
        "kernel,calls,name_source",
        "--format",
        "csv",
    ]);
    assert_eq!(code, 0, "{err}");
    let mut lines: Vec<&str> = csv.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        vec![
            "\"cal_c(float const*, int)\",1,module_get_function",
            "\"relu(float*, int)\",2,symbols",
            "\"vecAdd(float const*, float const*, float*, int)\",6,symbols",
            "cal_a(float*),2,module_get_function",
            "cal_k(float*),4,library_get_kernel",
            "kernel,calls,name_source",
            "pre_alpha(float*),3,driver_object",
            "pre_gamma(float const*),7,driver_object",
            "triton_cal_b_1,1,module_get_function",
            "triton_pre_beta_0,5,driver_object",
        ]
    );
    w.exit();
}

#[test]
fn too_few_calibration_handles_leave_the_old_ones_unknown() {
    let mut w = Workload::spawn("workload_drv", &[]);
    let old = hold(&mut w, "_Z3oldPf");
    let pid = w.tgid.to_string();
    let d = Daemon::start(&["--pid", &pid]);
    hold(&mut w, "_Z4cal1Pf");
    hold(&mut w, "_Z4cal2Pf");
    w.script(&[
        "drv_launch_held _Z3oldPf 4",
        "drv_launch_held _Z4cal1Pf 1",
        "drv_launch_held _Z4cal2Pf 2",
    ]);
    let tgid = w.tgid;
    let r = d.stop().report;
    let p = process(&r, tgid);
    assert_eq!(
        rows(p),
        vec![
            row(&format!("<unknown {old}>"), 4, "unknown", "cuLaunchKernel"),
            row("cal1(float*)", 1, "module_get_function", "cuLaunchKernel"),
            row("cal2(float*)", 2, "module_get_function", "cuLaunchKernel"),
        ]
    );
    assert_eq!(
        (&p["launches"], &p["unnamed_launches"]),
        (&json!(7), &json!(4))
    );
    w.exit();
}

#[test]
fn a_calibration_handle_that_disagrees_leaves_the_old_ones_unknown() {
    let mut w = Workload::spawn("workload_drv", &[]);
    let old = hold(&mut w, "_Z3oldPf");
    let pid = w.tgid.to_string();
    let d = Daemon::start(&["--pid", &pid]);
    // Two agree, the third keeps no name pointer in its object, the fourth agrees again:
    // three agreeing are not enough once one disagreed. (The third's name is still reachable
    // through its module, whose name table the fake driver allocates next to it: a longer
    // chain that would name a module's first kernel for all its kernels.)
    hold(&mut w, "_Z4cal1Pf");
    hold(&mut w, "_Z4cal2Pf");
    hold(&mut w, "_Z4cal3Pf elsewhere");
    hold(&mut w, "_Z4cal4Pf");
    w.script(&[
        "drv_launch_held _Z3oldPf 6",
        "drv_launch_held _Z4cal1Pf 1",
        "drv_launch_held _Z4cal2Pf 1",
        "drv_launch_held _Z4cal3Pf 1",
        "drv_launch_held _Z4cal4Pf 1",
    ]);
    let tgid = w.tgid;
    let r = d.stop().report;
    let p = process(&r, tgid);
    assert_eq!(
        rows(p),
        vec![
            row(&format!("<unknown {old}>"), 6, "unknown", "cuLaunchKernel"),
            row("cal1(float*)", 1, "module_get_function", "cuLaunchKernel"),
            row("cal2(float*)", 1, "module_get_function", "cuLaunchKernel"),
            row("cal3(float*)", 1, "module_get_function", "cuLaunchKernel"),
            row("cal4(float*)", 1, "module_get_function", "cuLaunchKernel"),
        ]
    );
    assert_eq!(p["unnamed_launches"], 6);
    w.exit();
}

#[test]
fn handles_made_before_the_attach_are_named_with_launches_counted_in_the_kernel() {
    let mut w = Workload::spawn("workload_drv", &[]);
    hold(&mut w, "_Z3oldPf");
    let pid = w.tgid.to_string();
    let d = Daemon::start(&["--pid", &pid, "--count-launches", "20ms"]);
    for name in ["_Z4cal1Pf", "_Z4cal2Pf", "_Z4cal3Pf"] {
        hold(&mut w, name);
    }
    w.script(&[
        "drv_launch_held _Z3oldPf 5",
        "drv_launch_held _Z4cal1Pf 1",
        "drv_launch_held _Z4cal2Pf 1",
        "drv_launch_held _Z4cal3Pf 1",
    ]);
    let tgid = w.tgid;
    let f = d.stop();
    let p = process(&f.report, tgid);
    assert_eq!(
        rows(p),
        vec![
            row("cal1(float*)", 1, "module_get_function", "cuLaunchKernel"),
            row("cal2(float*)", 1, "module_get_function", "cuLaunchKernel"),
            row("cal3(float*)", 1, "module_get_function", "cuLaunchKernel"),
            row("old(float*)", 5, "driver_object", "cuLaunchKernel"),
        ]
    );
    assert_eq!(
        (&p["launches"], &p["unnamed_launches"]),
        (&json!(8), &json!(0))
    );
    assert_eq!(
        f.report["submitted"]["launch"], 0,
        "{}",
        f.report["submitted"]
    );
    w.exit();
}

// ---- layouts remembered across runs (the state directory) --------------------------------

/// The GNU build id of the fake driver, as `readelf -n` prints it.
fn driver_build_id() -> String {
    let out = std::process::Command::new("readelf")
        .arg("-n")
        .arg(fakecuda().join("lib/libcuda.so.1"))
        .output()
        .expect("run readelf");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let id = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .unwrap_or_else(|| panic!("no build id in {text}"));
    id.to_owned()
}

fn layouts_file(state: &TempDir) -> Value {
    let text = std::fs::read_to_string(state.path().join("driver-layouts.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The file's layouts without their times: (build id, kind, chains, samples).
fn layouts(state: &TempDir) -> Vec<(String, String, Value, u64)> {
    let f = layouts_file(state);
    assert_eq!(f["format"], "gpuprofd.driver-layouts/1");
    f["layouts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["build_id"].as_str().unwrap().to_owned(),
                l["kind"].as_str().unwrap().to_owned(),
                l["chains"].clone(),
                l["samples"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// The layout 3 handles of the fake driver confirm: the name pointer at +8, and the chains that
/// reach it by coincidence of the fake driver's heap for handles of one-kernel modules (the
/// module at +0 whose name table holds its only kernel's name, …), which every read must
/// agree with too. All are remembered, as the session confirmed them.
fn at8(kind: &str, samples: u64) -> (String, String, Value, u64) {
    (
        driver_build_id(),
        kind.to_owned(),
        json!([
            { "outer": 0, "inner": 48 },
            { "outer": 0, "inner": 232 },
            { "outer": 8 },
            { "outer": 8, "inner": 88 },
            { "outer": 32, "inner": 8 }
        ]),
        samples,
    )
}

fn state_args(state: &TempDir) -> Vec<String> {
    vec![
        "--state-dir".to_owned(),
        state.path().to_str().unwrap().to_owned(),
    ]
}

#[test]
fn a_layout_confirmed_in_one_run_names_the_next_runs_old_handles() {
    let state = TempDir::new("layouts");
    let st = state_args(&state);
    // Run 1: three functions and three kernels named after the attach confirm both layouts.
    let mut w = Workload::spawn("workload_drv", &[]);
    let pid = w.tgid.to_string();
    let d = Daemon::start(&["--pid", &pid, &st[0], &st[1]]);
    for args in [
        "_Z4cal1Pf",
        "_Z4cal2Pf",
        "_Z4cal3Pf",
        "_Z4ker1Pf kernel",
        "_Z4ker2Pf kernel",
        "_Z4ker3Pf kernel",
    ] {
        hold(&mut w, args);
    }
    w.script(&["drv_launch_held _Z4cal1Pf 1"]);
    d.stop();
    w.exit();
    assert_eq!(layouts(&state), vec![at8("function", 3), at8("kernel", 3)]);
    // Run 2: a new process whose every handle was made before the attach and which makes none
    // after: named from its first launch, through the remembered layouts.
    let mut w = Workload::spawn("workload_drv", &[]);
    hold(&mut w, "_Z9pre_alphaPf");
    hold(&mut w, "triton_pre_beta_0");
    hold(&mut w, "_Z9pre_gammaPKf kernel");
    let pid = w.tgid.to_string();
    let d = Daemon::capturing(&["--pid", &pid, &st[0], &st[1]]);
    w.script(&[
        "drv_launch_held _Z9pre_alphaPf 3",
        "drv_launch_held triton_pre_beta_0 5",
        "drv_launch_held _Z9pre_gammaPKf 7",
    ]);
    let tgid = w.tgid;
    let f = d.stop();
    let p = process(&f.report, tgid);
    let src = "driver_object_remembered";
    assert_eq!(
        rows(p),
        vec![
            row("pre_alpha(float*)", 3, src, "cuLaunchKernel"),
            row("pre_gamma(float const*)", 7, src, "cuLaunchKernel"),
            row("triton_pre_beta_0", 5, src, "cuLaunchKernel"),
        ]
    );
    assert_eq!(
        (&p["launches"], &p["unnamed_launches"]),
        (&json!(15), &json!(0))
    );
    let said: Vec<&String> = f
        .stderr
        .iter()
        .filter(|l| l.contains("driver object layout remembered from an earlier run"))
        .collect();
    assert_eq!(said.len(), 2, "{:#?}", f.stderr);
    // Nothing calibrated: the file is as run 1 left it.
    assert_eq!(layouts(&state), vec![at8("function", 3), at8("kernel", 3)]);
    w.exit();
}

#[test]
fn a_corrupt_state_file_is_ignored_with_a_warning_and_rewritten() {
    let state = TempDir::new("layouts");
    let st = state_args(&state);
    let file = state.path().join("driver-layouts.json");
    std::fs::write(
        &file,
        "{\"format\": \"gpuprofd.driver-layouts/1\", \"layouts\": [{\"bu",
    )
    .unwrap();
    let mut w = Workload::spawn("workload_drv", &[]);
    let old = hold(&mut w, "_Z3oldPf");
    let pid = w.tgid.to_string();
    let d = Daemon::start(&["--pid", &pid, &st[0], &st[1]]);
    hold(&mut w, "_Z4cal1Pf");
    hold(&mut w, "_Z4cal2Pf");
    w.script(&["drv_launch_held _Z3oldPf 4"]);
    let tgid = w.tgid;
    let f = d.stop();
    // As with no file: two samples confirm nothing.
    let p = process(&f.report, tgid);
    assert_eq!(
        rows(p),
        vec![row(
            &format!("<unknown {old}>"),
            4,
            "unknown",
            "cuLaunchKernel"
        )]
    );
    let warned: Vec<&String> = f
        .stderr
        .iter()
        .filter(|l| l.contains("driver layouts file is ignored"))
        .collect();
    assert_eq!(warned.len(), 1, "{:#?}", f.stderr);
    assert!(
        warned[0].contains("WARN")
            && warned[0].contains(file.to_str().unwrap())
            && warned[0].contains("it will be rewritten")
            && warned[0].contains("not JSON of the expected shape"),
        "{}",
        warned[0]
    );
    // The next run that confirms a layout writes a good file over it.
    let d = Daemon::start(&["--pid", &pid, &st[0], &st[1]]);
    for name in ["_Z4cal3Pf", "_Z4cal4Pf", "_Z4cal5Pf"] {
        hold(&mut w, name);
    }
    w.script(&["drv_launch_held _Z4cal3Pf 1"]);
    let f = d.stop();
    assert_eq!(
        f.stderr
            .iter()
            .filter(|l| l.contains("driver layouts file is ignored"))
            .count(),
        1,
        "{:#?}",
        f.stderr
    );
    assert_eq!(layouts(&state), vec![at8("function", 3)]);
    w.exit();
}

#[test]
fn a_remembered_layout_a_calibration_handle_contradicts_is_dropped() {
    let state = TempDir::new("layouts");
    let st = state_args(&state);
    std::fs::write(
        state.path().join("driver-layouts.json"),
        json!({
            "format": "gpuprofd.driver-layouts/1",
            "layouts": [{
                "build_id": driver_build_id(), "kind": "function", "chains": [{"outer": 8}],
                "samples": 3, "confirmed_unix_s": 1, "refreshed_unix_s": 1
            }]
        })
        .to_string(),
    )
    .unwrap();
    let mut w = Workload::spawn("workload_drv", &[]);
    let old = hold(&mut w, "_Z3oldPf");
    let pid = w.tgid.to_string();
    let d = Daemon::start(&["--pid", &pid, &st[0], &st[1]]);
    // Its object keeps no name pointer at +8: the remembered layout is wrong for this driver.
    hold(&mut w, "_Z4cal3Pf elsewhere");
    w.script(&["drv_launch_held _Z4cal3Pf 1", "drv_launch_held _Z3oldPf 6"]);
    let tgid = w.tgid;
    let f = d.stop();
    let p = process(&f.report, tgid);
    assert_eq!(
        rows(p),
        vec![
            row(&format!("<unknown {old}>"), 6, "unknown", "cuLaunchKernel"),
            row("cal3(float*)", 1, "module_get_function", "cuLaunchKernel"),
        ]
    );
    assert_eq!(layouts(&state), vec![]);
    assert_eq!(
        f.stderr
            .iter()
            .filter(|l| l.contains("the layout remembered from an earlier run is dropped"))
            .count(),
        1,
        "{:#?}",
        f.stderr
    );
    w.exit();
}
