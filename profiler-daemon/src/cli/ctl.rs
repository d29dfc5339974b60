//! `gpuprofd ctl …` and `gpuprofd top`: ask the running service through its control socket and
//! show the answer (status, processes, snapshot, reload; deep captures written to a file).

use super::report;
use crate::sys::duration::parse_duration;
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, Args)]
pub struct CtlArgs {
    /// The service's control socket.
    #[arg(long, default_value = "/run/gpuprofd.sock", value_name = "PATH")]
    pub socket: PathBuf,
    #[command(subcommand)]
    pub what: CtlCommand,
}

#[derive(Debug, Subcommand)]
pub enum CtlCommand {
    /// The daemon: version, uptime, probes, configuration, reloads, and who you are to it.
    Status,
    /// The processes it has seen (yours only, unless you are root or in control.group).
    Processes {
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// The live report as JSON (schema gpuprofd.report/1, as `--output FILE.json` writes).
    Snapshot,
    /// Re-read the configuration file (as `systemctl reload gpuprofd`).
    Reload,
    /// A deep capture of one process (yours, unless you are an admin) or one job (admins),
    /// written to FILE.gpuprof by this command, so the file is yours; Ctrl-C ends it early.
    /// `gpuprofd report FILE` reads it.
    Capture {
        /// The process to capture.
        #[arg(long, conflicts_with = "job", required_unless_present = "job")]
        pid: Option<u32>,
        /// The job to capture (Slurm job id, pod UID, container id, unit, or kind:id).
        #[arg(long)]
        job: Option<String>,
        /// How long (at most 24h).
        #[arg(long, default_value = "30s")]
        duration: String,
        /// The capture file to write (FILE.gpuprof).
        #[arg(long, short)]
        output: PathBuf,
    },
}

#[derive(Debug, Args)]
pub struct TopArgs {
    /// The service's control socket.
    #[arg(long, default_value = "/run/gpuprofd.sock", value_name = "PATH")]
    pub socket: PathBuf,
    /// Refresh period.
    #[arg(long, value_parser = parse_duration, default_value = "2s", value_name = "DURATION")]
    pub interval: Duration,
    /// Print one table and exit.
    #[arg(long)]
    pub once: bool,
}

pub(super) fn ctl(a: &CtlArgs) -> ExitCode {
    use crate::service::ctl::{Client, Request};
    let req = match &a.what {
        CtlCommand::Status => Request::Status,
        CtlCommand::Processes { .. } => Request::Processes,
        CtlCommand::Snapshot => Request::Snapshot,
        CtlCommand::Reload => Request::Reload,
        CtlCommand::Capture {
            pid,
            job,
            duration,
            output,
        } => {
            return deep_capture(
                &a.socket,
                Request::Capture {
                    pid: *pid,
                    job: job.clone(),
                    duration: duration.clone(),
                },
                output,
            );
        }
    };
    let answer = Client::connect(&a.socket).and_then(|mut c| c.call(&req));
    match answer {
        Ok(v) => {
            match a.what {
                CtlCommand::Processes { json: false } => print!("{}", processes_table(&v)),
                _ => println!(
                    "{}",
                    serde_json::to_string_pretty(&v).unwrap_or_else(|_| v.to_string())
                ),
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gpuprofd ctl: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// Set by SIGINT/SIGTERM while `ctl capture` runs.
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, std::sync::atomic::Ordering::Relaxed);
}

fn deep_capture(
    socket: &std::path::Path,
    req: crate::service::ctl::Request,
    out: &PathBuf,
) -> ExitCode {
    use crate::service::ctl::Client;
    if !crate::store::is_capture_path(out) {
        eprintln!(
            "gpuprofd ctl capture: \"{}\": name the file FILE.gpuprof (a deep capture is a capture file)",
            out.display()
        );
        return ExitCode::from(2);
    }
    let client = match Client::connect(socket) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("gpuprofd ctl capture: {e}");
            return ExitCode::from(e.exit_code());
        }
    };
    let file = match crate::sys::files::create_output(out) {
        Ok(f) => f,
        Err(e) => {
            eprintln!(
                "gpuprofd ctl capture: cannot write \"{}\": {e}; choose a writable path with -o",
                out.display()
            );
            return ExitCode::from(4);
        }
    };
    // Ctrl-C asks the daemon to end the capture; the call below keeps reading until it has.
    // SAFETY: the handler only stores to an atomic; no SA_RESTART, so a blocked read returns.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_interrupt as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
    }
    let mut w = std::io::BufWriter::new(file);
    let result = client.capture(
        &req,
        &mut w,
        |answer| {
            eprintln!(
                "gpuprofd ctl capture: capturing {} for {} s (capture {}); Ctrl-C ends it early",
                match (&answer["target"]["pid"], &answer["target"]["job"]) {
                    (serde_json::Value::Number(p), _) => format!("process {p}"),
                    (_, serde_json::Value::String(j)) => format!("job {j}"),
                    _ => "?".into(),
                },
                answer["duration_s"],
                answer["id"]
            )
        },
        &INTERRUPTED,
    );
    use std::io::Write;
    match result.and_then(|n| {
        w.flush()
            .map(|_| n)
            .map_err(|source| crate::service::ctl::ClientError::Io {
                path: out.display().to_string(),
                source,
            })
    }) {
        // The daemon ends every capture with an end frame; without one the file stops short
        // (the daemon ended it: this client read too slowly, or the daemon died).
        Ok(n) if crate::store::replay(out).map_or(true, |r| r.end.is_none()) => {
            eprintln!(
                "gpuprofd ctl capture: {} ({n} bytes) stops short of its end; `gpuprofd report \
                 {}` shows what it holds (see the daemon's log for why it ended)",
                out.display(),
                out.display()
            );
            ExitCode::from(report::EXIT_DAMAGED)
        }
        Ok(n) => {
            eprintln!(
                "gpuprofd ctl capture: {} written ({n} bytes); `gpuprofd report {}` shows it",
                out.display(),
                out.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            // Refused before the first byte: no file. Any later failure keeps what arrived.
            if matches!(e, crate::service::ctl::ClientError::Refused(_)) {
                let _ = std::fs::remove_file(out);
            }
            eprintln!("gpuprofd ctl capture: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

fn processes_table(v: &serde_json::Value) -> String {
    use crate::output::fmt::{Align, bytes, ms, table, truncate};
    let rows: Vec<crate::service::ctl::ProcessRow> =
        serde_json::from_value(v.clone()).unwrap_or_default();
    if rows.is_empty() {
        return "no CUDA process seen (that you may see)\n".into();
    }
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.pid.to_string(),
                truncate(&r.comm, 15),
                truncate(r.job.as_deref().unwrap_or("-"), 24),
                r.owner.map(|u| u.to_string()).unwrap_or_else(|| "?".into()),
                r.launches.to_string(),
                bytes(r.copy_bytes),
                ms(r.blocked_ns),
                if r.exited { "exited" } else { "running" }.into(),
            ]
        })
        .collect();
    table(
        "",
        &[
            "PID", "COMM", "JOB", "UID", "LAUNCHES", "COPIED", "BLOCKED", "STATE",
        ],
        &[
            Align::Right,
            Align::Left,
            Align::Left,
            Align::Right,
            Align::Right,
            Align::Right,
            Align::Right,
            Align::Left,
        ],
        &body,
    )
}

pub(super) fn top(a: &TopArgs) -> ExitCode {
    use crate::service::ctl::{Client, Request};
    let mut client = match Client::connect(&a.socket) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("gpuprofd top: {e}");
            return ExitCode::from(e.exit_code());
        }
    };
    loop {
        let report = client.call(&Request::Snapshot).and_then(|v| {
            serde_json::from_value::<crate::model::snapshot::Report>(v)
                .map_err(|e| crate::service::ctl::ClientError::Protocol(e.to_string()))
        });
        match report {
            Ok(r) => {
                if !a.once {
                    // Clear the screen and home the cursor, like top(1).
                    print!("\x1b[2J\x1b[H");
                }
                print!("{}", crate::output::table::render(&r));
                use std::io::Write;
                let _ = std::io::stdout().flush();
            }
            Err(e) => {
                eprintln!("gpuprofd top: {e}");
                return ExitCode::from(e.exit_code());
            }
        }
        if a.once {
            return ExitCode::SUCCESS;
        }
        std::thread::sleep(a.interval);
    }
}
