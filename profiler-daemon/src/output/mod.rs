//! Outputs (owned by the model work).
