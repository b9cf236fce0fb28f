//! HTTP/2 for the load generator (`--http 2`): a viewer's requests go out as streams of one
//! connection (the `h2` crate's client), over TLS when ALPN chose `h2` or in cleartext by
//! prior knowledge, with the same request fields, status and length checks, content
//! verification and body accounting as HTTP/1.1 ([`crate::exchange`]).
//!
//! The viewer's bandwidth bucket paces how fast received DATA is consumed, and the stream's
//! window is opened only as it is consumed, so a slow viewer slows the server's sending as
//! a full TCP receive buffer does over HTTP/1.1. An open-ended range read far enough is
//! cancelled with RST_STREAM; the connection carries on.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;

use crate::exchange::{
    body_plan, fail, range_first, take_body, target, Ask, BodySink, Done, ExchangeError, Head,
    Progress,
};
use crate::link::Bucket;
use crate::record::{Failure, FailureReason};

/// Stream receive window when the link sets no receive buffer.
const STREAM_WINDOW: u32 = 256 << 10;

/// Smallest stream window offered (one full-sized DATA frame).
const MIN_WINDOW: u32 = 16 << 10;

/// One HTTP/2 connection as a handle its viewer's connection slots share (clones send on
/// the same connection).
#[derive(Clone, Debug)]
pub struct Mux {
    send: h2::client::SendRequest<Bytes>,
    scheme: &'static str,
    /// The connection has ended (its driver returned, or an exchange found it gone).
    dead: Arc<AtomicBool>,
    /// Exchanges completed on the connection, through every handle.
    exchanges: Arc<AtomicU32>,
    /// Whether the TLS session was resumed (`None`: cleartext).
    pub resumed: Option<bool>,
}

/// The HTTP/2 handshake over `io` (TLS after ALPN chose `h2`, or a plain socket), the
/// connection then driven by a task of its own. `window`: the stream receive window (the
/// link's receive buffer, when it sets one).
pub async fn handshake<T>(
    io: T,
    tls: bool,
    resumed: Option<bool>,
    window: Option<u32>,
) -> Result<Mux, Failure>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let window = window.unwrap_or(STREAM_WINDOW).max(MIN_WINDOW);
    let mut builder = h2::client::Builder::new();
    builder
        .initial_window_size(window)
        .initial_connection_window_size(window.saturating_mul(4));
    let (send, conn) = builder
        .handshake::<_, Bytes>(io)
        .await
        .map_err(|e| Failure::new(FailureReason::Connect, format!("HTTP/2 handshake: {e}")))?;
    let dead = Arc::new(AtomicBool::new(false));
    let flag = dead.clone();
    tokio::spawn(async move {
        let _ = conn.await;
        flag.store(true, Ordering::Relaxed);
    });
    Ok(Mux {
        send,
        scheme: if tls { "https" } else { "http" },
        dead,
        exchanges: Arc::new(AtomicU32::new(0)),
        resumed,
    })
}

impl Mux {
    /// Whether the connection may still carry requests.
    pub fn alive(&self) -> bool {
        !self.dead.load(Ordering::Relaxed)
    }

    /// Exchanges completed on the connection.
    pub fn exchanges(&self) -> u32 {
        self.exchanges.load(Ordering::Relaxed)
    }

    /// A failure before any response: on a connection that already served, it went away
    /// meanwhile (retry on a new one); on a fresh one, a reset.
    fn gone(&self, e: &h2::Error, what: &str) -> ExchangeError {
        let refused = e.reason() == Some(h2::Reason::REFUSED_STREAM);
        if e.is_go_away() || e.is_io() || refused || !self.alive() {
            self.dead.store(true, Ordering::Relaxed);
            if self.exchanges() > 0 || refused {
                return ExchangeError::Stale;
            }
        }
        fail(FailureReason::Reset, format!("{what}: {e}"))
    }

