//! The running kernel and what it grants this process: release, host name, capabilities.

/// CAP_SYS_ADMIN's bit in the capability sets.
pub const CAP_SYS_ADMIN: u32 = 21;
/// CAP_PERFMON's bit (Linux 5.8+).
pub const CAP_PERFMON: u32 = 38;
/// CAP_BPF's bit (Linux 5.8+).
pub const CAP_BPF: u32 = 39;

/// The kernel release (`uname -r`), `None` where procfs cannot tell.
pub fn release() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .map(|s| s.trim().to_owned())
}

/// Whether a kernel release (`6.18.44-fc-v657-gpu`, `5.15.0-91-generic`) is at least
/// `major.minor`; an unreadable one is not.
pub fn release_at_least(release: &str, (major, minor): (u32, u32)) -> bool {
    let mut parts = release.trim().split(['.', '-']);
    let mut num = || parts.next().and_then(|p| p.parse::<u32>().ok());
    match (num(), num()) {
        (Some(a), Some(b)) => (a, b) >= (major, minor),
        _ => false,
    }
}

/// Whether the running kernel is at least `major.minor`.
pub fn running_at_least(version: (u32, u32)) -> bool {
    release().is_some_and(|r| release_at_least(&r, version))
}

/// This machine's host name (empty where procfs cannot tell).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// Whether this process has capability `cap` in its effective set.
pub fn has_capability(cap: u32) -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    eff & (1u64 << cap) != 0
}

#[cfg(test)]
mod tests {
    #[test]
    fn kernel_releases_compare_by_major_and_minor() {
        use super::release_at_least as at_least;
        assert!(at_least("6.18.44-fc-v657-gpu\n", (6, 6)));
        assert!(at_least("6.6.0", (6, 6)));
        assert!(!at_least("6.5.13-arch1", (6, 6)));
        assert!(!at_least("5.15.0-91-generic", (6, 6)));
        assert!(at_least("7.0", (6, 6)));
        assert!(!at_least("", (6, 6)));
        assert!(!at_least("weird", (6, 6)));
    }
}
