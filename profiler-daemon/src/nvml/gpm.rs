//! GPM (NVML's GPU Performance Monitoring, Hopper and later): what the SMs, tensor pipes, DRAM,
//! PCIe and NVLink did between two samples, from the device's own counters (measured, not
//! derived).
//!
//! GPM needs two samples: each round takes one per device (`nvmlGpmSampleGet`) and asks
//! `nvmlGpmMetricsGet` for the figures over the interval since the previous one, which it keeps.
//! The first round of a device therefore has no figures. A device that does not support GPM
//! (before Hopper, an NVML without the GPM entry points) is asked once and reported as
//! unsupported with the reason; the rest of the sampler goes on as before.
//!
//! MIG instances are not sampled separately yet (`nvmlGpmMigSampleGet`, per GPU instance; the
//! instance ids are read in `super::mig`): a GPU in MIG mode is sampled whole.

use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::gpm::GpmMetricResult;
use nvml_wrapper::{Device, GpmSample, Nvml};
use serde::{Deserialize, Serialize};

/// NVLink links NVML reports GPM figures for (`NVML_GPM_METRIC_NVLINK_L0..L17`).
pub const NVLINK_LINKS: u32 = 18;

/// Rounds in a row whose sample or metrics call failed before the device is given up on.
const MAX_FAILED_ROUNDS: u32 = 3;

/// What GPM measured on one device over one interval. `None` (`null`): the device did not
/// report it. Percentages are 0–100; throughputs MiB/s, as NVML reports them.
///
/// Written into capture files (bincode, which is not self-describing): no field may be
/// skipped when serialising, and a new field needs a new capture schema. A JSON report that
/// lacks some (a figure written by another tool) reads them as `None`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Figures {
    /// Share of time any warp was active on an SM (`GRAPHICS_UTIL`).
    pub graphics_activity_pct: Option<f64>,
    /// Share of time each SM had at least one warp assigned, over all SMs (`SM_UTIL`).
    pub sm_activity_pct: Option<f64>,
    /// Resident warps against the SMs' maximum (`SM_OCCUPANCY`).
    pub sm_occupancy_pct: Option<f64>,
    pub integer_activity_pct: Option<f64>,
    /// Any tensor-pipe instruction (`ANY_TENSOR_UTIL`), and per pipe: HMMA (FP16/BF16/TF32),
    /// IMMA (integer), DFMA (FP64).
    pub tensor_activity_pct: Option<f64>,
    pub tensor_hmma_pct: Option<f64>,
    pub tensor_imma_pct: Option<f64>,
    pub tensor_dfma_pct: Option<f64>,
    /// Share of the DRAM bandwidth used.
    pub dram_bandwidth_pct: Option<f64>,
    pub fp16_activity_pct: Option<f64>,
    pub fp32_activity_pct: Option<f64>,
    pub fp64_activity_pct: Option<f64>,
    pub pcie_tx_mib_per_s: Option<f64>,
    pub pcie_rx_mib_per_s: Option<f64>,
    /// All NVLink links together.
    pub nvlink_tx_mib_per_s: Option<f64>,
    pub nvlink_rx_mib_per_s: Option<f64>,
    /// Per link, for the links that reported a figure, by link number.
    pub nvlink_links: Vec<Link>,
}

/// One NVLink link's throughput (MiB/s).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Link {
    pub link: u32,
    pub tx_mib_per_s: Option<f64>,
    pub rx_mib_per_s: Option<f64>,
}

/// The scalar figures by name, in the order reports list them.
pub const FIELDS: [&str; 16] = [
    "graphics_activity_pct",
    "sm_activity_pct",
    "sm_occupancy_pct",
    "integer_activity_pct",
    "tensor_activity_pct",
    "tensor_hmma_pct",
    "tensor_imma_pct",
    "tensor_dfma_pct",
    "dram_bandwidth_pct",
    "fp16_activity_pct",
    "fp32_activity_pct",
    "fp64_activity_pct",
    "pcie_tx_mib_per_s",
    "pcie_rx_mib_per_s",
    "nvlink_tx_mib_per_s",
    "nvlink_rx_mib_per_s",
];

