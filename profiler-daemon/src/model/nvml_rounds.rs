//! NVML's rounds applied to the aggregator: each round's device and per-process figures, its
//! MIG placements, device health and GPM figures (given to the job holding the device), and
//! why sampling stopped. Kept apart from the probes' records, which `super` applies.

use super::{Aggregator, gpm};

impl Aggregator {
    /// Device health of an NVML round (throttling, PCIe, ECC, XID events).
    pub fn apply_nvml_health(&mut self, h: &crate::nvml::Health) {
        self.gpus.apply_health(h);
    }

    /// GPM figures of an NVML round, each device's given to the job holding it in that round
    /// (from the process list of the round, applied just before).
    pub fn apply_nvml_gpm(&mut self, g: &crate::nvml::gpm::Gpm) {
        for d in &g.devices {
            let holder = gpm::Holder::of(self.gpus.round_pids(d.index).iter().map(|pid| {
                self.meta
                    .get(pid)
                    .and_then(|m| m.job.as_ref())
                    .map(|j| j.key())
            }));
            self.gpus.gpm.apply(d, holder);
        }
    }

    /// One NVML sampling round: device figures, and per-process figures for the processes that
    /// made CUDA calls (NVML's pids are host pids, as the probes' tgids).
    pub fn apply_nvml(&mut self, s: &crate::nvml::Sample) {
        let mut seen_now: Vec<u32> = Vec::new();
        self.gpus.apply(s);
        for p in &s.processes {
            let Some(st) = self.procs.get_mut(&p.pid) else {
                continue;
            };
            let g = &mut st.gpu;
            if !seen_now.contains(&p.pid) {
                seen_now.push(p.pid);
                g.samples += 1;
                g.last_sm_util = None;
                g.last_used_bytes = None;
            }
            // Summed over the devices the process is on.
            if let Some(v) = p.sm_util {
                g.last_sm_util = Some(g.last_sm_util.unwrap_or(0) + v);
            }
            if let Some(v) = p.used_bytes {
                g.last_used_bytes = Some(g.last_used_bytes.unwrap_or(0) + v);
            }
            g.devices.insert(p.device);
            g.used_bytes.add(p.used_bytes);
            g.sm_util.add(p.sm_util.map(u64::from));
            g.mem_util.add(p.mem_util.map(u64::from));
        }
    }

    /// The MIG instances NVML's round placed processes on (the round itself applied just
    /// before).
    pub fn apply_nvml_mig(&mut self, round: &crate::nvml::MigRound) {
        self.gpus.apply_mig(&round.instances);
        for m in &round.placements {
            if let Some(st) = self.procs.get_mut(&m.pid) {
                st.gpu
                    .mig
                    .insert((m.device, m.gpu_instance, m.compute_instance));
            }
        }
    }

    /// NVML sampling stopped (or never started): why.
    pub fn nvml_stopped(&mut self, why: &str) {
        let st = &mut self.gpus.status;
        st.state = if st.samples > 0 {
            "failed"
        } else {
            "unavailable"
        }
        .into();
        st.detail = why.to_owned();
    }

    /// NVML sampling was not asked for.
    pub fn nvml_off(&mut self) {
        self.gpus.status.state = "off".into();
    }
}
