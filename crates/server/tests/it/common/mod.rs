//! The server's test harness, from the shared test kit: the in-process server on a
//! temporary root, its deterministic file contents, and the byte-exact HTTP client.

pub use vodkit_testkit::http::{Client, Resp};
pub use vodkit_testkit::process::run_ok;
pub use vodkit_testkit::server::{logged_config, pattern, rotated_patterns, TestServer};
