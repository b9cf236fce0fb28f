//! Session logs in four dialects: vodkit's `sessions.jsonl`, the thesis `wsesslog` dialect
//! (`range=`, `pacing=`, `timeout=`), the videoperf dialect used by the CloudSuite
//! media-streaming client (`pace_time=`, `headers='Range: ...'`, `size=`, `session` lines)
//! and stock httperf 0.9 `--wsesslog` (`method=`, `think=`, bursts by indentation).
//!
//! The three text dialects cannot carry a session's id, client class, arrival gap, title or
//! bit rate, so [`write`] puts them in a comment line that httperf-family tools skip:
//! `#vodkit session id=7 class=bband gap=0.25 title=3 kbps=419`. [`parse`] reads that line
//! back when present; logs written by other tools get sequential ids, class `default` and a
//! gap of 1.0. What each dialect drops is listed in `docs/workload.md`.

use crate::error::InputError;
use crate::model::{non_negative, ByteRange, Request, Session};
use std::io::Write;
use strum::{Display, EnumString, VariantNames};

/// Timeout given to requests of logs that do not state one (thesis 3.4: 10 s).
pub const DEFAULT_TIMEOUT_S: f64 = 10.0;
/// Client class of sessions read from logs that do not name one.
pub const DEFAULT_CLASS: &str = "default";
const META_PREFIX: &str = "#vodkit session";

/// A session-log dialect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Display, EnumString, VariantNames)]
#[strum(serialize_all = "lowercase", parse_err_ty = String, parse_err_fn = unknown_format)]
pub enum LogFormat {
    /// One JSON [`Session`] per line (`sessions.jsonl`).
    Jsonl,
    /// Thesis Fig. 3.5: `URI range=A-B timeout=S pacing=S`.
    Thesis,
    /// UW httperf fork (videoperf): `URI pace_time=S timeout=S headers='Range: bytes=A-B' size=N`.
    Videoperf,
    /// Stock httperf `--wsesslog`: whole-file GETs, `think=`, bursts by indentation.
    Httperf,
}

impl LogFormat {
    pub const ALL: [LogFormat; 4] = [
        LogFormat::Jsonl,
        LogFormat::Thesis,
        LogFormat::Videoperf,
        LogFormat::Httperf,
    ];

    /// Guess the dialect of a log from its content. Never fails: text without any telling
    /// attribute is taken as the thesis dialect (a plain list of URIs is valid in all three).
    pub fn detect(text: &str) -> LogFormat {
        let mut saw_thesis = false;
        let mut saw_httperf = false;
        for raw in text.lines() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if line.starts_with('{') {
                return LogFormat::Jsonl;
            }
            if line == "session" || line.starts_with("session ") || line.starts_with("session\t") {
                return LogFormat::Videoperf;
            }
            for token in line.split_whitespace().skip(1) {
                let key = token.split('=').next().unwrap_or("");
                match key {
                    "pace_time" | "headers" | "size" => return LogFormat::Videoperf,
                    "range" | "pacing" => saw_thesis = true,
                    "think" | "method" | "contents" => saw_httperf = true,
                    _ => {}
                }
            }
            if raw.starts_with([' ', '\t']) {
                saw_httperf = true;
            }
        }
        if saw_thesis || !saw_httperf {
            LogFormat::Thesis
        } else {
            LogFormat::Httperf
        }
    }
}

fn unknown_format(s: &str) -> String {
    vodkit_units::unknown_choice("log format", s, LogFormat::VARIANTS)
}

/// Why a log could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The sessions use something the dialect cannot express.
    #[error("session {session}: {problem}")]
    Unsupported { session: u64, problem: String },
}

/// Read sessions from `text` in `format`. `origin` names the input in error messages
/// (`FILE:LINE: problem`).
pub fn parse(text: &str, format: LogFormat, origin: &str) -> Result<Vec<Session>, InputError> {
    match format {
        LogFormat::Jsonl => parse_jsonl(text, origin),
        LogFormat::Thesis | LogFormat::Videoperf | LogFormat::Httperf => {
            TextParser::new(format, origin).run(text)
        }
    }
}

