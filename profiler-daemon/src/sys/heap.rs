//! The daemon's own memory: the allocator set up for a process that runs for weeks, and the
//! figures the service reports about it.

/// glibc's allocator gives threads their own arenas (up to 8 per CPU) and never hands memory
/// freed in one arena to another. The daemon allocates on its reader, aggregator and tokio
/// worker threads in turn, so process churn left free memory stranded across arenas and a
/// resident size that crept up by megabytes per thousand ended processes. Two arenas keep the
/// reader and the aggregator apart without that. Called before any thread starts;
/// `MALLOC_ARENA_MAX` in the environment still decides when set.
pub fn limit_arenas() {
    #[cfg(target_env = "gnu")]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets an allocator parameter; no thread has started yet.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, 2) };
    }
}

/// Returns the allocator's free memory to the kernel. A burst (a backlog of ring-buffer
/// batches, a snapshot of thousands of processes) raises the heap's high-water mark, and glibc
/// keeps what was freed below the top of each arena resident; a daemon that runs for weeks
/// should hold what it uses, not the most it ever used. Costs a walk of the free lists
/// (milliseconds); the session calls it every few seconds.
pub fn trim() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free pages; it is thread-safe.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Bytes the daemon has allocated and not freed (the allocator's count: chunks in use in every
/// arena plus those mapped on their own), or `None` where the allocator does not say. Unlike
/// the resident size, it does not include free memory the allocator keeps, so it is the figure
/// that shows whether state accumulates.
pub fn in_use() -> Option<u64> {
    #[cfg(target_env = "gnu")]
    {
        // mallinfo2 (glibc 2.33+) is looked up at run time, not linked: the release binary runs
        // on glibc 2.28 (README, Requirements), which has only mallinfo, whose `int` fields wrap
        // at 4 GiB (read as unsigned), far above what the daemon holds.
        match mallinfo2() {
            Some(f) => {
                // SAFETY: mallinfo2 takes no arguments and returns a plain struct.
                let m = unsafe { f() };
                Some(m.uordblks as u64 + m.hblkhd as u64)
            }
            None => Some(in_use_before_2_33()),
        }
    }
    #[cfg(not(target_env = "gnu"))]
    None
}

/// [`in_use`] from `mallinfo`, for glibc before 2.33.
#[cfg(target_env = "gnu")]
fn in_use_before_2_33() -> u64 {
    // SAFETY: mallinfo takes no arguments and returns a plain struct.
    let m = unsafe { libc::mallinfo() };
    u64::from(m.uordblks as u32) + u64::from(m.hblkhd as u32)
}

/// glibc's `mallinfo2`, where this glibc has it (2.33+).
#[cfg(target_env = "gnu")]
fn mallinfo2() -> Option<unsafe extern "C" fn() -> libc::mallinfo2> {
    use std::sync::OnceLock;
    static SYM: OnceLock<usize> = OnceLock::new();
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only looks a symbol up.
    let addr = *SYM
        .get_or_init(|| unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"mallinfo2".as_ptr()) } as usize);
    // SAFETY: glibc's mallinfo2 has exactly this signature.
    (addr != 0).then(|| unsafe {
        std::mem::transmute::<usize, unsafe extern "C" fn() -> libc::mallinfo2>(addr)
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn in_use_counts_a_live_allocation() {
        let before = super::in_use().unwrap();
        let v: Vec<u8> = Vec::with_capacity(64 << 20);
        let during = super::in_use().unwrap();
        drop(v);
        let after = super::in_use().unwrap();
        // Other test threads allocate too; 64 MiB stands far above their noise.
        assert!(during >= before + (60 << 20), "{before} -> {during}");
        assert!(after + (60 << 20) <= during, "{during} -> {after}");
    }

    #[test]
    fn mallinfo2_is_found_where_glibc_has_it() {
        // This machine's glibc is newer than 2.33: the run-time lookup must find it.
        assert!(super::mallinfo2().is_some());
    }

    #[test]
    fn the_older_glibcs_count_sees_a_live_allocation_too() {
        let before = super::in_use_before_2_33();
        let v: Vec<u8> = Vec::with_capacity(64 << 20);
        let during = super::in_use_before_2_33();
        drop(v);
        assert!(during >= before + (60 << 20), "{before} -> {during}");
    }
}
