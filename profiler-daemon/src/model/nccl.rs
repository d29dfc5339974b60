//! NCCL per process: its communicators (rank, number of ranks, device, an id the same in every
//! rank) and, per communicator and operation, the calls, bytes, datatypes, reductions, streams
//! and the calls made inside a `ncclGroupStart`/`ncclGroupEnd` group.
//!
//! A communicator is known by its handle (`ncclComm_t`) within the process. One made before
//! gpuprofd attached is first seen at its first use: its rank and size stay unknown until the
//! program calls `ncclCommUserRank`/`ncclCommCount` (or `ncclCommCuDevice` for the device), and
//! its calls are counted all the same. The communicator id is FNV-1a (64-bit) over the 128
//! bytes of the `ncclUniqueId` the ranks were made with: a fixed, documented function (five
//! lines, not worth a crate) so that captures from different nodes and gpuprofd versions
//! agree. A split communicator's id is FNV-1a over its parent's id and the color (the same in
//! every rank of the new communicator); a clique made by `ncclCommInitAll` (one process) gets
//! FNV-1a over the process id and its first communicator's handle.

use profiler_common::nccl::{NcclBody, call, datatype, nflags, redop};
use profiler_common::{Header, device};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Streams remembered per operation (more are counted, not listed).
const MAX_STREAMS: usize = 16;
/// Live communicators listed per process; calls on further unknown handles (a program passing
/// garbage handles) count in the totals only.
const MAX_LIVE: usize = 1024;
/// Ended communicators listed per process (the oldest go first; their calls stay in the
/// totals).
const MAX_ENDED: usize = 256;
/// The datatype key of values NCCL does not define (one row for all of them).
const BAD_DATATYPE: u32 = u32::MAX;
/// Threads with a call waiting for its kernel remembered per process.
const MAX_PENDING_THREADS: usize = 1024;
/// The reduction key of operators made by `ncclRedOpCreatePreMulSum` (values from 5 up).
const CUSTOM_REDOP: u32 = 5;

/// Whether a kernel (CUPTI's name, mangled or not) is one of NCCL's: its device kernels are
/// `ncclDevKernel_*` (NCCL 2.19 and later) or `ncclKernel_*` (earlier), in every build.
pub fn is_nccl_kernel(name: &[u8]) -> bool {
    [b"ncclDevKernel_".as_slice(), b"ncclKernel_".as_slice()]
        .iter()
        .any(|p| name.windows(p.len()).any(|w| w == *p))
}

/// FNV-1a, 64-bit, over `bytes`, continuing from `h` (start: [`FNV_OFFSET`]).
fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// The communicator id of unique id `id` (see the module's header).
pub fn comm_id(id: &[u8]) -> u64 {
    fnv1a(FNV_OFFSET, id)
}

/// How a communicator came to be known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    /// Made by this call (a [`call`] value).
    Made(u32),
    /// Made before gpuprofd attached (first seen in use).
    BeforeAttach,
}

#[derive(Clone, Debug, Default)]
struct OpStat {
    calls: u64,
    bytes: u64,
    in_group: u64,
    datatypes: BTreeMap<u32, u64>,
    reductions: BTreeMap<u32, u64>,
    streams: BTreeSet<u64>,
    more_streams: bool,
    /// Calls per device (wire value: device + 1, 0 unknown).
    devices: BTreeMap<u32, u64>,
    /// Kernels the calls launched that CUPTI timed (joined to their launch), and their GPU ns.
    gpu_kernels: u64,
    gpu_ns: u64,
}

#[derive(Clone, Debug)]
struct Comm {
    handle: u64,
    origin: Origin,
    id: Option<u64>,
    rank: Option<i32>,
    nranks: Option<i32>,
    device: Option<u32>,
    parent_id: Option<u64>,
    color: Option<i32>,
    /// `CommDestroy` or `CommAbort` when it ended.
    ended: Option<u32>,
    /// A creation that failed (the call's `ncclResult_t`).
    failed: Option<i32>,
    ops: BTreeMap<u32, OpStat>,
}

