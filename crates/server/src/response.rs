//! Deciding the response to a request: status, header block and body plan (file ranges,
//! a multipart/byteranges layout, or a short generated body).

use std::fmt::Write as _;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;

use vodkit_prefetch::FileFacts;

use crate::mime::content_type;
use crate::range::{self, ByteRange, RangeSpec, Resolved};
use crate::request::{Method, Request};
use crate::target::{relative_path, DocRoot, TargetError};
use crate::validators::{evaluate, if_range_holds, Precondition, Validators};
use crate::web::{self, CachePolicy, Cors, FileKind};

/// Settings the planner needs from the server configuration.
#[derive(Debug, Clone)]
pub struct PlanSettings {
    pub max_ranges: usize,
    pub cors: Option<Cors>,
    pub cache: CachePolicy,
    pub gzip: bool,
}

/// One piece of a response body.
#[derive(Debug)]
pub enum Segment {
    /// Literal bytes (multipart boundaries and part headers).
    Bytes(Vec<u8>),
    /// A byte range of the file, sent with sendfile.
    File(ByteRange),
}

/// The body to send after the head.
#[derive(Debug)]
pub enum Body {
    Empty,
    Text(Vec<u8>),
    File {
        file: Arc<File>,
        path: PathBuf,
        /// The file's engine identity (device and inode) and size, from this request's
        /// stat of it.
        facts: FileFacts,
        segments: Vec<Segment>,
    },
}

/// A planned response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    /// Header lines (each ending in CRLF) except Date, Server and Connection.
    pub headers: String,
    /// Value for Content-Length; also the body length for GET.
    pub content_length: u64,
    pub body: Body,
    /// Close the connection after this response whatever the client wants.
    pub close: bool,
    /// The requested ranges, normalized for the access log.
    pub range_log: String,
}

impl Response {
    /// A short text response for errors and informational statuses.
    pub fn text(status: u16, close: bool) -> Response {
        let body = format!("{status} {}\n", reason(status)).into_bytes();
        let headers = "Content-Type: text/plain; charset=utf-8\r\n".to_string();
        Response {
            status,
            headers,
            content_length: body.len() as u64,
            body: Body::Text(body),
            close,
            range_log: "-".into(),
        }
    }
}

impl Response {
    /// [`Response::text`] saying what refused the request after the reason phrase
    /// (`507 Insufficient Storage: …`).
    pub fn explained(status: u16, why: &str, close: bool) -> Response {
        let mut r = Response::text(status, close);
        let text = format!("{status} {}: {why}\n", reason(status)).into_bytes();
        r.content_length = text.len() as u64;
        r.body = Body::Text(text);
        r
    }
}

/// Standard reason phrases for the statuses this server sends.
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        304 => "Not Modified",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        410 => "Gone",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        416 => "Range Not Satisfiable",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        507 => "Insufficient Storage",
        _ => "Unknown",
    }
}

/// Plan the response to a GET, HEAD or OPTIONS request for a file under `root`;
/// `range_specs` is the request's `Range` header as [`range::parse_range`] read it (the
/// caller parses it once for the planner and the I/O layer).
pub fn plan(
    req: &Request,
    range_specs: Option<&[RangeSpec]>,
    root: &DocRoot,
    settings: &PlanSettings,
) -> Response {
    let range_log = range::log_text(range_specs);
    let mut resp = plan_inner(req, root, settings, range_specs);
    resp.range_log = range_log;
    if let Some(cors) = &settings.cors {
        let origin = req.origin.as_deref();
        if req.method == Method::Options {
            cors.preflight_headers(
                origin,
                req.cors_request_headers.as_deref(),
                &mut resp.headers,
            );
        } else {
            cors.response_headers(origin, &mut resp.headers);
        }
    }
    resp
}

