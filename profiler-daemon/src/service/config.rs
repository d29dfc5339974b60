//! The service's configuration: TOML, every key optional, layered defaults < file < CLI flags.
//!
//! [`DEFAULT_TOML`] is what `gpuprofd serve --print-default-config` prints: every key with its
//! default and one comment each (a unit test keeps it equal to [`Config::default`]).

use crate::sys::duration::parse_duration_or_zero;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where `gpuprofd serve` looks for its configuration unless `--config` says otherwise.
pub const DEFAULT_PATH: &str = "/etc/gpuprofd/config.toml";

/// The commented default configuration.
pub const DEFAULT_TOML: &str = r#"# gpuprofd service configuration (gpuprofd serve; default path /etc/gpuprofd/config.toml).
# Every key is optional: a missing key keeps the default shown here. Command-line flags of
# `gpuprofd serve` override this file. `systemctl reload gpuprofd` (SIGHUP) re-reads it: the keys
# marked (reload) take effect at once, the others at the next restart.

[capture]
# Extra CUDA library files or directories to attach to (besides running processes' and ldconfig's).
libs = []
# Attach to the CUDA libraries listed in the dynamic linker's cache.
system_libs = true
# Only these jobs (Slurm job id, pod UID, container id, systemd unit); empty: every CUDA process.
jobs = []
# Only processes in these cgroup v2 paths (at any depth below them); empty: no cgroup filter.
cgroups = []
# Ring-buffer size in MiB between the probes and the daemon (a power of two, 1 to 1024).
ring_buffer_mb = 16
# Take the call stack of one launch / blocking sync / blocking copy in N, each drawn at random
# (code and callers views); 0: no stacks.
stack_period = 64
# (reload) How often to rescan /proc for CUDA libraries behind the kernel's mmap watcher; "0": never.
rescan_interval = "30s"
# Count kernel launches in the kernel (per process and launch configuration) and read the counts
# every count_interval, instead of a ring-buffer record per launch; a deep capture switches to a
# record per launch while it runs. false: a record per launch always (as --all-jobs).
count_launches = true
# How often the in-kernel launch counts are read (the live figures' resolution).
count_interval = "1s"
# Probes per runtime kernel launch: "one" leaves the shared runtime's launch entries
# (cudaLaunchKernel…) unprobed and sees each launch at the driver call it makes (reported under
# the runtime's API, named by the driver's handle); "two" probes both layers.
launch_traps = "one"
# Attach the launch probes for WINDOW out of every PERIOD only ("100ms/1s"), at a random phase
# each period, and estimate each process's launches from the windows (with count_launches; a
# deep capture holds them attached while it runs). "": attached all the time.
launch_duty = ""

[nvml]
# Sample GPU utilisation, memory, clocks and per-process GPU memory through NVML.
enabled = true
# NVML library to load; unset: libnvidia-ml.so.1 through the dynamic linker.
# lib = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
# How often to sample every GPU.
interval = "1s"

[metrics]
# Serve Prometheus metrics at http://LISTEN/metrics.
enabled = true
# Address to listen on; loopback unless you mean to expose the figures to the network. Under
# systemd, gpuprofd-metrics.socket holds the port: its ListenStream= is used instead. (9400 is
# dcgm-exporter's: this one leaves it free.)
listen = "127.0.0.1:19400"
# (reload) Series per process (labels pid and comm beside workload) instead of per workload:
# every process then starts series of its own, which a node with many short processes pays for.
per_process = false
# (reload) Kernel-name series per workload (or process): the most launched kernels only.
top_kernels = 10
# (reload) How long a process that ended stays in the metrics and snapshots (and in memory).
expire_after = "60s"

