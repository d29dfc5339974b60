//! A library file's bytes (any process can map any file): its exports and SONAME, or an error.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = gpuprofd::discovery::elf::parse_elf(data);
});
