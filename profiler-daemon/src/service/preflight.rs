//! What the service needs of the node before it starts: the kernel's BTF, the uprobe PMU and
//! the privilege to load BPF programs. One that is missing is said in the log, by name, with
//! what to do, and the service exits with a status of its own after a delay (`serve
//! --fail-delay`), so that a Kubernetes pod on a node without BTF says why in its log and is not
//! restarted faster than that, whatever the kubelet's back-off.
//!
//! The same three are among `gpuprofd doctor`'s required checks; doctor also proves the probes
//! fire (its round trip), which a service start does for itself a moment later.

use crate::sys::kernel::{CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN, has_capability};
use std::path::Path;
use std::time::Duration;

/// Exit status of a service that stopped for want of a kernel feature: a restart cannot help.
pub const EXIT_UNMET: u8 = 14;
/// Exit status of a service that stopped for want of privilege (as a refused attach).
pub const EXIT_PRIVILEGE: u8 = 6;

/// One requirement the node does not meet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unmet {
    /// `gpuprofd doctor`'s name for the check.
    pub check: &'static str,
    pub missing: String,
    pub fix: &'static str,
}

/// What the node lacks, under `root` (`/` but in tests), and whether this process may load BPF.
pub fn unmet(root: &Path, may_load_bpf: bool) -> Vec<Unmet> {
    let mut out = Vec::new();
    if !root.join("sys/kernel/btf/vmlinux").exists() {
        out.push(Unmet {
            check: "btf",
            missing: "/sys/kernel/btf/vmlinux (the kernel's BTF type information)".into(),
            fix: "boot a kernel built with CONFIG_DEBUG_INFO_BTF=y (the distribution kernels of \
                  Debian 11, Ubuntu 20.10 and RHEL 8.2 and later are); in a container, the \
                  node's /sys must be visible",
        });
    }
    if !root
        .join("sys/bus/event_source/devices/uprobe/type")
        .exists()
    {
        out.push(Unmet {
            check: "uprobe_pmu",
            missing: "the uprobe PMU (/sys/bus/event_source/devices/uprobe)".into(),
            fix: "boot a kernel built with CONFIG_UPROBE_EVENTS=y; a sandbox such as gVisor has \
                  none",
        });
    }
    if !may_load_bpf {
        out.push(Unmet {
            check: "privileges",
            missing: "CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN)".into(),
            fix: "run as root, or grant those capabilities (deploy/kubernetes/ and the systemd \
                  unit list the set)",
        });
    }
    out
}

/// Whether this process holds what loading BPF programs and attaching probes asks for.
pub fn may_load_bpf() -> bool {
    has_capability(CAP_SYS_ADMIN) || (has_capability(CAP_BPF) && has_capability(CAP_PERFMON))
}

/// The exit status for `unmet` (non-empty): privilege alone is 6, as a refused attach.
pub fn exit_status(unmet: &[Unmet]) -> u8 {
    if unmet.iter().all(|u| u.check == "privileges") {
        EXIT_PRIVILEGE
    } else {
        EXIT_UNMET
    }
}

/// Waits `delay` before a failed service exits, but no longer than until SIGTERM or SIGINT (a
/// pod being deleted, an admin's stop), so that a supervisor that restarts it at once (a
/// kubelet early in its back-off) does not restart it faster than that. Call it before any
/// other thread runs: the two signals are blocked and taken with `sigtimedwait`.
pub fn wait_before_exit(delay: Duration) {
    if delay.is_zero() {
        return;
    }
    // SAFETY: plain signal-set calls on a local set; the mask changes this thread's only.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        let ts = libc::timespec {
            tv_sec: delay.as_secs() as libc::time_t,
            tv_nsec: delay.subsec_nanos() as libc::c_long,
        };
        let end = std::time::Instant::now() + delay;
        loop {
            let rc = libc::sigtimedwait(&set, std::ptr::null_mut(), &ts);
            // A signal came, or the time is up; EINTR (another signal) waits on.
            if rc > 0 || std::time::Instant::now() >= end {
                break;
            }
            if rc < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root_with(files: &[&str]) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "gpuprofd-preflight-{}-{}",
            std::process::id(),
            files.len()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        for f in files {
            let p = dir.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "").unwrap();
        }
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_node_with_everything_lacks_nothing() {
        let r = root_with(&[
            "sys/kernel/btf/vmlinux",
            "sys/bus/event_source/devices/uprobe/type",
        ]);
        assert_eq!(unmet(&r, true), []);
        std::fs::remove_dir_all(r).unwrap();
    }

    #[test]
    fn each_missing_piece_is_named_with_its_status() {
        let r = root_with(&["sys/bus/event_source/devices/uprobe/type"]);
        let u = unmet(&r, true);
        assert_eq!(
            u.iter().map(|u| u.check).collect::<Vec<_>>(),
            ["btf"],
            "{u:?}"
        );
        assert_eq!(
            u[0].missing,
            "/sys/kernel/btf/vmlinux (the kernel's BTF type information)"
        );
        assert_eq!(exit_status(&u), EXIT_UNMET);
        let u = unmet(&r, false);
        assert_eq!(
            u.iter().map(|u| u.check).collect::<Vec<_>>(),
            ["btf", "privileges"]
        );
        assert_eq!(exit_status(&u), EXIT_UNMET);
        std::fs::remove_dir_all(r).unwrap();

        let r = root_with(&[
            "sys/kernel/btf/vmlinux",
            "sys/bus/event_source/devices/uprobe/type",
            "x",
        ]);
        let u = unmet(&r, false);
        assert_eq!(
            u.iter().map(|u| u.check).collect::<Vec<_>>(),
            ["privileges"]
        );
        assert_eq!(exit_status(&u), EXIT_PRIVILEGE);
        std::fs::remove_dir_all(r).unwrap();
    }

    #[test]
    fn the_wait_lasts_its_delay() {
        let t = std::time::Instant::now();
        wait_before_exit(Duration::from_millis(300));
        let e = t.elapsed();
        assert!(
            e >= Duration::from_millis(300) && e < Duration::from_secs(5),
            "{e:?}"
        );
        let t = std::time::Instant::now();
        wait_before_exit(Duration::ZERO);
        assert!(t.elapsed() < Duration::from_millis(50));
    }
}
