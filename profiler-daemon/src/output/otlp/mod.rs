//! OTLP/HTTP metrics push: the figures of `/metrics` ([`figures`]), sent every interval to an
//! OpenTelemetry Collector as protobuf `ExportMetricsServiceRequest`s, cumulative ([`push`]).
//!
//! Built on the OpenTelemetry SDK (`opentelemetry_sdk`'s periodic reader, observable
//! instruments) and `opentelemetry-otlp`'s HTTP exporter over reqwest's blocking client: the
//! reader runs on its own thread, collects (asking the session for its figures then) and
//! exports one request at a time, so at most one export is ever in flight and nothing queues
//! behind an endpoint that is down. A failed export is dropped, not retried: the figures are
//! cumulative, so the next export that gets through carries every count the dropped ones had.
//! Failures are counted ([`Status`], `gpuprofd_otlp_exports_failed_total`) and logged once per
//! outage.
//!
//! Plain HTTP only: the crates' TLS (rustls, with its crypto provider) is not built in. An
//! HTTPS endpoint is refused with a message that says so (docs/SERVICE.md, "OTLP").

pub mod figures;
pub mod push;

pub use push::Pusher;

use std::collections::BTreeMap;
use std::time::Duration;

/// What to push where.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// The Collector's OTLP/HTTP URL, `/v1/metrics` already appended where it had no path.
    pub url: String,
    pub interval: Duration,
    /// How long one export may take before it counts as failed.
    pub timeout: Duration,
    /// HTTP headers sent with each export (e.g. `authorization`).
    pub headers: BTreeMap<String, String>,
    /// Resource attributes besides (or replacing) service.name, service.version and host.name.
    pub resource: BTreeMap<String, String>,
}

/// How many exports may be in flight at once: the periodic reader's single thread makes it one.
pub const MAX_IN_FLIGHT: u64 = 1;

/// The push's own figures (`status`, `/metrics`).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Status {
    pub url: String,
    /// Exports the endpoint accepted.
    pub exports: u64,
    /// Exports that failed and were dropped (not queued, not retried).
    pub exports_failed: u64,
    /// Exports under way now (at most [`MAX_IN_FLIGHT`]).
    pub in_flight: u64,
    /// The most exports that were ever in flight at once.
    pub in_flight_max: u64,
    /// Whether the latest export failed.
    pub down: bool,
    pub last_error: Option<String>,
}

/// Why the push could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    #[error(
        "OTLP endpoint \"{0}\": gpuprofd sends OTLP over plain HTTP only (http://HOST:4318); \
         send to an OpenTelemetry Collector on the node or in the cluster, which can forward \
         over TLS"
    )]
    Https(String),
    #[error(
        "OTLP endpoint \"{url}\": {why}; write it as http://HOST:PORT (the Collector's OTLP/HTTP port is 4318)"
    )]
    BadUrl { url: String, why: String },
    #[error("cannot set up the OTLP exporter for \"{url}\": {source}")]
    Exporter {
        url: String,
        #[source]
        source: opentelemetry_otlp::ExporterBuildError,
    },
}

/// The metrics URL of `endpoint`: as given when it has a path, else with `/v1/metrics`
/// (OpenTelemetry's rule for a base endpoint).
pub fn metrics_url(endpoint: &str) -> Result<String, OtlpError> {
    let e = endpoint.trim();
    if e.starts_with("https://") {
        return Err(OtlpError::Https(e.to_owned()));
    }
    let bad = |why: &str| OtlpError::BadUrl {
        url: e.to_owned(),
        why: why.to_owned(),
    };
    let rest = e
        .strip_prefix("http://")
        .ok_or_else(|| bad("not an http:// URL"))?;
    let (host, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    if host.is_empty() || host.contains(|c: char| c.is_whitespace() || c == '@') {
        return Err(bad("no host, or a malformed one"));
    }
    if path.is_empty() || path == "/" {
        Ok(format!("http://{host}/v1/metrics"))
    } else {
        Ok(e.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_url_appends_the_signal_path_to_a_base_endpoint_only() {
        let u = |s: &str| metrics_url(s).map_err(|e| e.to_string());
        assert_eq!(u("http://c:4318").unwrap(), "http://c:4318/v1/metrics");
        assert_eq!(u("http://c:4318/").unwrap(), "http://c:4318/v1/metrics");
        assert_eq!(u("http://c:4318/otlp/m").unwrap(), "http://c:4318/otlp/m");
        assert!(u("https://c:4318").unwrap_err().contains("plain HTTP only"));
        assert!(u("c:4318").unwrap_err().contains("not an http:// URL"));
        assert!(u("http:///v1").unwrap_err().contains("no host"));
    }
}
