//! One client connection: read request heads (pipelined ones too), answer them strictly in
//! order, keep the connection alive between requests, and enforce the idle timeout, the
//! header timeout and the request-per-connection limit.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use tokio::net::TcpStream;

use crate::access_log::{Entry, Outcome};
use crate::body::{send_bytes, send_file_range, send_slices, SendClock, SendError};
use crate::io::{Prepared, Requester, WINDOW};
use crate::range::{ByteRange, RangeSpec};
use crate::request::{parse_head, HeadError, Method, Parsed, Request};
use crate::response::{head_bytes, plan, Body, Response, Segment};
use crate::Shared;

/// Identity of a connection, for the access log.
#[derive(Debug, Clone, Copy)]
pub struct ConnInfo {
    pub id: u64,
    pub peer: SocketAddr,
}

/// The byte transport under the request loop: a plaintext socket (sendfile, `MSG_MORE`) or
/// a TLS session (bytes read into a buffer and encrypted by rustls). Everything above it —
/// parsing, limits, timeouts, planning, accounting — is the same code for both.
pub(crate) trait Wire {
    /// Read whatever the peer has sent into the spare capacity of `buf`; `Ok(0)` at EOF.
    async fn read_more(&mut self, buf: &mut Vec<u8>) -> std::io::Result<usize>;
    /// Hand `data` to the transport; `more` says further bytes of this response follow.
    async fn write(
        &mut self,
        data: &[u8],
        more: bool,
        is_body: bool,
        clock: &mut SendClock,
    ) -> Result<(), SendError>;
    /// Send one window of a file range the I/O layer has prepared (`prep`).
    async fn write_window(
        &mut self,
        shared: &Shared,
        file: &Arc<std::fs::File>,
        window: ByteRange,
        prep: &mut Prepared,
        clock: &mut SendClock,
    ) -> Result<(), SendError>;
    /// Push out whatever the transport still buffers of a response.
    async fn flush(&mut self, clock: &SendClock) -> Result<(), SendError>;
    /// No request is pending: give back per-connection resources kept between requests.
    fn idle(&mut self, shared: &Shared);
}

/// A plaintext connection: heads with `send(MSG_MORE)`, bodies with sendfile or, in
/// `--io direct`, `sendmsg` from the engine's buffer pool.
struct Plain(TcpStream);

impl Wire for Plain {
    async fn read_more(&mut self, buf: &mut Vec<u8>) -> std::io::Result<usize> {
        // Into the spare capacity, not zeroed first. Through `AsyncRead`, whose short read
        // marks the socket drained: the next wait goes straight to epoll instead of first
        // trying a `recv` that would only say "try again".
        tokio::io::AsyncReadExt::read_buf(&mut self.0, buf).await
    }

    async fn write(
        &mut self,
        data: &[u8],
        more: bool,
        is_body: bool,
        clock: &mut SendClock,
    ) -> Result<(), SendError> {
        send_bytes(&self.0, data, more, is_body, clock).await
    }

    async fn write_window(
        &mut self,
        _shared: &Shared,
        file: &Arc<std::fs::File>,
        window: ByteRange,
        prep: &mut Prepared,
        clock: &mut SendClock,
    ) -> Result<(), SendError> {
        match prep.slices.take() {
            // The pool's chunks are let go once sent, before the manager decides on them.
            Some(slices) => send_slices(&self.0, &slices, clock).await,
            None => send_file_range(&self.0, file, window, prep.send_blocking, clock).await,
        }
    }

    async fn flush(&mut self, _clock: &SendClock) -> Result<(), SendError> {
        Ok(())
    }

    fn idle(&mut self, _shared: &Shared) {}
}

/// Serve a plaintext connection until the client closes it, a limit ends it, or shutdown.
pub async fn serve(shared: Arc<Shared>, stream: TcpStream, info: ConnInfo) {
    requests(&shared, &mut Plain(stream), info).await;
}