[otlp]
# Push the metrics above to an OpenTelemetry Collector over OTLP/HTTP (protobuf), e.g.
# "http://127.0.0.1:4318" (a URL without a path gets /v1/metrics). "": off. Plain HTTP only: send
# to a Collector on the node or in the cluster, which can forward over TLS.
endpoint = ""
# How often to push. Counts are cumulative: a push that fails is dropped (not queued, not
# retried) and the next one that gets through carries the totals.
interval = "10s"
# How long one push may take before it counts as failed (one push at a time).
timeout = "5s"
# HTTP headers sent with each push, e.g. { authorization = "Bearer TOKEN" } (hidden in `status`).
headers = {}
# Resource attributes besides service.name = "gpuprofd", service.version and host.name (which
# these may replace), e.g. { "k8s.cluster.name" = "a" }.
resource = {}

[control]
# The control socket (`gpuprofd ctl`, `gpuprofd top`); any local user may connect, see below.
socket = "/run/gpuprofd.sock"
# (reload) Members of this group may do everything root may; others see only their own processes.
group = ""

[log]
# (reload) Log filter (tracing EnvFilter syntax: error, warn, info, debug, "gpuprofd=debug,info").
level = "info"
"#;

/// A duration written as `30s`, `5m`, `250ms` (or `0` where allowed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dur(pub Duration);

impl std::fmt::Display for Dur {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = self.0.as_millis();
        if ms == 0 {
            write!(f, "0")
        } else if ms.is_multiple_of(1000) {
            write!(f, "{}s", ms / 1000)
        } else {
            write!(f, "{ms}ms")
        }
    }
}

impl Serialize for Dur {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_duration_or_zero(&s)
            .map(Dur)
            .map_err(serde::de::Error::custom)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub capture: CaptureConfig,
    pub nvml: NvmlConfig,
    pub metrics: MetricsConfig,
    pub otlp: OtlpConfig,
    pub control: ControlConfig,
    pub log: LogConfig,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CaptureConfig {
    pub libs: Vec<PathBuf>,
    pub system_libs: bool,
    pub jobs: Vec<String>,
    pub cgroups: Vec<String>,
    pub ring_buffer_mb: u32,
    pub stack_period: u32,
    pub rescan_interval: Dur,
    pub count_launches: bool,
    pub count_interval: Dur,
    pub launch_traps: LaunchTrapsConfig,
    pub launch_duty: DutyConfig,
}

/// `capture.launch_duty`: `"WINDOW/PERIOD"`, or `""` (launch probes attached all the time).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DutyConfig(pub Option<crate::attach::duty::DutyCycle>);

impl Serialize for DutyConfig {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Some(d) => s.serialize_str(&d.to_string()),
            None => s.serialize_str(""),
        }
    }
}

impl<'de> Deserialize<'de> for DutyConfig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s.trim().is_empty() {
            return Ok(DutyConfig(None));
        }
        crate::attach::duty::DutyCycle::parse(&s)
            .map(|c| DutyConfig(Some(c)))
            .map_err(serde::de::Error::custom)
    }
}

/// `capture.launch_traps`: probes per runtime kernel launch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LaunchTrapsConfig {
    #[default]
    One,
    Two,
}