impl Comm {
    fn new(handle: u64, origin: Origin) -> Comm {
        Comm {
            handle,
            origin,
            id: None,
            rank: None,
            nranks: None,
            device: None,
            parent_id: None,
            color: None,
            ended: None,
            failed: None,
            ops: BTreeMap::new(),
        }
    }
}

/// A process's NCCL state.
#[derive(Clone, Debug, Default)]
pub struct Nccl {
    /// Live communicators by handle.
    live: HashMap<u64, Comm>,
    /// Communicators that ended (or whose handle was reused), in order.
    done: std::collections::VecDeque<Comm>,
    /// Collectives and sends/receives, and their bytes, over every communicator (listed or not).
    calls: u64,
    bytes: u64,
    /// Communicators left out of the list (see [`MAX_LIVE`], [`MAX_ENDED`]).
    not_listed: u64,
    /// Per thread, the call whose kernel is launched next ([`Self::expect_kernel`]), and
    /// whether it was made in a group.
    pending: HashMap<u32, (u64, u32, bool)>,
}

fn known(v: i32) -> Option<i32> {
    (v >= 0).then_some(v)
}

impl Nccl {
    /// The thread's NCCL call whose kernel its next launch of one of NCCL's kernels is:
    /// `(communicator, call)`. A call's record comes at its entry, before the kernel it
    /// launches inside; a group's calls launch one kernel at `ncclGroupEnd` (which leaves no
    /// record), given to the group's first call.
    fn expect_kernel(&mut self, tid: u32, b: &NcclBody) {
        if self.pending.len() >= MAX_PENDING_THREADS && !self.pending.contains_key(&tid) {
            return;
        }
        let in_group = b.group > 0;
        match self.pending.get(&tid) {
            // A later call of the same group: the group's kernel stays the first call's.
            Some(&(_, _, true)) if in_group => {}
            _ => {
                self.pending.insert(tid, (b.comm, b.call, in_group));
            }
        }
    }

    /// Whether an NCCL call of thread `tid` waits for its kernel.
    pub fn waits_for_kernel(&self, tid: u32) -> bool {
        !self.pending.is_empty() && self.pending.contains_key(&tid)
    }

    /// A launch of one of NCCL's kernels on `tid`: the call it was for, if one is waiting.
    pub fn take_kernel(&mut self, tid: u32) -> Option<(u64, u32)> {
        self.pending
            .remove(&tid)
            .map(|(comm, call, _)| (comm, call))
    }

    /// A kernel that call `call` on communicator `comm` launched ran `ns` on the GPU.
    pub fn kernel(&mut self, comm: u64, call: u32, ns: u64) {
        let c = match self.live.get_mut(&comm) {
            Some(c) => Some(c),
            // Its records come after the call; the communicator may have ended since.
            None => self.done.iter_mut().rev().find(|c| c.handle == comm),
        };
        if let Some(s) = c.and_then(|c| c.ops.get_mut(&call)) {
            s.gpu_kernels += 1;
            s.gpu_ns = s.gpu_ns.saturating_add(ns);
        }
    }

    /// Whether the process made any NCCL call the probes recorded.
    pub fn is_empty(&self) -> bool {
        self.live.is_empty() && self.done.is_empty() && self.calls == 0 && self.not_listed == 0
    }

    /// The live communicator `handle`, made (as one from before the attach) if unknown; `None`
    /// when [`MAX_LIVE`] are listed already.
    fn comm(&mut self, handle: u64) -> Option<&mut Comm> {
        if !self.live.contains_key(&handle) && self.live.len() >= MAX_LIVE {
            self.not_listed += 1;
            return None;
        }
        Some(
            self.live
                .entry(handle)
                .or_insert_with(|| Comm::new(handle, Origin::BeforeAttach)),
        )
    }

    /// `c` ended (or its handle was reused): listed among the ended ones, within [`MAX_ENDED`].
    fn end(&mut self, c: Comm) {
        if self.done.len() >= MAX_ENDED {
            self.done.pop_front();
            self.not_listed += 1;
        }
        self.done.push_back(c);
    }

