//! The push pipeline: one SDK meter provider with an observable instrument per figure, a
//! periodic reader on its own thread, and the OTLP/HTTP exporter wrapped to count exports and
//! to log an outage once.

use super::figures::{self, Figures, Kind, METRICS, Spec, Value};
use super::{MAX_IN_FLIGHT, OtlpError, Settings, Status};
use crate::model::snapshot::Report;
use crate::output::prometheus::Extra;
use opentelemetry::KeyValue;
use opentelemetry::metrics::{AsyncInstrument, Meter, MeterProvider as _};
use opentelemetry_otlp::{Protocol, RetryPolicy, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where the figures come from: asked on the reader's thread at each collection (`None`: the
/// session cannot answer now; the last figures are sent again).
pub type Source = Box<dyn Fn() -> Option<(Report, Extra)> + Send + Sync>;

/// The running push.
pub struct Pusher {
    provider: SdkMeterProvider,
    latest: Arc<Latest>,
    counters: Arc<Counters>,
    url: String,
}

impl std::fmt::Debug for Pusher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pusher").field("url", &self.url).finish()
    }
}

impl Pusher {
    /// Starts pushing the figures `source` gives every `s.interval`.
    pub fn start(s: &Settings, source: Source) -> Result<Pusher, OtlpError> {
        let exporter = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(s.url.clone())
            .with_timeout(s.timeout)
            .with_headers(s.headers.clone().into_iter().collect())
            // The figures are cumulative: the next export carries what a failed one had.
            .with_retry_policy(RetryPolicy::disabled())
            .with_temporality(Temporality::Cumulative)
            .build()
            .map_err(|source| OtlpError::Exporter {
                url: s.url.clone(),
                source,
            })?;
        let counters = Arc::new(Counters::default());
        let counted = Counted {
            inner: exporter,
            counters: counters.clone(),
            url: s.url.clone(),
        };
        let reader = PeriodicReader::builder(counted)
            .with_interval(s.interval)
            .build();
        let provider = SdkMeterProvider::builder()
            .with_reader(reader)
            .with_resource(resource(s))
            .build();
        let scope = opentelemetry::InstrumentationScope::builder("gpuprofd")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        let meter = provider.meter_with_scope(scope);
        let latest = Arc::new(Latest {
            source,
            // Fresh for the whole collection (all callbacks run within milliseconds), stale by
            // the next one.
            fresh: (s.interval / 2).min(Duration::from_secs(1)),
            cached: Mutex::new(Cached::default()),
        });
        for spec in METRICS {
            instrument(&meter, spec, latest.clone());
        }
        tracing::info!(url = %s.url, interval = ?s.interval, "pushing metrics over OTLP/HTTP");
        Ok(Pusher {
            provider,
            latest,
            counters,
            url: s.url.clone(),
        })
    }

    pub fn status(&self) -> Status {
        let c = &self.counters;
        Status {
            url: self.url.clone(),
            exports: c.exports.load(Ordering::Relaxed),
            exports_failed: c.failed.load(Ordering::Relaxed),
            in_flight: c.in_flight.load(Ordering::Relaxed),
            in_flight_max: c.in_flight_max.load(Ordering::Relaxed),
            down: c.down.load(Ordering::Relaxed),
            last_error: c.last_error.lock().ok().and_then(|e| e.clone()),
        }
    }

    /// The session's last figures: `report`, with `extra` (its NVML facts, which the model no
    /// longer has, are the latest push's). Exports from now on (the last one:
    /// [`Self::shutdown`]'s) send these.
    pub fn finish(&self, report: &Report, mut extra: Extra) {
        if let Ok(mut c) = self.latest.cached.lock() {
            if let Some(last) = c.extra.take() {
                extra.facts = last.facts;
            }
            c.figures = Arc::new(figures::figures(report, &extra));
            c.extra = Some(extra);
            c.frozen = true;
        }
    }

    /// Exports once more and stops (blocking: up to the export timeout).
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::debug!(error = %e, "OTLP push shutdown");
        }
        let s = self.status();
        tracing::info!(
            exports = s.exports,
            exports_failed = s.exports_failed,
            "OTLP push stopped"
        );
    }
}

/// service.name = gpuprofd, service.version, host.name, then the configured attributes (which
/// may replace those). The SDK adds telemetry.sdk.* and `$OTEL_RESOURCE_ATTRIBUTES`.
fn resource(s: &Settings) -> opentelemetry_sdk::Resource {
    let mut kv = vec![
        KeyValue::new("service.name", "gpuprofd"),
        KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        KeyValue::new("host.name", crate::sys::kernel::hostname()),
    ];
    kv.extend(
        s.resource
            .iter()
            .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
    );
    opentelemetry_sdk::Resource::builder()
        .with_attributes(kv)
        .build()
}

