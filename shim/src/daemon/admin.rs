//! The daemon's admin listener, as `vodkit serve --admin`: `GET /metrics` (Prometheus text:
//! the engine's `vodkit_prefetch_*` metrics plus `vodkit_preload_*` for what the library
//! reported), `GET /stats` (the JSON [`MetricsSnapshot`]) and `GET /admit` (nginx's
//! `auth_request`: `204` or `403` + `Retry-After`, see [`super::admit`]) and
//! `POST /clock?rate=R` (the engine's clock runs R times faster than real time: a bench's
//! fast-forward). One request per connection.

use super::admit::AdmitQuery;
use super::{Daemon, MetricsSnapshot};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::registry::Registry;
use std::io::{self, BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Weak};
use std::time::Duration;
use vodkit_prefetch::admission::Decision;

/// Most request-head lines read from one admin request.
const MAX_HEADERS: usize = 64;

/// Snapshots of the daemon, taken at every scrape.
type Source = Arc<dyn Fn() -> Option<MetricsSnapshot> + Send + Sync>;

#[derive(Clone)]
struct PreloadCollector(Source);

impl std::fmt::Debug for PreloadCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PreloadCollector")
    }
}

fn counter(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> std::fmt::Result {
    let m = ConstCounter::new(v);
    m.encode(enc.encode_descriptor(name, help, None, m.metric_type())?)
}

impl Collector for PreloadCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(m) = (self.0)() else { return Ok(()) };
        let proto = ConstCounter::new(0u64);
        let mut calls = enc.encode_descriptor(
            "vodkit_preload_misses",
            "Page-cache misses reported by the preload library, per call",
            None,
            proto.metric_type(),
        )?;
        for (op, n) in &m.requests_by_call {
            let name = serde_json::to_value(op)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            ConstCounter::new(*n).encode(calls.encode_family(&[("call", name)])?)?;
        }
        let o = &m.outcomes;
        counter(
            &mut enc,
            "vodkit_preload_requested_bytes",
            "Bytes asked for in reported misses",
            m.requested_bytes,
        )?;
        counter(
            &mut enc,
            "vodkit_preload_resident_notes",
            "Reads the library found resident and noted to the daemon",
            m.resident_notes,
        )?;
        counter(
            &mut enc,
            "vodkit_preload_noted_bytes",
            "Bytes of reads noted as resident",
            m.noted_bytes,
        )?;
        counter(
            &mut enc,
            "vodkit_preload_engine_misses",
            "Misses handed to the engine",
            o.engine,
        )?;
        counter(
            &mut enc,
            "vodkit_preload_already_resident",
            "Misses found resident by the engine",
            o.already_resident,
        )?;
        counter(
            &mut enc,
            "vodkit_preload_library_prefetches",
            "Reads sized here and performed by the library",
            o.prefetch_in_library,
        )?;
        counter(
            &mut enc,
            "vodkit_preload_library_prefetch_bytes",
            "Bytes the library was told to read",
            m.planned_bytes,
        )?;
        counter(
            &mut enc,
            "vodkit_preload_tracked",
            "Misses only recorded (track mode)",
            o.tracked_only,
        )?;
        counter(
            &mut enc,
            "vodkit_preload_connections",
            "Library connections accepted",
            m.connections,
        )?;
        counter(
            &mut enc,
            "vodkit_preload_read_errors",
            "Engine reads that failed",
            m.read_errors,
        )?;
        counter(
            &mut enc,
            "vodkit_preload_bad_messages",
            "Undecodable messages received",
            m.bad_messages,
        )
    }
}

/// Serve the admin endpoints of `daemon` on `addr` from a background thread. Once the
/// daemon is gone the thread ends at the next connection. Returns the bound address.
pub fn spawn(daemon: &Daemon, addr: SocketAddr) -> io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let bound = listener.local_addr()?;
    let weak: Weak<super::Shared> = Arc::downgrade(&daemon.shared);
    let daemon_ref = weak.clone();
    let source: Source = Arc::new(move || weak.upgrade().map(|s| super::snapshot(&s)));
    let mut registry = Registry::default();
    vodkit_prefetch::metrics::register(&mut registry, Arc::clone(&daemon.shared.engine));
    registry.register_collector(Box::new(PreloadCollector(source.clone())));
    std::thread::Builder::new()
        .name("prefetchd-admin".into())
        .spawn(move || {
            for stream in listener.incoming().flatten() {
                if source().is_none() {
                    return;
                }
                if let Err(e) = answer(stream, &registry, &source, &daemon_ref) {
                    tracing::debug!("admin request failed: {e}");
                }
            }
        })?;
    Ok(bound)
}

fn answer(
    stream: TcpStream,
    registry: &Registry,
    source: &Source,
    daemon: &Weak<super::Shared>,
) -> io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut headers: Vec<(String, String)> = Vec::new();
    let mut rest = String::new();
    while reader.read_line(&mut rest)? > 2 && headers.len() < MAX_HEADERS {
        if let Some((k, v)) = rest.trim_end().split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
        rest.clear();
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut extra = String::new();
    let (status, ctype, body) = match (method, path) {
        ("GET", "/admit") => {
            let query = AdmitQuery {
                uri: header("x-original-uri").unwrap_or("/"),
                range: header("x-original-range").filter(|r| !r.is_empty()),
                client: header("x-session-id")
                    .filter(|s| !s.is_empty())
                    .or(header("x-client"))
                    .unwrap_or(""),
            };
            let decision = daemon
                .upgrade()
                .map_or(Decision::Admit, |d| d.gate.decide(&d.engine, &query));
            match decision {
                Decision::Admit => ("204 No Content", "text/plain", String::new()),
                Decision::Refuse { retry_after_s } => {
                    extra = format!("Retry-After: {retry_after_s}\r\n");
                    ("403 Forbidden", "text/plain", "busy\n".to_string())
                }
            }
        }
        ("POST", "/clock") => {
            let set = vodkit_prefetch::clock::rate_from_query(query).and_then(|r| {
                daemon
                    .upgrade()
                    .ok_or_else(|| "the daemon is stopping".to_string())?
                    .engine
                    .set_clock_rate(r)
            });
            match set {
                Ok(()) => ("204 No Content", "text/plain", String::new()),
                Err(e) => ("400 Bad Request", "text/plain", format!("{e}\n")),
            }
        }
        ("GET", "/metrics") => {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, registry)
                .map_err(io::Error::other)?;
            (
                "200 OK",
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                text,
            )
        }
        ("GET", "/stats") => {
            let mut text = source()
                .map(|m| serde_json::to_string_pretty(&m).unwrap_or_default())
                .unwrap_or_default();
            text.push('\n');
            ("200 OK", "application/json", text)
        }
        _ => ("404 Not Found", "text/plain", "not found\n".to_string()),
    };
    let mut out = stream;
    write!(
        out,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n{body}",
        body.len()
    )?;
    out.flush()
}
