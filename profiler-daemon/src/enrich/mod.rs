//! Enrichment: process info and kernel names.

pub mod itanium;
pub mod jobs;
pub mod names;
pub mod process;
