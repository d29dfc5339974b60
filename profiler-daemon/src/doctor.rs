//! `gpuprofd doctor`: can this machine run the probes, and what would they hook?
//!
//! Run it first on a new machine (the GPU validation harness does). It checks, in order: the
//! kernel, privileges, BTF and the uprobe PMU; that the embedded eBPF object loads; a full
//! round trip (a uprobe on a function of this very binary, called once, must produce exactly
//! one ring-buffer record); and, for every CUDA library found, the hook plan: which exported
//! symbols match a rule, their entry bytes and the probe offset the placement picks. The plan
//! needs no BPF, so it is useful even where BPF is unavailable (gVisor), for comparing the real
//! libraries' shapes against the fake ones.

use crate::attach::{multi, placement, rules};
use crate::capture;
use crate::discovery::{self, CudaLibrary, elf};
use profiler_common::cookie::Cookie;
use profiler_common::kind;
use serde_json::{Value, json};
use std::path::PathBuf;

/// Options of `gpuprofd doctor`.
#[derive(Debug, Clone)]
pub struct DoctorOptions {
    pub libs: Vec<PathBuf>,
    pub system_libs: bool,
    pub json: bool,
    /// List every matched symbol (else a per-library summary and a sample).
    pub symbols: bool,
    /// The NVML library to try (`None`: libnvidia-ml.so.1 through the dynamic linker).
    pub nvml_lib: Option<PathBuf>,
}

/// One check's outcome.
struct Check {
    name: &'static str,
    ok: bool,
    /// Capture cannot work without it (NVML, for one, is optional).
    required: bool,
    detail: String,
}

/// Which GPUs do GPM (`gpm[i]`: GPU i does), in a few words.
fn gpm_summary(gpm: &[bool]) -> String {
    let list = |want: bool| {
        gpm.iter()
            .enumerate()
            .filter(|&(_, &g)| g == want)
            .map(|(i, _)| i.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if gpm.is_empty() {
        String::new()
    } else if gpm.iter().all(|&g| g) {
        "GPM (measured SM, tensor, DRAM activity) on every GPU".into()
    } else if !gpm.iter().any(|&g| g) {
        "no GPM (it needs a Hopper or later GPU and driver 520 or later): NVML utilisation only"
            .into()
    } else {
        format!("GPM on GPU {}; not on GPU {}", list(true), list(false))
    }
}

/// NVML: the GPUs it lists, or why it is unavailable (capture works without it).
fn nvml_check(lib: Option<&PathBuf>) -> Check {
    let mut b = nvml_wrapper::Nvml::builder();
    if let Some(p) = lib {
        b.lib_path(p.as_os_str());
    }
    let (ok, detail) = match b.init() {
        Ok(n) => match n.device_count() {
            Ok(c) => {
                let names: Vec<String> = (0..c)
                    .map(|i| {
                        n.device_by_index(i)
                            .and_then(|d| d.name())
                            .unwrap_or_else(|e| format!("<{e}>"))
                    })
                    .collect();
                let gpm: Vec<bool> = (0..c)
                    .map(|i| {
                        n.device_by_index(i)
                            .and_then(|d| d.gpm_support())
                            .unwrap_or(false)
                    })
                    .collect();
                let gpm = match gpm_summary(&gpm) {
                    g if g.is_empty() => g,
                    g => format!("; {g}"),
                };
                (
                    true,
                    format!(
                        "{c} GPU(s): {}; {}{gpm}",
                        names.join(", "),
                        n.sys_driver_version().map_or_else(
                            |_| "driver version unknown".to_owned(),
                            |v| format!("driver {v}")
                        ),
                    ),
                )
            }
            Err(e) => (false, format!("NVML loaded but cannot count GPUs: {e}")),
        },
        Err(e) => (
            false,
            format!(
                "{e}: GPU utilisation and per-process GPU memory will not be sampled (capture works without them)"
            ),
        ),
    };
    Check {
        name: "nvml",
        ok,
        required: false,
        detail,
    }
}

/// The function the round-trip check probes. `#[inline(never)]` and `black_box` keep it a real
/// call with a real entry.
#[inline(never)]
#[unsafe(no_mangle)]
pub extern "C" fn gpuprofd_doctor_probe_target(x: u64) -> u64 {
    std::hint::black_box(x).wrapping_add(1)
}

/// The file offset of `addr` in this process's executable mappings, and the file.
fn own_file_offset(addr: u64) -> Option<(PathBuf, u64)> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let m = discovery::parse_maps(&maps)
        .into_iter()
        .find(|m| m.start <= addr && addr < m.end)?;
    Some((PathBuf::from(m.path), addr - m.start + m.offset))
}

fn capabilities() -> (bool, String) {
    use crate::sys::kernel::{CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN, has_capability as has};
    let names = [
        ("CAP_BPF", has(CAP_BPF)),
        ("CAP_PERFMON", has(CAP_PERFMON)),
        ("CAP_SYS_ADMIN", has(CAP_SYS_ADMIN)),
    ];
    let ok = has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON));
    let detail = names
        .iter()
        .map(|(n, h)| format!("{n}={}", if *h { "yes" } else { "no" }))
        .collect::<Vec<_>>()
        .join(" ");
    (ok, detail)
}

