//! Enrichment: who made each call and what it names — the process (procfs), its job (cgroups,
//! environment), kernel names (handles, host stubs, demangling) and the frames of sampled call
//! stacks (ELF symbols, DWARF lines, CPython code objects).

pub mod driver_objects;
pub mod gpu_env;
pub mod itanium;
pub mod jobs;
pub mod launch_origin;
pub mod names;
pub mod nspid;
pub mod process;
pub mod stacks;
