//! `gpuprofd doctor`'s check of the GPU-time library (`libgpuprofd_inject.so`): is it installed
//! where gpuprofd looks for it, can the kernel tell it that gpuprofd listens, and which
//! processes on the node have it loaded (docs/GPU-TIME.md).

use crate::discovery;
use crate::sys::inject_lib::{Located, OVERRIDE_VAR};
use profiler_common::gpu::{self, INJECT_SONAME};

/// The check's outcome: `ok`, its detail, and what to do where it is not ok.
pub(super) struct Finding {
    pub ok: bool,
    pub detail: String,
    pub fix: Option<String>,
}

/// A process that maps the library: its pid, command name, and the CUPTI files it maps.
pub(super) struct Loaded {
    pub pid: u32,
    pub comm: String,
    pub cuptis: Vec<String>,
}

/// The processes that map a file named [`INJECT_SONAME`], by pid.
pub(super) fn processes_with_it() -> Vec<Loaded> {
    let mut v: Vec<Loaded> = discovery::all_tgids()
        .into_iter()
        .filter_map(|pid| {
            let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
            let maps = discovery::parse_maps(&maps);
            let file = |p: &str| p.rsplit('/').next().unwrap_or(p).to_owned();
            if !maps.iter().any(|x| file(&x.path) == INJECT_SONAME) {
                return None;
            }
            let mut cuptis: Vec<String> = maps
                .iter()
                .filter(|x| gpu::is_cupti_file(file(&x.path).as_bytes()))
                .map(|x| x.path.clone())
                .collect();
            cuptis.sort();
            cuptis.dedup();
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            Some(Loaded {
                pid,
                comm: comm.trim().to_owned(),
                cuptis,
            })
        })
        .collect();
    v.sort_by_key(|l| l.pid);
    v
}

/// What doctor says of the library at `located`, with `multi` (whether `uprobe_multi` links
/// work: the semaphore rides on them) and `loaded` (the processes that have it).
pub(super) fn finding(located: &Located, multi: bool, loaded: &[Loaded]) -> Finding {
    let f = located_finding(located, multi, loaded);
    // Two CUPTI files in one process: the driver takes one CUPTI client per process, so a
    // profiler started through the other one (torch.profiler, Nsight) records nothing.
    let two: Vec<&Loaded> = loaded.iter().filter(|l| l.cuptis.len() > 1).collect();
    if two.is_empty() {
        return f;
    }
    let shown: Vec<String> = two
        .iter()
        .take(4)
        .map(|l| format!("{} ({}: {})", l.pid, l.comm, l.cuptis.join(", ")))
        .collect();
    Finding {
        ok: false,
        detail: format!(
            "{}; {} of them map two CUPTI libraries, and a profiler in them (torch.profiler, \
             Nsight) records nothing: {}",
            f.detail,
            two.len(),
            shown.join("; ")
        ),
        fix: Some(
            "restart those jobs with this gpuprofd's library (it uses the CUPTI already in the \
             process); if they load CUPTI late from another directory, put that directory's \
             CUPTI first on their library path"
                .into(),
        ),
    }
}

fn located_finding(located: &Located, multi: bool, loaded: &[Loaded]) -> Finding {
    let procs = match loaded.len() {
        0 => "no process has it loaded".to_owned(),
        n => {
            let shown: Vec<String> = loaded
                .iter()
                .take(8)
                .map(|l| format!("{} ({})", l.pid, l.comm))
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
        let loaded = |pid: u32, cuptis: &[&str]| Loaded {
            pid,
            comm: "python3".into(),
            cuptis: cuptis.iter().map(|c| c.to_string()).collect(),
        };
        let many: Vec<Loaded> = (1..=10).map(|p| loaded(p, &[])).collect();
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
        // One process with two CUPTI files: said, with what to do.
        let wheel = "/v/nvidia/cuda_cupti/lib/libcupti.so.12";
        let two = [
            loaded(7, &[wheel]),
            loaded(9, &[wheel, "/usr/local/cuda/lib64/libcupti.so"]),
        ];
        let lib = PathBuf::from("/usr/lib/gpuprofd/libgpuprofd_inject.so");
        let f = finding(&Located::Found(lib), true, &two);
        assert!(!f.ok);
        assert!(
            f.detail.ends_with(
                "loaded by 2 process(es): 7 (python3), 9 (python3); 1 of them map two CUPTI \
                 libraries, and a profiler in them (torch.profiler, Nsight) records nothing: 9 \
                 (python3: /v/nvidia/cuda_cupti/lib/libcupti.so.12, \
                 /usr/local/cuda/lib64/libcupti.so)"
            ),
            "{}",
            f.detail
        );
        assert!(f.fix.unwrap().starts_with("restart those jobs"));
    }
}
