//! Rebuild when bpf-linker changes (it is the linker for this target), as aya's template does.
fn main() {
    if let Ok(p) = which::which("bpf-linker") {
        println!("cargo:rerun-if-changed={}", p.display());
    }
}
