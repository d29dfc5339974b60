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

fn check<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {v}"))
}

/// The requirements README states, each checked with its fix: what this machine is (kernel
/// 6.6+, its published configuration, x86-64, glibc 2.28+) passes; the same binary with too few
/// capabilities fails `privileges` with the capabilities named and how to grant them.
#[test]
fn doctor_checks_each_requirement_and_prints_the_fix() {
    require_bpf();
    let (code, v) = doctor(&[]);
    assert_eq!(code, 0, "{v}");
    let names: Vec<&str> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "kernel",
            "kernel_config",
            "architecture",
            "glibc",
            "privileges",
            "btf",
            "uprobe_pmu",
            "process_maps",
            "bpf_round_trip",
            "uprobe_multi",
            "nvml",
            "driver",
            "gpu_time_library"
        ]
    );
    // The injection library `cargo xtask build` put beside the binary; nothing loads it now.
    let lib = daemon_bin()
        .with_file_name("libgpuprofd_inject.so")
        .canonicalize()
        .unwrap();
    assert_eq!(
        check(&v, "gpu_time_library")["detail"],
        format!(
            "{}: commands run by gpuprofd get exact GPU times; no process has it loaded",
            lib.display()
        )
    );
    assert_eq!(check(&v, "gpu_time_library")["ok"], true);
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_eq!(
        check(&v, "kernel")["detail"],
        format!(
            "Linux {} (5.15 or later needed; uprobe_multi links available)",
            release.trim()
        )
    );
    // This machine publishes its configuration, with every option the probes use.
    assert_eq!(
        check(&v, "kernel_config")["detail"],
        "/proc/config.gz: CONFIG_BPF_SYSCALL, CONFIG_BPF_EVENTS, CONFIG_UPROBE_EVENTS, \
         CONFIG_DEBUG_INFO_BTF, CONFIG_BPF_JIT, CONFIG_FTRACE_SYSCALLS set"
    );
    assert_eq!(check(&v, "architecture")["detail"], "x86_64");
    let glibc = check(&v, "glibc");
    assert_eq!(glibc["ok"], true);
    assert!(
        glibc["detail"]
            .as_str()
            .unwrap()
            .ends_with(" (2.28 or later needed)")
    );
    assert_eq!(check(&v, "uprobe_multi")["ok"], true);
    // No NVML on this machine: nothing to check of a driver, and nvml says how to get it.
    assert_eq!(check(&v, "nvml")["ok"], false);
    assert!(
        check(&v, "nvml")["fix"]
            .as_str()
            .unwrap()
            .starts_with("on a GPU node: install the NVIDIA driver's NVML")
    );
    assert_eq!(
        check(&v, "driver")["detail"],
        "no NVIDIA driver seen (no NVML, no libcuda.so.VERSION found): nothing to check"
    );
    for c in v["checks"].as_array().unwrap() {
        if c["ok"] == false {
            assert!(c["fix"].is_string(), "a failed check without a fix: {c}");
        }
    }

    // A driver library whose file name carries its version gives the branch.
    let dir = TempDir::new("doctor-driver");
    let named = dir.path().join("libcuda.so.570.86.15");
    std::fs::copy(fakecuda().join("lib/libcuda.so.1"), &named).unwrap();
    std::os::unix::fs::symlink(&named, dir.path().join("libcuda.so.1")).unwrap();
    let (_, v) = doctor(&[dir.path().join("libcuda.so.1").to_str().unwrap()]);
    let d = check(&v, "driver");
    assert_eq!(
        d["detail"],
        "driver 570.86.15: a branch not checked by the project (checked: 535, 550, 580)"
    );
    assert!(
        d["fix"]
            .as_str()
            .unwrap()
            .contains("scripts/gpu-validate.sh")
    );

    // Too few capabilities: only CAP_BPF left in the bounding set.
    let out = std::process::Command::new("setpriv")
        .args([
            "--bounding-set=-all,+bpf",
            "--inh-caps=-all",
            "--no-new-privs",
            "--",
        ])
        .arg(daemon_bin())
        .args(["doctor", "--json", "--no-system-libs"])
        .output()
        .expect("setpriv (util-linux)");
    assert_eq!(out.status.code(), Some(9));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = check(&v, "privileges");
    assert_eq!(p["ok"], false);
    assert_eq!(p["detail"], "missing CAP_PERFMON");
    assert_eq!(
        p["fix"],
        "run as root (sudo), or grant CAP_BPF CAP_PERFMON CAP_CHECKPOINT_RESTORE CAP_SYS_PTRACE \
         CAP_DAC_READ_SEARCH CAP_SYS_RESOURCE (CAP_SYS_ADMIN in place of the first three before \
         Linux 6.6)"
    );
    assert_eq!(
        check(&v, "bpf_round_trip")["fix"],
        "fix the FAIL lines above first"
    );
}
