//! A control-socket request line from any local user: parsed and checked, or refused.
#![no_main]
use gpuprofd::service::ctl::{Request, capture_target};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(Request::Capture { pid, job, duration }) = serde_json::from_slice::<Request>(data) {
        let _ = capture_target(pid, job, &duration);
    }
});
