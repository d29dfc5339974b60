//! Probe-site placement (owned by the ELF/placement work).
