//! Driver object layouts remembered across runs: the state file
//! (`<state dir>/driver-layouts.json`) that keeps each layout a session confirmed, per driver
//! build (GNU build id) and kind of handle, so that a later attach on the same node names the
//! handles made before it from its first launch.
//!
//! Why this is no guess: a layout confirmed by [`MIN_AGREEING`] agreeing samples and no
//! disagreeing one on one exact driver binary is a fact about that binary's code, and the build
//! id names the binary. It stays checkable: every calibration sample of a later session checks
//! it again, an agreeing one refreshes it and one that disagrees drops it, from memory and from
//! the file. A file that is not exactly what this module writes (corrupt, truncated, another
//! format, out of bounds) is ignored as a whole, with one warning, and rewritten at the next
//! change.
//!
//! Several daemons may share the file (a service and a one-shot run): a write reads the file
//! again and applies only this session's changes to it (its confirmations and refreshes, its
//! drops), so a layout another daemon dropped is not brought back by a refresh.

use super::{Chain, HandleKind, INNER_SCAN, MIN_AGREEING, OUTER_SCAN};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The file's name in the state directory.
pub const FILE_NAME: &str = "driver-layouts.json";
/// The state directory when neither `--state-dir` nor systemd's `$STATE_DIRECTORY` names one.
pub const DEFAULT_DIR: &str = "/var/lib/gpuprofd";
/// The format this module reads and writes (`format` field).
pub const FORMAT: &str = "gpuprofd.driver-layouts/1";
/// Driver builds kept (the least recently confirmed or refreshed go first).
pub const MAX_BUILDS: usize = 64;
/// Chains of one layout kept.
pub const MAX_CHAINS: usize = 16;
/// A larger file is not read.
pub const MAX_FILE: u64 = 256 << 10;

/// One remembered layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub chains: Vec<Chain>,
    /// Calibration samples that agreed with it, over every session.
    pub samples: u32,
    /// When it was first confirmed, and when a sample last agreed (Unix seconds).
    pub confirmed_unix_s: u64,
    pub refreshed_unix_s: u64,
}

/// The layouts of the file, by driver build id (lowercase hex) and kind of handle.
pub type Layouts = BTreeMap<(String, HandleKind), Entry>;

/// Why a state file was not taken.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("it is larger than {MAX_FILE} bytes")]
    TooLarge,
    #[error("it is not JSON of the expected shape ({0})")]
    Shape(#[source] serde_json::Error),
    #[error("its format is \"{0}\", not \"{FORMAT}\"")]
    Version(String),
    #[error("{0}")]
    Invalid(String),
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileV1 {
    format: String,
    layouts: Vec<EntryV1>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryV1 {
    build_id: String,
    kind: KindV1,
    chains: Vec<ChainV1>,
    samples: u32,
    confirmed_unix_s: u64,
    refreshed_unix_s: u64,
}

#[derive(Serialize, Deserialize, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum KindV1 {
    Function,
    Kernel,
}

/// `*(handle + outer)`, or `*(*(handle + outer) + inner)`.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChainV1 {
    outer: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    inner: Option<u16>,
}

/// Only the format field, read first so that another format is said as such.
#[derive(Deserialize)]
struct Head {
    format: String,
}