/// Write `sessions` in `format`.
pub fn write(
    sessions: &[Session],
    format: LogFormat,
    out: &mut impl Write,
) -> Result<(), WriteError> {
    match format {
        LogFormat::Jsonl => {
            for s in sessions {
                serde_json::to_writer(&mut *out, s).map_err(std::io::Error::other)?;
                out.write_all(b"\n")?;
            }
        }
        LogFormat::Thesis => write_thesis(sessions, out)?,
        LogFormat::Videoperf => write_videoperf(sessions, out)?,
        LogFormat::Httperf => write_httperf(sessions, out)?,
    }
    out.flush()?;
    Ok(())
}

fn parse_jsonl(text: &str, origin: &str) -> Result<Vec<Session>, InputError> {
    let mut sessions = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let s: Session = serde_json::from_str(line)
            .map_err(|e| InputError::at_line(origin, i + 1, format!("not a session: {e}")))?;
        check_session(&s).map_err(|p| InputError::at_line(origin, i + 1, p))?;
        sessions.push(s);
    }
    Ok(sessions)
}

/// Values a parsed session must satisfy whatever its dialect.
fn check_session(s: &Session) -> Result<(), String> {
    non_negative("gap", s.gap)?;
    if let Some(t) = s.start_s {
        non_negative("start_s", t)?;
    }
    for (k, r) in s.requests.iter().enumerate() {
        check_request(r).map_err(|p| format!("request {k}: {p}"))?;
    }
    if let Some(p) = &s.play {
        p.check()?;
    }
    Ok(())
}

fn check_request(r: &Request) -> Result<(), String> {
    if !r.path.starts_with('/') {
        return Err(format!("path must start with `/`, got `{}`", r.path));
    }
    for (name, v) in [
        ("pacing_s", r.pacing_s),
        ("timeout_s", r.timeout_s),
        ("media_s", r.media_s),
    ] {
        non_negative(name, v)?;
    }
    if let Some(ByteRange::Closed { first, last }) = r.range {
        if last < first {
            return Err(format!("range {first}-{last} ends before it starts"));
        }
    }
    Ok(())
}

/// Session metadata carried in a `#vodkit session` comment.
#[derive(Default)]
struct Meta {
    id: Option<u64>,
    class: Option<String>,
    gap: Option<f64>,
    start_s: Option<f64>,
    title: Option<u32>,
    bitrate_kbps: Option<u32>,
    timeout_s: Option<f64>,
}

struct TextParser<'a> {
    format: LogFormat,
    origin: &'a str,
    sessions: Vec<Session>,
    current: Option<Session>,
    meta: Option<Meta>,
    /// httperf `think=` of the previous burst head, applied to the next burst head.
    pending_think: f64,
    /// Index within the current burst (httperf and videoperf indentation).
    burst_index: u32,
    /// Timeout stated by the current session's `#vodkit session` comment.
    session_timeout: Option<f64>,
}

impl<'a> TextParser<'a> {
    fn new(format: LogFormat, origin: &'a str) -> Self {
        TextParser {
            format,
            origin,
            sessions: Vec::new(),
            current: None,
            meta: None,
            pending_think: 0.0,
            burst_index: 0,
            session_timeout: None,
        }
    }

    fn err(&self, line: usize, problem: impl Into<String>) -> InputError {
        InputError::at_line(self.origin, line, problem)
    }

    fn run(mut self, text: &str) -> Result<Vec<Session>, InputError> {
        for (i, raw) in text.lines().enumerate() {
            let n = i + 1;
            let line = raw.trim_end_matches('\r');
            let trimmed = line.trim();
            if trimmed.is_empty() {
                self.finish_session();
                continue;
            }
            if let Some(rest) = trimmed.strip_prefix(META_PREFIX) {
                if rest.is_empty() || rest.starts_with([' ', '\t']) {
                    self.finish_session();
                    self.meta = Some(self.parse_meta(rest, n)?);
                    continue;
                }
            }
            if trimmed.starts_with('#') {
                continue;
            }
            if self.format == LogFormat::Videoperf
                && (trimmed == "session"
                    || trimmed.starts_with("session ")
                    || trimmed.starts_with("session\t"))
            {
                if self
                    .current
                    .as_ref()
                    .is_some_and(|s| !s.requests.is_empty())
                {
                    self.finish_session();
                }
                self.parse_session_line(trimmed, n)?;
                continue;
            }
            let indented = line.starts_with([' ', '\t']);
            if self.format == LogFormat::Thesis && indented {
                // The thesis dialect has no bursts; indentation is just layout.
                self.request_line(trimmed, false, n)?;
            } else {
                self.request_line(trimmed, indented, n)?;
            }
        }
        self.finish_session();
        Ok(self.sessions)
    }

