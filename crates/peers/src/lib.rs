//! Launches and supervises the peer web servers vodkit is compared against (nginx and
//! Apache httpd): generated configs with the seed 001 tuning, a free loopback port, a
//! readiness probe, error-log checks, and a stop that takes the whole server down.
//!
//! [`nginx`] and [`apache`] render the configs, [`process`] supervises any child-process
//! server, and [`launch`] puts the two together for the bench and the tests.

pub mod apache;
pub mod launch;
pub mod nginx;
pub mod process;
pub mod tls;

pub use launch::{
    apache_program, cores, found_or_skip, nginx_program, no_wrap, start_apache, start_nginx,
    PeerError, PeerSetup, StartPeer, Wrap,
};
pub use launch::{start_apache_tls, start_nginx_tls};
pub use process::{
    find_program, free_port, http_get, http_status, ProcessError, ServerProcess, StartSpec,
};
pub use tls::TlsFiles;

/// A path as a double-quoted config string (nginx and Apache read the same quoting).
pub(crate) fn quoted(p: &std::path::Path) -> String {
    format!("\"{}\"", p.display().to_string().replace('"', "\\\""))
}
