//! The injection library's rules: its three hand-over sites (`profiler_common::gpu`), entry
//! probes only. Their arguments are fixed by the wire ABI, so the cookies carry nothing but
//! the API id; every link on them carries the library's semaphore as its reference counter
//! (see `attach::attach_library`).

use super::{B, Prog, Rule};
use profiler_common::gpu::{SITE_ACTIVITY, SITE_NAME, SITE_STATE};

/// The rule for the injection library's export `sym`, or `None` when it is not a site.
pub fn rule(sym: &str) -> Option<Rule> {
    let prog = match sym {
        SITE_ACTIVITY => Prog::GpuActivity,
        SITE_NAME => Prog::GpuName,
        SITE_STATE => Prog::GpuState,
        _ => return None,
    };
    Some(B::new().rule(prog))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_sites_entry_only() {
        for (s, p) in [
            ("gpuprofd_inject_activity", "gpu_activity"),
            ("gpuprofd_inject_name", "gpu_name"),
            ("gpuprofd_inject_state", "gpu_state"),
        ] {
            let r = rule(s).unwrap();
            assert_eq!(r.prog.name(), p);
            assert!(!r.has_return());
        }
        assert!(rule("gpuprofd_inject_semaphore").is_none());
        assert!(rule("InitializeInjection").is_none());
    }
}
