//! Benchmark helpers behind hidden subcommands (`cargo xtask bench` drives them):
//!
//! * `gpuprofd floor --lib FILE --symbol NAME...`: an *empty* uprobe at the site gpuprofd's
//!   placement would choose for each symbol (and, with `--entry`, at the symbol entry), held
//!   until stdin closes. What the kernel's uprobe machinery costs with nothing of ours in it.
//! * `gpuprofd bench-pipeline --events N`: synthetic records through decode and aggregation on
//!   one thread: the userspace pipeline's ceiling in events per second.

use crate::api::{ApiTable, Layer};
use crate::attach::{multi, placement};
use crate::capture;
use crate::discovery::elf;
use crate::enrich::names::NoSymbols;
use crate::model::Aggregator;
use profiler_common::decode::{decode, encode};
use profiler_common::{Header, LaunchBody, Record, kind};
use std::io::Read;
use std::path::Path;
use std::time::Instant;

/// Attaches the empty program to `symbols` of `lib` the way the capture attaches probes;
/// returns how many probes.
pub fn floor(lib: &Path, symbols: &[String], at_entry: bool) -> Result<usize, String> {
    let mut ebpf = capture::load(1 << 20).map_err(|e| format!("{e:#}"))?;
    let info = elf::read_elf(lib).map_err(|e| format!("{e:#}"))?;
    let mut offsets = Vec::new();
    for s in symbols {
        let f = info
            .exports
            .iter()
            .find(|f| &f.name == s)
            .ok_or_else(|| format!("{} does not export {s}", lib.display()))?;
        let off = if at_entry {
            0
        } else {
            placement::choose(&f.entry_bytes, f.vaddr).offset
        };
        offsets.push(f.file_offset + off);
    }
    let n = offsets.len();
    let probes = multi::attach_program(&mut ebpf, "empty", lib, &offsets, 0)?;
    eprintln!(
        "gpuprofd floor: ready: {n} empty probes ({}); close stdin to stop",
        probes.how
    );
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    Ok(n)
}

/// Decodes and aggregates `events` synthetic launch records (8 processes, 64 kernels, 4
/// configurations), also journaling them into a capture file at `capture` when given (as
/// `--output FILE.gpuprof` does); returns events per second.
pub fn pipeline(events: u64, capture: Option<&std::path::Path>) -> Result<f64, String> {
    let mut journal = match capture {
        Some(p) => {
            let f =
                crate::session::create_output(p).map_err(|e| format!("{}: {e}", p.display()))?;
            Some(crate::store::Writer::new(
                f,
                p,
                crate::store::header_now("bench".into(), "bench-pipeline".into()),
            ))
        }
        None => None,
    };
    let mut api = ApiTable::default();
    let id = api.intern("cuLaunchKernel", Layer::Driver);
    let records: Vec<Record<LaunchBody>> = (0..4096u64)
        .map(|i| Record {
            header: Header {
                kind: kind::LAUNCH,
                api: u32::from(id),
                tgid: 1000 + (i % 8) as u32,
                tid: 1000 + (i % 8) as u32,
                ts_ns: i,
            },
            body: LaunchBody {
                func: 0x7f00_0000 + (i % 64) * 0x40,
                grid: [1 + (i % 4) as u32, 1, 1],
                block: [256, 1, 1],
                ..Default::default()
            },
        })
        .collect();
    let mut agg = Aggregator::new(api, Box::new(NoSymbols));
    let t = Instant::now();
    let mut done = 0u64;
    while done < events {
        for r in &records {
            let bytes = encode(r);
            if let Some(j) = journal.as_mut() {
                j.record(bytes);
            }
            if let Ok(ev) = decode(bytes) {
                agg.apply(&ev);
            }
            done += 1;
            if done == events {
                break;
            }
        }
    }
    if let Some(j) = journal.as_mut() {
        j.flush();
        if let Some(e) = j.failure() {
            return Err(e.to_owned());
        }
    }
    let secs = t.elapsed().as_secs_f64();
    std::hint::black_box(agg.seen_tgids());
    Ok(events as f64 / secs)
}
