//! The trace in Perfetto's protobuf format (`perfetto.protos.Trace`), for captures whose JSON
//! would be too large for a browser to load (Perfetto UI and chrome://tracing read JSON into
//! one string; V8 caps a string at 2^29 characters).
//!
//! Each [`TraceEvent`] is written as it comes, with nothing held but the tracks, the interned
//! strings and the launch being written:
//! - a process's name → a process track (`TrackDescriptor.process`); the NVML track (pid 0) a
//!   plain named track;
//! - a thread's name → a thread track for a real thread, a named child track of the process for
//!   a stream or the steps;
//! - a slice that lasts → a slice begin and end; a slice of no time (a launch) or an instant →
//!   an instant on the thread or process track (the trace processor makes both a slice of
//!   duration 0, as it does a JSON `X` event of `dur` 0);
//! - a counter → one counter track per series (`name`, or `name: series` when it has several),
//!   created at its first value; a value not reported is no event (the JSON trace's `null`,
//!   which the trace processor's JSON importer skips);
//! - flow starts and ends → `flow_ids` / `terminating_flow_ids` on the event they bind to (the
//!   one at the same time on the same track, which the exporter always sends first);
//! - arguments → debug annotations (numbers and booleans as such; strings, a handle or address
//!   as its `0x…` string, a grid, block or list as JSON text — all interned).
//!
//! What keeps it small (a launch is about 60 bytes, where one packet per event with its track
//! and an absolute time took about 200):
//! - **a packet sequence per track**: the sequence's defaults name the track, so an event does
//!   not (`TracePacketDefaults.track_event_defaults`);
//! - **incremental timestamps**: each sequence declares a clock of its own (id 64,
//!   `is_incremental`, equal to the trace's clock at 0), and an event's time is the ns since the
//!   previous event of its track; an event earlier than the previous one (CUPTI's batches come
//!   late) carries its absolute time on the trace clock (`timestamp_clock_id` 6);
//! - **interning**: event names, categories, argument names and argument strings are sent once
//!   per sequence (`InternedData`) and referred to by id. The strings are held for the whole
//!   export, up to [`MAX_INTERNED_BYTES`]; past it, new strings are written in place.
//!
//! Times are ns from the capture's start, as the events have them.
//!
//! The protobuf encoding is written here by hand rather than generated (prost and Perfetto's
//! .proto files): this writer only writes, about 40 fields of a few messages, and a varint, a
//! key and a length prefix are all it takes, with no codegen step or dependency.
//! `tests/tools/check_pftrace.py` reads every trace the tests write with Perfetto's own schema
//! and these rules (sequences, defaults, incremental clocks, interning) and compares it with
//! the JSON trace of the same capture.

use super::{Arg, Args, Scope, Sink, TraceError, TraceEvent};
use std::fmt::Write as _;
use std::io::Write;
use std::rc::Rc;

type Map<K, V> = crate::sys::hash::FastMap<K, V>;

