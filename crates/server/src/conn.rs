//! One client connection: read request heads (pipelined ones too), hand each to the router
//! ([`crate::handler::route`]) strictly in order, keep the connection alive between
//! requests, and enforce the idle timeout, the header timeout and the
//! request-per-connection limit.

use std::sync::Arc;
use std::time::Instant;

use tokio::net::TcpStream;

use crate::access_log::{Entry, Outcome};
use crate::handler::{route, Asked};
use crate::request::{parse_head, HeadError, Parsed};
use crate::response::Response;
use crate::wire::{send_text, ConnInfo, Plain, Wire};
use crate::Shared;

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
                    let stopping = *shared.shutdown.borrow();
                    let asked = Asked::new(&req, specs.as_deref(), info, served, stopping);
                    stream_key = Some(asked.who.stream);
                    if !route(shared, wire, &mut buf, asked).await {
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
                    let _ = send_text(shared, wire, &Response::text(408, true), false).await;
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

/// Answer a head the parser refused, then the connection closes.
pub(crate) async fn reject<W: Wire>(
    shared: &Shared,
    wire: &mut W,
    e: &HeadError,
    info: ConnInfo,
    req_no: u64,
) {
    let started = Instant::now();
    let resp = Response::text(e.status(), true);
    let (clock, r) = send_text(shared, wire, &resp, false).await;
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
