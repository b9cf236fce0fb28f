//! Signed URLs (`--secure-link`): the check every request under the prefix passes before a
//! handler sees it (403 without a valid signature, 410 past its expiry), and the signed
//! answer to a manifest, whose URIs get the same expiry ([`crate::signed_manifest`]).

use std::fmt::Write as _;
use std::time::Instant;

use vodkit_securelink::{decoded_path, normalize_path, verify, Grant, Verdict};

use crate::handler::exchange::{answer_text, Asked};
use crate::request::{Method, Request};
use crate::response::{plan, Body, Response};
use crate::signed_manifest::{rewrite, Kind, Signing};
use crate::wire::Wire;
use crate::Shared;

/// The largest manifest rewritten; a larger one is refused with 500 rather than sent
/// unsigned (its URIs would all be refused).
const MAX_MANIFEST_BYTES: u64 = 16 << 20;

/// Check `req` against `--secure-link`: `Ok(None)` when it is off or the path is outside
/// its prefix (or a CORS preflight, which carries no credentials), `Ok(Some(grant))` for a
/// valid signature, `Err(status)` to refuse.
pub(crate) fn check(shared: &Shared, req: &Request) -> Result<Option<Grant>, u16> {
    let Some(link) = shared.config.secure_link.as_ref() else {
        return Ok(None);
    };
    if req.method == Method::Options {
        return Ok(None);
    }
    // A target the handlers cannot map is theirs to refuse (400).
    let Ok(path) = crate::target::path_part(&req.target) else {
        return Ok(None);
    };
    let Some(uri) = decoded_path(path) else {
        return Err(403);
    };
    if !uri.starts_with(&link.prefix) {
        return Ok(None);
    }
    let query = crate::target::query_part(&req.target);
    match verify(&link.secret, query, &uri, vodkit_securelink::unix_now()) {
        Verdict::Valid(grant) => Ok(Some(grant)),
        refused => Err(refused.refusal_status().unwrap_or(403)),
    }
}

/// Answer a refused request (its body already dropped); returns whether the connection
/// stays open.
pub(crate) async fn refuse<W: Wire>(
    shared: &Shared,
    wire: &mut W,
    asked: &Asked<'_>,
    status: u16,
) -> bool {
    let started = Instant::now();
    let mut resp = Response::text(status, false);
    if let Some(cors) = &shared.plan.cors {
        // A player's script should see why it was refused.
        cors.response_headers(asked.req.origin.as_deref(), &mut resp.headers);
    }
    answer_text(shared, wire, asked, resp, started).await
}

/// The first `len` bytes of `file`, at their offsets (an open-file cache may share it).
fn read_all(file: &std::fs::File, len: u64) -> Option<Vec<u8>> {
    let mut bytes = vec![0; usize::try_from(len).ok()?];
    std::os::unix::fs::FileExt::read_exact_at(file, &mut bytes, 0).ok()?;
    Some(bytes)
}

/// `text`, the manifest of kind `kind` at `path` (as requested), with its URIs signed for
/// `grant`; `None` when it is not UTF-8.
fn signed_text(
    kind: Kind,
    secret: &vodkit_securelink::Secret,
    grant: &Grant,
    path: &str,
    text: Vec<u8>,
) -> Option<Vec<u8>> {
    let text = String::from_utf8(text).ok()?;
    let signing = Signing { secret, grant };
    Some(rewrite(kind, &text, &normalize_path(path), &signing).into_bytes())
}

/// A live playlist (`--ingest`) for a signed request: its body with every URI signed, or
/// `None` to send it as stored (not a manifest, no grant, or not text).
pub(crate) fn live_manifest(
    shared: &Shared,
    path: &str,
    grant: Option<&Grant>,
    body: &crate::live::LiveBody,
) -> Option<Vec<u8>> {
    use crate::live::LiveBody;
    let (grant, kind) = (grant?, Kind::of(path)?);
    let secret = &shared.config.secure_link.as_ref()?.secret;
    let text = match body {
        LiveBody::Memory(bytes) => bytes.to_vec(),
        LiveBody::Mapped(f) | LiveBody::Spilled(f) => read_all(&f.file, f.len)?,
    };
    signed_text(kind, secret, grant, path, text)
}

/// The answer to a signed request for a manifest: the file whole (ranges and validators
/// ignored: its body depends on the token) with every URI in it signed, gzipped for a client
/// that takes it. `None` when `req` is not for a manifest.
pub(crate) fn manifest(shared: &Shared, req: &Request, grant: &Grant) -> Option<Response> {
    let path = crate::target::path_part(&req.target).ok()?;
    let kind = Kind::of(path)?;
    let secret = &shared.config.secure_link.as_ref()?.secret;
    let mut resp = plan(&req.for_whole_entity(), None, &shared.root, &shared.plan);
    let Body::File { file, .. } = &resp.body else {
        return Some(resp);
    };
    if resp.status != 200 || resp.content_length > MAX_MANIFEST_BYTES {
        return Some(if resp.status == 200 {
            Response::text(500, false)
        } else {
            resp
        });
    }
    let Some(mut body) = read_all(file, resp.content_length)
        .and_then(|text| signed_text(kind, secret, grant, path, text))
    else {
        return Some(Response::text(500, false));
    };
    // The body is this token's: no validators or ranges that would mix it with another's,
    // and no shared cache keeps it (one keying on the path alone would hand it to others),
    // nor anyone past the token's expiry.
    resp.headers = resp
        .headers
        .split_inclusive("\r\n")
        .filter(|h| {
            !(h.starts_with("ETag:")
                || h.starts_with("Accept-Ranges:")
                || h.starts_with("Cache-Control:"))
        })
        .collect();
    let left = grant.expires.saturating_sub(vodkit_securelink::unix_now());
    let _ = write!(resp.headers, "Cache-Control: private, max-age={left}\r\n");
    if shared.plan.gzip && crate::web::accepts_gzip(req.accept_encoding.as_deref()) {
        if let Ok(z) = crate::web::gzip(&body) {
            body = z;
            let _ = write!(resp.headers, "Content-Encoding: gzip\r\n");
        }
    }
    resp.content_length = body.len() as u64;
    resp.body = Body::Text(body);
    Some(resp)
}
