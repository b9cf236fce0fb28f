//! The static-file handler: plan the answer to a request for a file under the document root
//! ([`crate::response::plan`]), admit or refuse a new stream (`--admission`), then send
//! the head and the file window by window, each made resident (or read into the direct-I/O
//! pool) by the I/O layer first.

use std::sync::Arc;
use std::time::Instant;

use crate::body::{SendClock, SendError};
use crate::handler::exchange::{finish, Asked, Served};
use crate::io::{Prepared, Requester, WINDOW};
use crate::range::ByteRange;
use crate::request::{Method, Request};
use crate::response::{head_bytes, plan, with_http_date, Body, Response, Segment};
use crate::wire::{send_text, Wire};
use crate::Shared;

/// Answer one request; returns whether the connection stays open.
pub(crate) async fn answer<W: Wire>(shared: &Shared, wire: &mut W, asked: &Asked<'_>) -> bool {
    let Asked {
        req,
        specs,
        who,
        req_no,
        stopping,
        grant,
        ..
    } = *asked;
    let started = Instant::now();
    let signed = grant.and_then(|g| super::secure_link::manifest(shared, req, g));
    let mut resp = signed.unwrap_or_else(|| plan(req, specs, &shared.root, &shared.plan));
    if let Some(refusal) = admit(shared, req, &resp, who) {
        resp = refusal;
    }
    let at_limit = shared
        .config
        .max_requests_per_connection
        .is_some_and(|max| req_no >= max);
    let keep = req.wants_keep_alive() && !resp.close && !at_limit && !stopping;
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
            let (clock, _) = send_text(shared, wire, &failed, false).await;
            let none = Served::default();
            finish(shared, asked, &failed, started, &clock, &none, &result);
            return false;
        }
    }
    finish(shared, asked, &resp, started, &clock, &served, &result);
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
