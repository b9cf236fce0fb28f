//! Launches and supervises the peer web servers vodkit is compared against (nginx and
//! Apache httpd): generated configs with the seed 001 tuning, a free loopback port, a
//! readiness probe, error-log checks, and a stop that takes the whole server down.
//!
//! [`nginx`] and [`apache`] render the configs, [`process`] supervises any child-process
//! server, and [`launch`] puts the two together for the bench and the tests. [`cluster`]
//! does the same for the load balancers in front of a cluster of origins (HAProxy, nginx)
//! and holds their routing rule and health agent.

pub mod apache;
pub mod cluster;
pub mod launch;
pub mod nginx;
pub mod process;
pub mod tls;

pub use launch::{
    apache_program, cores, nginx_program, no_wrap, start_apache, start_nginx, PeerError, PeerSetup,
    StartPeer, Wrap,
};
pub use launch::{start_apache_with, start_nginx_with};
pub use process::{
    find_program, free_port, http_get, http_status, ProcessError, ServerProcess, StartSpec,
};
pub use tls::TlsFiles;

/// The status code of the start of an HTTP/1.x response.
pub(crate) fn status_of(head: &[u8]) -> std::io::Result<u16> {
    let line = String::from_utf8_lossy(head);
    line.strip_prefix("HTTP/1.")
        .and_then(|r| r.get(2..5))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {line:?}")))
}

/// Checks a live path prefix, which is written into a peer's or a balancer's config;
/// returns it with a trailing `/`.
pub(crate) fn live_prefix(prefix: &str) -> Result<String, String> {
    let prefix_ok = prefix.starts_with('/')
        && prefix.len() > 1
        && prefix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/-._~".contains(c));
    if !prefix_ok {
        return Err(format!(
            "live prefix `{prefix}`: expected a path such as /live/ (letters, digits, -._~)"
        ));
    }
    Ok(if prefix.ends_with('/') {
        prefix.to_string()
    } else {
        format!("{prefix}/")
    })
}

/// Checks a live origin's write prefix and bearer token, which are written into a peer's
/// config; returns the prefix with a trailing `/`.
pub(crate) fn live_prefix_and_token(prefix: &str, token: &str) -> Result<String, String> {
    let prefix = live_prefix(prefix)?;
    let token_ok = !token.is_empty()
        && token
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._~+/=".contains(c));
    if !token_ok {
        return Err("live token: expected letters, digits and -._~+/= only".into());
    }
    Ok(prefix)
}

/// A peer's generated configuration: what the launcher writes, where the server logs, and
/// how its error log reads. Its files live in the run directory.
pub trait PeerConfig {
    /// The server's name in reports and errors.
    const NAME: &'static str;
    /// The main config's file name in the run directory.
    const CONF_FILE: &'static str;
    /// Whether a line of the server's error log means the run was not clean.
    const IS_ERROR_LINE: fn(&str) -> bool;
    fn run_dir(&self) -> &std::path::Path;
    /// The whole main config.
    fn render(&self) -> String;
    fn conf_path(&self) -> std::path::PathBuf {
        self.run_dir().join(Self::CONF_FILE)
    }
    fn error_log(&self) -> std::path::PathBuf {
        self.run_dir().join("error.log")
    }
    fn access_log(&self) -> std::path::PathBuf {
        self.run_dir().join("access.log")
    }
}

/// A path as a double-quoted config string (nginx and Apache read the same quoting).
pub(crate) fn quoted(p: &std::path::Path) -> String {
    format!("\"{}\"", p.display().to_string().replace('"', "\\\""))
}