/// The request loop of one connection, plaintext or TLS: read heads (pipelined ones too),
/// answer them strictly in order, keep the connection alive between requests, and
/// enforce the idle timeout, the header timeout and the request-per-connection limit.
pub(crate) async fn requests<W: Wire>(shared: &Shared, wire: &mut W, info: ConnInfo) {
    // One stop signal and one timer for the connection's life, not a fresh pair per read:
    // each would register with the shutdown channel and the timer wheel and leave them
    // again (two locks each) on every request. The flag itself is read from the sender.
    let mut stop_rx = shared.shutdown.subscribe();
    let stop = async move {
        let _ = stop_rx.wait_for(|&v| v).await;
    };
    tokio::pin!(stop);
    let timer = tokio::time::sleep(shared.config.idle_timeout);
    tokio::pin!(timer);
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
                    let specs = req.range.as_deref().and_then(crate::range::parse_range);
                    let who = requester(&req, specs.as_deref(), info);
                    stream_key = Some(who.stream);
                    let stopping = *shared.shutdown.borrow();
                    if let Some(live) = shared.live.as_ref() {
                        let path = crate::target::path_part(&req.target).ok();
                        if let Some(path) = path.filter(|p| live.covers(p)) {
                            let path = path.to_string();
                            let ctx = LiveCtx {
                                live,
                                path: &path,
                                info,
                                req_no: served,
                                stopping,
                            };
                            if !live_request(shared, wire, &mut buf, &req, &ctx).await {
                                break;
                            }
                            continue;
                        }
                    }
                    let keep = match discard_body(wire, &mut buf, &req, shared).await {
                        Ok(()) => {
                            let asked = Asked {
                                req: &req,
                                specs: specs.as_deref(),
                                who,
                            };
                            answer(shared, wire, asked, info, served, stopping).await
                        }
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
                    reject(shared, wire, &e, info, served + 1).await;
                    break;
                }
            }
        }
        let stopping = *shared.shutdown.borrow();
        if buf.is_empty() {
            wire.idle(shared);
            if stopping {
                break;
            }
        }
        let deadline = match head_started {
            Some(t) => t + shared.config.header_timeout,
            None => Instant::now() + shared.config.idle_timeout,
        };
        let deadline = tokio::time::Instant::from_std(deadline);
        // The timer is moved earlier when needed but never later: one set for an earlier
        // deadline fires early, and is then set again for the real one.
        if deadline < timer.deadline() {
            timer.as_mut().reset(deadline);
        }
        buf.reserve(4096);
        let woke = loop {
            tokio::select! {
                biased;
                r = wire.read_more(&mut buf) => break Wake::Read(r),
                () = &mut timer => {
                    if tokio::time::Instant::now() >= deadline {
                        break Wake::Timeout;
                    }
                    timer.as_mut().reset(deadline);
                }
                () = &mut stop, if buf.is_empty() => break Wake::Stop,
            }
        };
        match woke {
            Wake::Read(Ok(0) | Err(_)) | Wake::Stop => break,
            Wake::Read(Ok(_)) => {}
            Wake::Timeout => {
                if !buf.is_empty() {
                    shared.metrics.header_timeouts.inc();
                    let _ = send_text(shared, wire, &Response::text(408, true)).await;
                }
                break;
            }
        }
    }
    wire.idle(shared);
    if let Some(key) = stream_key {
        shared.io.closed(key);
    }
}

/// What ended a connection's wait for bytes.
enum Wake {
    Read(std::io::Result<usize>),
    Timeout,
    Stop,
}

/// Who asks: the memory manager's client and stream keys of a request.
fn requester(req: &Request, specs: Option<&[RangeSpec]>, info: ConnInfo) -> Requester {
    let open_ended = match specs {
        None => true,
        Some(specs) => specs
            .iter()
            .any(|s| matches!(s, crate::range::RangeSpec::From(_))),
    };
    Requester::new(
        req.session_id.as_deref(),
        info.peer.ip(),
        info.id,
        open_ended,
    )
}

/// Send a whole text response (an error answer before the connection closes).
async fn send_text<W: Wire>(
    shared: &Shared,
    wire: &mut W,
    resp: &Response,
) -> (SendClock, Result<(), SendError>) {
    let mut clock = SendClock::new(shared.config.send_grace, shared.config.min_send_rate);
    let mut r = wire.write(&full_text(resp), false, false, &mut clock).await;
    if r.is_ok() {
        r = wire.flush(&clock).await;
    }
    (clock, r)
}

