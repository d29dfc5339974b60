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
        .map_err(refused_link)
}

/// `O_NOFOLLOW`'s ELOOP, said in words.
fn refused_link(e: std::io::Error) -> std::io::Error {
    if e.raw_os_error() == Some(libc::ELOOP) {
        std::io::Error::other("it is a symbolic link, and gpuprofd does not write through one")
    } else {
        e
    }
}

/// A capture's output file, opened before anything is attached so that an unwritable path fails
/// first, but not emptied until the capture really starts ([`EarlyOutput::keep`]). A run that
/// fails before then leaves the path as it found it: a file it created is removed again (no
/// 0-byte file behind a run that captured nothing), a file that was there is not truncated.
#[derive(Debug)]
pub struct EarlyOutput {
    file: Option<File>,
    path: std::path::PathBuf,
    created: bool,
}

impl EarlyOutput {
    /// Opens `p` for writing as [`create_output`] does, without truncating it yet.
    pub fn open(p: &Path) -> std::io::Result<EarlyOutput> {
        use std::os::unix::fs::OpenOptionsExt;
        let open = |new: bool| {
            let mut o = std::fs::OpenOptions::new();
            o.write(true).mode(0o640).custom_flags(libc::O_NOFOLLOW);
            if new {
                o.create_new(true);
            }
            o.open(p)
        };
        // O_EXCL: a file of our own (never a link's target), or the one already there.
        let (file, created) = match open(true) {
            Ok(f) => (f, true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                (open(false).map_err(refused_link)?, false)
            }
            Err(e) => return Err(refused_link(e)),
        };
        Ok(EarlyOutput {
            file: Some(file),
            path: p.to_path_buf(),
            created,
        })
    }

    /// The capture has started: the file is emptied and handed over for good, with whether
    /// this run created it.
    pub fn keep(mut self) -> std::io::Result<(File, bool)> {
        let f = self.file.take().expect("kept once");
        f.set_len(0)?;
        Ok((f, self.created))
    }
}

impl Drop for EarlyOutput {
    fn drop(&mut self) {
        if self.file.take().is_some() && self.created {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("gpuprofd-files-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_new_file_dropped_before_the_capture_starts_is_removed() {
        let d = scratch("new");
        let p = d.join("run.gpuprof");
        drop(EarlyOutput::open(&p).unwrap());
        assert!(!p.exists());
        let (kept, created) = EarlyOutput::open(&p).unwrap().keep().unwrap();
        drop(kept);
        assert!(created);
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 0);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn an_existing_file_is_left_whole_until_kept() {
        let d = scratch("old");
        let p = d.join("report.json");
        std::fs::write(&p, b"earlier results").unwrap();
        drop(EarlyOutput::open(&p).unwrap());
        assert_eq!(std::fs::read(&p).unwrap(), b"earlier results");
        let (kept, created) = EarlyOutput::open(&p).unwrap().keep().unwrap();
        drop(kept);
        assert!(!created);
        assert_eq!(std::fs::read(&p).unwrap(), b"");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_symbolic_link_is_refused_and_not_followed() {
        let d = scratch("link");
        let target = d.join("victim");
        std::fs::write(&target, b"keep me").unwrap();
        let p = d.join("out.json");
        std::os::unix::fs::symlink(&target, &p).unwrap();
        let e = EarlyOutput::open(&p).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
