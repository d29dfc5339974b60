//! Chrome Trace Event JSON (`{"displayTimeUnit":"ns","traceEvents":[…]}`), written from the
//! [`TraceEvent`]s as they come: the one place their ns become the format's µs (floats).
//!
//! Each event is one JSON object, its keys in alphabetical order (the order of the `serde_json`
//! maps this writer used to build; the golden traces hold it), one event per line.

use super::{Arg, Args, Dur, Scope, Sink, TraceError, TraceEvent};
use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use std::io::Write;

/// Chrome Trace Event JSON, written to `out`.
pub struct ChromeSink<W: Write> {
    out: W,
    n: u64,
    written: u64,
    /// Stop with [`TraceError::OverLimit`] past this many bytes (each event and the separator
    /// before it; not the opening nor the end).
    pub limit: Option<u64>,
}

impl<W: Write> ChromeSink<W> {
    pub fn new(out: W) -> Self {
        Self {
            out,
            n: 0,
            written: 0,
            limit: None,
        }
    }
}

const OPENING: &[u8] = b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[";

impl<W: Write> Sink for ChromeSink<W> {
    fn event(&mut self, e: TraceEvent) -> Result<(), TraceError> {
        if self.n == 0 {
            self.out.write_all(OPENING)?;
        } else {
            self.out.write_all(b",\n")?;
        }
        let text = object(&e).map_err(std::io::Error::from)?;
        self.written += text.len() as u64 + 2;
        if self.limit.is_some_and(|l| self.written > l) {
            return Err(TraceError::OverLimit);
        }
        self.out.write_all(&text)?;
        self.n += 1;
        Ok(())
    }

    fn finish(&mut self) -> Result<(), TraceError> {
        if self.n == 0 {
            self.out.write_all(OPENING)?;
        }
        writeln!(self.out, "]}}")?;
        Ok(self.out.flush()?)
    }
}

/// ns as the format's µs.
fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

/// One event as the format's object. serde writes the fields in this order: alphabetical, as
/// the `serde_json` maps this writer used to build had them (the golden traces hold it).
#[derive(Serialize)]
struct Object<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<ObjectArgs<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bp: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cat: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<Micros>,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<u64>,
    name: &'a str,
    ph: &'static str,
    pid: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    s: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tid: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<f64>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum ObjectArgs<'a> {
    Args(&'a Args),
    /// A metadata event's: the track's name.
    Name {
        name: &'a str,
    },
    Series(Series<'a>),
}

/// A duration: a launch's mark is the integer 0 (as it always was), a measured one µs.
#[derive(Serialize)]
#[serde(untagged)]
enum Micros {
    Mark(u8),
    Us(f64),
}

/// An object of phase `ph` named `name` in process `pid`, with none of the optional fields.
fn base<'a>(ph: &'static str, pid: u64, name: &'a str) -> Object<'a> {
    Object {
        args: None,
        bp: None,
        cat: None,
        dur: None,
        id: None,
        name,
        ph,
        pid,
        s: None,
        tid: None,
        ts: None,
    }
}

/// `e` as one JSON object.
fn object(e: &TraceEvent) -> Result<Vec<u8>, serde_json::Error> {
    let o = match e {
        TraceEvent::ProcessName { pid, name } => Object {
            args: Some(ObjectArgs::Name { name }),
            tid: Some(0),
            ..base("M", *pid, "process_name")
        },
        TraceEvent::ThreadName { pid, tid, name } => Object {
            args: Some(ObjectArgs::Name { name }),
            tid: Some(*tid),
            ..base("M", *pid, "thread_name")
        },
        TraceEvent::Slice {
            pid,
            tid,
            ts_ns,
            dur,
            cat,
            name,
            args,
        } => Object {
            // A launch on its stream's track has none (its thread's event has them).
            args: (!args.is_empty()).then_some(ObjectArgs::Args(args)),
            cat: Some(cat),
            dur: Some(match dur {
                Dur::Mark => Micros::Mark(0),
                Dur::Ns(ns) => Micros::Us(us(*ns)),
            }),
            tid: Some(*tid),
            ts: Some(us(*ts_ns)),
            ..base("X", *pid, name)
        },
        TraceEvent::Instant {
            pid,
            tid,
            ts_ns,
            scope,
            cat,
            name,
            args,
        } => Object {
            // A process's exit has none.
            args: (!args.is_empty()).then_some(ObjectArgs::Args(args)),
            cat: Some(cat),
            s: Some(match scope {
                Scope::Thread => "t",
                Scope::Process => "p",
            }),
            tid: Some(*tid),
            ts: Some(us(*ts_ns)),
            ..base("i", *pid, name)
        },
        TraceEvent::Counter {
            pid,
            ts_ns,
            name,
            values,
        } => Object {
            args: Some(ObjectArgs::Series(Series(values))),
            ts: Some(us(*ts_ns)),
            ..base("C", *pid, name)
        },
        TraceEvent::FlowStart {
            id,
            pid,
            tid,
            ts_ns,
            cat,
            name,
        } => Object {
            cat: Some(cat),
            id: Some(*id),
            tid: Some(*tid),
            ts: Some(us(*ts_ns)),
            ..base("s", *pid, name)
        },
        TraceEvent::FlowEnd {
            id,
            pid,
            tid,
            ts_ns,
            cat,
            name,
        } => Object {
            // Bound to the enclosing slice (the one it arrives at), not the next one.
            bp: Some("e"),
            cat: Some(cat),
            id: Some(*id),
            tid: Some(*tid),
            ts: Some(us(*ts_ns)),
            ..base("f", *pid, name)
        },
    };
    let mut buf = Vec::with_capacity(256);
    serde_json::to_writer(&mut buf, &o)?;
    Ok(buf)
}

/// A counter's series: `{"series": value or null, …}`.
struct Series<'a>(&'a [(&'static str, Option<u64>)]);

impl Serialize for Series<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl Serialize for Args {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.iter() {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// An argument as a JSON value (also how a Perfetto annotation shows a list).
impl Serialize for Arg {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Arg::Uint(v) => s.serialize_u64(*v),
            Arg::Int(v) => s.serialize_i64(*v),
            Arg::Bool(v) => s.serialize_bool(*v),
            Arg::Str(v) => s.serialize_str(v),
            Arg::Hex(v) => s.collect_str(&format_args!("0x{v:x}")),
            Arg::Dim3(v) => v.serialize(s),
            Arg::List(v) => v.serialize(s),
        }
    }
}