fn valid_build_id(id: &str) -> bool {
    (2..=128).contains(&id.len())
        && id.len().is_multiple_of(2)
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn chain_of(c: &ChainV1) -> Option<Chain> {
    let word = |o: u16, scan: usize| o.is_multiple_of(8) && usize::from(o) < scan;
    match c.inner {
        None => word(c.outer, OUTER_SCAN).then_some(Chain::Direct(c.outer)),
        Some(i) => (word(c.outer, OUTER_SCAN) && word(i, INNER_SCAN))
            .then_some(Chain::Indirect(c.outer, i)),
    }
}

/// The layouts in `bytes`; anything but a file this module would write is an error.
pub fn parse(bytes: &[u8]) -> Result<Layouts, FormatError> {
    if bytes.len() as u64 > MAX_FILE {
        return Err(FormatError::TooLarge);
    }
    let head: Head = serde_json::from_slice(bytes).map_err(FormatError::Shape)?;
    if head.format != FORMAT {
        let mut f = head.format;
        f.truncate(64);
        return Err(FormatError::Version(f.escape_debug().to_string()));
    }
    let file: FileV1 = serde_json::from_slice(bytes).map_err(FormatError::Shape)?;
    let bad = |what: String| Err(FormatError::Invalid(what));
    let mut out = Layouts::new();
    for (n, e) in file.layouts.into_iter().enumerate() {
        if !valid_build_id(&e.build_id) {
            return bad(format!(
                "layout {n}: the build id is not 1 to 64 bytes in lowercase hex"
            ));
        }
        if e.chains.is_empty() || e.chains.len() > MAX_CHAINS {
            return bad(format!("layout {n}: 1 to {MAX_CHAINS} chains expected"));
        }
        let mut chains = Vec::with_capacity(e.chains.len());
        for c in &e.chains {
            let Some(c) = chain_of(c) else {
                return bad(format!(
                    "layout {n}: a chain's offsets are not words within the scanned bytes"
                ));
            };
            if chains.contains(&c) {
                return bad(format!("layout {n}: a chain appears twice"));
            }
            chains.push(c);
        }
        if e.samples < MIN_AGREEING {
            return bad(format!(
                "layout {n}: {} samples, fewer than the {MIN_AGREEING} that confirm a layout",
                e.samples
            ));
        }
        let kind = match e.kind {
            KindV1::Function => HandleKind::Function,
            KindV1::Kernel => HandleKind::Kernel,
        };
        let entry = Entry {
            chains,
            samples: e.samples,
            confirmed_unix_s: e.confirmed_unix_s,
            refreshed_unix_s: e.refreshed_unix_s,
        };
        if out.insert((e.build_id, kind), entry).is_some() {
            return bad(format!(
                "layout {n}: a second layout for the same build and kind"
            ));
        }
    }
    if builds(&out).len() > MAX_BUILDS {
        return bad(format!("more than {MAX_BUILDS} driver builds"));
    }
    Ok(out)
}

fn builds(l: &Layouts) -> BTreeSet<&str> {
    l.keys().map(|(b, _)| b.as_str()).collect()
}

/// Keeps the [`MAX_BUILDS`] builds refreshed last.
pub fn bound(l: &mut Layouts) {
    let mut last: BTreeMap<String, u64> = BTreeMap::new();
    for ((b, _), e) in l.iter() {
        let t = last.entry(b.clone()).or_default();
        *t = (*t).max(e.refreshed_unix_s);
    }
    if last.len() <= MAX_BUILDS {
        return;
    }
    let mut by_age: Vec<(u64, String)> = last.into_iter().map(|(b, t)| (t, b)).collect();
    by_age.sort();
    let drop: BTreeSet<String> = by_age[..by_age.len() - MAX_BUILDS]
        .iter()
        .map(|(_, b)| b.clone())
        .collect();
    l.retain(|(b, _), _| !drop.contains(b));
}

/// The file's text for `l` (bounded first by the caller).
pub fn render(l: &Layouts) -> String {
    let file = FileV1 {
        format: FORMAT.to_owned(),
        layouts: l
            .iter()
            .map(|((b, k), e)| EntryV1 {
                build_id: b.clone(),
                kind: match k {
                    HandleKind::Function => KindV1::Function,
                    HandleKind::Kernel => KindV1::Kernel,
                },
                chains: e
                    .chains
                    .iter()
                    .map(|c| match *c {
                        Chain::Direct(o) => ChainV1 {
                            outer: o,
                            inner: None,
                        },
                        Chain::Indirect(o, i) => ChainV1 {
                            outer: o,
                            inner: Some(i),
                        },
                    })
                    .collect(),
                samples: e.samples,
                confirmed_unix_s: e.confirmed_unix_s,
                refreshed_unix_s: e.refreshed_unix_s,
            })
            .collect(),
    };
    let mut s = serde_json::to_string_pretty(&file).expect("plain data serialises");
    s.push('\n');
    s
}

fn now_unix_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// What this session changed about one layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    /// Confirmed by this session's own samples: written whatever the file says.
    Confirmed,
    /// A remembered layout some samples agreed with: written over the file's, if it is still
    /// there (another daemon may have dropped it).
    Refreshed,
    Dropped,
}

/// The session's view of the state file: what it read at start, and what it changed since.
#[derive(Debug, Default)]
pub struct Remembered {
    /// The file (`None`: no state, `--no-state`).
    path: Option<PathBuf>,
    layouts: Layouts,
    changes: BTreeMap<(String, HandleKind), Change>,
    /// Changes not written yet.
    unwritten: bool,
    /// A write failed and was said (later ones only at debug level).
    said_unwritable: bool,
}

impl Remembered {
    /// Nothing remembered, nothing written.
    pub fn none() -> Self {
        Self::default()
    }