// Field numbers from perfetto/protos/perfetto/trace/*.proto (checked against Perfetto's own
// descriptors by the end-to-end test).
mod f {
    pub const TRACE_PACKET: u32 = 1;
    // TracePacket
    pub const CLOCK_SNAPSHOT: u32 = 6;
    pub const TIMESTAMP: u32 = 8;
    pub const SEQUENCE_ID: u32 = 10;
    pub const TRACK_EVENT: u32 = 11;
    pub const INTERNED_DATA: u32 = 12;
    pub const SEQUENCE_FLAGS: u32 = 13;
    pub const TIMESTAMP_CLOCK_ID: u32 = 58;
    pub const PACKET_DEFAULTS: u32 = 59;
    pub const TRACK_DESCRIPTOR: u32 = 60;
    // TracePacketDefaults, TrackEventDefaults
    pub const PD_TIMESTAMP_CLOCK_ID: u32 = 58;
    pub const PD_TRACK_EVENT_DEFAULTS: u32 = 11;
    pub const TED_TRACK_UUID: u32 = 11;
    // ClockSnapshot, ClockSnapshot.Clock
    pub const CS_CLOCKS: u32 = 1;
    pub const CLOCK_ID: u32 = 1;
    pub const CLOCK_TIMESTAMP: u32 = 2;
    pub const CLOCK_IS_INCREMENTAL: u32 = 3;
    // TrackDescriptor
    pub const TD_UUID: u32 = 1;
    pub const TD_NAME: u32 = 2;
    pub const TD_PROCESS: u32 = 3;
    pub const TD_THREAD: u32 = 4;
    pub const TD_PARENT: u32 = 5;
    pub const TD_COUNTER: u32 = 8;
    // ProcessDescriptor / ThreadDescriptor
    pub const PD_PID: u32 = 1;
    pub const PD_NAME: u32 = 6;
    pub const THD_PID: u32 = 1;
    pub const THD_TID: u32 = 2;
    pub const THD_NAME: u32 = 5;
    // TrackEvent
    pub const TE_CATEGORY_IIDS: u32 = 3;
    pub const TE_ANNOTATIONS: u32 = 4;
    pub const TE_TYPE: u32 = 9;
    pub const TE_NAME_IID: u32 = 10;
    #[cfg(test)]
    pub const TE_TRACK: u32 = 11;
    pub const TE_CATEGORIES: u32 = 22;
    pub const TE_NAME: u32 = 23;
    pub const TE_COUNTER_INT: u32 = 30;
    pub const TE_COUNTER_DOUBLE: u32 = 44;
    pub const TE_FLOW_IDS: u32 = 47;
    pub const TE_TERMINATING_FLOW_IDS: u32 = 48;
    // DebugAnnotation
    pub const DA_NAME_IID: u32 = 1;
    pub const DA_BOOL: u32 = 2;
    pub const DA_UINT: u32 = 3;
    pub const DA_INT: u32 = 4;
    pub const DA_STRING: u32 = 6;
    pub const DA_NAME: u32 = 10;
    pub const DA_STRING_IID: u32 = 17;
    // InternedData and its entries (EventCategory, EventName, DebugAnnotationName,
    // InternedString: the id is field 1, the string field 2 in each)
    pub const ID_CATEGORIES: u32 = 1;
    pub const ID_NAMES: u32 = 2;
    pub const ID_ANNOTATION_NAMES: u32 = 3;
    pub const ID_STRING_VALUES: u32 = 29;
    pub const IID: u32 = 1;
    pub const IID_NAME: u32 = 2;
}

const SLICE_BEGIN: u64 = 1;
const SLICE_END: u64 = 2;
const INSTANT: u64 = 3;
const COUNTER: u64 = 4;
const SEQ_INCREMENTAL_STATE_CLEARED: u64 = 1;
const SEQ_NEEDS_INCREMENTAL_STATE: u64 = 2;
/// The trace's clock (CLOCK_BOOTTIME, Perfetto's default): absolute times.
const CLOCK_TRACE: u64 = 6;
/// Each sequence's own clock: ns since the sequence's previous event.
const CLOCK_INCREMENTAL: u64 = 64;
/// Slices held at most for flow events to bind to (a flow's ends follow their slice within
/// two slices: a launch's on its thread and its stream).
const MAX_PENDING: usize = 8;
/// Interned strings held at most (bytes of text); past it, new strings go in place.
pub const MAX_INTERNED_BYTES: usize = 64 << 20;

/// The protobuf encoding, written onto a byte buffer.
trait Pb {
    fn varint(&mut self, v: u64);
    fn key(&mut self, field: u32, wire: u8) {
        self.varint(u64::from(field) << 3 | u64::from(wire));
    }
    fn uint(&mut self, field: u32, v: u64) {
        self.key(field, 0);
        self.varint(v);
    }
    fn int(&mut self, field: u32, v: i64) {
        self.key(field, 0);
        self.varint(v as u64);
    }
    fn double(&mut self, field: u32, v: f64);
    fn fixed64(&mut self, field: u32, v: u64);
    fn bytes(&mut self, field: u32, b: &[u8]);
}

impl Pb for Vec<u8> {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.push(v as u8);
    }
    fn double(&mut self, field: u32, v: f64) {
        self.key(field, 1);
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn fixed64(&mut self, field: u32, v: u64) {
        self.key(field, 1);
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, field: u32, b: &[u8]) {
        self.key(field, 2);
        self.varint(b.len() as u64);
        self.extend_from_slice(b);
    }
}

