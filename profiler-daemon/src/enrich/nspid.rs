//! Thread ids across PID namespaces: CUPTI names a process's threads by `gettid` inside the
//! process's own PID namespace, the probes by the kernel's id. `NSpid` in
//! `/proc/PID/task/TID/status` lists a thread's id in each namespace from gpuprofd's down to
//! the process's own: one entry means the same namespace as gpuprofd's (the ids agree),
//! several give the map (first → last). `model::gpu_join` joins with it.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// CUPTI's thread ids (the process's PID namespace) → the kernel's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Tids {
    /// Not known: nothing is joined.
    #[default]
    Unknown,
    /// The process is in gpuprofd's PID namespace: the ids are the same.
    Same,
    /// Its own namespace: namespace tid → host tid, for the threads read.
    Map(BTreeMap<u32, u32>),
}

impl Tids {
    pub fn host(&self, tid: u32) -> Option<u32> {
        match self {
            Tids::Unknown => None,
            Tids::Same => Some(tid),
            Tids::Map(m) => m.get(&tid).copied(),
        }
    }
}

/// The ids of a `status` text's `NSpid:` line (outermost first); `None` without one.
pub fn parse_nspid(status: &str) -> Option<Vec<u32>> {
    let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    let ids: Option<Vec<u32>> = line.split_whitespace().map(|w| w.parse().ok()).collect();
    ids.filter(|v| !v.is_empty())
}

/// The map from the `NSpid` lists of a process's threads (`task` entries); `Unknown` when a
/// list is missing or the lists disagree on the depth.
pub fn tids_from(lists: &[Vec<u32>]) -> Tids {
    let Some(depth) = lists.first().map(Vec::len) else {
        return Tids::Unknown;
    };
    if lists.iter().any(|l| l.len() != depth) {
        return Tids::Unknown;
    }
    if depth == 1 {
        return Tids::Same;
    }
    Tids::Map(
        lists
            .iter()
            .map(|l| (l[depth - 1], l[0]))
            .collect::<BTreeMap<_, _>>(),
    )
}

/// Reads process `tgid`'s threads from procfs (`Unknown` when it is gone or says nothing).
/// Threads started later are not in a map: their records stay unjoined until it is read again.
pub fn of_process(tgid: u32) -> Tids {
    let Some(top) = std::fs::read_to_string(format!("/proc/{tgid}/status"))
        .ok()
        .as_deref()
        .and_then(parse_nspid)
    else {
        return Tids::Unknown;
    };
    if top.len() == 1 {
        return Tids::Same;
    }
    let Ok(dir) = std::fs::read_dir(format!("/proc/{tgid}/task")) else {
        return Tids::Unknown;
    };
    let lists: Vec<Vec<u32>> = dir
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("status")).ok())
        .filter_map(|s| parse_nspid(&s))
        .collect();
    tids_from(&lists)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nspid_lines() {
        let s = "Name:\tpython\nTgid:\t4242\nPid:\t4250\nNSpid:\t4250\t7\n";
        assert_eq!(parse_nspid(s), Some(vec![4250, 7]));
        assert_eq!(parse_nspid("NSpid:\t31\n"), Some(vec![31]));
        assert_eq!(parse_nspid("Pid:\t31\n"), None);
        assert_eq!(parse_nspid("NSpid:\tx\n"), None);
    }

    #[test]
    fn maps_from_the_threads_lists() {
        assert_eq!(tids_from(&[vec![31], vec![32]]), Tids::Same);
        assert_eq!(
            tids_from(&[vec![4242, 900, 1], vec![4250, 907, 8]]),
            Tids::Map(BTreeMap::from([(1, 4242), (8, 4250)]))
        );
        assert_eq!(tids_from(&[vec![4242, 1], vec![4250]]), Tids::Unknown);
        assert_eq!(tids_from(&[]), Tids::Unknown);
    }

    #[test]
    fn this_process_is_in_its_own_namespace_as_seen_from_itself() {
        // The test's own /proc: a process always shares the namespace of the /proc it reads
        // (as mounted for its namespace), so its threads' ids agree.
        assert_eq!(of_process(std::process::id()), Tids::Same);
    }
}
