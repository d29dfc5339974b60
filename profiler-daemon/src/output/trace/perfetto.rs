//! The trace in Perfetto's protobuf format (`perfetto.protos.Trace`), for captures whose JSON
//! would be too large for a browser to load (Perfetto UI and chrome://tracing read JSON into
//! one string; V8 caps a string at 2^29 characters).
//!
//! Each [`TraceEvent`] is written as it comes, with nothing held but the tracks, the interned
//! names and the launch being written:
//! - a process's name → a process track (`TrackDescriptor.process`); the NVML track (pid 0) a
//!   plain named track;
//! - a thread's name → a thread track for a real thread, a named child track of the process for
//!   a stream or the steps;
//! - a slice → a slice begin and end; an instant → an instant on the thread or process track;
//! - a counter → one counter track per series (`name`, or `name: series` when it has several),
//!   created at its first value (a value not reported: 0.0);
//! - flow starts and ends → `flow_ids` / `terminating_flow_ids` on the slice they bind to (the
//!   one at the same time on the same track, which the exporter always sends first);
//! - arguments → debug annotations (numbers, booleans and strings as such; a handle or
//!   address as its `0x…` string; a grid, block or list as JSON text).
//!
//! Names, categories and annotation names are interned on the one packet sequence. Times are
//! ns from the capture's start, as the events have them.
//!
//! The protobuf encoding is written here by hand rather than generated (prost and Perfetto's
//! .proto files): this writer only writes, about 30 fields of a few messages, and a varint, a
//! key and a length prefix are all it takes, with no codegen step or dependency.

use super::{Arg, Args, Scope, Sink, TraceError, TraceEvent};
use std::collections::HashMap;
use std::io::Write;

// Field numbers from perfetto/protos/perfetto/trace/*.proto (checked against Perfetto's own
// descriptors by the end-to-end test).
mod f {
    pub const TRACE_PACKET: u32 = 1;
    // TracePacket
    pub const TIMESTAMP: u32 = 8;
    pub const SEQUENCE_ID: u32 = 10;
    pub const TRACK_EVENT: u32 = 11;
    pub const INTERNED_DATA: u32 = 12;
    pub const SEQUENCE_FLAGS: u32 = 13;
    pub const TRACK_DESCRIPTOR: u32 = 60;
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
    pub const TE_TRACK: u32 = 11;
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
    // InternedData and its entries (EventCategory, EventName, DebugAnnotationName)
    pub const ID_CATEGORIES: u32 = 1;
    pub const ID_NAMES: u32 = 2;
    pub const ID_ANNOTATION_NAMES: u32 = 3;
    pub const IID: u32 = 1;
    pub const IID_NAME: u32 = 2;
}

const SLICE_BEGIN: u64 = 1;
const SLICE_END: u64 = 2;
const INSTANT: u64 = 3;
const COUNTER: u64 = 4;
const SEQ_INCREMENTAL_STATE_CLEARED: u64 = 1;
const SEQ_NEEDS_INCREMENTAL_STATE: u64 = 2;
/// Slices held at most for flow events to bind to.
const MAX_PENDING: usize = 64;
/// The one packet sequence this writer uses.
const SEQUENCE: u64 = 1;

/// A protobuf message being built.
#[derive(Default)]
struct Msg(Vec<u8>);

