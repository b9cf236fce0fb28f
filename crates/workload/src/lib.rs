//! Streaming-video workloads: what viewers watch and how they ask for it.
//!
//! A workload spec (TOML or a built-in such as `youtube-2011`) becomes a [`model::Catalog`]
//! of titles and a list of [`model::Session`]s; session logs are read and written in the
//! jsonl, thesis, videoperf and httperf dialects, and file sets are written with
//! deterministic [`content`] so every received byte can be verified.

pub mod bitrates;
pub mod content;
pub mod dir;
pub mod dist;
pub mod error;
pub mod exchange;
pub mod fileset;
pub mod generate;
pub mod layout;
pub mod logfmt;
pub mod matrix;
pub mod model;
pub mod netflix;
pub mod order;
pub mod progress;
pub mod spec;
pub mod units;

pub use dir::WorkloadDir;
pub use error::InputError;
