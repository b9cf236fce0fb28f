//! The live-ingest handler (`--ingest`): requests under the ingest prefix. The live source
//! `PUT`s and `DELETE`s segments and playlists (authorized by its token, bodies whole or
//! chunked); viewers `GET` them, a segment not there yet being held until it comes. A
//! segment uploaded with chunked encoding is sent to its viewers as it arrives (HTTP/1.1
//! chunked, HTTP/2 DATA frames), and cut off if its upload is; a playlist request with
//! LL-HLS delivery directives (`_HLS_msn`, `_HLS_part`, `_HLS_skip`) is held until the
//! playlist holds what it asks for. The live window counts against the memory manager's
//! budget, and past its cap its oldest segments are spilled to disk off the async workers.
//!
//! Also here: `GET /.vodkit/clock` ([`clock`]), the server's time for DASH players.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::body::{SendClock, SendError};
use crate::handler::exchange::{answer_text, finish_unserved, Asked};
use crate::handler::request_body::{discard_body, read_upload};
use crate::io::Prepared;
use crate::live::{
    block_decision, cache_control, content_type, skip_segments, AuthError, Block, BlockQuery,
    GrowReader, Growing, Grown, LiveBody, LiveStore, Lookup, Object, MAPPED_MIN,
};
use crate::range::ByteRange;
use crate::response::{head_bytes, head_with_length, with_http_date, Body, Response};
use crate::wire::Wire;
use crate::Shared;

/// The path of the server's clock (`GET`: ISO 8601 UTC with milliseconds).
pub(crate) const CLOCK_PATH: &str = "/.vodkit/clock";

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
fn note_live_memory(shared: &Shared, live: &LiveStore) {
    shared.io.engine().set_other_memory(live.memory());
}

/// Past its memory cap, the live window's oldest segments go to the spill directory
/// (`--ingest-spill`): written off the async workers, so viewers are not held up by the disk.
fn spill_live_segments(shared: &Shared, live: &LiveStore) {
    if !live.spill_waiting() {
        return;
    }
    if let Some(store) = shared.live.clone() {
        let engine = shared.io.engine().clone();
        tokio::task::spawn_blocking(move || {
            if store.spill_pending() > 0 {
                engine.set_other_memory(store.memory());
            }
        });
    }
}

/// Answer a request under the ingest prefix (`--ingest`): `PUT`/`DELETE` from the live
/// source, `GET`/`HEAD` from viewers (a segment not there yet is held). Returns whether the
/// connection stays open.
pub(crate) async fn handle<W: Wire>(
    shared: &Shared,
    wire: &mut W,
    buf: &mut Vec<u8>,
    live: &LiveStore,
    path: Option<&str>,
    asked: &Asked<'_>,
) -> bool {
    let req = asked.req;
    let started = Instant::now();
    let method = req.method.as_str();
    let mut clock = SendClock::new(shared.config.send_grace, shared.config.min_send_rate);
    let mut object: Option<LiveBody> = None;
    let mut growing: Option<Arc<Growing>> = None;
    let writes = matches!(method, "PUT" | "DELETE");
    // A target the normalization refuses, and a publisher's name with dot segments
    // (`%2e%2e`, `..%2f`): 400, the body left unread.
    let path = path.filter(|_| !(writes && crate::target::has_dot_segment(&req.target)));
    let resp = match (method, path) {
        (_, None) => {
            if writes {
                live.counters.rejected.fetch_add(1, Relaxed);
            }
            Response::text(400, true)
        }
        (_, Some(path)) => match method {
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
                    let status = live.delete(path, Instant::now());
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
                    let mut upload = live.upload(path);
                    // A segment sent in chunks is readable from its first byte.
                    let grow = req
                        .chunked
                        .then(|| live.start_growing(path, Instant::now()))
                        .flatten();
                    let max = live.config.max_object;
                    let timeout = live.config.body_timeout;
                    let read = read_upload(
                        wire,
                        buf,
                        req,
                        max,
                        &mut upload,
                        grow.as_ref(),
                        timeout,
                        shared,
                    )
                    .await;
                    let Ok(body) = read else {
                        // Answered (400, 408, 413, 507) or gone: the connection closes, and
                        // the segment's viewers see it cut.
                        live.counters.rejected.fetch_add(1, Relaxed);
                        drop(grow);
                        drop(upload);
                        spill_live_segments(shared, live);
                        note_live_memory(shared, live);
                        return false;
                    };
                    let now = Instant::now();
                    let stored = match grow {
                        Some(g) => live.put_growing(path, upload, g, now),
                        None => live.put_upload(path, body, upload, now),
                    };
                    spill_live_segments(shared, live);
                    note_live_memory(shared, live);
                    match stored {
                        Ok(s @ (201 | 204)) => status_only(s),
                        Ok(s) => Response::text(s, false),
                        Err(e) => Response::explained(e.status, &e.reason, false),
                    }
                }
            },
            "GET" | "HEAD" => {
                if discard_body(wire, buf, req, shared).await.is_err() {
                    return false;
                }
                match viewer_get(shared, live, path, asked).await {
                    Viewed::Object(r, body) => {
                        object = Some(body);
                        r
                    }
                    Viewed::Growing(r, g) => {
                        growing = Some(g);
                        r
                    }
                    Viewed::Answer(r) => r,
                }
            }
            _ => {
                let mut r = Response::text(405, true);
                r.headers.push_str("Allow: GET, HEAD, PUT, DELETE\r\n");
                r
            }
        },
    };
    let keep = req.wants_keep_alive() && !resp.close && !asked.stopping;
    let head = with_http_date(|date| match growing {
        Some(_) => head_with_length(&resp, date, keep, None),
        None => head_bytes(&resp, date, keep),
    });
    let send_body = method != "HEAD";
    let mut result = match (&object, &resp.body) {
        // A segment still arriving: its pieces as they come, its end when the upload ends.
        _ if growing.is_some() => {
            let g = growing.as_deref().map(Growing::reader);
            send_growing(wire, &head, g, send_body, &mut clock).await
        }
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
    finish_unserved(shared, asked, &resp, started, &clock, &result, keep)
}

