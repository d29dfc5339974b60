//! Kernel names after a live attach: driver handles a process made before gpuprofd attached
//! are named from the driver's own function objects, through a layout the daemon confirmed on
//! handles it saw named after the attach (`name_source` `driver_object`), and stay
//! `<unknown 0x…>` when the calibration handles are too few or disagree — never a wrong name.
//!
//! The fake driver keeps a function's (and a kernel's) name pointer at +8 of its object, as the
//! real 550 driver does; `drv_hold NAME [kernel|elsewhere]` makes a handle of its own module
//! (`elsewhere`: an object that keeps no name pointer) and `drv_launch_held` launches it.

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
