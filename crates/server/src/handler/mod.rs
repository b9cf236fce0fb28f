//! The request router: the connection loop ([`crate::conn`]) parses each request and hands
//! it to [`route`], which gives it to one handler: under the ingest prefix (`--ingest`) to
//! [`ingest`], every other request to [`static_files`] (after dropping its body). With
//! `--secure-link`, [`secure_link`] checks the request's signature first (the live source's
//! writes excepted: its token guards them). The
//! admin endpoints have a listener and an address of their own ([`crate::admin`]).
//!
//! Below the handlers: [`exchange`] (the request as asked, the accounting of a finished
//! response) and [`request_body`] (reading or dropping request bodies).

pub(crate) mod exchange;
mod ingest;
mod request_body;
mod secure_link;
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
    use crate::request::Method;
    let viewer = matches!(asked.req.method, Method::Get | Method::Head);
    let grant = match secure_link::check(shared, asked.req) {
        Ok(g) => Some(g),
        Err(_) if !viewer && under_ingest(shared, asked.req) => None,
        Err(status) => {
            if request_body::discard_body(wire, buf, asked.req, shared)
                .await
                .is_err()
            {
                return false;
            }
            return secure_link::refuse(shared, wire, &asked, status).await;
        }
    };
    if let Some(live) = shared.live.as_ref() {
        let path = crate::target::path_part(&asked.req.target).ok();
        if let Some(path) = path.filter(|p| live.covers(p)) {
            let grant = grant.as_ref().and_then(Option::as_ref);
            return ingest::handle(shared, wire, buf, live, path, &asked, grant).await;
        }
    }
    if request_body::discard_body(wire, buf, asked.req, shared)
        .await
        .is_err()
    {
        return false;
    }
    let grant = grant.flatten();
    static_files::answer(shared, wire, &asked, grant.as_ref()).await
}

/// Whether `req` is for a path under the ingest prefix.
fn under_ingest(shared: &Shared, req: &crate::request::Request) -> bool {
    let path = crate::target::path_part(&req.target).ok();
    match (shared.live.as_ref(), path) {
        (Some(live), Some(p)) => live.covers(p),
        _ => false,
    }
}