/// The figures of the latest collection.
#[derive(Default)]
struct Cached {
    at: Option<Instant>,
    figures: Arc<Figures>,
    /// The extras they were made with ([`Pusher::finish`] reuses NVML's).
    extra: Option<Extra>,
    /// The session ended: these are its last figures.
    frozen: bool,
}

struct Latest {
    source: Source,
    fresh: Duration,
    cached: Mutex<Cached>,
}

impl Latest {
    /// The figures now: asked of the session once per collection.
    fn now(&self) -> Arc<Figures> {
        let Ok(mut c) = self.cached.lock() else {
            return Arc::default();
        };
        if !c.frozen && c.at.is_none_or(|t| t.elapsed() >= self.fresh) {
            if let Some((report, extra)) = (self.source)() {
                c.figures = Arc::new(figures::figures(&report, &extra));
                c.extra = Some(extra);
            }
            c.at = Some(Instant::now());
        }
        c.figures.clone()
    }
}

fn attrs(a: &figures::Attrs) -> Vec<KeyValue> {
    a.iter()
        .map(|(k, v)| KeyValue::new(*k, v.clone()))
        .collect()
}

/// Observes `name`'s points on `o`, each converted by `conv`.
fn observe<T>(latest: &Latest, name: &str, o: &dyn AsyncInstrument<T>, conv: fn(Value) -> T) {
    for (a, v) in latest.now().of(name) {
        o.observe(conv(v), &attrs(a));
    }
}

fn to_u64(v: Value) -> u64 {
    match v {
        Value::Int(n) => n,
        Value::Float(x) => x as u64,
    }
}

fn to_i64(v: Value) -> i64 {
    to_u64(v).min(i64::MAX as u64) as i64
}

fn to_f64(v: Value) -> f64 {
    match v {
        Value::Int(n) => n as f64,
        Value::Float(x) => x,
    }
}

/// Registers `spec`'s observable instrument; its callback observes its points.
fn instrument(meter: &Meter, spec: &'static Spec, latest: Arc<Latest>) {
    let (name, unit, description) = (spec.name, spec.unit, spec.description);
    match (spec.kind, spec.int) {
        (Kind::Counter, true) => {
            meter
                .u64_observable_counter(name)
                .with_unit(unit)
                .with_description(description)
                .with_callback(move |o| observe(&latest, name, o, to_u64))
                .build();
        }
        (Kind::Gauge, true) => {
            meter
                .u64_observable_gauge(name)
                .with_unit(unit)
                .with_description(description)
                .with_callback(move |o| observe(&latest, name, o, to_u64))
                .build();
        }
        (Kind::UpDown, _) => {
            meter
                .i64_observable_up_down_counter(name)
                .with_unit(unit)
                .with_description(description)
                .with_callback(move |o| observe(&latest, name, o, to_i64))
                .build();
        }
        (Kind::Counter, false) => {
            meter
                .f64_observable_counter(name)
                .with_unit(unit)
                .with_description(description)
                .with_callback(move |o| observe(&latest, name, o, to_f64))
                .build();
        }
        (Kind::Gauge, false) => {
            meter
                .f64_observable_gauge(name)
                .with_unit(unit)
                .with_description(description)
                .with_callback(move |o| observe(&latest, name, o, to_f64))
                .build();
        }
    }
}

/// The process's counts of exports.
#[derive(Default)]
struct Counters {
    exports: AtomicU64,
    failed: AtomicU64,
    in_flight: AtomicU64,
    in_flight_max: AtomicU64,
    down: AtomicBool,
    last_error: Mutex<Option<String>>,
}

/// The OTLP exporter, counted: exports that got through and those that failed (dropped), the
/// exports in flight; an outage is logged when it starts and when it ends, not per export.
struct Counted {
    inner: opentelemetry_otlp::MetricExporter,
    counters: Arc<Counters>,
    url: String,
}

impl PushMetricExporter for Counted {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let c = &self.counters;
        let now = c.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        c.in_flight_max.fetch_max(now, Ordering::SeqCst);
        debug_assert!(now <= MAX_IN_FLIGHT);
        let result = self.inner.export(metrics).await;
        c.in_flight.fetch_sub(1, Ordering::SeqCst);
        match &result {
            Ok(()) => {
                c.exports.fetch_add(1, Ordering::Relaxed);
                if c.down.swap(false, Ordering::Relaxed) {
                    tracing::info!(
                        url = %self.url,
                        exports_failed = c.failed.load(Ordering::Relaxed),
                        "OTLP endpoint reachable again; this export carried the totals"
                    );
                }
            }
            Err(e) => {
                c.failed.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut l) = c.last_error.lock() {
                    *l = Some(e.to_string());
                }
                if !c.down.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        url = %self.url,
                        error = %e,
                        "OTLP export failed; exports are dropped (not queued) until the endpoint \
                         answers, and counted in gpuprofd_otlp_exports_failed_total; the capture \
                         goes on (logged once per outage)"
                    );
                }
            }
        }
        result
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        Temporality::Cumulative
    }
}
