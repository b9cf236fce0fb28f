//! Server configuration: addresses, limits and timeouts, with defaults suited to video
//! (long-lived keep-alive connections, no cap on requests per connection).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::request::HeadLimits;

/// Everything [`crate::Server::bind`] needs.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Directory whose files are served.
    pub root: PathBuf,
    /// Listening address for HTTP (loopback by default).
    pub listen: SocketAddr,
    /// Optional admin listener for `/metrics` and `/stats` (off by default).
    pub admin: Option<SocketAddr>,
    /// How cache misses are read (see [`crate::IoMode`]).
    pub io: crate::io::IoSettings,
    /// Access log file (appended); `None` disables the log.
    pub access_log: Option<PathBuf>,
    /// Line format of the access log.
    pub access_log_format: crate::access_log::AccessLogFormat,
    /// Close a keep-alive connection after this long without a new request.
    pub idle_timeout: Duration,
    /// A request head must arrive completely within this time of its first byte.
    pub header_timeout: Duration,
    /// Close the connection after this many requests (`None`: unlimited).
    pub max_requests_per_connection: Option<u64>,
    /// Minimum body send rate in bytes/s, enforced after `send_grace`.
    pub min_send_rate: u64,
    /// Time a response may take before the minimum send rate applies.
    pub send_grace: Duration,
    /// Simultaneous client connections; further ones get 503 and are closed.
    pub max_connections: usize,
    /// Length of the listen queue: connections the kernel completes before the server
    /// accepts them (capped by `net.core.somaxconn`). Past it the kernel drops SYNs and the
    /// client retries after 1, 3, 7 s; see [`DEFAULT_BACKLOG`].
    pub backlog: u32,
    /// Request line and head limits (414/431).
    pub limits: HeadLimits,
    /// More ranges than this in one request are ignored (200 with the full file).
    pub max_ranges: usize,
    /// Largest request body read and discarded; larger bodies get 413.
    pub max_body: u64,
    /// Cross-origin policy; `None` sends no CORS headers.
    pub cors: Option<crate::web::Cors>,
    /// `Cache-Control` by kind of file (manifest, media, other).
    pub cache: crate::web::CachePolicy,
    /// gzip text files (manifests, subtitles, pages) up to 1 MiB for clients that accept it.
    pub gzip: bool,
    /// Follow symlinks that point outside the root.
    pub allow_outside_symlinks: bool,
    /// Longest wait for in-flight responses on shutdown.
    pub drain_timeout: Duration,
    /// Serve HTTPS with this certificate and key (`None`: plaintext HTTP).
    pub tls: Option<crate::tls::TlsSettings>,
    /// Speak HTTP/2 beside HTTP/1.1 ([`crate::h2_conn`]): on a TLS listener offered by ALPN
    /// (`h2`, falling back to `http/1.1`), on a plaintext one by prior knowledge (h2c: a
    /// connection that opens with the HTTP/2 preface). `None`: HTTP/1.1 only.
    pub http2: Option<H2Settings>,
    /// Event loops of [`crate::run_until_signal`], each a thread accepting from the one
    /// listener (0: one per CPU the process may run on).
    pub worker_threads: usize,
    /// How requests that start a new stream are admitted ([`crate::admission`]).
    pub admission: crate::admission::AdmissionPolicy,
    /// Accept live streams by `PUT` under a prefix ([`crate::live`]); `None`: off.
    pub ingest: Option<crate::live::IngestConfig>,
    /// Refuse requests without a valid expiring URL signature ([`SecureLink`]); `None`: off.
    pub secure_link: Option<SecureLink>,
    /// Served files kept open between requests ([`crate::open_files`]); 0: off.
    pub open_file_cache: usize,
    /// How long a cached file is trusted before its name is checked again
    /// ([`crate::open_files`]); zero: at every request.
    pub open_file_valid: Duration,
}

/// The listen queue's default length. A burst of new viewers (a live stream's segment, a
/// premiere) arrives while every worker is busy writing the last segment to thousands of
/// sockets; with the 128 of Rust's standard listener the kernel then drops SYNs and those
/// viewers wait a second or more for their connection (seen as request timeouts at 110
/// sessions/s in the `matrix` scenario's LPL cell). nginx asks for 511; 4096 is the kernel's
/// own default cap (`net.core.somaxconn` since Linux 5.4).
pub const DEFAULT_BACKLOG: u32 = 4096;

impl ServerConfig {
    /// Defaults for serving `root` on 127.0.0.1:8080.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        ServerConfig {
            root: root.into(),
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            admin: None,
            io: crate::io::IoSettings::default(),
            access_log: None,
            access_log_format: Default::default(),
            idle_timeout: Duration::from_secs(120),
            header_timeout: Duration::from_secs(10),
            max_requests_per_connection: None,
            min_send_rate: 1024,
            send_grace: Duration::from_secs(30),
            max_connections: 16384,
            backlog: DEFAULT_BACKLOG,
            limits: HeadLimits::default(),
            max_ranges: 64,
            max_body: 65536,
            cors: None,
            cache: crate::web::CachePolicy::default(),
            gzip: true,
            allow_outside_symlinks: false,
            drain_timeout: Duration::from_secs(30),
            worker_threads: 0,
            tls: None,
            http2: None,
            admission: crate::admission::AdmissionPolicy::Off,
            ingest: None,
            secure_link: None,
            open_file_cache: crate::open_files::DEFAULT_ENTRIES,
            open_file_valid: crate::open_files::DEFAULT_VALID,
        }
    }
}

/// `--secure-link`: every request under `prefix` must carry a valid signature made with
/// `secret` ([`vodkit_securelink`]); manifests served to a signed request have their URIs
/// signed with the same expiry.
#[derive(Debug, Clone)]
pub struct SecureLink {
    pub secret: vodkit_securelink::Secret,
    /// Only requests whose path starts with this are checked (`/`: all of them).
    pub prefix: String,
}

/// HTTP/2 settings: the windows and stream limits announced to clients, and the limits
/// that end a hostile connection. The defaults suit video: a viewer fetches a few
/// segments at a time, each in the megabytes.
#[derive(Debug, Clone)]
pub struct H2Settings {
    /// `SETTINGS_MAX_CONCURRENT_STREAMS`: requests a client may have open at once on one
    /// connection; also the most responses one connection is answering at once.
    pub max_streams: u32,
    /// `SETTINGS_INITIAL_WINDOW_SIZE`: bytes of a request body a client may send ahead on
    /// one stream (a live source's `PUT`).
    pub stream_window: u32,
    /// The connection's receive window (all streams' request bodies together).
    pub connection_window: u32,
    /// Response bytes queued per stream ahead of the socket.
    pub send_buffer: usize,
    /// Streams a client may cancel (or leave unread until the minimum send rate ends them)
    /// in a burst before the connection is closed with `ENHANCE_YOUR_CALM`...
    pub reset_burst: u32,
    /// ...and the rate at which that allowance refills, per second.
    pub resets_per_s: f64,
}

impl Default for H2Settings {
    fn default() -> Self {
        H2Settings {
            max_streams: 100,
            stream_window: 1 << 20,
            connection_window: 4 << 20,
            send_buffer: 512 << 10,
            reset_burst: 200,
            resets_per_s: 20.0,
        }
    }
}
