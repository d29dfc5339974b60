//! The capture file (`.gpuprof`): everything the aggregator was told, in order, so that
//! `gpuprofd report FILE` rebuilds the very report the daemon printed, and later views (timeline,
//! steps) can go back to each call.
//!
//! Layout: the 8-byte magic `GPUPROF\0`, the schema version (`u32` LE), then frames until the end
//! of the file. A frame is its payload's length (`u32` LE), the payload's CRC-32 (`u32` LE) and the
//! payload: one [`Frame`], bincode-encoded (varint integers). The first frame is the
//! [`FileHeader`]; the last one, when the daemon stopped cleanly, is [`Frame::End`].
//!
//! Calls are stored as the probes wrote them (the wire records of `profiler_common`, in
//! [`Frame::Records`] runs), interleaved with what the daemon learnt about processes at the
//! moment it learnt it ([`Frame::Process`], [`Frame::Retire`], ...). Replaying the frames into a
//! fresh aggregator (`crate::model::Aggregator`) is therefore the same sequence of calls the
//! live aggregator saw.
//!
//! The writer buffers and flushes at least once a second (the daemon's tick), so a daemon that
//! is killed loses at most the last second; the reader recovers every whole frame before the
//! first damaged one and says where it stopped. Nothing is fsync'ed: a daemon crash loses
//! nothing that was flushed, a machine crash may lose what the page cache held.

use crate::api::ApiInfo;
use crate::enrich::jobs::Job;
use bincode::Options as _;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// The first bytes of every capture file.
pub const MAGIC: &[u8; 8] = b"GPUPROF\0";
/// The schema this version writes, and the newest it reads. Every older schema is read too.
///
/// * 1: the first.
/// * 2: records may be of kind `EXEC` (a process replaced its program), followed by a `Retire`
///   frame. A schema-1 reader would count them as damage: it refuses the file instead.
/// * 3: a `Libraries` frame names the CUDA libraries attached (path, SONAME, version, build
///   id), written at the start and whenever one is added.
/// * 4: a `Faults` frame (the probes' rare paths) just before `End`. A schema-3 reader would
///   count it as damage and lose the `End` behind it: it refuses the file instead.
/// * 5: copy records may be memsets (direction `dir::MEMSET`, 7). A schema-4 reader would read
///   them without complaint and report every memset as a copy of `unknown` direction, a wrong
///   figure with no warning: it refuses the file instead. (The record layout is unchanged, so
///   schema 1–4 files read as before.)
/// * 6: an `NvmlGpm` frame after an NVML round's (GPM figures). A schema-5 reader would count
///   it as damage and lose everything behind it: it refuses the file instead.
/// * 7: records may be of kind `NCCL` (NCCL calls), and the API table may hold functions of
///   the `nccl` layer. A schema-6 reader could not read that table (an enum value it lacks):
///   it refuses the file instead. (Schema 1–6 files read as before.)
/// * 8: records may be of kinds `GPU_ACTIVITY`, `GPU_NAME` and `GPU_STATE` (the injection
///   library's CUPTI records), the API table may hold functions of the `inject` layer, and a
///   `GpuEnv` frame may follow a process's `Process` frame (which NVML GPU its CUDA devices
///   are). A schema-7 reader could not read that table and would count the frame as damage:
///   it refuses the file instead. (Schema 1–7 files read as before.)
/// * 9: a `Tids` frame may follow a process's `Process` frame (how CUPTI's thread ids of the
///   process map to the kernel's, for the join of GPU records to launches), and `GPU_ACTIVITY`
///   batches may hold launch call entries (`activity::API`). A schema-8 reader would count the
///   frame as damage: it refuses the file instead. Files without the frame join nothing
///   (`thread_not_mapped`).
/// * 10: `Clock` frames (the wall clock read against CLOCK_MONOTONIC) after the header and
///   just before `End`, to align captures of several nodes (`report A B …`). A schema-9 reader
///   would count the frame as damage and lose the `End` behind it: it refuses the file instead.
///   Files without them are aligned by the header's pair alone.
/// * 11: an `NvmlMig` frame after an NVML round's where a GPU is in MIG mode (each process's
///   MIG instance, each GPU's instances). A schema-10 reader would count it as damage and
///   lose everything behind it: it refuses the file instead. Files without it place no
///   process on a MIG instance.
pub const SCHEMA_VERSION: u32 = 11;
/// The largest frame a reader accepts: a damaged length must not make it allocate gigabytes.
pub const MAX_FRAME: u32 = 64 << 20;
/// Record bytes gathered before they go out as one frame (between flushes).
const RECORDS_FRAME_BYTES: usize = 1 << 20;

