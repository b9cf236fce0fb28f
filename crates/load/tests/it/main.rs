//! Integration tests of the load generator against real servers: players, faults, TLS, HTTP/2, live streams (classic and low-latency),
//! signed URLs and kernel limits.
//!
//! One test binary for the crate, linked once: each module holds one area's tests.

mod common;
mod faults;
mod http2;
mod kernel;
mod live;
mod low_latency;
mod nginx;
mod player;
mod qos_idle;
mod signed_urls;
mod tls;
