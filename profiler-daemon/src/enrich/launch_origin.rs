//! Runtime launches seen one layer down: a driver launch whose caller is the code of a runtime
//! whose launch entries are left unprobed (one trap per launch) is that runtime's launch.
//!
//! The driver probe records the return address it was called from. A runtime's launch path
//! calls the driver from a handful of places in its own text, so the file whose executable
//! mapping holds that address says who launched: a runtime attached with its launch entries
//! left unprobed (then the launch is reported under the runtime's API, `cuLaunchKernel` →
//! `cudaLaunchKernel`), or anything else (the program's, Triton's or cuBLAS's own driver
//! call, reported as today). Each process's answer for a caller address is kept until the
//! process ends: a few entries per process.

use crate::capture::origin::LaunchOrigin;
use crate::enrich::process::ProcSymbols;
use crate::sys::hash::{FastMap, FastSet};
use std::sync::{Arc, RwLock};

/// What the attach said: driver launch API → runtime launch API, and the runtime files
/// (device, inode) whose launch entries are left unprobed. Shared between the session, which
/// updates it as libraries are attached, and the reader.
#[derive(Clone, Default)]
pub struct SeenAtDriver(Arc<RwLock<Table>>);

#[derive(Default)]
struct Table {
    via: FastMap<u32, u32>,
    runtimes: FastSet<(u64, u64)>,
}

impl SeenAtDriver {
    pub fn set(&self, via: impl IntoIterator<Item = (u32, u32)>, runtimes: &[(u64, u64)]) {
        let mut t = self.0.write().expect("launch origins poisoned");
        t.via = via.into_iter().collect();
        t.runtimes = runtimes.iter().copied().collect();
    }
}

/// Where a process's code lives: the file (device, inode) whose executable mapping holds an
/// address (`Ok(None)`: no file's, e.g. code made at run time; `Err`: the process is gone).
pub trait Mappings: Send + Sync {
    #[allow(clippy::result_unit_err)]
    fn file_at(&self, tgid: u32, addr: u64) -> Result<Option<(u64, u64)>, ()>;
    /// The file of the mapping `[addr, addr+len)` of `tgid` by its `/proc/PID/map_files`
    /// entry (one `stat`, no read of the maps); `None` where that entry is not there.
    fn file_of_mapping(&self, tgid: u32, addr: u64, len: u64) -> Option<(u64, u64)>;
}

impl Mappings for ProcSymbols {
    fn file_at(&self, tgid: u32, addr: u64) -> Result<Option<(u64, u64)>, ()> {
        ProcSymbols::file_at(self, tgid, addr)
    }

    fn file_of_mapping(&self, tgid: u32, addr: u64, len: u64) -> Option<(u64, u64)> {
        use std::os::unix::fs::MetadataExt;
        let end = addr.checked_add(len.div_ceil(4096) * 4096)?;
        let m = std::fs::metadata(format!("/proc/{tgid}/map_files/{addr:x}-{end:x}")).ok()?;
        Some((m.dev(), m.ino()))
    }
}

/// Most caller answers kept (past it they are forgotten and looked up again).
const MAX_CACHED: usize = 1 << 16;

/// The reader's [`LaunchOrigin`].
pub struct Origins<M: Mappings> {
    table: SeenAtDriver,
    maps: Arc<M>,
    /// (tgid, caller) → whether a runtime seen at the driver holds it.
    cache: FastMap<(u32, u64), bool>,
    /// Runtime code each process mapped, learned from its mapping records as they came (the
    /// process surely ran then: a launch just before its end is still told apart).
    ranges: FastMap<u32, Vec<(u64, u64)>>,
}

impl<M: Mappings> Origins<M> {
    pub fn new(table: SeenAtDriver, maps: Arc<M>) -> Self {
        Origins {
            table,
            maps,
            cache: FastMap::default(),
            ranges: FastMap::default(),
        }
    }
}

impl<M: Mappings> LaunchOrigin for Origins<M> {
    fn runtime_api(&mut self, tgid: u32, api: u32, caller: u64) -> Option<u32> {
        let t = self.table.0.read().ok()?;
        let rt = *t.via.get(&api)?;
        if self
            .ranges
            .get(&tgid)
            .is_some_and(|v| v.iter().any(|&(a, b)| a <= caller && caller < b))
        {
            return Some(rt);
        }
        if let Some(&inside) = self.cache.get(&(tgid, caller)) {
            return inside.then_some(rt);
        }
        // A process gone before its maps were read: not a runtime's, and not remembered (a
        // later look may still find it). Code in no file (made at run time) is remembered as
        // not a runtime's: it is not looked up at every launch.
        let file = self.maps.file_at(tgid, caller).ok()?;
        let inside = file.is_some_and(|f| t.runtimes.contains(&f));
        if self.cache.len() >= MAX_CACHED {
            self.cache.clear();
        }
        self.cache.insert((tgid, caller), inside);
        inside.then_some(rt)
    }

