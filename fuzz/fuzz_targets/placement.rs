//! The probe-site choice on any entry bytes: always a decoded instruction boundary within them.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let p = gpuprofd::attach::placement::choose(data, 0x1000);
    assert!(
        p.offset == 0 || (p.offset as usize) < data.len(),
        "offset {} outside the {} entry bytes",
        p.offset,
        data.len()
    );
});