/// Where and when the capture was taken.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileHeader {
    /// The gpuprofd version that wrote the file.
    pub writer: String,
    pub host: String,
    /// `uname -r` of the captured machine.
    pub kernel: String,
    /// Wall clock at the start (ns since the Unix epoch).
    pub started_at_unix_ns: u64,
    /// CLOCK_MONOTONIC at the same moment: a record's `ts_ns` minus this, plus
    /// `started_at_unix_ns`, is its wall-clock time.
    pub started_at_monotonic_ns: u64,
    /// What was captured, as the daemon described it (`all jobs`, `pid 4242`, ...).
    pub target: String,
}

/// A job, as stored (the report's [`Job`] skips absent fields, which a non-self-describing
/// encoding cannot do).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredJob {
    pub kind: String,
    pub id: String,
    pub step: Option<String>,
    pub container: Option<String>,
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub cgroup: String,
}

impl From<&Job> for StoredJob {
    fn from(j: &Job) -> Self {
        StoredJob {
            kind: j.kind.clone(),
            id: j.id.clone(),
            step: j.step.clone(),
            container: j.container.clone(),
            name: j.name.clone(),
            namespace: j.namespace.clone(),
            cgroup: j.cgroup.clone(),
        }
    }
}

impl From<StoredJob> for Job {
    fn from(j: StoredJob) -> Self {
        Job {
            kind: j.kind,
            id: j.id,
            step: j.step,
            container: j.container,
            name: j.name,
            namespace: j.namespace,
            cgroup: j.cgroup,
        }
    }
}

/// What procfs said about a process when it was first seen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredProcess {
    pub comm: String,
    pub cmdline: String,
    pub exited: bool,
    pub job: Option<StoredJob>,
    pub start_time: u64,
}

impl From<&crate::model::ProcessMeta> for StoredProcess {
    fn from(m: &crate::model::ProcessMeta) -> Self {
        StoredProcess {
            comm: m.comm.clone(),
            cmdline: m.cmdline.clone(),
            exited: m.exited,
            job: m.job.as_ref().map(Into::into),
            start_time: m.start_time,
        }
    }
}

/// How the capture ended (only a cleanly stopped daemon writes it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct End {
    pub duration_ns: u64,
    pub drops: BTreeMap<String, u64>,
    pub submitted: BTreeMap<String, u64>,
    pub stop_reason: String,
}

