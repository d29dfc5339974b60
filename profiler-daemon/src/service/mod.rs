//! Service mode (`gpuprofd serve`): the capture session of `--all-jobs`, configured from a TOML
//! file, reloaded on SIGHUP, with systemd readiness and watchdog, a control socket and
//! Prometheus metrics on by default.

pub mod activation;
pub mod companion;
pub mod config;
pub mod ctl;
pub mod http;
pub mod notify;
pub mod peer;
pub mod preflight;

use config::{Config, Overrides, Source};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};

/// Changes the log filter of the running subscriber; the error says why the filter was refused.
pub type LogReload =
    Box<dyn Fn(&str) -> Result<(), Box<dyn std::error::Error + Send + Sync>> + Send + Sync>;

/// Why a reload left the running configuration as it was.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("{0}; the running configuration is unchanged")]
    Config(#[from] config::ConfigError),
    #[error("cannot apply log.level \"{level}\": {source}; the running configuration is unchanged")]
    LogLevel {
        level: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// The running service's configuration and how to reload it.
pub struct Service {
    pub source: Source,
    pub overrides: Overrides,
    /// Whether the file existed at start (else: defaults and flags only).
    pub file_used: bool,
    config: RwLock<Config>,
    /// `control.group`'s id, resolved when the configuration is (re)loaded.
    admin_gid: RwLock<Option<u32>>,
    pending_restart: Mutex<Vec<&'static str>>,
    reloads: AtomicU64,
    failed_reloads: AtomicU64,
    pub notifier: notify::Notifier,
    log_reload: LogReload,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("source", &self.source)
            .field("config", &self.config())
            .finish_non_exhaustive()
    }
}

impl Service {
    pub fn new(
        source: Source,
        overrides: Overrides,
        config: Config,
        file_used: bool,
        log_reload: LogReload,
    ) -> Service {
        let gid = admin_gid_of(&config);
        Service {
            source,
            overrides,
            file_used,
            config: RwLock::new(config),
            admin_gid: RwLock::new(gid),
            pending_restart: Mutex::new(Vec::new()),
            reloads: AtomicU64::new(0),
            failed_reloads: AtomicU64::new(0),
            notifier: notify::Notifier::from_env(),
            log_reload,
        }
    }

    /// The configuration in effect.
    pub fn config(&self) -> Config {
        self.config
            .read()
            .map(|c| c.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// Re-reads the file (SIGHUP, `gpuprofd ctl reload`). A file that does not load leaves the
    /// running configuration as it was; the error says why.
    pub fn reload(&self) -> Result<serde_json::Value, ReloadError> {
        let new = match config::load(&self.source, &self.overrides) {
            Ok((c, _)) => c,
            Err(e) => {
                self.failed_reloads.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "reload refused; keeping the running configuration");
                return Err(e.into());
            }
        };
        let old = self.config();
        let config::Reload {
            next,
            changed,
            pending,
        } = old.reload_from(&new);
        if next.log.level != old.log.level
            && let Err(source) = (self.log_reload)(&next.log.level)
        {
            self.failed_reloads.fetch_add(1, Ordering::Relaxed);
            return Err(ReloadError::LogLevel {
                level: next.log.level.clone(),
                source,
            });
        }
        if let Ok(mut g) = self.admin_gid.write() {
            *g = admin_gid_of(&next);
        }
        if let Ok(mut c) = self.config.write() {
            *c = next;
        }
        if let Ok(mut p) = self.pending_restart.lock() {
            *p = pending.clone();
        }
        let n = self.reloads.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::info!(reload = n, changed = ?changed, pending_restart = ?pending, "configuration reloaded");
        if !pending.is_empty() {
            tracing::warn!(
                keys = ?pending,
                "these settings changed in the file but take effect only at the next restart \
                 (systemctl restart gpuprofd)"
            );
        }
        Ok(serde_json::json!({ "changed": changed, "pending_restart": pending }))
    }

    /// The id of `control.group` (`None`: no group configured).
    pub fn admin_gid(&self) -> Option<u32> {
        self.admin_gid.read().ok().and_then(|g| *g)
    }

    /// The service part of `status`.
    pub fn status(&self) -> serde_json::Value {
        serde_json::json!({
            "config_file": self.source.path(),
            "config_file_used": self.file_used,
            "reloads": self.reloads.load(Ordering::Relaxed),
            "failed_reloads": self.failed_reloads.load(Ordering::Relaxed),
            "pending_restart": self.pending_restart.lock().map(|p| p.clone()).unwrap_or_default(),
            "config": shown_config(self.config()),
        })
    }
}

/// The configuration as `status` shows it: the OTLP headers' values (credentials, often) hidden.
fn shown_config(mut c: Config) -> Config {
    for v in c.otlp.headers.values_mut() {
        *v = "(hidden)".into();
    }
    c
}

fn admin_gid_of(c: &Config) -> Option<u32> {
    let g = &c.control.group;
    (!g.is_empty()).then(|| peer::group_id(g)).flatten()
}