/// Bytes of `v` as a varint.
fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// The lists of `InternedData`, each with its own ids on a sequence.
#[derive(Clone, Copy)]
enum Kind {
    Category = 0,
    Name = 1,
    ArgName = 2,
    ArgValue = 3,
}

const KIND_FIELD: [u32; 4] = [
    f::ID_CATEGORIES,
    f::ID_NAMES,
    f::ID_ANNOTATION_NAMES,
    f::ID_STRING_VALUES,
];

/// Every string interned, with one id (its index + 1) used on every sequence.
struct Strings {
    ids: Map<Rc<str>, u32>,
    list: Vec<Rc<str>>,
    bytes: usize,
    max_bytes: usize,
}

impl Default for Strings {
    fn default() -> Self {
        Strings {
            ids: Map::default(),
            list: Vec::new(),
            bytes: 0,
            max_bytes: MAX_INTERNED_BYTES,
        }
    }
}

impl Strings {
    /// The id of `s`, or `None` once the table is full.
    fn id(&mut self, s: &str) -> Option<u32> {
        if let Some(&i) = self.ids.get(s) {
            return Some(i);
        }
        if self.bytes + s.len() > self.max_bytes {
            return None;
        }
        self.bytes += s.len();
        let rc: Rc<str> = Rc::from(s);
        self.list.push(Rc::clone(&rc));
        let i = self.list.len() as u32;
        self.ids.insert(rc, i);
        Some(i)
    }
}

/// A track and the packet sequence that carries its events.
struct Seq {
    /// The sequence id (also the track's uuid).
    id: u64,
    /// The time of the sequence's incremental clock: its last event's.
    last_ts: u64,
    /// Per [`Kind`], the string ids already sent on this sequence (a bit per id).
    sent: [Vec<u64>; 4],
}

impl Seq {
    /// Marks string `id` of `kind` sent; whether it was new.
    fn mark(&mut self, kind: Kind, id: u32) -> bool {
        let bits = &mut self.sent[kind as usize];
        let (w, b) = (id as usize / 64, id % 64);
        if bits.len() <= w {
            bits.resize(w + 1, 0);
        }
        let new = bits[w] & (1 << b) == 0;
        bits[w] |= 1 << b;
        new
    }
}

/// An argument's value that is written as text, by value.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum ValueKey {
    Hex(u64),
    Dim3([u32; 3]),
}

/// Argument values remembered by value at most.
const MAX_VALUE_KEYS: usize = 1 << 20;

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum TrackKey {
    Process(u64),
    Thread(u64, u64),
}

/// A slice held until the flow events that bind to it have been seen.
struct Pending {
    track: usize,
    ts: u64,
    dur: u64,
    pid: u64,
    tid: u64,
    name: super::Name,
    cat: &'static str,
    args: Args,
    flows_out: Vec<u64>,
    flows_in: Vec<u64>,
}

/// Buffers reused from event to event.
#[derive(Default)]
struct Scratch {
    packet: Vec<u8>,
    event: Vec<u8>,
    interned: Vec<u8>,
    annotation: Vec<u8>,
    text: String,
}

/// [`TraceEvent`]s in, `perfetto.protos.Trace` out.
pub struct PerfettoSink<W: Write> {
    out: W,
    /// Tracks by index; sequence id and uuid = index + 1.
    seqs: Vec<Seq>,
    tracks: Map<TrackKey, usize>,
    counters: Map<(u64, String), usize>,
    strings: Strings,
    /// Ids of strings known by their address (categories, argument names).
    statics: Map<(usize, usize), u32>,
    /// Ids of argument values by value (handles, grids), up to [`MAX_VALUE_KEYS`].
    values: Map<ValueKey, u32>,
    scratch: Scratch,
    pending: std::collections::VecDeque<Pending>,
    /// Flow events that found no slice to bind to (none expected; counted, not guessed).
    pub unbound_flows: u64,
}

impl<W: Write> PerfettoSink<W> {
    pub fn new(out: W) -> Self {
        Self {
            out,
            seqs: Vec::new(),
            tracks: Map::default(),
            counters: Map::default(),
            strings: Strings::default(),
            statics: Map::default(),
            values: Map::default(),
            scratch: Scratch::default(),
            pending: Default::default(),
            unbound_flows: 0,
        }
    }