/// One unit of the file. New variants go at the end (bincode numbers them in order).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Frame {
    Header(FileHeader),
    /// The whole API table (record `api` ids index it); written again whenever it grows.
    Api(Vec<ApiInfo>),
    /// Wire records, each prefixed by its length (`u32` LE), in ring-buffer order. (Encoded as
    /// one byte string: the same bytes on disk as a sequence of u8, written with one copy.)
    Records(#[serde(with = "serde_bytes")] Vec<u8>),
    /// A process's first record follows: what procfs said about it.
    Process {
        tgid: u32,
        process: StoredProcess,
    },
    /// `tgid` now belongs to a new process; the old one's figures are set aside.
    Retire {
        tgid: u32,
    },
    /// The process is gone (seen missing from procfs).
    Exited {
        tgid: u32,
    },
    /// A live process's job, re-read at the end.
    Job {
        tgid: u32,
        job: StoredJob,
    },
    /// Host-stub addresses named from the processes' ELF symbol tables: `(tgid, address,
    /// mangled name)`.
    Symbols(Vec<(u32, u64, String)>),
    End(End),
    /// One NVML sampling round.
    Nvml(crate::nvml::Sample),
    /// NVML sampling stopped (or never started): why.
    NvmlStopped(String),
    /// NVML sampling was not asked for.
    NvmlOff,
    /// The device health of the NVML round just before (throttling, PCIe, ECC, XID events).
    NvmlHealth(crate::nvml::Health),
    /// Names of stack frames, written before the first stack record that needs them.
    StackSyms(Vec<crate::enrich::stacks::StackSym>),
    /// Every CUDA library attached so far (the whole list each time it grows).
    Libraries(Vec<crate::model::snapshot::LibraryReport>),
    /// The probes' rare paths at the end (`profiler_common::fault`), written just before
    /// [`Frame::End`]. Files from before it have none.
    Faults(BTreeMap<String, u64>),
    /// The GPM figures of the NVML round just before (schema 6).
    NvmlGpm(crate::nvml::gpm::Gpm),
    /// The environment that numbers the CUDA devices of the process whose [`Frame::Process`]
    /// came just before (schema 8).
    GpuEnv {
        tgid: u32,
        env: crate::enrich::gpu_env::GpuEnv,
    },
    /// How CUPTI's thread ids of process `tgid` map to the kernel's (schema 9).
    Tids {
        tgid: u32,
        tids: crate::model::gpu_join::Tids,
    },
    /// The wall clock against CLOCK_MONOTONIC now (schema 10): one after the header, one just
    /// before [`Frame::End`].
    Clock(crate::sys::clock::WallPair),
    /// What the NVML round just before said of MIG (schema 11; written only where a GPU is in
    /// MIG mode): each process's instance, each GPU's instances.
    NvmlMig(crate::nvml::MigRound),
}

fn codec() -> impl bincode::Options {
    bincode::DefaultOptions::new()
        .with_varint_encoding()
        .with_limit(u64::from(MAX_FRAME))
}

/// What can go wrong opening a capture file (reading stops at damage; see [`Recovery`]).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot read \"{path}\": {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "\"{path}\" is not a gpuprofd capture file (it does not start with GPUPROF). A JSON \
         report is read with any JSON tool; captures are written with --output FILE.gpuprof"
    )]
    NotACapture { path: String },
    #[error(
        "\"{path}\" was written by a newer gpuprofd (capture schema {found}; this gpuprofd reads \
         schema {SCHEMA_VERSION} and older). Read it with the gpuprofd version that wrote it, or \
         upgrade this one"
    )]
    NewerSchema { path: String, found: u32 },
    #[error(
        "\"{path}\" holds no capture header: {reason}. The file was cut off or damaged before \
         anything was recorded"
    )]
    NoHeader { path: String, reason: String },
}

/// The file writer, owned by the aggregator task.
pub struct Writer {
    out: BufWriter<Box<dyn Write + Send>>,
    path: PathBuf,
    pending: Vec<u8>,
    /// The first write error; after it the writer stops writing (the capture goes on).
    failed: Option<String>,
    pub frames: u64,
    pub records: u64,
}

impl Writer {
    /// Starts a capture file in `file` (already created, empty) with its header.
    pub fn new(file: File, path: &Path, header: FileHeader) -> Writer {
        Writer::to_sink(Box::new(file), path, header)
    }

    /// A capture written to any byte sink (`label` names it in messages): the control socket's
    /// deep captures stream to their client this way.
    pub fn to_sink(sink: Box<dyn Write + Send>, label: &Path, header: FileHeader) -> Writer {
        let mut w = Writer {
            out: BufWriter::with_capacity(256 << 10, sink),
            path: label.to_owned(),
            pending: Vec::new(),
            failed: None,
            frames: 0,
            records: 0,
        };
        let mut start = MAGIC.to_vec();
        start.extend_from_slice(&SCHEMA_VERSION.to_le_bytes());
        let r = w.out.write_all(&start);
        w.check(r);
        w.frame(&Frame::Header(header));
        w
    }

    /// A [`Frame::Clock`] read now (after the header and before the end).
    pub fn clock(&mut self) {
        self.frame(&Frame::Clock(crate::sys::clock::wall_pair()));
    }

