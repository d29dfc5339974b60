//! The views of what each process called, one row per item of a process: `kernels` (per
//! kernel and launch configuration), `api` (per hooked function), `memcpy` (per copy
//! direction), `streams` (per stream) and `devices` (per CUDA device the calls went to).

use super::columns::{Cell, Column, LEFT, RIGHT, Rows};
use super::select::{Key, Tabular};
use super::{OrderBy, per_second};
use crate::analysis::steps::ProcessSteps;
use crate::model::devices::DeviceReport;
use crate::model::snapshot::{
    ApiReport, CopyReport, KernelReport, ProcessReport, Report, StreamReport,
};
use crate::output::fmt;

/// One item `x` of process `p`'s.
pub struct Of<'a, T> {
    pub p: &'a ProcessReport,
    pub x: &'a T,
}

/// Every process's items `f(p)`, in the report's order.
fn each<'a, T>(r: &'a Report, f: fn(&'a ProcessReport) -> &'a [T]) -> Vec<Of<'a, T>> {
    r.processes
        .iter()
        .flat_map(|p| f(p).iter().map(move |x| Of { p, x }))
        .collect()
}

/// `--view kernels`.
pub struct Kernels;

impl Rows for Kernels {
    type Row<'a> = Of<'a, KernelReport>;
}

impl Tabular for Kernels {
    const COLUMNS: &'static [Column<Self>] = &[
        Column::new("pid", "PID", RIGHT, |r| Cell::Int(r.p.tgid.into())),
        Column::new("kernel", "KERNEL", LEFT.cut(32), |r| Cell::text(&r.x.name)),
        Column::new("calls", "CALLS", RIGHT, |r| Cell::Int(r.x.calls)),
        Column::new("rate", "PER s", RIGHT, |r| per_second(r.x.calls, r.p)),
        Column::new("share", "SHARE", RIGHT, |r| {
            // Of the process's launches.
            Cell::Share(if r.p.launches == 0 {
                0.0
            } else {
                r.x.calls as f64 / r.p.launches as f64
            })
        }),
        // GPU time CUPTI measured (the injection library), for every launch of the name.
        Column::new("gpu_total_ns", "GPU ms", RIGHT, |r| {
            Cell::or_null(r.x.gpu_time.as_ref(), |g| Cell::Ms(g.total_ns))
        }),
        Column::new("gpu_share", "GPU %", RIGHT.wide(), |r| {
            Cell::or_null(r.x.gpu_time.as_ref(), |g| Cell::Share(g.share))
        }),
        Column::new("gpu_mean_ns", "GPU MEAN us", RIGHT.wide(), |r| {
            Cell::or_null(r.x.gpu_time.as_ref(), |g| Cell::Us(g.mean_ns))
        }),
        Column::new("gpu_p50_ns", "GPU P50 us", RIGHT.wide(), |r| {
            Cell::or_null(r.x.gpu_time.as_ref(), |g| Cell::Us(g.p50_ns))
        }),
        Column::new("gpu_p99_ns", "GPU P99 us", RIGHT.wide(), |r| {
            Cell::or_null(r.x.gpu_time.as_ref(), |g| Cell::Us(g.p99_ns))
        }),
        Column::new("gpu_max_ns", "GPU MAX us", RIGHT.wide(), |r| {
            Cell::or_null(r.x.gpu_time.as_ref(), |g| Cell::Us(g.max_ns))
        }),
        // `measured`, or why the row has no GPU time.
        Column::new("gpu_time", "GPU TIME", LEFT.json_only(), |r| {
            Cell::text(gpu_basis(r.p, r.x))
        }),
        Column::new("grid", "GRID", LEFT, |r| launched(r.x, fmt::dim3(r.x.grid))),
        Column::new("block", "BLOCK", LEFT, |r| {
            launched(r.x, fmt::dim3(r.x.block))
        }),
        Column::new("shared_bytes", "SMEM", RIGHT.wide(), |r| {
            Cell::Bytes(r.x.shared_bytes.into())
        }),
        Column::new("streams", "STREAMS", RIGHT.wide(), |r| {
            Cell::Int(r.x.streams)
        }),
        Column::new("api", "API", LEFT.cut(24).wide(), |r| Cell::text(&r.x.api)),
        // Where the name came from (`driver_object`: read from the driver's objects).
        Column::new("name_source", "NAME FROM", LEFT.wide(), |r| {
            Cell::text(&r.x.name_source)
        }),
    ];

    fn rows<'a>(r: &'a Report, _: &'a [ProcessSteps]) -> Vec<Of<'a, KernelReport>> {
        each(r, |p| &p.kernels)
    }

    fn key(r: &Of<'_, KernelReport>) -> Key {
        Key::process(r.p, &r.x.name, r.x.calls, 0, 0)
    }
}