    /// Writes the packet in `self.scratch.packet`.
    fn write_packet(&mut self) -> Result<(), TraceError> {
        let p = &self.scratch.packet;
        let mut head = [0u8; 11];
        let mut n = 0;
        head[n] = (f::TRACE_PACKET << 3 | 2) as u8;
        n += 1;
        let mut len = p.len() as u64;
        while len >= 0x80 {
            head[n] = (len as u8) | 0x80;
            len >>= 7;
            n += 1;
        }
        head[n] = len as u8;
        n += 1;
        self.out.write_all(&head[..n])?;
        Ok(self.out.write_all(p)?)
    }

    /// A new track described by `descriptor` (its uuid added here) on a sequence of its own:
    /// the sequence's clock, then its defaults with the descriptor. Returns its index.
    fn open(&mut self, descriptor: impl FnOnce(&mut Vec<u8>)) -> Result<usize, TraceError> {
        let index = self.seqs.len();
        let id = index as u64 + 1;
        self.seqs.push(Seq {
            id,
            last_ts: 0,
            sent: Default::default(),
        });
        let mut body = Vec::new();
        // The clock: 0 on it is 0 on the trace's clock, and it counts in steps of 1 ns.
        let mut snapshot = Vec::new();
        for (clock, incremental) in [(CLOCK_TRACE, false), (CLOCK_INCREMENTAL, true)] {
            let mut c = Vec::new();
            c.uint(f::CLOCK_ID, clock);
            c.uint(f::CLOCK_TIMESTAMP, 0);
            if incremental {
                c.uint(f::CLOCK_IS_INCREMENTAL, 1);
            }
            snapshot.bytes(f::CS_CLOCKS, &c);
        }
        let p = &mut self.scratch.packet;
        p.clear();
        p.uint(f::TIMESTAMP, 0);
        p.uint(f::SEQUENCE_ID, id);
        p.bytes(f::CLOCK_SNAPSHOT, &snapshot);
        self.write_packet()?;
        // The defaults (this track, that clock) and the track.
        let mut ted = Vec::new();
        ted.uint(f::TED_TRACK_UUID, id);
        let mut defaults = Vec::new();
        defaults.uint(f::PD_TIMESTAMP_CLOCK_ID, CLOCK_INCREMENTAL);
        defaults.bytes(f::PD_TRACK_EVENT_DEFAULTS, &ted);
        body.uint(f::TD_UUID, id);
        descriptor(&mut body);
        let p = &mut self.scratch.packet;
        p.clear();
        p.uint(f::SEQUENCE_ID, id);
        p.uint(f::SEQUENCE_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED);
        p.bytes(f::PACKET_DEFAULTS, &defaults);
        p.bytes(f::TRACK_DESCRIPTOR, &body);
        self.write_packet()?;
        Ok(index)
    }

    /// The track of process `pid` (a plain track named after it if none was announced).
    fn process_track(&mut self, pid: u64) -> Result<usize, TraceError> {
        if let Some(&t) = self.tracks.get(&TrackKey::Process(pid)) {
            return Ok(t);
        }
        let t = self.open(|td| td.bytes(f::TD_NAME, format!("pid {pid}").as_bytes()))?;
        self.tracks.insert(TrackKey::Process(pid), t);
        Ok(t)
    }

    /// The track of `tid` in `pid` (a plain child track if none was announced).
    fn thread_track(&mut self, pid: u64, tid: u64) -> Result<usize, TraceError> {
        if let Some(&t) = self.tracks.get(&TrackKey::Thread(pid, tid)) {
            return Ok(t);
        }
        let parent = {
            let t = self.process_track(pid)?;
            self.seqs[t].id
        };
        let t = self.open(|td| {
            td.uint(f::TD_PARENT, parent);
            td.bytes(f::TD_NAME, format!("track {tid}").as_bytes());
        })?;
        self.tracks.insert(TrackKey::Thread(pid, tid), t);
        Ok(t)
    }