/// Read and drop `req`'s body (we never use bodies outside a live source's `PUT`); too
/// large → 413, bad chunked framing → 400. `Err` when the connection must close (the
/// answer, if any, was sent).
async fn discard_body<W: Wire>(
    wire: &mut W,
    buf: &mut Vec<u8>,
    req: &Request,
    shared: &Shared,
) -> Result<(), ()> {
    if req.chunked {
        return read_chunked(wire, buf, shared.config.max_body, false, shared)
            .await
            .map(drop);
    }
    let len = req.content_length;
    if len == 0 {
        return Ok(());
    }
    if len > shared.config.max_body {
        let _ = send_text(shared, wire, &Response::text(413, true)).await;
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
        match tokio::time::timeout_at(deadline, wire.read_more(buf)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return Err(()),
        }
    }
}

/// Read a request body of `len` bytes (a live source's `PUT`): what the buffer already holds,
/// then the socket, within the header timeout plus a second per MB. `Err` when the client
/// stalled or closed (the caller answers 408 where it still can, and closes).
async fn read_body<W: Wire>(
    wire: &mut W,
    buf: &mut Vec<u8>,
    len: u64,
    shared: &Shared,
) -> Result<Vec<u8>, ()> {
    let mut out = Vec::with_capacity(len.min(8 << 20) as usize);
    let mut left = len as usize;
    let allowance = shared.config.header_timeout + std::time::Duration::from_secs(len / 1_000_000);
    let deadline = tokio::time::Instant::from_std(Instant::now() + allowance);
    loop {
        let take = left.min(buf.len());
        out.extend(buf.drain(..take));
        left -= take;
        if left == 0 {
            return Ok(out);
        }
        buf.reserve(left.min(1 << 16));
        match tokio::time::timeout_at(deadline, wire.read_more(buf)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return Err(()),
        }
    }
}

/// Read a chunked request body of at most `max` decoded bytes (kept when `keep`). The
/// sender may take as long as it likes while bytes keep coming (a live encoder writes a
/// segment as it encodes it), but not the header timeout without any. On bad framing
/// (400) or a body over `max` (413) the answer is sent here; every `Err` closes.
async fn read_chunked<W: Wire>(
    wire: &mut W,
    buf: &mut Vec<u8>,
    max: u64,
    keep: bool,
    shared: &Shared,
) -> Result<Vec<u8>, ()> {
    let mut decoder = crate::chunked::Chunked::new(max);
    let mut out = Vec::new();
    loop {
        match decoder.feed(buf, keep.then_some(&mut out)) {
            Ok(true) => return Ok(out),
            Ok(false) => {}
            Err(e) => {
                shared.metrics.bad_requests.inc();
                shared.metrics.count_status(e.status());
                let _ = send_text(shared, wire, &Response::text(e.status(), true)).await;
                return Err(());
            }
        }
        buf.reserve(1 << 16);
        let deadline =
            tokio::time::Instant::from_std(Instant::now() + shared.config.header_timeout);
        match tokio::time::timeout_at(deadline, wire.read_more(buf)).await {
            Ok(Ok(n)) if n > 0 => {}
            Ok(_) => return Err(()),
            Err(_) => {
                shared.metrics.header_timeouts.inc();
                let _ = send_text(shared, wire, &Response::text(408, true)).await;
                return Err(());
            }
        }
    }
}

/// What a live-origin request needs besides the request itself.
struct LiveCtx<'a> {
    live: &'a crate::live::LiveStore,
    /// The request path (no query).
    path: &'a str,
    info: ConnInfo,
    req_no: u64,
    stopping: bool,
}

/// A response with a status and no body (`201`, `204`).
fn status_only(status: u16) -> Response {
    Response {
        status,
        headers: String::new(),
        content_length: 0,
        body: Body::Empty,
        close: false,
        range_log: "-".into(),
    }
}

/// The live window lives in the server's memory, inside the budget the memory manager
/// hands out to the page cache: after every write or delete the manager learns its size.
fn note_live_memory(shared: &Shared, live: &crate::live::LiveStore) {
    shared.io.engine().set_other_memory(live.level().1);
}

/// Past its memory cap, the live window's oldest segments go to the spill directory
/// (`--ingest-spill`): written off the async workers, so viewers are not held up by the disk.
fn spill_live_segments(shared: &Shared, live: &crate::live::LiveStore) {
    if !live.spill_waiting() {
        return;
    }
    if let Some(store) = shared.live.clone() {
        let engine = shared.io.engine().clone();
        tokio::task::spawn_blocking(move || {
            if store.spill_pending() > 0 {
                engine.set_other_memory(store.level().1);
            }
        });
    }
}

