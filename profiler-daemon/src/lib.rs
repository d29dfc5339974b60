//! gpuprofd's library: the pipeline from the processes' CUDA libraries to what a user reads.
//!
//! Data flows one way, and the modules are declared in its order: each imports only the ones
//! above it (the layer test, `tests/layers.rs`, fails on an import that points back up). A
//! helper two stages need moves down into `sys` (or `profiler-common`); a lower stage that
//! must reach a higher one is handed a trait object or a channel (the session's `Companion`).

// The system underneath: clock, kernel, files, limits, units. Imports nothing of the crate.
pub mod sys;
// The vocabulary every stage shares: the API table and the attached libraries.
pub mod api;

// Discovery: which processes map which CUDA libraries.
pub mod discovery;
// The eBPF object: load, filters, ring-buffer reader, in-kernel counters.
pub mod capture;
// Attach: probe list, probe-site placement, every aya attach call.
pub mod attach;
// NVML: the GPUs' own figures, a source beside the probes.
pub mod nvml;

// Enrichment: processes, jobs, kernel names, stack frames.
pub mod enrich;
// The single-owner model and its snapshot schema.
pub mod model;
// The capture file: the model's inputs, kept and replayed.
pub mod store;
// Analysis: steps and advice.
pub mod analysis;
// Outputs: tables, JSON, views, code view, HTML, Prometheus, traces.
pub mod output;

// One capture session: setup, run loop, aggregator task, taps.
pub mod session;
// Service mode beside a session: config, control socket, HTTP, systemd.
pub mod service;

// Modes of their own, and the command line on top.
pub mod bench;
pub mod doctor;

pub mod cli;
