//! HTTP/2 connections, on the `h2` crate: over TLS when ALPN chose `h2`, in plaintext when
//! the connection opens with the HTTP/2 preface (h2c by prior knowledge).
//!
//! Each stream is answered by the same router and handlers as an HTTP/1.1 request
//! ([`crate::handler::route`]) through a [`Wire`] of its own: the request's pseudo-headers
//! and fields are written out as an HTTP/1.1 head and parsed by [`parse_head`] (so the
//! same limits and fields apply), and the HTTP/1.1 head the handler writes back is turned
//! into a HEADERS frame (connection-specific fields dropped). Bodies go out as DATA frames
//! as the client's flow-control windows allow: each piece of a file is read from the page
//! cache only once the stream has been granted room for it, so a stream whose window never
//! opens holds no body in memory and ends at the minimum send rate like a slow HTTP/1.1
//! reader. There is no sendfile over HTTP/2 (frames are built in user space). A body of
//! unknown length (a live segment read while it is uploaded: the handler writes it chunked)
//! goes out in DATA frames as its pieces arrive; a stream whose body stops before its last
//! chunk is reset, never ended as complete.
//!
//! Hostile clients: at most `max_streams` streams are answered at once (further ones wait
//! in `h2`'s accept queue, and the connection is not read for new ones meanwhile); streams
//! the client resets before their answer is done, or leaves unread until the minimum send
//! rate ends them, spend a per-connection allowance ([`ResetBudget`]) whose exhaustion closes
//! the connection with `GOAWAY(ENHANCE_YOUR_CALM)` (the rapid-reset attack,
//! CVE-2023-44487); `h2` itself bounds streams reset before they are accepted, the resets
//! its peer's protocol errors cause, and header blocks (CONTINUATION floods) by
//! `SETTINGS_MAX_HEADER_LIST_SIZE`.

use std::collections::HashSet;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

use crate::body::{SendClock, SendError};
use crate::chunked::Chunked;
use crate::conn::reject;
use crate::handler::{route, Asked};
use crate::range::ByteRange;
use crate::request::{parse_head, HeadError, Parsed};
use crate::wire::{ConnInfo, Wire};
use crate::Shared;

/// The client connection preface of HTTP/2 (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Largest piece of a file read for one DATA send (`h2` cuts it into frames).
const PIECE: u64 = 256 << 10;

/// Streams reset by the client before they were accepted, queued at once, past which `h2`
/// closes the connection with `ENHANCE_YOUR_CALM`.
const PENDING_ACCEPT_RESETS: usize = 20;

/// Streams `h2` may reset for the client's protocol errors before it closes the
/// connection with `ENHANCE_YOUR_CALM`.
const LOCAL_ERROR_RESETS: usize = 256;

/// Locally reset streams whose state `h2` keeps (to ignore their late frames).
const KEPT_RESETS: usize = 200;

/// How long a connection sent away for spending its reset allowance may take to flush its
/// GOAWAY before it is dropped. (One sent away gracefully — idle, at `--max-requests`, or
/// the server stopping — has the drain timeout to finish its streams.)
const GOAWAY_WAIT: Duration = Duration::from_secs(5);

/// Whether the connection opens with the HTTP/2 preface, looked at without taking any of
/// it; `false` as soon as the first bytes differ (an HTTP/1.1 request), at EOF, or when no
/// decision came within `wait`.
pub(crate) async fn sniff_preface(stream: &TcpStream, wait: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + wait;
    let mut buf = [0u8; PREFACE.len()];
    let mut seen = 0;
    loop {
        let n = match tokio::time::timeout_at(deadline, stream.peek(&mut buf)).await {
            Ok(Ok(n)) => n,
            _ => return false,
        };
        if n == 0 || buf[..n] != PREFACE[..n] {
            return false;
        }
        if n == PREFACE.len() {
            return true;
        }
        if n == seen {
            // Only part of the preface is here: peek again a little later (a peek with no
            // new bytes is ready at once).
            if tokio::time::timeout_at(deadline, tokio::time::sleep(Duration::from_millis(5)))
                .await
                .is_err()
            {
                return false;
            }
        }
        seen = n;
    }
}