/// Answer a request under the ingest prefix (`--ingest`): `PUT`/`DELETE` from the live
/// source, `GET`/`HEAD` from viewers (a segment not there yet is held). Returns whether the
/// connection stays open.
async fn live_request<W: Wire>(
    shared: &Shared,
    wire: &mut W,
    buf: &mut Vec<u8>,
    req: &Request,
    ctx: &LiveCtx<'_>,
) -> bool {
    use crate::live::{AuthError, LiveBody, Lookup, MAPPED_MIN};
    use std::sync::atomic::Ordering::Relaxed;
    let live = ctx.live;
    let started = Instant::now();
    let method = req.method.as_str();
    let mut clock = SendClock::new(shared.config.send_grace, shared.config.min_send_rate);
    let mut object: Option<LiveBody> = None;
    let resp = match method {
        "PUT" | "DELETE" => match live.authorize(req.authorization.as_deref()) {
            Err(e) => {
                live.counters.rejected.fetch_add(1, Relaxed);
                // The body stays unread: the connection closes after the answer.
                let mut r = Response::text(e.status(), true);
                if e == AuthError::Missing {
                    r.headers
                        .push_str("WWW-Authenticate: Bearer realm=\"vodkit-ingest\"\r\n");
                }
                r
            }
            Ok(()) if method == "DELETE" => {
                if discard_body(wire, buf, req, shared).await.is_err() {
                    return false;
                }
                let status = live.delete(ctx.path, Instant::now());
                note_live_memory(shared, live);
                if status == 204 {
                    status_only(204)
                } else {
                    Response::text(status, false)
                }
            }
            Ok(()) if req.content_length > live.config.max_object => {
                live.counters.rejected.fetch_add(1, Relaxed);
                Response::text(413, true)
            }
            Ok(()) => {
                if req.expect_continue && req.has_body() {
                    let r = wire
                        .write(b"HTTP/1.1 100 Continue\r\n\r\n", false, false, &mut clock)
                        .await;
                    if r.is_err() || wire.flush(&clock).await.is_err() {
                        return false;
                    }
                }
                let body = if req.chunked {
                    match read_chunked(wire, buf, live.config.max_object, true, shared).await {
                        Ok(body) => Ok(body),
                        Err(()) => {
                            // Answered (400, 413, 408) or gone: the connection closes.
                            live.counters.rejected.fetch_add(1, Relaxed);
                            return false;
                        }
                    }
                } else {
                    read_body(wire, buf, req.content_length, shared).await
                };
                match body {
                    Ok(body) => {
                        let status = live.put(ctx.path, body, Instant::now());
                        spill_live_segments(shared, live);
                        note_live_memory(shared, live);
                        match status {
                            s @ (201 | 204) => status_only(s),
                            s => Response::text(s, false),
                        }
                    }
                    Err(()) => {
                        shared.metrics.header_timeouts.inc();
                        let _ = send_text(shared, wire, &Response::text(408, true)).await;
                        return false;
                    }
                }
            }
        },
        "GET" | "HEAD" => {
            if discard_body(wire, buf, req, shared).await.is_err() {
                return false;
            }
            let now = Instant::now();
            let found = match live.get(ctx.path, now) {
                Lookup::Found(o) => Some(o),
                Lookup::Missing { hold: false } => None,
                Lookup::Missing { hold: true } => {
                    live.counters.held.fetch_add(1, Relaxed);
                    let o = live.wait_for(ctx.path, now + live.config.hold).await;
                    if o.is_none() {
                        live.counters.hold_timeouts.fetch_add(1, Relaxed);
                    }
                    o
                }
            };
            match found {
                Some(o) => {
                    let name = ctx.path.rsplit('/').next().unwrap_or("");
                    let mut headers = format!(
                        "Content-Type: {}\r\nCache-Control: {}\r\nETag: {}\r\nLast-Modified: {}\r\n",
                        crate::live::content_type(name),
                        crate::live::cache_control(name),
                        o.etag,
                        httpdate::fmt_http_date(o.modified)
                    );
                    if let Some(cors) = &shared.plan.cors {
                        cors.response_headers(req.origin.as_deref(), &mut headers);
                    }
                    let r = Response {
                        status: 200,
                        headers,
                        content_length: o.body.len(),
                        body: Body::Empty,
                        close: false,
                        range_log: "-".into(),
                    };
                    object = Some(o.body);
                    r
                }
                None => Response::text(404, false),
            }
        }
        _ => {
            let mut r = Response::text(405, true);
            r.headers.push_str("Allow: GET, HEAD, PUT, DELETE\r\n");
            r
        }
    };
    let keep = req.wants_keep_alive() && !resp.close && !ctx.stopping;
    let head = with_http_date(|date| head_bytes(&resp, date, keep));
    let send_body = method != "HEAD";
    let mut result = match (&object, &resp.body) {
        // Small objects go out with the head in one call.
        (Some(LiveBody::Memory(bytes)), _) if send_body && (bytes.len() as u64) < MAPPED_MIN => {
            let mut all = head;
            all.extend_from_slice(bytes);
            let r = wire.write(&all, false, false, &mut clock).await;
            if r.is_ok() {
                clock.body_sent = bytes.len() as u64;
            }
            r
        }
        // Large ones left on the heap (past the store's file budget): not copied once more.
        (Some(LiveBody::Memory(bytes)), _) if send_body => {
            match wire.write(&head, true, false, &mut clock).await {
                Ok(()) => wire.write(bytes, false, true, &mut clock).await,
                e => e,
            }
        }
        // Segments with sendfile from their memory file (or spill file, which may have
        // to be read from the disk: off the async workers).
        (Some(LiveBody::Mapped(f) | LiveBody::Spilled(f)), _) if send_body && f.len > 0 => {
            let mut prep = Prepared {
                send_blocking: matches!(object, Some(LiveBody::Spilled(_))),
                ..Prepared::default()
            };
            let window = ByteRange {
                first: 0,
                last: f.len - 1,
            };
            match wire.write(&head, true, false, &mut clock).await {
                Ok(()) => {
                    wire.write_window(shared, &f.file, window, &mut prep, &mut clock)
                        .await
                }
                e => e,
            }
        }
        (None, Body::Text(text)) if send_body => {
            let mut all = head;
            all.extend_from_slice(text);
            clock.body_sent = text.len() as u64;
            wire.write(&all, false, false, &mut clock).await
        }
        _ => wire.write(&head, false, false, &mut clock).await,
    };
    if result.is_ok() {
        result = wire.flush(&clock).await;
    }
    finish(
        shared,
        req,
        &resp,
        ctx.info,
        ctx.req_no,
        started,
        &clock,
        &Served::default(),
        &result,
    );
    keep && result.is_ok()
}