    fn parse_meta(&self, rest: &str, n: usize) -> Result<Meta, InputError> {
        let mut m = Meta::default();
        for token in rest.split_whitespace() {
            let (key, value) = token.split_once('=').ok_or_else(|| {
                self.err(
                    n,
                    format!("expected key=value in session comment, got `{token}`"),
                )
            })?;
            let bad = |what: &str| self.err(n, format!("{key}: expected {what}, got `{value}`"));
            match key {
                "id" => m.id = Some(value.parse().map_err(|_| bad("an integer"))?),
                "class" => m.class = Some(value.to_string()),
                "gap" => m.gap = Some(parse_seconds(value).ok_or_else(|| bad("seconds"))?),
                "start" => m.start_s = Some(parse_seconds(value).ok_or_else(|| bad("seconds"))?),
                "title" => m.title = Some(value.parse().map_err(|_| bad("an integer"))?),
                "kbps" => m.bitrate_kbps = Some(value.parse().map_err(|_| bad("an integer"))?),
                "timeout" => {
                    m.timeout_s = Some(parse_seconds(value).ok_or_else(|| bad("seconds"))?)
                }
                _ => return Err(self.err(n, format!("unknown session attribute `{key}`"))),
            }
        }
        Ok(m)
    }

    fn parse_session_line(&mut self, line: &str, n: usize) -> Result<(), InputError> {
        for token in line.split_whitespace().skip(1) {
            let (key, value) = token.split_once('=').ok_or_else(|| {
                self.err(
                    n,
                    format!("expected key=value after `session`, got `{token}`"),
                )
            })?;
            match key {
                "server" if !value.is_empty() => {}
                "port" => {
                    value.parse::<u16>().map_err(|_| {
                        self.err(n, format!("port: expected 1-65535, got `{value}`"))
                    })?;
                }
                "ssl" if value == "on" || value == "off" => {}
                "ssl" => return Err(self.err(n, format!("ssl: expected on or off, got `{value}`"))),
                _ => {
                    return Err(self.err(
                        n,
                        format!(
                            "unknown session setting `{token}` (expected server=, port=, ssl=)"
                        ),
                    ))
                }
            }
        }
        self.start_session();
        Ok(())
    }

    fn start_session(&mut self) {
        if self.current.is_none() {
            let meta = self.meta.take().unwrap_or_default();
            let id = meta.id.unwrap_or(self.sessions.len() as u64);
            self.current = Some(Session {
                id,
                gap: meta.gap.unwrap_or(1.0),
                start_s: meta.start_s,
                class: meta.class.unwrap_or_else(|| DEFAULT_CLASS.to_string()),
                title: meta.title,
                bitrate_kbps: meta.bitrate_kbps,
                requests: Vec::new(),
                live: None,
                play: None,
            });
            self.session_timeout = meta.timeout_s;
            self.pending_think = 0.0;
            self.burst_index = 0;
        }
    }

    fn finish_session(&mut self) {
        if let Some(s) = self.current.take() {
            if !s.requests.is_empty() {
                self.sessions.push(s);
            }
        }
        self.pending_think = 0.0;
        self.burst_index = 0;
        self.session_timeout = None;
    }

    fn default_timeout(&self) -> f64 {
        self.session_timeout.unwrap_or(DEFAULT_TIMEOUT_S)
    }

