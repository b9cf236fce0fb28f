//! Parsing access-log lines: the Netflix-style CSV of thesis 5.1, nginx with the
//! `log_format` in docs/trace.md, nginx/Apache `combined` and `common`, JSON lines, and
//! vodkit's own access log (docs/server.md); and what a pass found ([`ReadSummary`]).
//!
//! A line that does not parse is an error naming the field and what was expected; the
//! caller counts it (the first few are kept with their line numbers) and goes on.

use crate::record::{LogRequest, RequestKind};
use strum::{EnumString, VariantNames};

/// How many bad lines are kept verbatim in a [`ReadSummary`].
pub const BAD_EXAMPLES: usize = 5;

#[derive(Clone, Copy, Debug, PartialEq, Eq, EnumString, VariantNames)]
#[strum(serialize_all = "lowercase", parse_err_ty = String, parse_err_fn = unknown_format)]
pub enum LogFormat {
    /// Decide from the first line.
    Auto,
    /// `ts_end,service_time_s,session,file,offset,length,open_ended,bytes_sent,device_type`.
    #[strum(to_string = "netflix", serialize = "csv")]
    Netflix,
    /// nginx `log_format vodkit_trace` (docs/trace.md).
    Nginx,
    /// vodkit's tab-separated access log (`#vodkit-access-log v1`).
    Vodkit,
    /// nginx/Apache `combined`, optionally followed by `$request_time` and `"$http_range"`
    /// (docs/trace.md); a session is client address + user agent.
    Combined,
    /// nginx/Apache `common` (no user agent), same optional columns; a session is the client
    /// address.
    Common,
    /// One JSON object per line (nginx `log_format ... escape=json`, docs/trace.md).
    Json,
}

fn unknown_format(s: &str) -> String {
    vodkit_units::unknown_choice("log format", s, LogFormat::VARIANTS)
}

/// What a pass over a log found besides the requests themselves.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct ReadSummary {
    pub format: String,
    pub lines: u64,
    pub requests: u64,
    /// Lines that did not parse.
    pub bad_lines: u64,
    /// `(line number, reason)` of the first bad lines.
    pub bad_examples: Vec<(u64, String)>,
    /// Responses other than 200/206 (errors, 304, 416...), not requests for content.
    pub skipped_status: u64,
    /// Requests that covered no bytes.
    pub empty: u64,
    /// Multi-range or suffix-range requests, which chains cannot place.
    pub unsupported_range: u64,
    /// Requests completing more than the order tolerance before the latest completion read
    /// so far (the log is not in completion order).
    pub out_of_order: u64,
    /// `(line number, how far back)` of the first of them.
    pub out_of_order_examples: Vec<(u64, String)>,
    /// `(line number, why)` when a compressed log ended in a corrupt or cut stream: the
    /// line where reading stopped (also counted as a bad line).
    pub broken: Option<(u64, String)>,
}

impl ReadSummary {
    pub(crate) fn bad(&mut self, line: u64, why: String) {
        self.bad_lines += 1;
        if self.bad_examples.len() < BAD_EXAMPLES {
            self.bad_examples.push((line, why));
        }
    }

    /// The log could not be read past `line`: a corrupt or cut compressed stream.
    pub(crate) fn broken_at(&mut self, line: u64, why: String) {
        self.bad(line, why.clone());
        self.broken = Some((line, why));
    }

    /// Add the bad lines of a part of the log that starts after line `base`.
    pub(crate) fn add_bad(&mut self, part: &ReadSummary, base: u64) {
        self.bad_lines += part.bad_lines;
        let room = BAD_EXAMPLES.saturating_sub(self.bad_examples.len());
        self.bad_examples.extend(
            part.bad_examples
                .iter()
                .take(room)
                .map(|(n, why)| (base + n, why.clone())),
        );
        if let Some((n, why)) = &part.broken {
            self.broken = Some((base + n, why.clone()));
        }
    }

    pub(crate) fn out_of_order(&mut self, line: u64, behind_s: f64, tolerance_s: f64) {
        self.out_of_order += 1;
        if self.out_of_order_examples.len() < BAD_EXAMPLES {
            self.out_of_order_examples.push((
                line,
                format!(
                    "completed {behind_s:.3} s before a request on an earlier line (tolerance {tolerance_s} s)"
                ),
            ));
        }
    }