/// What a viewer's `GET` or `HEAD` gets.
enum Viewed {
    /// A stored object: the response head and the bytes.
    Object(Response, LiveBody),
    /// A segment still being uploaded: the head (no length) and the object.
    Growing(Response, Arc<Growing>),
    /// A response of its own (`400`, `404`, `503`).
    Answer(Response),
}

/// Find what a viewer asks for: a stored object; a segment still arriving (read as it
/// comes, or whole once complete for a `Range` request or an HTTP/1.0 client, which cannot
/// take chunks); one that may still come (held); or, for a playlist asked with LL-HLS
/// delivery directives, the playlist once it holds what they ask for.
async fn viewer_get(shared: &Shared, live: &LiveStore, path: &str, asked: &Asked<'_>) -> Viewed {
    let req = asked.req;
    let name = path.rsplit('/').next().unwrap_or("");
    if name.ends_with(".m3u8") {
        match BlockQuery::parse(crate::target::query_part(&req.target)) {
            Err(why) => return Viewed::Answer(Response::explained(400, &why, false)),
            Ok(Some(q)) => return blocking_reload(shared, live, path, &q, asked).await,
            Ok(None) => {}
        }
    }
    let now = Instant::now();
    let mut found = live.get(path, now);
    if let Lookup::Missing { hold: true } = found {
        live.counters.held.fetch_add(1, Relaxed);
        found = live.wait_for(path, now + live.config.hold).await;
        if let Lookup::Missing { .. } = found {
            live.counters.hold_timeouts.fetch_add(1, Relaxed);
        }
    }
    let whole_only = req.range.is_some() || (req.minor_version == 0 && !asked.info.http2);
    if let (Lookup::Growing(g), true) = (&found, whole_only) {
        found = match completed(g.reader()).await {
            true => live.get(path, Instant::now()),
            false => Lookup::Missing { hold: false },
        };
    }
    match found {
        Lookup::Found(o) => {
            let cache = o.cache_control.clone();
            object_answer(shared, path, o, None, &cache, asked)
        }
        Lookup::Growing(g) => {
            live.counters.growing_reads.fetch_add(1, Relaxed);
            let mut headers = format!(
                "Content-Type: {}\r\nCache-Control: {}\r\nTransfer-Encoding: chunked\r\n",
                content_type(name),
                cache_control(name, &[], live.config.playlist_max_age),
            );
            if let Some(cors) = &shared.plan.cors {
                cors.response_headers(req.origin.as_deref(), &mut headers);
            }
            let r = Response {
                status: 200,
                headers,
                content_length: 0,
                body: Body::Empty,
                close: false,
                range_log: "-".into(),
            };
            Viewed::Growing(r, g)
        }
        Lookup::Missing { .. } => Viewed::Answer(Response::text(404, false)),
    }
}

/// Read a growing object to its end: whether it completed (else it was cut).
async fn completed(mut reader: GrowReader) -> bool {
    loop {
        match reader.next().await {
            Grown::Data(_) => {}
            Grown::Complete => return true,
            Grown::Failed => return false,
        }
    }
}