    /// A communicator made by `c` with handle `handle`: a live one with that handle is done.
    fn made(&mut self, handle: u64, c: u32) -> Option<&mut Comm> {
        if let Some(old) = self.live.remove(&handle) {
            self.end(old);
        }
        if self.live.len() >= MAX_LIVE {
            self.not_listed += 1;
            return None;
        }
        Some(
            self.live
                .entry(handle)
                .or_insert(Comm::new(handle, Origin::Made(c))),
        )
    }

    /// Applies one NCCL record of process `h.tgid`.
    pub fn apply(&mut self, h: &Header, b: &NcclBody) {
        let dev = device::of(b.flags);
        match b.call {
            // `NCCL_SPLIT_NOCOLOR`: the rank took part in the split and got no communicator.
            call::SPLIT if profiler_common::nccl::made(b.ret) && b.comm == 0 => {}
            call::INIT_RANK | call::INIT_RANK_CONFIG | call::INIT_ALL | call::SPLIT
                if !profiler_common::nccl::made(b.ret) || b.comm == 0 =>
            {
                // Failed: kept, under no handle, so that the report says so.
                let mut c = Comm::new(0, Origin::Made(b.call));
                c.failed = Some(b.ret);
                c.nranks = known(b.nranks);
                c.rank = known(b.rank);
                self.end(c);
            }
            call::INIT_RANK | call::INIT_RANK_CONFIG => {
                if let Some(c) = self.made(b.comm, b.call) {
                    c.rank = known(b.rank);
                    c.nranks = known(b.nranks);
                    c.device = dev;
                    c.id = (b.flags & nflags::HAS_ID != 0).then(|| comm_id(&b.id));
                }
            }
            call::INIT_ALL => {
                let mut key = [0u8; 12];
                key[..4].copy_from_slice(&h.tgid.to_le_bytes());
                key[4..].copy_from_slice(&b.parent.to_le_bytes());
                if let Some(c) = self.made(b.comm, b.call) {
                    c.rank = known(b.rank);
                    c.nranks = known(b.nranks);
                    c.device = dev;
                    c.id = Some(comm_id(&key));
                }
            }
            call::SPLIT => {
                let parent_id = self.live.get(&b.parent).and_then(|p| p.id);
                if let Some(c) = self.made(b.comm, b.call) {
                    c.device = dev;
                    c.parent_id = parent_id;
                    c.color = Some(b.peer);
                    c.id = parent_id
                        .map(|p| fnv1a(fnv1a(FNV_OFFSET, &p.to_le_bytes()), &b.peer.to_le_bytes()));
                }
            }
            call::DESTROY | call::ABORT => {
                let mut c = match self.live.remove(&b.comm) {
                    Some(c) => c,
                    None => Comm::new(b.comm, Origin::BeforeAttach),
                };
                c.ended = Some(b.call);
                self.end(c);
            }
            call::COUNT | call::USER_RANK | call::CU_DEVICE => {
                if b.ret != 0 || b.peer < 0 {
                    return;
                }
                let Some(c) = self.comm(b.comm) else { return };
                match b.call {
                    call::COUNT => c.nranks = Some(b.peer),
                    call::USER_RANK => c.rank = Some(b.peer),
                    _ => c.device = u32::try_from(b.peer).ok(),
                }
            }
            op if call::is_op(op) => {
                self.expect_kernel(h.tid, b);
                self.calls += 1;
                self.bytes = self.bytes.saturating_add(b.bytes());
                let Some(c) = self.comm(b.comm) else { return };
                if c.device.is_none() {
                    c.device = dev;
                }
                let s = c.ops.entry(op).or_default();
                s.calls += 1;
                s.bytes = s.bytes.saturating_add(b.bytes());
                if b.group > 0 {
                    s.in_group += 1;
                }
                let dt = if datatype::name(b.datatype).is_some() {
                    b.datatype
                } else {
                    BAD_DATATYPE
                };
                *s.datatypes.entry(dt).or_default() += 1;
                if b.redop != redop::NONE {
                    *s.reductions.entry(b.redop.min(CUSTOM_REDOP)).or_default() += 1;
                }
                if s.streams.len() < MAX_STREAMS || s.streams.contains(&b.stream) {
                    s.streams.insert(b.stream);
                } else {
                    s.more_streams = true;
                }
                let wire = (b.flags & profiler_common::flags::DEVICE_MASK)
                    >> profiler_common::flags::DEVICE_SHIFT;
                *s.devices.entry(wire).or_default() += 1;
            }
            _ => {}
        }
    }

