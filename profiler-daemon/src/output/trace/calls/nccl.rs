//! NCCL calls on the timeline: collectives and sends/receives on a track per communicator of
//! their process, the other calls (creation, destroy, queries) on the calling thread.

use super::{Call, Calls};
use crate::output::trace::{Arg, Args, Emit, NCCL_TID_BASE, TraceError, TraceEvent};
use profiler_common::flags;

/// A communicator's id and rank (where known) and its track.
#[derive(Clone)]
pub(super) struct CommTrack {
    id: Option<String>,
    rank: Option<(i32, i32)>,
    tid: u64,
}

impl Calls<'_> {
    /// An NCCL call. A collective or point-to-point call goes on its communicator's track in
    /// the process ("NCCL <id> rank r/n": one track per communicator, so each rank's
    /// collectives read as a row, also in a merged trace of several nodes) as an instant at its
    /// entry (its record comes there; the kernel it launches, and that kernel's GPU slice where
    /// measured, follow on the calling thread), with its communicator (id and rank from the
    /// report where known), operation, count, bytes, datatype, reduction, root or peer, stream
    /// and group depth; the other calls (creation, destroy, queries) stay on the thread, as
    /// slices where timed.
    pub(super) fn nccl(
        &mut self,
        emit: &mut Emit,
        call: &Call,
        b: &profiler_common::nccl::NcclBody,
    ) -> Result<(), TraceError> {
        use profiler_common::nccl::{call as nc, datatype, redop};
        let comm = self.comm(emit, call, b.comm)?;
        let mut args = vec![("comm", Arg::Hex(b.comm))];
        if let Some(id) = &comm.id {
            args.push(("comm_id", Arg::Str(id.as_str().into())));
        }
        if let Some((rank, n)) = comm.rank {
            args.push(("rank", Arg::Int(i64::from(rank))));
            args.push(("nranks", Arg::Int(i64::from(n))));
        }
        if !nc::is_op(b.call) {
            if b.flags & flags::HAS_RETURN != 0 {
                args.push(("ret", Arg::Int(i64::from(b.ret))));
            }
            let e = call.timed(
                "nccl",
                call.api.clone(),
                b.flags,
                b.dur_ns,
                Args::from(args),
            );
            return emit.send(e);
        }
        args.extend([
            ("count", Arg::Uint(b.count)),
            ("bytes", Arg::Uint(b.bytes())),
            (
                "datatype",
                Arg::Str(datatype::name(b.datatype).unwrap_or("unknown").into()),
            ),
            ("stream", Arg::Hex(b.stream)),
            ("group", Arg::Uint(u64::from(b.group))),
            ("thread", Arg::Uint(call.tid)),
        ]);
        if b.redop != redop::NONE {
            args.push(("reduction", Arg::Str(redop::name(b.redop).into())));
        }
        if b.peer >= 0 {
            let k = if matches!(b.call, nc::SEND | nc::RECV) {
                "peer"
            } else {
                "root"
            };
            args.push((k, Arg::Int(i64::from(b.peer))));
        }
        let on_track = Call {
            tid: comm.tid,
            ..call.clone()
        };
        let e = on_track.timed(
            "nccl",
            call.api.clone(),
            b.flags,
            b.dur_ns,
            Args::from(args),
        );
        emit.send(e)
    }

    /// Communicator `handle` of `call`'s process: what the report knows of it and its track,
    /// named when it is new (looked up in the report once per communicator).
    fn comm(&mut self, emit: &mut Emit, call: &Call, handle: u64) -> Result<CommTrack, TraceError> {
        if let Some(c) = self.comms.get(&(call.pid, handle)) {
            return Ok(c.clone());
        }
        let (tgid, g) = call.process;
        let shown = format!("{handle:#x}");
        let known = self
            .cap
            .replay
            .report
            .processes
            .iter()
            .filter(|p| p.tgid == tgid)
            .nth(g as usize)
            .and_then(|p| p.nccl.as_ref())
            .and_then(|n| {
                n.communicators
                    .iter()
                    .find(|c| c.handle.as_deref() == Some(shown.as_str()))
            });
        let id = known.and_then(|c| c.id.clone());
        let rank = known.and_then(|c| c.rank.zip(c.nranks));
        let tid = NCCL_TID_BASE + self.comms.len() as u64;
        let name = format!(
            "NCCL {}{}",
            id.as_deref().unwrap_or(&shown),
            rank.map_or_else(String::new, |(r, n)| format!(" rank {r}/{n}"))
        );
        emit.send(TraceEvent::ThreadName {
            pid: call.pid,
            tid,
            name,
        })?;
        let c = CommTrack { id, rank, tid };
        self.comms.insert((call.pid, handle), c.clone());
        Ok(c)
    }
}
