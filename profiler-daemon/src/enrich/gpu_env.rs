//! Which of the node's GPUs a process's CUDA device ordinals are: the ordinal the probes learn
//! (device 0, 1, …) counts the devices *the process* sees, which `CUDA_VISIBLE_DEVICES`
//! renumbers (Slurm's `--gpus-per-task`, a job script) and a container narrows
//! (`NVIDIA_VISIBLE_DEVICES`, which the NVIDIA container toolkit and the Kubernetes device
//! plugin set). On an eight-GPU node every rank may be "device 0"; this module says which NVML
//! GPU (index, UUID) that is, or why it cannot tell.
//!
//! Written here rather than taken from a crate: it is CUDA's documented rule for the two
//! variables (entries are indexes or `GPU-` UUID prefixes; the list stops at the first entry
//! that names no device; `MIG-` entries name MIG instances, of which CUDA enumerates one, as
//! device 0), applied to NVML's device list and each GPU's MIG instances.

use serde::{Deserialize, Serialize};

/// The environment that decides a process's device numbering, as read at its first sight
/// (kept in capture files: bincode, so every field is always written).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuEnv {
    /// `CUDA_VISIBLE_DEVICES`, when set.
    pub cuda_visible: Option<String>,
    /// `NVIDIA_VISIBLE_DEVICES`, when set and the process is in a container of its own
    /// (another mount namespace); outside one the variable does nothing and is not kept.
    pub nvidia_visible: Option<String>,
    /// `CUDA_DEVICE_ORDER`, when set (`FASTEST_FIRST`, CUDA's default, or `PCI_BUS_ID`).
    pub device_order: Option<String>,
    /// The process has a mount namespace of its own (a container): which GPUs it was given
    /// is known only from `NVIDIA_VISIBLE_DEVICES`.
    pub in_container: bool,
}

/// The environment of process `tgid` that decides its device numbering (`None` when its
/// environment cannot be read).
pub fn of_process(tgid: u32) -> Option<GpuEnv> {
    let env = super::process::read_head(
        &format!("/proc/{tgid}/environ"),
        super::process::MAX_ENVIRON,
    )
    .ok()?;
    let ns = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/mnt")).ok();
    let in_container = match (ns(&tgid.to_string()), ns("1")) {
        (Some(a), Some(b)) => a != b,
        _ => false,
    };
    Some(GpuEnv::from_environ(&env, in_container))
}

/// One GPU as NVML lists it (NVML numbers GPUs in PCI bus order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeGpu {
    pub index: u32,
    pub uuid: String,
    pub name: String,
    /// Its MIG instances, when it is in MIG mode.
    pub migs: Vec<NodeMig>,
}

/// A MIG instance of a GPU: its UUID (`MIG-…`) and its GPU and compute instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeMig {
    pub uuid: String,
    pub gpu_instance: u32,
    pub compute_instance: u32,
}

/// What a CUDA ordinal is on the node: a GPU, or a MIG instance of one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resolved<'a> {
    pub gpu: &'a NodeGpu,
    pub mig: Option<&'a NodeMig>,
}

/// The value of `name` in NUL-separated environ text (empty values included).
fn var(env: &[u8], name: &str) -> Option<String> {
    env.split(|&b| b == 0).find_map(|kv| {
        let v = kv.strip_prefix(name.as_bytes())?.strip_prefix(b"=")?;
        Some(String::from_utf8_lossy(v).into_owned())
    })
}

impl GpuEnv {
    /// From `/proc/PID/environ` text; `in_container`: the process has a mount namespace of
    /// its own.
    pub fn from_environ(env: &[u8], in_container: bool) -> GpuEnv {
        GpuEnv {
            cuda_visible: var(env, "CUDA_VISIBLE_DEVICES"),
            nvidia_visible: var(env, "NVIDIA_VISIBLE_DEVICES").filter(|_| in_container),
            device_order: var(env, "CUDA_DEVICE_ORDER"),
            in_container,
        }
    }