    /// The report (`None` when the process made no NCCL call).
    pub fn report(&self) -> Option<NcclReport> {
        if self.is_empty() {
            return None;
        }
        let mut live: Vec<&Comm> = self.live.values().collect();
        live.sort_by_key(|c| c.handle);
        let communicators: Vec<CommReport> =
            self.done.iter().chain(live).map(CommReport::of).collect();
        Some(NcclReport {
            calls: self.calls,
            bytes: self.bytes,
            communicators,
            communicators_not_listed: self.not_listed,
        })
    }
}

/// What a process did with NCCL (`processes[].nccl` in the JSON report).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NcclReport {
    /// Collectives and sends/receives, over every communicator.
    pub calls: u64,
    /// Their bytes (see [`CollectiveReport::bytes`]).
    pub bytes: u64,
    /// Communicators that ended first (in order), then the live ones by handle.
    pub communicators: Vec<CommReport>,
    /// Communicators left out of the list (more than 1,024 live or 256 ended in one process):
    /// their calls are in `calls` and `bytes` all the same.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub communicators_not_listed: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One communicator of a process.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CommReport {
    /// The `ncclComm_t` in the process (hex); `null` for a creation that failed.
    pub handle: Option<String>,
    /// 16 hex digits, the same in every rank of the communicator (see docs/USAGE.md);
    /// `null` when not known (made before the attach, or split from such a one).
    pub id: Option<String>,
    pub rank: Option<i32>,
    pub nranks: Option<i32>,
    /// The CUDA device (the calling thread's at creation, else `ncclCommCuDevice`'s answer,
    /// else the device of its first collective's stream).
    pub device: Option<u32>,
    /// `ncclCommInitRank`, `ncclCommInitRankConfig`, `ncclCommInitAll`, `ncclCommSplit`, or
    /// `before_attach` (first seen in use).
    pub created_by: String,
    /// A split: the parent's id and the color.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub color: Option<i32>,
    /// `destroyed`, `aborted`, or `null` while live.
    pub ended: Option<String>,
    /// The `ncclResult_t` of a creation that failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<i32>,
    /// Per operation, most calls first.
    pub ops: Vec<CollectiveReport>,
}

/// One operation on one communicator.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CollectiveReport {
    /// NCCL's name without `nccl`: `AllReduce`, `AllGather`, `ReduceScatter`, `Broadcast`,
    /// `Reduce`, `AlltoAll`, `Send`, `Recv`.
    pub op: String,
    pub calls: u64,
    /// Σ count × datatype size, with NCCL's `count` (per rank for AllGather and
    /// ReduceScatter, per peer for AlltoAll).
    pub bytes: u64,
    /// Calls made between `ncclGroupStart` and `ncclGroupEnd`.
    pub in_group: u64,
    /// Calls per datatype (`float32`, `bfloat16`, …; `unknown` for values NCCL lacks).
    pub datatypes: BTreeMap<String, u64>,
    /// Calls per reduction (`sum`, `avg`, …); empty for operations without one.
    pub reductions: BTreeMap<String, u64>,
    /// The streams used (hex), at most 16.
    pub streams: Vec<String>,
    /// More streams than listed were used.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub more_streams: bool,
    /// Calls per device (the stream's, else the calling thread's; `unknown`).
    pub devices: BTreeMap<String, u64>,
    /// **Measured** (CUPTI, the injection library): the kernels the calls launched, each
    /// joined to its launch — made inside the call, or for calls in a group at its
    /// `ncclGroupEnd` (given to the group's first call) — and their GPU time. Absent where
    /// none was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_kernels: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_ns: Option<u64>,
}

