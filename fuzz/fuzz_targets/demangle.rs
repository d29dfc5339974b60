//! Kernel names read from a process's memory: any bytes, demangled or shown as they are.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let name = String::from_utf8_lossy(data);
    let _ = gpuprofd::enrich::names::demangle(&name);
});