    /// One line for humans: counts and the first bad lines.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{} lines, {} requests ({} format)",
            self.lines, self.requests, self.format
        );
        if self.bad_lines > 0 {
            s += &format!("; {} bad lines", self.bad_lines);
            for (n, why) in &self.bad_examples {
                s += &format!("; line {n}: {why}");
            }
        }
        if let Some((n, why)) = &self.broken {
            s += &format!("; reading stopped at line {n}: {why}");
        }
        if self.out_of_order > 0 {
            s += &format!("; {} requests out of completion order", self.out_of_order);
            for (n, why) in &self.out_of_order_examples {
                s += &format!("; line {n}: {why}");
            }
        }
        if self.skipped_status + self.empty + self.unsupported_range > 0 {
            s += &format!(
                "; skipped {} non-200/206, {} empty, {} multi/suffix-range",
                self.skipped_status, self.empty, self.unsupported_range
            );
        }
        s
    }
}

pub(crate) enum Parsed<'a> {
    Request(LogRequest<'a>),
    /// Header, comment or blank line.
    Skip,
    Status,
    Empty,
    Unsupported,
}

/// Netflix CSV column positions, from the header.
#[derive(Clone, Copy)]
pub(crate) struct CsvCols {
    ts_end: usize,
    service: usize,
    session: usize,
    file: usize,
    offset: usize,
    length: usize,
    open: usize,
    sent: usize,
    /// An optional `conn` column: the connection id (written by `--sort`).
    conn: Option<usize>,
    width: usize,
}

impl CsvCols {
    /// Fields a line has.
    pub(crate) fn width(&self) -> usize {
        self.width
    }
}

pub(crate) const CSV_NAMES: [&str; 8] = [
    "ts_end",
    "service_time_s",
    "session",
    "file",
    "offset",
    "length",
    "open_ended",
    "bytes_sent",
];

pub(crate) fn csv_header(line: &str) -> Option<CsvCols> {
    let names: Vec<&str> = line.split(',').map(str::trim).collect();
    let pos = |n: &str| names.iter().position(|x| *x == n);
    Some(CsvCols {
        ts_end: pos(CSV_NAMES[0])?,
        service: pos(CSV_NAMES[1])?,
        session: pos(CSV_NAMES[2])?,
        file: pos(CSV_NAMES[3])?,
        offset: pos(CSV_NAMES[4])?,
        length: pos(CSV_NAMES[5])?,
        open: pos(CSV_NAMES[6])?,
        sent: pos(CSV_NAMES[7])?,
        conn: pos("conn"),
        width: names.len(),
    })
}

fn num<T: std::str::FromStr>(s: &str, field: &str, want: &str) -> Result<T, String> {
    s.parse()
        .map_err(|_| format!("field {field}: expected {want}, got {:?}", truncate(s)))
}

fn truncate(s: &str) -> &str {
    let mut end = s.len().min(40);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A byte count or offset: plain decimal digits read directly (the log's every line has
/// several), anything else as `str::parse` reads it, with its error.
fn count(s: &str, field: &str, want: &str) -> Result<u64, String> {
    let b = s.as_bytes();
    // 19 digits never overflow a u64.
    if !b.is_empty() && b.len() <= 19 && b.iter().all(u8::is_ascii_digit) {
        return Ok(b.iter().fold(0u64, |v, &d| v * 10 + u64::from(d - b'0')));
    }
    num(s, field, want)
}

/// Powers of ten a f64 holds exactly.
const EXACT_POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// `digits[.digits]` of at most 15 digits in all, as `str::parse::<f64>` reads it: the
/// digits as an integer (below 2^53, exact) divided by a power of ten (exact), one correctly
/// rounded division, so the same value. `None` for anything else.
fn plain_decimal(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    let (mut m, mut digits, mut point) = (0u64, 0, None);
    for (i, &c) in b.iter().enumerate() {
        if c.is_ascii_digit() {
            m = m * 10 + u64::from(c - b'0');
            digits += 1;
            if digits > 15 {
                return None;
            }
        } else if c == b'.' && point.is_none() {
            point = Some(i);
        } else {
            return None;
        }
    }
    if digits == 0 {
        return None;
    }
    // Digits after the point.
    let frac = point.map_or(0, |p| b.len() - p - 1);
    Some(m as f64 / EXACT_POW10[frac])
}

fn time(s: &str, field: &str) -> Result<f64, String> {
    let v: f64 = match plain_decimal(s) {
        Some(v) => v,
        None => num(s, field, "seconds")?,
    };
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(format!("field {field}: expected non-negative seconds"))
    }
}

/// One record of a Netflix CSV log. Only the fields read are checked for UTF-8 (a line
/// with bad bytes elsewhere is still a request).
pub(crate) fn parse_csv<'a>(rec: &'a csv::ByteRecord, c: &CsvCols) -> Result<Parsed<'a>, String> {
    parse_csv_fields(rec.len(), c, |i, name| {
        std::str::from_utf8(rec.get(i).unwrap_or(b""))
            .map_err(|_| format!("field {name}: not UTF-8"))
    })
}