impl Figures {
    /// The scalar figures, in [`FIELDS`] order.
    pub fn scalars(&self) -> [Option<f64>; 16] {
        [
            self.graphics_activity_pct,
            self.sm_activity_pct,
            self.sm_occupancy_pct,
            self.integer_activity_pct,
            self.tensor_activity_pct,
            self.tensor_hmma_pct,
            self.tensor_imma_pct,
            self.tensor_dfma_pct,
            self.dram_bandwidth_pct,
            self.fp16_activity_pct,
            self.fp32_activity_pct,
            self.fp64_activity_pct,
            self.pcie_tx_mib_per_s,
            self.pcie_rx_mib_per_s,
            self.nvlink_tx_mib_per_s,
            self.nvlink_rx_mib_per_s,
        ]
    }

    /// The scalar field `i` of [`FIELDS`].
    pub fn scalar_mut(&mut self, i: usize) -> Option<&mut Option<f64>> {
        Some(match i {
            0 => &mut self.graphics_activity_pct,
            1 => &mut self.sm_activity_pct,
            2 => &mut self.sm_occupancy_pct,
            3 => &mut self.integer_activity_pct,
            4 => &mut self.tensor_activity_pct,
            5 => &mut self.tensor_hmma_pct,
            6 => &mut self.tensor_imma_pct,
            7 => &mut self.tensor_dfma_pct,
            8 => &mut self.dram_bandwidth_pct,
            9 => &mut self.fp16_activity_pct,
            10 => &mut self.fp32_activity_pct,
            11 => &mut self.fp64_activity_pct,
            12 => &mut self.pcie_tx_mib_per_s,
            13 => &mut self.pcie_rx_mib_per_s,
            14 => &mut self.nvlink_tx_mib_per_s,
            15 => &mut self.nvlink_rx_mib_per_s,
            _ => return None,
        })
    }

    /// Whether no figure at all was reported.
    pub fn is_empty(&self) -> bool {
        self.scalars().iter().all(Option::is_none) && self.nvlink_links.is_empty()
    }
}

/// One device's GPM outcome in one round.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum State {
    /// Figures over the interval since the previous round.
    Measured(Box<Figures>),
    /// The first sample of the device: figures from the next round on.
    First,
    /// This round's sample or metrics call failed (why); the next round starts over.
    Failed(String),
    /// The device does not do GPM (why); it is not asked again.
    Unsupported(String),
}

/// One device in one round.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceGpm {
    pub index: u32,
    pub state: State,
}

/// GPM of one NVML round, every device.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Gpm {
    pub ts_ns: u64,
    pub devices: Vec<DeviceGpm>,
}

/// What a figure is, for [`figures`]: a scalar field of [`FIELDS`], or one way of a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Scalar(usize),
    LinkTx(u32),
    LinkRx(u32),
}

/// The scalar metrics, which [`requested`] lists first (then the per-link NVLink ones).
const SCALARS: usize = FIELDS.len();

