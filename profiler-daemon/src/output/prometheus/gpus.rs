//! The GPUs' own series in `/metrics` beyond utilisation and memory: NVML's health figures
//! (XID and ECC errors, throttle reasons, PCIe throughput) and GPM's activity per GPU (ratios,
//! PCIe and NVLink bytes per second, whether GPM is supported), which workload holds a GPU
//! alone, and that workload's activity. Split from `prometheus.rs`, which writes the workloads' and
//! the daemon's own series.

use super::{Extra, Gpu};
use crate::model::snapshot::Report;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GpuWhat {
    gpu: String,
    uuid: String,
    what: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GpuLink {
    gpu: String,
    uuid: String,
    what: String,
    link: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GpuHolder {
    gpu: String,
    uuid: String,
    workload: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WorkloadGpuWhat {
    workload: String,
    gpu: String,
    what: String,
}

/// Throttling, PCIe throughput, ECC and XID figures of each GPU NVML reported on.
pub(super) fn gpu_health(reg: &mut Registry, r: &Report, extra: &Extra) {
    let throttle = Family::<GpuWhat, Gauge>::default();
    reg.register(
        "gpuprofd_gpu_throttle_reason",
        "1 while NVML reports this clock throttle reason in force on the GPU (label what), else 0",
        throttle.clone(),
    );
    let pcie = Family::<GpuWhat, Gauge>::default();
    reg.register(
        "gpuprofd_gpu_pcie_throughput_bytes_per_second",
        "PCIe throughput NVML measured over its last 20 ms window (what: tx or rx; KiB/s x 1024)",
        pcie.clone(),
    );
    let ecc = Family::<GpuWhat, Gauge>::default();
    reg.register(
        "gpuprofd_gpu_ecc_errors",
        "Volatile ECC errors since the driver loaded (what: corrected or uncorrected)",
        ecc.clone(),
    );
    let xid = Family::<Gpu, Counter>::default();
    reg.register(
        "gpuprofd_gpu_xid_errors",
        "XID errors NVML reported for the GPU while gpuprofd ran",
        xid.clone(),
    );
    for g in &r.gpus {
        let Some((h, xids)) = extra.facts.gpu_health.get(&g.index) else {
            continue;
        };
        let l = |what: &str| GpuWhat {
            gpu: g.index.to_string(),
            uuid: g.uuid.clone(),
            what: what.to_owned(),
        };
        if let Some(bits) = h.throttle_reasons {
            for (bit, name) in crate::nvml::THROTTLE_REASONS {
                throttle
                    .get_or_create(&l(name))
                    .set(i64::from(bits & bit != 0));
            }
        }
        for (what, v) in [("tx", h.pcie_tx_kbps), ("rx", h.pcie_rx_kbps)] {
            if let Some(kb) = v {
                pcie.get_or_create(&l(what)).set(i64::from(kb) * 1024);
            }
        }
        for (what, v) in [
            ("corrected", h.ecc_corrected),
            ("uncorrected", h.ecc_uncorrected),
        ] {
            if let Some(n) = v {
                ecc.get_or_create(&l(what))
                    .set(n.min(i64::MAX as u64) as i64);
            }
        }
        xid.get_or_create(&Gpu {
            gpu: g.index.to_string(),
            uuid: g.uuid.clone(),
        })
        .inc_by(*xids);
    }
}

/// GPM's figures of the latest NVML round per GPU (measured by the device's counters), whether
/// each GPU does GPM, and who held it; the workload that held a GPU alone gets its main
/// figures too. Labels stay bounded: a dozen figures and 18 links per GPU, one holder each.
pub(super) fn gpu_gpm(reg: &mut Registry, r: &Report, extra: &Extra) {
    use crate::nvml::gpm::FIELDS;
    let supported = Family::<Gpu, Gauge>::default();
    reg.register(
        "gpuprofd_gpu_gpm_supported",
        "1 while NVML's GPM measures the GPU's activity (Hopper and later), 0 when the GPU or its \
         driver has no GPM (the report's gpus[].gpm.detail says why)",
        supported.clone(),
    );
    let ratio = Family::<GpuWhat, Gauge<f64, AtomicU64>>::default();
    reg.register(
        "gpuprofd_gpu_gpm_ratio",
        "GPM, measured over the last NVML interval (0 to 1; what: sm_activity, sm_occupancy, \
         tensor_activity, tensor_hmma, tensor_imma, tensor_dfma, dram_bandwidth, fp16_activity, \
         fp32_activity, fp64_activity, integer_activity, graphics_activity)",
        ratio.clone(),
    );
    let pcie = Family::<GpuWhat, Gauge<f64, AtomicU64>>::default();
    reg.register(
        "gpuprofd_gpu_gpm_pcie_bytes_per_second",
        "GPM, measured over the last NVML interval: PCIe traffic (what: tx or rx)",
        pcie.clone(),
    );
    let nvlink = Family::<GpuLink, Gauge<f64, AtomicU64>>::default();
    reg.register(
        "gpuprofd_gpu_gpm_nvlink_bytes_per_second",
        "GPM, measured over the last NVML interval: NVLink traffic (what: tx or rx; link: total \
         or the link number)",
        nvlink.clone(),
    );
    let holder = Family::<GpuHolder, Gauge>::default();
    reg.register(
        "gpuprofd_gpu_gpm_holder",
        "1 for who held the GPU in the latest GPM round: the workload whose processes alone were \
         on it, or shared, idle, unattributed (its figures are then no one workload's)",
        holder.clone(),
    );
    let by_workload = Family::<WorkloadGpuWhat, Gauge<f64, AtomicU64>>::default();
    reg.register(
        "gpuprofd_workload_gpm_ratio",
        "GPM of a GPU the workload held alone in the latest round (0 to 1; what: sm_activity, \
         sm_occupancy, tensor_activity, dram_bandwidth)",
        by_workload.clone(),
    );
    const MIB: f64 = 1024.0 * 1024.0;
    for g in &r.gpus {
        let Some(state) = g.gpm.as_ref().map(|m| m.state.as_str()) else {
            continue;
        };
        let gl = Gpu {
            gpu: g.index.to_string(),
            uuid: g.uuid.clone(),
        };
        supported
            .get_or_create(&gl)
            .set(i64::from(state != "unsupported"));
        let Some(now) = extra.facts.gpm_now.get(&g.index) else {
            continue;
        };
        let l = |what: &str| GpuWhat {
            gpu: g.index.to_string(),
            uuid: g.uuid.clone(),
            what: what.to_owned(),
        };
        let v = now.figures.scalars();
        for (i, name) in FIELDS.iter().enumerate().take(12) {
            if let Some(x) = v[i] {
                let what = name.trim_end_matches("_pct");
                ratio.get_or_create(&l(what)).set(x / 100.0);
            }
        }
        let f = &now.figures;
        for (what, x) in [("tx", f.pcie_tx_mib_per_s), ("rx", f.pcie_rx_mib_per_s)] {
            if let Some(x) = x {
                pcie.get_or_create(&l(what)).set(x * MIB);
            }
        }
        let link = |what: &str, link: String| GpuLink {
            gpu: g.index.to_string(),
            uuid: g.uuid.clone(),
            what: what.to_owned(),
            link,
        };
        for (what, x) in [("tx", f.nvlink_tx_mib_per_s), ("rx", f.nvlink_rx_mib_per_s)] {
            if let Some(x) = x {
                nvlink
                    .get_or_create(&link(what, "total".into()))
                    .set(x * MIB);
            }
        }
        for k in &f.nvlink_links {
            for (what, x) in [("tx", k.tx_mib_per_s), ("rx", k.rx_mib_per_s)] {
                if let Some(x) = x {
                    nvlink
                        .get_or_create(&link(what, k.link.to_string()))
                        .set(x * MIB);
                }
            }
        }
        holder
            .get_or_create(&GpuHolder {
                gpu: g.index.to_string(),
                uuid: g.uuid.clone(),
                workload: now.holder.label().to_owned(),
            })
            .set(1);
        if let crate::model::gpm::Holder::Job(w) = &now.holder {
            for (what, x) in [
                ("sm_activity", f.sm_activity_pct),
                ("sm_occupancy", f.sm_occupancy_pct),
                ("tensor_activity", f.tensor_activity_pct),
                ("dram_bandwidth", f.dram_bandwidth_pct),
            ] {
                if let Some(x) = x {
                    by_workload
                        .get_or_create(&WorkloadGpuWhat {
                            workload: w.clone(),
                            gpu: g.index.to_string(),
                            what: what.to_owned(),
                        })
                        .set(x / 100.0);
                }
            }
        }
    }
}
