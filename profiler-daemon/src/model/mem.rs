//! Allocation accounting per process: totals per kind, live and peak bytes, bounded tracking.

use super::hash::FastMap;
use profiler_common::decode::Event;
use profiler_common::{MemBody, flags, memkind, memop};

/// Default bound on the allocations (pointers and VMM handles) tracked live per process.
pub const DEFAULT_LIVE_CAP: usize = 1 << 20;

/// Calls and bytes of one memory kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KindTotals {
    pub calls: u64,
    pub bytes: u64,
}

/// Index into [`MemTracker::by_kind`]: `memkind::DEVICE..=memkind::VMM` → 0..=5.
pub fn kind_slot(mem_kind: u32) -> Option<usize> {
    (memkind::DEVICE..=memkind::VMM)
        .contains(&mem_kind)
        .then(|| (mem_kind - memkind::DEVICE) as usize)
}

/// Allocations, frees and live memory of one process.
///
/// An allocation counts as failed when its call returned an error, or returned no pointer for a
/// non-zero size. `bytes` sums successful allocations. A free of a pointer the tracker does not
/// know (allocated before the profiler attached, or not tracked because of the cap) counts a
/// free and changes nothing else; `cudaFree(NULL)` (a no-op programs use to create a context)
/// is not counted as a free at all.
#[derive(Clone, Debug)]
pub struct MemTracker {
    pub calls: u64,
    pub failed: u64,
    pub bytes: u64,
    pub frees: u64,
    /// Successful allocations not tracked live because the cap was reached.
    pub untracked: u64,
    pub live_bytes: u64,
    pub peak_bytes: u64,
    /// Indexed by [`kind_slot`].
    pub by_kind: [KindTotals; 6],
    live: FastMap<u64, (u64, u32)>,
    vmm: FastMap<u64, u64>,
    /// Live pinned and managed host allocations by start: end (exclusive). Copies whose host
    /// side falls in none of them used pageable memory.
    host: std::collections::BTreeMap<u64, u64>,
    cap: usize,
}

impl MemTracker {
    pub fn new(cap: usize) -> Self {
        Self {
            calls: 0,
            failed: 0,
            bytes: 0,
            frees: 0,
            untracked: 0,
            live_bytes: 0,
            peak_bytes: 0,
            by_kind: [KindTotals::default(); 6],
            live: FastMap::default(),
            vmm: FastMap::default(),
            host: Default::default(),
            cap,
        }
    }

    /// Whether `addr` lies in a live pinned (or managed) host allocation this process made
    /// while it was watched.
    pub fn is_pinned(&self, addr: u64) -> bool {
        self.host
            .range(..=addr)
            .next_back()
            .is_some_and(|(_, &end)| addr < end)
    }

    /// Allocations tracked live now (pointers and VMM handles).
    pub fn tracked(&self) -> usize {
        self.live.len() + self.vmm.len()
    }

    pub fn apply(&mut self, m: &MemBody) {
        let failed_call = m.flags & flags::HAS_RETURN != 0 && m.ret != 0;
        match m.op {
            memop::ALLOC => self.alloc(m.ptr, m.bytes, m.mem_kind, failed_call, false),
            memop::VMM_CREATE => self.alloc(m.ptr, m.bytes, memkind::VMM, failed_call, true),
            memop::FREE => {
                if m.ptr == 0 {
                    return;
                }
                self.frees += 1;
                if !failed_call && let Some((bytes, _)) = self.live.remove(&m.ptr) {
                    self.live_bytes -= bytes;
                    self.host.remove(&m.ptr);
                }
            }
            memop::VMM_RELEASE => {
                self.frees += 1;
                if !failed_call && let Some(bytes) = self.vmm.remove(&m.ptr) {
                    self.live_bytes -= bytes;
                }
            }
            // Page-locking memory the process already has: no allocation, but copies from it
            // are not pageable (bounded like the live allocations).
            memop::HOST_REGISTER
                if !failed_call && m.ptr != 0 && m.bytes != 0 && self.host.len() < self.cap =>
            {
                self.host.insert(m.ptr, m.ptr.saturating_add(m.bytes));
            }
            // Only a registered region: a pinned allocation stays until its free.
            memop::HOST_UNREGISTER if !failed_call && !self.live.contains_key(&m.ptr) => {
                self.host.remove(&m.ptr);
            }
            // Mapping changes no physical allocation; the call is counted in the API table.
            _ => {}
        }
    }

