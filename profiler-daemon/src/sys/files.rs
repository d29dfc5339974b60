//! Files the daemon writes for users (reports, capture files, traces, pages): created without
//! following a symbolic link, with a mode that keeps them from other users.
use std::fs::File;
use std::path::Path;

/// Creates (or truncates) the report file without following a symlink at its path: the daemon
/// runs as root, and a link planted in a shared directory must not make it overwrite another
/// file. New files get mode 0640.
pub fn create_output(p: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o640)
        .custom_flags(libc::O_NOFOLLOW)
        .open(p)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                std::io::Error::other(
                    "it is a symbolic link, and gpuprofd does not write through one",
                )
            } else {
                e
            }
        })
}
