//! Benchmark helpers behind hidden subcommands (`cargo xtask bench` drives them):
//!
//! * `gpuprofd floor --lib FILE --symbol NAME...`: an *empty* uprobe at the site gpuprofd's
//!   placement would choose for each symbol (and, with `--entry`, at the symbol entry), held
//!   until stdin closes. What the kernel's uprobe machinery costs with nothing of ours in it.
//!   `--program record` puts the least a recording probe does there instead (one stack read,
//!   one clock read, one ring record), and `read`, `clock`, `ring` each of those parts alone;
//!   the records are read and counted, as the daemon would read them.
//! * `gpuprofd bench-pipeline --events N`: synthetic records through decode and aggregation on
//!   one thread: the userspace pipeline's ceiling in events per second.

use crate::api::{ApiTable, Layer};
use crate::attach::{multi, placement};
use crate::capture;
use crate::discovery::elf;
use crate::enrich::names::NoSymbols;
use crate::model::Aggregator;
use anyhow::{anyhow, bail};
use profiler_common::decode::{decode, encode};
use profiler_common::{Header, LaunchBody, Record, kind};
use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// The programs `gpuprofd floor --program` attaches: the name on the command line, the eBPF
/// program's, and whether it writes ring-buffer records.
pub const FLOOR_PROGRAMS: [(&str, &str, bool); 5] = [
    ("empty", "empty", false),
    ("record", "bench_record", true),
    ("read", "bench_read", false),
    ("clock", "bench_clock", false),
    ("ring", "bench_ring", true),
];

/// Attaches `program` (one of [`FLOOR_PROGRAMS`]) to `symbols` of `lib` the way the capture
/// attaches probes, and holds it until stdin closes; returns how many records it read (0 for
/// the programs that write none).
pub fn floor(lib: &Path, symbols: &[String], at_entry: bool, program: &str) -> anyhow::Result<u64> {
    let &(_, prog, writes) = FLOOR_PROGRAMS
        .iter()
        .find(|(name, _, _)| *name == program)
        .ok_or_else(|| {
            let names: Vec<&str> = FLOOR_PROGRAMS.iter().map(|p| p.0).collect();
            anyhow!("no program \"{program}\": one of {}", names.join(", "))
        })?;
    let mut ebpf = capture::load(capture::DEFAULT_RING_BYTES)?;
    let info = elf::read_elf(lib)?;
    let mut offsets = Vec::new();
    for s in symbols {
        let f = info
            .exports
            .iter()
            .find(|f| &f.name == s)
            .ok_or_else(|| anyhow!("{} does not export {s}", lib.display()))?;
        let off = if at_entry {
            0
        } else {
            placement::choose(&f.entry_bytes, f.vaddr).offset
        };
        offsets.push(f.file_offset + off);
    }
    let n = offsets.len();
    // The ring is taken out of the object only after the attach (the link loader finds the
    // program's maps in it), and read from before "ready": a ring that nobody drains fills up,
    // and a full ring's failed reserve is cheaper than a record.
    let probes = multi::attach_program(&mut ebpf, prog, lib, &offsets, 0)?;
    let stop = Arc::new(AtomicBool::new(false));
    let reader = if writes {
        let ring = capture::take_ring(&mut ebpf)?;
        let stop = Arc::clone(&stop);
        Some(std::thread::spawn(move || drain(ring, &stop)))
    } else {
        None
    };
    eprintln!(
        "gpuprofd floor: ready: {n} {program} probes ({}); close stdin to stop",
        probes.how
    );
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    drop(probes);
    stop.store(true, Ordering::Relaxed);
    let records = reader.map_or(0, |r| r.join().unwrap_or(0));
    if writes {
        eprintln!("gpuprofd floor: records {records}");
    }
    Ok(records)
}

/// Counts the ring's records until `stop`, reading every millisecond (the daemon reads on
/// wakeups and a 10 ms timer; the bench programs ask for no wakeup), and then what is left.
fn drain(mut ring: aya::maps::RingBuf<aya::maps::MapData>, stop: &AtomicBool) -> u64 {
    let mut n = 0u64;
    loop {
        let last = stop.load(Ordering::Relaxed);
        while let Some(item) = ring.next() {
            std::hint::black_box(&*item);
            n += 1;
        }
        if last {
            return n;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Decodes and aggregates `events` synthetic launch records (8 processes, 64 kernels, 4
/// configurations, one every 500 ns), also journaling them into a capture file at `capture` when given (as
/// `--output FILE.gpuprof` does); returns events per second.
pub fn pipeline(events: u64, capture: Option<&std::path::Path>) -> anyhow::Result<f64> {
    let header = crate::store::header_now("bench".into(), "bench-pipeline".into());
    // Records from the capture's start on (a trace counts time from it).
    let t0 = header.started_at_monotonic_ns;
    let mut journal = match capture {
        Some(p) => {
            let f =
                crate::sys::files::create_output(p).map_err(|e| anyhow!("{}: {e}", p.display()))?;
            Some(crate::store::Writer::new(f, p, header))
        }
        None => None,
    };
    let mut api = ApiTable::default();
    let id = api.intern("cuLaunchKernel", Layer::Driver);
    let mut records: Vec<Record<LaunchBody>> = (0..4096u64)
        .map(|i| Record {
            header: Header {
                kind: kind::LAUNCH,
                api: u32::from(id),
                tgid: 1000 + (i % 8) as u32,
                tid: 1000 + (i % 8) as u32,
                ts_ns: 0,
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
        for r in &mut records {
            // A record every 500 ns: each process launching every 4 µs, as a launch-bound loop.
            r.header.ts_ns = t0 + done * 500;
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
        // Closed as the daemon closes its files (an export reads it without a warning).
        j.clock();
        j.frame(&crate::store::Frame::End(crate::store::End {
            duration_ns: events * 500,
            drops: Default::default(),
            submitted: Default::default(),
            stop_reason: "bench".into(),
        }));
        j.flush();
        if let Some(e) = j.failure() {
            bail!("{e}");
        }
    }
    let secs = t.elapsed().as_secs_f64();
    std::hint::black_box(agg.seen_tgids());
    Ok(events as f64 / secs)
}
