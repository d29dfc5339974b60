//! Command line: parse, pick the mode, map errors to exit codes.

mod ctl;
mod export;
mod report;
mod serve;

pub use ctl::{CtlArgs, CtlCommand, TopArgs};
pub use serve::ServeArgs;

use crate::session::{self, CaptureOptions, Target};
use crate::sys::account::Account;
use crate::sys::duration::{parse_duration, parse_duration_or_zero};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// gpuprofd: a transparent, system-wide GPU profiler for CUDA processes (eBPF uprobes on the
/// CUDA driver and runtime; no code change, no restart of the profiled programs).
#[derive(Debug, Parser)]
#[command(name = "gpuprofd", version, about, long_about = None, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub capture: CaptureArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the project's fake-CUDA training loop under the real probes and print its report
    /// (no GPU needed; shows the product working in the first minute).
    Demo {
        /// Directory built by `tests/fakecuda/build.sh` (has lib/, bin/workload, demo.script).
        #[arg(long, default_value = "target/fakecuda")]
        fake_cuda: PathBuf,
        /// Also write the JSON report here.
        #[arg(long)]
        output: Option<PathBuf>,
    },
    /// Benchmark helper: empty uprobes at the probe sites of SYMBOLs in LIB (the cost floor),
    /// held until stdin closes.
    #[command(hide = true)]
    Floor {
        #[arg(long)]
        lib: PathBuf,
        #[arg(long = "symbol", required = true)]
        symbols: Vec<String>,
        /// At the symbol entry instead of the placement's site.
        #[arg(long)]
        entry: bool,
        /// What to attach: `empty` (the floor), `record` (the least a recording probe does: a
        /// stack read, a clock read and a ring record), or one part of it: `read`, `clock`,
        /// `ring`.
        #[arg(long, default_value = "empty")]
        program: String,
    },
    /// Prints the manual page (roff, from this command line's own definition: what
    /// `cargo xtask dist` installs as gpuprofd(1)).
    #[command(hide = true)]
    Man,
    /// Benchmark helper: synthetic records through decode and aggregation; prints events/s.
    #[command(hide = true)]
    BenchPipeline {
        #[arg(long, default_value_t = 5_000_000)]
        events: u64,
        /// Also write the records to this capture file.
        #[arg(long)]
        capture: Option<PathBuf>,
    },
    /// Show a capture file (written with `--output FILE.gpuprof`) again: the whole report or one
    /// view of it, selected and ordered. Exit 10 when the file cannot be read, 11 when it is
    /// damaged (the figures cover what was recovered before the damage).
    Report(crate::output::views::ReportArgs),
    /// Write a capture file as a timeline: Chrome Trace Event JSON, for Perfetto UI
    /// (ui.perfetto.dev) or chrome://tracing. Exit codes as `report`'s.
    Export(crate::output::trace::ExportArgs),
    /// Run as a service (what the systemd unit starts): capture every CUDA process like
    /// `--all-jobs`, configured by a TOML file (/etc/gpuprofd/config.toml; SIGHUP re-reads it),
    /// with Prometheus metrics on 127.0.0.1:19400, the control socket /run/gpuprofd.sock and
    /// systemd readiness (Type=notify) and watchdog. Flags override the file.
    Serve(ServeArgs),
    /// Ask the running service through its control socket: status, processes, snapshot (the
    /// live report as JSON), reload. Exit 12 when no service listens, 13 when it refuses.
    Ctl(CtlArgs),
    /// The running service's live table, refreshed (like `--all-jobs` prints at the end).
    Top(TopArgs),
    /// Check that this machine can run the probes (kernel, privileges, BTF, uprobes, a real
    /// uprobe round trip) and show the hook plan for each CUDA library found. Exit 0 when
    /// capture works here, 9 when it cannot.
    Doctor {
        /// Also inspect these CUDA library files or directories.
        #[arg(long = "lib", value_name = "PATH")]
        libs: Vec<PathBuf>,
        /// Do not look in the dynamic linker's cache for CUDA libraries.
        #[arg(long)]
        no_system_libs: bool,
        /// Machine-readable output (schema gpuprofd.doctor/1).
        #[arg(long)]
        json: bool,
        /// List every hooked symbol, not one sample per probe program.
        #[arg(long)]
        symbols: bool,
        /// NVML library to check (default: libnvidia-ml.so.1 through the dynamic linker).
        #[arg(long, value_name = "PATH")]
        nvml_lib: Option<PathBuf>,
    },
}