    fn request(&self, ask: &Ask<'_>) -> Result<http::Request<()>, ExchangeError> {
        let uri = format!("{}://{}{}", self.scheme, ask.host, target(ask));
        let mut req = http::Request::get(uri)
            .header("x-session-id", ask.session_id)
            .header(
                "user-agent",
                format!(
                    "vodkit-load/{} (session id {})",
                    env!("CARGO_PKG_VERSION"),
                    ask.session_id
                ),
            );
        if let Some(range) = ask.range {
            req = req.header("range", range.header_value());
        }
        req.body(()).map_err(|e| {
            fail(
                FailureReason::Protocol,
                format!("{}: not a valid request: {e}", ask.path),
            )
        })
    }
}

/// Wait until the viewer's link lets `n` more bytes through.
async fn pace(bucket: Option<&Bucket>, n: usize) {
    let Some(b) = bucket else { return };
    let mut left = n;
    while left > 0 {
        let g = b.grant(left).await.min(left);
        b.charge(g);
        left -= g;
    }
}

/// One exchange as a stream of `mux`'s connection: the same checks and accounting as
/// [`crate::http::exchange`].
pub async fn exchange(
    mux: &mut Mux,
    ask: &Ask<'_>,
    bucket: Option<&Bucket>,
    live_bytes: &std::sync::atomic::AtomicU64,
    progress: &mut Progress,
    mut sink: Option<BodySink<'_, '_>>,
) -> Result<Done, ExchangeError> {
    let req = mux.request(ask)?;
    let ready = mux.send.clone().ready().await;
    mux.send = ready.map_err(|e| mux.gone(&e, "opening a stream"))?;
    let (resp, _) = mux
        .send
        .send_request(req, true)
        .map_err(|e| mux.gone(&e, "sending request"))?;
    let resp = resp
        .await
        .map_err(|e| mux.gone(&e, "waiting for the response"))?;
    progress.first_byte.get_or_insert_with(Instant::now);
    let (parts, mut body) = resp.into_parts();
    let field = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    let content_length = match field("content-length") {
        Some(v) => Some(
            v.parse::<u64>()
                .map_err(|_| fail(FailureReason::Protocol, format!("bad Content-Length {v:?}")))?,
        ),
        None => None,
    };
    let head = Head {
        status: parts.status.as_u16(),
        content_length,
        range_first: field("content-range").and_then(range_first),
        ..Head::default()
    };
    progress.status = head.status;
    let (need, _) = body_plan(ask, &head)?;
    let key = ask
        .verify
        .then(|| vodkit_workload::content::path_key(ask.path.trim_start_matches('/')));
    let origin = ask.range.map(|r| r.first()).unwrap_or(0);
    while need != Some(progress.bytes) {
        match body.data().await {
            Some(Ok(chunk)) => {
                pace(bucket, chunk.len()).await;
                let _ = body.flow_control().release_capacity(chunk.len());
                let remaining = need.map_or(u64::MAX, |n| n - progress.bytes);
                let take = (chunk.len() as u64).min(remaining) as usize;
                take_body(
                    key,
                    origin,
                    ask,
                    &chunk[..take],
                    progress,
                    live_bytes,
                    sink.as_deref_mut(),
                )?;
            }
            Some(Err(e)) => {
                return Err(fail(
                    FailureReason::ShortBody,
                    format!("stream reset after {} body bytes: {e}", progress.bytes),
                ))
            }
            None if need.is_none() => break,
            None => {
                return Err(fail(
                    FailureReason::ShortBody,
                    format!(
                        "stream ended after {} of {} body bytes",
                        progress.bytes,
                        need.unwrap_or(0)
                    ),
                ))
            }
        }
    }
    // The rest of an open-ended range is not wanted: dropping the stream cancels it.
    drop(body);
    mux.exchanges.fetch_add(1, Ordering::Relaxed);
    Ok(Done { reusable: true })
}
