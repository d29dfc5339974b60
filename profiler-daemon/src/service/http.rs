//! The HTTP responder on the metrics address: `GET /metrics` (the Prometheus exposition) and
//! `GET /` (the live dashboard), nothing else. Written by hand rather than with an HTTP crate:
//! two fixed pages, one request per connection, a bounded head (4 KiB, 5 s) and a bounded
//! number of connections; the only subtle part is the DNS-rebinding guard (`Host` must name
//! the loopback interface when the listener is on it).

use std::sync::Arc;
use std::time::Duration;

/// HTTP connections served at once.
const MAX_CONNECTIONS: usize = 32;

/// Whether the request's `Host` names the loopback interface (or there is none: HTTP/1.0).
fn host_is_loopback(head: &str) -> bool {
    let Some(host) = head
        .lines()
        .skip(1)
        .find_map(|l| {
            l.split_once(':')
                .filter(|(k, _)| k.eq_ignore_ascii_case("host"))
        })
        .map(|(_, v)| v.trim())
    else {
        return true;
    };
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// What the HTTP listener serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Page {
    /// `GET /metrics`: the exposition.
    Metrics,
    /// `GET /`: the live dashboard (HTML).
    Dashboard,
}

/// Serves `GET /metrics` and `GET /` on `listener`; `snapshot` yields the current body of each
/// (`None`: the daemon is stopping).
pub async fn serve<F, Fut>(listener: tokio::net::TcpListener, snapshot: F)
where
    F: Fn(Page) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Option<String>> + Send,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let loopback = listener
        .local_addr()
        .map(|a| a.ip().is_loopback())
        .unwrap_or(false);
    let busy = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let mut sock = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                // Out of fds or memory: wait instead of spinning on the error.
                tracing::warn!(error = %e, "metrics: accept failed");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        // Beyond the limit a connection is closed at once.
        let Ok(permit) = busy.clone().try_acquire_owned() else {
            continue;
        };
        let snapshot = snapshot.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let mut buf = vec![0u8; 4096];
            let mut n = 0;
            // Read the request head (bounded: 4 KiB, 5 s).
            let head = tokio::time::timeout(Duration::from_secs(5), async {
                while n < buf.len() {
                    match sock.read(&mut buf[n..]).await {
                        Ok(0) | Err(_) => break,
                        Ok(k) => n += k,
                    }
                    if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
            })
            .await;
            if head.is_err() {
                return;
            }
            let line = String::from_utf8_lossy(&buf[..n]);
            let first = line.lines().next().unwrap_or("");
            // On loopback only a loopback name is served: a web page that rebinds its own DNS
            // name to 127.0.0.1 must not read the figures through a local browser.
            if loopback && !host_is_loopback(&line) {
                let body = "gpuprofd answers only requests for localhost here\n";
                let resp = format!(
                    "HTTP/1.1 421 Misdirected Request\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(resp.as_bytes()).await;
                return;
            }
            let mut parts = first.split_whitespace();
            let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            let page = match (method, path) {
                ("GET", "/metrics") => {
                    Some((Page::Metrics, "text/plain; version=0.0.4; charset=utf-8"))
                }
                ("GET", "/") => Some((Page::Dashboard, "text/html; charset=utf-8")),
                _ => None,
            };
            let (status, ctype, body) = match page {
                Some((page, ctype)) => match snapshot(page).await {
                    Some(b) => ("200 OK", ctype, b),
                    None => (
                        "503 Service Unavailable",
                        "text/plain",
                        "the daemon is stopping\n".to_owned(),
                    ),
                },
                None => (
                    "404 Not Found",
                    "text/plain",
                    "gpuprofd serves GET /metrics and GET / (the live dashboard)\n".to_owned(),
                ),
            };
            let resp = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            // Bounded too: a client that stops reading would hold one of the few permits.
            let _ = tokio::time::timeout(Duration::from_secs(30), async {
                let _ = sock.write_all(resp.as_bytes()).await;
                let _ = sock.shutdown().await;
            })
            .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_hosts_are_served_on_loopback() {
        let req = |host: &str| format!("GET /metrics HTTP/1.1\r\nHost: {host}\r\n\r\n");
        for ok in [
            "127.0.0.1:19400",
            "localhost:19400",
            "LOCALHOST",
            "[::1]:19400",
            "127.0.0.2",
        ] {
            assert!(host_is_loopback(&req(ok)), "{ok}");
        }
        for bad in [
            "evil.example:19400",
            "10.0.0.1:19400",
            "[fe80::1]:19400",
            "localhost.evil.example",
        ] {
            assert!(!host_is_loopback(&req(bad)), "{bad}");
        }
        assert!(
            host_is_loopback("GET /metrics HTTP/1.0\r\n\r\n"),
            "no Host header"
        );
    }
}
