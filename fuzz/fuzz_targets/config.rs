//! The service's configuration file: parsed, validated and printed again, or refused.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let p = Path::new("/etc/gpuprofd/config.toml");
    if let Ok(c) = gpuprofd::service::config::parse(text, p) {
        let _ = c.validate(p);
        let _ = c.to_toml();
        let _ = c.reload_from(&gpuprofd::service::config::Config::default());
    }
});