    fn request_line(&mut self, line: &str, in_burst: bool, n: usize) -> Result<(), InputError> {
        self.start_session();
        let tokens = tokenize(line).map_err(|p| self.err(n, p))?;
        let mut tokens = tokens.into_iter();
        let uri = tokens.next().unwrap_or_default();
        if uri.contains('=') {
            return Err(self.err(n, format!("expected a URI first, got `{uri}`")));
        }
        let path = if uri.starts_with('/') {
            uri
        } else {
            format!("/{uri}")
        };
        let mut req = Request::new(path, None, self.default_timeout());
        let mut think = None;
        let mut size = None;
        for token in tokens {
            let (key, value) = token
                .split_once('=')
                .ok_or_else(|| self.err(n, format!("expected key=value, got `{token}`")))?;
            let secs = |v: &str| {
                parse_seconds(v).ok_or_else(|| {
                    self.err(
                        n,
                        format!("{key}: expected seconds (a non-negative number), got `{v}`"),
                    )
                })
            };
            match (self.format, key) {
                (_, "timeout") if self.format != LogFormat::Httperf => req.timeout_s = secs(value)?,
                (LogFormat::Thesis, "pacing") | (LogFormat::Videoperf, "pace_time") => {
                    req.pacing_s = secs(value)?
                }
                (LogFormat::Thesis, "range") => {
                    req.range =
                        Some(parse_range(value).map_err(|p| self.err(n, format!("range: {p}")))?)
                }
                (LogFormat::Videoperf, "headers") => {
                    req.range =
                        parse_headers(value).map_err(|p| self.err(n, format!("headers: {p}")))?
                }
                (LogFormat::Videoperf, "size") => {
                    size = Some(value.parse::<u64>().map_err(|_| {
                        self.err(n, format!("size: expected a byte count, got `{value}`"))
                    })?)
                }
                (LogFormat::Httperf | LogFormat::Videoperf, "method") => {
                    if value != "GET" {
                        return Err(
                            self.err(n, format!("method: only GET is supported, got `{value}`"))
                        );
                    }
                }
                (LogFormat::Httperf | LogFormat::Videoperf, "think") => think = Some(secs(value)?),
                (LogFormat::Httperf | LogFormat::Videoperf, "contents") => {
                    return Err(self.err(
                        n,
                        "contents: request bodies are not supported (video sessions are GETs)",
                    ))
                }
                _ => {
                    return Err(self.err(
                        n,
                        format!(
                            "unknown attribute `{key}` (expected {})",
                            expected_attrs(self.format)
                        ),
                    ))
                }
            }
        }
        if let (Some(size), Some(range)) = (size, req.range) {
            if range.len() != size {
                return Err(self.err(
                    n,
                    format!(
                        "size={size} does not match the {} bytes of {}",
                        range.len(),
                        range.header_value()
                    ),
                ));
            }
        }
        check_request(&req).map_err(|p| self.err(n, p))?;
        if think.is_some() && in_burst {
            return Err(self.err(n, "think= belongs on the first request of a burst"));
        }
        let session = self.current.as_mut().expect("session started above");
        if in_burst {
            if session.requests.is_empty() {
                return Err(self.err(n, "an indented (burst) request needs a request before it"));
            }
            self.burst_index += 1;
            req.conn = self.burst_index;
        } else {
            self.burst_index = 0;
            if !session.requests.is_empty() {
                req.pacing_s += self.pending_think;
            }
            self.pending_think = 0.0;
        }
        if let Some(t) = think {
            self.pending_think = t;
        }
        session.requests.push(req);
        Ok(())
    }
}

fn expected_attrs(format: LogFormat) -> &'static str {
    match format {
        LogFormat::Thesis => "range=, timeout=, pacing=",
        LogFormat::Videoperf => "pace_time=, timeout=, headers=, size=, method=, think=",
        LogFormat::Httperf => "method=, think=",
        LogFormat::Jsonl => "JSON",
    }
}

/// Split a line into whitespace-separated tokens; `key='a b'` and `key="a b"` keep their
/// quoted value (without the quotes) as one token.
fn tokenize(line: &str) -> Result<Vec<String>, String> {
    let mut tokens = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let Some(&c) = chars.peek() else { break };
        if c == '#' {
            break; // trailing comment
        }
        let mut token = String::new();
        while let Some(&c) = chars.peek() {
            if c.is_whitespace() {
                break;
            }
            chars.next();
            if (c == '\'' || c == '"') && token.ends_with('=') {
                let mut closed = false;
                for q in chars.by_ref() {
                    if q == c {
                        closed = true;
                        break;
                    }
                    token.push(q);
                }
                if !closed {
                    return Err(format!("unterminated {c}-quoted value in `{token}`"));
                }
            } else {
                token.push(c);
            }
        }
        tokens.push(token);
    }
    Ok(tokens)
}

fn parse_seconds(v: &str) -> Option<f64> {
    crate::units::parse_seconds(v).ok()
}

/// `A-B` (inclusive) as a closed byte range.
fn parse_range(v: &str) -> Result<ByteRange, String> {
    let (a, b) = v
        .split_once('-')
        .ok_or_else(|| format!("expected FIRST-LAST byte offsets, got `{v}`"))?;
    let first: u64 = a
        .parse()
        .map_err(|_| format!("expected FIRST-LAST byte offsets, got `{v}`"))?;
    if b.is_empty() {
        return Err(format!("open-ended range `{v}` needs a last byte offset"));
    }
    let last: u64 = b
        .parse()
        .map_err(|_| format!("expected FIRST-LAST byte offsets, got `{v}`"))?;
    if last < first {
        return Err(format!("`{v}` ends before it starts"));
    }
    Ok(ByteRange::Closed { first, last })
}

