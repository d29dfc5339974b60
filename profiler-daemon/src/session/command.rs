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
use crate::sys::inject_lib::{CUDA_INJECTION_VAR, Located, OVERRIDE_VAR};
use aya::Ebpf;
use std::fs::File;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
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
        inject: Option<&Located>,
    ) -> Result<Wrapped, SessionError> {
        let me = std::process::id();
        let (inject, note) = injection(inject, std::env::var_os(CUDA_INJECTION_VAR));
        if let Some(n) = note {
            super::console::say(format_args!("{n}"));
        }
        if tree {
            capture::seed_tree(ebpf, me, true)?;
        }
        let child = spawn(argv, stdin, account, inject.as_deref());
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

/// The library to name in the command's `CUDA_INJECTION64_PATH` (`None`: leave the variable
/// as it is), and a line for the user when the command gets no exact GPU times although they
/// were asked for. `current` is the variable's value in gpuprofd's own environment, which the
/// command inherits.
fn injection(
    asked: Option<&Located>,
    current: Option<std::ffi::OsString>,
) -> (Option<PathBuf>, Option<String>) {
    let none =
        "the command gets no exact GPU times (derived figures only; --no-inject silences this)";
    match (asked, current) {
        (None, _) => (None, None),
        (Some(Located::Found(p)), Some(c)) if Path::new(&c) == p => (None, None),
        (Some(Located::Found(_)), Some(c)) => (
            None,
            Some(format!(
                "{CUDA_INJECTION_VAR} is already set to {} (another profiler's library?): left \
                 as it is, so {none}",
                c.to_string_lossy()
            )),
        ),
        (Some(Located::Found(p)), None) => (Some(p.clone()), None),
        (Some(Located::OverrideMissing(p)), _) => (
            None,
            Some(format!(
                "{OVERRIDE_VAR} names {}, which does not exist: {none}",
                p.display()
            )),
        ),
        (Some(Located::NotInstalled(tried)), _) => (
            None,
            Some(format!(
                "{} is not installed beside gpuprofd (looked for {}): {none}",
                profiler_common::gpu::INJECT_SONAME,
                tried
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        ),
    }
}

fn spawn(
    argv: &[String],
    stdin: Option<&Path>,
    account: Option<&Account>,
    inject: Option<&Path>,
) -> Result<tokio::process::Child, SessionError> {
    let prog = argv.first().map(String::as_str).unwrap_or_default();
    let mut cmd = tokio::process::Command::new(prog);
    cmd.args(&argv[1..]);
    if let Some(lib) = inject {
        // The CUDA driver loads it at cuInit, in every process of the command that uses CUDA
        // (children inherit the variable).
        cmd.env(CUDA_INJECTION_VAR, lib);
    }
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

    #[test]
    fn the_library_is_named_only_where_nothing_else_is() {
        let lib = PathBuf::from("/opt/gpuprofd/lib/libgpuprofd_inject.so");
        let found = Located::Found(lib.clone());
        assert_eq!(injection(None, None), (None, None));
        assert_eq!(injection(Some(&found), None), (Some(lib.clone()), None));
        // Already ours (a gpuprofd inside a gpuprofd, or the admin's node-wide setting).
        assert_eq!(
            injection(Some(&found), Some(lib.clone().into())),
            (None, None)
        );
        let (set, note) = injection(
            Some(&found),
            Some("/opt/nsys/libToolsInjection64.so".into()),
        );
        assert_eq!(set, None);
        assert_eq!(
            note.unwrap(),
            "CUDA_INJECTION64_PATH is already set to /opt/nsys/libToolsInjection64.so (another \
             profiler's library?): left as it is, so the command gets no exact GPU times \
             (derived figures only; --no-inject silences this)"
        );
        let (set, note) = injection(
            Some(&Located::NotInstalled(vec![PathBuf::from(
                "/usr/bin/libgpuprofd_inject.so",
            )])),
            None,
        );
        assert_eq!(set, None);
        assert_eq!(
            note.unwrap(),
            "libgpuprofd_inject.so is not installed beside gpuprofd (looked for \
             /usr/bin/libgpuprofd_inject.so): the command gets no exact GPU times (derived \
             figures only; --no-inject silences this)"
        );
        let (set, note) = injection(
            Some(&Located::OverrideMissing(PathBuf::from("/nope.so"))),
            None,
        );
        assert_eq!(set, None);
        assert!(
            note.unwrap()
                .starts_with("GPUPROFD_INJECT_LIB names /nope.so, which does not exist: ")
        );
    }
}