    fn alloc(&mut self, ptr: u64, bytes: u64, kind: u32, failed_call: bool, vmm: bool) {
        self.calls += 1;
        let slot = kind_slot(kind);
        if let Some(s) = slot {
            self.by_kind[s].calls += 1;
        }
        if failed_call || (ptr == 0 && bytes != 0) {
            self.failed += 1;
            return;
        }
        self.bytes = self.bytes.saturating_add(bytes);
        if let Some(s) = slot {
            self.by_kind[s].bytes = self.by_kind[s].bytes.saturating_add(bytes);
        }
        if ptr == 0 {
            return; // a zero-byte allocation: nothing to track
        }
        // A pointer handed out again means its free was missed: replace the old entry.
        let old = if vmm {
            self.vmm.remove(&ptr)
        } else {
            self.live.remove(&ptr).map(|(b, _)| b)
        };
        if let Some(b) = old {
            self.live_bytes -= b;
            self.host.remove(&ptr);
        }
        if self.tracked() >= self.cap {
            self.untracked += 1;
            return;
        }
        if vmm {
            self.vmm.insert(ptr, bytes);
        } else {
            self.live.insert(ptr, (bytes, kind));
            if kind == memkind::HOST_PINNED || kind == memkind::MANAGED {
                self.host.insert(ptr, ptr.saturating_add(bytes));
            }
        }
        self.live_bytes += bytes;
        self.peak_bytes = self.peak_bytes.max(self.live_bytes);
    }
}

/// Device memory live in each process over a capture, followed call by call as its records are
/// replayed in order: what the HTML report's memory curves and the trace's memory counters
/// show. `K` names a process (a tgid and generation, or a trace's process track).
pub struct LiveMemory<K> {
    trackers: FastMap<K, MemTracker>,
}

impl<K> Default for LiveMemory<K> {
    fn default() -> Self {
        Self {
            trackers: FastMap::default(),
        }
    }
}

