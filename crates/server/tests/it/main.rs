//! Integration tests of the server: conformance, hostile clients, TLS, HTTP/2, I/O modes, live ingest
//! (low latency included), signed URLs and real clients.
//!
//! One test binary for the crate, linked once: each module holds one area's tests.
//! The signal tests (`signal.rs`, `tls_sighup.rs`) are binaries of their own: a signal
//! reaches the whole process.

mod admin_clock;
mod admission;
mod behind_caches;
mod common;
mod conformance;
mod direct_io;
mod event_loops;
mod hostile;
mod http2;
mod ingest_limits;
mod io_modes;
mod live_ingest;
mod low_latency;
mod no_panic;
mod real_clients;
mod secure_link;
mod tls;
