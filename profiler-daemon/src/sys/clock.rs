//! The clock the probes stamp every record with (`bpf_ktime_get_ns`: CLOCK_MONOTONIC), read
//! from userspace so that what the daemon notes (NVML samples, first sights, counted launches)
//! sits on the same time axis.

fn now_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC now, in ns (the clock of the records' `ts_ns`).
pub fn monotonic_ns() -> u64 {
    now_ns(libc::CLOCK_MONOTONIC)
}

/// How far CLOCK_BOOTTIME is ahead of CLOCK_MONOTONIC now (the time the machine spent
/// suspended), in ns: what turns a boot-time stamp (a process's start time) into the records'
/// clock.
pub fn boot_minus_monotonic_ns() -> u64 {
    now_ns(libc::CLOCK_BOOTTIME).saturating_sub(now_ns(libc::CLOCK_MONOTONIC))
}
