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

/// The wall clock (CLOCK_REALTIME) read against CLOCK_MONOTONIC at one moment: what places a
/// capture's records on the wall-clock axis, so captures of several nodes can share one time
/// axis. Captures store one at their start and one at their end (`store::Frame::Clock`); the
/// two differ when the wall clock was stepped or slewed (NTP) during the capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WallPair {
    /// Ns since the Unix epoch: the middle of two wall-clock reads around `monotonic_ns`.
    pub unix_ns: u64,
    pub monotonic_ns: u64,
    /// The time between the two wall-clock reads: how far off the pairing can be.
    pub uncertainty_ns: u64,
}

impl WallPair {
    /// Wall − monotonic, in ns: add it to a record's `ts_ns` for its wall-clock time.
    pub fn offset_ns(&self) -> i128 {
        i128::from(self.unix_ns) - i128::from(self.monotonic_ns)
    }
}

/// [`WallPair`] now: the best of three tries (the pair whose two wall reads are closest).
pub fn wall_pair() -> WallPair {
    (0..3)
        .map(|_| {
            let a = now_ns(libc::CLOCK_REALTIME);
            let m = now_ns(libc::CLOCK_MONOTONIC);
            let b = now_ns(libc::CLOCK_REALTIME);
            WallPair {
                unix_ns: a + b.saturating_sub(a) / 2,
                monotonic_ns: m,
                uncertainty_ns: b.saturating_sub(a),
            }
        })
        .min_by_key(|p| p.uncertainty_ns)
        .expect("three tries")
}
