//! Who is on the other end of the control socket: the kernel's word (`SO_PEERCRED`,
//! `SO_PEERGROUPS`), never anything the client says about itself.

use std::ffi::CString;
use std::os::fd::AsRawFd;

/// The connecting process's credentials at `connect()` time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

/// `SO_PEERGROUPS` (Linux 4.13+; asm-generic value, as on x86-64 and arm64).
const SO_PEERGROUPS: libc::c_int = 59;

/// Reads the peer's credentials and groups from a connected Unix socket.
pub fn of(sock: &impl AsRawFd) -> std::io::Result<Peer> {
    let fd = sock.as_raw_fd();
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` is a valid, writable ucred of `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut groups = vec![0u32; 256];
    let mut glen = (groups.len() * 4) as libc::socklen_t;
    // SAFETY: `groups` is a writable buffer of `glen` bytes.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            SO_PEERGROUPS,
            groups.as_mut_ptr().cast(),
            &mut glen,
        )
    };
    if rc == 0 {
        groups.truncate(glen as usize / 4);
    } else {
        // Too many groups or an old kernel: the primary group still counts.
        groups.clear();
    }
    Ok(Peer {
        pid: cred.pid,
        uid: cred.uid,
        gid: cred.gid,
        groups,
    })
}

impl Peer {
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

/// The id of the group called `name` (through NSS: may block on a directory service; called
/// when the configuration is loaded, not per request).
pub fn group_id(name: &str) -> Option<u32> {
    let c = CString::new(name).ok()?;
    // A group with many members needs a large buffer: grow it on ERANGE (up to 16 MiB).
    let mut size = 64 * 1024;
    loop {
        // SAFETY: zeroed is a valid `group` (plain pointers and integers).
        let mut grp: libc::group = unsafe { std::mem::zeroed() };
        let mut buf = vec![0 as libc::c_char; size];
        let mut out: *mut libc::group = std::ptr::null_mut();
        // SAFETY: all pointers are valid for the call; `buf` outlives the use of `grp`.
        let rc = unsafe {
            libc::getgrnam_r(c.as_ptr(), &mut grp, buf.as_mut_ptr(), buf.len(), &mut out)
        };
        if rc == libc::ERANGE && size < 16 << 20 {
            size *= 4;
            continue;
        }
        return (rc == 0 && !out.is_null()).then_some(grp.gr_gid);
    }
}
