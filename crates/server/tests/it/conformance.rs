//! HTTP conformance of the origin: ranges, preconditions, HEAD, keep-alive, pipelining,
//! error statuses, CORS, content types and the access log, with byte-exact bodies.

use crate::common;

use common::{pattern, TestServer};

const LEN: usize = 1024 * 1024 + 3;

fn body() -> Vec<u8> {
    pattern(LEN)
}

#[test]
fn full_get_is_byte_exact_with_validators() {
    let s = TestServer::start();
    let mut c = s.connect();
    let r = c.get("/video.mp4", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.body, body());
    assert_eq!(r.header("content-type"), Some("video/mp4"));
    assert_eq!(r.header("accept-ranges"), Some("bytes"));
    assert_eq!(r.header("content-length"), Some(LEN.to_string().as_str()));
    let etag = r.header("etag").unwrap();
    assert!(
        etag.starts_with('"') && etag.ends_with('"'),
        "strong etag: {etag}"
    );
    assert!(r.header("last-modified").unwrap().ends_with("GMT"));
    assert!(r.header("date").is_some());
}

#[test]
fn single_ranges_all_forms() {
    let s = TestServer::start();
    let mut c = s.connect();
    let b = body();
    let cases: &[(&str, usize, usize)] = &[
        ("bytes=0-0", 0, 0),
        ("bytes=0-524287", 0, 524287),
        ("bytes=524288-", 524288, LEN - 1),
        ("bytes=-100", LEN - 100, LEN - 1),
        ("bytes=1000-99999999", 1000, LEN - 1),
        ("bytes=-99999999", 0, LEN - 1),
        ("bytes=5-5, 300-", 0, 0), // placeholder skipped below (multi)
    ];
    for &(spec, first, last) in &cases[..cases.len() - 1] {
        let r = c.get("/video.mp4", &[("Range", spec)]);
        assert_eq!(r.status, 206, "{spec}");
        assert_eq!(r.body, &b[first..=last], "{spec}");
        assert_eq!(
            r.header("content-range").unwrap(),
            format!("bytes {first}-{last}/{LEN}"),
            "{spec}"
        );
        assert_eq!(
            r.header("content-length").unwrap(),
            (last - first + 1).to_string()
        );
    }
}

#[test]
fn unsatisfiable_and_ignored_ranges() {
    let s = TestServer::start();
    let mut c = s.connect();
    let r = c.get("/video.mp4", &[("Range", &format!("bytes={LEN}-"))]);
    assert_eq!(r.status, 416);
    assert_eq!(r.header("content-range").unwrap(), format!("bytes */{LEN}"));
    let r = c.get("/video.mp4", &[("Range", "bytes=-0")]);
    assert_eq!(r.status, 416);
    // Bad syntax and unknown units are ignored: full 200.
    for spec in ["bytes=9-1", "items=0-1", "bytes=x-", "garbage"] {
        let r = c.get("/video.mp4", &[("Range", spec)]);
        assert_eq!(r.status, 200, "{spec}");
        assert_eq!(r.body.len(), LEN);
    }
}