    /// The NVML GPU (and MIG instance) that CUDA ordinal `ordinal` of this process is, among
    /// `gpus`, or why it cannot be told.
    pub fn resolve<'a>(&self, ordinal: u32, gpus: &'a [NodeGpu]) -> Result<Resolved<'a>, String> {
        if let Some(m) = self.resolve_mig(ordinal, gpus) {
            return m;
        }
        self.resolve_gpu(ordinal, gpus)
            .map(|gpu| Resolved { gpu, mig: None })
    }

    /// Where the environment names a MIG instance (`MIG-<uuid>`, or the older
    /// `MIG-GPU-<uuid>/<gi>/<ci>`): CUDA then enumerates that one instance, as device 0, and a
    /// list that mixes it with whole GPUs is not told apart. `None` where no MIG entry counts.
    fn resolve_mig<'a>(
        &self,
        ordinal: u32,
        gpus: &'a [NodeGpu],
    ) -> Option<Result<Resolved<'a>, String>> {
        let entries =
            |l: &str| -> Vec<String> { l.split(',').map(|e| e.trim().to_owned()).collect() };
        let has_mig = |l: &[String]| l.iter().any(|e| e.starts_with("MIG-"));
        let cuda = self.cuda_visible.as_deref().map(entries);
        let container = self.nvidia_visible.as_deref().map(entries);
        let list = match (cuda, container) {
            (Some(c), _) if has_mig(&c) => c,
            // The container was given a MIG instance; CUDA_VISIBLE_DEVICES may only pick it.
            (c, Some(n)) if has_mig(&n) => {
                if c.is_some_and(|c| c.first().is_none_or(|e| e != "0")) {
                    return Some(Err(
                        "CUDA_VISIBLE_DEVICES renumbers a container's MIG instance: not told apart"
                            .into(),
                    ));
                }
                n
            }
            _ => return None,
        };
        let first = &list[0];
        if !first.starts_with("MIG-") {
            return Some(Err(format!(
                "\"{}\" mixes MIG instances and whole GPUs: not told apart",
                list.join(",")
            )));
        }
        if ordinal != 0 {
            return Some(Err(format!(
                "CUDA enumerates one MIG instance per process: device {ordinal} is none"
            )));
        }
        Some(
            find_mig(first, gpus)
                .ok_or_else(|| format!("\"{first}\" names no MIG instance NVML lists")),
        )
    }

    /// The NVML GPU that CUDA ordinal `ordinal` is, among whole GPUs.
    fn resolve_gpu<'a>(&self, ordinal: u32, gpus: &'a [NodeGpu]) -> Result<&'a NodeGpu, String> {
        let mut sorted: Vec<&NodeGpu> = gpus.iter().collect();
        sorted.sort_by_key(|g| g.index);
        // What the container was given (the toolkit mounts those devices only).
        let base: Vec<&NodeGpu> = match self.nvidia_visible.as_deref().map(str::trim) {
            None if self.in_container => {
                return Err("in a container that does not say which GPUs it was given \
                            (no NVIDIA_VISIBLE_DEVICES)"
                    .into());
            }
            None | Some("all") => sorted,
            Some("" | "void" | "none") => {
                return Err("NVIDIA_VISIBLE_DEVICES gives the container no GPU".into());
            }
            Some(list) => {
                let mut v = Vec::new();
                for e in list.split(',').map(str::trim) {
                    match pick(e, &sorted) {
                        Pick::One(g) => v.push(g),
                        Pick::Mig => return Err(mig(e)),
                        Pick::Nothing => {
                            return Err(format!(
                                "NVIDIA_VISIBLE_DEVICES entry \"{e}\" names no GPU NVML lists"
                            ));
                        }
                    }
                }
                // The container sees its devices in bus order, whatever the list's order.
                v.sort_by_key(|g| g.index);
                v
            }
        };
        // CUDA orders the devices it sees fastest first unless told PCI_BUS_ID; GPUs of one
        // model tie, and ties go in bus order. Only positions depend on that order (UUIDs
        // name their GPU whatever it is).
        let bus_order = self.device_order.as_deref() == Some("PCI_BUS_ID")
            || base.windows(2).all(|w| w[0].name == w[1].name);
        let unordered = || {
            "GPUs of different models and CUDA_DEVICE_ORDER is not PCI_BUS_ID: CUDA numbers \
             them fastest first"
                .to_owned()
        };
        let visible: Vec<&NodeGpu> = match self.cuda_visible.as_deref() {
            None if !bus_order => return Err(unordered()),
            None => base,
            Some(list) => {
                let mut v = Vec::new();
                for e in list.split(',').map(str::trim) {
                    if !bus_order && e.parse::<usize>().is_ok() {
                        return Err(unordered());
                    }
                    match pick_visible(e, &base) {
                        Pick::One(g) if !v.iter().any(|x: &&NodeGpu| x.index == g.index) => {
                            v.push(g)
                        }
                        Pick::Mig => return Err(mig(e)),
                        // CUDA stops at the first entry that names no device (or a repeat).
                        _ => break,
                    }
                }
                v
            }
        };
        visible.get(ordinal as usize).copied().ok_or_else(|| {
            format!(
                "device {ordinal} is not among the {} GPU(s) the process's environment leaves \
                 it",
                visible.len()
            )
        })
    }
}

