//! Which processes map which CUDA libraries: procfs scanning and ELF identity.

pub mod elf;
