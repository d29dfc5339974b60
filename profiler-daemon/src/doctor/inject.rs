//! `gpuprofd doctor`'s check of the GPU-time library (`libgpuprofd_inject.so`): is it installed
//! where gpuprofd looks for it, can the kernel tell it that gpuprofd listens, and which
//! processes on the node have it loaded (docs/GPU-TIME.md).

use crate::discovery;
use crate::sys::inject_lib::{Located, OVERRIDE_VAR};
use profiler_common::gpu::INJECT_SONAME;

/// The check's outcome: `ok`, its detail, and what to do where it is not ok.
pub(super) struct Finding {
    pub ok: bool,
    pub detail: String,
    pub fix: Option<String>,
}

/// The processes (pid, command name) that map a file named [`INJECT_SONAME`], by pid.
pub(super) fn processes_with_it() -> Vec<(u32, String)> {
    let mut v: Vec<(u32, String)> = discovery::all_tgids()
        .into_iter()
        .filter(|&pid| {
            std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| {
                discovery::parse_maps(&m)
                    .iter()
                    .any(|x| x.path.rsplit('/').next() == Some(INJECT_SONAME))
            })
        })
        .map(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            (pid, comm.trim().to_owned())
        })
        .collect();
    v.sort();
    v
}

/// What doctor says of the library at `located`, with `multi` (whether `uprobe_multi` links
/// work: the semaphore rides on them) and `loaded` (the processes that have it).
pub(super) fn finding(located: &Located, multi: bool, loaded: &[(u32, String)]) -> Finding {
    let procs = match loaded.len() {
        0 => "no process has it loaded".to_owned(),
        n => {
            let shown: Vec<String> = loaded
                .iter()
                .take(8)
                .map(|(p, c)| format!("{p} ({c})"))
                .collect();
            let more = if n > 8 {
                format!(" and {} more", n - 8)
            } else {
                String::new()
            };
            format!("loaded by {n} process(es): {}{more}", shown.join(", "))
        }
    };
    match located {
        Located::Found(p) if multi => Finding {
            ok: true,
            detail: format!(
                "{}: commands run by gpuprofd get exact GPU times; {procs}",
                p.display()
            ),
            fix: None,
        },
        Located::Found(p) => Finding {
            ok: false,
            detail: format!(
                "{}, but without uprobe_multi links the kernel cannot tell it that gpuprofd \
                 listens: no exact GPU times; {procs}",
                p.display()
            ),
            fix: Some("boot Linux 6.6 or later".into()),
        },
        Located::OverrideMissing(p) => Finding {
            ok: false,
            detail: format!("{OVERRIDE_VAR} names {}, which does not exist", p.display()),
            fix: Some(format!(
                "point {OVERRIDE_VAR} at libgpuprofd_inject.so, or unset it to use the one \
                 installed beside gpuprofd"
            )),
        },
        Located::NotInstalled(tried) => Finding {
            ok: false,
            detail: format!(
                "{INJECT_SONAME} not found ({}): no exact GPU times; {procs}",
                tried
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            fix: Some(
                "install the kit's lib/libgpuprofd_inject.so next to bin/ (the Debian package \
                 puts it in /usr/lib/gpuprofd/)"
                    .into(),
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn found_with_and_without_uprobe_multi_and_who_has_it() {
        let lib = PathBuf::from("/usr/lib/gpuprofd/libgpuprofd_inject.so");
        let f = finding(&Located::Found(lib.clone()), true, &[]);
        assert!(f.ok);
        assert_eq!(
            f.detail,
            "/usr/lib/gpuprofd/libgpuprofd_inject.so: commands run by gpuprofd get exact GPU \
             times; no process has it loaded"
        );
        let many: Vec<(u32, String)> = (1..=10).map(|p| (p, "python3".to_owned())).collect();
        let f = finding(&Located::Found(lib), false, &many);
        assert!(!f.ok);
        assert_eq!(f.fix.as_deref(), Some("boot Linux 6.6 or later"));
        assert!(
            f.detail.ends_with(
                "loaded by 10 process(es): 1 (python3), 2 (python3), 3 (python3), 4 (python3), \
                 5 (python3), 6 (python3), 7 (python3), 8 (python3) and 2 more"
            ),
            "{}",
            f.detail
        );
        let f = finding(
            &Located::NotInstalled(vec![PathBuf::from("/a/x.so")]),
            true,
            &[],
        );
        assert!(!f.ok);
        assert_eq!(
            f.detail,
            "libgpuprofd_inject.so not found (/a/x.so): no exact GPU times; no process has it \
             loaded"
        );
    }
}
