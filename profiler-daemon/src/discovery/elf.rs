//! ELF reading (owned by the ELF/placement work).
