//! Reading a capture file back: the report it holds (replay), its records in order (with
//! the API table and process generation of each, and the names its stacks need), its NVML
//! samples.

use super::{End, FileHeader, Frame, Reader, Recovery, StoreError};
use crate::api::ApiTable;
use crate::capture::records;
use crate::enrich::jobs::Job;
use crate::enrich::names::SymbolResolver;
use crate::enrich::stacks::{StackResolver, StackSym};
use crate::model::snapshot::{Report, ReportMeta};
use crate::model::{Aggregator, ProcessMeta};
use profiler_common::decode::{DecodeError, Event, decode};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};
/// Host-stub names read back from the file's [`Frame::Symbols`].
#[derive(Clone, Default)]
struct StoredSymbols(Arc<Mutex<HashMap<(u32, u64), String>>>);

impl SymbolResolver for StoredSymbols {
    fn resolve(&self, tgid: u32, addr: u64) -> Option<String> {
        self.0.lock().ok()?.get(&(tgid, addr)).cloned()
    }
}

/// A capture file read back into the model.
pub struct Replay {
    pub header: FileHeader,
    pub report: Report,
    /// [`Aggregator::kernel_names`] of the replayed run.
    pub kernel_names: HashMap<(u32, u32, u64, bool), String>,
    pub recovery: Recovery,
    pub end: Option<End>,
    /// Each process's thread id map (`Frame::Tids`, the last one): `(tgid, generation)` →
    /// CUPTI's thread ids → the kernel's, for the timeline's join of GPU records to launches.
    pub tids: HashMap<(u32, u32), crate::model::gpu_join::Tids>,
    /// The capture's `Frame::Clock`s, in order (none before schema 10): the wall clock against
    /// CLOCK_MONOTONIC at its start and, when it stopped cleanly, at its end.
    pub clocks: Vec<crate::sys::clock::WallPair>,
}

/// Why a walk over a capture file's records stopped before its end.
#[derive(Debug, thiserror::Error)]
pub enum WalkError<E: std::error::Error + 'static> {
    /// The file could not be opened or is no capture file.
    #[error(transparent)]
    Open(#[from] StoreError),
    /// The visitor stopped the walk.
    #[error(transparent)]
    Stopped(E),
}

/// What a walk hands its visitor.
enum Visit<'a> {
    /// A decodable record, with the API table in force and its process's generation.
    Record(&'a ApiTable, u32, &'a Event),
    /// `tgid` now belongs to a new process, its generation `g`.
    Retire(u32, u32),
}

/// One pass over the records of `path`, in order. A tgid's generation (how many processes had
/// it before in the capture, as [`Aggregator::kernel_names`] counts them) goes up at each
/// [`Frame::Retire`]. Returns why reading stopped early (damage), if it did.
fn walk<E: std::error::Error + 'static>(
    path: &Path,
    mut visit: impl FnMut(Visit<'_>) -> Result<(), E>,
) -> Result<Option<String>, WalkError<E>> {
    let mut r = Reader::open(path)?;
    let mut api = ApiTable::new();
    let mut generation: HashMap<u32, u32> = HashMap::new();
    while let Some(frame) = r.next_frame() {
        match frame {
            Frame::Api(list) => api = ApiTable::from_list(list),
            Frame::Retire { tgid } => {
                let g = generation.entry(tgid).or_insert(0);
                *g += 1;
                visit(Visit::Retire(tgid, *g)).map_err(WalkError::Stopped)?;
            }
            Frame::Records(bytes) => {
                for rec in records(&bytes) {
                    if let Ok(ev) = decode(rec) {
                        let g = generation.get(&ev.header().tgid).copied().unwrap_or(0);
                        visit(Visit::Record(&api, g, &ev)).map_err(WalkError::Stopped)?;
                    }
                }
            }
            _ => {}
        }
    }
    Ok(r.damage)
}

/// Hands every decodable record of `path` to `each`, in order, with the API table in force and
/// the record's process generation. One pass over the file. Returns why reading stopped early
/// (damage), if it did.
pub fn for_each_record<E: std::error::Error + 'static>(
    path: &Path,
    mut each: impl FnMut(&ApiTable, u32, &Event) -> Result<(), E>,
) -> Result<Option<String>, WalkError<E>> {
    walk(path, |v| match v {
        Visit::Record(api, g, ev) => each(api, g, ev),
        Visit::Retire(..) => Ok(()),
    })
}

