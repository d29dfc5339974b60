//! Outputs: everything a user reads, rendered from the model's snapshot
//! ([`crate::model::snapshot::Report`]) and, for the timeline views, from the capture file.
pub mod fmt;
pub mod json;
pub mod live;
pub mod table;
