//! What the daemon asks of the system it runs on: kernel release and capabilities, accounts, the clock
//! the probes stamp records with, output files, who holds a port, the open-file limit, its own heap, the kernel's
//! type information, where the injection library is installed, and the text forms of durations and sizes.
//!
//! The bottom of the pipeline: nothing here imports another module of the crate, and every
//! stage may use it. A helper two stages need moves here (or into `profiler-common`), never
//! sideways between them.

pub mod account;
pub mod btf;
pub mod clock;
pub mod duration;
pub mod files;
pub mod hash;
pub mod heap;
pub mod inject_lib;
pub mod kernel;
pub mod rlimit;
pub mod sockets;
pub mod units;