fn hex(v: u64) -> String {
    format!("{v:#x}")
}

fn id_text(v: u64) -> String {
    format!("{v:016x}")
}

impl CommReport {
    fn of(c: &Comm) -> CommReport {
        let mut ops: Vec<CollectiveReport> = c
            .ops
            .iter()
            .map(|(&op, s)| CollectiveReport {
                op: call::name(op).unwrap_or("unknown").to_owned(),
                calls: s.calls,
                bytes: s.bytes,
                in_group: s.in_group,
                datatypes: s
                    .datatypes
                    .iter()
                    .map(|(&d, &n)| (datatype::name(d).unwrap_or("unknown").to_owned(), n))
                    .collect(),
                reductions: s
                    .reductions
                    .iter()
                    .map(|(&r, &n)| (redop::name(r).to_owned(), n))
                    .collect(),
                streams: s.streams.iter().map(|&x| hex(x)).collect(),
                more_streams: s.more_streams,
                devices: s
                    .devices
                    .iter()
                    .map(|(&w, &n)| {
                        let k = match w {
                            0 => "unknown".to_owned(),
                            w => (w - 1).to_string(),
                        };
                        (k, n)
                    })
                    .collect(),
                gpu_kernels: (s.gpu_kernels > 0).then_some(s.gpu_kernels),
                gpu_ns: (s.gpu_kernels > 0).then_some(s.gpu_ns),
            })
            .collect();
        ops.sort_by(|a, b| b.calls.cmp(&a.calls).then_with(|| a.op.cmp(&b.op)));
        CommReport {
            handle: (c.handle != 0).then(|| hex(c.handle)),
            id: c.id.map(id_text),
            rank: c.rank,
            nranks: c.nranks,
            device: c.device,
            created_by: match c.origin {
                Origin::Made(k) => format!("nccl{}", call::name(k).unwrap_or("?")),
                Origin::BeforeAttach => "before_attach".to_owned(),
            },
            parent_id: c.parent_id.map(id_text),
            color: c.color,
            ended: c.ended.map(|e| {
                if e == call::ABORT {
                    "aborted".to_owned()
                } else {
                    "destroyed".to_owned()
                }
            }),
            error: c.failed,
            ops,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profiler_common::kind;

    fn h() -> Header {
        Header {
            kind: kind::NCCL,
            api: 0,
            tgid: 7,
            tid: 7,
            ts_ns: 1,
        }
    }

    fn init(comm: u64, rank: i32, nranks: i32, seed: u8, dev: i64) -> NcclBody {
        let mut b = NcclBody {
            comm,
            call: call::INIT_RANK,
            rank,
            nranks,
            flags: nflags::HAS_ID | nflags::HAS_RETURN | device::with(0, device::wire(dev)),
            ..NcclBody::default()
        };
        b.id = [seed; 128];
        b
    }

    fn op(comm: u64, c: u32, count: u64, dt: u32, r: u32, group: u32) -> NcclBody {
        NcclBody {
            comm,
            call: c,
            count,
            datatype: dt,
            redop: r,
            group,
            stream: 0x50,
            flags: device::with(0, device::wire(1)),
            ..NcclBody::default()
        }
    }

    #[test]
    fn fnv1a_is_the_published_function() {
        // FNV-1a 64 test vectors (Fowler, Noll, Vo).
        assert_eq!(comm_id(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(comm_id(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(comm_id(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn collectives_per_communicator_with_bytes_groups_and_types() {
        let mut n = Nccl::default();
        n.apply(&h(), &init(0x1000, 2, 4, 9, 1));
        for _ in 0..3 {
            n.apply(&h(), &op(0x1000, call::ALL_REDUCE, 1000, 7, 0, 0));
        }
        n.apply(&h(), &op(0x1000, call::ALL_REDUCE, 10, 9, 4, 1));
        n.apply(&h(), &op(0x1000, call::ALL_GATHER, 256, 0, redop::NONE, 1));
        let r = n.report().unwrap();
        assert_eq!((r.calls, r.bytes), (5, 3 * 4000 + 20 + 256));
        let c = &r.communicators[0];
        assert_eq!((c.rank, c.nranks, c.device), (Some(2), Some(4), Some(1)));
        assert_eq!(c.id.as_deref(), Some(id_text(comm_id(&[9; 128])).as_str()));
        assert_eq!(c.created_by, "ncclCommInitRank");
        let ar = &c.ops[0];
        assert_eq!(
            (ar.op.as_str(), ar.calls, ar.bytes, ar.in_group),
            ("AllReduce", 4, 12020, 1)
        );
        assert_eq!(ar.datatypes["float32"], 3);
        assert_eq!(ar.datatypes["bfloat16"], 1);
        assert_eq!((ar.reductions["sum"], ar.reductions["avg"]), (3, 1));
        assert_eq!(ar.streams, ["0x50"]);
        assert_eq!(ar.devices["1"], 4);
        assert!(c.ops[1].reductions.is_empty());
    }

    #[test]
    fn kernels_go_to_the_call_that_launched_them_and_a_group_s_to_its_first_call() {
        let mut n = Nccl::default();
        n.apply(&h(), &init(0x1000, 0, 2, 9, 0));
        let t = h().tid;
        // Outside a group: the call's own kernel.
        n.apply(&h(), &op(0x1000, call::ALL_REDUCE, 1000, 7, 0, 0));
        assert_eq!(n.take_kernel(t), Some((0x1000, call::ALL_REDUCE)));
        assert_eq!(n.take_kernel(t), None, "one kernel per call");
        n.kernel(0x1000, call::ALL_REDUCE, 700);
        // A call that launched nothing (world size 1 may copy instead): the next call's kernel
        // is the next call's.
        n.apply(&h(), &op(0x1000, call::BROADCAST, 8, 0, redop::NONE, 0));
        // A group: a send and a receive, one kernel at its end, the first call's.
        n.apply(&h(), &op(0x1000, call::SEND, 64, 0, redop::NONE, 1));
        n.apply(&h(), &op(0x1000, call::RECV, 64, 0, redop::NONE, 1));
        assert_eq!(n.take_kernel(t), Some((0x1000, call::SEND)));
        n.kernel(0x1000, call::SEND, 300);
        // Records that come after the communicator ended still count.
        n.apply(
            &h(),
            &NcclBody {
                comm: 0x1000,
                call: call::DESTROY,
                ..NcclBody::default()
            },
        );
        n.kernel(0x1000, call::ALL_REDUCE, 100);
        let c = &n.report().unwrap().communicators[0];
        let gpu = |op: &str| {
            let o = c.ops.iter().find(|o| o.op == op).unwrap();
            (o.gpu_kernels, o.gpu_ns)
        };
        assert_eq!(gpu("AllReduce"), (Some(2), Some(800)));
        assert_eq!(gpu("Send"), (Some(1), Some(300)));
        assert_eq!(gpu("Recv"), (None, None));
        assert_eq!(gpu("Broadcast"), (None, None));
    }

    #[test]
    fn a_communicator_from_before_the_attach_learns_its_rank_when_asked() {
        let mut n = Nccl::default();
        n.apply(&h(), &op(0x2000, call::BROADCAST, 8, 4, redop::NONE, 0));
        let c = &n.report().unwrap().communicators[0];
        assert_eq!((c.rank, c.nranks, c.id.as_deref()), (None, None, None));
        assert_eq!(c.created_by, "before_attach");
        let q = |c, v| NcclBody {
            comm: 0x2000,
            call: c,
            peer: v,
            flags: nflags::HAS_RETURN,
            ..NcclBody::default()
        };
        n.apply(&h(), &q(call::USER_RANK, 3));
        n.apply(&h(), &q(call::COUNT, 8));
        let c = &n.report().unwrap().communicators[0];
        assert_eq!((c.rank, c.nranks), (Some(3), Some(8)));
        assert_eq!(c.ops[0].bytes, 64);
    }

    #[test]
    fn a_split_is_named_by_its_parent_and_color_and_destroy_ends_it() {
        let mut a = Nccl::default();
        let mut b = Nccl::default();
        a.apply(&h(), &init(0x10, 0, 2, 5, 0));
        b.apply(&h(), &init(0x99, 1, 2, 5, 1));
        let split = |comm, parent| NcclBody {
            comm,
            parent,
            call: call::SPLIT,
            peer: 3,
            flags: nflags::HAS_RETURN,
            ..NcclBody::default()
        };
        a.apply(&h(), &split(0x20, 0x10));
        b.apply(&h(), &split(0x77, 0x99));
        // NCCL_SPLIT_NOCOLOR: success and no communicator, nothing listed.
        b.apply(&h(), &split(0, 0x99));
        assert_eq!(b.report().unwrap().communicators.len(), 2);
        let ids = |n: &Nccl| -> Vec<Option<String>> {
            let mut v: Vec<_> = n
                .report()
                .unwrap()
                .communicators
                .iter()
                .map(|c| c.id.clone())
                .collect();
            v.sort();
            v
        };
        assert_eq!(ids(&a), ids(&b));
        a.apply(
            &h(),
            &NcclBody {
                comm: 0x20,
                call: call::DESTROY,
                ..NcclBody::default()
            },
        );
        let r = a.report().unwrap();
        assert_eq!(r.communicators[0].ended.as_deref(), Some("destroyed"));
        assert_eq!(r.communicators[0].color, Some(3));
        assert_eq!(r.communicators[1].ended, None);
    }

    #[test]
    fn bad_values_and_endless_handles_stay_bounded() {
        let mut n = Nccl::default();
        for i in 0..(MAX_LIVE as u64 + 10) {
            n.apply(
                &h(),
                &op(
                    0x1000 + 8 * i,
                    call::ALL_REDUCE,
                    1,
                    100 + i as u32,
                    50 + i as u32,
                    0,
                ),
            );
        }
        for i in 0..(MAX_ENDED as u64 + 3) {
            n.apply(
                &h(),
                &NcclBody {
                    comm: 0x1000 + 8 * i,
                    call: call::DESTROY,
                    ..NcclBody::default()
                },
            );
        }
        let r = n.report().unwrap();
        assert_eq!(r.calls, MAX_LIVE as u64 + 10);
        assert_eq!(r.bytes, 0, "unknown datatypes have no size");
        assert_eq!(
            r.communicators.len(),
            MAX_LIVE - (MAX_ENDED + 3) + MAX_ENDED
        );
        assert_eq!(r.communicators_not_listed, 10 + 3);
        let o = &r.communicators.last().unwrap().ops[0];
        assert_eq!(o.datatypes, BTreeMap::from([("unknown".to_owned(), 1)]));
        assert_eq!(o.reductions, BTreeMap::from([("custom".to_owned(), 1)]));
    }

    #[test]
    fn a_non_blocking_creation_in_progress_made_its_communicator() {
        let mut n = Nccl::default();
        let mut b = init(0x40, 0, 2, 1, 0);
        b.ret = profiler_common::nccl::IN_PROGRESS;
        n.apply(&h(), &b);
        let mut failed = init(0, 1, 2, 1, 0);
        failed.ret = 4; // ncclInvalidArgument
        n.apply(&h(), &failed);
        let r = n.report().unwrap();
        let made: Vec<(Option<i32>, Option<String>)> = r
            .communicators
            .iter()
            .map(|c| (c.error, c.handle.clone()))
            .collect();
        assert_eq!(made, [(Some(4), None), (None, Some("0x40".into()))]);
    }
}