#[derive(Debug, Args)]
pub struct CaptureArgs {
    /// Capture every process that maps a CUDA driver or runtime library, now or later.
    #[arg(long, conflicts_with = "pid")]
    pub all_jobs: bool,
    /// Capture one running process (live attach, no restart).
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// Only processes in this cgroup (v2; at any depth below it), e.g.
    /// /system.slice/docker-<id>.scope. Repeatable. Selected in the kernel.
    #[arg(long = "cgroup", value_name = "PATH", conflicts_with = "pid")]
    pub cgroups: Vec<String>,
    /// Only processes of this job: a Slurm job id, a Kubernetes pod UID, a container id (or its
    /// first 12+ characters), a systemd unit. Repeatable; jobs that start later are picked up.
    /// Selected in the kernel by the job's cgroup.
    #[arg(long = "job", value_name = "ID", conflicts_with = "pid")]
    pub jobs: Vec<String>,
    /// With --pid: if the process has not loaded CUDA yet, wait for it instead of failing.
    #[arg(long, requires = "pid")]
    pub wait: bool,
    /// Stop after this long (e.g. 30s, 5m, 1h, 500ms); else at Ctrl-C / SIGTERM.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub duration: Option<Duration>,
    /// Write the results here. `FILE.gpuprof`: a capture file with every recorded call, written
    /// as the capture runs (flushed every second; `gpuprofd report FILE` reads it); any other
    /// name: the JSON report (schema gpuprofd.report/1) at the end.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Also attach to these CUDA library files, or the CUDA libraries in these directories.
    #[arg(long = "lib", value_name = "PATH")]
    pub libs: Vec<PathBuf>,
    /// Do not attach to the CUDA libraries in the dynamic linker's cache (--all-jobs).
    #[arg(long)]
    pub no_system_libs: bool,
    /// Do not print the per-second live lines on stderr.
    #[arg(long)]
    pub no_live: bool,
    /// Take the call stack (native frames, and Python frames in CPython 3.9–3.13) of one launch,
    /// blocking sync or blocking copy in N, each drawn at random, for the code and callers views.
    /// Default: 1 (every call) with --pid or a command, 64 with --all-jobs; 0: no stacks.
    #[arg(long, value_name = "N")]
    pub stack_period: Option<u32>,
    /// Count kernel launches in the kernel (per process and launch configuration) and read the
    /// counts every INTERVAL (e.g. 1s) instead of a record per launch: what `gpuprofd serve`
    /// does by default. Launch totals stay exact; per-launch times, threads and call sites are
    /// not kept. Not with a capture file (-o FILE.gpuprof).
    #[arg(long, value_parser = crate::sys::duration::parse_duration, value_name = "INTERVAL",
          num_args = 0..=1, default_missing_value = "1s")]
    pub count_launches: Option<Duration>,
    /// Probes a runtime kernel launch passes: `one` leaves the shared runtime's launch entries
    /// (`cudaLaunchKernel`…) unprobed and sees each launch at the driver call it makes,
    /// reported under the runtime's API when the runtime's code made it, named by the driver's
    /// handle; `two` probes both layers (the driver call is not counted again) and names a
    /// runtime launch by its host stub's symbol too. `auto`: two with --pid (a process
    /// already running, whose older handles only a learned layout could name), one otherwise.
    #[arg(long, value_enum, default_value_t = LaunchTrapsArg::Auto, value_name = "N")]
    pub launch_traps: LaunchTrapsArg,
    /// With --count-launches: attach the launch probes for WINDOW out of every PERIOD only
    /// (e.g. 100ms/1s), at a random phase each period, and estimate each process's launches
    /// from the windows (the report says the sampled counts, the estimate and its error).
    /// Everything else stays attached all the time. Not with --pid or a command.
    #[arg(long, value_parser = crate::attach::duty::DutyCycle::parse, value_name = "WINDOW/PERIOD")]
    pub launch_duty: Option<crate::attach::duty::DutyCycle>,
    /// How often to rescan /proc for CUDA library files, as a safety net behind the in-kernel
    /// mmap watcher (default 30s; 1s when the watcher is unavailable; 0 = never).
    #[arg(long, value_parser = parse_duration_or_zero, value_name = "DURATION")]
    pub rescan_interval: Option<Duration>,
    /// NVML library to sample GPU utilisation and per-process GPU memory from (default: the
    /// driver's libnvidia-ml.so.1 found by the dynamic linker).
    #[arg(long, value_name = "PATH", conflicts_with = "no_nvml")]
    pub nvml_lib: Option<PathBuf>,
    /// How often to sample NVML.
    #[arg(long, value_parser = parse_duration, default_value = "1s", value_name = "DURATION")]
    pub nvml_interval: Duration,
    /// Do not sample NVML.
    #[arg(long)]
    pub no_nvml: bool,
    /// Serve Prometheus metrics (text exposition format 0.0.4) at http://ADDR/metrics while capturing,
    /// e.g. 127.0.0.1:19400. Off unless given; an address other than loopback exposes the
    /// figures to the network.
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Metrics per process (labels pid, comm and workload) instead of per workload.
    #[arg(long, requires = "metrics_addr")]
    pub metrics_per_process: bool,
    /// Push the metrics to an OpenTelemetry Collector over OTLP/HTTP while capturing, and once
    /// more at the end, e.g. http://127.0.0.1:4318 (a URL without a path gets /v1/metrics).
    #[arg(long, value_name = "URL")]
    pub otlp: Option<String>,
    /// How often to push over OTLP.
    #[arg(long, value_parser = parse_duration, default_value = "10s", value_name = "DURATION", requires = "otlp")]
    pub otlp_interval: Duration,
    /// Ring-buffer size in MiB (a power of two).
    #[arg(long, default_value_t = 16, value_name = "MIB")]
    pub ring_buffer_mb: u32,
    /// Say which symbols were attached where, at which probe offset and why.
    #[arg(long, short)]
    pub verbose: bool,
    /// Run this command under the profiler and stop when it exits (after `--`): its processes
    /// only (it and every process it starts) unless --all-jobs, --job or --cgroup says
    /// otherwise. gpuprofd exits with its status (128 + N when signal N killed it) and passes
    /// SIGINT and SIGTERM on to it. Under sudo it runs as the user who ran sudo.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
    /// Do not load the GPU-time library into the command (by default the CUDA driver loads
    /// `libgpuprofd_inject.so` into it through CUDA_INJECTION64_PATH, for exact per-kernel GPU
    /// times; see docs/GPU-TIME.md). Only with a command.
    #[arg(long)]
    pub no_inject: bool,
    /// Run the command as this user (a name or a uid; its groups as a login gives them):
    /// default, under sudo, the user who ran sudo (SUDO_UID, SUDO_GID); else as gpuprofd runs.
    #[arg(long, value_name = "NAME|UID", requires = "command")]
    pub user: Option<String>,
    /// Remember driver object layouts (where the driver keeps a kernel's name, confirmed per
    /// driver build) across runs in DIR/driver-layouts.json, so that a later live attach names
    /// kernels made before it. Default: $STATE_DIRECTORY (systemd), else /var/lib/gpuprofd.
    #[arg(long, value_name = "DIR", conflicts_with = "no_state")]
    pub state_dir: Option<PathBuf>,
    /// Neither read nor write the state directory (layouts are learned afresh each run).
    #[arg(long)]
    pub no_state: bool,
}

