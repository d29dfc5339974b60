//! gpuprofd's library: discovery → attach → capture → enrich → model → output.
//!
//! Data flows one way; each stage is a module and is testable without the ones before it.

pub mod analysis;
pub mod api;
pub mod attach;
pub mod bench;
pub mod capture;
pub mod cli;
pub mod discovery;
pub mod doctor;
pub mod enrich;
pub mod model;
pub mod nvml;
pub mod output;
pub mod service;
pub mod session;
pub mod store;
pub mod sys;
