//! What browsers and web players need beyond byte ranges: the CORS policy (origins, preflight
//! answers that allow what the player asks for, e.g. CMCD headers), `Cache-Control` by kind of
//! file (manifests revalidate, media segments are cached), and gzip for text manifests.

use std::fmt::Write as _;
use std::io::Write as _;
use std::str::FromStr;

/// Which origins may read responses cross-origin (`--cors`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cors {
    /// `*`: any origin (the response says `*`, no credentials).
    Any,
    /// These exact origins (`scheme://host[:port]`); the response echoes the request's
    /// `Origin` when it is one of them and says `Vary: Origin`.
    Origins(Vec<String>),
}

impl FromStr for Cors {
    type Err = String;

    /// `*`, or a comma-separated list of origins such as `https://player.example,http://localhost:3000`.
    fn from_str(s: &str) -> Result<Cors, String> {
        let s = s.trim();
        if s == "*" {
            return Ok(Cors::Any);
        }
        let mut origins = Vec::new();
        for o in s.split(',').map(str::trim).filter(|o| !o.is_empty()) {
            let rest = o
                .strip_prefix("http://")
                .or_else(|| o.strip_prefix("https://"))
                .ok_or_else(|| {
                    format!("--cors: `{o}` is not `*` or an origin like https://host[:port]")
                })?;
            if rest.is_empty() || rest.contains(['/', ' ', '*']) {
                return Err(format!(
                    "--cors: `{o}` is not an origin (scheme://host[:port], no path)"
                ));
            }
            origins.push(o.to_ascii_lowercase());
        }
        if origins.is_empty() {
            return Err("--cors: expected `*` or a comma-separated list of origins".into());
        }
        Ok(Cors::Origins(origins))
    }
}

/// How long a browser may reuse a preflight answer (seconds).
pub const PREFLIGHT_MAX_AGE_S: u32 = 86_400;

/// Request headers a player may always send (answered when the preflight names none).
const DEFAULT_ALLOWED_HEADERS: &str =
    "Range, If-Range, If-None-Match, If-Modified-Since, X-Session-Id";

impl Cors {
    /// The `Access-Control-Allow-Origin` value for a request from `origin`, if allowed.
    fn allow(&self, origin: Option<&str>) -> Option<String> {
        match self {
            Cors::Any => Some("*".into()),
            Cors::Origins(list) => {
                let o = origin?;
                list.iter()
                    .any(|a| a.eq_ignore_ascii_case(o))
                    .then(|| o.to_string())
            }
        }
    }

    /// Header lines for an ordinary (GET/HEAD) response.
    pub fn response_headers(&self, origin: Option<&str>, out: &mut String) {
        if matches!(self, Cors::Origins(_)) {
            out.push_str("Vary: Origin\r\n");
        }
        if let Some(allow) = self.allow(origin) {
            let _ = write!(
                out,
                "Access-Control-Allow-Origin: {allow}\r\n\
                 Access-Control-Expose-Headers: Content-Length, Content-Range, Accept-Ranges, ETag, Date\r\n\
                 Timing-Allow-Origin: {allow}\r\n"
            );
        }
    }

    /// Header lines for a preflight (`OPTIONS` with `Access-Control-Request-*`): allow the
    /// headers the browser asks for (a player's CMCD or custom headers) when each is a valid
    /// field name, and let it cache the answer.
    pub fn preflight_headers(
        &self,
        origin: Option<&str>,
        requested: Option<&str>,
        out: &mut String,
    ) {
        self.response_headers(origin, out);
        if self.allow(origin).is_none() {
            return;
        }
        let asked: Vec<&str> = requested
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .collect();
        let allowed = if !asked.is_empty() && asked.iter().all(|h| is_token(h)) {
            asked.join(", ")
        } else {
            DEFAULT_ALLOWED_HEADERS.to_string()
        };
        let _ = write!(
            out,
            "Access-Control-Allow-Methods: GET, HEAD, OPTIONS\r\n\
             Access-Control-Allow-Headers: {allowed}\r\n\
             Access-Control-Max-Age: {PREFLIGHT_MAX_AGE_S}\r\n"
        );
    }
}

/// An HTTP field-name token (RFC 9110 tchar), so an echoed name cannot inject a header.
fn is_token(s: &str) -> bool {
    s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// What kind of file a response carries, for caching and compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A DASH MPD or HLS playlist: small text that changes for live streams.
    Manifest,
    /// Media: segments, whole titles, init segments, audio.
    Media,
    /// Anything else (pages, scripts, subtitles, images).
    Other,
}

