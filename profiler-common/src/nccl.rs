//! NCCL on the wire: the calls the probes follow, NCCL's own enum values, the record body and
//! the per-thread state of the NCCL probes (`profiler-ebpf/src/nccl.rs`).
//!
//! One record per NCCL call the program makes (collectives are far rarer than kernel launches:
//! a training step makes tens to hundreds, against thousands of launches), except
//! `ncclGroupStart`/`ncclGroupEnd`, which only move a per-thread depth that every later call
//! carries. Enum values are NCCL's (`nccl.h` of 2.32.3, unchanged since 2.19 for the values
//! used here); see docs/NCCL.md for the ABI this follows.

/// Bytes of an `ncclUniqueId` (`NCCL_UNIQUE_ID_BYTES`).
pub const UNIQUE_ID_BYTES: usize = 128;

/// `ncclInProgress`: a non-blocking communicator (`ncclConfig_t.blocking = 0`) was made and is
/// still initialising; NCCL has written the handle already.
pub const IN_PROGRESS: i32 = 7;

/// Whether a creation that returned `ret` made a communicator (`ncclSuccess` or
/// [`IN_PROGRESS`]).
pub const fn made(ret: i32) -> bool {
    ret == 0 || ret == IN_PROGRESS
}

/// The NCCL call a record or probe stands for (`NcclBody::call`, the probe cookie's `q`).
pub mod call {
    /// `ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)`.
    pub const INIT_RANK: u32 = 1;
    /// `ncclCommInitRankConfig(comm *, nranks, ncclUniqueId id, rank, ncclConfig_t *)`.
    pub const INIT_RANK_CONFIG: u32 = 2;
    /// `ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist)`: one record per
    /// communicator made (up to [`crate::nccl::INIT_ALL_MAX`]).
    pub const INIT_ALL: u32 = 3;
    /// `ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, config *)`.
    pub const SPLIT: u32 = 4;
    /// `ncclCommDestroy(ncclComm_t comm)`.
    pub const DESTROY: u32 = 5;
    /// `ncclCommAbort(ncclComm_t comm)`.
    pub const ABORT: u32 = 6;
    /// `ncclCommCount(const ncclComm_t comm, int *count)`: the value is the number of ranks.
    pub const COUNT: u32 = 7;
    /// `ncclCommUserRank(const ncclComm_t comm, int *rank)`.
    pub const USER_RANK: u32 = 8;
    /// `ncclCommCuDevice(const ncclComm_t comm, int *device)`.
    pub const CU_DEVICE: u32 = 9;
    /// `ncclGroupStart()`: no record, the thread's group depth goes up.
    pub const GROUP_START: u32 = 10;
    /// `ncclGroupEnd()`: no record, the thread's group depth goes down.
    pub const GROUP_END: u32 = 11;
    /// First collective or point-to-point value: everything from here on is an operation
    /// with a count, a datatype, a communicator and a stream.
    pub const FIRST_OP: u32 = 16;
    /// `ncclAllReduce(send, recv, count, datatype, op, comm, stream)`.
    pub const ALL_REDUCE: u32 = 16;
    /// `ncclAllGather(send, recv, sendcount, datatype, comm, stream)`.
    pub const ALL_GATHER: u32 = 17;
    /// `ncclReduceScatter(send, recv, recvcount, datatype, op, comm, stream)`.
    pub const REDUCE_SCATTER: u32 = 18;
    /// `ncclBroadcast(send, recv, count, datatype, root, comm, stream)` (and `ncclBcast`,
    /// which calls it).
    pub const BROADCAST: u32 = 19;
    /// `ncclReduce(send, recv, count, datatype, op, root, comm, stream)`.
    pub const REDUCE: u32 = 20;
    /// `ncclAlltoAll(send, recv, count, datatype, comm, stream)`.
    pub const ALL_TO_ALL: u32 = 21;
    /// `ncclSend(send, count, datatype, peer, comm, stream)`.
    pub const SEND: u32 = 22;
    /// `ncclRecv(recv, count, datatype, peer, comm, stream)`.
    pub const RECV: u32 = 23;

