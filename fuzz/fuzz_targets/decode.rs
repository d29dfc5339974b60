//! A ring-buffer record of any bytes: decoded or refused, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(ev) = profiler_common::decode::decode(data) {
        let _ = ev.header();
    }
});
