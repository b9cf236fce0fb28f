//! Byte ranges (RFC 9110 §14): parsing the `Range` header, resolving it against a file
//! length, and the normalized text the access log records.

use std::fmt::Write as _;

/// One range as the client wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeSpec {
    /// `first-last`, both inclusive.
    Closed(u64, u64),
    /// `first-` (open-ended).
    From(u64),
    /// `-n`: the last n bytes.
    Suffix(u64),
}

/// A resolved range: inclusive first and last byte offsets inside the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    pub first: u64,
    pub last: u64,
}

impl ByteRange {
    pub fn len(&self) -> u64 {
        self.last - self.first + 1
    }

    pub fn is_empty(&self) -> bool {
        false
    }
}

/// What a `Range` header means for a file of a given length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// Send the whole file with 200.
    Full,
    /// Send these ranges with 206 (one part, or multipart/byteranges).
    Partial(Vec<ByteRange>),
    /// 416 with `Content-Range: bytes */len`.
    Unsatisfiable,
}

/// Parse a `Range` header value. `None` means the header must be ignored (unknown unit or
/// bad syntax), which RFC 9110 allows a server to do by sending the whole representation.
pub fn parse_range(value: &str) -> Option<Vec<RangeSpec>> {
    let (unit, set) = value.split_once('=')?;
    if !unit.trim().eq_ignore_ascii_case("bytes") {
        return None;
    }
    let mut specs = Vec::new();
    for item in set.split(',') {
        let item = item.trim_matches([' ', '\t']);
        if item.is_empty() {
            continue; // the list grammar tolerates empty elements
        }
        specs.push(parse_one(item)?);
    }
    if specs.is_empty() {
        None
    } else {
        Some(specs)
    }
}

fn parse_one(item: &str) -> Option<RangeSpec> {
    let (first, last) = item.split_once('-')?;
    if first.is_empty() {
        return Some(RangeSpec::Suffix(digits(last)?));
    }
    let first = digits(first)?;
    if last.is_empty() {
        return Some(RangeSpec::From(first));
    }
    let last = digits(last)?;
    if last < first {
        return None;
    }
    Some(RangeSpec::Closed(first, last))
}

fn digits(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Values beyond u64 are still satisfiable-or-not in a well-defined way: saturate.
    Some(text.parse::<u64>().unwrap_or(u64::MAX))
}

/// Resolve parsed ranges against a file length. More than `max_ranges` ranges, or ranges
/// whose total exceeds twice the file length, are ignored (200), which RFC 9110 permits and
/// which keeps overlapping-range requests from multiplying the response size.
pub fn resolve(specs: &[RangeSpec], len: u64, max_ranges: usize) -> Resolved {
    if specs.len() > max_ranges {
        return Resolved::Full;
    }
    if len == 0 {
        let any_suffix = specs
            .iter()
            .any(|s| matches!(s, RangeSpec::Suffix(n) if *n > 0));
        return if any_suffix {
            Resolved::Full
        } else {
            Resolved::Unsatisfiable
        };
    }
    let ranges: Vec<ByteRange> = specs.iter().filter_map(|s| resolve_one(*s, len)).collect();
    if ranges.is_empty() {
        return Resolved::Unsatisfiable;
    }
    let total: u128 = ranges.iter().map(|r| r.len() as u128).sum();
    if total > 2 * len as u128 {
        return Resolved::Full;
    }
    Resolved::Partial(ranges)
}

fn resolve_one(spec: RangeSpec, len: u64) -> Option<ByteRange> {
    match spec {
        RangeSpec::Closed(first, last) if first < len => Some(ByteRange {
            first,
            last: last.min(len - 1),
        }),
        RangeSpec::From(first) if first < len => Some(ByteRange {
            first,
            last: len - 1,
        }),
        RangeSpec::Suffix(n) if n > 0 => Some(ByteRange {
            first: len.saturating_sub(n),
            last: len - 1,
        }),
        _ => None,
    }
}

/// The requested ranges in a canonical form for the access log: `a-b`, `a-` or `-n`,
/// comma-separated; `-` when no (valid) Range header was sent.
pub fn log_text(specs: Option<&[RangeSpec]>) -> String {
    let Some(specs) = specs else {
        return "-".to_string();
    };
    let mut out = String::new();
    for (i, s) in specs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = match s {
            RangeSpec::Closed(a, b) => write!(out, "{a}-{b}"),
            RangeSpec::From(a) => write!(out, "{a}-"),
            RangeSpec::Suffix(n) => write!(out, "-{n}"),
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn br(first: u64, last: u64) -> ByteRange {
        ByteRange { first, last }
    }

    #[test]
    fn parses_the_three_forms_and_lists() {
        assert_eq!(
            parse_range("bytes=0-9, 20- ,-5"),
            Some(vec![
                RangeSpec::Closed(0, 9),
                RangeSpec::From(20),
                RangeSpec::Suffix(5)
            ])
        );
        assert_eq!(
            parse_range("BYTES=1-1"),
            Some(vec![RangeSpec::Closed(1, 1)])
        );
    }

    #[test]
    fn bad_syntax_is_ignored() {
        for bad in [
            "bytes=5-4",
            "bytes=",
            "items=0-1",
            "bytes=a-b",
            "bytes=-",
            "bytes=1-2-3",
            "0-1",
        ] {
            assert_eq!(parse_range(bad), None, "{bad}");
        }
    }

    #[test]
    fn resolves_against_length() {
        let r = |v: &str| resolve(&parse_range(v).unwrap(), 100, 16);
        assert_eq!(r("bytes=0-9"), Resolved::Partial(vec![br(0, 9)]));
        assert_eq!(r("bytes=90-200"), Resolved::Partial(vec![br(90, 99)]));
        assert_eq!(r("bytes=95-"), Resolved::Partial(vec![br(95, 99)]));
        assert_eq!(r("bytes=-10"), Resolved::Partial(vec![br(90, 99)]));
        assert_eq!(r("bytes=-1000"), Resolved::Partial(vec![br(0, 99)]));
        assert_eq!(r("bytes=100-"), Resolved::Unsatisfiable);
        assert_eq!(r("bytes=-0"), Resolved::Unsatisfiable);
        assert_eq!(r("bytes=200-300,0-0"), Resolved::Partial(vec![br(0, 0)]));
        assert_eq!(r("bytes=0-99,0-99,0-99"), Resolved::Full);
        assert_eq!(r("bytes=99999999999999999999999-"), Resolved::Unsatisfiable);
    }

    #[test]
    fn too_many_ranges_fall_back_to_full() {
        let specs: Vec<RangeSpec> = (0..20).map(|i| RangeSpec::Closed(i, i)).collect();
        assert_eq!(resolve(&specs, 100, 16), Resolved::Full);
    }

    #[test]
    fn empty_file() {
        assert_eq!(
            resolve(&[RangeSpec::From(0)], 0, 16),
            Resolved::Unsatisfiable
        );
        assert_eq!(resolve(&[RangeSpec::Suffix(3)], 0, 16), Resolved::Full);
    }

    #[test]
    fn log_text_is_canonical() {
        let specs = parse_range("bytes= 0-9 ,20-,-5").unwrap();
        assert_eq!(log_text(Some(&specs)), "0-9,20-,-5");
        assert_eq!(log_text(None), "-");
    }
}