/// [`for_each_record`], with the names of every stack frame of the record's process (to name
/// stacks). The file is read twice: a native frame's name is written when the daemon has
/// found it, which may be after the stack that needs it (but always before the process's
/// [`Frame::Retire`]).
pub fn for_each_record_named<E: std::error::Error + 'static>(
    path: &Path,
    mut each: impl FnMut(&ApiTable, u32, &Event, &StackResolver) -> Result<(), E>,
) -> Result<Option<String>, WalkError<E>> {
    // The names of each process, by (tgid, generation): a tgid's generation goes up at each
    // Retire (a reused pid, an exec).
    let mut names: HashMap<(u32, u32), Vec<StackSym>> = HashMap::new();
    {
        let mut r = Reader::open(path)?;
        let mut generation: HashMap<u32, u32> = HashMap::new();
        while let Some(frame) = r.next_frame() {
            match frame {
                Frame::StackSyms(v) => {
                    for s in v {
                        let g = generation.get(&s.tgid()).copied().unwrap_or(0);
                        names.entry((s.tgid(), g)).or_default().push(s);
                    }
                }
                Frame::Retire { tgid } => *generation.entry(tgid).or_insert(0) += 1,
                _ => {}
            }
        }
    }
    let mut stacks = StackResolver::replay();
    let first: Vec<(u32, u32)> = names.keys().copied().filter(|k| k.1 == 0).collect();
    for k in first {
        stacks.learn(names.remove(&k).unwrap_or_default());
    }
    walk(path, |v| match v {
        Visit::Record(api, g, ev) => each(api, g, ev, &stacks),
        Visit::Retire(tgid, g) => {
            stacks.forget(tgid);
            stacks.learn(names.remove(&(tgid, g)).unwrap_or_default());
            Ok(())
        }
    })
}

/// The NVML samples in `path`, in order.
pub fn nvml_samples(path: &Path) -> Result<Vec<crate::nvml::Sample>, StoreError> {
    let mut r = Reader::open(path)?.without_records();
    let mut out = Vec::new();
    while let Some(frame) = r.next_frame() {
        if let Frame::Nvml(s) = frame {
            out.push(s);
        }
    }
    Ok(out)
}

/// What numbers the CUDA devices of `path`'s processes as the node's GPUs: each process's
/// device-numbering environment (its last `GpuEnv` frame; schema 8 and later) and the GPUs NVML
/// listed (its last round; none where NVML was off).
pub fn node_gpu_map(path: &Path) -> Result<crate::model::devices::NodeGpuMap, StoreError> {
    let mut r = Reader::open(path)?.without_records();
    let mut map = crate::model::devices::NodeGpuMap::default();
    while let Some(frame) = r.next_frame() {
        match frame {
            Frame::GpuEnv { tgid, env } => {
                map.envs.insert(tgid, env);
            }
            Frame::Nvml(s) if !s.devices.is_empty() => {
                map.gpus = s
                    .devices
                    .iter()
                    .map(|d| crate::enrich::gpu_env::NodeGpu {
                        index: d.index,
                        uuid: d.uuid.clone(),
                        name: d.name.clone(),
                        migs: Vec::new(),
                    })
                    .collect();
            }
            // The round's MIG instances (the frame follows its round's).
            Frame::NvmlMig(round) => {
                for g in &mut map.gpus {
                    g.migs = crate::model::devices::node_migs(&round.instances, g.index);
                }
            }
            _ => {}
        }
    }
    Ok(map)
}

/// The GPM frames of `path`, in order (none in files from before schema 6).
pub fn gpm_samples(path: &Path) -> Result<Vec<crate::nvml::gpm::Gpm>, StoreError> {
    let mut r = Reader::open(path)?.without_records();
    let mut out = Vec::new();
    while let Some(frame) = r.next_frame() {
        if let Frame::NvmlGpm(g) = frame {
            out.push(g);
        }
    }
    Ok(out)
}

/// Reads `path` and rebuilds the report the daemon made from the same calls.
pub fn replay(path: &Path) -> Result<Replay, StoreError> {
    replay_visiting(path, |_, _, _| {})
}

/// [`replay`], handing every decodable record to `visit` on the way (with the API table in
/// force and the record's process generation, as [`for_each_record`] does): what else needs
/// the records gets them from the same pass.
pub fn replay_visiting(
    path: &Path,
    visit: impl FnMut(&ApiTable, u32, &Event),
) -> Result<Replay, StoreError> {
    replay_selecting(path, |_| true, visit)
}