/// Split a multipart/byteranges body into (Content-Range, data) parts.
fn parse_multipart(body: &[u8], boundary: &str) -> Vec<(String, Vec<u8>)> {
    let delim = format!("--{boundary}");
    let mut parts = Vec::new();
    let mut pos = 0;
    assert!(
        body.starts_with(delim.as_bytes()),
        "body starts with the boundary"
    );
    loop {
        pos += delim.len();
        if body[pos..].starts_with(b"--") {
            assert_eq!(&body[pos..], b"--\r\n");
            break;
        }
        assert_eq!(&body[pos..pos + 2], b"\r\n");
        pos += 2;
        let head_end = find(&body[pos..], b"\r\n\r\n").unwrap() + pos;
        let head = std::str::from_utf8(&body[pos..head_end]).unwrap();
        let cr = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Range: "))
            .expect("part Content-Range")
            .to_string();
        let (_, span) = cr
            .strip_prefix("bytes ")
            .unwrap()
            .split_once('/')
            .map(|(a, b)| (b, a))
            .unwrap();
        let (a, z) = span.split_once('-').unwrap();
        let (a, z): (usize, usize) = (a.parse().unwrap(), z.parse().unwrap());
        let data_start = head_end + 4;
        let data = body[data_start..data_start + (z - a + 1)].to_vec();
        pos = data_start + data.len();
        assert_eq!(&body[pos..pos + 2], b"\r\n");
        pos += 2;
        assert!(body[pos..].starts_with(delim.as_bytes()));
        parts.push((cr, data));
    }
    parts
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[test]
fn multiple_ranges_are_multipart_byteranges() {
    let s = TestServer::start();
    let mut c = s.connect();
    let b = body();
    let r = c.get("/video.mp4", &[("Range", "bytes=0-9, 100-199,-5")]);
    assert_eq!(r.status, 206);
    let ctype = r.header("content-type").unwrap();
    let boundary = ctype
        .strip_prefix("multipart/byteranges; boundary=")
        .expect(ctype);
    assert_eq!(
        r.body.len(),
        r.header("content-length")
            .unwrap()
            .parse::<usize>()
            .unwrap()
    );
    let parts = parse_multipart(&r.body, boundary);
    assert_eq!(parts.len(), 3);
    assert_eq!(
        parts[0],
        ("bytes 0-9/1048579".to_string(), b[0..10].to_vec())
    );
    assert_eq!(
        parts[1],
        ("bytes 100-199/1048579".to_string(), b[100..200].to_vec())
    );
    assert_eq!(
        parts[2],
        (
            format!("bytes {}-{}/{LEN}", LEN - 5, LEN - 1),
            b[LEN - 5..].to_vec()
        )
    );
    // Unsatisfiable members are dropped; one remaining range is a plain 206.
    let r = c.get("/video.mp4", &[("Range", &format!("bytes={LEN}-,3-4"))]);
    assert_eq!(r.status, 206);
    assert_eq!(r.body, &b[3..5]);
}

#[test]
fn conditional_get_and_if_range() {
    let s = TestServer::start();
    let mut c = s.connect();
    let b = body();
    let first = c.get("/video.mp4", &[]);
    let etag = first.header("etag").unwrap().to_string();
    let lm = first.header("last-modified").unwrap().to_string();

    let r = c.get("/video.mp4", &[("If-None-Match", &etag)]);
    assert_eq!(r.status, 304);
    assert!(r.body.is_empty());
    assert_eq!(r.header("etag"), Some(etag.as_str()));
    let r = c.get(
        "/video.mp4",
        &[("If-None-Match", &format!("\"nope\", W/{etag}"))],
    );
    assert_eq!(r.status, 304, "weak comparison for If-None-Match");
    let r = c.get("/video.mp4", &[("If-None-Match", "\"nope\"")]);
    assert_eq!(r.status, 200);
    let r = c.get("/video.mp4", &[("If-Modified-Since", &lm)]);
    assert_eq!(r.status, 304);
    let r = c.get(
        "/video.mp4",
        &[("If-Modified-Since", "Thu, 01 Jan 1970 00:00:01 GMT")],
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b);
    let r = c.get("/video.mp4", &[("If-Match", "\"nope\"")]);
    assert_eq!(r.status, 412);
    let r = c.get(
        "/video.mp4",
        &[("If-Unmodified-Since", "Thu, 01 Jan 1970 00:00:01 GMT")],
    );
    assert_eq!(r.status, 412);

    // If-Range: matching ETag or date applies the range; otherwise the full file.
    let r = c.get(
        "/video.mp4",
        &[("Range", "bytes=10-19"), ("If-Range", &etag)],
    );
    assert_eq!((r.status, r.body.as_slice()), (206, &b[10..20]));
    let r = c.get("/video.mp4", &[("Range", "bytes=10-19"), ("If-Range", &lm)]);
    assert_eq!((r.status, r.body.as_slice()), (206, &b[10..20]));
    let r = c.get(
        "/video.mp4",
        &[("Range", "bytes=10-19"), ("If-Range", "\"stale\"")],
    );
    assert_eq!((r.status, r.body.len()), (200, LEN));
    let r = c.get(
        "/video.mp4",
        &[("Range", "bytes=10-19"), ("If-Range", &format!("W/{etag}"))],
    );
    assert_eq!(r.status, 200, "weak tags never satisfy If-Range");
    let r = c.get(
        "/video.mp4",
        &[
            ("Range", "bytes=10-19"),
            ("If-Range", "Thu, 01 Jan 1970 00:00:01 GMT"),
        ],
    );
    assert_eq!(r.status, 200);
}

#[test]
fn etag_changes_when_file_changes() {
    // Cached files checked at every request (the default trusts them for a second).
    let s = TestServer::start_with(|c| c.open_file_valid = std::time::Duration::ZERO);
    s.write("a.m4s", b"first");
    let mut c = s.connect();
    let a = c.get("/a.m4s", &[]);
    std::thread::sleep(std::time::Duration::from_millis(20));
    s.write("a.m4s", b"second!");
    let b = c.get("/a.m4s", &[]);
    assert_eq!(b.body, b"second!");
    assert_ne!(a.header("etag"), b.header("etag"));
    assert_eq!(b.header("content-type"), Some("video/iso.segment"));
}

#[test]
fn a_file_replaced_or_deleted_is_seen_at_the_next_request_despite_the_open_file_cache() {
    // With the validity at zero (`--open-file-cache-valid 0`); the default trusts an entry
    // for a second (crates/server/src/open_files.rs tests that).
    let s = TestServer::start_with(|c| c.open_file_valid = std::time::Duration::ZERO);
    s.write("r.m4s", b"aaaa");
    let mut c = s.connect();
    assert_eq!(c.get("/r.m4s", &[]).body, b"aaaa");
    // Same size, new inode (how packagers publish): the cached descriptor is not reused.
    s.write("r.tmp", b"bbbb");
    std::fs::rename(s.root().join("r.tmp"), s.root().join("r.m4s")).unwrap();
    assert_eq!(c.get("/r.m4s", &[]).body, b"bbbb");
    std::fs::remove_file(s.root().join("r.m4s")).unwrap();
    assert_eq!(c.get("/r.m4s", &[]).status, 404);
    // And with the cache off, the same.
    let s = TestServer::start_with(|c| c.open_file_cache = 0);
    s.write("r.m4s", b"aaaa");
    let mut c = s.connect();
    assert_eq!(c.get("/r.m4s", &[]).body, b"aaaa");
    s.write("r.m4s", b"cc");
    assert_eq!(c.get("/r.m4s", &[]).body, b"cc");
}

#[test]
fn head_has_headers_but_no_body() {
    let s = TestServer::start();
    let mut c = s.connect();
    let r = c.request("HEAD", "/video.mp4", &[("Range", "bytes=0-99")]);
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-length"), Some("100"));
    let r = c.request("HEAD", "/video.mp4", &[]);
    assert_eq!(r.header("content-length"), Some(LEN.to_string().as_str()));
    // If HEAD had sent a body, this GET's status line would be garbage.
    let r = c.get("/video.mp4", &[("Range", "bytes=1-2")]);
    assert_eq!((r.status, r.body.as_slice()), (206, &body()[1..3]));
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let s = TestServer::start();
    let b = body();
    let mut c = s.connect();
    let mut raw = String::new();
    let specs = ["0-9", "1000-1999", "-7", "missing", "20-29"];
    for spec in specs {
        if spec == "missing" {
            raw.push_str("GET /nope.mp4 HTTP/1.1\r\nHost: t\r\n\r\n");
        } else {
            raw.push_str(&format!(
                "GET /video.mp4 HTTP/1.1\r\nHost: t\r\nRange: bytes={spec}\r\n\r\n"
            ));
        }
    }
    raw.push_str("HEAD /video.mp4 HTTP/1.1\r\nHost: t\r\n\r\n");
    c.send(&raw);
    let expect: [&[u8]; 3] = [&b[0..10], &b[1000..2000], &b[LEN - 7..]];
    for e in expect {
        let r = c.read_response(false);
        assert_eq!((r.status, r.body.as_slice()), (206, e));
    }
    assert_eq!(c.read_response(false).status, 404);
    let r = c.read_response(false);
    assert_eq!((r.status, r.body.as_slice()), (206, &b[20..30]));
    let r = c.read_response(true);
    assert_eq!(r.status, 200);
}

#[test]
fn thousand_keep_alive_requests_on_one_connection() {
    let s = TestServer::start();
    let b = body();
    let mut c = s.connect();
    for i in 0..1000usize {
        let first = (i * 1031) % (LEN - 600);
        let r = c.get(
            "/video.mp4",
            &[("Range", &format!("bytes={first}-{}", first + 511))],
        );
        assert_eq!(r.status, 206, "request {i}");
        assert_eq!(r.body, &b[first..first + 512], "request {i}");
        assert_eq!(r.header("connection"), Some("keep-alive"));
    }
    assert_eq!(s.stats().connections_total, 1);
}

#[test]
fn connection_close_and_http10() {
    let s = TestServer::start();
    let mut c = s.connect();
    let r = c.get(
        "/video.mp4",
        &[("Range", "bytes=0-0"), ("Connection", "close")],
    );
    assert_eq!(r.header("connection"), Some("close"));
    assert!(c.is_closed());
    let mut c = s.connect();
    c.send("GET /video.mp4 HTTP/1.0\r\nRange: bytes=0-1\r\n\r\n");
    let r = c.read_response(false);
    assert_eq!(r.status, 206);
    assert!(c.is_closed());
    let mut c = s.connect();
    c.send("GET /video.mp4 HTTP/1.0\r\nConnection: keep-alive\r\nRange: bytes=0-1\r\n\r\n");
    assert_eq!(
        c.read_response(false).header("connection"),
        Some("keep-alive")
    );
}

#[test]
fn requests_per_connection_limit() {
    let s = TestServer::start_with(|c| c.max_requests_per_connection = Some(3));
    let mut c = s.connect();
    for i in 1..=3 {
        let r = c.get("/video.mp4", &[("Range", "bytes=0-0")]);
        let want = if i < 3 { "keep-alive" } else { "close" };
        assert_eq!(r.header("connection"), Some(want));
    }
    assert!(c.is_closed());
}

#[test]
fn methods_options_and_cors() {
    let s = TestServer::start_with(|c| c.cors = Some("*".parse().unwrap()));
    let mut c = s.connect();
    let r = c.request("DELETE", "/video.mp4", &[]);
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET, HEAD, OPTIONS"));
    let r = c.request("OPTIONS", "/video.mp4", &[]);
    assert_eq!(r.status, 204);
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    let r = c.get("/video.mp4", &[("Range", "bytes=0-0")]);
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    assert_eq!(r.header("timing-allow-origin"), Some("*"));
    assert!(r
        .header("access-control-expose-headers")
        .unwrap()
        .contains("Content-Range"));
    let s2 = TestServer::start();
    let r = s2.connect().get("/video.mp4", &[("Range", "bytes=0-0")]);
    assert_eq!(r.header("access-control-allow-origin"), None);
}

/// A player sending CMCD as request headers (dash.js `mode: 'headers'`, hls.js `useHeaders`)
/// triggers a preflight naming them; the answer must allow exactly those and be cacheable.
#[test]
fn preflight_allows_the_players_headers_and_listed_origins() {
    let s = TestServer::start_with(|c| {
        c.cors = Some(
            "https://player.example,http://localhost:3000"
                .parse()
                .unwrap(),
        )
    });
    let mut c = s.connect();
    let r = c.request(
        "OPTIONS",
        "/video.mp4",
        &[
            ("Origin", "https://player.example"),
            ("Access-Control-Request-Method", "GET"),
            (
                "Access-Control-Request-Headers",
                "cmcd-object,cmcd-request,cmcd-session,range",
            ),
        ],
    );
    assert_eq!(r.status, 204);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://player.example")
    );
    assert_eq!(
        r.header("access-control-allow-headers"),
        Some("cmcd-object, cmcd-request, cmcd-session, range")
    );
    assert_eq!(r.header("access-control-max-age"), Some("86400"));
    assert_eq!(r.header("vary"), Some("Origin"));
    let r = c.get(
        "/video.mp4",
        &[("Origin", "http://localhost:3000"), ("Range", "bytes=0-0")],
    );
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("http://localhost:3000")
    );
    let r = c.get(
        "/video.mp4",
        &[("Origin", "https://evil.example"), ("Range", "bytes=0-0")],
    );
    assert_eq!(r.status, 206);
    assert_eq!(r.header("access-control-allow-origin"), None);
}

