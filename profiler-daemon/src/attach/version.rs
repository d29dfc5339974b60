//! A library's version as its file name says it (`libcuda.so.535.261.03`), for the report's
//! library list: kept apart from the attach itself, which only records it.

/// A library's version from its file name: what follows the SONAME's stem
/// (`libcuda.so.535.261.03` → `535.261.03`, `libcudart.so.12.4.127` → `12.4.127`). The name
/// is `display`'s, or, when that is only the SONAME (a symbolic link, as `libcuda.so.1`
/// usually is), the link's target as written in the link — read, never followed. `None` when
/// no name says more than the SONAME.
pub fn library_version(open_path: &std::path::Path, display: &str, soname: &str) -> Option<String> {
    let stem = soname.split(".so.").next()?.to_owned() + ".so.";
    let from = |name: &str| {
        let v = name.strip_prefix(&stem)?;
        let major = soname.strip_prefix(&stem).unwrap_or("");
        let numeric = v
            .split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        (numeric && v != major).then(|| v.to_owned())
    };
    let name = std::path::Path::new(display).file_name()?.to_str()?;
    from(name).or_else(|| {
        let target = std::fs::read_link(open_path).ok()?;
        from(target.file_name()?.to_str()?)
    })
}

#[cfg(test)]
mod tests {
    use super::library_version;
    use std::path::Path;

    #[test]
    fn versions_from_file_names_and_links() {
        let none = Path::new("/nonexistent");
        let v = |display: &str, soname: &str| library_version(none, display, soname);
        assert_eq!(
            v(
                "/usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03",
                "libcuda.so.1"
            )
            .as_deref(),
            Some("535.261.03")
        );
        assert_eq!(
            v("/opt/cuda/lib64/libcudart.so.12.4.127", "libcudart.so.12").as_deref(),
            Some("12.4.127")
        );
        assert_eq!(
            v(
                "/site-packages/nvidia/lib/libcudart.so.12",
                "libcudart.so.12"
            ),
            None
        );
        assert_eq!(v("/weird/libcuda.so.1.bak", "libcuda.so.1"), None);
        // A link named as the SONAME: its target's name, read from the link.
        let dir = std::env::temp_dir().join(format!("gpuprofd-ver-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let link = dir.join("libcuda.so.1");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("libcuda.so.550.54.15", &link).unwrap();
        assert_eq!(
            library_version(&link, "/usr/lib/libcuda.so.1", "libcuda.so.1").as_deref(),
            Some("550.54.15")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
