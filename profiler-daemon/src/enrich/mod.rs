//! Enrichment: process info and kernel names.

pub mod jobs;
pub mod names;
pub mod process;