/// [`parse_csv`] for a record already known to be UTF-8 throughout (checked in one pass,
/// the common case).
pub(crate) fn parse_csv_text<'a>(
    rec: &'a csv::StringRecord,
    c: &CsvCols,
) -> Result<Parsed<'a>, String> {
    parse_csv_fields(rec.len(), c, |i, _| Ok(rec.get(i).unwrap_or("")))
}

/// One line of a Netflix CSV log without quotes or carriage returns (so its records are its
/// lines and its fields what lies between commas, as the `csv` reader splits them): field
/// `i` is `block[spans[i].0..spans[i].1]`, and `text` is the block when it is all UTF-8.
/// Read as [`parse_csv`] reads the record: otherwise only the fields read are checked for
/// UTF-8.
pub(crate) fn parse_csv_spans<'a>(
    block: &'a [u8],
    text: Option<&'a str>,
    spans: &[(usize, usize)],
    c: &CsvCols,
) -> Result<Parsed<'a>, String> {
    parse_csv_fields(spans.len(), c, |i, name| {
        let (a, b) = spans[i];
        let not_utf8 = || format!("field {name}: not UTF-8");
        match text {
            // Spans start and end at commas and line ends: character boundaries.
            Some(t) => t.get(a..b).ok_or_else(not_utf8),
            None => std::str::from_utf8(&block[a..b]).map_err(|_| not_utf8()),
        }
    })
}

/// `s` without leading and trailing whitespace (`str::trim`), at once when it starts and
/// ends with a visible ASCII character (as every field of a well-formed log does).
fn trim(s: &str) -> &str {
    match s.as_bytes() {
        [] => s,
        [a, .., b] | [a @ b] if a.is_ascii_graphic() && b.is_ascii_graphic() => s,
        _ => s.trim(),
    }
}

/// A record of `n` fields whose field `i` (called `name`) is `field(i, name)`.
fn parse_csv_fields<'a>(
    n: usize,
    c: &CsvCols,
    field: impl Fn(usize, &str) -> Result<&'a str, String>,
) -> Result<Parsed<'a>, String> {
    if n != c.width {
        return Err(format!(
            "expected {} comma-separated fields, got {n}",
            c.width
        ));
    }
    let f = |i: usize, name: &str| field(i, name).map(trim);
    let open = match f(c.open, "open_ended")? {
        "1" | "true" => true,
        "0" | "false" => false,
        other => {
            return Err(format!(
                "field open_ended: expected 0 or 1, got {:?}",
                truncate(other)
            ))
        }
    };
    let offset = count(f(c.offset, "offset")?, "offset", "a byte offset")?;
    let sent = count(f(c.sent, "bytes_sent")?, "bytes_sent", "a byte count")?;
    let extent = if open {
        sent
    } else {
        count(
            f(c.length, "length")?,
            "length",
            "a byte count (empty only for open-ended requests)",
        )?
    };
    let session = f(c.session, "session")?;
    let file = f(c.file, "file")?;
    let (done_s, service_s) = (f(c.ts_end, "ts_end")?, f(c.service, "service_time_s")?);
    let conn = match c.conn {
        Some(i) => match f(i, "conn")? {
            "" => None,
            v => Some(count(v, "conn", "a connection id")?),
        },
        None => None,
    };
    if session.is_empty() || file.is_empty() {
        return Err("fields session and file must not be empty".into());
    }
    if extent == 0 {
        return Ok(Parsed::Empty);
    }
    if offset.checked_add(extent).is_none() {
        return Err("fields offset and length: the range ends beyond 2^64 bytes".into());
    }
    Ok(Parsed::Request(LogRequest {
        done_s: time(done_s, "ts_end")?,
        service_s: time(service_s, "service_time_s")?,
        session: session.into(),
        file: crate::files::normalize_name(file),
        offset,
        extent,
        kind: if open {
            RequestKind::Open
        } else {
            RequestKind::Chunk
        },
        bytes_sent: sent,
        conn,
    }))
}

