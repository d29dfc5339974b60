//! Who holds a TCP port: for the error a daemon prints when its metrics address is taken
//! ("held by process 812, dcgm-exporter"), as far as the kernel tells this process.
//!
//! Written here rather than taken from the `procfs` crate: it is two short parses of files
//! whose format has not changed since Linux 2.6 (`/proc/net/tcp{,6}` for the listening
//! socket's inode, `/proc/PID/fd` links for its owner), and the daemon needs nothing else
//! from procfs that the crate would add.

use std::net::SocketAddr;

/// TCP_LISTEN in `/proc/net/tcp`'s `st` column.
const LISTEN: &str = "0A";

/// The inodes of sockets listening on `port` (any local address: a wildcard listener also
/// takes the port on every address) in one `/proc/net/tcp` or `tcp6` text.
fn listening_inodes(table: &str, port: u16) -> Vec<u64> {
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // sl local_address rem_address st tx:rx tr:tm retrnsmt uid timeout inode
            let local = f.get(1)?;
            let (_, p) = local.rsplit_once(':')?;
            (u16::from_str_radix(p, 16).ok()? == port && *f.get(3)? == LISTEN)
                .then(|| f.get(9)?.parse().ok())
                .flatten()
        })
        .collect()
}

/// The process (pid, command name) that holds a socket listening on `addr`'s port, where
/// `/proc` shows it to this process (another user's descriptors need CAP_SYS_PTRACE or root).
pub fn listener_owner(addr: SocketAddr) -> Option<(u32, String)> {
    let mut inodes = Vec::new();
    for t in ["/proc/net/tcp", "/proc/net/tcp6"] {
        if let Ok(text) = std::fs::read_to_string(t) {
            inodes.extend(listening_inodes(&text, addr.port()));
        }
    }
    if inodes.is_empty() {
        return None;
    }
    let wanted: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(e.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(link) = std::fs::read_link(fd.path()) else {
                continue;
            };
            if wanted.iter().any(|w| link.as_os_str() == w.as_str()) {
                let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
                return Some((pid, comm.trim().to_owned()));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listening_socket_of_a_port_from_proc_net_tcp() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   \
            0: 0100007F:4BD8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 91234 1 0000000000000000 100 0 0 10 0\n   \
            1: 0100007F:4BD8 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 91299 1 0000000000000000 20 4 30 10 -1\n   \
            2: 00000000:24E0 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 777 1 0000000000000000 100 0 0 10 0\n";
        // 0x4BD8 = 19416: the listener only, not the connection on the same port.
        assert_eq!(listening_inodes(table, 19416), vec![91234]);
        // 0x24E0 = 9440, on the wildcard address.
        assert_eq!(listening_inodes(table, 9440), vec![777]);
        assert!(listening_inodes(table, 80).is_empty());
    }

    #[test]
    fn a_listener_of_this_process_is_found() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (pid, _) = listener_owner(addr).expect("this process's listener");
        assert_eq!(pid, std::process::id());
    }
}