pub(crate) fn full_text(resp: &Response) -> Vec<u8> {
    let mut out = with_http_date(|date| head_bytes(resp, date, !resp.close));
    if let Body::Text(b) = &resp.body {
        out.extend_from_slice(b);
    }
    out
}

/// Answer a head the parser refused, then the connection closes.
async fn reject<W: Wire>(
    shared: &Shared,
    wire: &mut W,
    e: &HeadError,
    info: ConnInfo,
    req_no: u64,
) {
    let started = Instant::now();
    let resp = Response::text(e.status(), true);
    let (clock, r) = send_text(shared, wire, &resp).await;
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

/// Counts and logs the answer to a refused head.
fn record_reject(
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
            status,
            bytes,
            outcome: if sent {
                Outcome::Done
            } else {
                Outcome::Aborted
            },
            ..Entry::ending_now(info.peer, info.id, req_no, started.elapsed())
        });
    }
}

/// Per-response byte accounting.
#[derive(Debug, Default)]
pub(crate) struct Served {
    pub from_memory: u64,
    pub from_disk: u64,
}

/// A request as the answer needs it: the head, its `Range` parsed once, and who asks.
struct Asked<'a> {
    req: &'a Request,
    specs: Option<&'a [RangeSpec]>,
    who: Requester,
}

