//! Request-head parsing: turns the bytes a client sent into a [`Request`] with the few
//! header fields a file origin needs, enforcing size limits (414/431) along the way.
//!
//! This is pure code over a byte slice so the fuzz target and the randomized test can
//! drive it without sockets.

use thiserror::Error;

use crate::validators::Conditions;

/// Size limits applied while a request head is being received.
#[derive(Debug, Clone, Copy)]
pub struct HeadLimits {
    /// Longest request line accepted (method, target, version), in bytes.
    pub max_request_line: usize,
    /// Longest request head accepted (request line plus all header lines), in bytes.
    pub max_head_bytes: usize,
    /// Most header fields accepted.
    pub max_headers: usize,
}

impl Default for HeadLimits {
    fn default() -> Self {
        HeadLimits {
            max_request_line: 8192,
            max_head_bytes: 16384,
            max_headers: 64,
        }
    }
}

/// Request methods the origin distinguishes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Options,
    /// Any other syntactically valid method (answered with 405).
    Other(String),
}

impl Method {
    pub fn as_str(&self) -> &str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Options => "OPTIONS",
            Method::Other(m) => m,
        }
    }
}

/// A parsed request head, reduced to what the origin acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: Method,
    /// The request target exactly as sent (origin-form or absolute-form).
    pub target: String,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor_version: u8,
    pub host: Option<String>,
    pub range: Option<String>,
    pub if_range: Option<String>,
    pub if_match: Option<String>,
    pub if_none_match: Option<String>,
    pub if_modified_since: Option<String>,
    pub if_unmodified_since: Option<String>,
    /// Value of `X-Session-Id`, used only for the access log.
    pub session_id: Option<String>,
    /// `User-Agent` and `Referer` (non-UTF-8 bytes replaced), only for the access log.
    pub user_agent: Option<String>,
    pub referer: Option<String>,
    pub origin: Option<String>,
    /// `Accept-Encoding` (gzip for text manifests).
    pub accept_encoding: Option<String>,
    /// `Access-Control-Request-Headers` of a CORS preflight.
    pub cors_request_headers: Option<String>,
    /// `Connection: close` was sent.
    pub close: bool,
    /// `Connection: keep-alive` was sent (matters for HTTP/1.0).
    pub keep_alive: bool,
    /// Declared request body length (bodies are read and discarded, except a live
    /// source's `PUT`).
    pub content_length: u64,
    /// `Authorization` (a live source's bearer token).
    pub authorization: Option<String>,
    /// `Expect: 100-continue` was sent.
    pub expect_continue: bool,
    /// The body is framed by `Transfer-Encoding: chunked` (the only transfer coding
    /// accepted; a live encoder's `PUT` of a segment it is still writing).
    pub chunked: bool,
}

impl Request {
    /// A request with only its request line: no header fields seen yet.
    pub fn new(method: Method, target: String, minor_version: u8) -> Request {
        Request {
            method,
            target,
            minor_version,
            host: None,
            range: None,
            if_range: None,
            if_match: None,
            if_none_match: None,
            if_modified_since: None,
            if_unmodified_since: None,
            session_id: None,
            user_agent: None,
            referer: None,
            origin: None,
            accept_encoding: None,
            cors_request_headers: None,
            close: false,
            keep_alive: false,
            content_length: 0,
            authorization: None,
            expect_continue: false,
            chunked: false,
        }
    }

    /// The same request asking for the entity whole and as stored: no `Range`, no
    /// preconditions, no `Accept-Encoding`.
    pub fn for_whole_entity(&self) -> Request {
        let mut whole = self.clone();
        whole.range = None;
        whole.if_range = None;
        whole.if_match = None;
        whole.if_none_match = None;
        whole.if_modified_since = None;
        whole.if_unmodified_since = None;
        whole.accept_encoding = None;
        whole
    }

    /// The preconditions the request carries, for [`crate::validators::evaluate`].
    pub fn conditions(&self) -> Conditions<'_> {
        Conditions {
            if_match: self.if_match.as_deref(),
            if_unmodified_since: self.if_unmodified_since.as_deref(),
            if_none_match: self.if_none_match.as_deref(),
            if_modified_since: self.if_modified_since.as_deref(),
        }
    }

    /// Whether a body follows the head.
    pub fn has_body(&self) -> bool {
        self.chunked || self.content_length > 0
    }

    /// Whether the connection may stay open after the response, from the client's side.
    pub fn wants_keep_alive(&self) -> bool {
        if self.close {
            return false;
        }
        self.minor_version >= 1 || self.keep_alive
    }
}