fn mig(e: &str) -> String {
    format!("\"{e}\" is a MIG instance among other entries: not told apart")
}

/// The MIG instance entry `e` names: `MIG-<uuid>` (the instance's UUID, R470 drivers and
/// later) or `MIG-GPU-<gpu uuid>/<gpu instance>/<compute instance>` (earlier drivers).
fn find_mig<'a>(e: &str, gpus: &'a [NodeGpu]) -> Option<Resolved<'a>> {
    if let Some(old) = e.strip_prefix("MIG-").filter(|r| r.starts_with("GPU-")) {
        let mut parts = old.split('/');
        let (uuid, gi, ci) = (parts.next()?, parts.next()?, parts.next()?);
        let (gi, ci): (u32, u32) = (gi.parse().ok()?, ci.parse().ok()?);
        let gpu = gpus.iter().find(|g| g.uuid == uuid)?;
        let mig = gpu
            .migs
            .iter()
            .find(|m| m.gpu_instance == gi && m.compute_instance == ci)?;
        return Some(Resolved {
            gpu,
            mig: Some(mig),
        });
    }
    gpus.iter().find_map(|gpu| {
        let mig = gpu.migs.iter().find(|m| m.uuid == e)?;
        Some(Resolved {
            gpu,
            mig: Some(mig),
        })
    })
}

enum Pick<'a> {
    One(&'a NodeGpu),
    Mig,
    Nothing,
}

/// An `NVIDIA_VISIBLE_DEVICES` entry: an NVML index or a UUID, among the node's GPUs.
fn pick<'a>(e: &str, gpus: &[&'a NodeGpu]) -> Pick<'a> {
    if e.starts_with("MIG-") {
        return Pick::Mig;
    }
    if let Ok(i) = e.parse::<u32>() {
        return gpus
            .iter()
            .find(|g| g.index == i)
            .map_or(Pick::Nothing, |g| Pick::One(g));
    }
    gpus.iter()
        .find(|g| g.uuid == e)
        .map_or(Pick::Nothing, |g| Pick::One(g))
}

