//! Server counters, exported in Prometheus text format (`/metrics`) and as JSON (`/stats`)
//! on the admin listener.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};

/// Live counters shared by all connections.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    pub connections_open: Gauge,
    pub connections_total: Counter,
    pub connections_refused: Counter,
    pub requests: Family<Vec<(String, String)>, Counter>,
    /// Handles into `requests`, one per status code once seen: counting a response then
    /// costs one atomic add, not a label vector built and hashed under the family's lock.
    by_status: StatusCounters,
    pub requests_total: Counter,
    pub responses_aborted: Counter,
    pub responses_too_slow: Counter,
    pub body_bytes: Counter,
    pub bytes_from_memory: Counter,
    pub bytes_from_disk: Counter,
    pub header_timeouts: Counter,
    pub bad_requests: Counter,
    pub tls_handshake_failures: Counter,
    pub tls_handshakes: Counter,
    pub tls_resumed: Counter,
    /// HTTP/2: connections, requests (streams), streams being answered now, streams the
    /// client reset before their answer was done, and connections closed with
    /// `ENHANCE_YOUR_CALM` for spending their reset allowance.
    pub h2_connections: Counter,
    pub h2_streams: Counter,
    pub h2_streams_open: Gauge,
    pub h2_peer_resets: Counter,
    pub h2_calmed: Counter,
    /// Responses the disk failed, by device (`read_errors_total{device="loop0"}`)...
    pub read_errors: Family<Vec<(String, String)>, Counter>,
    /// ...and over all devices, for `/stats`.
    pub read_errors_all: Counter,
    /// Requests that started a new stream and were admitted, or refused with 503.
    pub streams_admitted: Counter,
    pub streams_refused: Counter,
    /// Streams open when the last new stream was decided on.
    pub streams_active: Gauge,
    /// The stream count `--admission auto` stops at, as last estimated (0: none yet).
    pub admission_limit: Gauge,
}

/// The `responses_total{status}` counter of each status code (100–599), looked up in the
/// family on first use and kept.
#[derive(Debug)]
struct StatusCounters(Box<[std::sync::OnceLock<Counter>]>);

impl Default for StatusCounters {
    fn default() -> Self {
        StatusCounters((100..600).map(|_| std::sync::OnceLock::new()).collect())
    }
}

impl StatusCounters {
    /// The counter of `status`; `make` creates it (a clone shares the family's count).
    /// A status outside 100–599 (never sent) is looked up in the family every time.
    fn get(&self, status: u16, make: impl FnOnce() -> Counter) -> std::borrow::Cow<'_, Counter> {
        match status
            .checked_sub(100)
            .and_then(|i| self.0.get(usize::from(i)))
        {
            Some(slot) => std::borrow::Cow::Borrowed(slot.get_or_init(make)),
            None => std::borrow::Cow::Owned(make()),
        }
    }
}

/// Admission figures in `/stats`.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct AdmissionStats {
    pub admitted: u64,
    pub refused: u64,
    pub active_streams: i64,
    pub limit: i64,
}

/// HTTP/2 figures in `/stats` (see [`Metrics::h2_connections`]).
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct H2Stats {
    pub connections: u64,
    pub streams: u64,
    pub streams_open: i64,
    pub peer_resets: u64,
    pub calmed: u64,
}

/// The `/stats` document (clients such as the bench read it back with serde).
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Stats {
    pub connections_open: i64,
    pub connections_total: u64,
    pub connections_refused: u64,
    pub requests_total: u64,
    pub responses_aborted: u64,
    pub responses_too_slow: u64,
    pub body_bytes: u64,
    pub bytes_from_memory: u64,
    pub bytes_from_disk: u64,
    pub header_timeouts: u64,
    pub bad_requests: u64,
    /// TLS handshakes that failed or timed out (0 on a plaintext listener).
    pub tls_handshake_failures: u64,
    /// TLS handshakes completed, and how many of them resumed an earlier session.
    pub tls_handshakes: u64,
    pub tls_resumed: u64,
    /// HTTP/2 connections and streams (all 0 without `--http2`/`--h2c`).
    #[serde(default)]
    pub http2: H2Stats,
    /// Responses the disk failed (all devices).
    #[serde(default)]
    pub read_errors: u64,
    /// `--admission`: new streams admitted and refused, streams open at the last decision,
    /// and the stream count `auto` stops at (0 before an estimate).
    #[serde(default)]
    pub admission: AdmissionStats,
    /// The live origin (`--ingest`), when on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingest: Option<crate::live::IngestStats>,
    pub io_mode: String,
    /// The prefetch engine's accounting (see docs/prefetch.md).
    pub prefetch: vodkit_prefetch::Stats,
}

