//! One viewing session as a task: requests in log order, each on its connection, paced
//! start-to-start, each bounded by its timeout; the first failure ends the session.

use crate::http::{self, Ask, Conn, ExchangeError, Progress};
use crate::link::{Bucket, Link};
use crate::netns::{Lease, Route};
use crate::record::{Failure, FailureReason, RequestRecord, SessionEnd, SessionRecord};
use futures_util::stream::{FuturesUnordered, StreamExt};
use std::net::Ipv4Addr;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
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
    /// Where live viewers find their streams.
    pub live_view: crate::player::live::LiveSettings,
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

/// A connection slot of a session.
#[derive(Default)]
struct Slot {
    conn: Option<Conn>,
    busy: bool,
    /// The previous connection of this slot was closed by the server.
    server_closed: bool,
}

/// What an in-flight request hands back.
struct Finished {
    index: usize,
    conn: Option<Conn>,
    record: RequestRecord,
    server_closed: bool,
    opened: u32,
    reconnects: u32,
}

/// Run a session to its end and return what happened.
pub async fn run(plan: Plan, shared: Arc<Shared>) -> SessionRecord {
    shared.live.active_sessions.fetch_add(1, Ordering::Relaxed);
    let record = match (&plan.session.live, &plan.player) {
        (Some(view), _) => crate::player::live::watch(&plan, &shared, *view).await,
        (None, Some(cfg)) => crate::player::play::play(&plan, &shared, cfg).await,
        (None, None) => drive(&plan, &shared).await,
    };
    shared.live.active_sessions.fetch_sub(1, Ordering::Relaxed);
    match record.end {
        SessionEnd::Completed => shared
            .live
            .completed_sessions
            .fetch_add(1, Ordering::Relaxed),
        SessionEnd::Failed(_) => shared.live.failed_sessions.fetch_add(1, Ordering::Relaxed),
        SessionEnd::Refused | SessionEnd::Cancelled => 0,
    };
    record
}

async fn drive(plan: &Plan, shared: &Arc<Shared>) -> SessionRecord {
    let session = &plan.session;
    // The lease keeps the session's client address (its htb leaf) until the session ends.
    let (viewer, _lease) = Viewer::of(plan, shared);
    let slots_needed = session
        .requests
        .iter()
        .map(|r| r.conn as usize + 1)
        .max()
        .unwrap_or(1);
    let mut slots: Vec<Slot> = (0..slots_needed).map(|_| Slot::default()).collect();
    let mut records: Vec<Option<RequestRecord>> = vec![None; session.requests.len()];
    let mut inflight = FuturesUnordered::new();
    let mut prev_start: Option<Instant> = None;
    let mut end: Option<SessionEnd> = None;
    let (mut opened, mut reconnects) = (0u32, 0u32);
    let mut issued = 0usize;
    let mut issued_at: Vec<f64> = Vec::with_capacity(session.requests.len());

    let mut settle = |done: Finished, slots: &mut Vec<Slot>, end: &mut Option<SessionEnd>| {
        let slot = &mut slots[done.record.conn as usize];
        slot.busy = false;
        slot.conn = done.conn;
        slot.server_closed = done.server_closed;
        opened += done.opened;
        reconnects += done.reconnects;
        if let Some(f) = &done.record.failure {
            end.get_or_insert(SessionEnd::after(f));
        } else {
            shared
                .live
                .completed_requests
                .fetch_add(1, Ordering::Relaxed);
        }
        records[done.index] = Some(done.record);
    };

    'requests: for (i, req) in session.requests.iter().enumerate() {
        let c = req.conn as usize;
        let due = prev_start.map(|p| p + crate::config::secs(req.pacing_s));
        loop {
            if end.is_some() {
                break 'requests;
            }
            let ready = !slots[c].busy && due.is_none_or(|d| Instant::now() >= d);
            if ready {
                break;
            }
            if !slots[c].busy {
                if let Some(conn) = slots[c].conn.as_mut() {
                    conn.release_buffer();
                }
            }
            tokio::select! {
                Some(done) = inflight.next(), if !inflight.is_empty() => settle(done, &mut slots, &mut end),
                _ = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if !slots[c].busy => {},
                _ = shared.cancel.cancelled() => { end = Some(SessionEnd::Cancelled); }
            }
        }
        let start = Instant::now();
        prev_start = Some(start);
        issued_at.push(start.duration_since(shared.t0).as_secs_f64());
        let slot = &mut slots[c];
        slot.busy = true;
        let conn = slot.conn.take();
        let reconnect = conn.is_none() && slot.server_closed;
        inflight.push(perform(
            i,
            conn,
            reconnect,
            plan,
            shared.clone(),
            viewer.clone(),
            start,
        ));
        issued += 1;
    }
    while end.is_none() && !inflight.is_empty() {
        tokio::select! {
            Some(done) = inflight.next() => settle(done, &mut slots, &mut end),
            _ = shared.cancel.cancelled() => { end = Some(SessionEnd::Cancelled); }
        }
    }
    drop(inflight);
    // Requests that were in flight when the session ended are kept as sent but unfinished.
    let requests = records
        .into_iter()
        .enumerate()
        .take(issued)
        .map(|(i, r)| {
            r.unwrap_or_else(|| {
                let req = &session.requests[i];
                RequestRecord {
                    index: i as u32,
                    conn: req.conn,
                    started: issued_at[i],
                    ttfb: None,
                    ttlb: None,
                    elapsed: 0.0,
                    bytes: 0,
                    status: 0,
                    failure: None,
                    media_s: req.media_s,
                    pacing_s: req.pacing_s,
                }
            })
        })
        .collect();
    SessionRecord {
        index: plan.index,
        session: session.clone(),
        arrival: plan.arrival,
        end: end.unwrap_or(SessionEnd::Completed),
        requests,
        skipped: (session.requests.len() - issued) as u32,
        connections_opened: opened,
        reconnects,
        player: None,
        prefilled: plan.prefilled,
        probe: plan.probe,
    }
}