    /// The report's name of call `c` (an operation's name is NCCL's own, without `nccl`).
    pub const fn name(c: u32) -> Option<&'static str> {
        Some(match c {
            INIT_RANK => "CommInitRank",
            INIT_RANK_CONFIG => "CommInitRankConfig",
            INIT_ALL => "CommInitAll",
            SPLIT => "CommSplit",
            DESTROY => "CommDestroy",
            ABORT => "CommAbort",
            COUNT => "CommCount",
            USER_RANK => "CommUserRank",
            CU_DEVICE => "CommCuDevice",
            GROUP_START => "GroupStart",
            GROUP_END => "GroupEnd",
            ALL_REDUCE => "AllReduce",
            ALL_GATHER => "AllGather",
            REDUCE_SCATTER => "ReduceScatter",
            BROADCAST => "Broadcast",
            REDUCE => "Reduce",
            ALL_TO_ALL => "AlltoAll",
            SEND => "Send",
            RECV => "Recv",
            _ => return None,
        })
    }

    /// Whether `c` is a collective or a send/receive (a record with count, datatype, stream).
    pub const fn is_op(c: u32) -> bool {
        c >= FIRST_OP && c <= RECV
    }
}

/// `ncclDataType_t` values and their element sizes.
pub mod datatype {
    /// Element bytes of datatype `d`, 0 for a value NCCL does not define (bytes then count 0).
    pub const fn size(d: u32) -> u64 {
        match d {
            0 | 1 => 1,   // ncclInt8 (ncclChar), ncclUint8
            2 | 3 => 4,   // ncclInt32 (ncclInt), ncclUint32
            4 | 5 => 8,   // ncclInt64, ncclUint64
            6 => 2,       // ncclFloat16 (ncclHalf)
            7 => 4,       // ncclFloat32 (ncclFloat)
            8 => 8,       // ncclFloat64 (ncclDouble)
            9 => 2,       // ncclBfloat16
            10 | 11 => 1, // ncclFloat8e4m3, ncclFloat8e5m2
            _ => 0,
        }
    }

    /// NCCL's name of datatype `d` (without `nccl`), `None` for a value it does not define.
    pub const fn name(d: u32) -> Option<&'static str> {
        Some(match d {
            0 => "int8",
            1 => "uint8",
            2 => "int32",
            3 => "uint32",
            4 => "int64",
            5 => "uint64",
            6 => "float16",
            7 => "float32",
            8 => "float64",
            9 => "bfloat16",
            10 => "float8e4m3",
            11 => "float8e5m2",
            _ => return None,
        })
    }
}

/// `ncclRedOp_t` values. Values from `ncclNumOps` (5) up are operators the program made with
/// `ncclRedOpCreatePreMulSum`.
pub mod redop {
    /// NCCL's name of reduction `r`: `sum`, `prod`, `max`, `min`, `avg`, else `custom`.
    pub const fn name(r: u32) -> &'static str {
        match r {
            0 => "sum",
            1 => "prod",
            2 => "max",
            3 => "min",
            4 => "avg",
            _ => "custom",
        }
    }

    /// [`crate::nccl::NcclBody::redop`] of a call that takes no reduction.
    pub const NONE: u32 = u32::MAX;
}

/// `NcclBody::flags` bits (the device is in the top byte, as for every call: see
/// [`crate::device`]).
pub mod nflags {
    /// `id` holds the communicator's unique id, copied from the call's stack.
    pub const HAS_ID: u32 = 1 << 0;
    /// `ret` and `dur_ns` were measured by a return probe.
    pub const HAS_RETURN: u32 = crate::flags::HAS_RETURN;
}

/// Most communicators one `ncclCommInitAll` record run reports (one record each).
pub const INIT_ALL_MAX: u32 = 16;