/// A requested range as logs write it: `bytes=a-b`, `a-b`, `a-`, or `-` for none.
enum RangeField {
    Whole,
    Closed(u64, u64),
    From(u64),
    Unsupported,
}

fn parse_range(s: &str) -> Result<RangeField, String> {
    let s = s.trim();
    let s = s.strip_prefix("bytes=").unwrap_or(s);
    if s.is_empty() || s == "-" {
        return Ok(RangeField::Whole);
    }
    if s.contains(',') || s.starts_with('-') {
        return Ok(RangeField::Unsupported);
    }
    let (a, b) = s
        .split_once('-')
        .ok_or_else(|| format!("field range: expected first-last, got {:?}", truncate(s)))?;
    let a: u64 = num(a.trim(), "range", "a byte offset")?;
    if b.trim().is_empty() {
        return Ok(RangeField::From(a));
    }
    let b: u64 = num(b.trim(), "range", "a byte offset")?;
    if b < a {
        return Err(format!(
            "field range: last byte before first in {:?}",
            truncate(s)
        ));
    }
    Ok(RangeField::Closed(a, b))
}

/// Shared tail of the nginx and vodkit readers.
#[allow(clippy::too_many_arguments)]
fn http_request<'a>(
    done_s: f64,
    service_s: f64,
    session: std::borrow::Cow<'a, str>,
    path: &'a str,
    range: &str,
    status: u16,
    body: u64,
    conn: Option<u64>,
) -> Result<Parsed<'a>, String> {
    if status != 200 && status != 206 {
        return Ok(Parsed::Status);
    }
    let (offset, extent, kind) = match parse_range(range)? {
        RangeField::Unsupported => return Ok(Parsed::Unsupported),
        RangeField::Whole => (0, body, RequestKind::Open),
        RangeField::From(a) => (if status == 206 { a } else { 0 }, body, RequestKind::Open),
        RangeField::Closed(a, b) if status == 206 => {
            (a, (b - a).saturating_add(1).min(body), RequestKind::Chunk)
        }
        RangeField::Closed(..) => (0, body, RequestKind::Open),
    };
    if extent == 0 {
        return Ok(Parsed::Empty);
    }
    if offset.checked_add(extent).is_none() {
        return Err("field range: the range ends beyond 2^64 bytes".into());
    }
    Ok(Parsed::Request(LogRequest {
        done_s,
        service_s,
        session,
        file: crate::files::normalize_name(path),
        offset,
        extent,
        kind,
        bytes_sent: body,
        conn,
    }))
}

/// Split an nginx line into space-separated tokens, `"..."` quoting allowed.
fn nginx_tokens(line: &str) -> Result<Vec<&str>, String> {
    let mut out = Vec::with_capacity(10);
    let mut rest = line.trim();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('"') {
            // Apache writes a quote inside a field as `\"`; nginx as `\x22`.
            let mut end = None;
            let mut escaped = false;
            for (i, c) in r.char_indices() {
                match c {
                    '\\' if !escaped => escaped = true,
                    '"' if !escaped => {
                        end = Some(i);
                        break;
                    }
                    _ => escaped = false,
                }
            }
            let end = end.ok_or("unterminated quoted field")?;
            out.push(&r[..end]);
            rest = r[end + 1..].trim_start();
        } else {
            let end = rest.find(' ').unwrap_or(rest.len());
            out.push(&rest[..end]);
            rest = rest[end..].trim_start();
        }
    }
    Ok(out)
}