/// The state directory `--state-dir` and `--no-state` ask for.
pub(crate) fn state_dir(dir: &Option<PathBuf>, none: bool) -> Option<PathBuf> {
    (!none).then(|| {
        dir.clone()
            .unwrap_or_else(|| session::default_state_dir(|k| std::env::var_os(k)))
    })
}

fn init_logging(verbose: bool) {
    let default = if verbose {
        "gpuprofd=debug,info"
    } else {
        "info"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("GPUPROFD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = init_logging_with(filter);
}

/// Installs the subscriber with `filter`; returns a function that replaces the filter (the
/// service's `log.level` reload). Under systemd (`$JOURNAL_STREAM`) no colours.
fn init_logging_with(filter: tracing_subscriber::EnvFilter) -> crate::service::LogReload {
    use tracing_subscriber::prelude::*;
    use tracing_subscriber::{EnvFilter, fmt, reload};
    let (filter, handle) = reload::Layer::new(filter);
    let ansi = std::env::var_os("JOURNAL_STREAM").is_none()
        && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(
            fmt::layer()
                .with_writer(std::io::stderr)
                .with_target(false)
                .with_ansi(ansi),
        )
        .try_init();
    Box::new(move |level: &str| {
        let f = EnvFilter::try_new(level)?;
        Ok(handle.reload(f)?)
    })
}

/// Runs a capture session, with the service (and the metrics server) beside it.
fn run_session(
    opts: CaptureOptions,
    svc: Option<std::sync::Arc<crate::service::Service>>,
    metrics_addr: Option<std::net::SocketAddr>,
    per_process: bool,
    otlp: Option<crate::output::otlp::Settings>,
) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("gpuprofd: could not start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async {
        let mut beside = match crate::service::companion::Beside::bind(svc, metrics_addr).await {
            Ok(b) => b.per_process(per_process).otlp(otlp),
            Err(e) => {
                eprintln!("gpuprofd: error: {e:#}");
                return ExitCode::from(2);
            }
        };
        match session::run(opts, &mut beside).await {
            // A wrapper's status is its command's.
            Ok(Some(status)) => ExitCode::from(session::command::exit_code(status)),
            Ok(None) => ExitCode::SUCCESS,
            Err(e) => {
                // A session that failed before its stop leaves no control socket behind.
                session::Companion::stopped(&mut beside);
                eprintln!("gpuprofd: error: {e:#}");
                ExitCode::from(e.exit_code())
            }
        }
    })
}

