//! Capture: load the eBPF object, read the ring buffer, count drops.
