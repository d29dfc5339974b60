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
        // SAFETY: mallinfo2 takes no arguments and returns a plain struct.
        let m = unsafe { libc::mallinfo2() };
        Some(m.uordblks as u64 + m.hblkhd as u64)
    }
    #[cfg(not(target_env = "gnu"))]
    None
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
}
