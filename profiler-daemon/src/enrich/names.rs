//! Kernel names (owned by the model work).
