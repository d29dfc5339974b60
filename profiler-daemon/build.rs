//! Builds the eBPF object (profiler-ebpf) with aya-build and leaves it in OUT_DIR for
//! `include_bytes_aligned!`. With `GPUPROFD_SKIP_EBPF=1` it writes an empty stub instead, so
//! `cargo check`/`clippy`/unit tests work without nightly and bpf-linker; a daemon built that way
//! refuses to capture and says how to build it properly.
use anyhow::{Context as _, anyhow};
use std::{env, fs, path::PathBuf};

fn main() -> anyhow::Result<()> {
    println!("cargo:rerun-if-env-changed=GPUPROFD_SKIP_EBPF");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").context("OUT_DIR not set")?);
    if env::var("GPUPROFD_SKIP_EBPF").is_ok_and(|v| v == "1") {
        fs::write(out_dir.join("profiler-ebpf"), []).context("writing the stub eBPF object")?;
        return Ok(());
    }
    // The eBPF crate sits next to this one.
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?);
    let root = manifest_dir
        .parent()
        .ok_or_else(|| anyhow!("no workspace root"))?
        .join("profiler-ebpf");
    let root_dir = root.to_string_lossy().into_owned();
    let pkg = aya_build::Package {
        name: "profiler-ebpf",
        root_dir: &root_dir,
        ..Default::default()
    };
    aya_build::build_ebpf([pkg], aya_build::Toolchain::default())
}
