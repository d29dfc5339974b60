//! `gpuprofd export FILE`: a capture file as a timeline trace (Chrome JSON or Perfetto's
//! protobuf), written to a file; the trace itself is built in [`crate::output::trace`].
use crate::output::trace::{
    ChromeSink, ExportArgs, ExportFormat, Summary, TraceError, perfetto, trace,
};

/// Runs `gpuprofd export`; the exit code (as `report`'s).
pub fn run(a: &ExportArgs) -> u8 {
    if let (Some(f), Some(t)) = (a.from, a.to)
        && f >= t
    {
        eprintln!("gpuprofd export: --from {f} is not before --to {t}");
        return 2;
    }
    let named_perfetto = a
        .output
        .extension()
        .is_some_and(|e| e == "pftrace" || e == "perfetto-trace");
    let format = a.format.unwrap_or(if named_perfetto {
        ExportFormat::Perfetto
    } else {
        ExportFormat::Chrome
    });
    let limit = a.format.is_none().then_some(a.json_limit);
    let mut result = write(a, &a.output, format, limit);
    let mut path = a.output.clone();
    if matches!(result, Err(Failure::Trace(TraceError::OverLimit))) {
        let _ = std::fs::remove_file(&a.output);
        path = a.output.with_extension("pftrace");
        eprintln!(
            "gpuprofd export: the JSON trace would pass {} (more than a browser loads): writing \
             Perfetto's protobuf format to {} instead (open it in ui.perfetto.dev; --format \
             chrome forces JSON, --from/--to narrow the window)",
            crate::output::fmt::bytes(a.json_limit),
            path.display()
        );
        result = write(a, &path, ExportFormat::Perfetto, None);
    }
    match result {
        Ok(s) => {
            if let Some(w) = &s.warning {
                eprintln!("gpuprofd export: warning: {w}");
            }
            eprintln!(
                "gpuprofd export: {} events of {} processes written to {}",
                s.events,
                s.processes,
                path.display()
            );
            if s.damaged {
                super::report::EXIT_DAMAGED
            } else {
                0
            }
        }
        Err(f) => {
            let (code, e) = f.exit(&path);
            eprintln!("gpuprofd export: {e}");
            code
        }
    }
}

/// Why an export of a trace to a file failed.
enum Failure {
    /// The output file could not be created.
    Create(std::io::Error),
    Trace(TraceError),
}

impl Failure {
    /// The exit code and what to say, for the output at `path`.
    fn exit(self, path: &std::path::Path) -> (u8, String) {
        let path = path.display();
        match self {
            Failure::Create(e) => (4, format!("cannot write \"{path}\": {e}")),
            Failure::Trace(e @ TraceError::Write(_)) => {
                (4, format!("cannot write \"{path}\": {e}"))
            }
            Failure::Trace(e @ TraceError::OverLimit) => (4, e.to_string()),
            Failure::Trace(e @ TraceError::Read(_)) => {
                (super::report::EXIT_UNREADABLE, e.to_string())
            }
        }
    }
}

/// Writes the trace of `a.file` to `path` in `format`.
fn write(
    a: &ExportArgs,
    path: &std::path::Path,
    format: ExportFormat,
    json_limit: Option<u64>,
) -> Result<Summary, Failure> {
    let file = crate::sys::files::create_output(path).map_err(Failure::Create)?;
    let out = std::io::BufWriter::new(file);
    let s = match format {
        ExportFormat::Chrome => {
            let mut sink = ChromeSink::new(out);
            sink.limit = json_limit;
            trace(&a.file, &mut sink, a.from, a.to)
        }
        ExportFormat::Perfetto => {
            trace(&a.file, &mut perfetto::PerfettoSink::new(out), a.from, a.to)
        }
    };
    s.map_err(Failure::Trace)
}

#[cfg(test)]
mod golden;
