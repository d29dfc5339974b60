//! The session's lines to the user at the terminal (or in the service's journal): the ready
//! line, warnings they must act on, the stop, where results went, live lines. The one place a
//! capture writes to standard error itself; diagnostics go through `tracing`.

use std::fmt::Display;

/// `gpuprofd: {line}`.
pub fn say(line: impl Display) {
    eprintln!("gpuprofd: {line}");
}

/// `gpuprofd: warning: {what}`: something the user must see and may act on.
pub fn warn(what: impl Display) {
    say(format_args!("warning: {what}"));
}

/// A line as it is (the `-v` listing of probes).
pub fn raw(line: impl Display) {
    eprintln!("{line}");
}