    fn forget(&mut self, tgid: u32) {
        self.cache.retain(|(t, _), _| *t != tgid);
        self.ranges.remove(&tgid);
    }

    fn mapped(&mut self, tgid: u32, addr: u64, len: u64) {
        let Ok(t) = self.table.0.read() else {
            return;
        };
        if t.via.is_empty() || self.ranges.len() >= MAX_CACHED {
            return;
        }
        if let Some(f) = self.maps.file_of_mapping(tgid, addr, len)
            && t.runtimes.contains(&f)
        {
            let v = self.ranges.entry(tgid).or_default();
            if v.len() < 16 {
                v.push((addr, addr.saturating_add(len)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Process 7: the runtime (1, 10) at 0x1000..0x2000, the program (1, 20) at 0x5000..0x6000.
    #[derive(Default)]
    struct Fake {
        lookups: Mutex<u32>,
    }
    impl Mappings for Fake {
        fn file_at(&self, tgid: u32, addr: u64) -> Result<Option<(u64, u64)>, ()> {
            *self.lookups.lock().unwrap() += 1;
            match (tgid, addr) {
                (7, 0x1000..0x2000) => Ok(Some((1, 10))),
                (7, 0x5000..0x6000) => Ok(Some((1, 20))),
                (7, _) => Ok(None),
                _ => Err(()),
            }
        }
        fn file_of_mapping(&self, tgid: u32, addr: u64, _len: u64) -> Option<(u64, u64)> {
            (tgid == 9 && addr == 0x7000).then_some((1, 10))
        }
    }

    fn origins() -> (Origins<Fake>, Arc<Fake>) {
        let table = SeenAtDriver::default();
        table.set([(3, 9)], &[(1, 10)]);
        let maps = Arc::new(Fake::default());
        (Origins::new(table, maps.clone()), maps)
    }

    #[test]
    fn the_runtimes_call_is_its_launch_and_the_programs_own_stays_a_driver_launch() {
        let (mut o, maps) = origins();
        assert_eq!(o.runtime_api(7, 3, 0x1234), Some(9));
        assert_eq!(o.runtime_api(7, 3, 0x5678), None);
        // another driver API (not a launch a runtime makes): never relabelled
        assert_eq!(o.runtime_api(7, 4, 0x1234), None);
        // answers are kept per caller
        assert_eq!(o.runtime_api(7, 3, 0x1234), Some(9));
        assert_eq!(o.runtime_api(7, 3, 0x5678), None);
        assert_eq!(*maps.lookups.lock().unwrap(), 2);
    }

    #[test]
    fn a_runtime_mapped_while_the_process_ran_is_known_after_its_end() {
        let (mut o, maps) = origins();
        // Process 9 is gone by the time of its launches (no maps to read), but its mapping
        // record said where the runtime was.
        o.mapped(9, 0x7000, 0x1000);
        o.mapped(9, 0x9000, 0x1000); // another library: not kept
        assert_eq!(o.runtime_api(9, 3, 0x7abc), Some(9));
        assert_eq!(o.runtime_api(9, 3, 0x9abc), None);
        assert_eq!(*maps.lookups.lock().unwrap(), 1);
        o.forget(9);
        assert_eq!(o.runtime_api(9, 3, 0x7abc), None);
    }

    #[test]
    fn code_in_no_file_is_looked_up_once() {
        let (mut o, maps) = origins();
        assert_eq!(o.runtime_api(7, 3, 0x9000), None);
        assert_eq!(o.runtime_api(7, 3, 0x9000), None);
        assert_eq!(*maps.lookups.lock().unwrap(), 1);
    }

    #[test]
    fn an_unknown_address_is_not_remembered_and_an_ended_process_is_forgotten() {
        let (mut o, maps) = origins();
        assert_eq!(o.runtime_api(8, 3, 0x1234), None);
        assert_eq!(o.runtime_api(8, 3, 0x1234), None);
        assert_eq!(*maps.lookups.lock().unwrap(), 2);
        assert_eq!(o.runtime_api(7, 3, 0x1234), Some(9));
        o.forget(7);
        assert_eq!(o.runtime_api(7, 3, 0x1234), Some(9));
        assert_eq!(*maps.lookups.lock().unwrap(), 4);
    }

    #[test]
    fn nothing_is_relabelled_before_a_runtime_is_attached_with_its_launches_at_the_driver() {
        let mut o = Origins::new(SeenAtDriver::default(), Arc::new(Fake::default()));
        assert_eq!(o.runtime_api(7, 3, 0x1234), None);
    }
}
