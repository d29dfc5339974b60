//! systemd's readiness protocol (`sd_notify(3)`), written out: one datagram per state change
//! to the socket named by `$NOTIFY_SOCKET`, and watchdog keep-alives every half
//! `$WATCHDOG_USEC`. Without `$NOTIFY_SOCKET` (not started by systemd) every call is a no-op.

use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

#[derive(Debug)]
pub struct Notifier {
    target: Option<(UnixDatagram, SocketAddr)>,
    watchdog: Option<Duration>,
}

impl Notifier {
    /// Reads `$NOTIFY_SOCKET` and `$WATCHDOG_USEC`/`$WATCHDOG_PID`.
    pub fn from_env() -> Notifier {
        let target = std::env::var_os("NOTIFY_SOCKET").and_then(|p| {
            let bytes = std::os::unix::ffi::OsStrExt::as_bytes(p.as_os_str()).to_vec();
            let addr = match bytes.strip_prefix(b"@") {
                Some(name) => {
                    use std::os::linux::net::SocketAddrExt;
                    SocketAddr::from_abstract_name(name)
                }
                None => SocketAddr::from_pathname(std::ffi::OsStr::new(
                    &String::from_utf8_lossy(&bytes).into_owned(),
                )),
            };
            match (addr, UnixDatagram::unbound()) {
                (Ok(a), Ok(s)) => Some((s, a)),
                (a, s) => {
                    tracing::warn!(
                        socket = ?p,
                        error = ?a.err().map(|e| e.to_string()).or(s.err().map(|e| e.to_string())),
                        "cannot use NOTIFY_SOCKET; systemd will not hear that the service is ready"
                    );
                    None
                }
            }
        });
        let for_us = std::env::var("WATCHDOG_PID")
            .ok()
            .and_then(|p| p.parse::<u32>().ok())
            .is_none_or(|p| p == std::process::id());
        let watchdog = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|u| u.parse::<u64>().ok())
            .filter(|&u| u > 0 && for_us)
            .map(Duration::from_micros);
        Notifier { target, watchdog }
    }

    /// How often to send `WATCHDOG=1` (half the watchdog timeout), when systemd asked for it.
    pub fn watchdog_every(&self) -> Option<Duration> {
        self.watchdog.map(|w| w / 2)
    }

    /// Sends one state message (`READY=1`, `STATUS=...`, newline-separated assignments).
    pub fn send(&self, state: &str) {
        if let Some((sock, addr)) = &self.target
            && let Err(e) = sock.send_to_addr(state.as_bytes(), addr)
        {
            tracing::warn!(error = %e, state, "sd_notify failed");
        }
    }

    pub fn ready(&self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={status}"));
    }

    /// Reload started (`RELOADING=1` with the monotonic time systemd 253+ wants).
    pub fn reloading(&self) {
        self.send(&format!("RELOADING=1\nMONOTONIC_USEC={}", monotonic_usec()));
    }

    pub fn stopping(&self, status: &str) {
        self.send(&format!("STOPPING=1\nSTATUS={status}"));
    }

    pub fn watchdog(&self) {
        self.send("WATCHDOG=1");
    }
}

fn monotonic_usec() -> u64 {
    crate::sys::clock::monotonic_ns() / 1000
}