impl Metrics {
    /// Counters, with the engine's and the live origin's metrics registered alongside
    /// when given.
    pub fn new(
        engine: Option<std::sync::Arc<vodkit_prefetch::Engine>>,
        live: Option<std::sync::Arc<crate::live::LiveStore>>,
    ) -> Metrics {
        let mut registry = Registry::default();
        let m = Metrics {
            registry: Registry::default(),
            connections_open: Gauge::default(),
            connections_total: Counter::default(),
            connections_refused: Counter::default(),
            requests: Family::default(),
            by_status: StatusCounters::default(),
            requests_total: Counter::default(),
            responses_aborted: Counter::default(),
            responses_too_slow: Counter::default(),
            body_bytes: Counter::default(),
            bytes_from_memory: Counter::default(),
            bytes_from_disk: Counter::default(),
            header_timeouts: Counter::default(),
            bad_requests: Counter::default(),
            tls_handshake_failures: Counter::default(),
            tls_handshakes: Counter::default(),
            tls_resumed: Counter::default(),
            h2_connections: Counter::default(),
            h2_streams: Counter::default(),
            h2_streams_open: Gauge::default(),
            h2_peer_resets: Counter::default(),
            h2_calmed: Counter::default(),
            read_errors: Family::default(),
            read_errors_all: Counter::default(),
            streams_admitted: Counter::default(),
            streams_refused: Counter::default(),
            streams_active: Gauge::default(),
            admission_limit: Gauge::default(),
        };
        register_server(registry.sub_registry_with_prefix("vodkit_server"), &m);
        if let Some(engine) = engine {
            // The engine's metric names carry their own `vodkit_prefetch_` prefix.
            vodkit_prefetch::metrics::register(&mut registry, engine);
        }
        if let Some(live) = live {
            registry.register_collector(Box::new(crate::live::IngestCollector(live)));
        }
        Metrics { registry, ..m }
    }

    pub fn count_status(&self, status: u16) {
        self.requests_total.inc();
        self.by_status
            .get(status, || {
                self.requests
                    .get_or_create(&vec![("status".to_string(), status.to_string())])
                    .clone()
            })
            .inc();
    }

    /// Prometheus text exposition.
    pub fn prometheus_text(&self) -> String {
        let mut out = String::new();
        let _ = encode(&mut out, &self.registry);
        out
    }

    pub fn stats(&self, io: &crate::io::DiskIo) -> Stats {
        Stats {
            connections_open: self.connections_open.get(),
            connections_total: self.connections_total.get(),
            connections_refused: self.connections_refused.get(),
            requests_total: self.requests_total.get(),
            responses_aborted: self.responses_aborted.get(),
            responses_too_slow: self.responses_too_slow.get(),
            body_bytes: self.body_bytes.get(),
            bytes_from_memory: self.bytes_from_memory.get(),
            bytes_from_disk: self.bytes_from_disk.get(),
            header_timeouts: self.header_timeouts.get(),
            bad_requests: self.bad_requests.get(),
            tls_handshake_failures: self.tls_handshake_failures.get(),
            tls_handshakes: self.tls_handshakes.get(),
            tls_resumed: self.tls_resumed.get(),
            http2: H2Stats {
                connections: self.h2_connections.get(),
                streams: self.h2_streams.get(),
                streams_open: self.h2_streams_open.get(),
                peer_resets: self.h2_peer_resets.get(),
                calmed: self.h2_calmed.get(),
            },
            read_errors: self.read_errors_all.get(),
            admission: AdmissionStats {
                admitted: self.streams_admitted.get(),
                refused: self.streams_refused.get(),
                active_streams: self.streams_active.get(),
                limit: self.admission_limit.get(),
            },
            ingest: None,
            io_mode: io.mode().to_string(),
            prefetch: io.engine().stats(),
        }
    }
}