/// Answer one request; returns whether the connection stays open.
async fn answer<W: Wire>(
    shared: &Shared,
    wire: &mut W,
    asked: Asked<'_>,
    info: ConnInfo,
    req_no: u64,
    shutting_down: bool,
) -> bool {
    let Asked { req, specs, who } = asked;
    let started = Instant::now();
    let mut resp = plan(req, specs, &shared.root, &shared.plan);
    if let Some(refusal) = admit(shared, req, &resp, who) {
        resp = refusal;
    }
    let at_limit = shared
        .config
        .max_requests_per_connection
        .is_some_and(|max| req_no >= max);
    let keep = req.wants_keep_alive() && !resp.close && !at_limit && !shutting_down;
    let mut clock = SendClock::new(shared.config.send_grace, shared.config.min_send_rate);
    let mut served = Served::default();
    let send_body = req.method != Method::Head;
    let mut result = send_response(
        shared,
        wire,
        &resp,
        who,
        keep,
        send_body,
        &mut clock,
        &mut served,
    )
    .await;
    if result.is_ok() {
        result = wire.flush(&clock).await;
    }
    if let Err(SendError::Disk(e)) = &result {
        read_error(shared, req, &resp, e);
        if clock.nothing_sent() {
            // Nothing went out: answer 500 instead (503 with Retry-After when the device
            // is failing as a whole: another origin may have the file), and close.
            let failed = match &resp.body {
                Body::File { file, .. } if shared.io.engine().device_failing(file) => {
                    let mut r = Response::text(503, true);
                    r.headers
                        .push_str(&format!("Retry-After: {FAILING_RETRY_AFTER_S}\r\n"));
                    r
                }
                _ => Response::text(500, true),
            };
            let (clock, _) = send_text(shared, wire, &failed).await;
            let none = Served::default();
            finish(
                shared, req, &failed, info, req_no, started, &clock, &none, &result,
            );
            return false;
        }
    }
    finish(
        shared, req, &resp, info, req_no, started, &clock, &served, &result,
    );
    keep && result.is_ok()
}

/// `Retry-After` of the 503 answered when a device is failing as a whole.
const FAILING_RETRY_AFTER_S: u32 = 30;

/// `--admission`: a GET of a file range that starts a new stream may be refused, with
/// `503`, `Retry-After` and a closed connection; continuations of open streams never are.
fn admit(shared: &Shared, req: &Request, resp: &Response, who: Requester) -> Option<Response> {
    use crate::admission::{AdmissionPolicy, Decision};
    // The policy is fixed for the server's life: no lock on the way of every request.
    if shared.config.admission == AdmissionPolicy::Off || req.method != Method::Get {
        return None;
    }
    let Body::File {
        file,
        facts,
        segments,
        ..
    } = &resp.body
    else {
        return None;
    };
    let offset = match segments.first() {
        Some(Segment::File(r)) => r.first,
        _ => 0,
    };
    let load = shared.io.new_stream(who, facts.id(), file, offset)?;
    let now = shared.io.engine().now_s();
    let (decision, limit) = {
        let mut a = shared.admission.lock().unwrap_or_else(|p| p.into_inner());
        (a.decide(now, &load), a.limit)
    };
    let m = &shared.metrics;
    m.streams_active.set(load.streams as i64);
    if let Some(l) = limit {
        m.admission_limit.set(l.round() as i64);
    }
    match decision {
        Decision::Admit => {
            m.streams_admitted.inc();
            None
        }
        Decision::Refuse { retry_after_s } => {
            m.streams_refused.inc();
            let mut r = Response::text(503, true);
            r.headers
                .push_str(&format!("Retry-After: {retry_after_s}\r\n"));
            Some(r)
        }
    }
}

/// One log line and one count per response the disk failed.
fn read_error(shared: &Shared, req: &Request, resp: &Response, e: &std::io::Error) {
    let device = match &resp.body {
        Body::File { file, .. } => shared.io.device_of(file).to_string(),
        Body::Text(_) | Body::Empty => "-".to_string(),
    };
    shared
        .metrics
        .read_errors
        .get_or_create(&vec![("device".to_string(), device.clone())])
        .inc();
    shared.metrics.read_errors_all.inc();
    tracing::warn!(
        "read error on {device}: {} bytes {}: {e}",
        crate::target::path_part(&req.target).unwrap_or(&req.target),
        resp.range_log
    );
}

/// Count a finished response in the metrics and the access log.
#[allow(clippy::too_many_arguments)]
fn finish(
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
        Err(SendError::Disk(_)) => Outcome::ReadError,
    };
    let m = &shared.metrics;
    m.count_status(resp.status);
    m.body_bytes.inc_by(clock.body_sent);
    m.bytes_from_memory.inc_by(served.from_memory);
    m.bytes_from_disk.inc_by(served.from_disk);
    match outcome {
        Outcome::TooSlow => m.responses_too_slow.inc(),
        Outcome::Aborted => m.responses_aborted.inc(),
        Outcome::Done | Outcome::ReadError => 0,
    };
    if let Some(log) = &shared.log {
        log.record(Entry {
            session: req.session_id.as_deref().map(Cow::Borrowed),
            method: Cow::Borrowed(req.method.as_str()),
            path: Cow::Borrowed(&req.target),
            range: Cow::Borrowed(&resp.range_log),
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
            host: req.host.as_deref().map(Cow::Borrowed),
            user_agent: req.user_agent.as_deref().map(Cow::Borrowed),
            referer: req.referer.as_deref().map(Cow::Borrowed),
            ..Entry::ending_now(info.peer, info.id, req_no, started.elapsed())
        });
    }
}

