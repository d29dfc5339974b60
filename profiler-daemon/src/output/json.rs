//! The JSON form of [`Report`].

use crate::model::snapshot::Report;

/// The report as indented JSON (the `gpuprofd.report/1` contract).
pub fn to_string_pretty(report: &Report) -> String {
    // Plain structs, string keys, integers: serialisation cannot fail.
    serde_json::to_string_pretty(report).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// The report as one line of JSON.
pub fn to_string(report: &Report) -> String {
    serde_json::to_string(report).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// Writes the indented JSON and a final newline.
pub fn write_pretty<W: std::io::Write>(mut w: W, report: &Report) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut w, report)?;
    w.write_all(b"\n")
}