/// The metrics asked for each round and where each goes. NVML's limit per call is far above.
fn requested() -> Vec<(GpmMetricId, Slot)> {
    use GpmMetricId as M;
    let mut v = vec![
        (M::GraphicsUtil, Slot::Scalar(0)),
        (M::SmUtil, Slot::Scalar(1)),
        (M::SmOccupancy, Slot::Scalar(2)),
        (M::IntegerUtil, Slot::Scalar(3)),
        (M::AnyTensorUtil, Slot::Scalar(4)),
        (M::HmmaTensorUtil, Slot::Scalar(5)),
        (M::ImmaTensorUtil, Slot::Scalar(6)),
        (M::DfmaTensorUtil, Slot::Scalar(7)),
        (M::DramBwUtil, Slot::Scalar(8)),
        (M::Fp16Util, Slot::Scalar(9)),
        (M::Fp32Util, Slot::Scalar(10)),
        (M::Fp64Util, Slot::Scalar(11)),
        (M::PcieTxPerSec, Slot::Scalar(12)),
        (M::PcieRxPerSec, Slot::Scalar(13)),
        (M::NvlinkTotalTxPerSec, Slot::Scalar(14)),
        (M::NvlinkTotalRxPerSec, Slot::Scalar(15)),
    ];
    let links = [
        (M::NvlinkL0TxPerSec, M::NvlinkL0RxPerSec),
        (M::NvlinkL1TxPerSec, M::NvlinkL1RxPerSec),
        (M::NvlinkL2TxPerSec, M::NvlinkL2RxPerSec),
        (M::NvlinkL3TxPerSec, M::NvlinkL3RxPerSec),
        (M::NvlinkL4TxPerSec, M::NvlinkL4RxPerSec),
        (M::NvlinkL5TxPerSec, M::NvlinkL5RxPerSec),
        (M::NvlinkL6TxPerSec, M::NvlinkL6RxPerSec),
        (M::NvlinkL7TxPerSec, M::NvlinkL7RxPerSec),
        (M::NvlinkL8TxPerSec, M::NvlinkL8RxPerSec),
        (M::NvlinkL9TxPerSec, M::NvlinkL9RxPerSec),
        (M::NvlinkL10TxPerSec, M::NvlinkL10RxPerSec),
        (M::NvlinkL11TxPerSec, M::NvlinkL11RxPerSec),
        (M::NvlinkL12TxPerSec, M::NvlinkL12RxPerSec),
        (M::NvlinkL13TxPerSec, M::NvlinkL13RxPerSec),
        (M::NvlinkL14TxPerSec, M::NvlinkL14RxPerSec),
        (M::NvlinkL15TxPerSec, M::NvlinkL15RxPerSec),
        (M::NvlinkL16TxPerSec, M::NvlinkL16RxPerSec),
        (M::NvlinkL17TxPerSec, M::NvlinkL17RxPerSec),
    ];
    for (link, (tx, rx)) in (0..NVLINK_LINKS).zip(links) {
        v.push((tx, Slot::LinkTx(link)));
        v.push((rx, Slot::LinkRx(link)));
    }
    v
}

/// The figures of one `nvmlGpmMetricsGet` answer (`results[i]` for `slots[i]`): a metric that
/// failed on its own (not supported by this device) is left `None`; a value NVML reports as
/// not a number is left out too.
fn figures(slots: &[Slot], results: &[Result<GpmMetricResult, NvmlError>]) -> Figures {
    let mut f = Figures::default();
    for (slot, r) in slots.iter().zip(results) {
        let Ok(r) = r else { continue };
        if !r.value.is_finite() {
            continue;
        }
        let v = Some(r.value);
        match *slot {
            Slot::Scalar(i) => {
                if let Some(field) = f.scalar_mut(i) {
                    *field = v;
                }
            }
            Slot::LinkTx(l) | Slot::LinkRx(l) => {
                let pos = match f.nvlink_links.iter().position(|x| x.link == l) {
                    Some(p) => p,
                    None => {
                        f.nvlink_links.push(Link {
                            link: l,
                            ..Link::default()
                        });
                        f.nvlink_links.len() - 1
                    }
                };
                let link = &mut f.nvlink_links[pos];
                if matches!(slot, Slot::LinkTx(_)) {
                    link.tx_mib_per_s = v;
                } else {
                    link.rx_mib_per_s = v;
                }
            }
        }
    }
    f.nvlink_links.sort_by_key(|l| l.link);
    f
}

/// Why a device has no GPM, from `nvmlGpmQueryDeviceSupport`'s answer.
fn unsupported_because(answer: Result<bool, NvmlError>) -> Option<String> {
    match answer {
        Ok(true) => None,
        Ok(false) => {
            Some("the device does not support GPM (it needs a Hopper or later GPU)".into())
        }
        Err(NvmlError::FailedToLoadSymbol(_)) | Err(NvmlError::FunctionNotFound) => Some(
            "this NVML has no GPM entry points (driver older than 520; GPM needs a Hopper or \
             later GPU and a newer driver)"
                .into(),
        ),
        Err(NvmlError::NotSupported) => {
            Some("the device does not support GPM (it needs a Hopper or later GPU)".into())
        }
        Err(e) => Some(format!("nvmlGpmQueryDeviceSupport failed: {e}")),
    }
}

