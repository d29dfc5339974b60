//! The `gpuprofd` binary: everything lives in the library; this only maps the outcome to an exit code.
fn main() -> std::process::ExitCode {
    gpuprofd::sys::heap::limit_arenas();
    gpuprofd::cli::main()
}