    /// A process's track, named.
    fn process_name(&mut self, pid: u64, label: &str) -> Result<(), TraceError> {
        let t = self.open(|td| {
            if pid == 0 {
                td.bytes(f::TD_NAME, label.as_bytes());
            } else {
                let mut pd = Vec::new();
                pd.int(f::PD_PID, pid as i64);
                pd.bytes(f::PD_NAME, label.as_bytes());
                td.bytes(f::TD_PROCESS, &pd);
            }
        })?;
        self.tracks.insert(TrackKey::Process(pid), t);
        Ok(())
    }

    /// A thread's (or a stream's, or the steps') track, named.
    fn thread_name(&mut self, pid: u64, tid: u64, label: &str) -> Result<(), TraceError> {
        let parent = if tid < super::STEP_TID {
            None
        } else {
            Some({
                let t = self.process_track(pid)?;
                self.seqs[t].id
            })
        };
        let t = self.open(|td| match parent {
            None => {
                let mut thd = Vec::new();
                thd.int(f::THD_PID, pid as i64);
                thd.int(f::THD_TID, tid as i64);
                thd.bytes(f::THD_NAME, label.as_bytes());
                td.bytes(f::TD_THREAD, &thd);
            }
            // A stream or the steps: a named track under the process.
            Some(parent) => {
                td.uint(f::TD_PARENT, parent);
                td.bytes(f::TD_NAME, label.as_bytes());
            }
        })?;
        self.tracks.insert(TrackKey::Thread(pid, tid), t);
        Ok(())
    }

    /// The id of `s` of `kind` on track `t`'s sequence, adding it to the packet's interned
    /// data when the sequence has not had it; `None` when the table is full.
    fn intern(&mut self, t: usize, kind: Kind, s: &str) -> Option<u64> {
        let id = self.strings.id(s)?;
        Some(self.send(t, kind, id))
    }

    /// [`Self::intern`] of a string known by its address (a category, an argument's name):
    /// found without hashing its text.
    fn intern_static(&mut self, t: usize, kind: Kind, s: &'static str) -> Option<u64> {
        let key = (s.as_ptr() as usize, s.len());
        let id = match self.statics.get(&key) {
            Some(&id) => id,
            None => {
                let id = self.strings.id(s)?;
                self.statics.insert(key, id);
                id
            }
        };
        Some(self.send(t, kind, id))
    }

    /// [`Self::intern`] of an argument's value as text (`text` holds it when it had to be
    /// written), found without writing it out when it was seen before.
    fn intern_value(&mut self, t: usize, v: &Arg, text: &mut String) -> Option<u64> {
        let key = match v {
            Arg::Hex(h) => Some(ValueKey::Hex(*h)),
            Arg::Dim3(d) => Some(ValueKey::Dim3(*d)),
            _ => None,
        };
        if let Some(&id) = key.as_ref().and_then(|k| self.values.get(k)) {
            return Some(self.send(t, Kind::ArgValue, id));
        }
        text.clear();
        match v {
            Arg::Str(s) => text.push_str(s),
            // As the JSON trace writes them (`0x…`; `[x,y,z]`).
            Arg::Hex(h) => {
                let _ = write!(text, "0x{h:x}");
            }
            Arg::Dim3([x, y, z]) => {
                let _ = write!(text, "[{x},{y},{z}]");
            }
            _ => *text = serde_json::to_string(v).unwrap_or_default(),
        }
        let id = self.strings.id(text)?;
        if let Some(k) = key
            && self.values.len() < MAX_VALUE_KEYS
        {
            self.values.insert(k, id);
        }
        Some(self.send(t, Kind::ArgValue, id))
    }

    /// String `id` of `kind` on track `t`'s sequence, added to the packet's interned data when
    /// the sequence has not had it.
    fn send(&mut self, t: usize, kind: Kind, id: u32) -> u64 {
        if self.seqs[t].mark(kind, id) {
            let s = &self.strings.list[id as usize - 1];
            let i = &mut self.scratch.interned;
            let len = 1 + varint_len(u64::from(id)) + 1 + varint_len(s.len() as u64) + s.len();
            i.key(KIND_FIELD[kind as usize], 2);
            i.varint(len as u64);
            i.uint(f::IID, u64::from(id));
            i.bytes(f::IID_NAME, s.as_bytes());
        }
        u64::from(id)
    }