/// Per device: whether it does GPM, and its previous sample.
enum Dev<'n> {
    Unknown,
    Unsupported(String),
    Sampling {
        prev: Option<GpmSample<'n>>,
        failed: u32,
    },
}

/// The GPM half of the sampler thread: one per NVML handle, called once per round and device.
pub struct Sampler<'n> {
    devices: Vec<Dev<'n>>,
    ids: Vec<GpmMetricId>,
    slots: Vec<Slot>,
}

impl<'n> Sampler<'n> {
    pub fn new() -> Sampler<'n> {
        let (ids, slots) = requested().into_iter().unzip();
        Sampler {
            devices: Vec::new(),
            ids,
            slots,
        }
    }

    /// This round's GPM outcome for device `index`.
    pub fn round(&mut self, nvml: &'n Nvml, index: u32, d: &Device<'n>) -> DeviceGpm {
        let i = index as usize;
        if self.devices.len() <= i {
            self.devices.resize_with(i + 1, || Dev::Unknown);
        }
        if matches!(self.devices[i], Dev::Unknown) {
            self.devices[i] = match unsupported_because(d.gpm_support()) {
                Some(why) => Dev::Unsupported(why),
                None => Dev::Sampling {
                    prev: None,
                    failed: 0,
                },
            };
        }
        let state = match &mut self.devices[i] {
            Dev::Unknown => State::First,
            Dev::Unsupported(why) => State::Unsupported(why.clone()),
            Dev::Sampling { prev, failed } => {
                let now = d.gpm_sample();
                let state = match (&now, prev.as_ref()) {
                    (Err(e), _) => State::Failed(format!("nvmlGpmSampleGet failed: {e}")),
                    (Ok(_), None) => State::First,
                    (Ok(b), Some(a)) => {
                        let mut got = nvml_wrapper::gpm::gpm_metrics_get(nvml, a, b, &self.ids);
                        // A driver that refuses the whole request over the per-link NVLink
                        // metrics (rather than failing them one by one) still gives the rest.
                        if got.is_err() && self.ids.len() > SCALARS {
                            let short = nvml_wrapper::gpm::gpm_metrics_get(
                                nvml,
                                a,
                                b,
                                &self.ids[..SCALARS],
                            );
                            if short.is_ok() {
                                self.ids.truncate(SCALARS);
                                self.slots.truncate(SCALARS);
                                got = short;
                            }
                        }
                        match got {
                            Ok(r) => State::Measured(Box::new(figures(&self.slots, &r))),
                            Err(e) => State::Failed(format!("nvmlGpmMetricsGet failed: {e}")),
                        }
                    }
                };
                *prev = now.ok();
                if let State::Failed(why) = &state {
                    *failed += 1;
                    if *failed >= MAX_FAILED_ROUNDS {
                        // NVML_DEVICE_MIG_ENABLE is 1.
                        let mig = if d.mig_mode().is_ok_and(|m| m.current == 1) {
                            " (MIG mode is on: GPM per MIG instance is not sampled yet)"
                        } else {
                            ""
                        };
                        let why =
                            format!("GPM failed {MAX_FAILED_ROUNDS} rounds in a row: {why}{mig}");
                        self.devices[i] = Dev::Unsupported(why.clone());
                        return DeviceGpm {
                            index,
                            state: State::Unsupported(why),
                        };
                    }
                } else {
                    *failed = 0;
                }
                state
            }
        };
        DeviceGpm { index, state }
    }
}

