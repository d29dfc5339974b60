//! The live view: one line per process, printed while the daemon runs.

use super::fmt;
use crate::model::snapshot::LiveRow;

/// `4242 python3  launches 1234 (+567/s)  copies 12 (50.0 MiB)  sync blocked 1.2 ms  alloc live 16.0 MiB`.
pub fn render_line(r: &LiveRow) -> String {
    let comm = if r.comm.is_empty() { "?" } else { &r.comm };
    let job = if r.job.is_empty() {
        String::new()
    } else {
        format!("[{}] ", r.job)
    };
    let mut gpu = String::new();
    if let Some(u) = r.gpu_sm_util {
        gpu.push_str(&format!("  gpu sm {u}%"));
    }
    if let Some(b) = r.gpu_held_bytes {
        gpu.push_str(&format!("  gpu mem {}", fmt::bytes(b)));
    }
    // Under the duty cycle the windows' count comes with the estimate it stands for.
    let launches = match r.launches_estimated {
        Some((est, Some(se))) => format!("{} in windows, ~{est} ±{se} est.", r.launches),
        Some((est, None)) => format!("{} in windows, ~{est} est.", r.launches),
        None => r.launches.to_string(),
    };
    if let Some(v) = r.gpm_sm_activity_pct {
        gpu.push_str(&format!("  gpm sm {v:.0}%"));
        if let Some(t) = r.gpm_tensor_pct {
            gpu.push_str(&format!(" tensor {t:.0}%"));
        }
    }
    format!(
        "{job}{} {}{}  launches {launches} (+{:.0}/s)  copies {} ({})  sync blocked {:.1} ms  alloc live {}{gpu}",
        r.tgid,
        comm,
        if r.exited { " (exited)" } else { "" },
        r.launches_per_s,
        r.copies,
        fmt::bytes(r.copy_bytes),
        r.sync_blocked_ns as f64 / 1e6,
        fmt::bytes(r.live_bytes),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line() {
        let r = LiveRow {
            job: String::new(),
            tgid: 4242,
            comm: "python3".into(),
            exited: false,
            launches: 1234,
            launches_per_s: 567.0,
            copies: 12,
            copy_bytes: 52_428_800,
            sync_blocked_ns: 1_200_000,
            live_bytes: 16 << 20,
            gpu_sm_util: None,
            gpu_held_bytes: None,
            launches_estimated: None,
            gpm_sm_activity_pct: None,
            gpm_tensor_pct: None,
        };
        assert_eq!(
            render_line(&r),
            "4242 python3  launches 1234 (+567/s)  copies 12 (50.0 MiB)  sync blocked 1.2 ms  alloc live 16.0 MiB"
        );
        let j = LiveRow {
            job: "slurm 77.0".into(),
            ..r.clone()
        };
        assert!(render_line(&j).starts_with("[slurm 77.0] 4242 python3  launches 1234"));
        let r = LiveRow {
            comm: String::new(),
            exited: true,
            ..r
        };
        assert_eq!(
            render_line(&r),
            "4242 ? (exited)  launches 1234 (+567/s)  copies 12 (50.0 MiB)  sync blocked 1.2 ms  alloc live 16.0 MiB"
        );
        let g = LiveRow {
            gpu_sm_util: Some(80),
            gpu_held_bytes: Some(1 << 30),
            ..r
        };
        assert!(render_line(&g).ends_with("alloc live 16.0 MiB  gpu sm 80%  gpu mem 1.0 GiB"));
        let d = LiveRow {
            launches_estimated: Some((12000, Some(340))),
            ..g.clone()
        };
        assert!(
            render_line(&d).starts_with(
                "4242 ? (exited)  launches 1234 in windows, ~12000 ±340 est. (+567/s)"
            ),
            "{}",
            render_line(&d)
        );
        let m = LiveRow {
            gpm_sm_activity_pct: Some(62.5),
            gpm_tensor_pct: Some(40.0),
            ..g
        };
        assert!(
            render_line(&m).ends_with("gpu sm 80%  gpu mem 1.0 GiB  gpm sm 62% tensor 40%"),
            "{}",
            render_line(&m)
        );
    }
}
