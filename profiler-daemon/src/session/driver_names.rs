//! The session's side of names read from the driver's objects
//! ([`crate::enrich::driver_objects`]): what each record teaches the learners, and the name
//! records made for what they read, handed to the taps and the aggregator like a probe's.

use super::taps::Taps;
use crate::api::Layer;
use crate::enrich::driver_objects::{DriverObjects, HandleKind};
use crate::model::Aggregator;
use profiler_common::decode::{Event, decode, encode};
use profiler_common::{Header, NAME_CAP, NameBody, Record, flags, kind, namesrc};

/// A name a probe saw is a calibration sample; a driver launch of a handle with no name is
/// one to read once a layout is confirmed. Called after `ev` was applied.
pub(crate) fn observe(driver: &mut DriverObjects, agg: &Aggregator, ev: &Event) {
    let (h, func, launch_flags) = match ev {
        Event::Name(h, n) => {
            if let Some(k) = HandleKind::of_source(n.source) {
                let truncated = n.flags & flags::TRUNCATED != 0;
                driver.calibrate(h.tgid, k, n.handle, n.name_bytes(), truncated);
            }
            return;
        }
        Event::Launch(h, l) => (h, l.func, l.flags),
        Event::Launches(h, l) => (h, l.func, l.flags),
        _ => return,
    };
    // A runtime launch names a host stub, which the symbol tables name; one seen at the
    // driver call it made (one trap per launch) carries the driver's handle.
    let driver_handle = launch_flags & flags::DRIVER_HANDLE != 0
        || agg
            .api_table()
            .get(h.api)
            .is_some_and(|a| a.layer == Layer::Driver);
    if func == 0 || !driver_handle {
        return;
    }
    driver.launched(h.tgid, func, || {
        agg.names(h.tgid)
            .is_some_and(|t| t.resolve_entry(func).is_some())
    });
}

/// The names read since the last call, as records of source
/// [`namesrc::DRIVER_OBJECT`] (or [`namesrc::DRIVER_OBJECT_REMEMBERED`]): kept by the taps (a capture file replays them) and applied.
pub(crate) fn record(driver: &mut DriverObjects, agg: &mut Aggregator, taps: &mut Taps) {
    for l in driver.take() {
        let n = l.name.len().min(NAME_CAP);
        let mut body = NameBody {
            handle: l.handle,
            scope: 0,
            source: if l.remembered {
                namesrc::DRIVER_OBJECT_REMEMBERED
            } else {
                namesrc::DRIVER_OBJECT
            },
            len: n as u32,
            flags: if l.name.len() > n {
                flags::TRUNCATED
            } else {
                0
            },
            _pad: 0,
            name: [0; NAME_CAP],
        };
        body.name[..n].copy_from_slice(&l.name[..n]);
        let rec = Record {
            header: Header {
                kind: kind::NAME,
                api: 0,
                tgid: l.tgid,
                tid: l.tgid,
                ts_ns: crate::sys::clock::monotonic_ns(),
            },
            body,
        };
        let bytes = encode(&rec);
        let Ok(ev) = decode(bytes) else { continue };
        taps.record(bytes, Some(&ev), agg);
        agg.apply(&ev);
    }
}