impl From<LaunchTrapsConfig> for crate::attach::LaunchTraps {
    fn from(c: LaunchTrapsConfig) -> Self {
        match c {
            LaunchTrapsConfig::One => crate::attach::LaunchTraps::One,
            LaunchTrapsConfig::Two => crate::attach::LaunchTraps::Two,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NvmlConfig {
    pub enabled: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lib: Option<PathBuf>,
    pub interval: Dur,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    pub enabled: bool,
    pub listen: String,
    pub per_process: bool,
    pub top_kernels: usize,
    pub expire_after: Dur,
}

/// `[otlp]`: the OTLP/HTTP push ([`crate::output::otlp`]); every key takes effect at restart.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OtlpConfig {
    pub endpoint: String,
    pub interval: Dur,
    pub timeout: Dur,
    pub headers: std::collections::BTreeMap<String, String>,
    pub resource: std::collections::BTreeMap<String, String>,
}

impl Default for OtlpConfig {
    fn default() -> Self {
        OtlpConfig {
            endpoint: String::new(),
            interval: Dur(Duration::from_secs(10)),
            timeout: Dur(Duration::from_secs(5)),
            headers: Default::default(),
            resource: Default::default(),
        }
    }
}

impl OtlpConfig {
    /// The push's settings (`None`: off). The configuration was validated.
    pub fn settings(&self) -> Option<crate::output::otlp::Settings> {
        if self.endpoint.is_empty() {
            return None;
        }
        Some(crate::output::otlp::Settings {
            url: crate::output::otlp::metrics_url(&self.endpoint).ok()?,
            interval: self.interval.0,
            timeout: self.timeout.0,
            headers: self.headers.clone(),
            resource: self.resource.clone(),
        })
    }

    fn validate(
        &self,
        bad: &dyn Fn(&'static str, String, &str) -> ConfigError,
    ) -> Result<(), ConfigError> {
        if !self.endpoint.is_empty()
            && let Err(e) = crate::output::otlp::metrics_url(&self.endpoint)
        {
            return Err(bad(
                "otlp.endpoint",
                format!("\"{}\"", self.endpoint),
                &e.to_string(),
            ));
        }
        let within = |d: Dur, lo: Duration, hi: Duration| d.0 >= lo && d.0 <= hi;
        if !within(
            self.interval,
            Duration::from_millis(100),
            Duration::from_secs(3600),
        ) {
            return Err(bad(
                "otlp.interval",
                format!("\"{}\"", self.interval),
                "must be between 100ms and 1h",
            ));
        }
        if !within(
            self.timeout,
            Duration::from_millis(100),
            Duration::from_secs(60),
        ) {
            return Err(bad(
                "otlp.timeout",
                format!("\"{}\"", self.timeout),
                "must be between 100ms and 60s",
            ));
        }
        for (k, v) in &self.headers {
            let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
            if k.is_empty() || !k.chars().all(token) {
                return Err(bad(
                    "otlp.headers",
                    format!("\"{k}\""),
                    "is not an HTTP header name",
                ));
            }
            if v.chars().any(|c| c.is_control()) {
                return Err(bad(
                    "otlp.headers",
                    format!("\"{k}\""),
                    "its value has a control character (a line break?)",
                ));
            }
        }
        Ok(())
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ControlConfig {
    pub socket: PathBuf,
    pub group: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    pub level: String,
}

impl Default for CaptureConfig {
    fn default() -> Self {
        CaptureConfig {
            libs: Vec::new(),
            system_libs: true,
            jobs: Vec::new(),
            cgroups: Vec::new(),
            ring_buffer_mb: 16,
            stack_period: crate::session::ALL_JOBS_STACK_PERIOD,
            rescan_interval: Dur(Duration::from_secs(30)),
            count_launches: true,
            count_interval: Dur(Duration::from_secs(1)),
            launch_traps: LaunchTrapsConfig::One,
            launch_duty: DutyConfig(None),
        }
    }
}

impl Default for NvmlConfig {
    fn default() -> Self {
        NvmlConfig {
            enabled: true,
            lib: None,
            interval: Dur(Duration::from_secs(1)),
        }
    }
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            enabled: true,
            listen: crate::output::prometheus::DEFAULT_LISTEN.into(),
            per_process: false,
            top_kernels: crate::output::prometheus::TOP_KERNELS,
            expire_after: Dur(crate::output::prometheus::EXITED_GRACE),
        }
    }
}

impl Default for ControlConfig {
    fn default() -> Self {
        ControlConfig {
            socket: PathBuf::from("/run/gpuprofd.sock"),
            group: String::new(),
        }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".into(),
        }
    }
}

/// Why a configuration was refused: the file, and what in it.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read the configuration \"{path}\": {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("configuration \"{path}\": {message}")]
    Parse { path: String, message: String },
    #[error("configuration \"{path}\": {key} = {value}: {why}")]
    Invalid {
        path: String,
        key: &'static str,
        value: String,
        why: String,
    },
}

/// Settings given on the command line: each one replaces the file's value.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overrides {
    pub libs: Vec<PathBuf>,
    pub no_system_libs: bool,
    pub jobs: Vec<String>,
    pub cgroups: Vec<String>,
    pub nvml_lib: Option<PathBuf>,
    pub no_nvml: bool,
    pub metrics_addr: Option<String>,
    pub no_metrics: bool,
    pub socket: Option<PathBuf>,
    pub log_level: Option<String>,
}

