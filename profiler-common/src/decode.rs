//! Checked decoding of ring-buffer records (userspace only): exact length, known kind, no transmute
//! of untrusted bytes into anything but plain integers.

use crate::{
    AliasBody, CopyBody, ExitBody, GraphBody, Header, LaunchBody, LaunchesBody, MapBody, MemBody,
    NAME_CAP, NameBody, PyFrameRaw, Record, STACK_NATIVE_MAX, STACK_PY_MAX, StackBody, SyncBody,
    WindowBody,
    gpu::{BATCH, GPU_NAME_CAP, GpuActivity, GpuActivityBody, GpuNameBody, GpuStateBody},
    kind,
    nccl::NcclBody,
    record_size,
};
use core::fmt;
use core::mem::size_of;

/// A decoded record.
///
/// `Name` is large (a 488-byte name) but records are decoded one at a time off the ring and
/// consumed at once, so boxing it would only add an allocation per record.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    Launch(Header, LaunchBody),
    Copy(Header, CopyBody),
    Sync(Header, SyncBody),
    Mem(Header, MemBody),
    Graph(Header, GraphBody),
    Name(Header, NameBody),
    Alias(Header, AliasBody),
    Map(Header, MapBody),
    Exit(Header, ExitBody),
    Stack(Header, StackBody),
    Exec(Header, ExitBody),
    Launches(Header, LaunchesBody),
    Window(Header, WindowBody),
    Nccl(Header, NcclBody),
    GpuActivity(Header, GpuActivityBody),
    GpuName(Header, GpuNameBody),
    GpuState(Header, GpuStateBody),
}

impl Event {
    pub fn header(&self) -> &Header {
        match self {
            Event::Launch(h, _)
            | Event::Copy(h, _)
            | Event::Sync(h, _)
            | Event::Mem(h, _)
            | Event::Graph(h, _)
            | Event::Name(h, _)
            | Event::Alias(h, _)
            | Event::Map(h, _)
            | Event::Exit(h, _)
            | Event::Stack(h, _)
            | Event::Exec(h, _)
            | Event::Launches(h, _)
            | Event::Window(h, _)
            | Event::Nccl(h, _)
            | Event::GpuActivity(h, _)
            | Event::GpuName(h, _)
            | Event::GpuState(h, _) => h,
        }
    }
}

impl NameBody {
    /// The name bytes in use (never past [`NAME_CAP`], whatever `len` claims).
    pub fn name_bytes(&self) -> &[u8] {
        let n = (self.len as usize).min(NAME_CAP);
        let s = &self.name[..n];
        // Stop at an embedded NUL too: the probe reads a C string.
        match s.iter().position(|&b| b == 0) {
            Some(z) => &s[..z],
            None => s,
        }
    }
}

impl GpuActivityBody {
    /// The entries in use (never past [`BATCH`], whatever `n` claims).
    pub fn in_use(&self) -> &[GpuActivity] {
        &self.items[..(self.n as usize).min(BATCH)]
    }
}

impl GpuNameBody {
    /// The record naming kernel `id` `name` (cut at [`GPU_NAME_CAP`] bytes).
    pub fn new(id: u32, name: &[u8]) -> Self {
        let n = name.len().min(GPU_NAME_CAP);
        let mut b = GpuNameBody {
            id,
            len: n as u32,
            name: [0; GPU_NAME_CAP],
        };
        b.name[..n].copy_from_slice(&name[..n]);
        b
    }

    /// The name bytes in use (never past [`GPU_NAME_CAP`], nor past an embedded NUL).
    pub fn name_bytes(&self) -> &[u8] {
        let s = &self.name[..(self.len as usize).min(GPU_NAME_CAP)];
        match s.iter().position(|&b| b == 0) {
            Some(z) => &s[..z],
            None => s,
        }
    }
}

impl StackBody {
    /// The native frames in use (never past [`STACK_NATIVE_MAX`], whatever `native_len` says).
    pub fn native_frames(&self) -> &[u64] {
        &self.native[..(self.native_len as usize).min(STACK_NATIVE_MAX)]
    }

    /// The Python frames in use, innermost first.
    pub fn py_frames(&self) -> &[PyFrameRaw] {
        &self.py[..(self.py_len as usize).min(STACK_PY_MAX)]
    }
}

/// Why a record could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Fewer bytes than a header.
    Short { len: usize },
    /// A kind this daemon does not know (a newer eBPF object?): counted and skipped.
    UnknownKind { kind: u32 },
    /// The length does not match the kind's record size.
    WrongLength {
        kind: u32,
        expected: usize,
        got: usize,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Short { len } => {
                write!(f, "record of {len} bytes is shorter than a header")
            }
            DecodeError::UnknownKind { kind } => write!(f, "unknown record kind {kind}"),
            DecodeError::WrongLength {
                kind,
                expected,
                got,
            } => {
                write!(
                    f,
                    "record of kind {kind} has {got} bytes, expected {expected}"
                )
            }
        }
    }
}

