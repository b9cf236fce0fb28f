//! One client connection: read request heads (pipelined ones too), answer them strictly in
//! order, keep the connection alive between requests, and enforce the idle timeout, the
//! header timeout and the request-per-connection limit.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use tokio::net::TcpStream;

use crate::access_log::{Entry, Outcome};
use crate::body::{send_bytes, send_file_range, send_slices, SendClock, SendError};
use crate::io::{Requester, WINDOW};
use crate::request::{parse_head, HeadError, Method, Parsed, Request};
use crate::response::{head_bytes, plan, Body, Response, Segment};
use crate::Shared;

/// Identity of a connection, for the access log.
#[derive(Debug, Clone, Copy)]
pub struct ConnInfo {
    pub id: u64,
    pub peer: SocketAddr,
}

/// Serve a connection until the client closes it, a limit ends it, or shutdown.
pub async fn serve(shared: Arc<Shared>, stream: TcpStream, info: ConnInfo) {
    let mut shutdown = shared.shutdown.subscribe();
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut served = 0u64;
    let mut head_started: Option<Instant> = None;
    // The memory manager's stream key of the last request (see `Requester::stream`).
    let mut stream_key: Option<u64> = None;
    loop {
        if !buf.is_empty() {
            match parse_head(&buf, &shared.config.limits) {
                Ok(Parsed::Complete(req, used)) => {
                    buf.drain(..used);
                    served += 1;
                    head_started = None;
                    stream_key = Some(
                        Requester::new(req.session_id.as_deref(), info.peer.ip(), info.id, false)
                            .stream,
                    );
                    let stopping = *shutdown.borrow();
                    let keep =
                        match discard_body(&stream, &mut buf, req.content_length, &shared).await {
                            Ok(()) => answer(&shared, &stream, &req, info, served, stopping).await,
                            Err(()) => false,
                        };
                    if !keep {
                        break;
                    }
                    continue;
                }
                Ok(Parsed::Partial) => {
                    head_started.get_or_insert_with(Instant::now);
                }
                Err(e) => {
                    reject(&shared, &stream, &e, info, served + 1).await;
                    break;
                }
            }
        }
        let stopping = *shutdown.borrow();
        if buf.is_empty() && stopping {
            break;
        }
        let deadline = match head_started {
            Some(t) => t + shared.config.header_timeout,
            None => Instant::now() + shared.config.idle_timeout,
        };
        let deadline = tokio::time::Instant::from_std(deadline);
        buf.reserve(4096);
        tokio::select! {
            r = tokio::time::timeout_at(deadline, read_more(&stream, &mut buf)) => match r {
                Ok(Ok(0)) | Ok(Err(_)) => break,
                Ok(Ok(_)) => {}
                Err(_) => {
                    if !buf.is_empty() {
                        shared.metrics.header_timeouts.inc();
                        let resp = Response::text(408, true);
                        let mut clock = SendClock::new(shared.config.send_grace, shared.config.min_send_rate);
                        let _ = send_bytes(&stream, &full_text(&resp), false, false, &mut clock).await;
                    }
                    break;
                }
            },
            _ = async { let _ = shutdown.wait_for(|&v| v).await; }, if buf.is_empty() => break,
        }
    }
    if let Some(key) = stream_key {
        shared.io.closed(key);
    }
}

/// Read whatever the socket has into the spare capacity of `buf`.
async fn read_more(stream: &TcpStream, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    loop {
        stream.readable().await?;
        let start = buf.len();
        buf.resize(buf.capacity(), 0);
        match stream.try_read(&mut buf[start..]) {
            Ok(n) => {
                buf.truncate(start + n);
                return Ok(n);
            }
            Err(e) => {
                buf.truncate(start);
                if e.kind() != std::io::ErrorKind::WouldBlock {
                    return Err(e);
                }
            }
        }
    }
}

/// Read and drop a request body of `len` bytes (we never use bodies); too large → 413.
async fn discard_body(
    stream: &TcpStream,
    buf: &mut Vec<u8>,
    len: u64,
    shared: &Shared,
) -> Result<(), ()> {
    if len == 0 {
        return Ok(());
    }
    if len > shared.config.max_body {
        let resp = Response::text(413, true);
        let mut clock = SendClock::new(shared.config.send_grace, shared.config.min_send_rate);
        let _ = send_bytes(stream, &full_text(&resp), false, false, &mut clock).await;
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
        match tokio::time::timeout_at(deadline, read_more(stream, buf)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return Err(()),
        }
    }
}

pub(crate) fn full_text(resp: &Response) -> Vec<u8> {
    let mut out = head_bytes(resp, &http_date(), !resp.close);
    if let Body::Text(b) = &resp.body {
        out.extend_from_slice(b);
    }
    out
}

/// Answer a head the parser refused, then the connection closes.
async fn reject(shared: &Shared, stream: &TcpStream, e: &HeadError, info: ConnInfo, req_no: u64) {
    let started = Instant::now();
    let resp = Response::text(e.status(), true);
    let mut clock = SendClock::new(shared.config.send_grace, shared.config.min_send_rate);
    let r = send_bytes(stream, &full_text(&resp), false, false, &mut clock).await;
    record_reject(
        shared,
        info,
        req_no,
        resp.status,
        clock.body_sent,
        r.is_ok(),
        started,
    );
}

