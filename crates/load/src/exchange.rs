//! What an exchange is, whatever the HTTP version: the request as asked ([`Ask`]), its
//! progress and outcome ([`Progress`], [`Done`], [`ExchangeError`]), the response-head
//! facts the client acts on ([`Head`]) and how much body they call for ([`body_plan`]),
//! and the body bytes checked, handed on and counted as they arrive ([`take_body`]).
//! HTTP/1.1 ([`crate::http`]) and HTTP/2 ([`crate::h2`]) exchanges both stand on it.

use crate::record::{Failure, FailureReason};
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::time::Instant;
use vodkit_workload::content;
use vodkit_workload::model::ByteRange;

/// What to ask for.
pub struct Ask<'a> {
    pub path: &'a str,
    pub range: Option<ByteRange>,
    /// `Host` header value.
    pub host: &'a str,
    pub session_id: u64,
    pub verify: bool,
    /// Sign the path (`--sign-key`) as the request is written, so its expiry counts from
    /// then.
    pub sign: Option<&'a vodkit_securelink::Signer>,
}

/// Progress of an exchange, kept outside the future so a timeout still knows it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Progress {
    pub first_byte: Option<Instant>,
    pub bytes: u64,
    pub status: u16,
}

/// A complete response.
#[derive(Debug)]
pub struct Done {
    /// The connection may carry another request.
    pub reusable: bool,
}

/// Why an exchange did not complete.
#[derive(Debug)]
pub enum ExchangeError {
    /// A reused connection was found closed before any response byte: retry on a new one.
    Stale,
    Failed(Failure),
}

pub(crate) fn fail(reason: FailureReason, detail: impl Into<String>) -> ExchangeError {
    ExchangeError::Failed(Failure::new(reason, detail))
}

/// The request target: the path, signed as it is sent when the run signs URLs.
pub(crate) fn target<'a>(ask: &Ask<'a>) -> std::borrow::Cow<'a, str> {
    match ask.sign {
        Some(s) => s
            .sign_target(ask.path, vodkit_securelink::unix_now())
            .into(),
        None => ask.path.into(),
    }
}

/// The parts of a response head the client acts on.
#[derive(Debug, Default)]
pub(crate) struct Head {
    pub len: usize,
    pub status: u16,
    pub http10: bool,
    pub content_length: Option<u64>,
    pub connection_close: bool,
    pub keep_alive: bool,
    pub range_first: Option<u64>,
    /// The body comes in chunks (`Transfer-Encoding: chunked`): its end is marked, not
    /// announced.
    pub chunked: bool,
}

/// The first byte of a `Content-Range: bytes a-b/n` value.
pub(crate) fn range_first(value: &str) -> Option<u64> {
    value
        .strip_prefix("bytes ")
        .and_then(|r| r.split('-').next())
        .and_then(|f| f.trim().parse().ok())
}

/// How many body bytes to read, and whether the connection must be closed afterwards.
pub(crate) fn body_plan(ask: &Ask<'_>, head: &Head) -> Result<(Option<u64>, bool), ExchangeError> {
    let want_status = if ask.range.is_some() { 206 } else { 200 };
    if head.status == 503 {
        return Err(fail(
            FailureReason::Refused,
            format!("{} refused with 503", ask.path),
        ));
    }
    if head.status != want_status {
        return Err(fail(
            FailureReason::Status,
            format!(
                "{} answered {}, expected {want_status}",
                ask.path, head.status
            ),
        ));
    }
    if let (Some(range), Some(first)) = (ask.range, head.range_first) {
        if first != range.first() {
            return Err(fail(
                FailureReason::Protocol,
                format!(
                    "Content-Range starts at {first}, asked for {}",
                    range.first()
                ),
            ));
        }
    }
    let cl = head.content_length;
    match ask.range {
        Some(ByteRange::Closed { .. }) => {
            let want = ask.range.map(|r| r.len()).unwrap_or(0);
            match cl {
                Some(n) if n > want => Err(fail(
                    FailureReason::OversizedBody,
                    format!("server announced {n} bytes for a {want}-byte range"),
                )),
                Some(n) if n < want => Err(fail(
                    FailureReason::ShortBody,
                    format!("server announced {n} bytes for a {want}-byte range"),
                )),
                _ => Ok((Some(want), false)),
            }
        }
        Some(ByteRange::OpenEnded { read, .. }) => match cl {
            Some(n) if n < read => Err(fail(
                FailureReason::ShortBody,
                format!("server announced {n} bytes, the session reads {read}"),
            )),
            // Read what the session needs, then hang up.
            _ => Ok((Some(read), true)),
        },
        // Without a length the body runs to the connection's close, unless chunked.
        None => Ok((cl, cl.is_none() && !head.chunked)),
    }
}

/// A consumer of response body bytes as they arrive (a player keeping a manifest,
/// a checksum of a media piece).
pub type BodySink<'a, 'f> = &'a mut (dyn FnMut(&[u8]) + Send + 'f);

/// Body bytes that arrived (`data`, at `progress.bytes` into the body): checked against
/// the file's content when `key` is set (the file's [`content::path_key`]; `origin`: the
/// body's first byte in the file), handed to the sink, counted.
pub(crate) fn take_body(
    key: Option<u64>,
    origin: u64,
    ask: &Ask<'_>,
    data: &[u8],
    progress: &mut Progress,
    live_bytes: &AtomicU64,
    sink: Option<BodySink<'_, '_>>,
) -> Result<(), ExchangeError> {
    if let Some(key) = key {
        if let Some(at) = content::first_mismatch(key, origin + progress.bytes, data) {
            return Err(fail(
                FailureReason::Mismatch,
                format!(
                    "{} byte {} differs from the file content",
                    ask.path,
                    origin + progress.bytes + at as u64
                ),
            ));
        }
    }
    if let Some(sink) = sink {
        sink(data);
    }
    progress.bytes += data.len() as u64;
    live_bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
    Ok(())
}