impl FileKind {
    /// Classify by media type (as chosen by [`crate::mime::content_type`]).
    pub fn of(content_type: &str) -> FileKind {
        if content_type.starts_with("application/dash+xml")
            || content_type.starts_with("application/vnd.apple.mpegurl")
        {
            FileKind::Manifest
        } else if content_type.starts_with("video/") || content_type.starts_with("audio/") {
            FileKind::Media
        } else {
            FileKind::Other
        }
    }
}

/// `Cache-Control` values by [`FileKind`]; an empty value sends no header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachePolicy {
    /// VoD manifests (an HLS playlist with `#EXT-X-ENDLIST`, a master playlist, a static
    /// MPD).
    pub manifest: String,
    pub media: String,
    pub other: String,
    /// `max-age` of live manifests (an HLS media playlist without `#EXT-X-ENDLIST`, an MPD
    /// of `type="dynamic"`); `None`: half the target segment duration they announce
    /// ([`crate::live::playlist_max_age`]).
    pub live_max_age: Option<std::time::Duration>,
}

impl Default for CachePolicy {
    /// VoD defaults: manifests and media files do not change once written and are cached
    /// for a day (a shared cache keeps them); a live manifest found among the files about
    /// half a segment; other files get no header.
    fn default() -> CachePolicy {
        CachePolicy {
            manifest: "public, max-age=86400".into(),
            media: "public, max-age=86400".into(),
            other: String::new(),
            live_max_age: None,
        }
    }
}

impl CachePolicy {
    /// The `Cache-Control` header of a manifest with this text: a live one's `max-age`,
    /// or the VoD value.
    pub fn manifest_header(&self, text: &[u8], out: &mut String) {
        if crate::live::is_live_manifest(text) {
            let age = self
                .live_max_age
                .unwrap_or_else(|| crate::live::playlist_max_age(text));
            let _ = write!(out, "Cache-Control: max-age={}\r\n", age.as_secs());
        } else {
            self.header(FileKind::Manifest, out);
        }
    }

    pub fn header(&self, kind: FileKind, out: &mut String) {
        let v = match kind {
            FileKind::Manifest => &self.manifest,
            FileKind::Media => &self.media,
            FileKind::Other => &self.other,
        };
        if !v.is_empty() {
            let _ = write!(out, "Cache-Control: {v}\r\n");
        }
    }
}

/// Largest file compressed on the fly (manifests and other text are far smaller).
pub const GZIP_MAX_BYTES: u64 = 1 << 20;

/// Whether a response of this media type is worth compressing (text formats only; video
/// is already compressed).
pub fn compressible(content_type: &str) -> bool {
    content_type.starts_with("text/")
        || [
            "application/dash+xml",
            "application/vnd.apple.mpegurl",
            "application/json",
            "application/xml",
            "application/ttml+xml",
            "image/svg+xml",
        ]
        .iter()
        .any(|t| content_type.starts_with(t))
}

/// Whether an `Accept-Encoding` value accepts gzip (a `q=0` refuses it).
pub fn accepts_gzip(accept_encoding: Option<&str>) -> bool {
    let Some(v) = accept_encoding else {
        return false;
    };
    v.split(',').any(|item| {
        let mut parts = item.split(';').map(str::trim);
        let coding = parts.next().unwrap_or("");
        let refused = parts.any(|p| {
            p.strip_prefix("q=")
                .and_then(|q| q.trim().parse::<f64>().ok())
                .is_some_and(|q| q <= 0.0)
        });
        (coding.eq_ignore_ascii_case("gzip") || coding == "*") && !refused
    })
}

