//! One client connection on a TLS listener: the handshake (bounded by the handshake
//! timeout, a failure is one debug line), then the same request loop as the plaintext
//! listener, with bodies read into the connection's body buffer and written through rustls.
//! Nothing is ever sent in plaintext on this listener.

use std::os::unix::fs::FileExt as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

use crate::body::{SendClock, SendError};
use crate::conn::{finish, full_text, http_date, ConnInfo, Served};
use crate::io::{Requester, WINDOW};
use crate::request::{parse_head, HeadError, Method, Parsed, Request};
use crate::response::{head_bytes, plan, Body, Response, Segment};
use crate::Shared;

type Stream = TlsStream<TcpStream>;

/// Largest piece of a file read into the connection's buffer at once (rustls cuts it into
/// 16 KiB records).
const CHUNK: u64 = 256 << 10;

/// How long a closing connection waits to send its `close_notify`.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// Handshake, then serve requests until the client closes, a limit ends it, or shutdown.
pub async fn serve(shared: Arc<Shared>, tcp: TcpStream, info: ConnInfo) {
    let Some(tls) = shared.tls.as_ref() else {
        return;
    };
    // The failure is counted before the socket is closed, so a client that sees the close
    // also sees the counter.
    let accept = tls.acceptor.accept(tcp).into_fallible();
    tokio::pin!(accept);
    let mut stream = match tokio::time::timeout(tls.handshake_timeout, &mut accept).await {
        Ok(Ok(s)) => s,
        Ok(Err((e, tcp))) => {
            shared.metrics.tls_handshake_failures.inc();
            tracing::debug!(
                "conn {} from {}: TLS handshake failed: {e}",
                info.id,
                info.peer
            );
            drop(tcp);
            return;
        }
        Err(_) => {
            shared.metrics.tls_handshake_failures.inc();
            tracing::debug!(
                "conn {} from {}: TLS handshake not done within {:?}",
                info.id,
                info.peer,
                tls.handshake_timeout
            );
            return;
        }
    };
    shared.metrics.tls_handshakes.inc();
    if stream.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
        shared.metrics.tls_resumed.inc();
    }
    requests(&shared, &mut stream, info).await;
    let _ = tokio::time::timeout(CLOSE_WAIT, stream.shutdown()).await;
}

async fn requests(shared: &Shared, stream: &mut Stream, info: ConnInfo) {
    let mut shutdown = shared.shutdown.subscribe();
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    // The body buffer: borrowed from the listener's pool for the first file range and kept
    // while requests follow back to back; given back whenever the connection goes idle.
    let mut body: Vec<u8> = Vec::new();
    let pool = shared.tls.as_ref().map(|t| &t.buffers);
    let mut served = 0u64;
    let mut head_started: Option<Instant> = None;
    loop {
        if !buf.is_empty() {
            match parse_head(&buf, &shared.config.limits) {
                Ok(Parsed::Complete(req, used)) => {
                    buf.drain(..used);
                    served += 1;
                    head_started = None;
                    let stopping = *shutdown.borrow();
                    let keep = match discard_body(stream, &mut buf, req.content_length, shared)
                        .await
                    {
                        Ok(()) => {
                            answer(shared, stream, &mut body, &req, info, served, stopping).await
                        }
                        Err(()) => false,
                    };
                    if !keep {
                        if let Some(pool) = pool {
                            pool.put(body);
                        }
                        return;
                    }
                    continue;
                }
                Ok(Parsed::Partial) => {
                    head_started.get_or_insert_with(Instant::now);
                }
                Err(e) => {
                    reject(shared, stream, &e, info, served + 1).await;
                    return;
                }
            }
        }
        let stopping = *shutdown.borrow();
        if buf.is_empty() {
            if let Some(pool) = pool {
                pool.put(std::mem::take(&mut body));
            }
            if stopping {
                return;
            }
        }
        let deadline = match head_started {
            Some(t) => t + shared.config.header_timeout,
            None => Instant::now() + shared.config.idle_timeout,
        };
        let deadline = tokio::time::Instant::from_std(deadline);
        buf.reserve(4096);
        tokio::select! {
            r = tokio::time::timeout_at(deadline, stream.read_buf(&mut buf)) => match r {
                Ok(Ok(0)) | Ok(Err(_)) => return,
                Ok(Ok(_)) => {}
                Err(_) => {
                    if !buf.is_empty() {
                        shared.metrics.header_timeouts.inc();
                        let resp = Response::text(408, true);
                        let mut clock = new_clock(shared);
                        let _ = write(stream, &full_text(&resp), false, &mut clock).await;
                        let _ = flush(stream, &clock).await;
                    }
                    return;
                }
            },
            _ = async { let _ = shutdown.wait_for(|&v| v).await; }, if buf.is_empty() => return,
        }
    }
}

