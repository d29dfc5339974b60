//! Process info from procfs.
