//! The requirements README's table states, each checked on this machine with the fix to print:
//! kernel release, kernel configuration, architecture, glibc, capabilities and the NVIDIA
//! driver branch. The functional checks (BTF file, uprobe PMU, the probe round trip) stay in
//! `doctor`; these say *why* one of them would fail and what to change, before it does.
//!
//! Pure functions over what the machine tells (a release string, a config text, a capability
//! mask, a driver version) so that each is unit-tested with other machines' values.

use std::collections::HashMap;

/// The oldest kernel the daemon supports (its load error says the same): ring buffers (5.8),
/// `bpf_get_current_task_btf` for uprobes, and the BTF the object is checked against.
pub const MIN_KERNEL: (u32, u32) = (5, 15);
/// `uprobe_multi` links (and their pid filter, which keeps other processes trap-free).
pub const MULTI_KERNEL: (u32, u32) = (6, 6);
/// The glibc the release binary is linked against (`cargo xtask build`, cargo-zigbuild).
pub const GLIBC_FLOOR: (u32, u32) = (2, 28);

/// One requirement's outcome: `fix` says what to change where it is not met.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub ok: bool,
    pub detail: String,
    pub fix: Option<String>,
}

impl Finding {
    fn ok(detail: impl Into<String>) -> Finding {
        Finding {
            ok: true,
            detail: detail.into(),
            fix: None,
        }
    }
    fn failed(detail: impl Into<String>, fix: impl Into<String>) -> Finding {
        Finding {
            ok: false,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
}

/// The kernel release against the supported floor; `uprobe_multi` noted as optional.
pub fn kernel(release: Option<&str>) -> Finding {
    use crate::sys::kernel::release_at_least as at_least;
    let Some(r) = release else {
        return Finding::failed(
            "the kernel release is unreadable (/proc/sys/kernel/osrelease)",
            "mount procfs at /proc",
        );
    };
    let (a, b) = MIN_KERNEL;
    if !at_least(r, MIN_KERNEL) {
        return Finding::failed(
            format!("Linux {r}: older than {a}.{b}"),
            format!(
                "boot a Linux {a}.{b} or later kernel ({}.{} or later for uprobe_multi links)",
                MULTI_KERNEL.0, MULTI_KERNEL.1
            ),
        );
    }
    let multi = if at_least(r, MULTI_KERNEL) {
        "uprobe_multi links available"
    } else {
        "no uprobe_multi links before 6.6: perf-event uprobes, CAP_SYS_ADMIN needed, about \
         0.1 s per probe to stop, and other processes pay the traps under --pid"
    };
    Finding::ok(format!("Linux {r} ({a}.{b} or later needed; {multi})"))
}

/// A kernel build configuration (`CONFIG_X=y` lines), from `/proc/config.gz` or
/// `/boot/config-RELEASE`.
pub struct KernelConfig {
    pub source: String,
    values: HashMap<String, String>,
}

impl KernelConfig {
    pub fn parse(source: &str, text: &str) -> KernelConfig {
        let values = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .filter(|(k, _)| k.starts_with("CONFIG_"))
            .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
            .collect();
        KernelConfig {
            source: source.to_owned(),
            values,
        }
    }

    /// The running kernel's configuration, where the kernel or /boot publishes it.
    pub fn read(release: Option<&str>) -> Option<KernelConfig> {
        use std::io::Read as _;
        if let Ok(f) = std::fs::File::open("/proc/config.gz") {
            let mut text = String::new();
            if flate2::read::GzDecoder::new(f)
                .read_to_string(&mut text)
                .is_ok()
            {
                return Some(KernelConfig::parse("/proc/config.gz", &text));
            }
        }
        let path = format!("/boot/config-{}", release?);
        let text = std::fs::read_to_string(&path).ok()?;
        Some(KernelConfig::parse(&path, &text))
    }

    fn enabled(&self, key: &str) -> bool {
        matches!(self.values.get(key).map(String::as_str), Some("y" | "m"))
    }
}

/// What each option gives, and whether capture stops without it.
const OPTIONS: &[(&str, bool, &str)] = &[
    ("CONFIG_BPF_SYSCALL", true, "BPF at all"),
    (
        "CONFIG_BPF_EVENTS",
        true,
        "BPF programs on uprobes and tracepoints",
    ),
    ("CONFIG_UPROBE_EVENTS", true, "uprobes for BPF"),
    (
        "CONFIG_DEBUG_INFO_BTF",
        true,
        "kernel BTF (/sys/kernel/btf/vmlinux)",
    ),
    (
        "CONFIG_BPF_JIT",
        false,
        "JIT-compiled probes (interpreted ones cost several times more per call)",
    ),
    (
        "CONFIG_FTRACE_SYSCALLS",
        false,
        "syscall tracepoints: libraries loaded late are found at their mmap, not by a \
         /proc rescan every second",
    ),
];

/// The kernel options the probes need, from the build configuration where it is published;
/// `None` config: the functional checks decide alone.
pub fn kernel_config(config: Option<&KernelConfig>) -> Finding {
    let Some(c) = config else {
        return Finding::ok(
            "not published (no /proc/config.gz or /boot/config-RELEASE): the checks below test \
             each feature directly",
        );
    };
    let missing_required: Vec<&str> = OPTIONS
        .iter()
        .filter(|&&(k, req, _)| req && !c.enabled(k))
        .map(|&(k, _, _)| k)
        .collect();
    let missing_optional: Vec<String> = OPTIONS
        .iter()
        .filter(|&&(k, req, _)| !req && !c.enabled(k))
        .map(|&(k, _, why)| format!("{k} ({why})"))
        .collect();
    let names = |v: &[&str]| v.join(", ");
    if !missing_required.is_empty() {
        let what: Vec<String> = OPTIONS
            .iter()
            .filter(|(k, _, _)| missing_required.contains(k))
            .map(|(k, _, why)| format!("{k} ({why})"))
            .collect();
        return Finding::failed(
            format!("{}: not set: {}", c.source, what.join(", ")),
            format!(
                "boot a kernel built with {}=y (distribution kernels of Ubuntu 20.04+, RHEL 8.2+, \
                 Debian 11+ have them)",
                names(&missing_required)
            ),
        );
    }
    if missing_optional.is_empty() {
        Finding::ok(format!(
            "{}: {} set",
            c.source,
            OPTIONS
                .iter()
                .map(|(k, _, _)| *k)
                .collect::<Vec<_>>()
                .join(", ")
        ))
    } else {
        Finding::ok(format!(
            "{}: the required options are set; without {}",
            c.source,
            missing_optional.join(", ")
        ))
    }
}

/// The machine's architecture (`uname -m`) against the one the kit is built for.
pub fn architecture(machine: &str) -> Finding {
    if machine == "x86_64" {
        Finding::ok("x86_64")
    } else {
        Finding::failed(
            format!("{machine}: gpuprofd places its probes by decoding x86-64 code"),
            "run gpuprofd on an x86-64 node (other architectures are not supported yet)",
        )
    }
}

/// glibc's version at run time against the floor the binary was linked for. (A glibc below
/// the floor cannot start this binary at all; the check reports the margin, and what a build
/// from source on such a node needs.)
pub fn glibc(version: Option<&str>) -> Finding {
    let (a, b) = GLIBC_FLOOR;
    let Some(v) = version else {
        return Finding::ok(format!(
            "not glibc (or its version is unknown); the release binary needs glibc {a}.{b}+"
        ));
    };
    let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let have = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if have >= GLIBC_FLOOR {
        Finding::ok(format!("glibc {v} ({a}.{b} or later needed)"))
    } else {
        Finding::failed(
            format!("glibc {v}: older than {a}.{b}"),
            format!(
                "use a node with glibc {a}.{b} or later (RHEL 8, Ubuntu 20.04, Debian 11 and newer)"
            ),
        )
    }
}

/// The running glibc's version, `None` where the C library is not glibc.
pub fn glibc_version() -> Option<String> {
    // SAFETY: gnu_get_libc_version returns a pointer to a static NUL-terminated string.
    let p = unsafe { libc::gnu_get_libc_version() };
    if p.is_null() {
        return None;
    }
    // SAFETY: as above; never freed, valid for the life of the process.
    let s = unsafe { std::ffi::CStr::from_ptr(p) };
    s.to_str().ok().map(str::to_owned)
}

/// Capability bits (linux/capability.h).
mod cap {
    pub const DAC_READ_SEARCH: u32 = 2;
    pub const SYS_PTRACE: u32 = 19;
    pub const SYS_ADMIN: u32 = 21;
    pub const SYS_RESOURCE: u32 = 24;
    pub const PERFMON: u32 = 38;
    pub const BPF: u32 = 39;
    pub const CHECKPOINT_RESTORE: u32 = 40;
}

/// The capabilities the daemon uses, what each gives, and whether capture stops without it.
/// `alt`: another capability that serves too.
const CAPS: &[(&str, u32, Option<u32>, bool, &str)] = &[
    ("CAP_BPF", cap::BPF, Some(cap::SYS_ADMIN), true, "load BPF"),
    (
        "CAP_PERFMON",
        cap::PERFMON,
        Some(cap::SYS_ADMIN),
        true,
        "attach uprobes",
    ),
    (
        "CAP_CHECKPOINT_RESTORE",
        cap::CHECKPOINT_RESTORE,
        Some(cap::SYS_ADMIN),
        false,
        "follow /proc/PID/map_files (CAP_SYS_ADMIN serves too)",
    ),
    (
        "CAP_SYS_PTRACE",
        cap::SYS_PTRACE,
        None,
        false,
        "read other users' processes: their libraries, job variables and kernel names",
    ),
    (
        "CAP_DAC_READ_SEARCH",
        cap::DAC_READ_SEARCH,
        None,
        false,
        "open libraries in other users' and containers' directories",
    ),
    (
        "CAP_SYS_RESOURCE",
        cap::SYS_RESOURCE,
        None,
        false,
        "raise the memlock and open-file limits (kernels before 5.11 charge BPF maps to memlock)",
    ),
];

/// The capabilities in an effective set (`CapEff`), each named with what it gives.
pub fn capabilities(effective: u64) -> Finding {
    let has = |c: u32| effective & (1u64 << c) != 0;
    let held =
        |&(_, c, alt, _, _): &(&str, u32, Option<u32>, bool, &str)| has(c) || alt.is_some_and(has);
    let missing_required: Vec<&str> = CAPS
        .iter()
        .filter(|c| c.3 && !held(c))
        .map(|c| c.0)
        .collect();
    let missing_optional: Vec<String> = CAPS
        .iter()
        .filter(|c| !c.3 && !held(c))
        .map(|c| format!("{} ({})", c.0, c.4))
        .collect();
    if !missing_required.is_empty() {
        return Finding::failed(
            format!("missing {}", missing_required.join(" and ")),
            "run as root (sudo), or grant CAP_BPF CAP_PERFMON CAP_CHECKPOINT_RESTORE \
             CAP_SYS_PTRACE CAP_DAC_READ_SEARCH CAP_SYS_RESOURCE (CAP_SYS_ADMIN in place of \
             the first three before Linux 6.6)",
        );
    }
    let mut detail = if has(cap::SYS_ADMIN) {
        "CAP_SYS_ADMIN (covers CAP_BPF, CAP_PERFMON, map_files)".to_owned()
    } else {
        "CAP_BPF, CAP_PERFMON".to_owned()
    };
    if missing_optional.is_empty() {
        detail.push_str(": every capability gpuprofd uses");
        Finding::ok(detail)
    } else {
        detail.push_str(&format!("; without {}", missing_optional.join(", ")));
        // Enough to capture; what is lost is said, and how to get it.
        Finding {
            ok: true,
            detail,
            fix: Some(
                "grant the capabilities named, or run as root, for complete attribution".into(),
            ),
        }
    }
}

/// This process's effective capability set.
pub fn effective_capabilities() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0)
}