/// The allowance of streams a client may reset (or leave unread until the minimum send
/// rate ends them) on one connection: `burst` at once, refilled at `per_s` a second. Pure:
/// the caller passes the time.
#[derive(Debug, Clone)]
pub(crate) struct ResetBudget {
    tokens: f64,
    burst: f64,
    per_s: f64,
    at: Instant,
}

impl ResetBudget {
    pub fn new(burst: u32, per_s: f64, now: Instant) -> ResetBudget {
        ResetBudget {
            tokens: f64::from(burst),
            burst: f64::from(burst),
            per_s: per_s.max(0.0),
            at: now,
        }
    }

    /// Spend one reset at `now`; `false` when the allowance is used up.
    pub fn spend(&mut self, now: Instant) -> bool {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.at = self.at.max(now);
        self.tokens = (self.tokens + dt * self.per_s).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// How a stream's answer ended, for the connection's reset allowance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// Answered (or refused) and ended normally.
    Done,
    /// The client reset the stream before its answer was done.
    PeerReset,
    /// The client did not open its window (or read) at the minimum send rate.
    TooSlow,
    /// The answer failed on the server's side (the disk), or the task did not finish.
    Failed,
}

/// What the connection loop waits for next from `h2`.
enum Next {
    Stream(Box<(http::Request<RecvStream>, SendResponse<Bytes>)>),
    Closed,
}

/// Serve one HTTP/2 connection (its preface not yet read) until the client closes it, it
/// idles out, it spends its reset allowance, or the server stops.
pub(crate) async fn serve<T>(shared: Arc<Shared>, io: T, mut info: ConnInfo)
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Some(settings) = shared.config.http2.clone() else {
        return;
    };
    info.http2 = true;
    let m = &shared.metrics;
    m.h2_connections.inc();
    let max_head = u32::try_from(shared.config.limits.max_head_bytes).unwrap_or(u32::MAX);
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(settings.max_streams)
        .initial_window_size(settings.stream_window)
        .initial_connection_window_size(settings.connection_window)
        .max_header_list_size(max_head)
        .max_send_buffer_size(settings.send_buffer)
        .max_pending_accept_reset_streams(PENDING_ACCEPT_RESETS)
        .max_local_error_reset_streams(Some(LOCAL_ERROR_RESETS))
        .max_concurrent_reset_streams(KEPT_RESETS);
    let handshake = builder.handshake::<_, Bytes>(io);
    let mut conn = match tokio::time::timeout(shared.config.header_timeout, handshake).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            tracing::debug!("conn {} from {}: HTTP/2 preface: {e}", info.id, info.peer);
            return;
        }
        Err(_) => {
            m.header_timeouts.inc();
            return;
        }
    };
    let max_streams = settings.max_streams.max(1) as usize;
    let mut budget = ResetBudget::new(settings.reset_burst, settings.resets_per_s, Instant::now());
    let mut tasks: JoinSet<(Ended, Option<u64>)> = JoinSet::new();
    let mut keys: HashSet<u64> = HashSet::new();
    let mut stop_rx = shared.shutdown.subscribe();
    let mut stopping = *shared.shutdown.borrow();
    let mut going_away = false;
    let mut req_no = 0u64;
    let idle = tokio::time::sleep(shared.config.idle_timeout);
    tokio::pin!(idle);
    let drain = shared.config.drain_timeout;
    let later = |d: Duration| tokio::time::Instant::now() + d;
    if stopping {
        conn.graceful_shutdown();
        going_away = true;
        idle.as_mut().reset(later(drain));
    }
    loop {
        let room = tasks.len() < max_streams;
        // At the stream limit the connection is still driven (frames of the streams being
        // answered go out), but no new stream is taken.
        let next = async {
            if room {
                match conn.accept().await {
                    Some(Ok(pair)) => Next::Stream(Box::new(pair)),
                    Some(Err(e)) => {
                        tracing::debug!("conn {} from {}: HTTP/2: {e}", info.id, info.peer);
                        Next::Closed
                    }
                    None => Next::Closed,
                }
            } else {
                let _ = std::future::poll_fn(|cx| conn.poll_closed(cx)).await;
                Next::Closed
            }
        };
        tokio::select! {
            biased;
            Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                m.h2_streams_open.dec();
                let (ended, key) = done.unwrap_or((Ended::Failed, None));
                keys.extend(key);
                if ended == Ended::PeerReset {
                    m.h2_peer_resets.inc();
                }
                if matches!(ended, Ended::PeerReset | Ended::TooSlow)
                    && !budget.spend(Instant::now())
                    && !going_away
                {
                    m.h2_calmed.inc();
                    tracing::debug!(
                        "conn {} from {}: HTTP/2 reset allowance spent: GOAWAY",
                        info.id,
                        info.peer
                    );
                    conn.abrupt_shutdown(Reason::ENHANCE_YOUR_CALM);
                    going_away = true;
                    idle.as_mut().reset(later(GOAWAY_WAIT));
                }
                if tasks.is_empty() && !going_away {
                    idle.as_mut().reset(later(shared.config.idle_timeout));
                }
            }
            next = next => match next {
                Next::Stream(pair) => {
                    let (req, respond) = *pair;
                    req_no += 1;
                    m.h2_streams.inc();
                    m.h2_streams_open.inc();
                    let stopping = stopping || *shared.shutdown.borrow();
                    tasks.spawn(answer(shared.clone(), req, respond, info, req_no, stopping));
                    let at_limit = shared
                        .config
                        .max_requests_per_connection
                        .is_some_and(|max| req_no >= max);
                    if at_limit && !going_away {
                        // `--max-requests`: no stream after this one.
                        conn.graceful_shutdown();
                        going_away = true;
                        idle.as_mut().reset(later(drain));
                    }
                }
                Next::Closed => break,
            },
            () = &mut idle, if tasks.is_empty() || going_away => {
                if going_away {
                    // It had its time to say goodbye.
                    break;
                }
                conn.graceful_shutdown();
                going_away = true;
                idle.as_mut().reset(later(drain));
            }
            _ = stop_rx.wait_for(|&v| v), if !stopping => {
                stopping = true;
                if !going_away {
                    conn.graceful_shutdown();
                    going_away = true;
                    // Streams in flight finish under the server's drain timeout.
                    idle.as_mut().reset(later(drain));
                }
            }
        }
    }
    let left = tasks.len() as i64;
    tasks.shutdown().await;
    m.h2_streams_open.dec_by(left);
    for key in keys {
        shared.io.closed(key);
    }
}

