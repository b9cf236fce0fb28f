//! The request router: the connection loop ([`crate::conn`]) parses each request and hands
//! it to [`route`], which gives it to one handler: under the ingest prefix (`--ingest`) to
//! [`ingest`], every other request to [`static_files`] (after dropping its body); the
//! server's clock (`GET /.vodkit/clock`, [`ingest::clock`]) is answered first, signed URLs
//! or not. With
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
    if ingest::is_clock(asked.req) {
        if request_body::discard_body(wire, buf, asked.req, shared)
            .await
            .is_err()
        {
            return false;
        }
        return ingest::clock(shared, wire, &asked).await;
    }
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
    if let Some((live, path)) = ingest_target(shared, asked.req) {
        let grant = grant.as_ref().and_then(Option::as_ref);
        let asked = Asked { grant, ..asked };
        return ingest::handle(shared, wire, buf, live, path.as_deref(), &asked).await;
    }
    if request_body::discard_body(wire, buf, asked.req, shared)
        .await
        .is_err()
    {
        return false;
    }
    let grant = grant.flatten();
    let asked = Asked {
        grant: grant.as_ref(),
        ..asked
    };
    static_files::answer(shared, wire, &asked).await
}

/// Whether `req` is for a path under the ingest prefix.
fn under_ingest(shared: &Shared, req: &crate::request::Request) -> bool {
    ingest_target(shared, req).is_some()
}

/// The live store and the object path of a request under the ingest prefix. Live objects
/// are named by the normalized path, as files are ([`crate::target::normalized_path`]); a
/// target under the prefix that does not normalize comes with `None`, for the live
/// handler to refuse.
fn ingest_target<'a>(
    shared: &'a Shared,
    req: &crate::request::Request,
) -> Option<(&'a crate::live::LiveStore, Option<String>)> {
    let live = shared.live.as_deref()?;
    match crate::target::normalized_path(&req.target) {
        Ok(p) if live.covers(&p) => Some((live, Some(p))),
        Ok(_) => None,
        Err(_) => crate::target::path_part(&req.target)
            .is_ok_and(|p| live.covers(p))
            .then_some((live, None)),
    }
}