fn new_clock(shared: &Shared) -> SendClock {
    SendClock::new(shared.config.send_grace, shared.config.min_send_rate)
}

/// Hand `data` to rustls (which encrypts and writes it), within the send-rate deadline.
async fn write(
    stream: &mut Stream,
    data: &[u8],
    is_body: bool,
    clock: &mut SendClock,
) -> Result<(), SendError> {
    let deadline = tokio::time::Instant::from_std(clock.deadline());
    match tokio::time::timeout_at(deadline, stream.write_all(data)).await {
        Ok(Ok(())) => {
            clock.count(data.len() as u64, is_body);
            Ok(())
        }
        Ok(Err(e)) => Err(SendError::Io(e)),
        Err(_) => Err(SendError::TooSlow),
    }
}

/// Push every queued record to the socket.
async fn flush(stream: &mut Stream, clock: &SendClock) -> Result<(), SendError> {
    let deadline = tokio::time::Instant::from_std(clock.deadline());
    match tokio::time::timeout_at(deadline, stream.flush()).await {
        Ok(r) => r.map_err(SendError::Io),
        Err(_) => Err(SendError::TooSlow),
    }
}

/// Read and drop a request body of `len` bytes; too large → 413.
async fn discard_body(
    stream: &mut Stream,
    buf: &mut Vec<u8>,
    len: u64,
    shared: &Shared,
) -> Result<(), ()> {
    if len == 0 {
        return Ok(());
    }
    if len > shared.config.max_body {
        let resp = Response::text(413, true);
        let mut clock = new_clock(shared);
        let _ = write(stream, &full_text(&resp), false, &mut clock).await;
        let _ = flush(stream, &clock).await;
        return Err(());
    }
    let mut left = len as usize;
    let deadline = tokio::time::Instant::from_std(Instant::now() + shared.config.header_timeout);
    loop {
        let take = left.min(buf.len());
        buf.drain(..take);
        left -= take;
        if left == 0 {
            return Ok(());
        }
        buf.reserve(8192);
        match tokio::time::timeout_at(deadline, stream.read_buf(buf)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return Err(()),
        }
    }
}

/// Answer a head the parser refused; the connection closes afterwards.
async fn reject(shared: &Shared, stream: &mut Stream, e: &HeadError, info: ConnInfo, req_no: u64) {
    let started = Instant::now();
    let resp = Response::text(e.status(), true);
    let mut clock = new_clock(shared);
    let r = match write(stream, &full_text(&resp), false, &mut clock).await {
        Ok(()) => flush(stream, &clock).await,
        Err(e) => Err(e),
    };
    crate::conn::record_reject(shared, info, req_no, resp.status, 0, r.is_ok(), started);
}

/// Answer one request; returns whether the connection stays open.
async fn answer(
    shared: &Shared,
    stream: &mut Stream,
    body: &mut Vec<u8>,
    req: &Request,
    info: ConnInfo,
    req_no: u64,
    shutting_down: bool,
) -> bool {
    let started = Instant::now();
    let resp = plan(req, &shared.root, &shared.plan);
    let at_limit = shared
        .config
        .max_requests_per_connection
        .is_some_and(|max| req_no >= max);
    let keep = req.wants_keep_alive() && !resp.close && !at_limit && !shutting_down;
    let mut clock = new_clock(shared);
    let mut served = Served::default();
    let open_ended = match req.range.as_deref().and_then(crate::range::parse_range) {
        None => true,
        Some(specs) => specs
            .iter()
            .any(|s| matches!(s, crate::range::RangeSpec::From(_))),
    };
    let who = Requester::new(
        req.session_id.as_deref(),
        info.peer.ip(),
        info.id,
        open_ended,
    );
    let send_body = req.method != Method::Head;
    let mut result = send_response(
        shared,
        stream,
        body,
        &resp,
        who,
        keep,
        send_body,
        &mut clock,
        &mut served,
    )
    .await;
    if result.is_ok() {
        result = flush(stream, &clock).await;
    }
    finish(
        shared, req, &resp, info, req_no, started, &clock, &served, &result,
    );
    keep && result.is_ok()
}