impl Overrides {
    fn apply(&self, c: &mut Config) {
        if !self.libs.is_empty() {
            c.capture.libs = self.libs.clone();
        }
        if self.no_system_libs {
            c.capture.system_libs = false;
        }
        if !self.jobs.is_empty() {
            c.capture.jobs = self.jobs.clone();
        }
        if !self.cgroups.is_empty() {
            c.capture.cgroups = self.cgroups.clone();
        }
        if let Some(l) = &self.nvml_lib {
            c.nvml.lib = Some(l.clone());
        }
        if self.no_nvml {
            c.nvml.enabled = false;
        }
        if let Some(a) = &self.metrics_addr {
            c.metrics.listen = a.clone();
            c.metrics.enabled = true;
        }
        if self.no_metrics {
            c.metrics.enabled = false;
        }
        if let Some(s) = &self.socket {
            c.control.socket = s.clone();
        }
        if let Some(l) = &self.log_level {
            c.log.level = l.clone();
        }
    }
}

/// Where the file layer comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// `--config PATH`: it must exist.
    Explicit(PathBuf),
    /// The default path: used when it exists, defaults otherwise.
    Default(PathBuf),
}

impl Source {
    pub fn path(&self) -> &Path {
        match self {
            Source::Explicit(p) | Source::Default(p) => p,
        }
    }
}

/// Parses one file's text (the file layer alone, validated).
pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
    let c: Config = toml::from_str(text).map_err(|e| {
        let at = e
            .span()
            .map(|s| {
                let before = &text[..s.start.min(text.len())];
                let line = before.matches('\n').count() + 1;
                let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                format!("line {line}, column {col}: ")
            })
            .unwrap_or_default();
        ConfigError::Parse {
            path: path.display().to_string(),
            message: format!("{at}{}", e.message().trim_end()),
        }
    })?;
    Ok(c)
}

/// Defaults < file < overrides, validated. `Ok((config, file_used))`.
pub fn load(source: &Source, over: &Overrides) -> Result<(Config, bool), ConfigError> {
    let path = source.path();
    let (mut c, used) = match std::fs::read_to_string(path) {
        Ok(text) => (parse(&text, path)?, true),
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound && matches!(source, Source::Default(_)) =>
        {
            (Config::default(), false)
        }
        Err(source) => {
            return Err(ConfigError::Read {
                path: path.display().to_string(),
                source,
            });
        }
    };
    over.apply(&mut c);
    c.validate(path)?;
    Ok((c, used))
}

