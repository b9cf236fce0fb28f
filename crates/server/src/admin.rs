//! The admin listener: `GET /metrics` (Prometheus text), `GET /stats` (JSON) and
//! `POST /clock?rate=R` (the prefetch engine's clock runs R times faster than real time; a
//! bench's fast-forward), one request per connection. It runs on its own address, off by
//! default.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::request::{parse_head, HeadLimits, Method, Parsed};
use crate::Shared;

/// Accept admin connections until the task is aborted.
pub async fn run(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(10), handle(stream, &shared)).await;
        });
    }
}

async fn handle(mut stream: TcpStream, shared: &Shared) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let limits = HeadLimits::default();
    let req = loop {
        let mut chunk = [0u8; 1024];
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        match parse_head(&buf, &limits) {
            Ok(Parsed::Complete(req, _)) => break req,
            Ok(Parsed::Partial) => continue,
            Err(_) => return reply(&mut stream, 400, "text/plain", "bad request\n".into()).await,
        }
    };
    let (path, query) = req.target.split_once('?').unwrap_or((&req.target, ""));
    match (&req.method, path) {
        (Method::Other(m), "/clock") if m == "POST" => {
            let set = vodkit_prefetch::clock::rate_from_query(query)
                .and_then(|r| shared.io.engine().set_clock_rate(r));
            match set {
                Ok(()) => reply(&mut stream, 204, "text/plain", String::new()).await,
                Err(e) => reply(&mut stream, 400, "text/plain", format!("{e}\n")).await,
            }
        }
        (Method::Get, "/metrics") => {
            let text = shared.metrics.prometheus_text();
            reply(
                &mut stream,
                200,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                text,
            )
            .await
        }
        (Method::Get, "/stats") => {
            let mut stats = shared.metrics.stats(&shared.io);
            stats.ingest = shared.live.as_ref().map(|l| l.stats());
            let mut text = serde_json::to_string_pretty(&stats).unwrap_or_default();
            text.push('\n');
            reply(&mut stream, 200, "application/json", text).await
        }
        _ => reply(&mut stream, 404, "text/plain", "not found\n".into()).await,
    }
}

async fn reply(
    stream: &mut TcpStream,
    status: u16,
    ctype: &str,
    body: String,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        crate::response::reason(status),
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}
