//! Sockets systemd created and handed over (socket activation: `$LISTEN_PID`, `$LISTEN_FDS`,
//! the sockets from fd 3 on). `gpuprofd.socket` holds the control socket; the optional
//! `gpuprofd-metrics.socket` holds the Prometheus port, so that no other local user can take
//! the port while the daemon is down (restarting, or stopped after a failure) and serve
//! made-up figures to the node's Prometheus. Each socket is told by its address family, not by
//! its place or name: a Unix stream socket is the control socket, an IPv4/IPv6 one the metrics
//! port.

use std::os::fd::{FromRawFd, RawFd};

/// The first fd systemd passes.
const FIRST_FD: RawFd = 3;
/// The most fds looked at (gpuprofd takes two).
const MAX_FDS: i32 = 16;

/// What systemd passed, by role.
#[derive(Default)]
pub struct Inherited {
    pub control: Option<std::os::unix::net::UnixListener>,
    pub metrics: Option<std::net::TcpListener>,
}

/// The sockets passed to this process, or nothing when it was not socket-activated (or the
/// variables name another process: they were inherited from a parent that was).
pub fn inherited() -> Inherited {
    let mut got = Inherited::default();
    let for_us = std::env::var("LISTEN_PID")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        == Some(std::process::id());
    let n: i32 = match std::env::var("LISTEN_FDS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(n) if for_us && n > 0 => n,
        _ => return got,
    };
    if n > MAX_FDS {
        tracing::warn!(
            fds = n,
            "systemd says it passed {n} sockets; gpuprofd looks at the first {MAX_FDS} only"
        );
    }
    let n = n.min(MAX_FDS);
    // (The variables stay set: the service starts no programs, and changing the environment
    // while other threads run is not sound.)
    for fd in FIRST_FD..FIRST_FD.saturating_add(n) {
        // Not inherited by anything we might start.
        // SAFETY: fcntl on an fd number; a failure leaves it as it was.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        // Only listening stream sockets: an fd past the ones passed (a wrong count) may be one
        // of this process's own, which must not get a second owner.
        if !listening_stream(fd) {
            tracing::warn!(
                fd,
                "systemd was to pass a listening stream socket here, and this is none; it is \
                 left alone"
            );
            continue;
        }
        match family(fd) {
            Some(libc::AF_UNIX) if got.control.is_none() => {
                // SAFETY: systemd passed this fd to us and nothing else owns it; the listener
                // owns it from here on.
                got.control = Some(unsafe { std::os::unix::net::UnixListener::from_raw_fd(fd) });
            }
            Some(libc::AF_INET | libc::AF_INET6) if got.metrics.is_none() => {
                // SAFETY: as above.
                got.metrics = Some(unsafe { std::net::TcpListener::from_raw_fd(fd) });
            }
            other => tracing::warn!(
                fd,
                family = ?other,
                "systemd passed a socket gpuprofd has no use for (it takes one Unix socket for \
                 control and one TCP socket for metrics); it is left alone"
            ),
        }
    }
    got
}

/// Whether `fd` is a stream socket that listens.
fn listening_stream(fd: RawFd) -> bool {
    let opt = |name: i32| -> Option<i32> {
        let mut v: i32 = 0;
        let mut len = std::mem::size_of::<i32>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `v`.
        let rc =
            unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, name, (&raw mut v).cast(), &mut len) };
        (rc == 0).then_some(v)
    };
    opt(libc::SO_TYPE) == Some(libc::SOCK_STREAM) && opt(libc::SO_ACCEPTCONN) == Some(1)
}

/// The address family of socket `fd`, `None` when it is not a socket.
fn family(fd: RawFd) -> Option<i32> {
    // SAFETY: a zeroed sockaddr_storage is a valid buffer for getsockname, whose length is
    // passed with it.
    let mut sa: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: as above; the kernel writes at most `len` bytes.
    let rc = unsafe { libc::getsockname(fd, (&raw mut sa).cast(), &mut len) };
    (rc == 0).then_some(i32::from(sa.ss_family))
}

/// What to serve metrics on: the socket systemd passed when there is one (its address is the
/// one clients use: systemd holds it), else `configured` (bound by the caller), else nothing.
/// The warnings say what in the configuration the passed socket overrides.
pub fn metrics_socket(
    passed: Option<std::net::TcpListener>,
    configured: Option<std::net::SocketAddr>,
) -> MetricsSocket {
    let Some(l) = passed else {
        return match configured {
            Some(a) => MetricsSocket::Bind(a),
            None => MetricsSocket::Off,
        };
    };
    let at = l.local_addr().ok();
    let shown = at.map_or_else(|| "?".to_owned(), |a| a.to_string());
    match configured {
        None => {
            tracing::warn!(
                passed = %shown,
                "systemd passed a metrics socket, but metrics are off in the configuration \
                 (metrics.enabled = false or --no-metrics): not serving it; stop systemd \
                 listening there with `systemctl disable --now gpuprofd-metrics.socket`"
            );
            MetricsSocket::Off
        }
        Some(want) => {
            if at != Some(want) {
                tracing::warn!(
                    passed = %shown,
                    configured = %want,
                    "metrics are served on the socket systemd passed, not on metrics.listen: \
                     systemd holds that address for the daemon (gpuprofd-metrics.socket); to \
                     move it, change ListenStream= there (`systemctl edit \
                     gpuprofd-metrics.socket`)"
                );
            }
            MetricsSocket::Passed(l)
        }
    }
}

/// Where metrics are served.
pub enum MetricsSocket {
    Off,
    /// Bind this address (no socket was passed).
    Bind(std::net::SocketAddr),
    Passed(std::net::TcpListener),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_passed_socket_wins_over_the_configured_address_and_off_turns_it_away() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        let other: std::net::SocketAddr = "127.0.0.1:9".parse().unwrap();
        match metrics_socket(Some(l), Some(other)) {
            MetricsSocket::Passed(p) => assert_eq!(p.local_addr().unwrap(), at),
            _ => panic!("the passed socket must be served"),
        }
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        assert!(matches!(metrics_socket(Some(l), None), MetricsSocket::Off));
        assert!(matches!(
            metrics_socket(None, Some(other)),
            MetricsSocket::Bind(a) if a == other
        ));
        assert!(matches!(metrics_socket(None, None), MetricsSocket::Off));
    }

    #[test]
    fn sockets_are_told_apart_by_family_and_only_listeners_taken() {
        let t = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let dir = std::env::temp_dir().join(format!("gpuprofd-act-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let u = std::os::unix::net::UnixListener::bind(dir.join("s")).unwrap();
        use std::os::fd::AsRawFd;
        assert_eq!(family(t.as_raw_fd()), Some(libc::AF_INET));
        assert_eq!(family(u.as_raw_fd()), Some(libc::AF_UNIX));
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        assert_eq!(family(f.as_raw_fd()), None);
        assert!(listening_stream(t.as_raw_fd()) && listening_stream(u.as_raw_fd()));
        // Not listening, not a stream, not a socket.
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let d = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(!listening_stream(a.as_raw_fd()));
        assert!(!listening_stream(d.as_raw_fd()));
        assert!(!listening_stream(f.as_raw_fd()));
        let _ = std::fs::remove_dir_all(dir);
    }
}
