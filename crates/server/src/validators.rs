//! Validators and preconditions (RFC 9110 §8.8, §13): strong ETags, Last-Modified, and
//! the evaluation of If-Match, If-Unmodified-Since, If-None-Match, If-Modified-Since
//! and If-Range.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The validators of one file version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validators {
    /// Strong entity tag including the quotes, e.g. `"1a2b-5f00-3e8"`.
    pub etag: String,
    /// Modification time truncated to whole seconds (HTTP dates have no fractions).
    pub last_modified: SystemTime,
}

impl Validators {
    /// Build validators from what replicas of a file share, its size and modification
    /// time in whole seconds, in nginx's form (`"<mtime hex>-<size hex>"`): a byte-identical
    /// copy with the same mtime on another origin (or an nginx serving it) has the same tag,
    /// so a cache revalidating against either gets its 304 and a resume its 206.
    pub fn from_metadata(size: u64, mtime_sec: i64) -> Self {
        let secs = mtime_sec.max(0) as u64;
        Validators {
            etag: format!("\"{secs:x}-{size:x}\""),
            last_modified: UNIX_EPOCH + Duration::from_secs(secs),
        }
    }

    pub fn last_modified_text(&self) -> String {
        self.last_modified_http().to_string()
    }

    /// `Last-Modified` as an HTTP date, to write without an allocation of its own.
    pub fn last_modified_http(&self) -> httpdate::HttpDate {
        httpdate::HttpDate::from(self.last_modified)
    }
}

/// The conditional request headers, as received.
#[derive(Debug, Default, Clone, Copy)]
pub struct Conditions<'a> {
    pub if_match: Option<&'a str>,
    pub if_unmodified_since: Option<&'a str>,
    pub if_none_match: Option<&'a str>,
    pub if_modified_since: Option<&'a str>,
}

/// What the preconditions decided for a GET or HEAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precondition {
    Proceed,
    NotModified,
    Failed,
}

/// Evaluate preconditions in the order RFC 9110 §13.2.2 prescribes for GET/HEAD.
pub fn evaluate(cond: &Conditions<'_>, v: &Validators) -> Precondition {
    if let Some(list) = cond.if_match {
        if !list_matches(list, &v.etag, true) {
            return Precondition::Failed;
        }
    } else if let Some(date) = cond.if_unmodified_since.and_then(parse_date) {
        if v.last_modified > date {
            return Precondition::Failed;
        }
    }
    if let Some(list) = cond.if_none_match {
        if list_matches(list, &v.etag, false) {
            return Precondition::NotModified;
        }
    } else if let Some(date) = cond.if_modified_since.and_then(parse_date) {
        if v.last_modified <= date {
            return Precondition::NotModified;
        }
    }
    Precondition::Proceed
}

/// Whether an `If-Range` value lets the Range header apply: a strong ETag must match
/// exactly, a date must equal Last-Modified; anything else (weak tag, bad date) fails.
pub fn if_range_holds(value: &str, v: &Validators) -> bool {
    let value = value.trim();
    if value.starts_with('"') {
        return value == v.etag;
    }
    if value.starts_with("W/") {
        return false;
    }
    parse_date(value) == Some(v.last_modified)
}

fn parse_date(text: &str) -> Option<SystemTime> {
    httpdate::parse_http_date(text.trim()).ok()
}

/// Match an entity-tag list (`*` or comma-separated tags) against our strong tag, using
/// strong or weak comparison.
fn list_matches(list: &str, etag: &str, strong: bool) -> bool {
    let list = list.trim();
    if list == "*" {
        return true;
    }
    list.split(',').map(str::trim).any(|tag| {
        if let Some(weak) = tag.strip_prefix("W/") {
            !strong && weak == etag
        } else {
            tag == etag
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v() -> Validators {
        Validators::from_metadata(100, 1_700_000_000)
    }

    #[test]
    fn etag_is_strong_and_depends_on_size_and_mtime_only() {
        let a = v();
        assert!(a.etag.starts_with('"') && a.etag.ends_with('"'));
        assert_ne!(a.etag, Validators::from_metadata(100, 1_700_000_001).etag);
        assert_ne!(a.etag, Validators::from_metadata(101, 1_700_000_000).etag);
        assert_eq!(a.last_modified_text(), "Tue, 14 Nov 2023 22:13:20 GMT");
        assert_eq!(
            a.last_modified_http().to_string(),
            "Tue, 14 Nov 2023 22:13:20 GMT"
        );
        // What nginx sends for the same file.
        assert_eq!(a.etag, "\"6553f100-64\"");
    }

    #[test]
    fn if_none_match_uses_weak_comparison() {
        let v = v();
        let weak = format!("W/{}", v.etag);
        fn cond(inm: &str) -> Conditions<'_> {
            Conditions {
                if_none_match: Some(inm),
                ..Default::default()
            }
        }
        assert_eq!(
            evaluate(&cond(&v.etag.clone()), &v),
            Precondition::NotModified
        );
        assert_eq!(evaluate(&cond(&weak), &v), Precondition::NotModified);
        assert_eq!(evaluate(&cond("\"x\", *"), &v), Precondition::Proceed);
        assert_eq!(evaluate(&cond("*"), &v), Precondition::NotModified);
        assert_eq!(evaluate(&cond("\"x\""), &v), Precondition::Proceed);
    }

    /// Conditions with only what `set` fills in.
    fn with<'a>(set: impl FnOnce(&mut Conditions<'a>)) -> Conditions<'a> {
        let mut c = Conditions::default();
        set(&mut c);
        c
    }

    #[test]
    fn if_modified_since_ignored_when_if_none_match_present() {
        let v = v();
        let later = "Wed, 15 Nov 2023 00:00:00 GMT";
        let earlier = "Mon, 13 Nov 2023 00:00:00 GMT";
        let later_but_other_tag = with(|c| {
            c.if_modified_since = Some(later);
            c.if_none_match = Some("\"x\"");
        });
        for (c, want) in [
            (
                with(|c| c.if_modified_since = Some(later)),
                Precondition::NotModified,
            ),
            (later_but_other_tag, Precondition::Proceed),
            (
                with(|c| c.if_modified_since = Some(earlier)),
                Precondition::Proceed,
            ),
            (
                with(|c| c.if_modified_since = Some("garbage")),
                Precondition::Proceed,
            ),
        ] {
            assert_eq!(evaluate(&c, &v), want, "{c:?}");
        }
    }

    #[test]
    fn if_match_needs_strong_match() {
        let v = v();
        let weak = format!("W/{}", v.etag);
        let earlier = "Mon, 13 Nov 2023 00:00:00 GMT";
        for (c, want) in [
            (with(|c| c.if_match = Some(&weak)), Precondition::Failed),
            (with(|c| c.if_match = Some(&v.etag)), Precondition::Proceed),
            (
                with(|c| c.if_unmodified_since = Some(earlier)),
                Precondition::Failed,
            ),
        ] {
            assert_eq!(evaluate(&c, &v), want, "{c:?}");
        }
    }

    #[test]
    fn if_range_forms() {
        let v = v();
        assert!(if_range_holds(&v.etag, &v));
        assert!(!if_range_holds(&format!("W/{}", v.etag), &v));
        assert!(!if_range_holds("\"other\"", &v));
        assert!(if_range_holds(&v.last_modified_text(), &v));
        assert!(!if_range_holds("Mon, 13 Nov 2023 00:00:00 GMT", &v));
        assert!(!if_range_holds("nonsense", &v));
    }
}
