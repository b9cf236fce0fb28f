//! What every handler shares: the request as it was asked ([`Asked`]), the bytes a response
//! took from memory and from the disk ([`Served`]), and the one place a finished response is
//! counted in the metrics and written to the access log ([`finish`]).

use std::borrow::Cow;
use std::time::Instant;

use crate::access_log::{Entry, Outcome};
use crate::body::{SendClock, SendError};
use crate::io::Requester;
use crate::range::RangeSpec;
use crate::request::Method;
use crate::request::Request;
use crate::response::Response;
use crate::wire::{send_text, ConnInfo, Wire};
use crate::Shared;

/// A request as a handler needs it: the head, its `Range` parsed once, who asks, where it
/// stands on its connection, and the URL signature it was let in with.
#[derive(Clone, Copy)]
pub(crate) struct Asked<'a> {
    pub req: &'a Request,
    pub specs: Option<&'a [RangeSpec]>,
    pub who: Requester,
    pub info: ConnInfo,
    /// The request's number on its connection, from 1.
    pub req_no: u64,
    /// The server is shutting down: the answer closes the connection.
    pub stopping: bool,
    /// Its valid URL signature under `--secure-link` (set by the router once checked).
    pub grant: Option<&'a vodkit_securelink::Grant>,
}

impl<'a> Asked<'a> {
    /// `req` (its `Range` parsed into `specs`), the `req_no`th on the connection `info`.
    pub fn new(
        req: &'a Request,
        specs: Option<&'a [RangeSpec]>,
        info: ConnInfo,
        req_no: u64,
        stopping: bool,
    ) -> Asked<'a> {
        Asked {
            req,
            specs,
            who: requester(req, specs, info),
            info,
            req_no,
            stopping,
            grant: None,
        }
    }
}

/// Who asks: the memory manager's client and stream keys of a request.
fn requester(req: &Request, specs: Option<&[RangeSpec]>, info: ConnInfo) -> Requester {
    let open_ended = match specs {
        None => true,
        Some(specs) => specs.iter().any(|s| matches!(s, RangeSpec::From(_))),
    };
    Requester::new(
        req.session_id.as_deref(),
        info.peer.ip(),
        info.id,
        open_ended,
    )
}

/// Per-response byte accounting.
#[derive(Debug, Default)]
pub(crate) struct Served {
    pub from_memory: u64,
    pub from_disk: u64,
}

/// Count a finished response in the metrics and the access log.
pub(crate) fn finish(
    shared: &Shared,
    asked: &Asked<'_>,
    resp: &Response,
    started: Instant,
    clock: &SendClock,
    served: &Served,
    result: &Result<(), SendError>,
) {
    let Asked {
        req, info, req_no, ..
    } = *asked;
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
            version: Some(match (info.http2, req.minor_version) {
                (true, _) => "HTTP/2.0",
                (false, 0) => "HTTP/1.0",
                (false, _) => "HTTP/1.1",
            }),
            host: req.host.as_deref().map(Cow::Borrowed),
            user_agent: req.user_agent.as_deref().map(Cow::Borrowed),
            referer: req.referer.as_deref().map(Cow::Borrowed),
            ..Entry::ending_now(info.peer, info.id, req_no, started.elapsed())
        });
    }
}

/// Answer `asked` with the text response `resp` (no body for `HEAD`) and count it; the
/// connection stays open unless the request, `resp` or a shutdown closes it. Returns
/// whether it stays open.
pub(crate) async fn answer_text<W: Wire>(
    shared: &Shared,
    wire: &mut W,
    asked: &Asked<'_>,
    mut resp: Response,
    started: Instant,
) -> bool {
    let keep = asked.req.wants_keep_alive() && !resp.close && !asked.stopping;
    resp.close = !keep;
    let head_only = matches!(asked.req.method, Method::Head);
    let (clock, result) = send_text(shared, wire, &resp, head_only).await;
    finish_unserved(shared, asked, &resp, started, &clock, &result, keep)
}

/// [`finish`] for an answer that read no file (text, a live object); returns whether the
/// connection goes on: `keep` and the answer went out.
pub(crate) fn finish_unserved(
    shared: &Shared,
    asked: &Asked<'_>,
    resp: &Response,
    started: Instant,
    clock: &SendClock,
    result: &Result<(), SendError>,
    keep: bool,
) -> bool {
    finish(
        shared,
        asked,
        resp,
        started,
        clock,
        &Served::default(),
        result,
    );
    keep && result.is_ok()
}
