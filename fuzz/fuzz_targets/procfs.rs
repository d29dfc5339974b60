//! What a process's /proc files say (maps, cgroup, status, environ) — all under its control.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = gpuprofd::enrich::jobs::slurm_from_environ(data);
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = gpuprofd::discovery::parse_maps(text);
    if let Some(path) = gpuprofd::enrich::jobs::cgroup_path(text) {
        let _ = gpuprofd::enrich::jobs::job_from_cgroup(&path);
    }
    let _ = gpuprofd::enrich::jobs::job_from_cgroup(text);
    let _ = gpuprofd::enrich::process::parse_uid(text);
    let _ = gpuprofd::sys::duration::parse_duration(text);
});