#[test]
fn player_pages_scripts_and_manifests_are_typed_cached_and_compressed() {
    let s = TestServer::start();
    let mpd = format!(
        "<?xml version=\"1.0\"?>\n<MPD>{}</MPD>\n",
        "<SegmentURL media=\"seg.m4s\"/>".repeat(300)
    );
    s.write("t/manifest.mpd", mpd.as_bytes());
    s.write("t/seg-1.m4s", b"segment");
    s.write("js/dash.all.min.mjs", b"export const x = 1;\n");
    s.write("page/index.html", b"<html>player</html>");
    let mut c = s.connect();
    let r = c.get("/js/dash.all.min.mjs", &[]);
    assert_eq!(
        r.header("content-type"),
        Some("text/javascript; charset=utf-8")
    );
    assert_eq!(r.header("cache-control"), None);
    // VoD manifests and segments are cached.
    let plain = c.get("/t/manifest.mpd", &[]);
    assert_eq!(plain.header("cache-control"), Some("public, max-age=86400"));
    assert_eq!(plain.header("content-encoding"), None);
    assert_eq!(plain.body, mpd.as_bytes());
    assert_eq!(plain.header("vary"), Some("Accept-Encoding"));
    let seg = c.get("/t/seg-1.m4s", &[("Accept-Encoding", "gzip")]);
    assert_eq!(seg.header("cache-control"), Some("public, max-age=86400"));
    assert_eq!(
        seg.header("content-encoding"),
        None,
        "video is never gzipped"
    );
    assert_eq!(seg.body, b"segment");
    // gzip for a client that takes it, as its own representation.
    let z = c.get("/t/manifest.mpd", &[("Accept-Encoding", "gzip, br")]);
    assert_eq!(z.status, 200);
    assert_eq!(z.header("content-encoding"), Some("gzip"));
    assert!(
        z.body.len() * 4 < mpd.len(),
        "{} vs {}",
        z.body.len(),
        mpd.len()
    );
    let mut back = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&z.body[..]), &mut back).unwrap();
    assert_eq!(back, mpd.as_bytes());
    let etag = z.header("etag").unwrap().to_string();
    assert_ne!(Some(etag.as_str()), plain.header("etag"));
    let r = c.get(
        "/t/manifest.mpd",
        &[("Accept-Encoding", "gzip"), ("If-None-Match", &etag)],
    );
    assert_eq!(r.status, 304);
    // A range of a manifest comes from the identity form.
    let r = c.get(
        "/t/manifest.mpd",
        &[("Accept-Encoding", "gzip"), ("Range", "bytes=0-4")],
    );
    assert_eq!(r.status, 206);
    assert_eq!(r.body, b"<?xml");
    // Directories: redirect to the slash form, then the index; none: 403.
    let r = c.get("/page?autoplay=1", &[]);
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("/page/?autoplay=1"));
    let r = c.get("/page/", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"<html>player</html>");
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    assert_eq!(c.get("/t/", &[]).status, 403);
}