fn read<T: Copy>(bytes: &[u8], off: usize) -> T {
    debug_assert!(off + size_of::<T>() <= bytes.len());
    // SAFETY: the caller checked the length; T is a plain-integer repr(C) struct for which
    // every bit pattern is valid; read_unaligned copes with the ring buffer's 8-byte alignment.
    unsafe { core::ptr::read_unaligned(bytes.as_ptr().add(off) as *const T) }
}

/// Decodes one ring-buffer record.
pub fn decode(bytes: &[u8]) -> Result<Event, DecodeError> {
    let hs = size_of::<Header>();
    if bytes.len() < hs {
        return Err(DecodeError::Short { len: bytes.len() });
    }
    let header: Header = read(bytes, 0);
    let expected =
        record_size(header.kind).ok_or(DecodeError::UnknownKind { kind: header.kind })?;
    // Capture files from before the exit record carried the uid have a 16-byte body.
    if header.kind == kind::EXIT && bytes.len() == hs + 16 {
        return Ok(Event::Exit(
            header,
            ExitBody {
                comm: read(bytes, hs),
                uid: crate::UID_UNKNOWN,
                _reserved: 0,
            },
        ));
    }
    // The ring buffer rounds records up to 8 bytes; our sizes are multiples of 8 already.
    if bytes.len() != expected {
        return Err(DecodeError::WrongLength {
            kind: header.kind,
            expected,
            got: bytes.len(),
        });
    }
    Ok(match header.kind {
        kind::LAUNCH => Event::Launch(header, read(bytes, hs)),
        kind::COPY => Event::Copy(header, read(bytes, hs)),
        kind::SYNC => Event::Sync(header, read(bytes, hs)),
        kind::MEM => Event::Mem(header, read(bytes, hs)),
        kind::GRAPH => Event::Graph(header, read(bytes, hs)),
        kind::NAME => Event::Name(header, read(bytes, hs)),
        kind::ALIAS => Event::Alias(header, read(bytes, hs)),
        kind::MAP => Event::Map(header, read(bytes, hs)),
        kind::EXIT => Event::Exit(header, read(bytes, hs)),
        kind::STACK => Event::Stack(header, read(bytes, hs)),
        kind::EXEC => Event::Exec(header, read(bytes, hs)),
        kind::LAUNCHES => Event::Launches(header, read(bytes, hs)),
        kind::WINDOW => Event::Window(header, read(bytes, hs)),
        kind::NCCL => Event::Nccl(header, read(bytes, hs)),
        kind::GPU_ACTIVITY => Event::GpuActivity(header, read(bytes, hs)),
        kind::GPU_NAME => Event::GpuName(header, read(bytes, hs)),
        kind::GPU_STATE => Event::GpuState(header, read(bytes, hs)),
        k => return Err(DecodeError::UnknownKind { kind: k }),
    })
}