/// Loads the object, probes `gpuprofd_doctor_probe_target`, calls it 3 times, and checks that
/// exactly 3 SYNC records were submitted (entry-only cookie: one record per call).
fn round_trip() -> anyhow::Result<String> {
    let mut ebpf = capture::load(1 << 20)?;
    capture::set_filter(&mut ebpf, &capture::Filter::All)?;
    let target = gpuprofd_doctor_probe_target as *const () as u64;
    let (exe, off) = own_file_offset(target).ok_or_else(|| {
        anyhow::anyhow!("could not find this binary's own code in /proc/self/maps")
    })?;
    let cookie = Cookie::new(0).pack();
    let probes = multi::attach_program(
        &mut ebpf,
        rules::Prog::SyncEntry.name(),
        &exe,
        &[off],
        cookie,
    )?;
    for i in 0..3 {
        std::hint::black_box(gpuprofd_doctor_probe_target(std::hint::black_box(i)));
    }
    let sub = capture::read_counts(&ebpf, profiler_common::maps::SUBMITTED)?;
    let drops = capture::read_counts(&ebpf, profiler_common::maps::DROPS)?;
    let n = sub.0[kind::SYNC as usize];
    if n == 3 {
        Ok(format!(
            "3 calls, 3 records through the ring buffer ({} at {}+{off:#x})",
            probes.how,
            exe.display()
        ))
    } else {
        anyhow::bail!(
            "3 calls produced {n} records ({} dropped): uprobes attach but do not fire here",
            drops.total()
        )
    }
}

fn plan(lib: &CudaLibrary, all_symbols: bool) -> Value {
    let info = match elf::read_elf(&lib.open_path) {
        Ok(i) => i,
        Err(e) => return json!({"path": lib.display, "error": e.to_string()}),
    };
    let mut syms = Vec::new();
    let mut emulated = 0;
    for f in &info.exports {
        let Some(rule) = rules::rule_for(lib.layer, &f.name) else {
            continue;
        };
        let p = placement::choose(&f.entry_bytes, f.vaddr);
        if p.offset != 0 {
            emulated += 1;
        }
        syms.push(json!({
            "symbol": f.name,
            "program": rule.prog.name(),
            "return_probe": rule.has_return(),
            "entry_offset": format!("{:#x}", f.file_offset),
            "entry_bytes": f.entry_bytes.iter().take(16).map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(" "),
            "probe_at": format!("+{:#x}", p.offset),
            "site": p.site_insn,
            "reason": format!("{:?}", p.reason),
        }));
    }
    let matched = syms.len();
    if !all_symbols {
        // a sample that covers each program once
        let mut seen = std::collections::HashSet::new();
        syms.retain(|s| seen.insert(s["program"].as_str().unwrap_or("").to_owned()));
    }
    json!({
        "path": lib.display,
        "soname": lib.soname,
        "layer": crate::attach::layer_label(lib.layer),
        "build_id": info.build_id.map(|b| b.iter().map(|x| format!("{x:02x}")).collect::<String>()),
        "exports": info.exports.len(),
        "hooked_symbols": matched,
        "probes_after_entry": emulated,
        "symbols": syms,
    })
}