/// What the launches said, or nothing for a kernel only CUPTI saw (no launch, no
/// configuration).
fn launched(k: &KernelReport, s: String) -> Cell {
    if k.calls == 0 && k.name_source == "cupti" {
        Cell::Null
    } else {
        Cell::Text(s)
    }
}

/// `measured` for a kernel row with CUPTI's GPU time, else why it has none.
fn gpu_basis<'a>(p: &'a ProcessReport, k: &KernelReport) -> &'a str {
    if k.gpu_time.is_some() {
        return "measured";
    }
    match (&p.gpu_time.unavailable, p.gpu_time.basis.as_str()) {
        (Some(why), _) => why,
        (None, "measured") => {
            if p.kernels
                .iter()
                .any(|o| o.mangled == k.mangled && o.gpu_time.is_some())
            {
                "on this kernel's row with the most calls"
            } else {
                "no CUPTI record of this kernel"
            }
        }
        _ => "not measured",
    }
}

/// `--view api`.
pub struct Api;

impl Rows for Api {
    type Row<'a> = Of<'a, ApiReport>;
}

impl Tabular for Api {
    const COLUMNS: &'static [Column<Self>] = &[
        Column::new("pid", "PID", RIGHT, |r| Cell::Int(r.p.tgid.into())),
        Column::new("api", "API", LEFT.cut(24), |r| Cell::text(&r.x.name)),
        Column::new("calls", "CALLS", RIGHT, |r| Cell::Int(r.x.calls)),
        Column::new("rate", "PER s", RIGHT, |r| per_second(r.x.calls, r.p)),
        Column::new("blocked_ns", "BLOCKED ms", RIGHT, |r| {
            Cell::Ms(r.x.blocked_ns)
        }),
        Column::new("p50_ns", "P50 us", RIGHT, |r| Cell::Us(r.x.p50_ns)),
        Column::new("p99_ns", "P99 us", RIGHT, |r| Cell::Us(r.x.p99_ns)),
        Column::new("max_ns", "MAX us", RIGHT, |r| Cell::Us(r.x.max_ns)),
    ];

    fn rows<'a>(r: &'a Report, _: &'a [ProcessSteps]) -> Vec<Of<'a, ApiReport>> {
        each(r, |p| &p.api)
    }

    fn key(r: &Of<'_, ApiReport>) -> Key {
        Key::process(r.p, &r.x.name, r.x.calls, 0, r.x.blocked_ns)
    }
}

/// `--view memcpy`.
pub struct Memcpy;

impl Rows for Memcpy {
    type Row<'a> = Of<'a, CopyReport>;
}

impl Tabular for Memcpy {
    const ORDER: OrderBy = OrderBy::Bytes;
    const COLUMNS: &'static [Column<Self>] = &[
        Column::new("pid", "PID", RIGHT, |r| Cell::Int(r.p.tgid.into())),
        Column::new("direction", "DIR", LEFT, |r| Cell::text(&r.x.direction)),
        Column::new("calls", "CALLS", RIGHT, |r| Cell::Int(r.x.calls)),
        Column::new("async_calls", "ASYNC", RIGHT, |r| {
            Cell::Int(r.x.async_calls)
        }),
        Column::new("pageable_calls", "PAGEABLE", RIGHT, |r| {
            Cell::Int(r.x.pageable_calls)
        }),
        Column::new("bytes", "BYTES", RIGHT, |r| Cell::Bytes(r.x.bytes)),
        Column::new("blocked_ns", "BLOCKED ms", RIGHT, |r| {
            Cell::Ms(r.x.blocked_ns)
        }),
        Column::new("bandwidth_bps", "BW (sync)", RIGHT, |r| {
            // Only for directions whose copies all blocked: then the CPU time in the calls is
            // the copies' time, and bytes over it is what the program got.
            let c = r.x;
            let bw = (c.async_calls == 0 && c.blocked_ns > 0)
                .then(|| (c.bytes as f64 / (c.blocked_ns as f64 / 1e9)).round());
            Cell::or_null(bw, Cell::ByteRate)
        }),
        Column::new(
            "size_histogram",
            "<4K/<64K/<1M/<16M/<256M/more",
            LEFT.wide(),
            |r| Cell::Counts(r.x.size_histogram.clone()),
        ),
    ];

    fn rows<'a>(r: &'a Report, _: &'a [ProcessSteps]) -> Vec<Of<'a, CopyReport>> {
        each(r, |p| &p.copies)
    }

    fn key(r: &Of<'_, CopyReport>) -> Key {
        Key::process(r.p, &r.x.direction, r.x.calls, r.x.bytes, r.x.blocked_ns)
    }
}

/// `--view streams`.
pub struct Streams;

impl Rows for Streams {
    type Row<'a> = Of<'a, StreamReport>;
}