/// A `CUDA_VISIBLE_DEVICES` entry: a position among the devices the process can see, or a
/// unique prefix of a UUID (with or without `GPU-`).
fn pick_visible<'a>(e: &str, base: &[&'a NodeGpu]) -> Pick<'a> {
    if e.starts_with("MIG-") {
        return Pick::Mig;
    }
    if let Ok(i) = e.parse::<usize>() {
        return base.get(i).map_or(Pick::Nothing, |g| Pick::One(g));
    }
    let want = e.strip_prefix("GPU-").unwrap_or(e);
    let mut hits = base.iter().filter(|g| {
        g.uuid
            .strip_prefix("GPU-")
            .unwrap_or(&g.uuid)
            .starts_with(want)
    });
    match (hits.next(), hits.next()) {
        (Some(g), None) if !want.is_empty() => Pick::One(g),
        _ => Pick::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> Vec<NodeGpu> {
        (0..4)
            .map(|i| NodeGpu {
                index: i,
                uuid: format!("GPU-{i}a{i}b0000-1111"),
                name: "NVIDIA H100 80GB HBM3".into(),
                // GPU 2 is in MIG mode, with two instances.
                migs: match i {
                    2 => (1..=2)
                        .map(|gi| NodeMig {
                            uuid: format!("MIG-{gi}c{gi}d0000-2222"),
                            gpu_instance: gi,
                            compute_instance: 0,
                        })
                        .collect(),
                    _ => Vec::new(),
                },
            })
            .collect()
    }

    fn env(cuda: Option<&str>, nvidia: Option<&str>) -> GpuEnv {
        GpuEnv {
            cuda_visible: cuda.map(str::to_owned),
            nvidia_visible: nvidia.map(str::to_owned),
            device_order: None,
            in_container: nvidia.is_some(),
        }
    }

    fn idx(e: &GpuEnv, ordinal: u32) -> Result<u32, String> {
        e.resolve(ordinal, &node()).map(|r| r.gpu.index)
    }

    /// The GPU and MIG instance (`gpu_instance`) an ordinal is.
    fn mig_of(e: &GpuEnv, ordinal: u32) -> Result<(u32, Option<u32>), String> {
        let gpus = node();
        e.resolve(ordinal, &gpus)
            .map(|r| (r.gpu.index, r.mig.map(|m| m.gpu_instance)))
    }

    #[test]
    fn reads_the_three_variables_and_nvidia_only_in_a_container() {
        let text = b"HOME=/root\0CUDA_VISIBLE_DEVICES=2,3\0NVIDIA_VISIBLE_DEVICES=all\0\
                     CUDA_DEVICE_ORDER=PCI_BUS_ID\0";
        let e = GpuEnv::from_environ(text, true);
        assert_eq!(e.cuda_visible.as_deref(), Some("2,3"));
        assert_eq!(e.nvidia_visible.as_deref(), Some("all"));
        assert_eq!(e.device_order.as_deref(), Some("PCI_BUS_ID"));
        assert_eq!(GpuEnv::from_environ(text, false).nvidia_visible, None);
        assert_eq!(GpuEnv::from_environ(b"X=1\0", false), GpuEnv::default());
        let bare = GpuEnv::from_environ(b"X=1\0", true);
        assert_eq!(
            bare.resolve(0, &node()).map(|r| r.gpu.index),
            Err(
                "in a container that does not say which GPUs it was given (no \
                 NVIDIA_VISIBLE_DEVICES)"
                    .into()
            )
        );
    }

    #[test]
    fn cuda_visible_devices_renumbers_by_index_and_by_uuid_prefix() {
        assert_eq!(idx(&env(None, None), 2), Ok(2));
        assert_eq!(idx(&env(Some("3"), None), 0), Ok(3));
        assert_eq!(idx(&env(Some("2,0"), None), 1), Ok(0));
        assert_eq!(idx(&env(Some("GPU-1a1b"), None), 0), Ok(1));
        assert_eq!(idx(&env(Some("3a3b"), None), 0), Ok(3));
        // The list stops at the first entry that names nothing.
        assert_eq!(
            idx(&env(Some("1,7,2"), None), 1),
            Err("device 1 is not among the 1 GPU(s) the process's environment leaves it".into())
        );
        assert_eq!(
            idx(&env(Some(""), None), 0),
            Err("device 0 is not among the 0 GPU(s) the process's environment leaves it".into())
        );
        assert_eq!(
            idx(&env(Some("MIG-abc"), None), 0),
            Err("\"MIG-abc\" names no MIG instance NVML lists".into())
        );
    }

    #[test]
    fn a_mig_uuid_is_that_instance_as_device_0_and_alone() {
        // Its UUID, or the older GPU UUID with the instance ids.
        assert_eq!(
            mig_of(&env(Some("MIG-2c2d0000-2222"), None), 0),
            Ok((2, Some(2)))
        );
        let old = env(Some("MIG-GPU-2a2b0000-1111/1/0"), None);
        assert_eq!(mig_of(&old, 0), Ok((2, Some(1))));
        // Kubernetes' device plugin (mixed strategy) gives the container the instance.
        let k8s = env(None, Some("MIG-1c1d0000-2222"));
        assert_eq!(mig_of(&k8s, 0), Ok((2, Some(1))));
        assert_eq!(
            mig_of(
                &GpuEnv {
                    cuda_visible: Some("0".into()),
                    ..k8s.clone()
                },
                0
            ),
            Ok((2, Some(1)))
        );
        // CUDA enumerates one instance; nothing else is told apart.
        assert_eq!(
            mig_of(&env(Some("MIG-1c1d0000-2222,MIG-2c2d0000-2222"), None), 1),
            Err("CUDA enumerates one MIG instance per process: device 1 is none".into())
        );
        assert_eq!(
            mig_of(&env(Some("0,MIG-1c1d0000-2222"), None), 0),
            Err(
                "\"0,MIG-1c1d0000-2222\" mixes MIG instances and whole GPUs: not told apart".into()
            )
        );
        assert_eq!(
            mig_of(
                &GpuEnv {
                    cuda_visible: Some("1".into()),
                    ..k8s
                },
                0
            ),
            Err("CUDA_VISIBLE_DEVICES renumbers a container's MIG instance: not told apart".into())
        );
        // A whole GPU stays a whole GPU.
        assert_eq!(mig_of(&env(Some("2"), None), 0), Ok((2, None)));
    }

    #[test]
    fn a_container_sees_its_gpus_in_bus_order_then_cuda_visible_devices_applies() {
        // The Kubernetes device plugin gives UUIDs, in any order.
        let k8s = env(None, Some("GPU-3a3b0000-1111,GPU-1a1b0000-1111"));
        assert_eq!(idx(&k8s, 0), Ok(1));
        assert_eq!(idx(&k8s, 1), Ok(3));
        assert_eq!(idx(&env(Some("1"), Some("2,3")), 0), Ok(3));
        assert_eq!(idx(&env(None, Some("all")), 3), Ok(3));
        assert_eq!(
            idx(&env(None, Some("void")), 0),
            Err("NVIDIA_VISIBLE_DEVICES gives the container no GPU".into())
        );
        assert_eq!(
            idx(&env(None, Some("9")), 0),
            Err("NVIDIA_VISIBLE_DEVICES entry \"9\" names no GPU NVML lists".into())
        );
    }

    #[test]
    fn mixed_models_need_pci_bus_order() {
        let mut gpus = node();
        gpus[1].name = "NVIDIA A100-SXM4-40GB".into();
        let e = env(None, None);
        assert!(e.resolve(0, &gpus).is_err());
        let ordered = GpuEnv {
            device_order: Some("PCI_BUS_ID".into()),
            ..e
        };
        assert_eq!(ordered.resolve(1, &gpus).map(|r| r.gpu.index), Ok(1));
        // Positions depend on the order; UUIDs do not.
        assert!(env(Some("2,3"), None).resolve(1, &gpus).is_err());
        let by_uuid = env(Some("GPU-2a2b,GPU-1a1b"), None);
        assert_eq!(by_uuid.resolve(1, &gpus).map(|r| r.gpu.index), Ok(1));
    }
}
