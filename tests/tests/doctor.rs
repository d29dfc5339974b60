//! `gpuprofd doctor` on this machine: the BPF round trip must work and the hook plan must show
//! the placement each fake library's entry shape calls for.

use gpuprofd_tests::*;
use serde_json::Value;

fn doctor(libs: &[&str]) -> (i32, Value) {
    let mut args = vec!["doctor", "--json", "--symbols", "--no-system-libs"];
    for l in libs {
        args.push("--lib");
        args.push(l);
    }
    let (code, out, err) = run_daemon(&args);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    (code, v)
}

fn library<'a>(v: &'a Value, suffix: &str) -> &'a Value {
    v["libraries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["path"].as_str().unwrap().ends_with(suffix))
        .unwrap_or_else(|| panic!("no {suffix} in {v}"))
}

#[test]
fn doctor_round_trip_and_hook_plan() {
    require_bpf();
    let lib = fakecuda().join("lib");
    let cet = fakecuda().join("lib-cet/libcudart.so.12");
    let (code, v) = doctor(&[lib.to_str().unwrap(), cet.to_str().unwrap()]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["ok"], true);
    let rt = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "bpf_round_trip")
        .unwrap();
    assert_eq!(rt["ok"], true, "{rt}");
    // Through a uprobe_multi link, as the capture attaches on this kernel (6.6+).
    assert!(
        rt["detail"]
            .as_str()
            .unwrap()
            .starts_with("3 calls, 3 records through the ring buffer (uprobe_multi link at "),
        "{rt}"
    );

    // Driver: every hooked export is the cmpl/je/jmp trampoline; the probe sits on the je.
    let drv = library(&v, "lib/libcuda.so.1");
    assert_eq!(drv["layer"], "driver");
    let syms = drv["symbols"].as_array().unwrap();
    assert_eq!(drv["hooked_symbols"].as_u64().unwrap() as usize, syms.len());
    for s in syms {
        assert_eq!(s["probe_at"], "+0xa", "{s}");
        assert!(s["site"].as_str().unwrap().starts_with("je "), "{s}");
        assert!(
            s["entry_bytes"].as_str().unwrap().starts_with("81 3d"),
            "{s}"
        );
    }
    let names: Vec<&str> = syms.iter().map(|s| s["symbol"].as_str().unwrap()).collect();
    for must in [
        "cuLaunchKernel",
        "cuLaunchKernel_ptsz",
        "cuMemcpyHtoD_v2",
        "cuMemAlloc_v2",
        "cuModuleGetFunction",
    ] {
        assert!(names.contains(&must), "{must} not hooked: {names:?}");
    }
    // Legacy v1 entry points (32-bit arguments) are never hooked.
    for never in ["cuMemcpyHtoD", "cuMemAlloc", "cuMemFree"] {
        assert!(!names.contains(&never), "{never} hooked");
    }

    // Runtime with push %rbp prologues: the probe stays on the entry.
    let rt = library(&v, "lib/libcudart.so.12");
    for s in rt["symbols"].as_array().unwrap() {
        if s["entry_bytes"].as_str().unwrap().starts_with("55 ") {
            assert_eq!(s["probe_at"], "+0x0", "{s}");
        }
    }
    // CET runtime: after endbr64 (4 bytes), on the push.
    let cet = library(&v, "lib-cet/libcudart.so.12");
    assert_eq!(
        cet["hooked_symbols"], rt["hooked_symbols"],
        "same source, same hooks"
    );
    for s in cet["symbols"].as_array().unwrap() {
        let bytes = s["entry_bytes"].as_str().unwrap();
        assert!(bytes.starts_with("f3 0f 1e fa"), "no endbr64: {s}");
        if bytes.starts_with("f3 0f 1e fa 55") {
            assert_eq!(s["probe_at"], "+0x4", "{s}");
        }
    }
    let names: Vec<&str> = rt["symbols"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["symbol"].as_str().unwrap())
        .collect();
    assert!(
        !names.contains(&"__cudaLaunchKernel"),
        "__cudaLaunchKernel double counts"
    );
}

#[test]
fn doctor_reports_nvml_and_does_not_need_it() {
    require_bpf();
    let dir = TempDir::new("doctor-nvml");
    let cfg = dir.path().join("nvml.conf");
    std::fs::write(
        &cfg,
        "device FAKE_GPU_A GPU-a 1000\ngpm 2 50\ndevice FAKE_GPU_B GPU-b 1000\n",
    )
    .unwrap();
    let fake = fakecuda().join("lib-nvml/libnvidia-ml.so.1");
    let nvml = |env: &[(&str, &str)]| {
        let (code, out, err) = run_daemon_env(
            &[
                "doctor",
                "--json",
                "--no-system-libs",
                "--nvml-lib",
                fake.to_str().unwrap(),
            ],
            env,
        );
        let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
        let c = v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "nvml")
            .cloned()
            .unwrap();
        (code, c)
    };
    let (code, c) = nvml(&[("FAKENVML_CONFIG", cfg.to_str().unwrap())]);
    assert_eq!(code, 0);
    assert_eq!(
        (&c["ok"], &c["required"], c["detail"].as_str().unwrap()),
        (
            &Value::Bool(true),
            &Value::Bool(false),
            "2 GPU(s): FAKE_GPU_A, FAKE_GPU_B; driver 535.261.03-fake; GPM on GPU 0; not on GPU 1"
        )
    );
    // The driver is not loaded: NVML fails to initialise, capture still works (exit 0).
    let (code, c) = nvml(&[]);
    assert_eq!(code, 0);
    assert_eq!(
        (&c["ok"], &c["required"]),
        (&Value::Bool(false), &Value::Bool(false))
    );
    assert!(
        c["detail"]
            .as_str()
            .unwrap()
            .contains("capture works without them"),
        "{c}"
    );
}