impl Config {
    /// Checks what serde cannot: ranges, addresses, filters, groups.
    pub fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        let bad = |key: &'static str, value: String, why: &str| ConfigError::Invalid {
            path: path.display().to_string(),
            key,
            value,
            why: why.to_string(),
        };
        let mb = self.capture.ring_buffer_mb;
        if !mb.is_power_of_two() || mb > 1024 {
            return Err(bad(
                "capture.ring_buffer_mb",
                mb.to_string(),
                "must be a power of two between 1 and 1024",
            ));
        }
        let ci = self.capture.count_interval.0;
        if ci < Duration::from_millis(10) || ci > Duration::from_secs(60) {
            return Err(bad(
                "capture.count_interval",
                format!("\"{}\"", self.capture.count_interval),
                "must be between 10ms and 60s",
            ));
        }
        if self.nvml.interval.0 < Duration::from_millis(100) {
            return Err(bad(
                "nvml.interval",
                format!("\"{}\"", self.nvml.interval),
                "must be at least 100ms",
            ));
        }
        if self.metrics.listen.parse::<SocketAddr>().is_err() {
            return Err(bad(
                "metrics.listen",
                format!("\"{}\"", self.metrics.listen),
                "is not an IP address and port, e.g. \"127.0.0.1:19400\"",
            ));
        }
        if !(1..=1000).contains(&self.metrics.top_kernels) {
            return Err(bad(
                "metrics.top_kernels",
                self.metrics.top_kernels.to_string(),
                "must be between 1 and 1000",
            ));
        }
        self.otlp.validate(&bad)?;
        if !self.control.socket.is_absolute() {
            return Err(bad(
                "control.socket",
                format!("\"{}\"", self.control.socket.display()),
                "must be an absolute path",
            ));
        }
        if !self.control.group.is_empty() && super::peer::group_id(&self.control.group).is_none() {
            return Err(bad(
                "control.group",
                format!("\"{}\"", self.control.group),
                "no such group on this machine (see /etc/group)",
            ));
        }
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&self.log.level) {
            return Err(bad(
                "log.level",
                format!("\"{}\"", self.log.level),
                &format!("not a log filter ({e}); use error, warn, info or debug"),
            ));
        }
        Ok(())
    }

    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics
            .enabled
            .then(|| self.metrics.listen.parse().ok())
            .flatten()
    }

    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_else(|e| format!("# cannot print the configuration: {e}\n"))
    }

    /// What a reload to `new` does: the reloadable keys are taken from it (and named in
    /// `changed` when they differ); the other keys that differ are named in `pending` and keep
    /// their running values until a restart.
    pub fn reload_from(&self, new: &Config) -> Reload {
        fn take<T: PartialEq + Clone>(
            key: &'static str,
            running: &mut T,
            wanted: &T,
            changed: &mut Vec<&'static str>,
        ) {
            if running != wanted {
                running.clone_from(wanted);
                changed.push(key);
            }
        }
        let mut next = self.clone();
        let mut changed = Vec::new();
        let c = &mut changed;
        take(
            "capture.rescan_interval",
            &mut next.capture.rescan_interval,
            &new.capture.rescan_interval,
            c,
        );
        take(
            "metrics.per_process",
            &mut next.metrics.per_process,
            &new.metrics.per_process,
            c,
        );
        take(
            "metrics.top_kernels",
            &mut next.metrics.top_kernels,
            &new.metrics.top_kernels,
            c,
        );
        take(
            "metrics.expire_after",
            &mut next.metrics.expire_after,
            &new.metrics.expire_after,
            c,
        );
        take(
            "control.group",
            &mut next.control.group,
            &new.control.group,
            c,
        );
        take("log.level", &mut next.log.level, &new.log.level, c);
        // Whatever still differs waits for a restart.
        let differs = [
            ("capture.libs", next.capture.libs != new.capture.libs),
            (
                "capture.system_libs",
                next.capture.system_libs != new.capture.system_libs,
            ),
            ("capture.jobs", next.capture.jobs != new.capture.jobs),
            (
                "capture.cgroups",
                next.capture.cgroups != new.capture.cgroups,
            ),
            (
                "capture.ring_buffer_mb",
                next.capture.ring_buffer_mb != new.capture.ring_buffer_mb,
            ),
            (
                "capture.stack_period",
                next.capture.stack_period != new.capture.stack_period,
            ),
            (
                "capture.count_launches",
                next.capture.count_launches != new.capture.count_launches,
            ),
            (
                "capture.count_interval",
                next.capture.count_interval != new.capture.count_interval,
            ),
            (
                "capture.launch_traps",
                next.capture.launch_traps != new.capture.launch_traps,
            ),
            (
                "capture.launch_duty",
                next.capture.launch_duty != new.capture.launch_duty,
            ),
            ("nvml", next.nvml != new.nvml),
            (
                "metrics.enabled",
                next.metrics.enabled != new.metrics.enabled,
            ),
            ("metrics.listen", next.metrics.listen != new.metrics.listen),
            ("control.socket", next.control.socket != new.control.socket),
            ("otlp", next.otlp != new.otlp),
        ];
        let pending = differs.iter().filter(|d| d.1).map(|d| d.0).collect();
        Reload {
            next,
            changed,
            pending,
        }
    }
}

/// See [`Config::reload_from`].
#[derive(Clone, Debug, PartialEq)]
pub struct Reload {
    pub next: Config,
    pub changed: Vec<&'static str>,
    pub pending: Vec<&'static str>,
}

#[cfg(test)]
mod tests;