/// Answer one stream through the router; returns how it ended and the memory manager's
/// stream key of its request.
async fn answer(
    shared: Arc<Shared>,
    req: http::Request<RecvStream>,
    respond: SendResponse<Bytes>,
    info: ConnInfo,
    req_no: u64,
    stopping: bool,
) -> (Ended, Option<u64>) {
    let (parts, body) = req.into_parts();
    // A body without a declared length reaches the handlers in chunked framing.
    let chunked_in =
        !body.is_end_stream() && !parts.headers.contains_key(http::header::CONTENT_LENGTH);
    let head = h1_head(&parts, chunked_in);
    let mut wire = H2Wire::new(respond, body, chunked_in);
    let key = match parse_head(&head, &shared.config.limits) {
        Ok(Parsed::Complete(req, _)) => {
            let specs = req.range.as_deref().and_then(crate::range::parse_range);
            let asked = Asked::new(&req, specs.as_deref(), info, req_no, stopping);
            let key = asked.who.stream;
            let mut buf = Vec::new();
            route(&shared, &mut wire, &mut buf, asked).await;
            Some(key)
        }
        Ok(Parsed::Partial) => {
            let e = HeadError::Malformed("incomplete request");
            reject(&shared, &mut wire, &e, info, req_no).await;
            None
        }
        Err(e) => {
            reject(&shared, &mut wire, &e, info, req_no).await;
            None
        }
    };
    (wire.finish(), key)
}

