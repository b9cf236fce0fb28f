//! What every session stands on, the log replay ([`crate::session`]) and the players
//! ([`crate::player`]) alike: what the sessions of a run share ([`Shared`], [`Live`]), a
//! session ready to run ([`Plan`]), its viewer's side of the link ([`Viewer`]) and one
//! request sent and its response read ([`fetch`]).

use crate::http::{self, Ask, Conn, ExchangeError, Progress};
use crate::link::{Bucket, Link};
use crate::netns::{Lease, Route};
use crate::record::{Failure, FailureReason, RequestRecord};
use std::net::Ipv4Addr;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use vodkit_workload::model::Session;

/// Counters sampled once a second for the status line and the time series.
#[derive(Debug, Default)]
pub struct Live {
    pub active_sessions: AtomicU64,
    pub bytes: AtomicU64,
    pub completed_requests: AtomicU64,
    pub failed_sessions: AtomicU64,
    pub completed_sessions: AtomicU64,
    /// Requests retried on a fresh connection ([`crate::LoadConfig::retry`]), and those of
    /// them the retry completed.
    pub retried_requests: AtomicU64,
    pub recovered_requests: AtomicU64,
}

/// What every session of a run shares.
#[derive(Debug)]
pub struct Shared {
    pub addr: SocketAddr,
    pub host: String,
    pub verify: bool,
    /// Start of the measured run.
    pub t0: Instant,
    pub live: Live,
    pub cancel: CancellationToken,
    /// Set for an `https://` target.
    pub tls: Option<crate::tls::TlsClient>,
    /// Viewers speak HTTP/2 (`--http 2`): each viewer's requests are streams of one
    /// connection.
    pub http2: bool,
    /// Signs every requested URL (`--sign-key`).
    pub sign: Option<vodkit_securelink::Signer>,
    /// Where live viewers find their streams.
    pub live_view: crate::player::LiveSettings,
    /// Retry a failed request once on a fresh connection ([`crate::LoadConfig::retry`]).
    pub retry: bool,
    /// Follows the judged sessions for the caller ([`crate::LoadConfig::watch`]).
    pub watch: Option<crate::watcher::Watcher>,
}

/// A session ready to run.
pub struct Plan {
    pub index: usize,
    pub session: Arc<Session>,
    pub arrival: f64,
    /// The user-space part of the class's link (bandwidth is zero when the kernel shapes it).
    pub link: Link,
    /// The class's bandwidth wherever it is shaped (bit/s; 0: unlimited): what a player's
    /// unloaded reference bit rate is computed over.
    pub link_bps: u64,
    /// Set when the class is shaped in the kernel: sockets come from its namespace.
    pub route: Option<Arc<Route>>,
    /// Play the session's title as an adaptive player instead of replaying its requests.
    pub player: Option<Arc<crate::player::PlayerConfig>>,
    /// Already playing when the run started (a warm start): its load counts, its session
    /// outcome does not.
    pub prefilled: bool,
    /// A probe session (`--probe`).
    pub probe: bool,
}

/// The session's side of its link: the user-space bucket, or the client address whose
/// htb leaf shapes it in the kernel.
#[derive(Clone)]
pub(crate) struct Viewer {
    pub bucket: Option<Bucket>,
    pub local: Option<Ipv4Addr>,
    /// The viewer's TLS connector (its own session-resumption cache).
    pub tls: Option<tokio_rustls::TlsConnector>,
    /// With HTTP/2, the viewer's one connection, which all its connection slots share;
    /// opened by the first request that needs it, again after the server ends it.
    pub h2: Option<Arc<tokio::sync::Mutex<Option<Conn>>>>,
}

impl Viewer {
    /// The viewer of `plan`'s session: its bandwidth bucket, its client address when the
    /// kernel shapes its class (its own htb leaf, held by the returned lease), and its TLS
    /// connector (one session cache per viewer: later connections resume its session).
    pub(crate) fn of(plan: &Plan, shared: &Shared) -> (Viewer, Option<Lease>) {
        let lease = plan.route.as_ref().map(Route::lease);
        let viewer = Viewer {
            bucket: Bucket::new(plan.link.bandwidth_bps),
            local: lease.as_ref().map(Lease::addr),
            tls: shared.tls.as_ref().map(crate::tls::TlsClient::viewer),
            h2: shared.http2.then(Default::default),
        };
        (viewer, lease)
    }
}

/// What one fetch (an exchange, with any connect or reconnect it needed) produced.
pub(crate) struct Fetched {
    /// The connection, when it can carry another request.
    pub conn: Option<Conn>,
    /// The server closed the connection after a response that did not ask for it.
    pub server_closed: bool,
    pub progress: Progress,
    pub ttfb: Option<f64>,
    pub ttlb: Option<f64>,
    pub elapsed: f64,
    pub failure: Option<Failure>,
    pub opened: u32,
    pub reconnects: u32,
}

impl Fetched {
    /// This response as the record of request `index` on connection `conn`, sent `started`
    /// seconds into the run, with its `failure` as the caller judged it.
    pub(crate) fn record(
        &self,
        index: u32,
        conn: u32,
        started: f64,
        failure: Option<Failure>,
        media_s: f64,
        pacing_s: f64,
    ) -> RequestRecord {
        RequestRecord {
            index,
            conn,
            started,
            ttfb: self.ttfb,
            ttlb: self.ttlb,
            elapsed: self.elapsed,
            bytes: self.progress.bytes,
            status: self.progress.status,
            failure,
            media_s,
            pacing_s,
        }
    }
}

