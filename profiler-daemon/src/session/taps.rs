//! Taps: what keeps the records and facts the aggregator is told, besides the aggregator — the
//! capture file (`--output FILE.gpuprof`) and the deep captures the control socket starts.
//!
//! The aggregator task hands every record and frame to [`Taps`], which hands it to each tap in
//! one place; a tap decides for itself what of it it keeps (a deep capture keeps only its
//! process's or job's records, from its start on).

use super::deep::DeepCapture;
use crate::enrich::stacks::StackSym;
use crate::model::Aggregator;
use crate::store::{self, Frame};
use profiler_common::decode::Event;

/// One place the aggregator's inputs are kept.
pub(crate) trait RecordTap {
    /// A record as the ring buffer gave it (`ev`: `None` when it did not decode).
    fn record(&mut self, rec: &[u8], ev: Option<&Event>, agg: &Aggregator);
    /// A fact about the whole capture: the API table, the libraries, an NVML sample.
    fn frame(&mut self, f: &Frame);
    /// A fact about process `tgid`: who it is, that it exited, its job.
    fn frame_for(&mut self, tgid: u32, f: &Frame);
    /// Names of stack frames the resolver learned (of any process).
    fn names(&mut self, learned: &[StackSym], agg: &Aggregator);
    /// The process behind `tgid` is over: it ran another program, its pid went to a new
    /// process, or the service forgot it.
    fn retire(&mut self, tgid: u32);
}

/// The capture file keeps everything, in order.
impl RecordTap for store::Writer {
    fn record(&mut self, rec: &[u8], _ev: Option<&Event>, _agg: &Aggregator) {
        store::Writer::record(self, rec);
    }

    fn frame(&mut self, f: &Frame) {
        store::Writer::frame(self, f);
    }

    fn frame_for(&mut self, _tgid: u32, f: &Frame) {
        store::Writer::frame(self, f);
    }

    fn names(&mut self, learned: &[StackSym], _agg: &Aggregator) {
        store::Writer::frame(self, &Frame::StackSyms(learned.to_vec()));
    }

    fn retire(&mut self, tgid: u32) {
        store::Writer::frame(self, &Frame::Retire { tgid });
    }
}

/// Every tap of a session: the capture file, when one is written, and the deep captures
/// running.
#[derive(Default)]
pub(crate) struct Taps {
    pub journal: Option<store::Writer>,
    pub deep: Vec<DeepCapture>,
}

impl Taps {
    fn each(&mut self) -> impl Iterator<Item = &mut dyn RecordTap> {
        let journal = self.journal.iter_mut().map(|j| j as &mut dyn RecordTap);
        journal.chain(self.deep.iter_mut().map(|d| d as &mut dyn RecordTap))
    }

    pub fn record(&mut self, rec: &[u8], ev: Option<&Event>, agg: &Aggregator) {
        self.each().for_each(|t| t.record(rec, ev, agg));
    }

    pub fn frame(&mut self, f: &Frame) {
        self.each().for_each(|t| t.frame(f));
    }

    pub fn frame_for(&mut self, tgid: u32, f: &Frame) {
        self.each().for_each(|t| t.frame_for(tgid, f));
    }

    pub fn retire(&mut self, tgid: u32) {
        self.each().for_each(|t| t.retire(tgid));
    }

    /// The names the stack resolver learned since last time, to every tap. With `settle_for`,
    /// first waits for the native frames of that process still being named: before it is
    /// retired, runs another program or is forgotten (its names would otherwise arrive after,
    /// as the next program's). [`SETTLE_ALL`] waits for every process's.
    pub fn names_out(&mut self, agg: &mut Aggregator, settle_for: Option<u32>) {
        let stacks = agg.stacks_mut();
        match settle_for {
            Some(t) if t == SETTLE_ALL || stacks.naming(t) => stacks.settle(),
            _ => stacks.poll(),
        }
        let learned = stacks.take_log();
        if learned.is_empty() {
            return;
        }
        self.each().for_each(|t| t.names(&learned, agg));
    }
}

/// [`Taps::names_out`]'s `settle_for` for every process.
pub(crate) const SETTLE_ALL: u32 = u32::MAX;
