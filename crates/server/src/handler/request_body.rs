//! Request bodies as the handlers read them: dropped (every request but a live source's
//! `PUT`), or read whole by `Content-Length` or from `Transfer-Encoding: chunked`
//! ([`crate::chunked`]) within the time limits and the live store's memory cap; a refused
//! body is answered here.

use std::time::{Duration, Instant};

use crate::live::{GrowingUpload, Refused, Upload};
use crate::request::Request;
use crate::response::Response;
use crate::wire::{send_text, Wire};
use crate::Shared;

/// Why a body stopped arriving.
enum Cut {
    /// The client stalled past the idle time or the deadline, or closed.
    Stalled,
    /// The store had no room for more of it.
    Refused(Refused),
}

/// Read and drop `req`'s body (we never use bodies outside a live source's `PUT`); too
/// large → 413, bad chunked framing → 400. `Err` when the connection must close (the
/// answer, if any, was sent).
pub(crate) async fn discard_body<W: Wire>(
    wire: &mut W,
    buf: &mut Vec<u8>,
    req: &Request,
    shared: &Shared,
) -> Result<(), ()> {
    let timeout = shared.config.header_timeout;
    if req.chunked {
        return read_chunked(wire, buf, shared.config.max_body, None, timeout, shared)
            .await
            .map(drop);
    }
    let len = req.content_length;
    if len == 0 {
        return Ok(());
    }
    if len > shared.config.max_body {
        let _ = send_text(shared, wire, &Response::text(413, true), false).await;
        return Err(());
    }
    let deadline = Instant::now() + timeout;
    take_body(wire, buf, len, timeout, deadline, None)
        .await
        .map_err(drop)
}

/// Read a live source's `PUT` body (by `Content-Length` or chunked, at most `max` bytes),
/// its bytes counted in the live store's memory cap as they arrive (`upload`, no room
/// reserved ahead for what is only announced). Bytes must keep coming (no gap of the header
/// timeout) and the whole body must arrive within `timeout`. Every refusal is answered here
/// (400 bad framing, 413 too large, 408 stalled or too slow, 507 no room) and closes. A
/// chunked body read into a `growing` object is appended to it as it is decoded (viewers
/// read it meanwhile) and the returned bytes are empty.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn read_upload<W: Wire>(
    wire: &mut W,
    buf: &mut Vec<u8>,
    req: &Request,
    max: u64,
    upload: &mut Upload<'_>,
    growing: Option<&GrowingUpload<'_>>,
    timeout: Duration,
    shared: &Shared,
) -> Result<Vec<u8>, ()> {
    if req.chunked {
        let kept = Some(Kept { upload, growing });
        return read_chunked(wire, buf, max, kept, timeout, shared).await;
    }
    let mut out = Vec::new();
    let idle = shared.config.header_timeout;
    let deadline = Instant::now() + timeout;
    let kept = Some((&mut out, upload));
    match take_body(wire, buf, req.content_length, idle, deadline, kept).await {
        Ok(()) => Ok(out),
        Err(cut) => {
            answer_cut(wire, cut, shared).await;
            Err(())
        }
    }
}

/// Answer a body that stopped arriving (408) or found no room (507, with the reason).
async fn answer_cut<W: Wire>(wire: &mut W, cut: Cut, shared: &Shared) {
    let resp = match cut {
        Cut::Stalled => {
            shared.metrics.header_timeouts.inc();
            Response::text(408, true)
        }
        Cut::Refused(e) => Response::explained(e.status, &e.reason, true),
    };
    shared.metrics.count_status(resp.status);
    let _ = send_text(shared, wire, &resp, false).await;
}

/// Take the next `len` body bytes, from the buffer and then the socket, each read within
/// `idle` and all by `deadline`: appended to `keep` (counted in its upload), or dropped.
async fn take_body<W: Wire>(
    wire: &mut W,
    buf: &mut Vec<u8>,
    len: u64,
    idle: Duration,
    deadline: Instant,
    mut keep: Option<(&mut Vec<u8>, &mut Upload<'_>)>,
) -> Result<(), Cut> {
    let mut left = len;
    loop {
        let take = left.min(buf.len() as u64) as usize;
        match keep.as_mut() {
            Some((out, upload)) => {
                upload.grow(take as u64).map_err(Cut::Refused)?;
                out.extend(buf.drain(..take));
            }
            None => drop(buf.drain(..take)),
        }
        left -= take as u64;
        if left == 0 {
            return Ok(());
        }
        buf.reserve(left.min(1 << 16) as usize);
        read_within(wire, buf, idle, deadline).await?;
    }
}

/// Read more bytes into `buf` within `idle` and by `deadline`.
async fn read_within<W: Wire>(
    wire: &mut W,
    buf: &mut Vec<u8>,
    idle: Duration,
    deadline: Instant,
) -> Result<(), Cut> {
    let by = tokio::time::Instant::from_std(deadline.min(Instant::now() + idle));
    match tokio::time::timeout_at(by, wire.read_more(buf)).await {
        Ok(Ok(n)) if n > 0 => Ok(()),
        _ => Err(Cut::Stalled),
    }
}

/// Where a kept chunked body goes: counted under `upload`, and appended to `growing` as it
/// is decoded when there is one (else returned whole).
struct Kept<'u, 'a, 'g> {
    upload: &'u mut Upload<'a>,
    growing: Option<&'u GrowingUpload<'g>>,
}

/// Read a chunked request body of at most `max` decoded bytes (kept, and counted, when
/// there is a `kept`). The sender may write a segment as it encodes it, but not let
/// the header timeout pass without a byte, nor take longer than `timeout` in all. On bad
/// framing (400), a body over `max` (413), a stall (408) or no room (507) the answer is
/// sent here; every `Err` closes.
async fn read_chunked<W: Wire>(
    wire: &mut W,
    buf: &mut Vec<u8>,
    max: u64,
    mut kept: Option<Kept<'_, '_, '_>>,
    timeout: Duration,
    shared: &Shared,
) -> Result<Vec<u8>, ()> {
    let mut decoder = crate::chunked::Chunked::new(max);
    let mut out = Vec::new();
    let idle = shared.config.header_timeout;
    let deadline = Instant::now() + timeout;
    loop {
        let before = out.len();
        let fed = decoder.feed(buf, kept.is_some().then_some(&mut out));
        if let Some(k) = kept.as_mut() {
            if let Err(e) = k.upload.grow((out.len() - before) as u64) {
                answer_cut(wire, Cut::Refused(e), shared).await;
                return Err(());
            }
            if let Some(g) = k.growing {
                // Readers get the bytes now; the body is not kept twice.
                g.append(bytes::Bytes::from(std::mem::take(&mut out)));
            }
        }
        match fed {
            Ok(true) => return Ok(out),
            Ok(false) => {}
            Err(e) => {
                shared.metrics.bad_requests.inc();
                shared.metrics.count_status(e.status());
                let _ = send_text(shared, wire, &Response::text(e.status(), true), false).await;
                return Err(());
            }
        }
        buf.reserve(1 << 16);
        if let Err(cut) = read_within(wire, buf, idle, deadline).await {
            answer_cut(wire, cut, shared).await;
            return Err(());
        }
    }
}