#[test]
fn empty_file_and_subdirectories() {
    let s = TestServer::start();
    s.write("empty.ts", b"");
    s.write("t1/r1/seg 1.m4s", b"abcdef");
    let mut c = s.connect();
    let r = c.get("/empty.ts", &[]);
    assert_eq!((r.status, r.body.len()), (200, 0));
    assert_eq!(r.header("content-type"), Some("video/mp2t"));
    let r = c.get("/empty.ts", &[("Range", "bytes=0-")]);
    assert_eq!(r.status, 416);
    assert_eq!(r.header("content-range"), Some("bytes */0"));
    let r = c.get("/t1/r1/seg%201.m4s?token=1", &[("Range", "bytes=2-3")]);
    assert_eq!((r.status, r.body.as_slice()), (206, b"cd".as_slice()));
    // A directory without an index is forbidden, as with nginx (no listings).
    let r = c.get("/t1/r1/", &[]);
    assert_eq!(r.status, 403);
    assert_eq!(c.get("/t1/none/", &[]).status, 404);
}

#[test]
fn request_bodies_are_discarded_or_refused() {
    let s = TestServer::start();
    let mut c = s.connect();
    c.send(
        "GET /video.mp4 HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nRange: bytes=0-1\r\n\r\nhello",
    );
    assert_eq!(c.read_response(false).status, 206);
    let r = c.get("/video.mp4", &[("Range", "bytes=2-3")]);
    assert_eq!(r.body, &body()[2..4]);
    c.send("GET /video.mp4 HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999\r\n\r\n");
    assert_eq!(c.read_response(false).status, 413);
    assert!(c.is_closed());
}