fn parse_nginx(line: &str) -> Result<Parsed<'_>, String> {
    let t = nginx_tokens(line)?;
    if t.len() != 8 && t.len() != 9 {
        return Err(format!(
            "expected 9 fields of log_format vodkit_trace ($msec $request_time $connection \
             \"$http_x_session_id\" \"$request_uri\" \"$http_range\" $status $bytes_sent $body_bytes_sent), got {}",
            t.len()
        ));
    }
    let done = time(t[0], "$msec")?;
    let service = time(t[1], "$request_time")?;
    let conn: u64 = num(t[2], "$connection", "an integer")?;
    let status: u16 = num(t[6], "$status", "an HTTP status")?;
    let body: u64 = num(t[t.len() - 1], "$body_bytes_sent", "a byte count")?;
    // Without a session header every connection is its own session.
    let session = if t[3].is_empty() || t[3] == "-" {
        t[2]
    } else {
        t[3]
    };
    http_request(
        done,
        service,
        session.into(),
        t[4],
        t[5],
        status,
        body,
        Some(conn),
    )
}

fn parse_vodkit(line: &str) -> Result<Parsed<'_>, String> {
    if line.starts_with('#') {
        return Ok(Parsed::Skip);
    }
    let t: Vec<&str> = line.split('\t').collect();
    if t.len() < 12 {
        return Err(format!(
            "expected at least 12 tab-separated fields of #vodkit-access-log v1, got {}",
            t.len()
        ));
    }
    let done = time(t[0], "end_time")?;
    let service = time(t[1], "service_time")?;
    let conn: u64 = num(t[3], "conn", "an integer")?;
    let status: u16 = num(t[9], "status", "an HTTP status")?;
    let body: u64 = num(t[10], "bytes", "a byte count")?;
    let session = if t[5] == "-" { t[3] } else { t[5] };
    if t[6] != "GET" {
        return Ok(Parsed::Status);
    }
    http_request(
        done,
        service,
        session.into(),
        t[7],
        t[8],
        status,
        body,
        Some(conn),
    )
}

/// Whether tokens 3 and 4 are a `[dd/Mon/yyyy:hh:mm:ss +zzzz]` timestamp.
fn clf_time_at(t: &[&str]) -> bool {
    t.len() >= 7 && t[3].starts_with('[') && t[4].ends_with(']')
}

