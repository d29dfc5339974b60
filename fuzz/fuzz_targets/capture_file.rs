//! A capture file of any bytes (cut, damaged, hostile lengths): read back or refused with a
//! message, never a panic, and never an allocation the frame limit does not allow.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("gpuprofd-fuzz-{}.gpuprof", std::process::id()));
    if std::fs::write(&path, data).is_err() {
        return;
    }
    let _ = gpuprofd::store::replay(&path);
    let _ =
        gpuprofd::store::for_each_record(&path, |_, _, _| Ok::<(), std::convert::Infallible>(()));
    let _ = gpuprofd::store::for_each_record_named(&path, |_, _, _, _| {
        Ok::<(), std::convert::Infallible>(())
    });
    let _ = gpuprofd::store::nvml_samples(&path);
});