/// Outcome of looking at a buffer that may hold a request head.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// More bytes are needed.
    Partial,
    /// A complete head; the second field is its length in bytes.
    Complete(Box<Request>, usize),
}

/// Why a request head was rejected; each maps to one response status.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum HeadError {
    #[error("request line too long")]
    UriTooLong,
    #[error("request head too large")]
    HeadTooLarge,
    #[error("malformed request: {0}")]
    Malformed(&'static str),
    #[error("transfer codings other than chunked are not supported")]
    TransferEncoding,
}

impl HeadError {
    /// The HTTP status code answering this error.
    pub fn status(&self) -> u16 {
        match self {
            HeadError::UriTooLong => 414,
            HeadError::HeadTooLarge => 431,
            HeadError::Malformed(_) => 400,
            HeadError::TransferEncoding => 501,
        }
    }
}

/// Upper bound on [`HeadLimits::max_headers`] (the parser's header slots live on the stack).
pub const MAX_HEADER_SLOTS: usize = 256;

/// Try to parse one request head from the start of `buf`.
pub fn parse_head(buf: &[u8], limits: &HeadLimits) -> Result<Parsed, HeadError> {
    check_request_line_length(buf, limits)?;
    // Slots left uninitialized: zeroing all of them (8 KiB) cost more than the parse.
    let mut slots =
        [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADER_SLOTS];
    let wanted = limits.max_headers.clamp(1, MAX_HEADER_SLOTS);
    let mut raw = httparse::Request::new(&mut []);
    let status = match raw.parse_with_uninit_headers(buf, &mut slots[..wanted]) {
        Ok(s) => s,
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::HeadTooLarge),
        Err(httparse::Error::Version) => return Err(HeadError::Malformed("bad HTTP version")),
        Err(httparse::Error::Token) => return Err(HeadError::Malformed("bad method")),
        Err(httparse::Error::HeaderName) => return Err(HeadError::Malformed("bad header name")),
        Err(httparse::Error::HeaderValue) => return Err(HeadError::Malformed("bad header value")),
        Err(_) => return Err(HeadError::Malformed("bad request line")),
    };
    let consumed = match status {
        httparse::Status::Partial => {
            if buf.len() > limits.max_head_bytes {
                return Err(HeadError::HeadTooLarge);
            }
            return Ok(Parsed::Partial);
        }
        httparse::Status::Complete(n) => n,
    };
    if consumed > limits.max_head_bytes {
        return Err(HeadError::HeadTooLarge);
    }
    let request = build_request(&raw)?;
    Ok(Parsed::Complete(Box::new(request), consumed))
}

/// 414 as soon as the first line is known to exceed the limit, even before it ends.
fn check_request_line_length(buf: &[u8], limits: &HeadLimits) -> Result<(), HeadError> {
    let window = &buf[..buf.len().min(limits.max_request_line + 2)];
    match window.iter().position(|&b| b == b'\n') {
        Some(end) if end > limits.max_request_line + 1 => Err(HeadError::UriTooLong),
        Some(_) => Ok(()),
        None if buf.len() > limits.max_request_line + 1 => Err(HeadError::UriTooLong),
        None => Ok(()),
    }
}

