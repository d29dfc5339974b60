//! Attach: probe list from export tables, probe-site placement, every aya attach call.

pub mod placement;