impl Default for Sampler<'_> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvml_wrapper::struct_wrappers::gpm::GpmMetricInfo;

    fn ok(id: GpmMetricId, value: f64) -> Result<GpmMetricResult, NvmlError> {
        Ok(GpmMetricResult {
            metric_id: id,
            value,
            metric_info: GpmMetricInfo {
                short_name: String::new(),
                long_name: String::new(),
                unit: String::new(),
            },
        })
    }

    #[test]
    fn every_requested_metric_lands_in_its_field() {
        let req = requested();
        // 16 scalars, then tx and rx of 18 links; within NVML's 98 per call.
        assert_eq!(req.len(), 16 + 2 * 18);
        assert!(req.len() <= 98);
        let slots: Vec<Slot> = req.iter().map(|r| r.1).collect();
        // The scalars first, in FIELDS order (the fallback request is their prefix).
        assert!(
            slots[..SCALARS]
                .iter()
                .enumerate()
                .all(|(i, s)| *s == Slot::Scalar(i))
        );
        // Metric i reports i + 0.5; links 2..18 are not supported by this device.
        let results: Vec<_> = req
            .iter()
            .enumerate()
            .map(|(i, (id, slot))| match slot {
                Slot::LinkTx(l) | Slot::LinkRx(l) if *l >= 2 => Err(NvmlError::NotSupported),
                _ => ok(*id, i as f64 + 0.5),
            })
            .collect();
        let f = figures(&slots, &results);
        assert_eq!(f.scalars(), std::array::from_fn(|i| Some(i as f64 + 0.5)));
        assert_eq!(f.sm_activity_pct, Some(1.5));
        assert_eq!(f.sm_occupancy_pct, Some(2.5));
        assert_eq!(f.tensor_hmma_pct, Some(5.5));
        assert_eq!(f.dram_bandwidth_pct, Some(8.5));
        assert_eq!(f.pcie_tx_mib_per_s, Some(12.5));
        assert_eq!(f.nvlink_rx_mib_per_s, Some(15.5));
        assert_eq!(
            f.nvlink_links,
            vec![
                Link {
                    link: 0,
                    tx_mib_per_s: Some(16.5),
                    rx_mib_per_s: Some(17.5)
                },
                Link {
                    link: 1,
                    tx_mib_per_s: Some(18.5),
                    rx_mib_per_s: Some(19.5)
                },
            ]
        );
    }

    #[test]
    fn failed_or_nan_metrics_are_left_out() {
        let slots = [Slot::Scalar(1), Slot::Scalar(2), Slot::Scalar(4)];
        let results = [
            ok(GpmMetricId::SmUtil, 62.5),
            Err(NvmlError::NotSupported),
            ok(GpmMetricId::AnyTensorUtil, f64::NAN),
        ];
        let f = figures(&slots, &results);
        assert_eq!(
            f,
            Figures {
                sm_activity_pct: Some(62.5),
                ..Figures::default()
            }
        );
        assert!(!f.is_empty());
        assert!(figures(&[], &[]).is_empty());
    }

    #[test]
    fn unsupported_says_why() {
        assert_eq!(unsupported_because(Ok(true)), None);
        assert_eq!(
            unsupported_because(Ok(false)).unwrap(),
            "the device does not support GPM (it needs a Hopper or later GPU)"
        );
        assert!(
            unsupported_because(Err(NvmlError::FailedToLoadSymbol("x".into())))
                .unwrap()
                .starts_with("this NVML has no GPM entry points")
        );
        assert!(
            unsupported_because(Err(NvmlError::GpuLost))
                .unwrap()
                .starts_with("nvmlGpmQueryDeviceSupport failed: ")
        );
    }

    #[test]
    fn scalar_fields_round_trip() {
        let mut f = Figures::default();
        for i in 0..FIELDS.len() {
            *f.scalar_mut(i).unwrap() = Some(i as f64);
        }
        assert!(f.scalar_mut(FIELDS.len()).is_none());
        assert_eq!(f.scalars(), std::array::from_fn(|i| Some(i as f64)));
        // The JSON names are FIELDS.
        let j = serde_json::to_value(&f).unwrap();
        for (i, name) in FIELDS.iter().enumerate() {
            assert_eq!(j[name], serde_json::json!(i as f64), "{name}");
        }
    }
}