/// The driver branches the project has checked, and how (docs/VALIDATION.md).
pub const BRANCHES: &[(u32, &str)] = &[
    (535, "its libcuda's entry shapes checked without a GPU"),
    (550, "its libcuda's entry shapes checked without a GPU"),
    (580, "validated on an H200 and an H100"),
];

/// The NVIDIA driver's branch (the major of `580.159.04`) against those checked.
pub fn driver(version: Option<&str>) -> Finding {
    let Some(v) = version else {
        return Finding::ok(
            "no NVIDIA driver seen (no NVML, no libcuda.so.VERSION found): nothing to check",
        );
    };
    let branch = v.split('.').next().and_then(|b| b.parse::<u32>().ok());
    let checked: Vec<String> = BRANCHES.iter().map(|(b, _)| b.to_string()).collect();
    match branch.and_then(|b| BRANCHES.iter().find(|(x, _)| *x == b)) {
        Some((b, how)) => Finding::ok(format!("driver {v}: branch {b}, {how}")),
        None => Finding {
            // Not a failure: entry shapes rarely change, and the hook plan below shows them.
            ok: true,
            detail: format!(
                "driver {v}: a branch not checked by the project (checked: {})",
                checked.join(", ")
            ),
            fix: Some(
                "compare the hook plan below (`doctor --symbols`) with a checked branch's, and \
                 run scripts/gpu-validate.sh once on this node"
                    .into(),
            ),
        },
    }
}

