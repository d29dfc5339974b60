//! Command line: parse, pick the mode, map errors to exit codes.
pub fn main() -> std::process::ExitCode {
    std::process::ExitCode::SUCCESS
}
