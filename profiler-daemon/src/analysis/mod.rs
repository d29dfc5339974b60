//! Analysis: what the figures mean, computed from the model's snapshot and the capture file —
//! training steps found without annotations, and advice with the evidence behind it.
pub mod advice;
pub mod ranks;
pub mod steps;