/// The `headers='...'` value of a videoperf request: only `Range: bytes=A-B` is supported.
fn parse_headers(v: &str) -> Result<Option<ByteRange>, String> {
    let mut range = None;
    for header in v.split("\\r\\n").flat_map(|h| h.split("\\n")) {
        let header = header.trim();
        if header.is_empty() {
            continue;
        }
        let (name, value) = header
            .split_once(':')
            .ok_or_else(|| format!("expected `Name: value`, got `{header}`"))?;
        if !name.trim().eq_ignore_ascii_case("range") {
            return Err(format!(
                "only the Range header is supported, got `{}`",
                name.trim()
            ));
        }
        let spec = value
            .trim()
            .strip_prefix("bytes=")
            .ok_or_else(|| format!("expected `Range: bytes=A-B`, got `{header}`"))?;
        range = Some(parse_range(spec)?);
    }
    Ok(range)
}

fn write_meta(s: &Session, timeout: Option<f64>, out: &mut impl Write) -> std::io::Result<()> {
    write!(
        out,
        "{META_PREFIX} id={} class={} gap={}",
        s.id, s.class, s.gap
    )?;
    if let Some(t) = s.start_s {
        write!(out, " start={t}")?;
    }
    if let Some(t) = s.title {
        write!(out, " title={t}")?;
    }
    if let Some(k) = s.bitrate_kbps {
        write!(out, " kbps={k}")?;
    }
    if let Some(t) = timeout {
        write!(out, " timeout={t}")?;
    }
    writeln!(out)
}

fn check_class(s: &Session) -> Result<(), WriteError> {
    if s.class.is_empty() || s.class.contains(char::is_whitespace) {
        return Err(WriteError::Unsupported {
            session: s.id,
            problem: format!(
                "class name `{}` must be one word to fit a log comment",
                s.class
            ),
        });
    }
    Ok(())
}

fn closed_range(s: &Session, r: &Request) -> Result<Option<(u64, u64)>, WriteError> {
    match r.range {
        None => Ok(None),
        Some(ByteRange::Closed { first, last }) => Ok(Some((first, last))),
        Some(ByteRange::OpenEnded { .. }) => Err(WriteError::Unsupported {
            session: s.id,
            problem: "open-ended ranges can only be written as jsonl".into(),
        }),
    }
}

fn check_path(s: &Session, r: &Request) -> Result<(), WriteError> {
    if r.path.contains(char::is_whitespace) || r.path.contains('#') {
        return Err(WriteError::Unsupported {
            session: s.id,
            problem: format!("path `{}` contains whitespace or `#`", r.path),
        });
    }
    Ok(())
}

/// A dialect with one line per request: the header comment, then per session its metadata
/// and each request's line as `request` writes it (after the path).
fn write_per_request<W: Write>(
    sessions: &[Session],
    out: &mut W,
    header: &str,
    mut request: impl FnMut(&mut W, &Session, &Request) -> Result<(), WriteError>,
) -> Result<(), WriteError> {
    writeln!(out, "{header}")?;
    for s in sessions {
        check_class(s)?;
        writeln!(out)?;
        write_meta(s, None, out)?;
        for r in &s.requests {
            check_path(s, r)?;
            write!(out, "{}", r.path)?;
            request(out, s, r)?;
            writeln!(out)?;
        }
    }
    Ok(())
}

fn write_thesis(sessions: &[Session], out: &mut impl Write) -> Result<(), WriteError> {
    let header = "# vodkit session log, thesis dialect: URI range=A-B timeout=S pacing=S";
    write_per_request(sessions, out, header, |out, s, r| {
        if let Some((a, b)) = closed_range(s, r)? {
            write!(out, " range={a}-{b}")?;
        }
        write!(out, " timeout={}", r.timeout_s)?;
        if r.pacing_s > 0.0 {
            write!(out, " pacing={}", r.pacing_s)?;
        }
        Ok(())
    })
}