/// Counts and logs the answer to a refused head (plaintext and TLS connections alike).
pub(crate) fn record_reject(
    shared: &Shared,
    info: ConnInfo,
    req_no: u64,
    status: u16,
    bytes: u64,
    sent: bool,
    started: Instant,
) {
    shared.metrics.bad_requests.inc();
    shared.metrics.count_status(status);
    if let Some(log) = &shared.log {
        log.record(Entry {
            end: SystemTime::now(),
            service: started.elapsed(),
            client: info.peer,
            conn: info.id,
            req: req_no,
            session: None,
            method: "-".into(),
            path: "-".into(),
            range: "-".into(),
            status,
            bytes,
            bytes_mem: 0,
            bytes_disk: 0,
            outcome: if sent {
                Outcome::Done
            } else {
                Outcome::Aborted
            },
            version: None,
            host: None,
            user_agent: None,
            referer: None,
        });
    }
}

/// Per-response byte accounting.
#[derive(Debug, Default)]
pub(crate) struct Served {
    pub from_memory: u64,
    pub from_disk: u64,
}

/// Answer one request; returns whether the connection stays open.
async fn answer(
    shared: &Shared,
    stream: &TcpStream,
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
    let mut clock = SendClock::new(shared.config.send_grace, shared.config.min_send_rate);
    let mut served = Served::default();
    let send_body = req.method != Method::Head;
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
    let result = send_response(
        shared,
        stream,
        &resp,
        who,
        keep,
        send_body,
        &mut clock,
        &mut served,
    )
    .await;
    finish(
        shared, req, &resp, info, req_no, started, &clock, &served, &result,
    );
    keep && result.is_ok()
}

/// Count a finished response in the metrics and the access log (both listeners).
#[allow(clippy::too_many_arguments)]
pub(crate) fn finish(
    shared: &Shared,
    req: &Request,
    resp: &Response,
    info: ConnInfo,
    req_no: u64,
    started: Instant,
    clock: &SendClock,
    served: &Served,
    result: &Result<(), SendError>,
) {
    let outcome = match result {
        Ok(()) => Outcome::Done,
        Err(SendError::TooSlow) => Outcome::TooSlow,
        Err(SendError::Io(_)) => Outcome::Aborted,
    };
    let m = &shared.metrics;
    m.count_status(resp.status);
    m.body_bytes.inc_by(clock.body_sent);
    m.bytes_from_memory.inc_by(served.from_memory);
    m.bytes_from_disk.inc_by(served.from_disk);
    match outcome {
        Outcome::TooSlow => m.responses_too_slow.inc(),
        Outcome::Aborted => m.responses_aborted.inc(),
        Outcome::Done => 0,
    };
    if let Some(log) = &shared.log {
        log.record(Entry {
            end: SystemTime::now(),
            service: started.elapsed(),
            client: info.peer,
            conn: info.id,
            req: req_no,
            session: req.session_id.clone(),
            method: req.method.as_str().to_string(),
            path: req.target.clone(),
            range: resp.range_log.clone(),
            status: resp.status,
            bytes: clock.body_sent,
            bytes_mem: served.from_memory,
            bytes_disk: served.from_disk,
            outcome,
            version: Some(if req.minor_version == 0 {
                "HTTP/1.0"
            } else {
                "HTTP/1.1"
            }),
            host: req.host.clone(),
            user_agent: req.user_agent.clone(),
            referer: req.referer.clone(),
        });
    }
}

#[allow(clippy::too_many_arguments)]
async fn send_response(
    shared: &Shared,
    stream: &TcpStream,
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
            let mut all = head;
            all.extend_from_slice(text);
            send_bytes(stream, &all, false, false, clock).await?;
            clock.body_sent = text.len() as u64;
            Ok(())
        }
        (
            Body::File {
                file,
                path,
                file_id,
                segments,
            },
            true,
        ) if !segments.is_empty() => {
            send_bytes(stream, &head, true, false, clock).await?;
            let last = segments.len() - 1;
            for (i, seg) in segments.iter().enumerate() {
                match seg {
                    Segment::Bytes(b) => send_bytes(stream, b, i < last, true, clock).await?,
                    Segment::File(range) => {
                        send_windows(
                            shared, stream, file, path, *file_id, who, *range, clock, served,
                        )
                        .await?
                    }
                }
            }
            Ok(())
        }
        _ => send_bytes(stream, &head, false, false, clock).await,
    }
}

/// Send one file range window by window: each window is made resident by the I/O layer
/// (engine) and then sent with sendfile, or in `--io direct` from the engine's buffer pool.
#[allow(clippy::too_many_arguments)]
async fn send_windows(
    shared: &Shared,
    stream: &TcpStream,
    file: &std::sync::Arc<std::fs::File>,
    rel_path: &std::path::Path,
    file_id: u64,
    who: Requester,
    range: crate::range::ByteRange,
    clock: &mut SendClock,
    served: &mut Served,
) -> Result<(), SendError> {
    let url_path = rel_path.to_string_lossy();
    let mut first = range.first;
    while first <= range.last {
        let last = range.last.min(first + WINDOW - 1);
        let window = crate::range::ByteRange { first, last };
        let mut prep = shared
            .io
            .prepare(file, &url_path, file_id, who, window)
            .await;
        served.from_memory += prep.from_memory;
        served.from_disk += prep.from_disk;
        match prep.slices.take() {
            // The pool's chunks are let go once sent, before the manager decides on them.
            Some(slices) => send_slices(stream, &slices, clock).await?,
            None => send_file_range(stream, file, window, prep.send_blocking, clock).await?,
        }
        shared.io.sent(&prep, window);
        first = last + 1;
    }
    Ok(())
}

/// The current time as an HTTP date, formatted at most once per second per thread.
pub fn http_date() -> String {
    use std::cell::RefCell;
    thread_local! {
        static CACHE: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
    }
    let now = SystemTime::now();
    let secs = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if c.0 != secs {
            *c = (secs, httpdate::fmt_http_date(now));
        }
        c.1.clone()
    })
}