impl Tabular for Streams {
    const COLUMNS: &'static [Column<Self>] = &[
        Column::new("pid", "PID", RIGHT, |r| Cell::Int(r.p.tgid.into())),
        Column::new("stream", "STREAM", LEFT, |r| Cell::text(&r.x.stream)),
        Column::new("launches", "LAUNCHES", RIGHT, |r| Cell::Int(r.x.launches)),
        Column::new("rate", "PER s", RIGHT, |r| per_second(r.x.launches, r.p)),
        Column::new("share", "SHARE", RIGHT, |r| {
            // Of the process's launches, to 0.1%.
            Cell::Share(if r.p.launches > 0 {
                ((r.x.launches as f64 / r.p.launches as f64) * 1000.0).round() / 1000.0
            } else {
                0.0
            })
        }),
        Column::new("copies", "COPIES", RIGHT, |r| Cell::Int(r.x.copies)),
        Column::new("copy_bytes", "COPIED", RIGHT, |r| {
            Cell::Bytes(r.x.copy_bytes)
        }),
        // Derived (model::busy), never measured: a lower bound, hence ≥.
        Column::new("derived_idle_ns", "IDLE≥ ms", RIGHT, |r| {
            Cell::or_null(r.x.derived_idle_ns, Cell::Ms)
        }),
        Column::new("drains", "DRAINS", RIGHT.wide(), |r| Cell::Int(r.x.drains)),
        Column::new(
            "derived_launch_ahead_max_ns",
            "AHEAD≥ ms",
            RIGHT.wide(),
            |r| Cell::Ms(r.x.derived_launch_ahead_max_ns),
        ),
    ];

    fn rows<'a>(r: &'a Report, _: &'a [ProcessSteps]) -> Vec<Of<'a, StreamReport>> {
        each(r, |p| &p.streams)
    }

    fn key(r: &Of<'_, StreamReport>) -> Key {
        Key::process(r.p, &r.x.stream, r.x.launches, r.x.copy_bytes, 0)
    }
}

/// `--view devices`.
pub struct Devices;

impl Rows for Devices {
    type Row<'a> = Of<'a, DeviceReport>;
}

/// A device row's name: the CUDA ordinal, or `unknown`.
fn device_label(d: &DeviceReport) -> String {
    d.device.map_or("unknown".to_owned(), |n| n.to_string())
}

impl Tabular for Devices {
    const COLUMNS: &'static [Column<Self>] = &[
        Column::new("pid", "PID", RIGHT, |r| Cell::Int(r.p.tgid.into())),
        Column::new("device", "DEVICE", LEFT, |r| Cell::Text(device_label(r.x))),
        // The node's GPU (NVML index; `report --gpu` selects by it), as the JSON report's
        // `nvml_gpu`: exact for a known device, the likely one for the unknown row of a
        // process NVML saw on one GPU.
        Column::new("nvml_gpu", "NODE GPU", RIGHT, |r| {
            Cell::or_null(r.x.nvml_gpu, |g| Cell::Int(g.into()))
        }),
        // Its MIG instance (GPU instance/compute instance), where the environment names one.
        Column::new("mig", "MIG", RIGHT.wide(), |r| {
            Cell::or_null(r.x.mig, |m| {
                Cell::Text(format!("{}/{}", m.gpu_instance, m.compute_instance))
            })
        }),
        Column::new("launches", "LAUNCHES", RIGHT, |r| Cell::Int(r.x.launches)),
        Column::new("share", "SHARE", RIGHT, |r| {
            // Of the process's launches, to 0.1%.
            Cell::Share(if r.p.launches > 0 {
                ((r.x.launches as f64 / r.p.launches as f64) * 1000.0).round() / 1000.0
            } else {
                0.0
            })
        }),
        Column::new("copies", "COPIES", RIGHT, |r| Cell::Int(r.x.copies)),
        Column::new("copy_bytes", "COPIED", RIGHT, |r| {
            Cell::Bytes(r.x.copy_bytes)
        }),
        Column::new("memsets", "MEMSETS", RIGHT, |r| Cell::Int(r.x.memsets)),
        Column::new("syncs", "SYNCS", RIGHT, |r| Cell::Int(r.x.syncs)),
        Column::new("allocations", "ALLOCS", RIGHT, |r| {
            Cell::Int(r.x.allocations)
        }),
        Column::new("alloc_bytes", "ALLOCATED", RIGHT, |r| {
            Cell::Bytes(r.x.alloc_bytes)
        }),
    ];

    fn rows<'a>(r: &'a Report, _: &'a [ProcessSteps]) -> Vec<Of<'a, DeviceReport>> {
        each(r, |p| &p.devices)
    }

    fn key(r: &Of<'_, DeviceReport>) -> Key {
        Key::process(r.p, &device_label(r.x), r.x.launches, r.x.copy_bytes, 0)
    }
}