/// One NCCL call ([`crate::kind::NCCL`]). Fields a call does not have are 0 (`redop`:
/// [`redop::NONE`]; `peer`, `rank`, `nranks`: -1).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NcclBody {
    /// The communicator: the one the call used, or for a creation the one it wrote (0 when it
    /// failed).
    pub comm: u64,
    /// Elements, as NCCL's `count` argument counts them (per rank for AllGather's
    /// `sendcount`, ReduceScatter's `recvcount`, AlltoAll's per-peer `count`).
    pub count: u64,
    /// `cudaStream_t`.
    pub stream: u64,
    /// `ncclCommSplit`: the parent communicator; `ncclCommInitAll`: the clique's first
    /// communicator (names the clique).
    pub parent: u64,
    /// Entry to return, with [`nflags::HAS_RETURN`].
    pub dur_ns: u64,
    /// One of [`call`].
    pub call: u32,
    /// `ncclDataType_t`.
    pub datatype: u32,
    /// `ncclRedOp_t`, or [`redop::NONE`].
    pub redop: u32,
    /// Broadcast/Reduce: the root; Send/Recv: the peer; CommSplit: the color; CommCount,
    /// CommUserRank, CommCuDevice: the value the call returned. Else -1.
    pub peer: i32,
    /// The creating call's rank (InitAll: the index in the clique); else -1.
    pub rank: i32,
    /// The creating call's number of ranks; else -1.
    pub nranks: i32,
    /// `ncclGroupStart` depth of the calling thread at the call (0: outside any group).
    pub group: u32,
    /// [`nflags`], the device in the top byte.
    pub flags: u32,
    /// `ncclResult_t` with [`nflags::HAS_RETURN`].
    pub ret: i32,
    pub _pad: u32,
    /// The unique id passed by value, with [`nflags::HAS_ID`]; zeros otherwise.
    pub id: [u8; UNIQUE_ID_BYTES],
}
const _: () = assert!(core::mem::size_of::<NcclBody>() == 208);
const _: () = assert!(core::mem::offset_of!(NcclBody, call) == 40);
const _: () = assert!(core::mem::offset_of!(NcclBody, id) == 80);

impl Default for NcclBody {
    fn default() -> Self {
        NcclBody {
            comm: 0,
            count: 0,
            stream: 0,
            parent: 0,
            dur_ns: 0,
            call: 0,
            datatype: 0,
            redop: redop::NONE,
            peer: -1,
            rank: -1,
            nranks: -1,
            group: 0,
            flags: 0,
            ret: 0,
            _pad: 0,
            id: [0; UNIQUE_ID_BYTES],
        }
    }
}

impl NcclBody {
    /// Bytes of the operation: `count` × the datatype's size (0 for a datatype NCCL does not
    /// define).
    pub const fn bytes(&self) -> u64 {
        self.count.saturating_mul(datatype::size(self.datatype))
    }
}

/// Per-thread state of the NCCL probes (task storage `NCCL_THREAD`): the group depth and the
/// call in flight between an entry probe and its return probe.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NcclThread {
    /// `ncclGroupStart` calls not yet closed by `ncclGroupEnd`.
    pub depth: u32,
    /// The [`call`] in flight, 0 none.
    pub pend_call: u32,
    pub ts_ns: u64,
    /// The out-pointer the call writes (communicator, int).
    pub ptr: u64,
    /// The communicator the call was given (split's parent, a query's).
    pub comm: u64,
    /// nranks / ndev / color.
    pub a: i64,
    /// rank / devlist.
    pub b: u64,
    /// The calling thread's device at entry (wire value).
    pub dev: u32,
    /// [`nflags::HAS_ID`] when `id` was read.
    pub flags: u32,
    pub id: [u8; UNIQUE_ID_BYTES],
}
const _: () = assert!(core::mem::size_of::<NcclThread>() == 184);