fn plan_inner(
    req: &Request,
    root: &DocRoot,
    settings: &PlanSettings,
    specs: Option<&[RangeSpec]>,
) -> Response {
    match req.method {
        Method::Get | Method::Head => {}
        Method::Options => return bodiless(204, "Allow: GET, HEAD, OPTIONS\r\n".into()),
        Method::Other(_) => {
            let mut r = Response::text(405, false);
            r.headers.push_str("Allow: GET, HEAD, OPTIONS\r\n");
            return r;
        }
    }
    let mut rel = match relative_path(&req.target) {
        Ok(p) => p,
        Err(e) => return Response::text(e.status(), false),
    };
    let (file, meta) = match root.open_shared(&rel) {
        Ok(f) => f,
        Err(TargetError::Directory) => match directory(req, root, &rel) {
            Ok((index, f)) => {
                rel = index;
                f
            }
            Err(r) => return *r,
        },
        Err(e) => return Response::text(e.status(), false),
    };
    let size = meta.len();
    let facts = FileFacts {
        dev: meta.dev(),
        ino: meta.ino(),
        size,
    };
    let mut v = Validators::from_metadata(size, meta.mtime());
    let ctype = content_type(&rel);
    let compressible = settings.gzip && web::compressible(ctype) && size <= web::GZIP_MAX_BYTES;
    // A whole text file for a client that takes gzip goes out compressed, as its own
    // representation (its own ETag); ranges of it are served from the identity form.
    let gzip = compressible && specs.is_none() && web::accepts_gzip(req.accept_encoding.as_deref());
    if gzip {
        v.etag = format!("{}-gz\"", v.etag.trim_end_matches('"'));
    }
    let mut headers = String::with_capacity(256);
    let _ = write!(
        headers,
        "Accept-Ranges: bytes\r\nETag: {}\r\nLast-Modified: {}\r\n",
        v.etag,
        v.last_modified_http()
    );
    if compressible {
        headers.push_str("Vary: Accept-Encoding\r\n");
    }
    // Cache-Control goes on what a cache may keep (200, 206, 304), never on an error.
    let cache_at = headers.len();
    let kind = FileKind::of(ctype);
    // A manifest is read to tell a live one (cached about half a segment) from VoD.
    let manifest = (kind == FileKind::Manifest && size <= web::GZIP_MAX_BYTES)
        .then(|| read_whole(&file, size).ok())
        .flatten();
    match &manifest {
        Some(text) => settings.cache.manifest_header(text, &mut headers),
        None => settings.cache.header(kind, &mut headers),
    }
    match evaluate(&req.conditions(), &v) {
        Precondition::Proceed => {}
        Precondition::NotModified => return bodiless(304, headers),
        Precondition::Failed => {
            let mut r = Response::text(412, false);
            r.headers.push_str(&headers[..cache_at]);
            return r;
        }
    }
    let use_ranges = match (specs, req.if_range.as_deref()) {
        (Some(_), Some(ir)) => if_range_holds(ir, &v),
        (Some(_), None) => true,
        (None, _) => false,
    };
    let resolved = match specs {
        Some(s) if use_ranges => range::resolve(s, size, settings.max_ranges),
        _ => Resolved::Full,
    };
    if gzip && matches!(resolved, Resolved::Full) {
        return gzipped(&file, size, manifest, headers, ctype);
    }
    match resolved {
        Resolved::Full => {
            let _ = write!(headers, "Content-Type: {ctype}\r\n");
            let segments = if size > 0 {
                vec![Segment::File(ByteRange {
                    first: 0,
                    last: size - 1,
                })]
            } else {
                Vec::new()
            };
            file_response(200, headers, size, file, rel, facts, segments)
        }
        Resolved::Unsatisfiable => {
            let mut r = Response::text(416, false);
            let _ = write!(r.headers, "Content-Range: bytes */{size}\r\n");
            r.headers.push_str(&headers[..cache_at]);
            r
        }
        Resolved::Partial(ranges) if ranges.len() == 1 => {
            let br = ranges[0];
            let _ = write!(
                headers,
                "Content-Type: {ctype}\r\nContent-Range: bytes {}-{}/{size}\r\n",
                br.first, br.last
            );
            file_response(
                206,
                headers,
                br.len(),
                file,
                rel,
                facts,
                vec![Segment::File(br)],
            )
        }
        Resolved::Partial(ranges) => {
            let boundary = boundary_for(&v.etag, &ranges);
            let (segments, total) = multipart_segments(&ranges, size, ctype, &boundary);
            let _ = write!(
                headers,
                "Content-Type: multipart/byteranges; boundary={boundary}\r\n"
            );
            file_response(206, headers, total, file, rel, facts, segments)
        }
    }
}

fn file_response(
    status: u16,
    headers: String,
    content_length: u64,
    file: Arc<File>,
    path: PathBuf,
    facts: FileFacts,
    segments: Vec<Segment>,
) -> Response {
    Response {
        status,
        headers,
        content_length,
        body: Body::File {
            file,
            path,
            facts,
            segments,
        },
        close: false,
        range_log: String::new(),
    }
}

fn bodiless(status: u16, headers: String) -> Response {
    Response {
        status,
        headers,
        content_length: 0,
        body: Body::Empty,
        close: false,
        range_log: String::new(),
    }
}