/// Send one request (connecting or reconnecting as needed) and read its response within
/// `timeout_s` of `start`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn fetch(
    conn: Option<Conn>,
    reconnect: bool,
    ask: &Ask<'_>,
    timeout_s: f64,
    plan: &Plan,
    shared: &Shared,
    viewer: &Viewer,
    start: Instant,
    mut sink: Option<http::BodySink<'_, '_>>,
) -> Fetched {
    let timeout = crate::config::secs(timeout_s);
    let owd = plan.link.one_way_delay;
    let mut progress = Progress::default();
    let mut opened = 0u32;
    let mut reconnects = 0u32;
    let recv_buffer = plan.link.recv_buffer_bytes();
    let bucket = viewer.bucket.as_ref();
    let attempt = async {
        if !owd.is_zero() {
            tokio::time::sleep(owd).await;
        }
        let mut conn = match conn {
            Some(c) => c,
            None => {
                opened += 1;
                reconnects += u32::from(reconnect);
                open(plan, shared, viewer, recv_buffer).await?
            }
        };
        // A kept-alive connection the server closed meanwhile is reopened once; a fresh
        // one closed before the response is a reset.
        let mut fresh = false;
        let done = loop {
            let bytes = &shared.live.bytes;
            match http::exchange(
                &mut conn,
                ask,
                bucket,
                bytes,
                &mut progress,
                sink.as_deref_mut(),
            )
            .await
            {
                Ok(done) => break done,
                Err(ExchangeError::Failed(f)) => return Err(f),
                Err(ExchangeError::Stale) if fresh => {
                    return Err(Failure::new(
                        FailureReason::Reset,
                        "a fresh connection was closed before the response",
                    ))
                }
                Err(ExchangeError::Stale) => {
                    fresh = true;
                    opened += 1;
                    reconnects += 1;
                    conn = open(plan, shared, viewer, recv_buffer).await?;
                    progress = Progress::default();
                }
            }
        };
        if !owd.is_zero() {
            tokio::time::sleep(owd).await;
        }
        Ok::<_, Failure>((conn, done))
    };
    let outcome = tokio::time::timeout_at(start + timeout, attempt).await;
    let elapsed = start.elapsed().as_secs_f64();
    let ttfb = progress
        .first_byte
        .map(|t| t.duration_since(start).as_secs_f64() + owd.as_secs_f64());
    let (conn, server_closed, ttlb, failure) = match outcome {
        Ok(Ok((conn, done))) => {
            let keep = done.reusable.then_some(conn);
            let server_closed = keep.is_none()
                && !matches!(
                    ask.range,
                    Some(vodkit_workload::model::ByteRange::OpenEnded { .. })
                );
            (keep, server_closed, Some(elapsed), None)
        }
        Ok(Err(f)) => (None, false, None, Some(f)),
        Err(_) => (
            None,
            false,
            None,
            Some(Failure::new(
                FailureReason::Timeout,
                format!("{} not complete within {timeout_s} s", ask.path),
            )),
        ),
    };
    Fetched {
        conn,
        server_closed,
        progress,
        ttfb,
        ttlb,
        elapsed,
        failure,
        opened,
        reconnects,
    }
}

/// Open a connection to the server (from the class's namespace when the kernel shapes it)
/// and, for an https target, run the TLS handshake: its time counts in the request's. With
/// HTTP/2, a handle of the viewer's connection while it lasts, else a new one (made under
/// the viewer's lock: slots asking at once share the one the first of them opens).
pub(crate) async fn open(
    plan: &Plan,
    shared: &Shared,
    viewer: &Viewer,
    recv_buffer: Option<u32>,
) -> Result<Conn, Failure> {
    let Some(cell) = &viewer.h2 else {
        return open_one(plan, shared, viewer, recv_buffer).await;
    };
    let mut current = cell.lock().await;
    if let Some(c) = current.as_ref().and_then(Conn::share) {
        return Ok(c);
    }
    let conn = open_one(plan, shared, viewer, recv_buffer)
        .await?
        .into_h2(recv_buffer)
        .await?;
    *current = conn.share();
    Ok(conn)
}

/// One new connection (TCP, then TLS for an https target).
async fn open_one(
    plan: &Plan,
    shared: &Shared,
    viewer: &Viewer,
    recv_buffer: Option<u32>,
) -> Result<Conn, Failure> {
    let conn = open_tcp(plan, shared, viewer.local, recv_buffer).await?;
    match (&shared.tls, viewer.tls.as_ref()) {
        (Some(tls), Some(c)) => conn.secure(tls, c).await,
        _ => Ok(conn),
    }
}

async fn open_tcp(
    plan: &Plan,
    shared: &Shared,
    local: Option<Ipv4Addr>,
    recv_buffer: Option<u32>,
) -> Result<Conn, Failure> {
    match &plan.route {
        None => Conn::open(shared.addr, recv_buffer).await,
        Some(route) => {
            let socket = route.socket(local).await.map_err(|e| {
                Failure::new(
                    FailureReason::Connect,
                    format!("{}: no socket in the namespace: {e}", route.addr),
                )
            })?;
            Conn::connect(socket, route.addr, recv_buffer).await
        }
    }
}