    /// One wire record, in ring order.
    pub fn record(&mut self, rec: &[u8]) {
        self.pending
            .extend_from_slice(&(rec.len() as u32).to_le_bytes());
        self.pending.extend_from_slice(rec);
        self.records += 1;
        if self.pending.len() >= RECORDS_FRAME_BYTES {
            self.flush_records();
        }
    }

    /// A frame other than records; records gathered so far go first, keeping the order.
    pub fn frame(&mut self, f: &Frame) {
        self.flush_records();
        self.write_frame(f);
    }

    /// Everything so far reaches the file (called every second and at the end).
    pub fn flush(&mut self) {
        self.flush_records();
        let r = self.out.flush();
        self.check(r);
    }

    /// The first write error, if writing stopped.
    pub fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn flush_records(&mut self) {
        if !self.pending.is_empty() {
            let bytes = std::mem::take(&mut self.pending);
            self.write_frame(&Frame::Records(bytes));
        }
    }

    fn write_frame(&mut self, f: &Frame) {
        if self.failed.is_some() {
            return;
        }
        // The codec's limit is the reader's: a frame the reader would refuse is never written.
        let payload = match codec().serialize(f) {
            Ok(p) => p,
            Err(e) => {
                self.failed = Some(format!("encoding a frame: {e}"));
                tracing::error!(
                    file = %self.path.display(),
                    error = %e,
                    "the capture file stops here: encoding a frame failed"
                );
                return;
            }
        };
        let mut head = [0u8; 8];
        head[..4].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        head[4..].copy_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        let r = self
            .out
            .write_all(&head)
            .and_then(|_| self.out.write_all(&payload));
        self.check(r);
        self.frames += 1;
    }

    fn check(&mut self, r: std::io::Result<()>) {
        if let Err(e) = r
            && self.failed.is_none()
        {
            self.failed = Some(e.to_string());
            tracing::error!(
                file = %self.path.display(),
                error = %e,
                "writing the capture file failed; the capture goes on in memory and the \
                 end-of-run report is still printed, but the file stops here"
            );
        }
    }
}

/// Reads frames one at a time; stops at the end or at the first damaged frame.
pub struct Reader {
    input: BufReader<File>,
    pub path: String,
    /// Bytes consumed so far (magic, version and whole frames).
    pub offset: u64,
    pub frames: u64,
    /// Why reading stopped before the end of the file, once it has.
    pub damage: Option<String>,
    /// The frame being read (kept from frame to frame: a fresh megabyte a frame costs the
    /// allocator more than reading it).
    buf: Vec<u8>,
    /// Whether [`Frame::Records`] frames come with their records (see `without_records`).
    records: bool,
}