impl<K: Eq + std::hash::Hash> LiveMemory<K> {
    /// Follows `ev`, a record of process `key`: the bytes live after it when it is a memory
    /// call that changed them, else `None`.
    pub fn on(&mut self, key: K, ev: &Event) -> Option<u64> {
        let Event::Mem(_, m) = ev else {
            return None;
        };
        let t = self
            .trackers
            .entry(key)
            .or_insert_with(|| MemTracker::new(DEFAULT_LIVE_CAP));
        let before = t.live_bytes;
        t.apply(m);
        (t.live_bytes != before).then_some(t.live_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(op: u32, ptr: u64, bytes: u64, kind: u32, ret: i32) -> MemBody {
        MemBody {
            ptr,
            bytes,
            dur_ns: 10,
            stream: 0,
            op,
            mem_kind: kind,
            ret,
            flags: flags::HAS_RETURN,
        }
    }

    #[test]
    fn live_peak_failed_unknown() {
        let mut t = MemTracker::new(DEFAULT_LIVE_CAP);
        t.apply(&op(memop::ALLOC, 0x1000, 100, memkind::DEVICE, 0));
        t.apply(&op(memop::ALLOC, 0x2000, 50, memkind::HOST_PINNED, 0));
        t.apply(&op(memop::ALLOC, 0, 1 << 40, memkind::DEVICE, 2)); // out of memory
        t.apply(&op(memop::FREE, 0x1000, 0, 0, 0));
        t.apply(&op(memop::FREE, 0x9999, 0, 0, 0)); // unknown pointer
        t.apply(&op(memop::FREE, 0, 0, 0, 0)); // cudaFree(NULL)
        t.apply(&op(memop::ALLOC, 0x3000, 30, memkind::MANAGED, 0));
        assert_eq!((t.calls, t.failed, t.bytes, t.frees), (4, 1, 180, 2));
        assert_eq!((t.live_bytes, t.peak_bytes), (80, 150));
        assert_eq!(
            t.by_kind[0],
            KindTotals {
                calls: 2,
                bytes: 100
            }
        );
        assert_eq!(
            t.by_kind[1],
            KindTotals {
                calls: 1,
                bytes: 50
            }
        );
        assert_eq!(
            t.by_kind[2],
            KindTotals {
                calls: 1,
                bytes: 30
            }
        );
    }

    #[test]
    fn vmm_handles_apart_from_pointers() {
        let mut t = MemTracker::new(DEFAULT_LIVE_CAP);
        t.apply(&op(memop::VMM_CREATE, 0x1000, 1 << 21, memkind::VMM, 0));
        t.apply(&op(memop::VMM_MAP, 0x7f00_0000, 1 << 21, 0, 0));
        t.apply(&op(memop::FREE, 0x1000, 0, 0, 0)); // a pointer, not the handle
        assert_eq!(t.live_bytes, 1 << 21);
        t.apply(&op(memop::VMM_RELEASE, 0x1000, 0, 0, 0));
        assert_eq!(
            (t.live_bytes, t.peak_bytes, t.frees, t.calls),
            (0, 1 << 21, 2, 1)
        );
        assert_eq!(
            t.by_kind[5],
            KindTotals {
                calls: 1,
                bytes: 1 << 21
            }
        );
    }

    #[test]
    fn cap_and_reuse() {
        let mut t = MemTracker::new(2);
        for p in 1..=3u64 {
            t.apply(&op(memop::ALLOC, p * 16, 10, memkind::DEVICE, 0));
        }
        assert_eq!((t.live_bytes, t.untracked, t.tracked()), (20, 1, 2));
        t.apply(&op(memop::ALLOC, 16, 5, memkind::DEVICE, 0)); // reused without a free
        assert_eq!((t.live_bytes, t.peak_bytes), (15, 20));
        t.apply(&op(memop::FREE, 48, 0, 0, 0)); // the untracked one
        assert_eq!((t.live_bytes, t.frees), (15, 1));
    }

    #[test]
    fn registered_host_memory_is_pinned_until_unregistered() {
        let mut t = MemTracker::new(16);
        t.apply(&op(
            memop::HOST_REGISTER,
            0x10_000,
            0x1000,
            memkind::HOST_PINNED,
            0,
        ));
        t.apply(&op(
            memop::HOST_REGISTER,
            0x50_000,
            0x1000,
            memkind::HOST_PINNED,
            1,
        )); // refused
        t.apply(&op(memop::ALLOC, 0x90_000, 0x100, memkind::HOST_PINNED, 0));
        assert!(t.is_pinned(0x10_000) && t.is_pinned(0x10_fff));
        assert!(!t.is_pinned(0x11_000) && !t.is_pinned(0x50_000));
        // Registering is not allocating: the allocation figures are the one cudaHostAlloc's.
        assert_eq!(
            (t.calls, t.bytes, t.live_bytes, t.tracked()),
            (1, 0x100, 0x100, 1)
        );
        // Unregistering a pinned allocation's pointer changes nothing; the region's does.
        t.apply(&op(
            memop::HOST_UNREGISTER,
            0x90_000,
            0,
            memkind::HOST_PINNED,
            0,
        ));
        assert!(t.is_pinned(0x90_000));
        t.apply(&op(
            memop::HOST_UNREGISTER,
            0x10_000,
            0,
            memkind::HOST_PINNED,
            0,
        ));
        assert!(!t.is_pinned(0x10_000));
        // Bounded like the live allocations.
        let mut t = MemTracker::new(2);
        for p in 1..=3u64 {
            t.apply(&op(
                memop::HOST_REGISTER,
                p << 20,
                16,
                memkind::HOST_PINNED,
                0,
            ));
        }
        assert_eq!(
            (1..=3u64).map(|p| t.is_pinned(p << 20)).collect::<Vec<_>>(),
            [true, true, false]
        );
    }

    #[test]
    fn live_memory_reports_each_change_per_process() {
        use profiler_common::Header;
        let ev = |tgid, m: MemBody| {
            let h = Header {
                kind: profiler_common::kind::MEM,
                api: 0,
                tgid,
                tid: tgid,
                ts_ns: 0,
            };
            Event::Mem(h, m)
        };
        let mut live = LiveMemory::default();
        let alloc = op(memop::ALLOC, 0x1000, 100, memkind::DEVICE, 0);
        assert_eq!(live.on(1, &ev(1, alloc)), Some(100));
        assert_eq!(live.on(2, &ev(2, alloc)), Some(100));
        // The same pointer again: its free was missed, nothing changes.
        assert_eq!(live.on(1, &ev(1, alloc)), None);
        let free = op(memop::FREE, 0x1000, 0, 0, 0);
        assert_eq!(live.on(1, &ev(1, free)), Some(0));
        assert_eq!(live.on(1, &ev(1, free)), None);
        let sync = Event::Sync(*ev(1, alloc).header(), Default::default());
        assert_eq!(live.on(2, &sync), None);
    }
}