/// The driver version a driver library's file name carries (`libcuda.so.580.159.04`).
pub fn driver_version_from_file(name: &str) -> Option<String> {
    let v = name.strip_prefix("libcuda.so.")?;
    (v.split('.').count() >= 2 && v.split('.').all(|p| p.parse::<u32>().is_ok()))
        .then(|| v.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_releases_against_the_floor() {
        let f = kernel(Some("5.10.0-28-amd64"));
        assert!(!f.ok);
        assert_eq!(f.detail, "Linux 5.10.0-28-amd64: older than 5.15");
        assert_eq!(
            f.fix.as_deref(),
            Some("boot a Linux 5.15 or later kernel (6.6 or later for uprobe_multi links)")
        );
        let f = kernel(Some("5.15.0-91-generic"));
        assert!(f.ok);
        assert!(f.detail.contains("no uprobe_multi links before 6.6"));
        let f = kernel(Some("6.18.44-fc-v595"));
        assert_eq!(
            f.detail,
            "Linux 6.18.44-fc-v595 (5.15 or later needed; uprobe_multi links available)"
        );
        assert!(!kernel(None).ok);
    }

    #[test]
    fn kernel_configuration_names_what_is_missing() {
        let all = "CONFIG_BPF_SYSCALL=y\nCONFIG_BPF_EVENTS=y\nCONFIG_UPROBE_EVENTS=y\n\
                   CONFIG_DEBUG_INFO_BTF=y\nCONFIG_BPF_JIT=y\nCONFIG_FTRACE_SYSCALLS=y\n";
        let c = KernelConfig::parse("/proc/config.gz", all);
        let f = kernel_config(Some(&c));
        assert!(f.ok && f.fix.is_none());
        let no_btf = all.replace(
            "CONFIG_DEBUG_INFO_BTF=y",
            "# CONFIG_DEBUG_INFO_BTF is not set",
        );
        let f = kernel_config(Some(&KernelConfig::parse("/boot/config-5.15.0", &no_btf)));
        assert!(!f.ok);
        assert_eq!(
            f.detail,
            "/boot/config-5.15.0: not set: CONFIG_DEBUG_INFO_BTF (kernel BTF (/sys/kernel/btf/vmlinux))"
        );
        assert!(
            f.fix
                .unwrap()
                .starts_with("boot a kernel built with CONFIG_DEBUG_INFO_BTF=y")
        );
        let no_jit = all.replace("CONFIG_BPF_JIT=y", "");
        let f = kernel_config(Some(&KernelConfig::parse("/proc/config.gz", &no_jit)));
        assert!(f.ok);
        assert!(
            f.detail
                .contains("without CONFIG_BPF_JIT (JIT-compiled probes")
        );
        assert!(kernel_config(None).ok);
    }

    #[test]
    fn architecture_and_glibc() {
        assert!(architecture("x86_64").ok);
        assert!(!architecture("aarch64").ok);
        assert!(glibc(Some("2.28")).ok);
        assert!(glibc(Some("2.36")).ok);
        let f = glibc(Some("2.17"));
        assert!(!f.ok);
        assert_eq!(f.detail, "glibc 2.17: older than 2.28");
        assert!(glibc(None).ok);
        // The test binary itself runs on glibc: the run-time version is readable.
        assert!(glibc_version().is_some_and(|v| v.starts_with("2.")));
    }

    #[test]
    fn capabilities_named_with_what_each_gives() {
        let bit = |c: u32| 1u64 << c;
        let f = capabilities(0);
        assert!(!f.ok);
        assert_eq!(f.detail, "missing CAP_BPF and CAP_PERFMON");
        let f = capabilities(bit(cap::BPF) | bit(cap::PERFMON));
        assert!(f.ok);
        assert!(f.detail.starts_with(
            "CAP_BPF, CAP_PERFMON; without CAP_CHECKPOINT_RESTORE (follow /proc/PID/map_files"
        ));
        assert!(f.fix.is_some());
        let least = [
            cap::BPF,
            cap::PERFMON,
            cap::CHECKPOINT_RESTORE,
            cap::SYS_PTRACE,
            cap::DAC_READ_SEARCH,
            cap::SYS_RESOURCE,
        ]
        .iter()
        .fold(0, |m, &c| m | bit(c));
        let f = capabilities(least);
        assert_eq!(
            f.detail,
            "CAP_BPF, CAP_PERFMON: every capability gpuprofd uses"
        );
        assert!(f.fix.is_none());
        // Root: every bit.
        let f = capabilities(u64::MAX >> 23);
        assert_eq!(
            f.detail,
            "CAP_SYS_ADMIN (covers CAP_BPF, CAP_PERFMON, map_files): every capability gpuprofd uses"
        );
    }

    #[test]
    fn driver_branches() {
        let f = driver(Some("580.159.04"));
        assert_eq!(
            f.detail,
            "driver 580.159.04: branch 580, validated on an H200 and an H100"
        );
        assert!(f.fix.is_none());
        let f = driver(Some("570.86.15"));
        assert!(f.ok);
        assert_eq!(
            f.detail,
            "driver 570.86.15: a branch not checked by the project (checked: 535, 550, 580)"
        );
        assert!(f.fix.is_some());
        assert_eq!(
            driver_version_from_file("libcuda.so.535.183.01").as_deref(),
            Some("535.183.01")
        );
        assert_eq!(driver_version_from_file("libcuda.so.1"), None);
        assert_eq!(driver_version_from_file("libcudart.so.12.4.127"), None);
    }
}