/// A blocking playlist reload (`_HLS_msn`, `_HLS_part`) or delta update (`_HLS_skip`):
/// refused (`400`) past what may be asked, held until the stored playlist holds what is
/// asked for (`503` at the block timeout), answered with a `max-age` of six target durations
/// (the answer to such a query never changes).
async fn blocking_reload(
    shared: &Shared,
    live: &LiveStore,
    path: &str,
    q: &BlockQuery,
    asked: &Asked<'_>,
) -> Viewed {
    let now = Instant::now();
    let o = match live.get(path, now) {
        Lookup::Found(o) => o,
        _ => return Viewed::Answer(Response::text(404, false)),
    };
    let Some(info) = o.info else {
        // Not a media playlist: the directives mean nothing to it.
        let cache = o.cache_control.clone();
        return object_answer(shared, path, o, None, &cache, asked);
    };
    let o = match block_decision(&info, q) {
        Block::Refuse(why) => return Viewed::Answer(Response::explained(400, &why, false)),
        Block::Now => o,
        Block::Wait => {
            live.counters.blocked.fetch_add(1, Relaxed);
            let timeout = live.config.block_timeout.unwrap_or_else(|| {
                info.target
                    .filter(|t| t.is_finite() && *t > 0.0)
                    .map_or(live.config.hold, |t| Duration::from_secs_f64(3.0 * t))
            });
            match live.wait_playlist(path, q, now + timeout).await {
                Some(o) => o,
                None => {
                    live.counters.block_timeouts.fetch_add(1, Relaxed);
                    return Viewed::Answer(Response::text(503, false));
                }
            }
        }
    };
    let cache: Arc<str> = match (q.msn, o.info) {
        (Some(_), Some(info)) => format!("max-age={}", info.blocking_max_age().as_secs()).into(),
        _ => o.cache_control.clone(),
    };
    // Playlists stay in memory (on the heap or in a memory file): read without the disk.
    let delta = match q.skip && o.body.in_memory() {
        true => o
            .body
            .read()
            .ok()
            .and_then(|b| std::str::from_utf8(&b).ok().and_then(skip_segments)),
        false => None,
    };
    object_answer(
        shared,
        path,
        o,
        delta.map(String::into_bytes),
        &cache,
        asked,
    )
}

/// The `200` answer with a stored object (or `text` made from it, which then carries no
/// `ETag`), signed for a signed request when it is a manifest.
fn object_answer(
    shared: &Shared,
    path: &str,
    o: Object,
    text: Option<Vec<u8>>,
    cache: &str,
    asked: &Asked<'_>,
) -> Viewed {
    let name = path.rsplit('/').next().unwrap_or("");
    let made = text.is_some();
    let body = match text {
        Some(t) => LiveBody::Memory(Arc::new(t)),
        None => o.body,
    };
    // A playlist for a signed request carries the signature to its segments (its body is
    // then this token's: no ETag).
    let signed = super::secure_link::live_manifest(shared, path, asked.grant, &body);
    let etag = match (&signed, made) {
        (None, false) => format!("ETag: {}\r\n", o.etag),
        _ => String::new(),
    };
    let mut headers = format!(
        "Content-Type: {}\r\nCache-Control: {cache}\r\n{etag}Last-Modified: {}\r\n",
        content_type(name),
        httpdate::fmt_http_date(o.modified)
    );
    let body = match signed {
        Some(text) => LiveBody::Memory(Arc::new(text)),
        None => body,
    };
    if let Some(cors) = &shared.plan.cors {
        cors.response_headers(asked.req.origin.as_deref(), &mut headers);
    }
    let r = Response {
        status: 200,
        headers,
        content_length: body.len(),
        body: Body::Empty,
        close: false,
        range_log: "-".into(),
    };
    Viewed::Object(r, body)
}

/// Send a growing object's response: the head (no length, chunked) once its first bytes are
/// there, then every piece as it arrives, and the last chunk when the upload completed. A
/// cut upload ends the response without it (`Err`: HTTP/1.1 closes the connection, HTTP/2
/// resets the stream), never as if the body were whole.
async fn send_growing<W: Wire>(
    wire: &mut W,
    head: &[u8],
    reader: Option<GrowReader>,
    send_body: bool,
    clock: &mut SendClock,
) -> Result<(), SendError> {
    let cut = || SendError::Io(std::io::Error::other("the segment's upload was cut"));
    let Some(mut reader) = reader.filter(|_| send_body) else {
        return wire.write(head, false, false, clock).await;
    };
    let mut next = reader.next().await;
    wire.write(head, true, false, clock).await?;
    loop {
        match next {
            Grown::Data(pieces) => {
                for piece in &pieces {
                    wire.write_chunk(piece, clock).await?;
                }
            }
            Grown::Complete => return wire.write(b"0\r\n\r\n", false, false, clock).await,
            Grown::Failed => return Err(cut()),
        }
        next = reader.next().await;
    }
}

/// Whether `req` asks for the server's clock ([`CLOCK_PATH`]).
pub(crate) fn is_clock(req: &crate::request::Request) -> bool {
    use crate::request::Method;
    matches!(req.method, Method::Get | Method::Head)
        && crate::target::path_part(&req.target) == Ok(CLOCK_PATH)
}

/// `GET /.vodkit/clock`: the server's UTC time as ISO 8601 with milliseconds
/// (`2026-11-28T23:00:00.123Z`), for DASH players' `UTCTiming` (`http-iso`); never cached,
/// readable from any origin. Returns whether the connection stays open.
pub(crate) async fn clock<W: Wire>(shared: &Shared, wire: &mut W, asked: &Asked<'_>) -> bool {
    let started = Instant::now();
    let now = humantime::format_rfc3339_millis(std::time::SystemTime::now())
        .to_string()
        .into_bytes();
    let resp = Response {
        status: 200,
        headers: "Content-Type: text/plain\r\nCache-Control: no-store\r\n\
                  Access-Control-Allow-Origin: *\r\n"
            .into(),
        content_length: now.len() as u64,
        body: Body::Text(now),
        close: false,
        range_log: "-".into(),
    };
    answer_text(shared, wire, asked, resp, started).await
}
