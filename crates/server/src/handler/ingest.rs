//! The live-ingest handler (`--ingest`): requests under the ingest prefix. The live source
//! `PUT`s and `DELETE`s segments and playlists (authorized by its token, bodies whole or
//! chunked); viewers `GET` them, a segment not there yet being held until it comes. The
//! live window counts against the memory manager's budget, and past its cap its oldest
//! segments are spilled to disk off the async workers.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use crate::body::SendClock;
use crate::handler::exchange::{finish, Asked, Served};
use crate::handler::request_body::{discard_body, read_body, read_chunked};
use crate::io::Prepared;
use crate::live::{
    cache_control, content_type, AuthError, LiveBody, LiveStore, Lookup, MAPPED_MIN,
};
use crate::range::ByteRange;
use crate::response::{head_bytes, with_http_date, Body, Response};
use crate::wire::{send_text, Wire};
use crate::Shared;

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
    shared.io.engine().set_other_memory(live.level().1);
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
                engine.set_other_memory(store.level().1);
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
    path: &str,
    asked: &Asked<'_>,
    grant: Option<&vodkit_securelink::Grant>,
) -> bool {
    let req = asked.req;
    let started = Instant::now();
    let method = req.method.as_str();
    let mut clock = SendClock::new(shared.config.send_grace, shared.config.min_send_rate);
    let mut object: Option<LiveBody> = None;
    let resp = match method {
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
                let body = if req.chunked {
                    match read_chunked(wire, buf, live.config.max_object, true, shared).await {
                        Ok(body) => Ok(body),
                        Err(()) => {
                            // Answered (400, 413, 408) or gone: the connection closes.
                            live.counters.rejected.fetch_add(1, Relaxed);
                            return false;
                        }
                    }
                } else {
                    read_body(wire, buf, req.content_length, shared).await
                };
                match body {
                    Ok(body) => {
                        let status = live.put(path, body, Instant::now());
                        spill_live_segments(shared, live);
                        note_live_memory(shared, live);
                        match status {
                            s @ (201 | 204) => status_only(s),
                            s => Response::text(s, false),
                        }
                    }
                    Err(()) => {
                        shared.metrics.header_timeouts.inc();
                        let _ = send_text(shared, wire, &Response::text(408, true)).await;
                        return false;
                    }
                }
            }
        },
        "GET" | "HEAD" => {
            if discard_body(wire, buf, req, shared).await.is_err() {
                return false;
            }
            let now = Instant::now();
            let found = match live.get(path, now) {
                Lookup::Found(o) => Some(o),
                Lookup::Missing { hold: false } => None,
                Lookup::Missing { hold: true } => {
                    live.counters.held.fetch_add(1, Relaxed);
                    let o = live.wait_for(path, now + live.config.hold).await;
                    if o.is_none() {
                        live.counters.hold_timeouts.fetch_add(1, Relaxed);
                    }
                    o
                }
            };
            match found {
                Some(o) => {
                    let name = path.rsplit('/').next().unwrap_or("");
                    // A playlist for a signed request carries the signature to its segments
                    // (its body is then this token's: no ETag).
                    let signed = super::secure_link::live_manifest(shared, path, grant, &o.body);
                    let etag = match signed {
                        Some(_) => String::new(),
                        None => format!("ETag: {}\r\n", o.etag),
                    };
                    let mut headers = format!(
                        "Content-Type: {}\r\nCache-Control: {}\r\n{etag}Last-Modified: {}\r\n",
                        content_type(name),
                        cache_control(name),
                        httpdate::fmt_http_date(o.modified)
                    );
                    let body = match signed {
                        Some(text) => LiveBody::Memory(std::sync::Arc::new(text)),
                        None => o.body,
                    };
                    if let Some(cors) = &shared.plan.cors {
                        cors.response_headers(req.origin.as_deref(), &mut headers);
                    }
                    let r = Response {
                        status: 200,
                        headers,
                        content_length: body.len(),
                        body: Body::Empty,
                        close: false,
                        range_log: "-".into(),
                    };
                    object = Some(body);
                    r
                }
                None => Response::text(404, false),
            }
        }
        _ => {
            let mut r = Response::text(405, true);
            r.headers.push_str("Allow: GET, HEAD, PUT, DELETE\r\n");
            r
        }
    };
    let keep = req.wants_keep_alive() && !resp.close && !asked.stopping;
    let head = with_http_date(|date| head_bytes(&resp, date, keep));
    let send_body = method != "HEAD";
    let mut result = match (&object, &resp.body) {
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
    finish(
        shared,
        asked,
        &resp,
        started,
        &clock,
        &Served::default(),
        &result,
    );
    keep && result.is_ok()
}