/// A directory: without a trailing slash, redirect to it with one (so relative URLs in its
/// page resolve, as nginx does); with one, its `index.html`, else 403 (no listings).
fn directory(
    req: &Request,
    root: &DocRoot,
    rel: &std::path::Path,
) -> Result<(PathBuf, crate::open_files::OpenedFile), Box<Response>> {
    let path = crate::target::path_part(&req.target).unwrap_or("/");
    if !path.ends_with('/') {
        let query = req.target.find('?').map_or("", |i| &req.target[i..]);
        let mut r = Response::text(301, false);
        let _ = write!(r.headers, "Location: {path}/{query}\r\n");
        return Err(Box::new(r));
    }
    let index = rel.join("index.html");
    match root.open_shared(&index) {
        Ok(f) => Ok((index, f)),
        Err(TargetError::NotFound) => Err(Box::new(Response::text(403, false))),
        Err(e) => Err(Box::new(Response::text(e.status(), false))),
    }
}

/// The whole file, gzipped, as a generated body. Files here are at most
/// [`web::GZIP_MAX_BYTES`] of text (manifests, subtitles, pages), read in one call.
fn gzipped(
    file: &File,
    size: u64,
    text: Option<Vec<u8>>,
    mut headers: String,
    ctype: &str,
) -> Response {
    let body = match text {
        Some(t) => web::gzip(&t),
        None => read_whole(file, size).and_then(|t| web::gzip(&t)),
    };
    match body {
        Ok(z) => {
            let _ = write!(
                headers,
                "Content-Type: {ctype}\r\nContent-Encoding: gzip\r\n"
            );
            Response {
                status: 200,
                headers,
                content_length: z.len() as u64,
                body: Body::Text(z),
                close: false,
                range_log: String::new(),
            }
        }
        Err(_) => Response::text(500, false),
    }
}

/// The whole of a small file, read at its offsets, not the descriptor's position (the
/// open-file cache shares it).
fn read_whole(file: &File, size: u64) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt as _;
    let mut text = vec![0; size as usize];
    file.read_exact_at(&mut text, 0)?;
    Ok(text)
}

/// A boundary that depends on the file version and the ranges, so responses are
/// reproducible, and that is long enough not to occur in video data by accident.
fn boundary_for(etag: &str, ranges: &[ByteRange]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            h ^= *b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    feed(etag.as_bytes());
    for r in ranges {
        feed(&r.first.to_le_bytes());
        feed(&r.last.to_le_bytes());
    }
    format!("vodkit-byteranges-{h:016x}")
}

/// Lay out a multipart/byteranges body; returns the segments and the total length.
fn multipart_segments(
    ranges: &[ByteRange],
    size: u64,
    ctype: &str,
    boundary: &str,
) -> (Vec<Segment>, u64) {
    let mut segments = Vec::with_capacity(ranges.len() * 2 + 1);
    let mut total = 0u64;
    for (i, r) in ranges.iter().enumerate() {
        let lead = if i == 0 { "" } else { "\r\n" };
        let part = format!(
            "{lead}--{boundary}\r\nContent-Type: {ctype}\r\nContent-Range: bytes {}-{}/{size}\r\n\r\n",
            r.first, r.last
        );
        total += part.len() as u64 + r.len();
        segments.push(Segment::Bytes(part.into_bytes()));
        segments.push(Segment::File(*r));
    }
    let tail = format!("\r\n--{boundary}--\r\n");
    total += tail.len() as u64;
    segments.push(Segment::Bytes(tail.into_bytes()));
    (segments, total)
}

/// Format the complete response head.
pub fn head_bytes(resp: &Response, date: &str, keep_alive: bool) -> Vec<u8> {
    let length = (resp.status != 304 && resp.status != 204).then_some(resp.content_length);
    head_with_length(resp, date, keep_alive, length)
}