/// gpuprofd(1) on stdout.
fn man() -> ExitCode {
    use clap::CommandFactory as _;
    let mut out = std::io::stdout().lock();
    match clap_mangen::Man::new(Cli::command()).render(&mut out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpuprofd man: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match &cli.command {
        Some(Command::Man) => return man(),
        Some(Command::Serve(a)) => return serve::serve(a),
        Some(Command::Ctl(a)) => return ctl::ctl(a),
        Some(Command::Top(a)) => return ctl::top(a),
        _ => {}
    }
    let verbose = cli.capture.verbose;
    init_logging(verbose);
    match &cli.command {
        Some(Command::Floor {
            lib,
            symbols,
            entry,
            program,
        }) => {
            return match crate::bench::floor(lib, symbols, *entry, program) {
                Ok(_) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("gpuprofd floor: {e}");
                    ExitCode::from(7)
                }
            };
        }
        Some(Command::BenchPipeline { events, capture }) => {
            return match crate::bench::pipeline(*events, capture.as_deref()) {
                Ok(v) => {
                    println!("events_per_s {v:.0}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("gpuprofd bench-pipeline: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Some(Command::Report(args)) => return ExitCode::from(report::run(args)),
        Some(Command::Export(args)) => return ExitCode::from(export::run(args)),
        _ => {}
    }
    if let Some(Command::Doctor {
        libs,
        no_system_libs,
        json,
        symbols,
        nvml_lib,
    }) = &cli.command
    {
        return ExitCode::from(crate::doctor::run(&crate::doctor::DoctorOptions {
            libs: libs.clone(),
            system_libs: !no_system_libs,
            json: *json,
            symbols: *symbols,
            nvml_lib: nvml_lib.clone(),
        }));
    }
    let per_process = cli.capture.metrics_per_process;
    let otlp = match otlp_settings(cli.capture.otlp.as_deref(), cli.capture.otlp_interval) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("gpuprofd: --otlp: {e}");
            return ExitCode::from(2);
        }
    };
    let (opts, metrics_addr) = match to_options(cli) {
        Ok(o) => o,
        Err(msg) => {
            eprintln!("gpuprofd: {msg}");
            return ExitCode::from(2);
        }
    };
    run_session(opts, None, metrics_addr, per_process, otlp)
}

/// `--otlp URL` and `--otlp-interval`: the service's `[otlp]` defaults otherwise.
fn otlp_settings(
    url: Option<&str>,
    interval: Duration,
) -> Result<Option<crate::output::otlp::Settings>, crate::output::otlp::OtlpError> {
    let Some(url) = url else {
        return Ok(None);
    };
    let d = crate::service::config::OtlpConfig::default();
    Ok(Some(crate::output::otlp::Settings {
        url: crate::output::otlp::metrics_url(url)?,
        interval,
        timeout: d.timeout.0.min(interval).max(Duration::from_secs(1)),
        headers: d.headers,
        resource: d.resource,
    }))
}

/// The capture the command line asks for, and the metrics address to serve beside it.
fn to_options(cli: Cli) -> Result<(CaptureOptions, Option<std::net::SocketAddr>), String> {
    if let Some(Command::Demo { fake_cuda, output }) = cli.command {
        let script = fake_cuda.join("demo.script");
        let workload = fake_cuda.join("bin/workload");
        for p in [&script, &workload] {
            if !p.exists() {
                return Err(format!(
                    "demo: \"{}\" is missing; build the fake CUDA libraries first: \
                     `cargo xtask run` does everything, or `tests/fakecuda/build.sh {}`",
                    p.display(),
                    fake_cuda.display()
                ));
            }
        }
        return Ok((
            CaptureOptions {
                target: Target::AllJobs,
                wait: false,
                duration: None,
                output,
                libs: vec![fake_cuda.join("lib")],
                system_libs: false,
                live: true,
                ring_bytes: crate::capture::DEFAULT_RING_BYTES,
                stack_period: 1,
                count_launches: None,
                launch_traps: cli.capture.launch_traps.resolve(&Target::AllJobs),
                launch_duty: None,
                verbose: cli.capture.verbose,
                command: vec![workload.display().to_string()],
                inject_lib: None,
                command_stdin: Some(script),
                run_as: None,
                cgroups: vec![],
                jobs: vec![],
                rescan: None,
                nvml: Some(session::NvmlOptions {
                    lib: None,
                    interval: Duration::from_secs(1),
                }),
                // A demo leaves the node's state alone.
                state_dir: None,
            },
            None,
        ));
    }
    let a = cli.capture;
    let target = match (a.all_jobs, a.pid) {
        (_, Some(pid)) => Target::Pid(pid),
        (true, None) => Target::AllJobs,
        (false, None) if !a.cgroups.is_empty() || !a.jobs.is_empty() => Target::AllJobs,
        (false, None) if !a.command.is_empty() => Target::Command,
        (false, None) => {
            return Err(
                "say what to capture: --all-jobs (every CUDA process), --pid PID (one \
                        running process), or `-- COMMAND` (run one); `gpuprofd demo` shows it \
                        working without a GPU. See `gpuprofd --help`."
                    .into(),
            );
        }
    };
    if !a.ring_buffer_mb.is_power_of_two() || a.ring_buffer_mb > 1024 {
        return Err(format!(
            "--ring-buffer-mb \"{}\": must be a power of two between 1 and 1024",
            a.ring_buffer_mb
        ));
    }
    let run_as = match (&a.user, a.command.is_empty()) {
        (_, true) => None,
        (Some(u), false) => Some(Account::named(u).map_err(|e| e.to_string())?),
        // SAFETY: geteuid cannot fail.
        (None, false) => {
            Account::sudo_invoker(unsafe { libc::geteuid() }, |k| std::env::var(k).ok())
                .map_err(|e| e.to_string())?
        }
    };
    let stack_period = a.stack_period.unwrap_or(match target {
        Target::AllJobs if a.command.is_empty() => crate::session::ALL_JOBS_STACK_PERIOD,
        _ => 1,
    });
    let count_launches = match a.count_launches {
        None => None,
        Some(_)
            if a.output
                .as_deref()
                .is_some_and(crate::store::is_capture_path) =>
        {
            return Err(
                "--count-launches cannot write a capture file: a capture keeps every call, and \
                 counted launches are only totals. Drop --count-launches (a record per launch), \
                 or write a JSON report (-o FILE.json) instead"
                    .into(),
            );
        }
        Some(d) if d < Duration::from_millis(10) || d > Duration::from_secs(60) => {
            return Err(format!(
                "--count-launches \"{}\": the read interval must be between 10ms and 60s",
                crate::service::config::Dur(d)
            ));
        }
        Some(d) => Some(d),
    };
    let launch_traps = a.launch_traps.resolve(&target);
    let launch_duty = match a.launch_duty {
        Some(d) if count_launches.is_none() => {
            return Err(format!(
                "--launch-duty {d} estimates launch totals from counts: it needs \
                 --count-launches (and no capture file)"
            ));
        }
        Some(d) if !matches!(target, Target::AllJobs) => {
            return Err(format!(
                "--launch-duty {d} samples the node's launches; --pid and a command capture \
                 every launch of their processes: drop --launch-duty"
            ));
        }
        d => d,
    };
    Ok((
        CaptureOptions {
            target,
            launch_traps,
            launch_duty,
            stack_period,
            count_launches,
            wait: a.wait,
            duration: a.duration,
            output: a.output,
            libs: a.libs,
            system_libs: !a.no_system_libs,
            live: !a.no_live,
            ring_bytes: a.ring_buffer_mb << 20,
            verbose: a.verbose,
            run_as,
            inject_lib: (!a.no_inject && !a.command.is_empty())
                .then(crate::sys::inject_lib::locate),
            command: a.command,
            command_stdin: None,
            cgroups: a.cgroups,
            jobs: a.jobs,
            rescan: a.rescan_interval,
            nvml: (!a.no_nvml).then_some(session::NvmlOptions {
                lib: a.nvml_lib,
                interval: a.nvml_interval,
            }),
            state_dir: state_dir(&a.state_dir, a.no_state),
        },
        a.metrics_addr,
    ))
}

/// `--launch-traps`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LaunchTrapsArg {
    Auto,
    One,
    Two,
}

impl LaunchTrapsArg {
    /// What `auto` means for this target: two probes for a running process picked by --pid
    /// (its runtime launches keep the names of their host stubs' symbols whatever the driver
    /// build), one for everything else.
    pub fn resolve(self, target: &Target) -> crate::attach::LaunchTraps {
        use crate::attach::LaunchTraps;
        match (self, target) {
            (LaunchTrapsArg::One, _) => LaunchTraps::One,
            (LaunchTrapsArg::Two, _) | (LaunchTrapsArg::Auto, Target::Pid(_)) => LaunchTraps::Two,
            (LaunchTrapsArg::Auto, _) => LaunchTraps::One,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needs_a_target() {
        let cli = Cli::try_parse_from(["gpuprofd"]).unwrap();
        assert!(to_options(cli).unwrap_err().contains("--all-jobs"));
        let cli = Cli::try_parse_from(["gpuprofd", "--pid", "42", "--duration", "1s"]).unwrap();
        let (o, _) = to_options(cli).unwrap();
        assert_eq!(o.target, Target::Pid(42));
        assert!(Cli::try_parse_from(["gpuprofd", "--all-jobs", "--pid", "1"]).is_err());
        assert!(Cli::try_parse_from(["gpuprofd", "--wait"]).is_err());
        let cli = Cli::try_parse_from(["gpuprofd", "--all-jobs", "--ring-buffer-mb", "3"]).unwrap();
        assert!(to_options(cli).unwrap_err().contains("power of two"));
    }

    #[test]
    fn a_command_alone_is_its_tree_and_runs_as_whom_it_should() {
        let opts = |args: &[&str]| to_options(Cli::try_parse_from(args).unwrap()).map(|o| o.0);
        let o = opts(&["gpuprofd", "--", "true"]).unwrap();
        assert_eq!(o.target, Target::Command);
        assert_eq!(o.command, ["true"]);
        let o = opts(&["gpuprofd", "--all-jobs", "--", "true"]).unwrap();
        assert_eq!(o.target, Target::AllJobs);
        let o = opts(&["gpuprofd", "--job", "1234", "--", "true"]).unwrap();
        assert_eq!(o.target, Target::AllJobs);
        let o = opts(&["gpuprofd", "--user", "0", "--", "true"]).unwrap();
        assert_eq!(o.run_as.map(|a| (a.uid, a.gid)), Some((0, 0)));
        let e = opts(&["gpuprofd", "--user", "no-such-user-gpuprofd", "--", "true"]).unwrap_err();
        assert!(e.contains("no such user"), "{e}");
        // --user names whom the command runs as: without a command it means nothing.
        assert!(Cli::try_parse_from(["gpuprofd", "--all-jobs", "--user", "0"]).is_err());
        assert!(Cli::try_parse_from(["gpuprofd", "--all-jobs", "--metrics-per-process"]).is_err());
    }
}