/// Seconds since the Unix epoch of a `$time_local` timestamp `dd/Mon/yyyy:hh:mm:ss +zzzz`
/// (brackets removed).
fn clf_time(s: &str) -> Result<f64, String> {
    let bad = || {
        format!(
            "field $time_local: expected dd/Mon/yyyy:hh:mm:ss +zzzz, got {:?}",
            truncate(s)
        )
    };
    let (stamp, zone) = s.split_once(' ').ok_or_else(bad)?;
    let mut p = stamp.splitn(4, ['/', ':']);
    let mut next = || p.next().ok_or_else(bad);
    let day: i64 = next()?.parse().map_err(|_| bad())?;
    let mon = next()?;
    let year: i64 = next()?.parse().map_err(|_| bad())?;
    let hms: Vec<i64> = next()?
        .split(':')
        .map(|x| x.parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = MONTHS.iter().position(|m| *m == mon).ok_or_else(bad)? as i64 + 1;
    if hms.len() != 3 || !(1..=31).contains(&day) || !(1970..=9999).contains(&year) {
        return Err(bad());
    }
    if hms[0] > 23 || hms[1] > 59 || hms[2] > 60 || hms.iter().any(|v| *v < 0) {
        return Err(bad());
    }
    let zb = zone.as_bytes();
    if zb.len() != 5 || !(zb[0] == b'+' || zb[0] == b'-') || !zb[1..].iter().all(u8::is_ascii_digit)
    {
        return Err(bad());
    }
    let zh: i64 = zone[1..3].parse().map_err(|_| bad())?;
    let zm: i64 = zone[3..5].parse().map_err(|_| bad())?;
    let offset = (zh * 3600 + zm * 60) * if zb[0] == b'-' { -1 } else { 1 };
    // Days from 1970-01-01 (proleptic Gregorian; "days from civil").
    let (y, m) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hms[0] * 3600 + hms[1] * 60 + hms[2] - offset;
    if secs < 0 {
        return Err(bad());
    }
    Ok(secs as f64)
}

/// nginx/Apache `common` or `combined` (`$remote_addr - $remote_user [$time_local]
/// "$request" $status $body_bytes_sent ["$http_referer" "$http_user_agent"]`), optionally
/// followed by `$request_time` and `"$http_range"`. Without `$request_time` the request
/// is taken to have been served at once; without the range column every response is a
/// whole-object (or open-ended) request sized by the bytes sent.
fn parse_clf(line: &str, combined: bool) -> Result<Parsed<'_>, String> {
    let t = nginx_tokens(line)?;
    let fixed = if combined { 10 } else { 8 };
    let name = if combined { "combined" } else { "common" };
    if t.len() < fixed || t.len() > fixed + 2 || !clf_time_at(&t) {
        return Err(format!(
            "expected the {} fields of log_format {name} [$request_time \"$http_range\"], got {}",
            fixed - 1,
            t.len().saturating_sub(1)
        ));
    }
    let done = clf_time(&format!("{} {}", &t[3][1..], &t[4][..t[4].len() - 1]))?;
    let mut req = t[5].split(' ');
    let method = req.next().unwrap_or("");
    let target = req.next().ok_or_else(|| {
        format!(
            "field $request: expected \"METHOD target HTTP/x\", got {:?}",
            truncate(t[5])
        )
    })?;
    let status: u16 = num(t[6], "$status", "an HTTP status")?;
    let body: u64 = if t[7] == "-" {
        0
    } else {
        num(t[7], "$body_bytes_sent", "a byte count")?
    };
    let extra = &t[fixed..];
    let service = match extra.first() {
        Some(s) => time(s, "$request_time")?,
        None => 0.0,
    };
    let range = extra.get(1).copied().unwrap_or("-");
    if method != "GET" {
        return Ok(Parsed::Status);
    }
    let session: std::borrow::Cow<'_, str> = if combined {
        format!("{} {}", t[0], t[9]).into()
    } else {
        t[0].into()
    };
    http_request(done, service, session, target, range, status, body, None)
}

/// The fields of a JSON log line vodkit reads (docs/trace.md); values are strings, as
/// nginx writes them with `escape=json`, or numbers.
#[derive(serde::Deserialize)]
struct JsonLine<'a> {
    #[serde(borrow)]
    msec: Option<JsonValue<'a>>,
    #[serde(borrow)]
    time_local: Option<JsonValue<'a>>,
    #[serde(borrow)]
    remote_addr: JsonValue<'a>,
    #[serde(borrow)]
    request_method: Option<JsonValue<'a>>,
    #[serde(borrow)]
    request_uri: JsonValue<'a>,
    #[serde(borrow)]
    status: JsonValue<'a>,
    #[serde(borrow)]
    body_bytes_sent: JsonValue<'a>,
    #[serde(borrow)]
    request_time: Option<JsonValue<'a>>,
    #[serde(borrow)]
    http_user_agent: Option<JsonValue<'a>>,
    #[serde(borrow)]
    http_range: Option<JsonValue<'a>>,
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum JsonValue<'a> {
    /// A string without escapes, borrowed from the line.
    Text(&'a str),
    /// A string with escapes.
    Owned(String),
    Number(serde_json::Number),
}

impl JsonValue<'_> {
    fn text(&self) -> std::borrow::Cow<'_, str> {
        match self {
            JsonValue::Text(t) => std::borrow::Cow::Borrowed(t),
            JsonValue::Owned(t) => std::borrow::Cow::Borrowed(t.as_str()),
            JsonValue::Number(n) => n.to_string().into(),
        }
    }
}

