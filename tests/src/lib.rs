//! Helpers shared by the privileged tests.