fn register_server(registry: &mut Registry, m: &Metrics) {
    registry.register(
        "connections_open",
        "Client connections currently open",
        m.connections_open.clone(),
    );
    registry.register(
        "connections",
        "Client connections accepted",
        m.connections_total.clone(),
    );
    registry.register(
        "connections_refused",
        "Connections refused with 503 at the connection limit",
        m.connections_refused.clone(),
    );
    registry.register("responses", "Responses by status code", m.requests.clone());
    registry.register(
        "responses_aborted",
        "Responses cut short by the client",
        m.responses_aborted.clone(),
    );
    registry.register(
        "responses_too_slow",
        "Responses dropped below the minimum send rate",
        m.responses_too_slow.clone(),
    );
    registry.register(
        "body_bytes",
        "Response body bytes handed to the kernel",
        m.body_bytes.clone(),
    );
    registry.register(
        "memory_bytes",
        "Body bytes found in the page cache",
        m.bytes_from_memory.clone(),
    );
    registry.register(
        "disk_bytes",
        "Body bytes that had to be read from disk",
        m.bytes_from_disk.clone(),
    );
    registry.register(
        "header_timeouts",
        "Request heads not completed in time",
        m.header_timeouts.clone(),
    );
    registry.register(
        "bad_requests",
        "Malformed or oversized request heads",
        m.bad_requests.clone(),
    );
    registry.register(
        "tls_handshake_failures",
        "TLS handshakes that failed or timed out",
        m.tls_handshake_failures.clone(),
    );
    registry.register(
        "tls_handshakes",
        "TLS handshakes completed",
        m.tls_handshakes.clone(),
    );
    registry.register(
        "tls_resumed",
        "TLS handshakes that resumed a session (ticket or session id)",
        m.tls_resumed.clone(),
    );
    registry.register(
        "h2_connections",
        "HTTP/2 connections",
        m.h2_connections.clone(),
    );
    registry.register(
        "h2_streams",
        "HTTP/2 requests (streams) accepted",
        m.h2_streams.clone(),
    );
    registry.register(
        "h2_streams_open",
        "HTTP/2 streams being answered",
        m.h2_streams_open.clone(),
    );
    registry.register(
        "h2_peer_resets",
        "HTTP/2 streams the client reset before their answer was done",
        m.h2_peer_resets.clone(),
    );
    registry.register(
        "h2_calmed",
        "HTTP/2 connections closed with ENHANCE_YOUR_CALM for too many resets",
        m.h2_calmed.clone(),
    );
    registry.register(
        "read_errors",
        "Responses the disk failed to read, by device",
        m.read_errors.clone(),
    );
    registry.register(
        "streams_admitted",
        "Requests that started a new stream and were admitted",
        m.streams_admitted.clone(),
    );
    registry.register(
        "streams_refused",
        "Requests that would have started a new stream, refused with 503 (--admission)",
        m.streams_refused.clone(),
    );
    registry.register(
        "streams_active",
        "Streams open at the last admission decision",
        m.streams_active.clone(),
    );
    registry.register(
        "admission_limit_streams",
        "Stream count at which --admission auto stops admitting (last estimate)",
        m.admission_limit.clone(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_counts_reach_the_exposition_through_the_cached_handles() {
        let m = Metrics::new(None, None);
        m.count_status(206);
        m.count_status(206);
        m.count_status(404);
        m.count_status(42); // never sent; counted, not cached
        let text = m.prometheus_text();
        assert!(
            text.contains("vodkit_server_responses_total{status=\"206\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("vodkit_server_responses_total{status=\"404\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("vodkit_server_responses_total{status=\"42\"} 1"),
            "{text}"
        );
        assert!(!text.contains("status=\"200\""), "{text}");
        assert_eq!(m.requests_total.get(), 4);
    }
}