fn write_videoperf(sessions: &[Session], out: &mut impl Write) -> Result<(), WriteError> {
    let header = "# vodkit session log, videoperf dialect";
    write_per_request(sessions, out, header, |out, s, r| {
        if r.pacing_s > 0.0 {
            write!(out, " pace_time={}", r.pacing_s)?;
        }
        write!(out, " timeout={}", r.timeout_s)?;
        if let Some((a, b)) = closed_range(s, r)? {
            write!(out, " headers='Range: bytes={a}-{b}' size={}", b - a + 1)?;
        }
        Ok(())
    })
}

fn write_httperf(sessions: &[Session], out: &mut impl Write) -> Result<(), WriteError> {
    writeln!(
        out,
        "# vodkit session log, stock httperf --wsesslog dialect (think= approximates pacing)"
    )?;
    for s in sessions {
        check_class(s)?;
        let timeout = s.requests.first().map(|r| r.timeout_s);
        for r in &s.requests {
            check_path(s, r)?;
            if r.range.is_some() {
                return Err(WriteError::Unsupported {
                    session: s.id,
                    problem: "stock httperf can only request whole files; this workload uses byte ranges \
                              (export it as thesis or videoperf, or generate it with a chunked layout)"
                        .into(),
                });
            }
            if Some(r.timeout_s) != timeout {
                return Err(WriteError::Unsupported {
                    session: s.id,
                    problem:
                        "stock httperf has one timeout per run; requests of this session differ"
                            .into(),
                });
            }
            if r.conn != 0 {
                return Err(WriteError::Unsupported {
                    session: s.id,
                    problem: "parallel connections cannot be expressed in the httperf dialect"
                        .into(),
                });
            }
        }
        writeln!(out)?;
        write_meta(s, timeout, out)?;
        for (k, r) in s.requests.iter().enumerate() {
            write!(out, "{}", r.path)?;
            // httperf waits `think` after this request before the next one.
            if let Some(next) = s.requests.get(k + 1) {
                if next.pacing_s > 0.0 {
                    write!(out, " think={}", next.pacing_s)?;
                }
            }
            writeln!(out)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(path: &str, range: Option<(u64, u64)>, pacing: f64) -> Request {
        let range = range.map(|(first, last)| ByteRange::Closed { first, last });
        Request {
            pacing_s: pacing,
            ..Request::new(path, range, 10.0)
        }
    }

    fn sessions(ranged: bool) -> Vec<Session> {
        (0..5u64)
            .map(|i| Session {
                id: 100 + i,
                gap: 0.125 * i as f64 + 0.3,
                start_s: if i == 2 { Some(4.5) } else { None },
                class: ["high", "bband", "medium"][i as usize % 3].into(),
                title: Some(i as u32 * 7),
                bitrate_kbps: Some(419),
                requests: (0..4u64)
                    .map(|k| {
                        let range = ranged.then_some((k * 524_288, k * 524_288 + 524_287));
                        let path = if ranged {
                            format!("/full/t{i}.dat")
                        } else {
                            format!("/chunk-512k/t{i}-{k}.dat")
                        };
                        req(&path, range, if k >= 3 { 10.0 } else { 0.0 })
                    })
                    .collect(),
                live: None,
                play: None,
            })
            .collect()
    }

    fn round_trip(s: &[Session], f: LogFormat) -> Vec<Session> {
        let mut buf = Vec::new();
        write(s, f, &mut buf).unwrap();
        let text = String::from_utf8(buf).unwrap();
        assert_eq!(LogFormat::detect(&text), f, "detect {f}:\n{text}");
        parse(&text, f, "rt.log").unwrap()
    }

    #[test]
    fn every_dialect_round_trips_what_it_can_express() {
        let ranged = sessions(true);
        for f in [LogFormat::Jsonl, LogFormat::Thesis, LogFormat::Videoperf] {
            assert_eq!(round_trip(&ranged, f), ranged, "{f}");
        }
        let whole = sessions(false);
        for f in LogFormat::ALL {
            assert_eq!(round_trip(&whole, f), whole, "{f}");
        }
    }

    #[test]
    fn player_sessions_carry_start_watch_and_seeks_and_bad_ones_are_named() {
        let line = r#"{"id":3,"gap":0.5,"class":"c","title":7,"requests":[],"play":{"start_s":30,"watch_s":90,"seeks":[{"after_s":20,"to_s":300}],"connections":3,"buffer_target_s":120}}"#;
        let s = parse(line, LogFormat::Jsonl, "p.jsonl").unwrap();
        let p = s[0].play.as_ref().unwrap();
        assert_eq!((p.start_s, p.watch_s, p.seeks.len()), (30.0, Some(90.0), 1));
        assert_eq!((p.connections, p.buffer_target_s), (Some(3), Some(120.0)));
        assert_eq!((p.seeks[0].after_s, p.seeks[0].to_s), (20.0, 300.0));
        assert_eq!(round_trip(&s, LogFormat::Jsonl), s);
        for (bad, field) in [
            (r#""play":{"start_s":-1}"#, "play.start_s"),
            (r#""play":{"watch_s":0}"#, "play.watch_s"),
            (r#""play":{"connections":0}"#, "play.connections"),
            (r#""play":{"connections":17}"#, "play.connections"),
            (r#""play":{"buffer_target_s":-5}"#, "play.buffer_target_s"),
            (
                r#""play":{"seeks":[{"after_s":0,"to_s":5}]}"#,
                "play.seeks[0].after_s",
            ),
            (
                r#""play":{"seeks":[{"after_s":5,"to_s":-2}]}"#,
                "play.seeks[0].to_s",
            ),
        ] {
            let text = format!(
                "{{\"id\":1,\"gap\":0,\"class\":\"c\",\"requests\":[]}}\n{{\"id\":2,\"gap\":0,\"class\":\"c\",\"requests\":[],{bad}}}\n"
            );
            let e = parse(&text, LogFormat::Jsonl, "p.jsonl")
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("p.jsonl:2: ") && e.contains(field), "{e}");
        }
    }

    #[test]
    fn httperf_refuses_ranges_with_a_reason() {
        let e = write(&sessions(true), LogFormat::Httperf, &mut Vec::new()).unwrap_err();
        assert!(e.to_string().contains("whole files"), "{e}");
    }

    #[test]
    fn thesis_figure_example_parses() {
        let text = "# first session: 4 chunks\nvid01/secs-0-9 timeout=10\nvid01/secs-10-19 timeout=10\n\
                    vid01/secs-20-29 timeout=10 pacing=10\n\n# second session\nvid02 range=0-524287 timeout=10\n\
                    vid02 range=524288-1048575 timeout=10\n\n\
                    vid04/secs-10-19 timeout=10 pacing=60 # pause for 60 seconds\n";
        assert_eq!(LogFormat::detect(text), LogFormat::Thesis);
        let s = parse(text, LogFormat::Thesis, "fig.log").unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].requests.len(), 3);
        assert_eq!(s[0].requests[0].path, "/vid01/secs-0-9");
        assert_eq!(s[0].requests[2].pacing_s, 10.0);
        assert_eq!(
            s[1].requests[1].range,
            Some(ByteRange::Closed {
                first: 524_288,
                last: 1_048_575
            })
        );
        assert_eq!(s[2].requests[0].pacing_s, 60.0);
        assert_eq!(
            (s[1].id, s[1].class.as_str(), s[1].gap),
            (1, "default", 1.0)
        );
    }

    #[test]
    fn videoperf_session_lines_and_headers() {
        let text = "session ssl=off server=localhost port=6800\n/a.mp4 timeout=10 headers='Range: bytes=0-99' size=100\n\
                    /a.mp4 pace_time=10 timeout=10 headers='Range: bytes=100-199' size=100\n\
                    session port=80\n/b.mp4 size=5\n";
        assert_eq!(LogFormat::detect(text), LogFormat::Videoperf);
        let s = parse(text, LogFormat::Videoperf, "v.log").unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].requests[1].pacing_s, 10.0);
        assert_eq!(s[0].requests[1].range.unwrap().len(), 100);
        assert_eq!(s[1].requests[0].range, None);
    }

    #[test]
    fn httperf_bursts_and_think() {
        let text =
            "/foo.html think=2.0\n   /pict1.gif\n   /pict2.gif\n/foo2.html\n\n/x method=GET\n";
        assert_eq!(LogFormat::detect(text), LogFormat::Httperf);
        let s = parse(text, LogFormat::Httperf, "h.log").unwrap();
        assert_eq!(s.len(), 2);
        let r = &s[0].requests;
        assert_eq!(
            r.iter().map(|r| r.conn).collect::<Vec<_>>(),
            vec![0, 1, 2, 0]
        );
        assert_eq!(r[3].pacing_s, 2.0);
        assert_eq!(r[1].pacing_s, 0.0);
    }

    #[test]
    fn malformed_lines_name_file_and_line() {
        let cases: &[(LogFormat, &str, &str)] = &[
            (LogFormat::Thesis, "/a timeout=10\n/b range=9-1\n", "bad.log:2: range: `9-1` ends before it starts"),
            (LogFormat::Thesis, "/a range=x-1\n", "bad.log:1: range: expected FIRST-LAST"),
            (LogFormat::Thesis, "/a range=5-\n", "bad.log:1: range: open-ended"),
            (LogFormat::Thesis, "/a timeout=-1\n", "bad.log:1: timeout: expected seconds"),
            (LogFormat::Thesis, "/a pacing=NaN\n", "bad.log:1: pacing: expected seconds"),
            (LogFormat::Thesis, "/a speed=3\n", "bad.log:1: unknown attribute `speed`"),
            (LogFormat::Thesis, "/a junk\n", "bad.log:1: expected key=value, got `junk`"),
            (LogFormat::Thesis, "range=1-2\n", "bad.log:1: expected a URI first"),
            (LogFormat::Thesis, "#vodkit session id=x\n/a\n", "bad.log:1: id: expected an integer"),
            (LogFormat::Thesis, "#vodkit session id\n/a\n", "bad.log:1: expected key=value"),
            (LogFormat::Thesis, "#vodkit session colour=red\n/a\n", "bad.log:1: unknown session attribute"),
            (LogFormat::Videoperf, "/a headers='Range: bytes=0-9' size=11\n", "bad.log:1: size=11 does not match"),
            (LogFormat::Videoperf, "/a headers='Accept: x'\n", "bad.log:1: headers: only the Range header"),
            (LogFormat::Videoperf, "/a headers='Range: 0-9'\n", "bad.log:1: headers: expected `Range: bytes=A-B`"),
            (LogFormat::Videoperf, "/a headers='Range: bytes=0-9\n", "bad.log:1: unterminated"),
            (LogFormat::Videoperf, "/a size=x\n", "bad.log:1: size: expected a byte count"),
            (LogFormat::Videoperf, "session port=99999\n/a\n", "bad.log:1: port: expected"),
            (LogFormat::Videoperf, "session ssl=maybe\n/a\n", "bad.log:1: ssl: expected on or off"),
            (LogFormat::Videoperf, "session color=1\n/a\n", "bad.log:1: unknown session setting"),
            (LogFormat::Videoperf, "session x\n/a\n", "bad.log:1: expected key=value after `session`"),
            (LogFormat::Httperf, "/a method=POST\n", "bad.log:1: method: only GET"),
            (LogFormat::Httperf, "/a contents='x'\n", "bad.log:1: contents: request bodies"),
            (LogFormat::Httperf, "  /a\n", "bad.log:1: an indented (burst) request needs"),
            (LogFormat::Httperf, "/a\n  /b think=1\n", "bad.log:2: think= belongs"),
            (LogFormat::Httperf, "/a range=0-1\n", "bad.log:1: unknown attribute `range`"),
            (LogFormat::Jsonl, "{\"id\":1}\n", "bad.log:1: not a session"),
            (LogFormat::Jsonl, "\n{\"id\":1,\"gap\":-1,\"class\":\"a\",\"requests\":[]}\n", "bad.log:2: gap must be"),
            (
                LogFormat::Jsonl,
                "{\"id\":1,\"gap\":1,\"class\":\"a\",\"requests\":[{\"path\":\"x\",\"timeout_s\":1}]}\n",
                "bad.log:1: request 0: path must start with `/`",
            ),
        ];
        for (f, text, want) in cases {
            let e = parse(text, *f, "bad.log").expect_err(text);
            let msg = e.to_string();
            assert!(
                msg.starts_with(want),
                "{f} {text:?}: got `{msg}`, want `{want}`"
            );
            assert!(!msg.contains('\n'));
        }
    }

    #[test]
    fn detect_recognises_each_dialect() {
        assert_eq!(LogFormat::detect("{\"id\":0}"), LogFormat::Jsonl);
        assert_eq!(
            LogFormat::detect("# c\n/a pace_time=1\n"),
            LogFormat::Videoperf
        );
        assert_eq!(LogFormat::detect("/a think=1\n"), LogFormat::Httperf);
        assert_eq!(LogFormat::detect("/a timeout=1\n"), LogFormat::Thesis);
        assert_eq!(LogFormat::detect(""), LogFormat::Thesis);
        assert_eq!("videoperf".parse::<LogFormat>(), Ok(LogFormat::Videoperf));
        assert!("x".parse::<LogFormat>().is_err());
    }
}
