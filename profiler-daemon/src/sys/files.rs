//! Files the daemon writes for users (reports, capture files, traces, pages) and for itself (its
//! state): created without following a symbolic link, with a mode that keeps them from other
//! users.
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

/// Replaces the file at `p` with `bytes` all at once: written to a new temporary file beside
/// it (`O_EXCL`, mode 0640, never through a link) and renamed over `p`, so a reader sees the
/// old file or the new one, never a part; a link at `p` is replaced, not followed.
pub fn replace_file(p: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let name = p
        .file_name()
        .ok_or_else(|| std::io::Error::other("no file name"))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = p.with_file_name(tmp_name);
    let _ = std::fs::remove_file(&tmp);
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o640)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .map_err(refused_link)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, p)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Reads the file at `p`, without following a link at its path, when it holds at most `max`
/// bytes (`Ok(None)`: it is larger).
pub fn read_small(p: &Path, max: u64) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(p)
        .map_err(refused_link)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("it is not a regular file"));
    }
    let mut out = Vec::new();
    f.take(max + 1).read_to_end(&mut out)?;
    Ok((out.len() as u64 <= max).then_some(out))
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
    #[test]
    fn a_replaced_file_is_whole_and_a_link_is_replaced_not_followed() {
        let d = scratch("replace");
        let target = d.join("victim");
        std::fs::write(&target, b"keep me").unwrap();
        let p = d.join("state.json");
        std::os::unix::fs::symlink(&target, &p).unwrap();
        replace_file(&p, b"new").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
        assert_eq!(read_small(&p, 3).unwrap(), Some(b"new".to_vec()));
        assert_eq!(read_small(&p, 2).unwrap(), None);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & !0o640, 0, "{mode:o}");
        assert_eq!(
            std::fs::read_dir(&d).unwrap().count(),
            2,
            "no temporary file left"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_small_read_refuses_a_link() {
        let d = scratch("readlink");
        let target = d.join("victim");
        std::fs::write(&target, b"secret").unwrap();
        let p = d.join("state.json");
        std::os::unix::fs::symlink(&target, &p).unwrap();
        let e = read_small(&p, 100).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