/// The HTTP/1.1 head equivalent to an HTTP/2 request's pseudo-headers and fields:
/// `:authority` becomes `Host`, and a body of no declared length is announced as chunked.
fn h1_head(parts: &http::request::Parts, chunked: bool) -> Vec<u8> {
    let target = parts
        .uri
        .path_and_query()
        .map_or("/", http::uri::PathAndQuery::as_str);
    let mut head = Vec::with_capacity(256);
    head.extend_from_slice(parts.method.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(target.as_bytes());
    head.extend_from_slice(b" HTTP/1.1\r\n");
    let authority = parts.uri.authority();
    if let Some(a) = authority {
        head.extend_from_slice(b"Host: ");
        head.extend_from_slice(a.as_str().as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    for (name, value) in &parts.headers {
        if authority.is_some() && name == http::header::HOST {
            continue;
        }
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    if chunked {
        head.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
    }
    head.extend_from_slice(b"\r\n");
    head
}

/// Fields of an HTTP/1.1 head that HTTP/2 forbids (RFC 9113 §8.2.2).
const CONNECTION_SPECIFIC: [&str; 5] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

/// An HTTP/1.1 response head, as HTTP/2 sends it.
#[derive(Debug)]
struct Head {
    response: http::Response<()>,
    /// The head's length in the bytes written (a body may follow in the same write).
    len: usize,
    /// The body length the head announced (`Content-Length`).
    length: Option<u64>,
    /// The body follows in chunked framing.
    chunked: bool,
}

/// Read the HTTP/1.1 head a handler wrote at the start of `bytes`.
fn translate_head(bytes: &[u8]) -> Result<Head, String> {
    let mut slots = [httparse::EMPTY_HEADER; 128];
    let mut parsed = httparse::Response::new(&mut slots);
    let len = match parsed.parse(bytes) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Err("incomplete response head".into()),
        Err(e) => return Err(format!("response head: {e}")),
    };
    let status = parsed.code.ok_or("response head without a status")?;
    let mut response = http::Response::builder().status(status);
    let mut length = None;
    let mut chunked = false;
    for h in parsed.headers.iter() {
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = h.value.eq_ignore_ascii_case(b"chunked");
        }
        if CONNECTION_SPECIFIC
            .iter()
            .any(|c| h.name.eq_ignore_ascii_case(c))
        {
            continue;
        }
        if h.name.eq_ignore_ascii_case("content-length") {
            length = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse().ok());
        }
        response = response.header(h.name, h.value);
    }
    let response = response
        .body(())
        .map_err(|e| format!("response head: {e}"))?;
    Ok(Head {
        response,
        len,
        length,
        chunked,
    })
}

/// One stream as the handlers' transport: the request body from its DATA frames, the
/// response head as HEADERS and its body as DATA frames within the flow-control windows.
struct H2Wire {
    /// Until the head is sent.
    respond: Option<SendResponse<Bytes>>,
    /// Once the head is sent (and the stream not yet ended).
    send: Option<SendStream<Bytes>>,
    body: RecvStream,
    /// The request body is handed to the handlers in chunked framing.
    chunked_in: bool,
    body_done: bool,
    /// Body bytes the head announced and not yet sent.
    left: Option<u64>,
    /// The response body is written in chunked framing: decoded before it is sent.
    dechunk: Option<(Chunked, Vec<u8>)>,
    /// The chunked body's last chunk was written (without it the answer is cut).
    dechunked_all: bool,
    /// END_STREAM was sent.
    ended: bool,
    /// A write failed (the answer is incomplete).
    failed: bool,
    peer_reset: bool,
    too_slow: bool,
}

impl H2Wire {
    fn new(respond: SendResponse<Bytes>, body: RecvStream, chunked_in: bool) -> H2Wire {
        H2Wire {
            respond: Some(respond),
            send: None,
            body,
            chunked_in,
            body_done: false,
            left: None,
            dechunk: None,
            dechunked_all: false,
            ended: false,
            failed: false,
            peer_reset: false,
            too_slow: false,
        }
    }

    /// An `h2` error as the handlers' send error, noting a reset by the client.
    fn failure(&mut self, e: h2::Error) -> SendError {
        self.failed = true;
        if e.is_reset() && e.is_remote() {
            self.peer_reset = true;
        }
        SendError::Io(io::Error::new(io::ErrorKind::BrokenPipe, e))
    }

    /// Wait until the stream may send at least one byte (at most `want`); fails when the
    /// send-rate deadline passes first.
    async fn room(&mut self, want: usize, clock: &SendClock) -> Result<usize, SendError> {
        let Some(send) = self.send.as_mut() else {
            return Err(SendError::Io(io::ErrorKind::NotConnected.into()));
        };
        send.reserve_capacity(want);
        let deadline = tokio::time::Instant::from_std(clock.deadline());
        loop {
            let have = send.capacity();
            if have > 0 {
                return Ok(have.min(want));
            }
            let granted = tokio::time::timeout_at(
                deadline,
                std::future::poll_fn(|cx| send.poll_capacity(cx)),
            )
            .await;
            match granted {
                Err(_) => {
                    self.failed = true;
                    self.too_slow = true;
                    return Err(SendError::TooSlow);
                }
                Ok(None) => {
                    // The stream closed under us: by the client's RST_STREAM, or with the
                    // connection.
                    self.failed = true;
                    let reset = std::future::poll_fn(|cx| {
                        std::task::Poll::Ready(matches!(
                            send.poll_reset(cx),
                            std::task::Poll::Ready(Ok(_))
                        ))
                    })
                    .await;
                    self.peer_reset |= reset;
                    return Err(SendError::Io(io::ErrorKind::BrokenPipe.into()));
                }
                Ok(Some(Err(e))) => return Err(self.failure(e)),
                Ok(Some(Ok(_))) => {}
            }
        }
    }

    /// Send `piece` (no longer than the room granted), ending the stream when it is the
    /// last of the announced body or `last` says so.
    fn push(
        &mut self,
        piece: Bytes,
        last: bool,
        is_body: bool,
        clock: &mut SendClock,
    ) -> Result<(), SendError> {
        let n = piece.len() as u64;
        let end = last || self.left == Some(n);
        let Some(send) = self.send.as_mut() else {
            return Err(SendError::Io(io::ErrorKind::NotConnected.into()));
        };
        if let Err(e) = send.send_data(piece, end) {
            return Err(self.failure(e));
        }
        clock.count(n, is_body);
        if let Some(l) = self.left.as_mut() {
            *l = l.saturating_sub(n);
        }
        if end {
            self.ended = true;
        }
        Ok(())
    }

    /// Send body bytes as the windows allow; `last`: the response ends with them.
    async fn send_body(
        &mut self,
        mut data: Bytes,
        last: bool,
        is_body: bool,
        clock: &mut SendClock,
    ) -> Result<(), SendError> {
        if self.ended {
            return Ok(());
        }
        if data.is_empty() {
            return if last {
                self.push(data, true, is_body, clock)
            } else {
                Ok(())
            };
        }
        while !data.is_empty() && !self.ended {
            let n = self.room(data.len(), clock).await?;
            let piece = data.split_to(n);
            self.push(piece, last && data.is_empty(), is_body, clock)?;
        }
        Ok(())
    }

    /// Body bytes as the handler wrote them, decoded first when it wrote chunked framing.
    fn unframe(&mut self, data: &[u8]) -> Result<Bytes, SendError> {
        match self.dechunk.as_mut() {
            None => Ok(Bytes::copy_from_slice(data)),
            Some((decoder, pending)) => {
                pending.extend_from_slice(data);
                let mut out = Vec::with_capacity(pending.len());
                let all = decoder
                    .feed(pending, Some(&mut out))
                    .map_err(|e| SendError::Io(io::Error::other(format!("{e:?}"))))?;
                self.dechunked_all |= all;
                Ok(Bytes::from(out))
            }
        }
    }

    /// End the stream after the handler returned: END_STREAM when the answer is whole, a
    /// reset when it is not (a short body, a chunked one without its last chunk: so the
    /// client never takes a cut body as complete) or when no answer was made.
    fn finish(mut self) -> Ended {
        if !self.ended {
            let whole = !self.failed
                && self.left.is_none_or(|l| l == 0)
                && (self.dechunk.is_none() || self.dechunked_all);
            match (self.send.as_mut(), self.respond.as_mut()) {
                (Some(send), _) if whole => {
                    if send.send_data(Bytes::new(), true).is_err() {
                        self.failed = true;
                    }
                }
                (Some(send), _) => send.send_reset(if self.too_slow {
                    Reason::CANCEL
                } else {
                    Reason::INTERNAL_ERROR
                }),
                (None, Some(respond)) => respond.send_reset(Reason::INTERNAL_ERROR),
                (None, None) => {}
            }
        }
        if self.peer_reset {
            Ended::PeerReset
        } else if self.too_slow {
            Ended::TooSlow
        } else if self.failed {
            Ended::Failed
        } else {
            Ended::Done
        }
    }
}

impl Wire for H2Wire {
    async fn read_more(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        let before = buf.len();
        while !self.body_done && buf.len() == before {
            match self.body.data().await {
                Some(Ok(data)) => {
                    let n = data.len();
                    let _ = self.body.flow_control().release_capacity(n);
                    if n == 0 {
                        continue;
                    }
                    if self.chunked_in {
                        buf.extend_from_slice(format!("{n:x}\r\n").as_bytes());
                        buf.extend_from_slice(&data);
                        buf.extend_from_slice(b"\r\n");
                    } else {
                        buf.extend_from_slice(&data);
                    }
                }
                Some(Err(e)) => {
                    if e.is_reset() && e.is_remote() {
                        self.peer_reset = true;
                    }
                    return Err(io::Error::new(io::ErrorKind::ConnectionReset, e));
                }
                None => {
                    self.body_done = true;
                    if self.chunked_in {
                        buf.extend_from_slice(b"0\r\n\r\n");
                    }
                }
            }
        }
        Ok(buf.len() - before)
    }

    async fn write(
        &mut self,
        data: &[u8],
        more: bool,
        is_body: bool,
        clock: &mut SendClock,
    ) -> Result<(), SendError> {
        if self.send.is_some() {
            let bytes = self.unframe(data)?;
            return self.send_body(bytes, !more, is_body, clock).await;
        }
        let Some(respond) = self.respond.as_mut() else {
            return Err(SendError::Io(io::ErrorKind::NotConnected.into()));
        };
        let head = translate_head(data).map_err(|e| {
            self.failed = true;
            SendError::Io(io::Error::other(e))
        })?;
        let rest = &data[head.len..];
        if head.response.status().is_informational() {
            // `100 Continue`: an interim HEADERS frame; the final head follows.
            let _ = respond.send_informational(head.response);
            clock.count(head.len as u64, false);
            return Ok(());
        }
        let end = !more && rest.is_empty();
        match respond.send_response(head.response, end) {
            Ok(send) => self.send = Some(send),
            Err(e) => return Err(self.failure(e)),
        }
        self.respond = None;
        clock.count(head.len as u64, false);
        self.left = head.length;
        if head.chunked {
            self.dechunk = Some((Chunked::new(u64::MAX), Vec::new()));
        }
        if end {
            self.ended = true;
            return Ok(());
        }
        if rest.is_empty() {
            return Ok(());
        }
        // A short body written with its head: counted as the head was (the handlers count
        // such bodies themselves).
        let bytes = self.unframe(rest)?;
        self.send_body(bytes, !more, false, clock).await
    }

    async fn write_file(
        &mut self,
        _shared: &Shared,
        file: &Arc<std::fs::File>,
        window: ByteRange,
        blocking: bool,
        clock: &mut SendClock,
    ) -> Result<(), SendError> {
        let mut at = window.first;
        while at <= window.last && !self.ended {
            let want = (window.last + 1 - at).min(PIECE) as usize;
            // Read only what the stream may send now: nothing waits in memory for a
            // window to open.
            let n = self.room(want, clock).await?;
            let mut piece = Vec::new();
            crate::body::read_at(file, at, n, &mut piece, blocking).await?;
            piece.truncate(n);
            self.push(Bytes::from(piece), false, true, clock)?;
            at += n as u64;
        }
        Ok(())
    }

    async fn flush(&mut self, _clock: &SendClock) -> Result<(), SendError> {
        // Frames are written by the connection's task as the socket takes them.
        Ok(())
    }

    /// DATA frames of `data` as the windows allow, the stream left open.
    async fn write_chunk(&mut self, data: &[u8], clock: &mut SendClock) -> Result<(), SendError> {
        if self.send.is_none() || data.is_empty() {
            return Ok(());
        }
        self.send_body(Bytes::copy_from_slice(data), false, true, clock)
            .await
    }

    fn idle(&mut self, _shared: &Shared) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reset_allowance_spends_a_burst_and_refills_at_its_rate() {
        let t0 = Instant::now();
        let mut b = ResetBudget::new(3, 2.0, t0);
        assert!(b.spend(t0) && b.spend(t0) && b.spend(t0));
        assert!(!b.spend(t0), "the burst is spent");
        let t1 = t0 + Duration::from_millis(500);
        assert!(b.spend(t1), "half a second at 2/s refills one");
        assert!(!b.spend(t1));
        let t2 = t1 + Duration::from_secs(100);
        for _ in 0..3 {
            assert!(b.spend(t2));
        }
        assert!(!b.spend(t2), "the refill is capped at the burst");
        // A clock that steps back refills nothing.
        assert!(!b.spend(t0));
    }

    #[test]
    fn request_heads_are_rewritten_for_the_http1_parser() {
        let req = http::Request::builder()
            .method("GET")
            .uri("https://example.test:8443/v/seg.m4s?x=1")
            .header("range", "bytes=0-99")
            .header("x-session-id", "s1")
            .body(())
            .unwrap();
        let (parts, ()) = req.into_parts();
        let head = h1_head(&parts, false);
        let text = String::from_utf8(head.clone()).unwrap();
        assert!(
            text.starts_with("GET /v/seg.m4s?x=1 HTTP/1.1\r\nHost: example.test:8443\r\n"),
            "{text}"
        );
        let Parsed::Complete(r, n) = parse_head(&head, &Default::default()).unwrap() else {
            panic!("incomplete: {text}");
        };
        assert_eq!(n, head.len());
        assert_eq!(r.target, "/v/seg.m4s?x=1");
        assert_eq!(r.host.as_deref(), Some("example.test:8443"));
        assert_eq!(r.range.as_deref(), Some("bytes=0-99"));
        assert_eq!(r.session_id.as_deref(), Some("s1"));
        assert!(!r.chunked);
        let (parts, ()) = http::Request::builder()
            .method("PUT")
            .uri("/live/a.m4s")
            .header("host", "origin.test")
            .body(())
            .unwrap()
            .into_parts();
        let head = h1_head(&parts, true);
        let Parsed::Complete(r, _) = parse_head(&head, &Default::default()).unwrap() else {
            panic!("incomplete");
        };
        assert!(r.chunked);
        assert_eq!(r.host.as_deref(), Some("origin.test"));
        // Neither :authority nor Host: refused as an HTTP/1.1 request without Host is.
        let (parts, ()) = http::Request::builder()
            .uri("/a")
            .body(())
            .unwrap()
            .into_parts();
        assert!(parse_head(&h1_head(&parts, false), &Default::default()).is_err());
    }

    #[test]
    fn response_heads_lose_their_connection_fields() {
        let bytes = b"HTTP/1.1 206 Partial Content\r\nServer: vodkit\r\nContent-Length: 5\r\n\
                      Content-Range: bytes 0-4/10\r\nConnection: keep-alive\r\n\r\nhello";
        let h = translate_head(bytes).unwrap();
        assert_eq!(h.response.status(), 206);
        assert_eq!(h.len, bytes.len() - 5);
        assert_eq!(h.length, Some(5));
        assert!(!h.chunked);
        assert!(h.response.headers().get("connection").is_none());
        assert_eq!(h.response.headers()["content-range"], "bytes 0-4/10");
        let h = translate_head(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nKeep-Alive: timeout=5\r\n\r\n",
        )
        .unwrap();
        assert!(h.chunked && h.length.is_none());
        assert!(h.response.headers().is_empty());
        assert!(translate_head(b"HTTP/1.1 200 OK\r\n").is_err());
    }
}
