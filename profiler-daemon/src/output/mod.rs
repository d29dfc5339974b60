//! Outputs: everything a user reads, rendered from the model's snapshot
//! ([`crate::model::snapshot::Report`]) and, for the timeline views, from the capture file.
pub mod code;
pub mod fmt;
pub mod html;
pub mod json;
pub mod live;
pub mod otlp;
pub mod prometheus;
pub mod ranks;
pub mod table;
pub mod top_kernels;
pub mod trace;
pub mod views;