    /// Writes the track event in `self.scratch.event` (with `scratch.interned`) on track `t`
    /// at `ts`.
    fn write_event(&mut self, t: usize, ts: u64) -> Result<(), TraceError> {
        let seq = &mut self.seqs[t];
        let p = &mut self.scratch.packet;
        p.clear();
        if ts >= seq.last_ts {
            p.uint(f::TIMESTAMP, ts - seq.last_ts);
            seq.last_ts = ts;
        } else {
            // Earlier than the track's last event: absolute, on the trace's clock (the
            // sequence's clock stays where it was).
            p.uint(f::TIMESTAMP, ts);
            p.uint(f::TIMESTAMP_CLOCK_ID, CLOCK_TRACE);
        }
        p.uint(f::SEQUENCE_ID, seq.id);
        if !self.scratch.interned.is_empty() {
            p.bytes(f::INTERNED_DATA, &self.scratch.interned);
            self.scratch.interned.clear();
        }
        p.uint(f::SEQUENCE_FLAGS, SEQ_NEEDS_INCREMENTAL_STATE);
        p.bytes(f::TRACK_EVENT, &self.scratch.event);
        self.write_packet()
    }

    /// Starts a track event of `kind` in `self.scratch.event`.
    fn begin_event(&mut self, kind: u64) {
        let e = &mut self.scratch.event;
        e.clear();
        e.uint(f::TE_TYPE, kind);
    }

    /// Name, category and arguments of the event being written on track `t`.
    fn labels(&mut self, t: usize, name: &str, cat: &'static str, args: &Args) {
        match self.intern_static(t, Kind::Category, cat) {
            Some(i) => self.scratch.event.uint(f::TE_CATEGORY_IIDS, i),
            None => self.scratch.event.bytes(f::TE_CATEGORIES, cat.as_bytes()),
        }
        match self.intern(t, Kind::Name, name) {
            Some(i) => self.scratch.event.uint(f::TE_NAME_IID, i),
            None => self.scratch.event.bytes(f::TE_NAME, name.as_bytes()),
        }
        let mut da = std::mem::take(&mut self.scratch.annotation);
        let mut text = std::mem::take(&mut self.scratch.text);
        for (k, v) in args.iter() {
            da.clear();
            match self.intern_static(t, Kind::ArgName, k) {
                Some(i) => da.uint(f::DA_NAME_IID, i),
                None => da.bytes(f::DA_NAME, k.as_bytes()),
            }
            match v {
                Arg::Bool(b) => da.uint(f::DA_BOOL, u64::from(*b)),
                Arg::Uint(u) => da.uint(f::DA_UINT, *u),
                Arg::Int(i) => match u64::try_from(*i) {
                    Ok(u) => da.uint(f::DA_UINT, u),
                    Err(_) => da.int(f::DA_INT, *i),
                },
                Arg::Str(_) | Arg::Hex(_) | Arg::Dim3(_) | Arg::List(_) => {
                    match self.intern_value(t, v, &mut text) {
                        Some(i) => da.uint(f::DA_STRING_IID, i),
                        None => da.bytes(f::DA_STRING, text.as_bytes()),
                    }
                }
            }
            self.scratch.event.bytes(f::TE_ANNOTATIONS, &da);
        }
        self.scratch.text = text;
        self.scratch.annotation = da;
    }

    /// Writes the held slices but the newest `keep`.
    fn flush_pending(&mut self, keep: usize) -> Result<(), TraceError> {
        while self.pending.len() > keep {
            let Some(p) = self.pending.pop_front() else {
                break;
            };
            self.begin_event(if p.dur == 0 { INSTANT } else { SLICE_BEGIN });
            self.labels(p.track, &p.name, p.cat, &p.args);
            for id in &p.flows_out {
                self.scratch.event.fixed64(f::TE_FLOW_IDS, *id);
            }
            for id in &p.flows_in {
                self.scratch.event.fixed64(f::TE_TERMINATING_FLOW_IDS, *id);
            }
            self.write_event(p.track, p.ts)?;
            if p.dur > 0 {
                self.begin_event(SLICE_END);
                self.write_event(p.track, p.ts + p.dur)?;
            }
        }
        Ok(())
    }

