//! MIG: where processes run on a GPU in MIG mode, and which MIG instances each such GPU has.
//!
//! On a GPU in MIG mode NVML's process list (asked of the whole GPU) gives each process its
//! GPU instance and compute instance ([`MigPlacement`]). The instances themselves — what a
//! `MIG-…` UUID in `CUDA_VISIBLE_DEVICES` / `NVIDIA_VISIBLE_DEVICES` names — are the GPU's MIG
//! device handles, each with its UUID and the two instance ids ([`MigDevice`]). `nvml-wrapper`
//! 0.13 reads the handles and UUIDs but not the instance ids of a handle, so those two calls
//! go through its raw function table (`Nvml::lib`), checked for presence first.

use nvml_wrapper::{Device, Nvml};
use serde::{Deserialize, Serialize};

/// A process on a MIG instance: the GPU (NVML's index of the whole GPU), and the GPU and
/// compute instance NVML's process list gave it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MigPlacement {
    pub pid: u32,
    pub device: u32,
    pub gpu_instance: u32,
    pub compute_instance: u32,
}

/// One MIG instance of a GPU: its UUID (`MIG-…`) and ids.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MigDevice {
    /// NVML's index of the whole GPU.
    pub device: u32,
    pub uuid: String,
    pub gpu_instance: u32,
    pub compute_instance: u32,
}

/// What one NVML round said of MIG (kept in capture files as the `NvmlMig` frame).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigRound {
    pub placements: Vec<MigPlacement>,
    pub instances: Vec<MigDevice>,
}

impl MigRound {
    pub fn is_empty(&self) -> bool {
        self.placements.is_empty() && self.instances.is_empty()
    }
}

/// The MIG instances of GPU `index` (`d`), when it is in MIG mode; none otherwise, or where
/// the driver does not say.
pub fn instances(nvml: &Nvml, index: u32, d: &Device) -> Vec<MigDevice> {
    // NVML_DEVICE_MIG_ENABLE is 1.
    if !d.mig_mode().is_ok_and(|m| m.current == 1) {
        return Vec::new();
    }
    let lib = nvml.lib();
    let (Ok(gi_of), Ok(ci_of)) = (
        lib.nvmlDeviceGetGpuInstanceId.as_ref(),
        lib.nvmlDeviceGetComputeInstanceId.as_ref(),
    ) else {
        return Vec::new();
    };
    let n = d.mig_device_count().unwrap_or(0);
    (0..n)
        .filter_map(|i| {
            // An index without an instance is NOT_FOUND: skipped.
            let m = d.mig_device_by_index(i).ok()?;
            let uuid = m.uuid().ok()?;
            let (mut gi, mut ci) = (0u32, 0u32);
            // SAFETY: `m` is a MIG device handle NVML just gave; both calls write one
            // unsigned int through a pointer to a live local.
            let ok = unsafe { gi_of(m.handle(), &mut gi) == 0 && ci_of(m.handle(), &mut ci) == 0 };
            ok.then_some(MigDevice {
                device: index,
                uuid,
                gpu_instance: gi,
                compute_instance: ci,
            })
        })
        .collect()
}