    /// The state of directory `dir`: its file read now (a missing one is no layout; a bad one
    /// is said once and ignored).
    pub fn open(dir: &Path) -> Self {
        let path = dir.join(FILE_NAME);
        let layouts = match crate::sys::files::read_small(&path, MAX_FILE) {
            Ok(Some(bytes)) => parse(&bytes).unwrap_or_else(|e| {
                tracing::warn!(file = %path.display(), "the driver layouts file is ignored (it will be rewritten): {e}");
                Layouts::new()
            }),
            Ok(None) => {
                tracing::warn!(file = %path.display(), "the driver layouts file is ignored (it will be rewritten): {}", FormatError::TooLarge);
                Layouts::new()
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Layouts::new(),
            Err(e) => {
                tracing::warn!(file = %path.display(), "the driver layouts file is ignored (it will be rewritten): {e}");
                Layouts::new()
            }
        };
        if !layouts.is_empty() {
            tracing::debug!(file = %path.display(), layouts = layouts.len(), "driver layouts remembered");
        }
        Self {
            path: Some(path),
            layouts,
            changes: BTreeMap::new(),
            unwritten: false,
            said_unwritable: false,
        }
    }

    /// The remembered layout of `build`'s handles of `kind`.
    pub fn get(&self, build: &str, kind: HandleKind) -> Option<&Entry> {
        self.layouts.get(&(build.to_owned(), kind))
    }

    /// This session confirmed `chains` on `samples` samples of its own: remembered, written now.
    pub fn confirmed(&mut self, build: &str, kind: HandleKind, chains: &[Chain], samples: u32) {
        let now = now_unix_s();
        let key = (build.to_owned(), kind);
        let confirmed_unix_s = self.layouts.get(&key).map_or(now, |e| e.confirmed_unix_s);
        self.layouts.insert(
            key.clone(),
            Entry {
                chains: chains.to_vec(),
                samples,
                confirmed_unix_s,
                refreshed_unix_s: now,
            },
        );
        self.changes.insert(key, Change::Confirmed);
        self.unwritten = true;
        self.flush();
    }

    /// A sample agreed with a layout (now `chains`, agreed with by `samples` samples): the
    /// remembered one is refreshed at the next [`Self::flush`].
    pub fn agreed(&mut self, build: &str, kind: HandleKind, chains: &[Chain], samples: u32) {
        let key = (build.to_owned(), kind);
        let Some(e) = self.layouts.get_mut(&key) else {
            return;
        };
        e.chains = chains.to_vec();
        e.samples = samples;
        e.refreshed_unix_s = now_unix_s();
        self.changes.entry(key).or_insert(Change::Refreshed);
        self.unwritten = true;
    }

    /// A sample disagreed with `build`'s layout for `kind`: forgotten, and written now.
    /// Whether one was remembered.
    pub fn refuted(&mut self, build: &str, kind: HandleKind) -> bool {
        let key = (build.to_owned(), kind);
        let had = self.layouts.remove(&key).is_some();
        self.changes.insert(key, Change::Dropped);
        self.unwritten = true;
        self.flush();
        had
    }

    /// Writes the changes not written yet (the file read again, this session's changes applied
    /// to it, bounded, replaced at once).
    pub fn flush(&mut self) {
        if !std::mem::take(&mut self.unwritten) {
            return;
        }
        let Some(path) = self.path.clone() else {
            return;
        };
        let mut on_disk = match crate::sys::files::read_small(&path, MAX_FILE) {
            Ok(Some(b)) => parse(&b).unwrap_or_default(),
            _ => Layouts::new(),
        };
        for (key, change) in &self.changes {
            match (change, self.layouts.get(key)) {
                (Change::Dropped, _) => {
                    on_disk.remove(key);
                }
                (Change::Confirmed, Some(e)) => {
                    on_disk.insert(key.clone(), e.clone());
                }
                (Change::Refreshed, Some(e)) => {
                    if let Some(d) = on_disk.get_mut(key)
                        && e.chains.iter().all(|c| d.chains.contains(c))
                    {
                        *d = e.clone();
                    }
                }
                (_, None) => {}
            }
        }
        bound(&mut on_disk);
        if let Err(e) = write(&path, &render(&on_disk)) {
            if std::mem::replace(&mut self.said_unwritable, true) {
                tracing::debug!(file = %path.display(), "driver layouts not written: {e}");
            } else {
                tracing::warn!(file = %path.display(), "driver layouts not written (the next run learns them again): {e}");
            }
        }
    }
}

/// Creates the state directory (0750) when missing, then replaces the file.
fn write(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(dir)?;
    }
    crate::sys::files::replace_file(path, text.as_bytes())
}

impl Drop for Remembered {
    fn drop(&mut self) {
        self.flush();
    }
}

#[cfg(test)]
mod tests;