impl Reader {
    pub fn open(path: &Path) -> Result<Reader, StoreError> {
        let shown = path.display().to_string();
        let io = |source| StoreError::Io {
            path: shown.clone(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let mut input = BufReader::with_capacity(1 << 20, file);
        let mut start = [0u8; 12];
        let n = read_full(&mut input, &mut start).map_err(io)?;
        if n < 8 || &start[..8] != MAGIC {
            return Err(StoreError::NotACapture { path: shown });
        }
        if n < 12 {
            return Err(StoreError::NoHeader {
                path: shown,
                reason: "the file ends inside its schema version".into(),
            });
        }
        let found = u32::from_le_bytes(start[8..12].try_into().unwrap());
        if found > SCHEMA_VERSION {
            return Err(StoreError::NewerSchema { path: shown, found });
        }
        Ok(Reader {
            input,
            path: shown,
            offset: 12,
            frames: 0,
            damage: None,
            buf: Vec::new(),
            records: true,
        })
    }

    /// This reader, returning [`Frame::Records`] frames empty (still read and checked): for a
    /// pass that looks only at the other frames, saving a copy of every record.
    pub fn without_records(mut self) -> Reader {
        self.records = false;
        self
    }

    /// The next whole frame; `None` at the end of the file or at damage (see `damage`).
    pub fn next_frame(&mut self) -> Option<Frame> {
        if self.damage.is_some() {
            return None;
        }
        match self.read_frame() {
            Ok(f) => f,
            Err(why) => {
                self.damage = Some(why);
                None
            }
        }
    }

    fn read_frame(&mut self) -> Result<Option<Frame>, String> {
        let at = self.offset;
        let mut head = [0u8; 8];
        let n = read_full(&mut self.input, &mut head).map_err(|e| format!("read error: {e}"))?;
        if n == 0 {
            return Ok(None);
        }
        if n < 8 {
            return Err(format!(
                "the file ends inside the frame header at byte {at}"
            ));
        }
        let len = u32::from_le_bytes(head[..4].try_into().unwrap());
        let crc = u32::from_le_bytes(head[4..].try_into().unwrap());
        if len > MAX_FRAME {
            return Err(format!(
                "the frame at byte {at} claims {len} bytes (more than the {MAX_FRAME} a frame \
                 may hold): damaged"
            ));
        }
        let payload = &mut self.buf;
        payload.clear();
        payload.resize(len as usize, 0);
        let got = read_full(&mut self.input, payload).map_err(|e| format!("read error: {e}"))?;
        if got < payload.len() {
            return Err(format!(
                "the file ends inside the frame at byte {at} ({got} of its {len} bytes are there)"
            ));
        }
        if crc32fast::hash(payload) != crc {
            return Err(format!(
                "the frame at byte {at} fails its checksum: damaged"
            ));
        }
        // How a records frame starts (its variant), as the codec writes it.
        static RECORDS_TAG: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
        let tag = RECORDS_TAG.get_or_init(|| {
            let mut t = codec()
                .serialize(&Frame::Records(Vec::new()))
                .unwrap_or_default();
            t.pop(); // the empty vector's length
            t
        });
        if !self.records && !tag.is_empty() && payload.starts_with(tag) {
            self.offset = at + 8 + u64::from(len);
            self.frames += 1;
            return Ok(Some(Frame::Records(Vec::new())));
        }
        let frame: Frame = codec()
            .deserialize(payload)
            .map_err(|e| format!("the frame at byte {at} does not decode ({e}): damaged"))?;
        self.offset = at + 8 + u64::from(len);
        self.frames += 1;
        Ok(Some(frame))
    }
}

/// Reads until `buf` is full or the input ends; how many bytes were read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// How much of a file was read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovery {
    pub frames: u64,
    pub records: u64,
    /// Bytes of whole frames read (the file may be longer).
    pub bytes: u64,
    /// Where and why reading stopped early, if it did.
    pub damage: Option<String>,
    /// The daemon's closing frame was there (it stopped cleanly).
    pub complete: bool,
}

impl Recovery {
    /// A line for the user when the file was not read whole, or `None`.
    pub fn warning(&self, path: &str) -> Option<String> {
        match (&self.damage, self.complete) {
            (None, true) => None,
            (Some(why), _) => Some(format!(
                "\"{path}\" is damaged: {why}. Recovered {} frames ({} records, the first {} \
                 bytes); the figures below cover only those",
                self.frames, self.records, self.bytes
            )),
            (None, false) => Some(format!(
                "\"{path}\" has no closing frame: the daemon did not stop cleanly (killed, or \
                 still running). Recovered {} frames ({} records) up to its last flush; drop \
                 counts are unknown and the duration is taken from the last record",
                self.frames, self.records
            )),
        }
    }
}

/// The header of a capture that starts now.
pub fn header_now(host: String, target: String) -> FileHeader {
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let kernel = crate::sys::kernel::release().unwrap_or_default();
    FileHeader {
        writer: format!("gpuprofd {}", env!("CARGO_PKG_VERSION")),
        host,
        kernel,
        started_at_unix_ns: wall,
        started_at_monotonic_ns: crate::sys::clock::monotonic_ns(),
        target,
    }
}

/// Whether `path` names a capture file (by its extension) rather than a JSON report.
pub fn is_capture_path(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "gpuprof")
}

mod read;

pub use read::{
    Replay, WalkError, for_each_record, for_each_record_named, gpm_samples, node_gpu_map,
    nvml_samples, replay, replay_selecting, replay_visiting,
};

#[cfg(test)]
pub(crate) mod tests;