/// [`head_bytes`] with `Content-Length: length`, or none (a body of unknown length, its
/// framing in `resp.headers`: `Transfer-Encoding: chunked`).
pub fn head_with_length(
    resp: &Response,
    date: &str,
    keep_alive: bool,
    length: Option<u64>,
) -> Vec<u8> {
    let mut head = Vec::with_capacity(160 + resp.headers.len());
    let mut n = itoa::Buffer::new();
    for part in [
        "HTTP/1.1 ",
        n.format(resp.status),
        " ",
        reason(resp.status),
        "\r\nServer: vodkit\r\nDate: ",
        date,
        "\r\n",
        &resp.headers,
    ] {
        head.extend_from_slice(part.as_bytes());
    }
    if let Some(length) = length {
        head.extend_from_slice(b"Content-Length: ");
        head.extend_from_slice(n.format(length).as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(if keep_alive {
        b"Connection: keep-alive\r\n\r\n"
    } else {
        b"Connection: close\r\n\r\n"
    });
    head
}

/// Run `f` on the current time as an HTTP date, formatted at most once per second per
/// thread and lent, not copied, to every response of that second.
pub(crate) fn with_http_date<R>(f: impl FnOnce(&str) -> R) -> R {
    use std::cell::RefCell;
    thread_local! {
        static CACHE: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
    }
    let now = std::time::SystemTime::now();
    let secs = now
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if c.0 != secs {
            *c = (secs, httpdate::fmt_http_date(now));
        }
        f(&c.1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Status codes the server's code emits (its own and the signed-URL check's): numbers
    /// after `text(`, `status_only(`, `status: `, `=> `, `return `, `Err(`, `Some(` or
    /// `unwrap_or(`, or alone on a line, outside test modules.
    fn emitted_statuses() -> std::collections::BTreeSet<u16> {
        fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    walk(&p, out);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    out.push(p);
                }
            }
        }
        let mut files = Vec::new();
        let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for dir in ["server/src", "securelink/src"] {
            walk(&crates.join(dir), &mut files);
        }
        let status_at = |rest: &str| -> Option<u16> {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            (digits.len() == 3).then(|| digits.parse().ok()).flatten()
        };
        let mut found = std::collections::BTreeSet::new();
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            for line in code.lines() {
                let t = line.trim().trim_end_matches(',');
                if let Some(n) = status_at(t).filter(|_| t.len() == 3) {
                    found.insert(n);
                }
                let leads = [
                    "text(",
                    "status_only(",
                    "status: ",
                    "=> ",
                    "return ",
                    "Err(",
                    "Some(",
                    "unwrap_or(",
                ];
                for lead in leads {
                    for (i, _) in line.match_indices(lead) {
                        if let Some(n) = status_at(&line[i + lead.len()..]) {
                            found.insert(n);
                        }
                    }
                }
            }
        }
        found.retain(|n| (100..600).contains(n));
        found
    }

    #[test]
    fn every_status_the_server_emits_has_its_reason_phrase() {
        let statuses = emitted_statuses();
        for must in [201, 204, 401, 403, 408, 410, 413, 416, 507] {
            assert!(
                statuses.contains(&must),
                "the scan missed {must}: {statuses:?}"
            );
        }
        for s in statuses {
            assert_ne!(reason(s), "Unknown", "status {s} has no reason phrase");
        }
        assert_eq!(reason(201), "Created");
        assert_eq!(reason(401), "Unauthorized");
    }

    #[test]
    fn multipart_length_matches_layout() {
        let ranges = [
            ByteRange { first: 0, last: 9 },
            ByteRange {
                first: 20,
                last: 24,
            },
        ];
        let (segs, total) = multipart_segments(&ranges, 100, "video/mp4", "B");
        let mut counted = 0u64;
        for s in &segs {
            counted += match s {
                Segment::Bytes(b) => b.len() as u64,
                Segment::File(r) => r.len(),
            };
        }
        assert_eq!(counted, total);
        match &segs[0] {
            Segment::Bytes(b) => assert!(b.starts_with(b"--B\r\nContent-Type: video/mp4\r\n")),
            _ => panic!("first segment must be a part header"),
        }
    }

    #[test]
    fn head_has_length_and_connection() {
        let r = Response::text(404, false);
        let h = String::from_utf8(head_bytes(&r, "D", true)).unwrap();
        assert!(h.starts_with("HTTP/1.1 404 Not Found\r\n"));
        assert!(h.contains("Content-Length: 14\r\n"));
        assert!(h.ends_with("Connection: keep-alive\r\n\r\n"));
        assert_eq!(
            h,
            "HTTP/1.1 404 Not Found\r\nServer: vodkit\r\nDate: D\r\n\
             Content-Type: text/plain; charset=utf-8\r\nContent-Length: 14\r\n\
             Connection: keep-alive\r\n\r\n"
        );
        let mut r = bodiless(304, "ETag: \"x\"\r\n".into());
        r.content_length = u64::MAX;
        let h = String::from_utf8(head_bytes(&r, "D", false)).unwrap();
        assert_eq!(
            h,
            "HTTP/1.1 304 Not Modified\r\nServer: vodkit\r\nDate: D\r\nETag: \"x\"\r\n\
             Connection: close\r\n\r\n"
        );
        let mut r = Response::text(206, false);
        r.content_length = u64::MAX;
        let h = String::from_utf8(head_bytes(&r, "D", false)).unwrap();
        assert!(h.contains(&format!("\r\nContent-Length: {}\r\n", u64::MAX)));
    }
}