#[test]
fn access_log_lines_describe_each_response() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let log2 = log.clone();
    let s = TestServer::start_with(move |c| c.access_log = Some(log2));
    let mut c = s.connect();
    c.get(
        "/video.mp4",
        &[("Range", "bytes=0-524287"), ("X-Session-Id", "sess-42")],
    );
    c.get("/video.mp4", &[("Range", "bytes=524288-")]);
    c.get("/nope.mp4", &[]);
    drop(c);
    s.stop();
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "#vodkit-access-log v1");
    assert!(lines[1].starts_with("#end_time\t"));
    assert_eq!(lines[1].split('\t').count(), 18, "header names every field");
    assert_eq!(lines.len(), 5);
    let f: Vec<Vec<&str>> = lines[2..].iter().map(|l| l.split('\t').collect()).collect();
    for row in &f {
        assert_eq!(row.len(), 18, "{row:?}");
        assert_eq!(row[14], "HTTP/1.1");
        let end: f64 = row[0].parse().unwrap();
        assert!(end > 1.6e9);
        let service: f64 = row[1].parse().unwrap();
        assert!(service >= 0.0);
        assert!(row[2].starts_with("127.0.0.1:"));
        assert_eq!(row[3], f[0][3], "same connection id");
    }
    // Fields from the request number on: req, session, method, path, range, status, bytes,
    // bytes from memory, bytes from disk, outcome, version, host, user agent, referer.
    let expect = |line: &str| line.split(' ').map(str::to_string).collect::<Vec<_>>();
    let first = "1 sess-42 GET /video.mp4 0-524287 206 524288 524288 0 done HTTP/1.1 test - -";
    assert_eq!(f[0][4..], expect(first));
    let rest = LEN - 524288;
    let second = format!("2 - GET /video.mp4 524288- 206 {rest} {rest} 0 done HTTP/1.1 test - -");
    assert_eq!(f[1][4..], expect(&second));
    assert_eq!(
        &f[2][4..10],
        &["3", "-", "GET", "/nope.mp4", "-", "404"][..]
    );
}

