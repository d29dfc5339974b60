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

    /// Runs in a forked child, so the test binary's own limit is not touched. The child makes
    /// only system calls (no allocation, no locks another thread may hold) and reports through
    /// its exit status.
    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one_and_never_lowered() {
        // SAFETY: the child calls only getrlimit/setrlimit and _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
        if pid == 0 {
            // SAFETY: getrlimit/setrlimit on plain structs; _exit ends the child at once.
            unsafe {
                let mut lim = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
                let hard = lim.rlim_max;
                let low = libc::rlimit {
                    rlim_cur: 64.min(hard),
                    rlim_max: hard,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &low) != 0 {
                    libc::_exit(10);
                }
                let code = match (raise_open_files(), raise_open_files()) {
                    (Ok(first), Ok(again)) => {
                        if first.before != low.rlim_cur {
                            11
                        } else if first.after != hard || first.hard != hard {
                            12
                        } else if again.before != hard || again.after != hard {
                            13
                        } else {
                            0
                        }
                    }
                    _ => 14,
                };
                libc::_exit(code);
            }
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "child status {status:#x}");
        // 10: lowering failed; 11: `before` wrong; 12: not raised to the hard limit;
        // 13: a second call changed it; 14: an error.
        assert_eq!(libc::WEXITSTATUS(status), 0);
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
