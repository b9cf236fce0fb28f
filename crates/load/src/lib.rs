//! The streaming-video load generator: replays viewing sessions against an HTTP server as
//! thousands of paced, timed-out, bandwidth-limited players would, and measures
//! throughput, latency and client-side quality (thesis 3.4 and 3.6, seed 004 section 2.2).
//!
//! [`run`] drives a [`LoadConfig`] to a [`Run`]: a serializable [`Results`] summary plus
//! the raw per-session records. [`input`] reads session logs and workload metadata.

pub mod common;
pub mod config;
pub mod engine;
pub mod exchange;
pub mod h2;
pub mod hist;
pub mod http;
pub mod input;
pub mod link;
pub mod netns;
pub mod player;
pub mod probe;
pub mod qos;
pub mod record;
pub mod results;
pub mod session;
pub mod shard;
pub mod status;
pub mod steady;
pub mod tls;
pub mod viewer;
pub mod warm;
pub mod watch;
pub mod watcher;

pub use config::{HttpVersion, InputError, LoadConfig, Ramp, Target, Timed};
pub use engine::{run, run_async, LoadError, Run};
pub use link::Link;
pub use netns::LinkMode;
pub use results::{write_csv, write_players_csv, Results};
pub use shard::Shard;
pub use tls::{TlsClient, Trust};
pub use tokio_util::sync::CancellationToken;
pub use warm::WarmStart;
pub use watch::{Tally, Watch};
