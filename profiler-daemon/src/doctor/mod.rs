//! `gpuprofd doctor`: can this machine run the probes, and what would they hook?
//!
//! Run it first on a new machine (the GPU validation harness does). It checks, in order: the
//! requirements README states (kernel release and configuration, architecture, glibc,
//! capabilities: [`requirements`]), BTF and the uprobe PMU; that the embedded eBPF object loads; a full
//! round trip (a uprobe on a function of this very binary, called once, must produce exactly
//! one ring-buffer record); and, for every CUDA library found, the hook plan: which exported
//! symbols match a rule, their entry bytes and the probe offset the placement picks; and the
//! GPU-time library ([`inject`]: installed, and who has it loaded). The plan
//! needs no BPF, so it is useful even where BPF is unavailable (gVisor), for comparing the real
//! libraries' shapes against the fake ones.

mod inject;
mod requirements;

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
    /// What to change, where the check failed or something is lost.
    fix: Option<String>,
}

impl Check {
    fn new(name: &'static str, required: bool, ok: bool, detail: impl Into<String>) -> Check {
        Check {
            name,
            ok,
            required,
            detail: detail.into(),
            fix: None,
        }
    }

    fn fix(mut self, fix: impl Into<String>) -> Check {
        self.fix = Some(fix.into());
        self
    }

    fn from(name: &'static str, required: bool, f: requirements::Finding) -> Check {
        Check {
            name,
            ok: f.ok,
            required,
            detail: f.detail,
            fix: f.fix,
        }
    }
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

/// NVML: the GPUs it lists, or why it is unavailable (capture works without it); the
/// driver's version where NVML tells it.
fn nvml_check(lib: Option<&PathBuf>) -> (Check, Option<String>) {
    let mut b = nvml_wrapper::Nvml::builder();
    if let Some(p) = lib {
        b.lib_path(p.as_os_str());
    }
    let n = match b.init() {
        Ok(n) => n,
        Err(e) => {
            let c = Check::new(
                "nvml",
                false,
                false,
                format!(
                    "{e}: GPU utilisation and per-process GPU memory will not be sampled \
                     (capture works without them)"
                ),
            )
            .fix(
                "on a GPU node: install the NVIDIA driver's NVML (libnvidia-ml.so.1), or give \
                  its path with --nvml-lib",
            );
            return (c, None);
        }
    };
    let version = n.sys_driver_version().ok();
    let c = match n.device_count() {
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
            Check::new(
                "nvml",
                false,
                true,
                format!(
                    "{c} GPU(s): {}; {}{gpm}",
                    names.join(", "),
                    version.as_ref().map_or_else(
                        || "driver version unknown".to_owned(),
                        |v| format!("driver {v}")
                    ),
                ),
            )
        }
        Err(e) => Check::new(
            "nvml",
            false,
            false,
            format!("NVML loaded but cannot count GPUs: {e}"),
        )
        .fix("check the driver with nvidia-smi; a driver/NVML version mismatch needs a reboot"),
    };
    (c, version)
}

/// The machine's architecture (`uname -m`).
fn machine() -> String {
    // SAFETY: uname fills the struct it is given; a zeroed one is valid input.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut u) } != 0 {
        return std::env::consts::ARCH.to_owned();
    }
    // SAFETY: uname NUL-terminates `machine`.
    unsafe { std::ffi::CStr::from_ptr(u.machine.as_ptr()) }
        .to_string_lossy()
        .into_owned()
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