fn build_request(raw: &httparse::Request<'_, '_>) -> Result<Request, HeadError> {
    let method = match raw.method.unwrap_or("") {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        "OPTIONS" => Method::Options,
        "" => return Err(HeadError::Malformed("missing method")),
        other => Method::Other(other.to_string()),
    };
    let target = raw.path.ok_or(HeadError::Malformed("missing target"))?;
    if target.is_empty() {
        return Err(HeadError::Malformed("empty target"));
    }
    let minor_version = raw.version.ok_or(HeadError::Malformed("missing version"))?;
    let mut req = Request::new(method, target.to_string(), minor_version);
    let mut seen_length = false;
    let mut codings = Vec::new();
    for h in raw.headers.iter() {
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            codings.extend(
                header_text(h.value)?
                    .split(',')
                    .map(|t| t.trim().to_ascii_lowercase())
                    .filter(|t| !t.is_empty()),
            );
            continue;
        }
        apply_header(&mut req, h.name, h.value, &mut seen_length)?;
    }
    if !codings.is_empty() {
        // RFC 9112 6.1 and 6.3: HTTP/1.0 has no transfer codings, and a message with both
        // framings is a smuggling attempt; only a lone `chunked` is understood.
        if req.minor_version == 0 {
            return Err(HeadError::Malformed("Transfer-Encoding in HTTP/1.0"));
        }
        if seen_length {
            return Err(HeadError::Malformed(
                "both Transfer-Encoding and Content-Length",
            ));
        }
        if codings != ["chunked"] {
            return Err(HeadError::TransferEncoding);
        }
        req.chunked = true;
    }
    if req.minor_version >= 1 && req.host.is_none() {
        return Err(HeadError::Malformed("missing Host header"));
    }
    Ok(req)
}

fn header_text(value: &[u8]) -> Result<String, HeadError> {
    let text = std::str::from_utf8(value).map_err(|_| HeadError::Malformed("non-UTF-8 header"))?;
    Ok(text.trim().to_string())
}

/// Set a single-valued field; a second, different occurrence is an error.
fn set_once(slot: &mut Option<String>, value: String, what: &'static str) -> Result<(), HeadError> {
    match slot {
        Some(old) if *old != value => Err(HeadError::Malformed(what)),
        _ => {
            *slot = Some(value);
            Ok(())
        }
    }
}

fn apply_header(
    req: &mut Request,
    name: &str,
    value: &[u8],
    seen_length: &mut bool,
) -> Result<(), HeadError> {
    // Lowercased on the stack; a name longer than any the origin knows matches none.
    let mut lower = [0u8; 32];
    match crate::ascii_lowercase_in(name, &mut lower) {
        "host" => set_once(
            &mut req.host,
            header_text(value)?,
            "conflicting Host headers",
        ),
        "range" => set_once(
            &mut req.range,
            header_text(value)?,
            "conflicting Range headers",
        ),
        "authorization" => set_once(
            &mut req.authorization,
            header_text(value)?,
            "conflicting Authorization headers",
        ),
        "expect" => {
            req.expect_continue = header_text(value)?.eq_ignore_ascii_case("100-continue");
            Ok(())
        }
        "if-range" => set_once(
            &mut req.if_range,
            header_text(value)?,
            "conflicting If-Range",
        ),
        "if-modified-since" => set_once(
            &mut req.if_modified_since,
            header_text(value)?,
            "conflicting If-Modified-Since",
        ),
        "if-unmodified-since" => set_once(
            &mut req.if_unmodified_since,
            header_text(value)?,
            "conflicting If-Unmodified-Since",
        ),
        "if-none-match" => append_list(&mut req.if_none_match, header_text(value)?),
        "if-match" => append_list(&mut req.if_match, header_text(value)?),
        "user-agent" => {
            req.user_agent = Some(String::from_utf8_lossy(value).trim().to_string());
            Ok(())
        }
        "referer" => {
            req.referer = Some(String::from_utf8_lossy(value).trim().to_string());
            Ok(())
        }
        "x-session-id" => {
            req.session_id = Some(header_text(value)?);
            Ok(())
        }
        "origin" => {
            req.origin = Some(header_text(value)?);
            Ok(())
        }
        "accept-encoding" => append_list(&mut req.accept_encoding, header_text(value)?),
        "access-control-request-headers" => {
            append_list(&mut req.cors_request_headers, header_text(value)?)
        }
        "connection" => {
            for token in header_text(value)?.split(',') {
                let t = token.trim();
                if t.eq_ignore_ascii_case("close") {
                    req.close = true;
                } else if t.eq_ignore_ascii_case("keep-alive") {
                    req.keep_alive = true;
                }
            }
            Ok(())
        }
        "content-length" => {
            let text = header_text(value)?;
            if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) || text.len() > 18 {
                return Err(HeadError::Malformed("bad Content-Length"));
            }
            let n: u64 = text
                .parse()
                .map_err(|_| HeadError::Malformed("bad Content-Length"))?;
            if *seen_length && n != req.content_length {
                return Err(HeadError::Malformed("conflicting Content-Length"));
            }
            *seen_length = true;
            req.content_length = n;
            Ok(())
        }
        _ => Ok(()),
    }
}