/// The session's side of its link: the user-space bucket, or the client address whose
/// htb leaf shapes it in the kernel.
#[derive(Clone)]
pub(crate) struct Viewer {
    pub bucket: Option<Bucket>,
    pub local: Option<Ipv4Addr>,
    /// The viewer's TLS connector (its own session-resumption cache).
    pub tls: Option<tokio_rustls::TlsConnector>,
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
    let (bucket, local, tls) = (viewer.bucket.as_ref(), viewer.local, viewer.tls.as_ref());
    let attempt = async {
        if !owd.is_zero() {
            tokio::time::sleep(owd).await;
        }
        let mut conn = match conn {
            Some(c) => c,
            None => {
                opened += 1;
                reconnects += u32::from(reconnect);
                open(plan, shared, local, recv_buffer, tls).await?
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
                    conn = open(plan, shared, local, recv_buffer, tls).await?;
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

/// Send one request of the session's log and turn the fetch into its record.
async fn perform(
    index: usize,
    conn: Option<Conn>,
    reconnect: bool,
    plan: &Plan,
    shared: Arc<Shared>,
    viewer: Viewer,
    start: Instant,
) -> Finished {
    let req = &plan.session.requests[index];
    let ask = Ask {
        path: &req.path,
        range: req.range,
        host: &shared.host,
        session_id: plan.session.id,
        verify: shared.verify,
    };
    let mut f = fetch(
        conn,
        reconnect,
        &ask,
        req.timeout_s,
        plan,
        &shared,
        &viewer,
        start,
        None,
    )
    .await;
    let failure = f.failure.take();
    let started = start.duration_since(shared.t0).as_secs_f64();
    let record = f.record(
        index as u32,
        req.conn,
        started,
        failure,
        req.media_s,
        req.pacing_s,
    );
    Finished {
        index,
        conn: f.conn,
        record,
        server_closed: f.server_closed,
        opened: f.opened,
        reconnects: f.reconnects,
    }
}

/// Open a connection to the server (from the class's namespace when the kernel shapes it)
/// and, for an https target, run the TLS handshake: its time counts in the request's.
pub(crate) async fn open(
    plan: &Plan,
    shared: &Shared,
    local: Option<Ipv4Addr>,
    recv_buffer: Option<u32>,
    connector: Option<&tokio_rustls::TlsConnector>,
) -> Result<Conn, Failure> {
    let conn = open_tcp(plan, shared, local, recv_buffer).await?;
    match (&shared.tls, connector) {
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