/// Runs the checks; returns the process exit code (0: the probes can run here; 9: they cannot).
pub fn run(opts: &DoctorOptions) -> u8 {
    let mut checks = Vec::new();
    checks.push(Check {
        name: "kernel",
        required: true,
        ok: true,
        detail: crate::sys::kernel::release().unwrap_or_else(|| "unknown".into()),
    });
    let (caps_ok, caps) = capabilities();
    checks.push(Check {
        name: "privileges",
        required: true,
        ok: caps_ok,
        detail: if caps_ok {
            caps
        } else {
            format!("{caps}: run as root (sudo) or grant CAP_BPF and CAP_PERFMON")
        },
    });
    let btf = std::path::Path::new("/sys/kernel/btf/vmlinux").exists();
    checks.push(Check {
        name: "btf",
        required: true,
        ok: btf,
        detail: if btf {
            match crate::sys::btf::task_fsbase() {
                Some(off) => format!(
                    "/sys/kernel/btf/vmlinux present (task_struct.thread.fsbase at byte {off}: \
                     Python frames of CPython 3.9 and 3.10 can be read)"
                ),
                None => "/sys/kernel/btf/vmlinux present (no task_struct.thread.fsbase in it: \
                         CPython 3.9 and 3.10 processes get native frames only)"
                    .into(),
            }
        } else {
            "no /sys/kernel/btf/vmlinux (kernel without CONFIG_DEBUG_INFO_BTF)".into()
        },
    });
    let pmu = std::path::Path::new("/sys/bus/event_source/devices/uprobe/type").exists();
    checks.push(Check {
        name: "uprobe_pmu",
        required: true,
        ok: pmu,
        detail: if pmu {
            "uprobe PMU present".into()
        } else {
            "no uprobe PMU in /sys/bus/event_source/devices (CONFIG_UPROBE_EVENTS off, or a sandbox such as gVisor)".into()
        },
    });
    let maps = discovery::map_files_followable();
    checks.push(Check {
        name: "process_maps",
        required: false,
        ok: maps.is_ok(),
        detail: match maps {
            Ok(()) => "/proc/PID/map_files followed: the libraries running processes map are \
                       found and opened by their inode (in containers too)"
                .into(),
            Err(e) => format!("{e}: {}", discovery::MAP_FILES_HINT),
        },
    });
    let rt = round_trip();
    let bpf_ok = rt.is_ok();
    checks.push(Check {
        name: "bpf_round_trip",
        required: true,
        ok: bpf_ok,
        detail: rt.unwrap_or_else(|e| e.to_string()),
    });
    checks.push(nvml_check(opts.nvml_lib.as_ref()));

    let mut paths = discovery::expand_lib_args(&opts.libs);
    if opts.system_libs {
        paths.extend(discovery::system_libraries());
    }
    let mut scanner = discovery::Scanner::new();
    let mut libs: Vec<CudaLibrary> = Vec::new();
    for p in &paths {
        if let Some(l) = scanner.add_file(p)
            && !libs.iter().any(|x| (x.dev, x.ino) == (l.dev, l.ino))
        {
            libs.push(l);
        }
    }
    let plans: Vec<Value> = libs.iter().map(|l| plan(l, opts.symbols)).collect();

    if opts.json {
        let v = json!({
            "schema": "gpuprofd.doctor/1",
            "ok": bpf_ok,
            "checks": checks.iter().map(|c| json!({"name": c.name, "ok": c.ok, "required": c.required, "detail": c.detail})).collect::<Vec<_>>(),
            "libraries": plans,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&v).unwrap_or_else(|_| "{}".into())
        );
    } else {
        for c in &checks {
            let mark = match (c.ok, c.required) {
                (true, _) => "ok  ",
                (false, true) => "FAIL",
                (false, false) => "warn",
            };
            println!("{mark} {:<15} {}", c.name, c.detail);
        }
        if plans.is_empty() {
            println!(
                "no CUDA driver or runtime library found (give files or directories with --lib)"
            );
        }
        for p in &plans {
            if let Some(e) = p.get("error") {
                println!("\n{}: {e}", p["path"].as_str().unwrap_or(""));
                continue;
            }
            println!(
                "\n{} ({}, {}): {} exports, {} hooked, {} probes placed after the entry",
                p["path"].as_str().unwrap_or(""),
                p["soname"].as_str().unwrap_or(""),
                p["layer"].as_str().unwrap_or(""),
                p["exports"],
                p["hooked_symbols"],
                p["probes_after_entry"],
            );
            for s in p["symbols"].as_array().into_iter().flatten() {
                println!(
                    "  {:<34} {:<17} {:>9} {:<6} {:<40} {}",
                    s["symbol"].as_str().unwrap_or(""),
                    s["program"].as_str().unwrap_or(""),
                    s["entry_offset"].as_str().unwrap_or(""),
                    s["probe_at"].as_str().unwrap_or(""),
                    s["site"].as_str().unwrap_or(""),
                    s["entry_bytes"].as_str().unwrap_or(""),
                );
            }
        }
        println!(
            "\n{}",
            if bpf_ok {
                "gpuprofd can capture on this machine"
            } else {
                "gpuprofd CANNOT capture on this machine (see FAIL above); the hook plan above needs no BPF"
            }
        );
    }
    if bpf_ok { 0 } else { 9 }
}

#[cfg(test)]
mod tests {
    use super::gpm_summary;

    #[test]
    fn which_gpus_do_gpm() {
        assert_eq!(gpm_summary(&[]), "");
        assert_eq!(
            gpm_summary(&[true, true]),
            "GPM (measured SM, tensor, DRAM activity) on every GPU"
        );
        assert_eq!(
            gpm_summary(&[false]),
            "no GPM (it needs a Hopper or later GPU and driver 520 or later): NVML utilisation only"
        );
        assert_eq!(
            gpm_summary(&[true, false, true, false]),
            "GPM on GPU 0, 2; not on GPU 1, 3"
        );
    }
}