    /// Binds flow `id` to the held slice at `ts` on `(pid, tid)`: leaving it, or arriving.
    fn flow(&mut self, id: u64, pid: u64, tid: u64, ts: u64, leaves: bool) {
        match self
            .pending
            .iter_mut()
            .find(|p| p.pid == pid && p.tid == tid && p.ts == ts)
        {
            Some(p) if leaves => p.flows_out.push(id),
            Some(p) => p.flows_in.push(id),
            None => self.unbound_flows += 1,
        }
    }

    /// One value per series of counter `name`, each on its own track under the process. A
    /// series without a value this time (NVML did not report it) gets no event: no value, not
    /// a zero (its track is made at its first value).
    fn counter(
        &mut self,
        pid: u64,
        ts: u64,
        name: &str,
        values: &[(&'static str, Option<u64>)],
    ) -> Result<(), TraceError> {
        let parent = {
            let t = self.process_track(pid)?;
            self.seqs[t].id
        };
        for (k, val) in values {
            let Some(v) = *val else {
                continue;
            };
            let label = if values.len() == 1 {
                name.to_owned()
            } else {
                format!("{name}: {k}")
            };
            let t = match self.counters.get(&(pid, label.clone())) {
                Some(&t) => t,
                None => {
                    let t = self.open(|td| {
                        td.uint(f::TD_PARENT, parent);
                        td.bytes(f::TD_NAME, label.as_bytes());
                        td.bytes(f::TD_COUNTER, &[]);
                    })?;
                    self.counters.insert((pid, label), t);
                    t
                }
            };
            // An integer where it fits.
            self.begin_event(COUNTER);
            let e = &mut self.scratch.event;
            match i64::try_from(v) {
                Ok(i) => e.int(f::TE_COUNTER_INT, i),
                Err(_) => e.double(f::TE_COUNTER_DOUBLE, v as f64),
            }
            self.write_event(t, ts)?;
        }
        Ok(())
    }
}

impl<W: Write> Sink for PerfettoSink<W> {
    fn event(&mut self, e: TraceEvent) -> Result<(), TraceError> {
        // Slices wait for the flow events that follow them (a launch: its thread's event, its
        // stream's track when it is new, its stream's event, then any flow's ends); an
        // instant or a counter writes them out first, keeping the order.
        if matches!(e, TraceEvent::Instant { .. } | TraceEvent::Counter { .. }) {
            self.flush_pending(0)?;
        } else if self.pending.len() >= MAX_PENDING {
            // A long run of slices: only the newest can still get a flow.
            self.flush_pending(2)?;
        }
        match e {
            TraceEvent::ProcessName { pid, name } => self.process_name(pid, &name),
            TraceEvent::ThreadName { pid, tid, name } => self.thread_name(pid, tid, &name),
            TraceEvent::Slice {
                pid,
                tid,
                ts_ns,
                dur,
                cat,
                name,
                args,
            } => {
                let track = self.thread_track(pid, tid)?;
                self.pending.push_back(Pending {
                    track,
                    ts: ts_ns,
                    dur: dur.ns(),
                    pid,
                    tid,
                    name,
                    cat,
                    args,
                    flows_out: Vec::new(),
                    flows_in: Vec::new(),
                });
                Ok(())
            }
            TraceEvent::FlowStart {
                id,
                pid,
                tid,
                ts_ns,
                ..
            } => {
                self.flow(id, pid, tid, ts_ns, true);
                Ok(())
            }
            TraceEvent::FlowEnd {
                id,
                pid,
                tid,
                ts_ns,
                ..
            } => {
                self.flow(id, pid, tid, ts_ns, false);
                Ok(())
            }
            TraceEvent::Instant {
                pid,
                tid,
                ts_ns,
                scope,
                cat,
                name,
                args,
            } => {
                let t = match scope {
                    Scope::Process => self.process_track(pid)?,
                    Scope::Thread => self.thread_track(pid, tid)?,
                };
                self.begin_event(INSTANT);
                self.labels(t, &name, cat, &args);
                self.write_event(t, ts_ns)
            }
            TraceEvent::Counter {
                pid,
                ts_ns,
                name,
                values,
            } => self.counter(pid, ts_ns, &name, &values),
        }
    }

    fn finish(&mut self) -> Result<(), TraceError> {
        self.flush_pending(0)?;
        Ok(self.out.flush()?)
    }
}

#[cfg(test)]
mod tests;