/// The bytes of a record as the probes write them (tests, benchmarks, synthetic captures).
pub fn encode<B: Copy>(r: &Record<B>) -> &[u8] {
    // SAFETY: Record<B> is repr(C) with explicit padding for every body type in this crate, so
    // all its bytes are initialised.
    unsafe { core::slice::from_raw_parts(r as *const _ as *const u8, size_of::<Record<B>>()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr(kind: u32) -> Header {
        Header {
            kind,
            api: 7,
            tgid: 4242,
            tid: 4243,
            ts_ns: 123_456,
        }
    }

    #[test]
    fn launch_round_trip() {
        let body = LaunchBody {
            func: 0x5555_0000_1234,
            stream: 0x2,
            caller: 0x7f00_0000_0001,
            grid: [64, 2, 1],
            block: [256, 1, 1],
            shared_bytes: 1024,
            flags: crate::flags::COOPERATIVE,
        };
        let r = Record {
            header: hdr(kind::LAUNCH),
            body,
        };
        assert_eq!(
            decode(encode(&r)),
            Ok(Event::Launch(hdr(kind::LAUNCH), body))
        );
    }

    #[test]
    fn counted_launches_round_trip() {
        let body = LaunchesBody {
            func: 0x5555_0000_1234,
            stream: 7,
            count: 1_000_003,
            grid: [8, 1, 1],
            block: [128, 2, 1],
            shared_bytes: 48,
            flags: crate::flags::LAUNCH_EX,
        };
        let r = Record {
            header: hdr(kind::LAUNCHES),
            body,
        };
        assert_eq!(
            decode(encode(&r)),
            Ok(Event::Launches(hdr(kind::LAUNCHES), body))
        );
        let one = body.launch();
        assert_eq!((one.func, one.stream, one.caller), (body.func, 7, 0));
        assert_eq!(
            (one.grid, one.block, one.shared_bytes),
            ([8, 1, 1], [128, 2, 1], 48)
        );
        assert_eq!(one.flags, crate::flags::LAUNCH_EX);
    }

    #[test]
    fn gpu_records_round_trip_and_clamp() {
        use crate::gpu::{GpuActivity, activity, state};
        let mut items = [GpuActivity::default(); BATCH];
        items[0] = GpuActivity {
            kind: activity::KERNEL,
            device: 1,
            stream: 7,
            correlation: 42,
            name: 3,
            start_ns: 1_000,
            end_ns: 3_500,
            ..GpuActivity::default()
        };
        let b = GpuActivityBody {
            n: 99, // more than BATCH: clamped on reading
            _pad: 0,
            items,
        };
        let r = Record {
            header: hdr(kind::GPU_ACTIVITY),
            body: b,
        };
        assert_eq!(encode(&r).len(), 24 + 8 + 48 * BATCH);
        let Ok(Event::GpuActivity(_, got)) = decode(encode(&r)) else {
            panic!("not decoded")
        };
        assert_eq!(got.in_use().len(), BATCH);
        assert_eq!(got.in_use()[0], items[0]);
        assert_eq!(
            decode(&encode(&r)[..24 + 8]),
            Err(DecodeError::WrongLength {
                kind: kind::GPU_ACTIVITY,
                expected: 24 + 8 + 48 * BATCH,
                got: 32
            })
        );

        let mut name = [0u8; GPU_NAME_CAP];
        name[..7].copy_from_slice(b"_Z3fooi");
        let n = GpuNameBody {
            id: 3,
            len: 9_999,
            name,
        };
        let r = Record {
            header: hdr(kind::GPU_NAME),
            body: n,
        };
        let Ok(Event::GpuName(_, got)) = decode(encode(&r)) else {
            panic!("not decoded")
        };
        assert_eq!((got.id, got.name_bytes()), (3, &b"_Z3fooi"[..]));

        let s = GpuStateBody {
            state: state::YIELDED,
            _pad: 0,
            detail: 27,
        };
        let r = Record {
            header: hdr(kind::GPU_STATE),
            body: s,
        };
        assert_eq!(
            decode(encode(&r)),
            Ok(Event::GpuState(hdr(kind::GPU_STATE), s))
        );
    }

    #[test]
    fn nccl_round_trips() {
        let mut b = NcclBody {
            comm: 0x5555_0000_2000,
            count: 1 << 20,
            stream: 0x7f00_1234,
            call: crate::nccl::call::ALL_REDUCE,
            datatype: 7,
            redop: 0,
            group: 1,
            flags: crate::device::with(0, 2),
            ..NcclBody::default()
        };
        b.id[0] = 0xab;
        b.id[127] = 0xcd;
        let r = Record {
            header: hdr(kind::NCCL),
            body: b,
        };
        assert_eq!(decode(encode(&r)), Ok(Event::Nccl(hdr(kind::NCCL), b)));
        assert_eq!(b.bytes(), 4 << 20);
        assert_eq!(encode(&r).len(), 24 + 208);
        assert_eq!(
            decode(&encode(&r)[..24 + 200]),
            Err(DecodeError::WrongLength {
                kind: kind::NCCL,
                expected: 232,
                got: 224
            })
        );
    }

    #[test]
    fn every_kind_round_trips() {
        let c = CopyBody {
            dst: 1,
            src: 2,
            bytes: 3,
            stream: 4,
            dur_ns: 5,
            direction: 1,
            flags: 2,
            ret: -1,
            _pad: 0,
        };
        assert_eq!(
            decode(encode(&Record {
                header: hdr(kind::COPY),
                body: c
            })),
            Ok(Event::Copy(hdr(kind::COPY), c))
        );
        let s = SyncBody {
            handle: 9,
            dur_ns: 10,
            ret: 0,
            flags: 0,
        };
        assert_eq!(
            decode(encode(&Record {
                header: hdr(kind::SYNC),
                body: s
            })),
            Ok(Event::Sync(hdr(kind::SYNC), s))
        );
        let m = MemBody {
            ptr: 1,
            bytes: 2,
            dur_ns: 3,
            stream: 0,
            op: 1,
            mem_kind: 1,
            ret: 0,
            flags: 0,
        };
        assert_eq!(
            decode(encode(&Record {
                header: hdr(kind::MEM),
                body: m
            })),
            Ok(Event::Mem(hdr(kind::MEM), m))
        );
        let g = GraphBody {
            graph_exec: 5,
            stream: 6,
        };
        assert_eq!(
            decode(encode(&Record {
                header: hdr(kind::GRAPH),
                body: g
            })),
            Ok(Event::Graph(hdr(kind::GRAPH), g))
        );
        let a = AliasBody { from: 1, to: 2 };
        assert_eq!(
            decode(encode(&Record {
                header: hdr(kind::ALIAS),
                body: a
            })),
            Ok(Event::Alias(hdr(kind::ALIAS), a))
        );
        let m = MapBody {
            addr: 0x7f00_0000_0000,
            len: 4096,
        };
        assert_eq!(
            decode(encode(&Record {
                header: hdr(kind::MAP),
                body: m
            })),
            Ok(Event::Map(hdr(kind::MAP), m))
        );
        let x = ExitBody {
            comm: *b"python3\0\0\0\0\0\0\0\0\0",
            uid: 1000,
            _reserved: 0,
        };
        assert_eq!(
            decode(encode(&Record {
                header: hdr(kind::EXIT),
                body: x
            })),
            Ok(Event::Exit(hdr(kind::EXIT), x))
        );
        assert_eq!(
            decode(encode(&Record {
                header: hdr(kind::EXEC),
                body: x
            })),
            Ok(Event::Exec(hdr(kind::EXEC), x))
        );
        // The older 16-byte body (capture files written before the uid): uid unknown.
        let rec = Record {
            header: hdr(kind::EXIT),
            body: x,
        };
        let old = encode(&rec);
        assert_eq!(
            decode(&old[..old.len() - 8]),
            Ok(Event::Exit(
                hdr(kind::EXIT),
                ExitBody {
                    uid: crate::UID_UNKNOWN,
                    ..x
                }
            ))
        );
    }

    #[test]
    fn stack_round_trips_and_lengths_are_clamped() {
        let mut st = StackBody {
            handle: 0x4000,
            of_kind: kind::LAUNCH,
            native_len: 3,
            py_len: 2,
            flags: crate::stackflags::AT_ENTRY,
            ..StackBody::default()
        };
        st.native[..3].copy_from_slice(&[0x401000, 0x402000, 0x403000]);
        st.py[0] = PyFrameRaw {
            code: 0x7f00_0000_1000,
            instr: 0x7f00_0000_10c4,
        };
        st.py[1] = PyFrameRaw {
            code: 0x7f00_0000_2000,
            instr: 0x7f00_0000_2100,
        };
        let r = Record {
            header: hdr(kind::STACK),
            body: st,
        };
        let Ok(Event::Stack(h, got)) = decode(encode(&r)) else {
            panic!("not a stack")
        };
        assert_eq!(h, hdr(kind::STACK));
        assert_eq!(got.native_frames(), &[0x401000, 0x402000, 0x403000]);
        assert_eq!(got.py_frames().len(), 2);
        assert_eq!(got.py_frames()[1].code, 0x7f00_0000_2000);
        // A lying length never reads past the arrays.
        let mut bad = st;
        bad.native_len = 1000;
        bad.py_len = u32::MAX;
        assert_eq!(bad.native_frames().len(), STACK_NATIVE_MAX);
        assert_eq!(bad.py_frames().len(), STACK_PY_MAX);
    }

    #[test]
    fn name_stops_at_len_and_nul() {
        let mut n = NameBody {
            handle: 1,
            scope: 0,
            source: 1,
            len: 6,
            flags: 0,
            _pad: 0,
            name: [0; NAME_CAP],
        };
        n.name[..6].copy_from_slice(b"vecAdd");
        let r = Record {
            header: hdr(kind::NAME),
            body: n,
        };
        let Ok(Event::Name(_, got)) = decode(encode(&r)) else {
            panic!("not a name")
        };
        assert_eq!(got.name_bytes(), b"vecAdd");
        n.len = 10_000; // a lying length is clamped
        n.name[3] = 0;
        assert_eq!(n.name_bytes(), b"vec");
    }

    #[test]
    fn truncated_and_unknown() {
        let r = Record {
            header: hdr(kind::SYNC),
            body: SyncBody::default(),
        };
        let bytes = encode(&r);
        assert_eq!(decode(&bytes[..10]), Err(DecodeError::Short { len: 10 }));
        assert_eq!(
            decode(&bytes[..bytes.len() - 8]),
            Err(DecodeError::WrongLength {
                kind: kind::SYNC,
                expected: 48,
                got: 40
            })
        );
        let r = Record {
            header: hdr(99),
            body: SyncBody::default(),
        };
        assert_eq!(
            decode(encode(&r)),
            Err(DecodeError::UnknownKind { kind: 99 })
        );
    }
}
