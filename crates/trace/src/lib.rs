//! `vodkit trace`: turns server access logs into chains of sequential requests and phases
//! of client behaviour, and characterizes them (thesis chapter 5).
//!
//! Pipeline: a [`read`] module parses one log line into a [`record::LogRequest`]; the
//! [`analyze`] driver feeds them to per-session [`chain::ChainBuilder`]s (partitioned by
//! session over the threads, merged back in one thread's order); when a session can
//! no longer grow its chains are closed, written out, and summarized into [`chainstats`],
//! [`phase`] and [`sessions`] statistics, which [`report`] renders as HTML. Open sessions
//! past their memory budget are spilled to disk and merged back in order, so memory stays
//! bounded for any log.

pub mod analyze;
pub mod blocks;
mod cacheline;
pub mod chain;
pub mod chainstats;
mod coldfiles;
pub mod columnar;
pub mod files;
pub mod fit;
pub mod fromlog;
mod hashruns;
mod idle;
mod offsets;
pub mod output;
mod parse;
pub mod phase;
pub mod read;
pub mod record;
pub mod report;
mod resident;
mod runfile;
pub mod sessions;
pub mod sort;
mod spill;

pub use analyze::{analyze, Analysis, AnalyzeOptions};
pub use chain::{read_chains_csv, Chain};
pub use files::{FileInfo, FileTable};
pub use fit::{growth_factor, survival_distance, PowerLawFit, PowerLawSegment};
pub use read::LogFormat;