/// One JSON object per line with the keys `msec` (or `time_local`), `remote_addr`,
/// `request_method`, `request_uri`, `status`, `body_bytes_sent` and optionally
/// `request_time`, `http_user_agent`, `http_range`. A session is client address + user
/// agent, as for `combined`.
fn parse_json(line: &str) -> Result<Parsed<'_>, String> {
    let j: JsonLine<'_> = serde_json::from_str(line).map_err(|e| format!("JSON: {e}"))?;
    let done = match (&j.msec, &j.time_local) {
        (Some(m), _) => time(&m.text(), "msec")?,
        (None, Some(t)) => clf_time(&t.text())?,
        (None, None) => return Err("JSON: expected a msec or time_local key".into()),
    };
    let service = match &j.request_time {
        Some(t) => time(&t.text(), "request_time")?,
        None => 0.0,
    };
    let status: u16 = num(&j.status.text(), "status", "an HTTP status")?;
    let body: u64 = num(&j.body_bytes_sent.text(), "body_bytes_sent", "a byte count")?;
    if j.request_method.as_ref().is_some_and(|m| m.text() != "GET") {
        return Ok(Parsed::Status);
    }
    let range = j.http_range.as_ref().map(|r| r.text().into_owned());
    let ua = j.http_user_agent.as_ref().map(|u| u.text().into_owned());
    let session: std::borrow::Cow<'_, str> =
        format!("{} {}", j.remote_addr.text(), ua.as_deref().unwrap_or("-")).into();
    // The file name borrows from the line, so a URI written with JSON escapes (`\u0026`,
    // `\/`) cannot be used as is.
    let path = match &j.request_uri {
        JsonValue::Text(p) => *p,
        _ => return Err("field request_uri: expected a string without JSON escapes".into()),
    };
    http_request(
        done,
        service,
        session,
        path,
        range.as_deref().unwrap_or("-"),
        status,
        body,
        None,
    )
}

pub(crate) fn detect(first: &str) -> LogFormat {
    if first.starts_with("#vodkit-access-log") {
        LogFormat::Vodkit
    } else if first.trim_start().starts_with('{') {
        LogFormat::Json
    } else if let Some(t) = nginx_tokens(first).ok().filter(|t| clf_time_at(t)) {
        if t.len() >= 10 {
            LogFormat::Combined
        } else {
            LogFormat::Common
        }
    } else if csv_header(first).is_some() {
        LogFormat::Netflix
    } else if first.split('\t').count() >= 12 {
        LogFormat::Vodkit
    } else {
        LogFormat::Nginx
    }
}

/// Parse one line of a line-per-request format.
pub(crate) fn parse_line(line: &str, fmt: LogFormat) -> Result<Parsed<'_>, String> {
    match fmt {
        LogFormat::Nginx => parse_nginx(line),
        LogFormat::Vodkit => parse_vodkit(line),
        LogFormat::Combined => parse_clf(line, true),
        LogFormat::Common => parse_clf(line, false),
        LogFormat::Json => parse_json(line),
        // The CSV is read record by record (`parse_csv`); a line reaching here is one
        // before the header.
        LogFormat::Netflix | LogFormat::Auto => Ok(Parsed::Skip),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Property test: numbers read directly are those `str::parse` reads, and what they do
    /// not read is left to it (digits, points, signs, exponents, spaces, long and short).
    #[test]
    fn numbers_read_directly_are_those_str_parse_reads() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut rnd = move || vodkit_testkit::xorshift(&mut x) as usize;
        let alphabet = b"0123456789012345678901234567890123456789..+-e x";
        let mut direct = 0;
        for _ in 0..200_000 {
            let len = rnd() % 24;
            let s: String = (0..len)
                .map(|_| alphabet[rnd() % alphabet.len()] as char)
                .collect();
            if let Some(v) = plain_decimal(&s) {
                direct += 1;
                assert_eq!(Ok(v), s.parse::<f64>(), "{s:?}");
            }
            assert_eq!(count(&s, "f", "n").ok(), s.parse::<u64>().ok(), "{s:?}");
            assert_eq!(
                time(&s, "f").ok(),
                s.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0),
                "{s:?}"
            );
        }
        assert!(direct > 1000, "only {direct} strings read directly");
        for s in [
            "0.1",
            "0.3",
            "1700000000.123",
            "123456789012345",
            "99999999999999.9",
        ] {
            assert_eq!(plain_decimal(s), s.parse().ok(), "{s}");
        }
    }
}
