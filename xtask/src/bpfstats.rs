//! The kernel's own account of BPF program time (`BPF_ENABLE_STATS`): per loaded program, how
//! many times it ran and the nanoseconds spent inside it. Unlike a timed loop, this leaves out
//! the uprobe's trap and everything else the calling thread pays, so it isolates what the
//! probes' own code costs, and it is not moved by what else the machine is doing between runs.

use anyhow::{Result, bail};
use std::collections::HashMap;

const BPF_PROG_GET_NEXT_ID: i64 = 11;
const BPF_PROG_GET_FD_BY_ID: i64 = 13;
const BPF_OBJ_GET_INFO_BY_FD: i64 = 15;
const BPF_ENABLE_STATS: i64 = 32;
/// `struct bpf_prog_info` (uapi): `name[16]` at 64, `run_time_ns` at 192, `run_cnt` at 200.
const INFO_LEN: usize = 232;

fn bpf(cmd: i64, attr: &mut [u8]) -> i64 {
    // SAFETY: `attr` is a live buffer of the length passed; the kernel reads/writes within it.
    unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len() as u32) }
}

/// Statistics on while this lives (the kernel turns them off when the last such fd closes).
pub struct Enabled(i32);

impl Enabled {
    pub fn new() -> Result<Enabled> {
        let mut attr = [0u8; 4]; // type = BPF_STATS_RUN_TIME (0)
        let fd = bpf(BPF_ENABLE_STATS, &mut attr);
        if fd < 0 {
            bail!(
                "BPF_ENABLE_STATS failed: {}",
                std::io::Error::last_os_error()
            );
        }
        Ok(Enabled(fd as i32))
    }
}

impl Drop for Enabled {
    fn drop(&mut self) {
        // SAFETY: closes the descriptor this value owns.
        unsafe { libc::close(self.0) };
    }
}

/// (runs, nanoseconds) of every loaded program, summed by program name.
pub fn snapshot() -> HashMap<String, (u64, u64)> {
    let mut out: HashMap<String, (u64, u64)> = HashMap::new();
    let mut id: u32 = 0;
    loop {
        let mut attr = [0u8; 12];
        attr[0..4].copy_from_slice(&id.to_ne_bytes());
        if bpf(BPF_PROG_GET_NEXT_ID, &mut attr) < 0 {
            break;
        }
        id = u32::from_ne_bytes(attr[4..8].try_into().unwrap());
        let mut attr = [0u8; 12];
        attr[0..4].copy_from_slice(&id.to_ne_bytes());
        let fd = bpf(BPF_PROG_GET_FD_BY_ID, &mut attr);
        if fd < 0 {
            continue; // gone since
        }
        let mut info = [0u8; INFO_LEN];
        let mut attr = [0u8; 16];
        attr[0..4].copy_from_slice(&(fd as u32).to_ne_bytes());
        attr[4..8].copy_from_slice(&(INFO_LEN as u32).to_ne_bytes());
        attr[8..16].copy_from_slice(&(info.as_mut_ptr() as u64).to_ne_bytes());
        let ok = bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr) == 0;
        // SAFETY: closes the descriptor just opened.
        unsafe { libc::close(fd as i32) };
        if !ok {
            continue;
        }
        let name_bytes = &info[64..80];
        let end = name_bytes.iter().position(|&b| b == 0).unwrap_or(16);
        let name = String::from_utf8_lossy(&name_bytes[..end]).into_owned();
        let ns = u64::from_ne_bytes(info[192..200].try_into().unwrap());
        let cnt = u64::from_ne_bytes(info[200..208].try_into().unwrap());
        let e = out.entry(name).or_default();
        e.0 += cnt;
        e.1 += ns;
    }
    out
}

/// What ran between two snapshots: (runs, nanoseconds) per program name that ran.
pub fn delta(
    before: &HashMap<String, (u64, u64)>,
    after: &HashMap<String, (u64, u64)>,
) -> Vec<(String, u64, u64)> {
    let mut v: Vec<(String, u64, u64)> = after
        .iter()
        .filter_map(|(name, &(c, ns))| {
            let (c0, ns0) = before.get(name).copied().unwrap_or_default();
            let dc = c.saturating_sub(c0);
            (dc > 0).then(|| (name.clone(), dc, ns.saturating_sub(ns0)))
        })
        .collect();
    v.sort();
    v
}
