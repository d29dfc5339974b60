//! Aggregator tests: synthetic record sequences in, exact report values out (shared builders).

mod counters;
mod derived;
mod kernels;

use super::*;
use crate::api::Layer;
use crate::enrich::names::{MapSymbols, NoSymbols};
use crate::model::snapshot::ProcessReport;
use profiler_common::{
    AliasBody, CopyBody, GraphBody, Header, LaunchBody, MemBody, NAME_CAP, NameBody, SyncBody, dir,
    kind, memkind, memop, namesrc,
};
use serde_json::{Value, json};
use std::time::{Duration, SystemTime};

const LAUNCH_RT: u32 = 0;
const LAUNCH_DRV: u32 = 1;
const MEMCPY: u32 = 2;
const MEMCPY_ASYNC: u32 = 3;
const STREAM_SYNC: u32 = 4;
const MALLOC: u32 = 5;
const FREE: u32 = 6;
const WAIT_EVENT: u32 = 7;
const GRAPH_LAUNCH: u32 = 8;
const MEM_CREATE: u32 = 9;
const MEM_RELEASE: u32 = 10;
const MALLOC_HOST: u32 = 11;
const MEMSET_ASYNC: u32 = 12;

fn apis() -> ApiTable {
    let mut t = ApiTable::new();
    for (name, layer) in [
        ("cudaLaunchKernel", Layer::Runtime),
        ("cuLaunchKernel", Layer::Driver),
        ("cudaMemcpy", Layer::Runtime),
        ("cudaMemcpyAsync", Layer::Runtime),
        ("cudaStreamSynchronize", Layer::Runtime),
        ("cudaMalloc", Layer::Runtime),
        ("cudaFree", Layer::Runtime),
        ("cuStreamWaitEvent", Layer::Driver),
        ("cudaGraphLaunch", Layer::Runtime),
        ("cuMemCreate", Layer::Driver),
        ("cuMemRelease", Layer::Driver),
        ("cudaMallocHost", Layer::Runtime),
        ("cudaMemsetAsync", Layer::Runtime),
    ] {
        t.intern(name, layer);
    }
    t
}

fn agg() -> Aggregator {
    Aggregator::new(apis(), Box::new(NoSymbols))
}

fn hdr(kind: u32, api: u32, tgid: u32) -> Header {
    Header {
        kind,
        api,
        tgid,
        tid: tgid,
        ts_ns: 1,
    }
}

fn launch(tgid: u32, api: u32, func: u64, grid: u32, stream: u64) -> Event {
    let body = LaunchBody {
        func,
        stream,
        caller: 0,
        grid: [grid, 1, 1],
        block: [256, 1, 1],
        shared_bytes: 0,
        flags: 0,
    };
    Event::Launch(hdr(kind::LAUNCH, api, tgid), body)
}

fn name(tgid: u32, source: u32, handle: u64, mangled: &str) -> Event {
    let mut body = NameBody {
        handle,
        scope: 0,
        source,
        len: mangled.len() as u32,
        flags: 0,
        _pad: 0,
        name: [0; NAME_CAP],
    };
    body.name[..mangled.len()].copy_from_slice(mangled.as_bytes());
    Event::Name(hdr(kind::NAME, 0, tgid), body)
}

fn alias(tgid: u32, from: u64, to: u64) -> Event {
    Event::Alias(hdr(kind::ALIAS, 0, tgid), AliasBody { from, to })
}

fn copy(api: u32, direction: u32, bytes: u64, flags_: u32, dur_ns: u64, ret: i32) -> Event {
    let body = CopyBody {
        dst: 0,
        src: 0,
        bytes,
        stream: 0,
        dur_ns,
        direction,
        flags: flags_,
        ret,
        _pad: 0,
    };
    Event::Copy(hdr(kind::COPY, api, 100), body)
}

fn sync(api: u32, dur_ns: u64, flags_: u32) -> Event {
    Event::Sync(
        hdr(kind::SYNC, api, 100),
        SyncBody {
            handle: 0,
            dur_ns,
            ret: 0,
            flags: flags_,
        },
    )
}

fn mem(api: u32, op: u32, ptr: u64, bytes: u64, mem_kind: u32, ret: i32) -> Event {
    let body = MemBody {
        ptr,
        bytes,
        dur_ns: 1000,
        stream: 0,
        op,
        mem_kind,
        ret,
        flags: flags::HAS_RETURN,
    };
    Event::Mem(hdr(kind::MEM, api, 100), body)
}

fn meta() -> ReportMeta {
    ReportMeta {
        host: "gpu-box".into(),
        started_at: SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_417_200),
        started_mono_ns: 0,
        duration_ns: 12_500_000_000,
        drops: crate::capture::drops_by_kind(&[]),
        submitted: crate::capture::drops_by_kind(&[0, 1, 2]),
        faults: Default::default(),
    }
}

fn run(a: &mut Aggregator, events: &[Event]) -> Vec<ProcessReport> {
    for e in events {
        a.apply(e);
    }
    a.report(meta()).processes
}

fn only(a: &mut Aggregator, events: &[Event]) -> Value {
    let mut ps = run(a, events);
    assert_eq!(ps.len(), 1);
    serde_json::to_value(ps.remove(0)).unwrap()
}
