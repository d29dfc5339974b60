//! Enrichment: process info and kernel names.

pub mod names;
pub mod process;