#[allow(clippy::too_many_arguments)]
async fn send_response<W: Wire>(
    shared: &Shared,
    wire: &mut W,
    resp: &Response,
    who: Requester,
    keep: bool,
    send_body: bool,
    clock: &mut SendClock,
    served: &mut Served,
) -> Result<(), SendError> {
    let head = with_http_date(|date| head_bytes(resp, date, keep));
    match (&resp.body, send_body) {
        (Body::Text(text), true) => {
            // Small: head and body leave in one write.
            let mut all = head;
            all.extend_from_slice(text);
            wire.write(&all, false, false, clock).await?;
            clock.body_sent = text.len() as u64;
            Ok(())
        }
        (
            Body::File {
                file,
                path,
                facts,
                segments,
            },
            true,
        ) if !segments.is_empty() => {
            let url_path = path.to_string_lossy();
            let target = Target {
                file,
                url_path: &url_path,
                facts: *facts,
                who,
            };
            // The first window is read before the head goes out: a file the disk cannot
            // read gets an error status, not a 206 that breaks off after its head.
            let mut ready = match segments.first() {
                Some(Segment::File(range)) => {
                    let w = prepare(shared, &target, first_window(*range), served).await;
                    if let Some(e) = &w.1.read_error {
                        return Err(SendError::Disk(e.clone()));
                    }
                    Some(w)
                }
                _ => None,
            };
            wire.write(&head, true, false, clock).await?;
            let last = segments.len() - 1;
            for (i, seg) in segments.iter().enumerate() {
                match seg {
                    Segment::Bytes(b) => wire.write(b, i < last, true, clock).await?,
                    Segment::File(range) => {
                        let first = ready.take();
                        send_windows(shared, wire, &target, *range, first, clock, served).await?
                    }
                }
            }
            Ok(())
        }
        _ => wire.write(&head, false, false, clock).await,
    }
}

/// The file a range is sent from.
struct Target<'a> {
    file: &'a Arc<std::fs::File>,
    url_path: &'a str,
    facts: vodkit_prefetch::FileFacts,
    who: Requester,
}

/// The first window of `range`.
fn first_window(range: ByteRange) -> ByteRange {
    ByteRange {
        first: range.first,
        last: range.last.min(range.first + WINDOW - 1),
    }
}

/// Have the I/O layer (engine) make `window` resident, or read it into its direct-I/O pool.
async fn prepare(
    shared: &Shared,
    t: &Target<'_>,
    window: ByteRange,
    served: &mut Served,
) -> (ByteRange, Prepared) {
    let prep = shared
        .io
        .prepare(t.file, t.url_path, t.facts, t.who, window)
        .await;
    served.from_memory += prep.from_memory;
    served.from_disk += prep.from_disk;
    (window, prep)
}

/// Send one file range window by window, each prepared by the I/O layer and then sent by
/// the wire; `ready` is its first window when already prepared.
async fn send_windows<W: Wire>(
    shared: &Shared,
    wire: &mut W,
    t: &Target<'_>,
    range: ByteRange,
    mut ready: Option<(ByteRange, Prepared)>,
    clock: &mut SendClock,
    served: &mut Served,
) -> Result<(), SendError> {
    let mut first = range.first;
    while first <= range.last {
        let window = first_window(ByteRange {
            first,
            last: range.last,
        });
        let mut prep = match ready.take() {
            Some((w, p)) if w == window => p,
            _ => prepare(shared, t, window, served).await.1,
        };
        if let Some(e) = prep.read_error.take() {
            return Err(SendError::Disk(e));
        }
        wire.write_window(shared, t.file, window, &mut prep, clock)
            .await
            .map_err(SendError::classify)?;
        shared.io.sent(&prep, window);
        first = window.last + 1;
    }
    Ok(())
}

/// Run `f` on the current time as an HTTP date, formatted at most once per second per
/// thread and lent, not copied, to every response of that second.
pub fn with_http_date<R>(f: impl FnOnce(&str) -> R) -> R {
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
        f(&c.1)
    })
}