#[test]
fn admin_listener_serves_metrics_and_stats() {
    let s = TestServer::start_with(|c| c.admin = Some("127.0.0.1:0".parse().unwrap()));
    let mut c = s.connect();
    c.get("/video.mp4", &[("Range", "bytes=0-99")]);
    c.get("/missing", &[]);
    let admin = s.admin.unwrap();
    // Counters are updated once the response has been written, which can be just after the
    // client has read it: poll briefly for the second response.
    let mut text = String::new();
    for _ in 0..50 {
        let mut a = common::Client::connect(admin);
        let m = a.get("/metrics", &[]);
        assert_eq!(m.status, 200);
        text = String::from_utf8(m.body).unwrap();
        if text.contains("vodkit_server_responses_total{status=\"404\"} 1") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        text.contains("vodkit_server_responses_total{status=\"206\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("vodkit_server_responses_total{status=\"404\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("vodkit_server_body_bytes_total 114"),
        "{text}"
    );
    let mut a = common::Client::connect(admin);
    let st = a.get("/stats", &[]);
    let v: serde_json::Value = serde_json::from_slice(&st.body).unwrap();
    assert_eq!(v["requests_total"], 2);
    assert_eq!(v["connections_open"], 1);
    let mut a = common::Client::connect(admin);
    assert_eq!(a.get("/other", &[]).status, 404);
}

#[test]
fn shutdown_drains_in_flight_responses() {
    let s = TestServer::start_with(|c| c.min_send_rate = 0);
    let big = pattern(32 * 1024 * 1024);
    s.write("big.mp4", &big);
    let mut c = s.connect();
    c.send("GET /big.mp4 HTTP/1.1\r\nHost: t\r\n\r\n");
    // Read the head, so the response is in flight, then ask for shutdown.
    let mut line = String::new();
    std::io::BufRead::read_line(&mut c.reader, &mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 200"));
    let mut idle = s.connect();
    std::thread::sleep(std::time::Duration::from_millis(100));
    s.begin_shutdown();
    let mut rest = Vec::new();
    std::io::Read::read_to_end(&mut c.reader, &mut rest).unwrap();
    assert!(
        rest.ends_with(&big[big.len() - 4096..]),
        "whole body delivered before close"
    );
    assert!(idle.is_closed(), "idle connection closed on shutdown");
    s.wait();
}
