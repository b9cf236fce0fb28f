//! The request router: the connection loop ([`crate::conn`]) parses each request and hands
//! it to [`route`], which gives it to one handler: under the ingest prefix (`--ingest`) to
//! [`ingest`], every other request to [`static_files`] (after dropping its body). The
//! admin endpoints have a listener and an address of their own ([`crate::admin`]).
//!
//! Below the handlers: [`exchange`] (the request as asked, the accounting of a finished
//! response) and [`request_body`] (reading or dropping request bodies).

pub(crate) mod exchange;
mod ingest;
mod request_body;
mod static_files;

pub(crate) use exchange::Asked;

use crate::wire::Wire;
use crate::Shared;

/// Answer one parsed request (`buf` holds what the client sent after its head); returns
/// whether the connection stays open.
pub(crate) async fn route<W: Wire>(
    shared: &Shared,
    wire: &mut W,
    buf: &mut Vec<u8>,
    asked: Asked<'_>,
) -> bool {
    if let Some(live) = shared.live.as_ref() {
        // Live objects are named by the normalized path, as files are; a target under the
        // prefix that does not normalize is the live handler's to refuse.
        let target = &asked.req.target;
        let path = crate::target::normalized_path(target);
        let raw_under = || crate::target::path_part(target).is_ok_and(|p| live.covers(p));
        match path {
            Ok(p) if live.covers(&p) => {
                return ingest::handle(shared, wire, buf, live, Some(&p), &asked).await;
            }
            Err(_) if raw_under() => {
                return ingest::handle(shared, wire, buf, live, None, &asked).await;
            }
            _ => {}
        }
    }
    if request_body::discard_body(wire, buf, asked.req, shared)
        .await
        .is_err()
    {
        return false;
    }
    static_files::answer(shared, wire, &asked).await
}
