//! The library's SONAME: the CUDA driver dlopens it by path (`CUDA_INJECTION64_PATH`), and
//! gpuprofd's discovery recognises it in a process's maps by this name.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libgpuprofd_inject.so");
}
