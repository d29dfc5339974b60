//! Probe placement on the real NVIDIA driver and runtime binaries (no GPU needed): two driver
//! branches from Debian's non-free archive (535 in bookworm, 550 in trixie) and the runtime from
//! the `nvidia-cuda-runtime-cu12` wheel, downloaded once into target/real-cuda (not in git). Every hooked symbol must have the entry
//! shape the fake libraries reproduce, and the probe must go where placement promises.
//!
//! When the package registries cannot be reached the test says so and checks nothing else
//! (these machines reach them; an air-gapped checkout cannot).

use gpuprofd_tests::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const POOL: &str = "http://deb.debian.org/debian/pool/non-free/n/nvidia-graphics-drivers";
/// Driver packages (version, package revision) and the symbols gpuprofd hooks in each.
const DRIVERS: [(&str, &str, usize); 2] = [("535.261.03", "1", 105), ("550.163.01", "2", 107)];
const RUNTIME_WHEEL: &str = "nvidia-cuda-runtime-cu12==12.9.79";

fn cache() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/real-cuda");
    std::fs::create_dir_all(&p).unwrap();
    p
}

fn sh(dir: &Path, script: &str) -> bool {
    Command::new("bash")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .status()
        .is_ok_and(|s| s.success())
}

/// The real driver files (one per branch, with the symbols hooked in it) and the runtime,
/// downloaded on first use; `None` when unreachable.
fn real_files() -> Option<(Vec<(PathBuf, usize)>, PathBuf)> {
    let c = cache();
    let mut drivers = Vec::new();
    for (version, rev, hooked) in DRIVERS {
        let dir = format!("deb-{version}");
        let drv = c.join(&dir).join(format!(
            "usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.{version}"
        ));
        if !drv.exists() {
            let ok = sh(
                &c,
                &format!(
                    "set -e; curl -fsS -m 120 -o libcuda1-{version}.deb \
                     '{POOL}/libcuda1_{version}-{rev}_amd64.deb'; rm -rf {dir}; mkdir {dir}; \
                     cd {dir}; ar x ../libcuda1-{version}.deb; tar xf data.tar.*"
                ),
            );
            if !ok || !drv.exists() {
                return None;
            }
        }
        drivers.push((drv, hooked));
    }
    let rt = c.join("wheel/nvidia/cuda_runtime/lib/libcudart.so.12");
    if !rt.exists() {
        let ok = sh(
            &c,
            &format!(
                "set -e; rm -rf whl wheel; python3 -m pip download -q --no-deps -d whl '{RUNTIME_WHEEL}'; \
                 python3 -m zipfile -e whl/*.whl wheel"
            ),
        );
        if !ok || !rt.exists() {
            return None;
        }
    }
    Some((drivers, rt))
}

fn plan(lib: &Path) -> Value {
    let (code, out, err) = run_daemon(&[
        "doctor",
        "--json",
        "--symbols",
        "--no-system-libs",
        "--lib",
        lib.to_str().unwrap(),
    ]);
    assert!(code == 0 || code == 9, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    v["libraries"][0].clone()
}

#[test]
fn placement_on_the_real_driver_and_runtime() {
    let Some((drivers, rt)) = real_files() else {
        eprintln!(
            "real_libs: deb.debian.org / PyPI unreachable: the real-binary placement check did not run"
        );
        return;
    };
    // Both branches start every export with the same trampoline. (The 580 driver seen on an
    // H200 starts them with `push %rbp` instead, where the probe stays on the entry: see
    // docs/VALIDATION.md.)
    for (drv, hooked) in &drivers {
        let d = plan(drv);
        assert_eq!(d["soname"], "libcuda.so.1");
        assert_eq!(d["layer"], "driver");
        let syms = d["symbols"].as_array().unwrap();
        assert_eq!(syms.len(), *hooked, "hooked symbols of {}", drv.display());
        for s in syms {
            let bytes = s["entry_bytes"].as_str().unwrap();
            let name = s["symbol"].as_str().unwrap();
            // cmpl $0x321cba00, disp(%rip); je +0x18; jmp *disp(%rip) — and in the 8- and
            // 16-bit memsets, movzbl/movzwl of the value between the je and the jmp (the probe
            // on the je still sees the caller's registers).
            assert!(bytes.starts_with("81 3d"), "{s}");
            let zero_extends = ["cuMemsetD8", "cuMemsetD16", "cuMemsetD2D8", "cuMemsetD2D16"]
                .iter()
                .any(|p| name.starts_with(p));
            if zero_extends {
                assert_eq!(&bytes[18..33], "00 ba 1c 32 74 ", "{s}");
                let movz = ["40 0f b6 f6", "0f b7 f6", "0f b6 d2", "0f b7 d2"];
                assert!(movz.iter().any(|m| bytes[36..].starts_with(m)), "{s}");
            } else {
                assert_eq!(&bytes[18..38], "00 ba 1c 32 74 0c ff", "{s}");
            }
            assert_eq!(s["probe_at"], "+0xa", "{s}");
            assert!(s["site"].as_str().unwrap().starts_with("je "), "{s}");
        }
        let names: Vec<&str> = syms.iter().map(|s| s["symbol"].as_str().unwrap()).collect();
        for must in [
            "cuLaunchKernel",
            "cuLaunchKernelEx_ptsz",
            "cuMemcpyHtoDAsync_v2",
            "cuMemAlloc_v2",
            "cuStreamSynchronize",
            "cuModuleGetFunction",
            "cuLibraryGetKernel",
            "cuMemHostRegister_v2",
            "cuMemHostRegister",
            "cuMemHostUnregister",
            "cuMemsetD8_v2",
            "cuMemsetD2D16Async_ptsz",
            "cuMemsetD32_v2_ptds",
            // the device tracker's
            "cuCtxSetCurrent",
            "cuCtxPushCurrent_v2",
            "cuCtxPopCurrent_v2",
            "cuDevicePrimaryCtxRetain",
            "cuCtxGetCurrent",
            "cuCtxGetDevice",
            "cuStreamCreate",
        ] {
            assert!(
                names.contains(&must),
                "{must} not hooked in {}",
                drv.display()
            );
        }
    }

    let r = plan(&rt);
    assert_eq!(
        (&r["soname"], &r["layer"]),
        (&"libcudart.so.12".into(), &"runtime".into())
    );
    let syms = r["symbols"].as_array().unwrap();
    assert_eq!(syms.len(), 70, "hooked symbols of runtime 12.9.79");
    for s in syms {
        assert!(
            s["entry_bytes"]
                .as_str()
                .unwrap()
                .starts_with("55 48 89 e5"),
            "{s}"
        );
        assert_eq!(s["probe_at"], "+0x0", "{s}");
    }
    let names: Vec<&str> = syms.iter().map(|s| s["symbol"].as_str().unwrap()).collect();
    assert!(!names.contains(&"__cudaLaunchKernel"));
    assert!(names.contains(&"cudaLaunchKernel") && names.contains(&"__cudaRegisterFunction"));
    assert!(names.contains(&"cudaHostRegister") && names.contains(&"cudaHostUnregister"));
    assert!(names.contains(&"cudaMemset3DAsync_ptsz") && names.contains(&"cudaMemset"));
    assert!(names.contains(&"cudaSetDevice") && names.contains(&"cudaStreamCreateWithFlags"));
}