/// Loads the object, probes `gpuprofd_doctor_probe_target`, calls it 3 times, and checks that
/// exactly 3 SYNC records were submitted (entry-only cookie: one record per call).
fn round_trip() -> anyhow::Result<(String, &'static str)> {
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
        Ok((
            format!(
                "3 calls, 3 records through the ring buffer ({} at {}+{off:#x})",
                probes.how,
                exe.display()
            ),
            probes.how,
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
    // NCCL's ncclX/pncclX pairs: one probe per address, as the attach makes it.
    let mut nccl_sites = std::collections::HashSet::new();
    for f in &info.exports {
        let Some(rule) = rules::rule_for(lib.layer, &f.name) else {
            continue;
        };
        if lib.layer == crate::api::Layer::Nccl && !nccl_sites.insert(f.file_offset) {
            continue;
        }
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
    let release = crate::sys::kernel::release();
    checks.push(Check::from(
        "kernel",
        true,
        requirements::kernel(release.as_deref()),
    ));
    let config = requirements::KernelConfig::read(release.as_deref());
    checks.push(Check::from(
        "kernel_config",
        true,
        requirements::kernel_config(config.as_ref()),
    ));
    checks.push(Check::from(
        "architecture",
        true,
        requirements::architecture(&machine()),
    ));
    checks.push(Check::from(
        "glibc",
        true,
        requirements::glibc(requirements::glibc_version().as_deref()),
    ));
    checks.push(Check::from(
        "privileges",
        true,
        requirements::capabilities(requirements::effective_capabilities()),
    ));
    let btf = std::path::Path::new("/sys/kernel/btf/vmlinux").exists();
    checks.push(if btf {
        let detail = match crate::sys::btf::task_fsbase() {
            Some(off) => format!(
                "/sys/kernel/btf/vmlinux present (task_struct.thread.fsbase at byte {off}: \
                 Python frames of CPython 3.9 and 3.10 can be read)"
            ),
            None => "/sys/kernel/btf/vmlinux present (no task_struct.thread.fsbase in it: \
                     CPython 3.9 and 3.10 processes get native frames only)"
                .into(),
        };
        Check::new("btf", true, true, detail)
    } else {
        Check::new(
            "btf",
            true,
            false,
            "no /sys/kernel/btf/vmlinux (kernel without CONFIG_DEBUG_INFO_BTF)",
        )
        .fix(
            "boot a kernel built with CONFIG_DEBUG_INFO_BTF=y; in a container, mount the \
             host's /sys/kernel/btf read-only",
        )
    });
    let pmu = std::path::Path::new("/sys/bus/event_source/devices/uprobe/type").exists();
    checks.push(if pmu {
        Check::new("uprobe_pmu", true, true, "uprobe PMU present")
    } else {
        Check::new(
            "uprobe_pmu",
            true,
            false,
            "no uprobe PMU in /sys/bus/event_source/devices (CONFIG_UPROBE_EVENTS off, or a \
             sandbox such as gVisor)",
        )
        .fix(
            "boot a kernel built with CONFIG_UPROBE_EVENTS=y; in a container, mount the host's \
             /sys; gVisor has no uprobes: run on the host or with runc",
        )
    });
    let maps = discovery::map_files_followable();
    checks.push(match maps {
        Ok(()) => Check::new(
            "process_maps",
            false,
            true,
            "/proc/PID/map_files followed: the libraries running processes map are found and \
             opened by their inode (in containers too)",
        ),
        Err(e) => Check::new(
            "process_maps",
            false,
            false,
            format!("{e}: {}", discovery::MAP_FILES_HINT),
        )
        .fix(
            "grant CAP_CHECKPOINT_RESTORE (or CAP_SYS_ADMIN), and run in the host's PID namespace",
        ),
    });
    let rt = round_trip();
    let bpf_ok = rt.is_ok();
    let multi = matches!(&rt, Ok((_, how)) if *how == multi::MULTI_HOW);
    let failed_before = checks.iter().any(|c| c.required && !c.ok);
    checks.push(match rt {
        Ok((detail, _)) => Check::new("bpf_round_trip", true, true, detail),
        // The object's own error says how to build it.
        Err(e) if !capture::has_object() => {
            Check::new("bpf_round_trip", true, false, e.to_string())
        }
        Err(e) => Check::new("bpf_round_trip", true, false, e.to_string()).fix(if failed_before {
            "fix the FAIL lines above first"
        } else {
            "a security module (SELinux, AppArmor, lockdown=confidentiality) may refuse \
                 BPF: see the kernel log (dmesg)"
        }),
    });
    if bpf_ok {
        checks.push(if multi {
            Check::new(
                "uprobe_multi",
                false,
                true,
                "uprobe_multi links: one link per program and library, per process under --pid",
            )
        } else {
            Check::new(
                "uprobe_multi",
                false,
                false,
                "no uprobe_multi links: perf-event uprobes, one per probe (CAP_SYS_ADMIN needed, \
                 about 0.1 s each to stop; under --pid other CUDA processes pay the traps too; \
                 GPU activity needs uprobe_multi links (Linux 6.6): the injection library is \
                 left alone)",
            )
            .fix("boot Linux 6.6 or later")
        });
    }
    let (nvml, nvml_driver) = nvml_check(opts.nvml_lib.as_ref());
    checks.push(nvml);

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
    let driver = nvml_driver.or_else(|| {
        libs.iter().find_map(|l| {
            let real = std::fs::canonicalize(&l.open_path).ok()?;
            requirements::driver_version_from_file(real.file_name()?.to_str()?)
        })
    });
    checks.push(Check::from(
        "driver",
        false,
        requirements::driver(driver.as_deref()),
    ));
    let gt = inject::finding(
        &crate::sys::inject_lib::locate(),
        multi,
        &inject::processes_with_it(),
    );
    let mut c = Check::new("gpu_time_library", false, gt.ok, gt.detail);
    c.fix = gt.fix;
    checks.push(c);
    let plans: Vec<Value> = libs.iter().map(|l| plan(l, opts.symbols)).collect();
    // Capture works here when every required check passed (a container can have a working
    // round trip and no BTF to show it: the probes would not load in the service).
    let capture_ok = checks.iter().all(|c| c.ok || !c.required);

    if opts.json {
        let v = json!({
            "schema": "gpuprofd.doctor/1",
            "ok": capture_ok,
            "checks": checks.iter().map(|c| json!({"name": c.name, "ok": c.ok, "required": c.required, "detail": c.detail, "fix": c.fix})).collect::<Vec<_>>(),
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
            if let Some(fix) = &c.fix {
                println!("     {:<15} fix: {fix}", "");
            }
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
            if capture_ok {
                "gpuprofd can capture on this machine"
            } else {
                "gpuprofd CANNOT capture on this machine (see FAIL above); the hook plan above needs no BPF"
            }
        );
    }
    if capture_ok { 0 } else { 9 }
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