/// gzip `data` (default compression level).
pub fn gzip(data: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut enc = flate2::write::GzEncoder::new(
        Vec::with_capacity(data.len() / 3 + 64),
        flate2::Compression::default(),
    );
    enc.write_all(data)?;
    enc.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    #[test]
    fn cors_parses_any_and_lists_and_refuses_junk() {
        assert_eq!("*".parse::<Cors>().unwrap(), Cors::Any);
        assert_eq!(
            "https://A.example, http://localhost:3000"
                .parse::<Cors>()
                .unwrap(),
            Cors::Origins(vec![
                "https://a.example".into(),
                "http://localhost:3000".into()
            ])
        );
        for bad in ["", "example.com", "https://a/b", "https://*.x", ","] {
            let e = bad.parse::<Cors>().unwrap_err();
            assert!(e.starts_with("--cors"), "{bad}: {e}");
        }
    }

    #[test]
    fn listed_origins_are_echoed_others_get_nothing() {
        let cors: Cors = "https://a.example,https://b.example".parse().unwrap();
        let mut h = String::new();
        cors.response_headers(Some("https://b.example"), &mut h);
        assert!(h.contains("Access-Control-Allow-Origin: https://b.example\r\n"));
        assert!(h.contains("Timing-Allow-Origin: https://b.example\r\n"));
        assert!(h.contains("Vary: Origin\r\n"));
        let mut h = String::new();
        cors.response_headers(Some("https://evil.example"), &mut h);
        assert!(!h.contains("Access-Control-Allow-Origin"), "{h}");
        let mut h = String::new();
        Cors::Any.response_headers(None, &mut h);
        assert!(h.contains("Access-Control-Allow-Origin: *\r\n"));
        assert!(!h.contains("Vary"));
    }

    #[test]
    fn preflight_allows_what_is_asked_when_it_is_a_token() {
        let mut h = String::new();
        Cors::Any.preflight_headers(
            Some("https://p.example"),
            Some("cmcd-object, CMCD-Request,range"),
            &mut h,
        );
        assert!(
            h.contains("Access-Control-Allow-Headers: cmcd-object, CMCD-Request, range\r\n"),
            "{h}"
        );
        assert!(h.contains("Access-Control-Max-Age: 86400\r\n"));
        let mut h = String::new();
        Cors::Any.preflight_headers(None, Some("x-ok, bad\r\nInjected: 1"), &mut h);
        assert!(!h.contains("Injected"), "{h}");
        assert!(h.contains(DEFAULT_ALLOWED_HEADERS));
        let cors: Cors = "https://a.example".parse().unwrap();
        let mut h = String::new();
        cors.preflight_headers(Some("https://other.example"), Some("x"), &mut h);
        assert!(!h.contains("Allow-Headers"), "{h}");
    }

    #[test]
    fn kinds_and_cache_headers() {
        let p = CachePolicy::default();
        let mut h = String::new();
        p.header(FileKind::of("application/dash+xml"), &mut h);
        p.header(FileKind::of("video/iso.segment"), &mut h);
        p.header(FileKind::of("text/javascript"), &mut h);
        assert_eq!(
            h,
            "Cache-Control: public, max-age=86400\r\nCache-Control: public, max-age=86400\r\n"
        );
        let mut h = String::new();
        let live = b"#EXTM3U\n#EXT-X-TARGETDURATION:4\n#EXTINF:4,\na.ts\n";
        p.manifest_header(live, &mut h);
        let vod = b"#EXTM3U\n#EXT-X-TARGETDURATION:4\n#EXTINF:4,\na.ts\n#EXT-X-ENDLIST\n";
        p.manifest_header(vod, &mut h);
        p.manifest_header(br#"<MPD type="dynamic" maxSegmentDuration="PT6S">"#, &mut h);
        p.manifest_header(br#"<MPD type="static">"#, &mut h);
        assert_eq!(
            h,
            "Cache-Control: max-age=2\r\nCache-Control: public, max-age=86400\r\n\
             Cache-Control: max-age=3\r\nCache-Control: public, max-age=86400\r\n"
        );
    }

    #[test]
    fn gzip_negotiation_and_round_trip() {
        assert!(accepts_gzip(Some("gzip, deflate, br")));
        assert!(accepts_gzip(Some("br;q=1.0, GZIP;q=0.5")));
        assert!(accepts_gzip(Some("*")));
        assert!(!accepts_gzip(Some("gzip;q=0, br")));
        assert!(!accepts_gzip(Some("identity")));
        assert!(!accepts_gzip(None));
        assert!(compressible("application/dash+xml"));
        assert!(compressible("text/vtt"));
        assert!(!compressible("video/mp4"));
        let text = "<MPD>".repeat(500);
        let z = gzip(text.as_bytes()).unwrap();
        assert!(z.len() < text.len() / 10);
        let mut back = String::new();
        flate2::read::GzDecoder::new(&z[..])
            .read_to_string(&mut back)
            .unwrap();
        assert_eq!(back, text);
    }
}