/// [`replay_visiting`] of only the records `keep` keeps (`report --device N`).
pub fn replay_selecting(
    path: &Path,
    keep: impl Fn(&Event) -> bool,
    mut visit: impl FnMut(&ApiTable, u32, &Event),
) -> Result<Replay, StoreError> {
    let mut r = Reader::open(path)?;
    let header = match r.next_frame() {
        Some(Frame::Header(h)) => h,
        Some(_) => {
            return Err(StoreError::NoHeader {
                path: r.path.clone(),
                reason: "its first frame is not the header".into(),
            });
        }
        None => {
            return Err(StoreError::NoHeader {
                path: r.path.clone(),
                reason: r.damage.clone().unwrap_or_else(|| "it is empty".into()),
            });
        }
    };
    let symbols = StoredSymbols::default();
    let mut agg = Aggregator::new(ApiTable::new(), Box::new(symbols.clone()));
    let mut end = None;
    let mut faults = BTreeMap::new();
    let mut generation: HashMap<u32, u32> = HashMap::new();
    let mut tids_of = HashMap::new();
    let mut clocks = Vec::new();
    let mut api = ApiTable::new();
    let mut n_records = 0u64;
    let mut last_ts = header.started_at_monotonic_ns;
    while let Some(frame) = r.next_frame() {
        match frame {
            Frame::Header(_) => {}
            Frame::Api(list) => {
                api = ApiTable::from_list(list);
                agg.set_api_table(api.clone());
            }
            Frame::Records(bytes) => {
                for rec in records(&bytes) {
                    n_records += 1;
                    match decode(rec) {
                        Ok(ev) if !keep(&ev) => last_ts = last_ts.max(ev.header().ts_ns),
                        Ok(ev) => {
                            last_ts = last_ts.max(ev.header().ts_ns);
                            let g = generation.get(&ev.header().tgid).copied().unwrap_or(0);
                            visit(&api, g, &ev);
                            agg.apply(&ev);
                        }
                        Err(DecodeError::UnknownKind { kind })
                        | Err(DecodeError::WrongLength { kind, .. }) => {
                            agg.record_decode_error(kind)
                        }
                        Err(DecodeError::Short { .. }) => agg.record_decode_error(0),
                    }
                }
            }
            Frame::Process { tgid, process } => agg.set_process_meta(
                tgid,
                ProcessMeta {
                    comm: process.comm,
                    cmdline: process.cmdline,
                    exited: process.exited,
                    job: process.job.map(Job::from),
                    start_time: process.start_time,
                    owner: None,
                    gpu_env: None,
                },
            ),
            Frame::Retire { tgid } => {
                *generation.entry(tgid).or_insert(0) += 1;
                agg.retire(tgid);
            }
            Frame::Exited { tgid } => agg.mark_exited(tgid),
            Frame::Job { tgid, job } => agg.set_job(tgid, job.into()),
            Frame::Symbols(list) => {
                if let Ok(mut m) = symbols.0.lock() {
                    m.extend(list.into_iter().map(|(t, a, n)| ((t, a), n)));
                }
            }
            Frame::End(e) => end = Some(e),
            Frame::Nvml(s) => agg.apply_nvml(&s),
            Frame::NvmlStopped(why) => agg.nvml_stopped(&why),
            Frame::NvmlOff => agg.nvml_off(),
            Frame::NvmlHealth(h) => agg.apply_nvml_health(&h),
            Frame::StackSyms(v) => agg.stacks_mut().learn(v),
            Frame::Libraries(v) => agg.set_libraries(v),
            Frame::Faults(f) => faults = f,
            Frame::NvmlGpm(g) => agg.apply_nvml_gpm(&g),
            Frame::NvmlMig(v) => agg.apply_nvml_mig(&v),
            Frame::GpuEnv { tgid, env } => agg.set_gpu_env(tgid, env),
            Frame::Tids { tgid, tids } => {
                let g = generation.get(&tgid).copied().unwrap_or(0);
                tids_of.insert((tgid, g), tids.clone());
                agg.set_tids(tgid, tids);
            }
            Frame::Clock(c) => clocks.push(c),
        }
    }
    let started_at = UNIX_EPOCH + Duration::from_nanos(header.started_at_unix_ns);
    let meta = match &end {
        Some(e) => ReportMeta {
            host: header.host.clone(),
            started_at,
            started_mono_ns: header.started_at_monotonic_ns,
            duration_ns: e.duration_ns,
            drops: e.drops.clone(),
            submitted: e.submitted.clone(),
            faults,
        },
        None => ReportMeta {
            host: header.host.clone(),
            started_at,
            started_mono_ns: header.started_at_monotonic_ns,
            duration_ns: last_ts.saturating_sub(header.started_at_monotonic_ns),
            drops: BTreeMap::new(),
            submitted: BTreeMap::new(),
            faults,
        },
    };
    let report = agg.report(meta);
    Ok(Replay {
        header,
        report,
        kernel_names: agg.kernel_names(),
        tids: tids_of,
        clocks,
        recovery: Recovery {
            frames: r.frames,
            records: n_records,
            bytes: r.offset,
            damage: r.damage.clone(),
            complete: end.is_some(),
        },
        end,
    })
}
