//! The daemon's open-file limit. Every attached library holds a few dozen descriptors (one
//! `uprobe_multi` link per program, library and direction; one per probe site on kernels before
//! 6.6), on top of the maps, programs and ring buffer. A node whose jobs bring their own copies
//! of the CUDA runtime (virtual environments, containers) can exceed the 1,024 that a shell's
//! `sudo` session usually gets as its soft limit, and probes then fail to attach with "Too many
//! open files". The soft limit is raised to the hard limit at start, as any long-running
//! process that scales with its workload does; the service unit sets both (`LimitNOFILE=`).

use std::io;

/// The open-file limit before and after [`raise_open_files`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenFiles {
    pub before: u64,
    pub after: u64,
    pub hard: u64,
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit. Never lowers it; an error leaves the
/// limit as it was (the daemon runs on with it and says so in its log).
pub fn raise_open_files() -> io::Result<OpenFiles> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one plain struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let before = lim.rlim_cur;
    if lim.rlim_cur < lim.rlim_max {
        let want = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: setrlimit reads one plain struct we own.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } != 0 {
            return Err(io::Error::last_os_error());
        }
        lim = want;
    }
    Ok(OpenFiles {
        before,
        after: lim.rlim_cur,
        hard: lim.rlim_max,
    })
}

/// What to do about an I/O error on a file the daemon must read: running out of descriptors
/// has a different remedy from a missing or unreadable file.
pub fn io_hint(e: &io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EMFILE) => {
            "the daemon has run out of file descriptors: raise its open-file limit (`ulimit -n` \
             before starting it, or LimitNOFILE= in the service unit)"
        }
        Some(libc::ENFILE) => {
            "the system has run out of file descriptors (fs.file-max): raise it or close \
             descriptors elsewhere"
        }
        _ => "check that the file exists and that the daemon may read it",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In this process: the soft limit is set one below the hard limit (room enough for the
    /// tests running beside this one), then raised. No fork: a forked child holds copies of
    /// other tests' sockets (the one CI run with a forked child here failed service::ctl's
    /// rebind test: its socket still in use).
    /// The real low-limit case (a soft limit of 48 under the daemon) is tests/errors.rs's.
    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one_and_never_lowered() {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes one plain struct we own.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
        let hard = lim.rlim_max;
        let low = libc::rlimit {
            rlim_cur: hard - 1,
            rlim_max: hard,
        };
        // SAFETY: setrlimit reads one plain struct we own.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &low) }, 0);
        let first = raise_open_files().unwrap();
        assert_eq!(
            first,
            OpenFiles {
                before: hard - 1,
                after: hard,
                hard
            }
        );
        let again = raise_open_files().unwrap();
        assert_eq!(
            again,
            OpenFiles {
                before: hard,
                after: hard,
                hard
            }
        );
    }

    #[test]
    fn running_out_of_descriptors_is_told_apart_from_a_missing_file() {
        assert!(io_hint(&io::Error::from_raw_os_error(libc::EMFILE)).contains("LimitNOFILE="));
        assert!(io_hint(&io::Error::from_raw_os_error(libc::ENFILE)).contains("fs.file-max"));
        assert!(
            io_hint(&io::Error::from_raw_os_error(libc::ENOENT)).contains("check that the file")
        );
    }
}