impl Msg {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
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
    fn double(&mut self, field: u32, v: f64) {
        self.key(field, 1);
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn fixed64(&mut self, field: u32, v: u64) {
        self.key(field, 1);
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, field: u32, b: &[u8]) {
        self.key(field, 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    fn msg(&mut self, field: u32, m: &Msg) {
        self.bytes(field, &m.0);
    }
}

/// Interned strings of one kind: their ids, and those not yet sent.
#[derive(Default)]
struct Interner {
    ids: HashMap<String, u64>,
    fresh: Vec<(u64, String)>,
}

impl Interner {
    fn id(&mut self, s: &str) -> u64 {
        if let Some(&i) = self.ids.get(s) {
            return i;
        }
        let i = self.ids.len() as u64 + 1;
        self.ids.insert(s.to_owned(), i);
        self.fresh.push((i, s.to_owned()));
        i
    }
    /// Moves the not-yet-sent entries into `interned` as field `field`.
    fn drain_into(&mut self, interned: &mut Msg, field: u32) {
        for (i, s) in self.fresh.drain(..) {
            let mut e = Msg::default();
            e.uint(f::IID, i);
            e.bytes(f::IID_NAME, s.as_bytes());
            interned.msg(field, &e);
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum TrackKey {
    Process(u64),
    Thread(u64, u64),
}

/// A slice held until the flow events that bind to it have been seen.
struct Pending {
    track: u64,
    ts: u64,
    dur: u64,
    pid: u64,
    tid: u64,
    name: String,
    cat: &'static str,
    args: Args,
    flows_out: Vec<u64>,
    flows_in: Vec<u64>,
}

/// [`TraceEvent`]s in, `perfetto.protos.Trace` out.
pub struct PerfettoSink<W: Write> {
    out: W,
    tracks: HashMap<TrackKey, u64>,
    counters: HashMap<(u64, String), u64>,
    next_uuid: u64,
    names: Interner,
    cats: Interner,
    arg_names: Interner,
    first_event: bool,
    pending: Vec<Pending>,
    /// Flow events that found no slice to bind to (none expected; counted, not guessed).
    pub unbound_flows: u64,
}

impl<W: Write> PerfettoSink<W> {
    pub fn new(out: W) -> Self {
        Self {
            out,
            tracks: HashMap::new(),
            counters: HashMap::new(),
            next_uuid: 1,
            names: Interner::default(),
            cats: Interner::default(),
            arg_names: Interner::default(),
            first_event: true,
            pending: Vec::new(),
            unbound_flows: 0,
        }
    }

    fn packet(&mut self, p: &Msg) -> Result<(), TraceError> {
        let mut outer = Msg::default();
        outer.msg(f::TRACE_PACKET, p);
        Ok(self.out.write_all(&outer.0)?)
    }

    fn uuid(&mut self) -> u64 {
        let u = self.next_uuid;
        self.next_uuid += 1;
        u
    }

    fn descriptor(&mut self, td: &Msg) -> Result<(), TraceError> {
        let mut p = Msg::default();
        p.uint(f::SEQUENCE_ID, SEQUENCE);
        p.msg(f::TRACK_DESCRIPTOR, td);
        self.packet(&p)
    }

    /// The track of process `pid` (a plain track named after it if none was announced).
    fn process_track(&mut self, pid: u64) -> Result<u64, TraceError> {
        if let Some(&u) = self.tracks.get(&TrackKey::Process(pid)) {
            return Ok(u);
        }
        let u = self.uuid();
        self.tracks.insert(TrackKey::Process(pid), u);
        let mut td = Msg::default();
        td.uint(f::TD_UUID, u);
        td.bytes(f::TD_NAME, format!("pid {pid}").as_bytes());
        self.descriptor(&td)?;
        Ok(u)
    }

    /// The track of `tid` in `pid` (a plain child track if none was announced).
    fn thread_track(&mut self, pid: u64, tid: u64) -> Result<u64, TraceError> {
        if let Some(&u) = self.tracks.get(&TrackKey::Thread(pid, tid)) {
            return Ok(u);
        }
        let parent = self.process_track(pid)?;
        let u = self.uuid();
        self.tracks.insert(TrackKey::Thread(pid, tid), u);
        let mut td = Msg::default();
        td.uint(f::TD_UUID, u);
        td.uint(f::TD_PARENT, parent);
        td.bytes(f::TD_NAME, format!("track {tid}").as_bytes());
        self.descriptor(&td)?;
        Ok(u)
    }

    /// A process's track, named.
    fn process_name(&mut self, pid: u64, label: &str) -> Result<(), TraceError> {
        let u = self.uuid();
        let mut td = Msg::default();
        td.uint(f::TD_UUID, u);
        if pid == 0 {
            td.bytes(f::TD_NAME, label.as_bytes());
        } else {
            let mut pd = Msg::default();
            pd.int(f::PD_PID, pid as i64);
            pd.bytes(f::PD_NAME, label.as_bytes());
            td.msg(f::TD_PROCESS, &pd);
        }
        self.tracks.insert(TrackKey::Process(pid), u);
        self.descriptor(&td)
    }

    /// A thread's (or a stream's, or the steps') track, named.
    fn thread_name(&mut self, pid: u64, tid: u64, label: &str) -> Result<(), TraceError> {
        let u = self.uuid();
        let mut td = Msg::default();
        td.uint(f::TD_UUID, u);
        if tid < super::STEP_TID {
            let mut thd = Msg::default();
            thd.int(f::THD_PID, pid as i64);
            thd.int(f::THD_TID, tid as i64);
            thd.bytes(f::THD_NAME, label.as_bytes());
            td.msg(f::TD_THREAD, &thd);
        } else {
            // A stream or the steps: a named track under the process.
            let parent = self.process_track(pid)?;
            td.uint(f::TD_PARENT, parent);
            td.bytes(f::TD_NAME, label.as_bytes());
        }
        self.tracks.insert(TrackKey::Thread(pid, tid), u);
        self.descriptor(&td)
    }

    /// A TrackEvent packet at `ts`; `body` fills the event after its type and track.
    fn track_event(
        &mut self,
        ts: u64,
        kind: u64,
        track: u64,
        body: impl FnOnce(&mut Self, &mut Msg),
    ) -> Result<(), TraceError> {
        let mut te = Msg::default();
        te.uint(f::TE_TYPE, kind);
        te.uint(f::TE_TRACK, track);
        body(self, &mut te);
        let mut p = Msg::default();
        p.uint(f::TIMESTAMP, ts);
        p.uint(f::SEQUENCE_ID, SEQUENCE);
        let mut interned = Msg::default();
        self.cats.drain_into(&mut interned, f::ID_CATEGORIES);
        self.names.drain_into(&mut interned, f::ID_NAMES);
        self.arg_names
            .drain_into(&mut interned, f::ID_ANNOTATION_NAMES);
        if !interned.0.is_empty() {
            p.msg(f::INTERNED_DATA, &interned);
        }
        p.uint(
            f::SEQUENCE_FLAGS,
            if std::mem::take(&mut self.first_event) {
                SEQ_INCREMENTAL_STATE_CLEARED
            } else {
                SEQ_NEEDS_INCREMENTAL_STATE
            },
        );
        p.msg(f::TRACK_EVENT, &te);
        self.packet(&p)
    }

    /// Name, category and arguments of an event.
    fn labels(&mut self, te: &mut Msg, name: &str, cat: &str, args: &Args) {
        te.uint(f::TE_CATEGORY_IIDS, self.cats.id(cat));
        te.uint(f::TE_NAME_IID, self.names.id(name));
        for (k, v) in args.iter() {
            let mut da = Msg::default();
            da.uint(f::DA_NAME_IID, self.arg_names.id(k));
            match v {
                Arg::Bool(b) => da.uint(f::DA_BOOL, u64::from(*b)),
                Arg::Uint(u) => da.uint(f::DA_UINT, *u),
                Arg::Int(i) => match u64::try_from(*i) {
                    Ok(u) => da.uint(f::DA_UINT, u),
                    Err(_) => da.int(f::DA_INT, *i),
                },
                Arg::Str(s) => da.bytes(f::DA_STRING, s.as_bytes()),
                Arg::Hex(h) => da.bytes(f::DA_STRING, format!("0x{h:x}").as_bytes()),
                Arg::Dim3(_) | Arg::List(_) => {
                    let json = serde_json::to_string(v).unwrap_or_default();
                    da.bytes(f::DA_STRING, json.as_bytes())
                }
            }
            te.msg(f::TE_ANNOTATIONS, &da);
        }
    }

    /// Writes the held slices but the newest `keep`.
    fn flush_pending(&mut self, keep: usize) -> Result<(), TraceError> {
        let n = self.pending.len().saturating_sub(keep);
        let done: Vec<Pending> = self.pending.drain(..n).collect();
        for p in done {
            self.track_event(p.ts, SLICE_BEGIN, p.track, |s, te| {
                s.labels(te, &p.name, p.cat, &p.args);
                for id in &p.flows_out {
                    te.fixed64(f::TE_FLOW_IDS, *id);
                }
                for id in &p.flows_in {
                    te.fixed64(f::TE_TERMINATING_FLOW_IDS, *id);
                }
            })?;
            self.track_event(p.ts + p.dur, SLICE_END, p.track, |_, _| {})?;
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

    /// One value per series of counter `name`, each on its own track under the process.
    fn counter(
        &mut self,
        pid: u64,
        ts: u64,
        name: &str,
        values: &[(&'static str, Option<u64>)],
    ) -> Result<(), TraceError> {
        let parent = self.process_track(pid)?;
        for (k, val) in values {
            let label = if values.len() == 1 {
                name.to_owned()
            } else {
                format!("{name}: {k}")
            };
            let track = match self.counters.get(&(pid, label.clone())) {
                Some(&u) => u,
                None => {
                    let u = self.uuid();
                    self.counters.insert((pid, label.clone()), u);
                    let mut td = Msg::default();
                    td.uint(f::TD_UUID, u);
                    td.uint(f::TD_PARENT, parent);
                    td.bytes(f::TD_NAME, label.as_bytes());
                    td.msg(f::TD_COUNTER, &Msg::default());
                    self.descriptor(&td)?;
                    u
                }
            };
            // An integer where it fits; a value not reported is 0.0.
            let val = *val;
            self.track_event(ts, COUNTER, track, |_, te| {
                match val.map(|v| (v, i64::try_from(v))) {
                    Some((_, Ok(i))) => te.int(f::TE_COUNTER_INT, i),
                    Some((v, Err(_))) => te.double(f::TE_COUNTER_DOUBLE, v as f64),
                    None => te.double(f::TE_COUNTER_DOUBLE, 0.0),
                }
            })?;
        }
        Ok(())
    }
}

impl<W: Write> Sink for PerfettoSink<W> {
    fn event(&mut self, e: TraceEvent) -> Result<(), TraceError> {
        // Slices wait for the flow events that follow them (a launch: its thread slice, its
        // stream's track when it is new, its stream slice, then the flow's two ends); an
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
                self.pending.push(Pending {
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
                let track = match scope {
                    Scope::Process => self.process_track(pid)?,
                    Scope::Thread => self.thread_track(pid, tid)?,
                };
                self.track_event(ts_ns, INSTANT, track, |s, te| {
                    s.labels(te, &name, cat, &args)
                })
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
mod tests {
    use super::*;

    /// A field read back: a number (varint or fixed64) or bytes.
    type Field = (u32, Result<u64, Vec<u8>>);

    /// Reads back the fields of one length-delimited protobuf message — enough to check the
    /// encoding by hand.
    fn fields(b: &[u8]) -> Vec<Field> {
        let mut out = Vec::new();
        let mut i = 0;
        let varint = |i: &mut usize| {
            let mut v = 0u64;
            let mut shift = 0;
            loop {
                let byte = b[*i];
                *i += 1;
                v |= u64::from(byte & 0x7f) << shift;
                if byte < 0x80 {
                    return v;
                }
                shift += 7;
            }
        };
        while i < b.len() {
            let k = varint(&mut i);
            let (field, wire) = ((k >> 3) as u32, k & 7);
            match wire {
                0 => out.push((field, Ok(varint(&mut i)))),
                1 => {
                    let v = u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
                    i += 8;
                    out.push((field, Ok(v)));
                }
                2 => {
                    let n = varint(&mut i) as usize;
                    out.push((field, Err(b[i..i + n].to_vec())));
                    i += n;
                }
                w => panic!("wire type {w}"),
            }
        }
        out
    }

    fn packets(b: &[u8]) -> Vec<Vec<Field>> {
        fields(b)
            .into_iter()
            .map(|(f, v)| {
                assert_eq!(f, 1);
                fields(&v.unwrap_err())
            })
            .collect()
    }

    fn get(m: &[Field], field: u32) -> Vec<&Result<u64, Vec<u8>>> {
        m.iter()
            .filter(|(f, _)| *f == field)
            .map(|(_, v)| v)
            .collect()
    }

    #[test]
    fn varints_and_keys_are_protobuf_encoding() {
        let mut m = Msg::default();
        m.uint(1, 150);
        m.int(2, -1);
        m.bytes(60, b"ab");
        assert_eq!(
            m.0,
            [
                0x08, 0x96, 0x01, // field 1 varint 150
                0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, // -1
                0xe2, 0x03, 0x02, b'a', b'b' // field 60, length 2
            ]
        );
    }

    #[test]
    fn a_launch_with_its_flow_becomes_two_slices_bound_by_the_flow() {
        let mut out = Vec::new();
        let mut s = PerfettoSink::new(&mut out);
        let stream = super::super::STREAM_TID_BASE;
        let launch = |tid, args| TraceEvent::Slice {
            pid: 7,
            tid,
            ts_ns: 1500,
            dur: super::super::Dur::Mark,
            cat: "launch",
            name: "k".into(),
            args,
        };
        let flow = |id, tid| (id, 7, tid, 1500, "enqueue", "enqueue");
        let (id, pid, tid, ts_ns, cat, name) = flow(1, 8);
        let start = TraceEvent::FlowStart {
            id,
            pid,
            tid,
            ts_ns,
            cat,
            name,
        };
        let (id, pid, tid, ts_ns, cat, name) = flow(1, stream);
        let end = TraceEvent::FlowEnd {
            id,
            pid,
            tid,
            ts_ns,
            cat,
            name,
        };
        for e in [
            TraceEvent::ProcessName {
                pid: 7,
                name: "p".into(),
            },
            TraceEvent::ThreadName {
                pid: 7,
                tid: 8,
                name: "t".into(),
            },
            launch(
                8,
                Args::from([
                    ("grid", Arg::Dim3([1, 1, 1])),
                    ("shared_bytes", Arg::Uint(0)),
                ]),
            ),
            // A new stream's track is announced between the launch's two slices.
            TraceEvent::ThreadName {
                pid: 7,
                tid: stream,
                name: "stream 0x1".into(),
            },
            launch(stream, Args::default()),
            start,
            end,
            TraceEvent::Counter {
                pid: 7,
                ts_ns: 2000,
                name: "device memory (bytes)".into(),
                values: vec![("live", Some(4096))],
            },
        ] {
            s.event(e).unwrap();
        }
        s.finish().unwrap();
        assert_eq!(s.unbound_flows, 0);
        let p = packets(&out);
        // 3 track descriptors, 2 × (begin, end), the counter's descriptor and its value.
        assert_eq!(p.len(), 9);
        let events: Vec<_> = p
            .iter()
            .filter_map(|pk| {
                get(pk, f::TRACK_EVENT)
                    .first()
                    .map(|e| (pk, fields(e.as_ref().unwrap_err())))
            })
            .collect();
        let kinds: Vec<u64> = events
            .iter()
            .map(|(_, e)| *get(e, f::TE_TYPE)[0].as_ref().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [SLICE_BEGIN, SLICE_END, SLICE_BEGIN, SLICE_END, COUNTER]
        );
        // The thread slice starts the flow, the stream slice ends it, both at 1500 ns.
        let (pk, begin) = &events[0];
        assert_eq!(get(pk, f::TIMESTAMP), [&Ok(1500)]);
        assert_eq!(get(begin, f::TE_FLOW_IDS), [&Ok(1)]);
        assert_eq!(get(&events[2].1, f::TE_TERMINATING_FLOW_IDS), [&Ok(1)]);
        // The first event clears the sequence's state and carries the interned names.
        assert_eq!(
            get(pk, f::SEQUENCE_FLAGS),
            [&Ok(SEQ_INCREMENTAL_STATE_CLEARED)]
        );
        assert_eq!(
            get(events[2].0, f::SEQUENCE_FLAGS),
            [&Ok(SEQ_NEEDS_INCREMENTAL_STATE)]
        );
        let interned = fields(get(pk, f::INTERNED_DATA)[0].as_ref().unwrap_err());
        let names: Vec<_> = get(&interned, f::ID_NAMES)
            .iter()
            .map(|e| fields(e.as_ref().unwrap_err()))
            .collect();
        assert_eq!(names.len(), 1);
        assert_eq!(get(&names[0], f::IID_NAME), [&Err(b"k".to_vec())]);
        // The grid (an array) is an annotation in JSON text.
        let anns = get(begin, f::TE_ANNOTATIONS);
        assert_eq!(anns.len(), 2);
        let grid = fields(anns[0].as_ref().unwrap_err());
        assert_eq!(get(&grid, f::DA_STRING), [&Err(b"[1,1,1]".to_vec())]);
        // The counter: an integer value on its own track.
        assert_eq!(get(&events[4].1, f::TE_COUNTER_INT), [&Ok(4096)]);
    }
}