#[allow(clippy::too_many_arguments)]
async fn send_response(
    shared: &Shared,
    stream: &mut Stream,
    body: &mut Vec<u8>,
    resp: &Response,
    who: Requester,
    keep: bool,
    send_body: bool,
    clock: &mut SendClock,
    served: &mut Served,
) -> Result<(), SendError> {
    let head = head_bytes(resp, &http_date(), keep);
    match (&resp.body, send_body) {
        (Body::Text(text), true) => {
            write(stream, &head, false, clock).await?;
            write(stream, text, true, clock).await
        }
        (
            Body::File {
                file,
                path,
                file_id,
                segments,
            },
            true,
        ) => {
            write(stream, &head, false, clock).await?;
            let url_path = path.to_string_lossy();
            for seg in segments {
                match seg {
                    Segment::Bytes(b) => write(stream, b, true, clock).await?,
                    Segment::File(range) => {
                        let target = Target {
                            file,
                            url_path: &url_path,
                            file_id: *file_id,
                            who,
                        };
                        send_windows(shared, stream, body, &target, *range, clock, served).await?
                    }
                }
            }
            Ok(())
        }
        _ => write(stream, &head, false, clock).await,
    }
}

/// The file a range is sent from.
struct Target<'a> {
    file: &'a Arc<std::fs::File>,
    url_path: &'a str,
    file_id: u64,
    who: Requester,
}

/// Send one file range window by window: the I/O layer makes each window resident (or
/// reads it into its direct-I/O pool); the bytes then go through rustls.
async fn send_windows(
    shared: &Shared,
    stream: &mut Stream,
    body: &mut Vec<u8>,
    t: &Target<'_>,
    range: crate::range::ByteRange,
    clock: &mut SendClock,
    served: &mut Served,
) -> Result<(), SendError> {
    let mut first = range.first;
    while first <= range.last {
        let last = range.last.min(first + WINDOW - 1);
        let window = crate::range::ByteRange { first, last };
        let mut prep = shared
            .io
            .prepare(t.file, t.url_path, t.file_id, t.who, window)
            .await;
        served.from_memory += prep.from_memory;
        served.from_disk += prep.from_disk;
        match prep.slices.take() {
            // `--io direct`: rustls reads the pool's chunks directly into its records.
            Some(slices) => {
                for s in &slices {
                    write(stream, s.bytes(), true, clock).await?;
                }
            }
            None => {
                if body.len() < CHUNK as usize {
                    if let Some(t) = &shared.tls {
                        *body = t.buffers.take(CHUNK as usize);
                    }
                }
                let mut at = window.first;
                while at <= window.last {
                    let n = (window.last + 1 - at).min(CHUNK) as usize;
                    read_at(t.file, at, n, body, prep.send_blocking).await?;
                    write(stream, &body[..n], true, clock).await?;
                    at += n as u64;
                }
            }
        }
        shared.io.sent(&prep, window);
        first = last + 1;
    }
    Ok(())
}

/// `pread` `n` bytes at `offset` into the front of `buf`; on the blocking pool when the
/// pages may have to come from the disk.
async fn read_at(
    file: &Arc<std::fs::File>,
    offset: u64,
    n: usize,
    buf: &mut Vec<u8>,
    blocking: bool,
) -> Result<(), SendError> {
    if buf.len() < n {
        buf.resize(n, 0);
    }
    let truncated = |e: std::io::Error| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            SendError::Io(std::io::Error::new(e.kind(), "file truncated"))
        } else {
            SendError::Io(e)
        }
    };
    if !blocking {
        return file.read_exact_at(&mut buf[..n], offset).map_err(truncated);
    }
    let mut owned = std::mem::take(buf);
    let f = file.clone();
    let (owned, r) = tokio::task::spawn_blocking(move || {
        let r = f.read_exact_at(&mut owned[..n], offset);
        (owned, r)
    })
    .await
    .map_err(|e| SendError::Io(std::io::Error::other(e)))?;
    *buf = owned;
    r.map_err(truncated)
}
