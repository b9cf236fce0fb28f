//! Request bodies as the handlers read them: dropped (every request but a live source's
//! `PUT`), read whole by `Content-Length`, or decoded from `Transfer-Encoding: chunked`
//! ([`crate::chunked`]) within the time limits; a refused body is answered here.

use std::time::Instant;

use crate::request::Request;
use crate::response::Response;
use crate::wire::{send_text, Wire};
use crate::Shared;

/// Read and drop `req`'s body (we never use bodies outside a live source's `PUT`); too
/// large → 413, bad chunked framing → 400. `Err` when the connection must close (the
/// answer, if any, was sent).
pub(crate) async fn discard_body<W: Wire>(
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
    let deadline = Instant::now() + shared.config.header_timeout;
    take_body(wire, buf, len, deadline, None).await
}

/// Read a request body of `len` bytes (a live source's `PUT`): what the buffer already holds,
/// then the socket, within the header timeout plus a second per MB. `Err` when the client
/// stalled or closed (the caller answers 408 where it still can, and closes).
pub(crate) async fn read_body<W: Wire>(
    wire: &mut W,
    buf: &mut Vec<u8>,
    len: u64,
    shared: &Shared,
) -> Result<Vec<u8>, ()> {
    let mut out = Vec::with_capacity(len.min(8 << 20) as usize);
    let allowance = shared.config.header_timeout + std::time::Duration::from_secs(len / 1_000_000);
    take_body(wire, buf, len, Instant::now() + allowance, Some(&mut out)).await?;
    Ok(out)
}

/// Take the next `len` body bytes, from the buffer and then the socket, by `deadline`:
/// appended to `keep`, or dropped. `Err` when the client stalled or closed.
async fn take_body<W: Wire>(
    wire: &mut W,
    buf: &mut Vec<u8>,
    len: u64,
    deadline: Instant,
    mut keep: Option<&mut Vec<u8>>,
) -> Result<(), ()> {
    let mut left = len as usize;
    let deadline = tokio::time::Instant::from_std(deadline);
    loop {
        let take = left.min(buf.len());
        match keep.as_deref_mut() {
            Some(out) => out.extend(buf.drain(..take)),
            None => drop(buf.drain(..take)),
        }
        left -= take;
        if left == 0 {
            return Ok(());
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
pub(crate) async fn read_chunked<W: Wire>(
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