fn append_list(slot: &mut Option<String>, value: String) -> Result<(), HeadError> {
    match slot {
        Some(old) => {
            old.push_str(", ");
            old.push_str(&value);
        }
        None => *slot = Some(value),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Parsed, HeadError> {
        parse_head(text.as_bytes(), &HeadLimits::default())
    }

    fn complete(text: &str) -> (Request, usize) {
        match parse(text).expect("parse") {
            Parsed::Complete(r, n) => (*r, n),
            Parsed::Partial => panic!("partial: {text:?}"),
        }
    }

    #[test]
    fn parses_fields_used_by_the_origin() {
        let text = "GET /a.mp4 HTTP/1.1\r\nHost: x\r\nRange: bytes=0-9\r\nX-Session-Id: s7\r\n\
                    If-None-Match: \"a\"\r\nIf-None-Match: \"b\"\r\nConnection: close\r\n\r\nGET";
        let (r, n) = complete(text);
        assert_eq!(n, text.len() - 3);
        assert_eq!(r.method, Method::Get);
        assert_eq!(r.target, "/a.mp4");
        assert_eq!(r.range.as_deref(), Some("bytes=0-9"));
        assert_eq!(r.session_id.as_deref(), Some("s7"));
        assert_eq!(r.if_none_match.as_deref(), Some("\"a\", \"b\""));
        assert!(!r.wants_keep_alive());
    }

    #[test]
    fn partial_until_blank_line() {
        assert_eq!(
            parse("GET / HTTP/1.1\r\nHost: x\r\n").unwrap(),
            Parsed::Partial
        );
    }

    #[test]
    fn http10_keep_alive_only_when_asked() {
        let (r, _) = complete("GET / HTTP/1.0\r\n\r\n");
        assert!(!r.wants_keep_alive());
        let (r, _) = complete("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
        assert!(r.wants_keep_alive());
    }

    #[test]
    fn limits_map_to_414_and_431() {
        let long = format!("GET /{} HTTP/1.1\r\n", "a".repeat(9000));
        assert_eq!(parse(&long).unwrap_err().status(), 414);
        let no_end = format!("GET /{}", "a".repeat(9000));
        assert_eq!(parse(&no_end).unwrap_err().status(), 414);
        let big = format!(
            "GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n",
            "b".repeat(17000)
        );
        assert_eq!(parse(&big).unwrap_err().status(), 431);
        let mut many = String::from("GET / HTTP/1.1\r\nHost: x\r\n");
        for i in 0..70 {
            many.push_str(&format!("X-{i}: v\r\n"));
        }
        many.push_str("\r\n");
        assert_eq!(parse(&many).unwrap_err().status(), 431);
    }

    #[test]
    fn malformed_heads_are_400() {
        for bad in [
            "GET / HTTP/1.1\r\n\r\n",
            "GET / HTTP/9.9\r\nHost: x\r\n\r\n",
            "G(T / HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            "GET / HTTP/1.1\r\nHo st: x\r\n\r\n",
        ] {
            assert_eq!(parse(bad).unwrap_err().status(), 400, "{bad:?}");
        }
        let te = "PUT / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n";
        let (r, _) = complete(te);
        assert!(r.chunked && r.has_body());
        for (head, status) in [
            ("Transfer-Encoding: gzip, chunked", 501),
            ("Transfer-Encoding: gzip", 501),
            (
                "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked",
                501,
            ),
            ("Transfer-Encoding: chunked\r\nContent-Length: 5", 400),
            ("Content-Length: 5\r\nTransfer-Encoding: chunked", 400),
        ] {
            let raw = format!("PUT / HTTP/1.1\r\nHost: x\r\n{head}\r\n\r\n");
            assert_eq!(parse(&raw).unwrap_err().status(), status, "{head}");
        }
        let old = "PUT / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(parse(old).unwrap_err().status(), 400);
    }
}
