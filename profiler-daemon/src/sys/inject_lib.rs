//! Where the installed injection library is (`libgpuprofd_inject.so`, the opt-in source of
//! exact GPU times: docs/GPU-TIME.md), and what gpuprofd puts in a command's environment so
//! that the CUDA driver loads it (`CUDA_INJECTION64_PATH`).
//!
//! The library ships beside the daemon: next to the binary in a build tree
//! (`target/release/`), in `../lib/` of the install kit, in `../lib/gpuprofd/` of the Debian
//! package; `GPUPROFD_INJECT_LIB` names another file.

use std::path::{Path, PathBuf};

/// The environment variable the CUDA driver reads at `cuInit`.
pub const CUDA_INJECTION_VAR: &str = "CUDA_INJECTION64_PATH";
/// The environment variable that names the library instead of the places beside the binary.
pub const OVERRIDE_VAR: &str = "GPUPROFD_INJECT_LIB";

/// Where the library was looked for and what was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Located {
    /// An existing file.
    Found(PathBuf),
    /// `GPUPROFD_INJECT_LIB` names a file that does not exist.
    OverrideMissing(PathBuf),
    /// None of the places beside the binary has it.
    NotInstalled(Vec<PathBuf>),
}

/// The places beside the binary `exe`, in the order they are tried.
pub fn candidates(exe: &Path) -> Vec<PathBuf> {
    let name = profiler_common::gpu::INJECT_SONAME;
    let Some(dir) = exe.parent() else {
        return Vec::new();
    };
    let mut v = vec![dir.join(name), dir.join("../lib").join(name)];
    v.push(dir.join("../lib/gpuprofd").join(name));
    v
}

/// Finds the library: `override_path` (from `GPUPROFD_INJECT_LIB`) if given, else the first
/// of [`candidates`] of `exe` that exists. Paths found are made absolute and clean (the
/// driver resolves them in the command's working directory).
pub fn locate_from(override_path: Option<PathBuf>, exe: &Path) -> Located {
    if let Some(p) = override_path {
        return match p.canonicalize() {
            Ok(c) if c.is_file() => Located::Found(c),
            _ => Located::OverrideMissing(p),
        };
    }
    let tried = candidates(exe);
    for c in &tried {
        if let Ok(p) = c.canonicalize()
            && p.is_file()
        {
            return Located::Found(p);
        }
    }
    Located::NotInstalled(tried)
}

/// [`locate_from`] for this process: `GPUPROFD_INJECT_LIB`, else beside the running binary.
pub fn locate() -> Located {
    let exe = std::env::current_exe().unwrap_or_default();
    locate_from(std::env::var_os(OVERRIDE_VAR).map(PathBuf::from), &exe)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh empty directory of this test's own.
    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("gpuprofd-inject-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn found_beside_the_binary_first_then_in_the_kit_and_package_places() {
        let dir = scratch("places");
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let exe = bin.join("gpuprofd");
        let name = profiler_common::gpu::INJECT_SONAME;
        assert!(matches!(locate_from(None, &exe), Located::NotInstalled(v) if v.len() == 3));
        // The Debian package's place.
        let pkg = dir.join("lib/gpuprofd");
        std::fs::create_dir_all(&pkg).unwrap();
        std::fs::write(pkg.join(name), b"").unwrap();
        let root = dir.canonicalize().unwrap();
        assert_eq!(
            locate_from(None, &exe),
            Located::Found(root.join("lib/gpuprofd").join(name))
        );
        // The kit's place wins over it, and the binary's own directory over both.
        std::fs::write(dir.join("lib").join(name), b"").unwrap();
        assert_eq!(
            locate_from(None, &exe),
            Located::Found(root.join("lib").join(name))
        );
        std::fs::write(bin.join(name), b"").unwrap();
        assert_eq!(
            locate_from(None, &exe),
            Located::Found(root.join("bin").join(name))
        );
    }

    #[test]
    fn an_override_is_taken_as_given_or_reported_missing() {
        let dir = scratch("override");
        let exe = dir.join("gpuprofd");
        let other = dir.join("elsewhere.so");
        assert_eq!(
            locate_from(Some(other.clone()), &exe),
            Located::OverrideMissing(other.clone())
        );
        std::fs::write(&other, b"").unwrap();
        std::fs::write(dir.join(profiler_common::gpu::INJECT_SONAME), b"").unwrap();
        assert_eq!(
            locate_from(Some(other.clone()), &exe),
            Located::Found(other.canonicalize().unwrap())
        );
    }
}
