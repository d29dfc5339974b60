//! `gpuprofd serve`: the service's configuration (file, flags), then the `--all-jobs` session
//! with the service beside it.

use super::{init_logging_with, run_session};
use crate::session::{self, CaptureOptions, Target};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The configuration file (default /etc/gpuprofd/config.toml, used when it exists).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the default configuration, every key commented, and exit.
    #[arg(long)]
    pub print_default_config: bool,
    /// Print the configuration in effect (defaults < file < these flags) and exit.
    #[arg(long)]
    pub print_config: bool,
    /// Also attach to these CUDA library files or directories (replaces capture.libs).
    #[arg(long = "lib", value_name = "PATH")]
    pub libs: Vec<PathBuf>,
    /// capture.system_libs = false.
    #[arg(long)]
    pub no_system_libs: bool,
    /// Only these jobs (replaces capture.jobs).
    #[arg(long = "job", value_name = "ID")]
    pub jobs: Vec<String>,
    /// Only these cgroups (replaces capture.cgroups).
    #[arg(long = "cgroup", value_name = "PATH")]
    pub cgroups: Vec<String>,
    /// nvml.lib.
    #[arg(long, value_name = "PATH")]
    pub nvml_lib: Option<PathBuf>,
    /// nvml.enabled = false.
    #[arg(long)]
    pub no_nvml: bool,
    /// metrics.listen (and metrics.enabled = true).
    #[arg(long, value_name = "ADDR", conflicts_with = "no_metrics")]
    pub metrics_addr: Option<String>,
    /// metrics.enabled = false.
    #[arg(long)]
    pub no_metrics: bool,
    /// control.socket.
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// log.level.
    #[arg(long, value_name = "FILTER")]
    pub log_level: Option<String>,
    /// Remember driver object layouts (where the driver keeps a kernel's name, confirmed per
    /// driver build) across runs in DIR/driver-layouts.json, so that a later live attach names
    /// kernels made before it. Default: $STATE_DIRECTORY (systemd), else /var/lib/gpuprofd.
    #[arg(long, value_name = "DIR", conflicts_with = "no_state")]
    pub state_dir: Option<PathBuf>,
    /// Neither read nor write the state directory (layouts are learned afresh each run).
    #[arg(long)]
    pub no_state: bool,
    /// When the node lacks what the probes need (BTF, the uprobe PMU, the privilege to load
    /// BPF), say so and wait this long (or until SIGTERM) before exiting with status 14 (6 for
    /// privilege), so that a supervisor that restarts at once (a Kubernetes pod's first
    /// restarts) does not restart faster. deploy/kubernetes/ sets 60s.
    #[arg(long, value_parser = crate::sys::duration::parse_duration_or_zero,
          default_value = "0", value_name = "DURATION")]
    pub fail_delay: std::time::Duration,
}

pub(super) fn serve(a: &ServeArgs) -> ExitCode {
    use crate::service::config::{self, Overrides, Source};
    if a.print_default_config {
        print!("{}", config::DEFAULT_TOML);
        return ExitCode::SUCCESS;
    }
    let source = match &a.config {
        Some(p) => Source::Explicit(p.clone()),
        None => Source::Default(PathBuf::from(config::DEFAULT_PATH)),
    };
    let overrides = Overrides {
        libs: a.libs.clone(),
        no_system_libs: a.no_system_libs,
        jobs: a.jobs.clone(),
        cgroups: a.cgroups.clone(),
        nvml_lib: a.nvml_lib.clone(),
        no_nvml: a.no_nvml,
        metrics_addr: a.metrics_addr.clone(),
        no_metrics: a.no_metrics,
        socket: a.socket.clone(),
        log_level: a.log_level.clone(),
    };
    let (cfg, used) = match config::load(&source, &overrides) {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "gpuprofd serve: {e}. `gpuprofd serve --print-default-config` shows every key"
            );
            return ExitCode::from(2);
        }
    };
    if a.print_config {
        print!("{}", cfg.to_toml());
        return ExitCode::SUCCESS;
    }
    let log_reload = init_logging_with(tracing_subscriber::EnvFilter::new(&cfg.log.level));
    if used {
        tracing::info!(file = %source.path().display(), "configuration loaded");
    } else {
        tracing::info!(
            file = %source.path().display(),
            "no configuration file; running on defaults and flags"
        );
    }
    let unmet = crate::service::preflight::unmet(
        std::path::Path::new("/"),
        crate::service::preflight::may_load_bpf(),
    );
    if !unmet.is_empty() {
        for u in &unmet {
            tracing::error!(check = u.check, "this node lacks {}: {}", u.missing, u.fix);
        }
        let status = crate::service::preflight::exit_status(&unmet);
        tracing::error!(
            status,
            delay = ?a.fail_delay,
            "gpuprofd cannot capture on this node (`gpuprofd doctor` checks everything); exiting"
        );
        crate::service::preflight::wait_before_exit(a.fail_delay);
        return ExitCode::from(status);
    }
    if let Some(addr) = cfg.metrics_addr()
        && !addr.ip().is_loopback()
    {
        tracing::warn!(%addr, "metrics.listen is not a loopback address: the figures are exposed to the network");
    }
    let opts = CaptureOptions {
        target: Target::AllJobs,
        wait: false,
        duration: None,
        output: None,
        libs: cfg.capture.libs.clone(),
        system_libs: cfg.capture.system_libs,
        live: false,
        ring_bytes: cfg.capture.ring_buffer_mb << 20,
        stack_period: cfg.capture.stack_period,
        count_launches: cfg
            .capture
            .count_launches
            .then_some(cfg.capture.count_interval.0),
        launch_traps: cfg.capture.launch_traps.into(),
        launch_duty: cfg
            .capture
            .count_launches
            .then_some(cfg.capture.launch_duty.0)
            .flatten(),
        verbose: false,
        command: Vec::new(),
        inject_lib: None,
        command_stdin: None,
        run_as: None,
        cgroups: cfg.capture.cgroups.clone(),
        jobs: cfg.capture.jobs.clone(),
        rescan: Some(cfg.capture.rescan_interval.0),
        nvml: cfg.nvml.enabled.then(|| session::NvmlOptions {
            lib: cfg.nvml.lib.clone(),
            interval: cfg.nvml.interval.0,
        }),
        state_dir: super::state_dir(&a.state_dir, a.no_state),
    };
    let metrics_addr = cfg.metrics_addr();
    let otlp = cfg.otlp.settings();
    let svc = crate::service::Service::new(source, overrides, cfg, used, log_reload);
    run_session(
        opts,
        Some(std::sync::Arc::new(svc)),
        metrics_addr,
        false,
        otlp,
    )
}
