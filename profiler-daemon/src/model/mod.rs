//! The aggregator (owned by the model work).
