//! The wrapped command (`gpuprofd [options] -- COMMAND`), which must behave as under any
//! wrapper: started as the user who ran `sudo` (or `--user`), inside the traced tree from its
//! first instruction, sent the SIGINT and SIGTERM gpuprofd gets, and its exit status handed back
//! as gpuprofd's own (128 + the signal number when a signal killed it), so that a batch script
//! (`srun gpuprofd -o … -- python train.py`) sees the job's status.
//!
//! The tree: the daemon selects its own process in the kernel's tree filter for the moment of
//! the spawn; the fork watcher (`proc_fork`) then selects the child as the kernel makes it, and
//! each process the child starts in turn. The daemon deselects itself right after.

use super::SessionError;
use crate::capture;
use crate::sys::account::Account;
use aya::Ebpf;
use std::fs::File;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::Path;
use std::process::{ExitStatus, Stdio};

/// The command while it runs, and its status once it ended.
pub(super) struct Wrapped {
    child: tokio::process::Child,
    pid: u32,
    pub status: Option<ExitStatus>,
}

/// gpuprofd's exit status for the command's: its own exit code, or 128 + the signal number
/// that killed it (what shells report).
pub fn exit_code(st: ExitStatus) -> u8 {
    match (st.code(), st.signal()) {
        (Some(c), _) => c as u8,
        (None, Some(s)) => (128 + s) as u8,
        (None, None) => 1,
    }
}

/// How a command ended, in words: `exit status 3`, `killed by signal 9 (SIGKILL)`.
pub fn describe(st: ExitStatus) -> String {
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(s)) => format!("killed by signal {s} ({})", signal_name(s)),
        (None, None) => st.to_string(),
    }
}

fn signal_name(s: i32) -> &'static str {
    match s {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGABRT => "SIGABRT",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        libc::SIGBUS => "SIGBUS",
        _ => "?",
    }
}

impl Wrapped {
    /// Starts `argv` as `account` (`None`: as gpuprofd runs); in the tree mode (`tree`), selects
    /// it in the kernel before it runs.
    pub fn spawn(
        ebpf: &mut Ebpf,
        tree: bool,
        argv: &[String],
        stdin: Option<&Path>,
        account: Option<&Account>,
    ) -> Result<Wrapped, SessionError> {
        let me = std::process::id();
        if tree {
            capture::seed_tree(ebpf, me, true)?;
        }
        let child = spawn(argv, stdin, account);
        if tree {
            capture::seed_tree(ebpf, me, false)?;
        }
        let child = child?;
        let pid = child.id().unwrap_or(0);
        Ok(Wrapped {
            child,
            pid,
            status: None,
        })
    }

    /// Waits for the command's end and keeps its status.
    pub async fn wait(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.wait().await.ok();
        }
        self.status
    }

    /// gpuprofd got `sig` (SIGINT or SIGTERM): passes it on while the command runs. Whether the
    /// command runs (the capture then waits for its end rather than stopping now).
    pub fn forward(&self, sig: libc::c_int) -> bool {
        if self.status.is_some() || self.pid == 0 {
            return false;
        }
        let name = signal_name(sig);
        if sig == libc::SIGINT && terminal_sends_it_too(self.pid) {
            // Ctrl-C at the terminal goes to its whole foreground process group, the command
            // included: a second SIGINT from us would interrupt its own clean-up.
            super::console::say(format_args!(
                "{name}: the command (pid {}) got it from the terminal too; waiting for it to end",
                self.pid
            ));
            return true;
        }
        // SAFETY: plain kill(2) on our own child, not yet reaped (its pid is still ours).
        let rc = unsafe { libc::kill(self.pid as libc::pid_t, sig) };
        if rc == 0 {
            super::console::say(format_args!(
                "{name}: passed on to the command (pid {}); waiting for it to end",
                self.pid
            ));
        }
        true
    }
}

/// Whether a SIGINT we got came to the command as well: we are the terminal's foreground
/// process group, and the command is still in it.
fn terminal_sends_it_too(pid: u32) -> bool {
    // SAFETY: plain calls on our own descriptor and processes.
    unsafe {
        let fg = libc::tcgetpgrp(libc::STDIN_FILENO);
        fg > 0 && fg == libc::getpgrp() && libc::getpgid(pid as libc::pid_t) == fg
    }
}

fn spawn(
    argv: &[String],
    stdin: Option<&Path>,
    account: Option<&Account>,
) -> Result<tokio::process::Child, SessionError> {
    let prog = argv.first().map(String::as_str).unwrap_or_default();
    let mut cmd = tokio::process::Command::new(prog);
    cmd.args(&argv[1..]);
    if let Some(p) = stdin {
        let f = File::open(p).map_err(|source| SessionError::Spawn {
            cmd: p.display().to_string(),
            source,
        })?;
        cmd.stdin(Stdio::from(f));
        cmd.stdout(Stdio::null());
    }
    if let Some(a) = account {
        as_user(cmd.as_std_mut(), a);
    }
    cmd.spawn().map_err(|source| SessionError::Spawn {
        cmd: match account {
            Some(a) => format!(
                "{prog}\" as user \"{}",
                a.name.clone().unwrap_or_else(|| a.uid.to_string())
            ),
            None => prog.to_owned(),
        },
        source,
    })
}

/// Makes `cmd` run as `a`: its groups, gid and uid (in that order, while the child may still
/// change them), and HOME, USER and LOGNAME as a login would set them.
fn as_user(cmd: &mut std::process::Command, a: &Account) {
    if let Some(home) = &a.home {
        cmd.env("HOME", home);
    }
    if let Some(name) = &a.name {
        cmd.env("USER", name).env("LOGNAME", name);
    }
    let (uid, gid, groups) = (a.uid, a.gid, a.groups.clone());
    // SAFETY: the closure runs in the forked child before exec and makes only
    // async-signal-safe system calls on data prepared beforehand (no allocation, no lock).
    unsafe {
        cmd.pre_exec(move || {
            if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                || libc::setgid(gid) != 0
                || libc::setuid(uid) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_as_a_shell_reports_them() {
        let exited = |c: i32| ExitStatus::from_raw(c << 8);
        let killed = ExitStatus::from_raw;
        assert_eq!(exit_code(exited(0)), 0);
        assert_eq!(exit_code(exited(3)), 3);
        assert_eq!(exit_code(killed(libc::SIGKILL)), 137);
        assert_eq!(exit_code(killed(libc::SIGTERM)), 143);
        assert_eq!(describe(exited(3)), "exit status 3");
        assert_eq!(describe(killed(9)), "killed by signal 9 (SIGKILL)");
    }
}
