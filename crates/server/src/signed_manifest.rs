//! Carrying a URL signature from a manifest to everything it names (`--secure-link`): the
//! URIs of an HLS playlist (segments, variant playlists, and every `URI="…"` attribute such
//! as `EXT-X-MAP` and `EXT-X-MEDIA`) and of a DASH MPD (`BaseURL`, `SegmentTemplate`,
//! `SegmentURL`, `Initialization`, `RepresentationIndex`) get the same expiry and a
//! signature valid for the URI they resolve to.
//!
//! A `SegmentTemplate` with `$…$` identifiers names URIs not known until the player expands
//! it: it gets a scoped HMAC token for the directory its static part resolves to. References
//! with a scheme (`https://cdn/…`, `data:`, `skd:`) or a host (`//cdn/…`) point elsewhere and
//! are left as they are, as are those whose query already carries a signature.

use vodkit_securelink::{append_query, normalize_path, query_has_signature, Grant, Secret};

/// The manifest formats rewritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Hls,
    Dash,
}

impl Kind {
    /// The kind of a file by its name (`.m3u8`, `.mpd`; case-insensitive).
    pub fn of(path: &str) -> Option<Kind> {
        let ext = path.rsplit_once('.')?.1;
        if ext.eq_ignore_ascii_case("m3u8") {
            Some(Kind::Hls)
        } else if ext.eq_ignore_ascii_case("mpd") {
            Some(Kind::Dash)
        } else {
            None
        }
    }
}

/// What a rewrite signs with: the secret and the grant of the manifest's own request.
pub struct Signing<'a> {
    pub secret: &'a Secret,
    pub grant: &'a Grant,
}

/// `text`, the manifest at `uri` (its normalized path), with every reference signed.
pub fn rewrite(kind: Kind, text: &str, uri: &str, s: &Signing<'_>) -> String {
    match kind {
        Kind::Hls => rewrite_hls(text, uri, s),
        Kind::Dash => rewrite_dash(text, uri, s),
    }
}

/// Where a reference leads, when it stays on this origin: its normalized path.
fn local_target(base: &str, reference: &str) -> Option<String> {
    let reference = reference.trim();
    if reference.starts_with("//") || has_scheme(reference) {
        return None;
    }
    let end = reference.find(['?', '#']).unwrap_or(reference.len());
    if let Some(q) = reference
        .get(end + 1..)
        .filter(|_| reference[end..].starts_with('?'))
    {
        if query_has_signature(q.split('#').next().unwrap_or(q)) {
            return None;
        }
    }
    let path = &reference[..end];
    if path.starts_with('/') {
        return Some(normalize_path(path));
    }
    let dir = match base.rfind('/') {
        Some(i) => &base[..=i],
        None => "/",
    };
    if path.is_empty() {
        return Some(normalize_path(base));
    }
    Some(normalize_path(&format!("{dir}{path}")))
}

/// Whether `r` starts with a URI scheme (`http:`, `data:`, `skd:`).
fn has_scheme(r: &str) -> bool {
    match r.find(':') {
        Some(i) if i > 0 => {
            let scheme = &r[..i];
            scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        }
        _ => false,
    }
}

/// `reference` (resolved against `base`) with its signature added; `None` to leave it.
fn signed_ref(base: &str, reference: &str, s: &Signing<'_>) -> Option<String> {
    let target = local_target(base, reference)?;
    Some(append_query(
        reference,
        &s.grant.params_for(s.secret, &target),
    ))
}

fn rewrite_hls(text: &str, uri: &str, s: &Signing<'_>) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches(['\n', '\r']);
        let ending = &line[body.len()..];
        if body.starts_with('#') {
            out.push_str(&rewrite_uri_attributes(body, uri, s));
        } else if body.trim().is_empty() {
            out.push_str(body);
        } else {
            match signed_ref(uri, body, s) {
                Some(signed) => out.push_str(&signed),
                None => out.push_str(body),
            }
        }
        out.push_str(ending);
    }
    out
}

/// A tag line with each `URI="…"` attribute signed.
fn rewrite_uri_attributes(tag: &str, base: &str, s: &Signing<'_>) -> String {
    const KEY: &str = "URI=\"";
    let mut out = String::with_capacity(tag.len());
    let mut rest = tag;
    while let Some(i) = rest.find(KEY) {
        // Only an attribute name: at the tag's start of attributes or after a comma.
        let before = rest[..i].chars().last();
        let start = i + KEY.len();
        let Some(len) = rest[start..].find('"') else {
            break;
        };
        out.push_str(&rest[..start]);
        let value = &rest[start..start + len];
        match signed_ref(base, value, s).filter(|_| matches!(before, Some(':') | Some(','))) {
            Some(signed) => out.push_str(&signed),
            None => out.push_str(value),
        }
        rest = &rest[start + len..];
    }
    out.push_str(rest);
    out
}

/// The attributes holding URIs, by element.
fn uri_attributes(element: &str) -> &'static [&'static str] {
    match element {
        "SegmentTemplate" => &["media", "initialization", "index", "bitstreamSwitching"],
        "SegmentURL" => &["media", "index"],
        "Initialization" | "RepresentationIndex" | "BitstreamSwitching" => &["sourceURL"],
        _ => &[],
    }
}

/// The local part of an element name (`mpd:BaseURL` → `BaseURL`).
fn local_name(name: &str) -> &str {
    name.rsplit(':').next().unwrap_or(name)
}

fn rewrite_dash(text: &str, uri: &str, s: &Signing<'_>) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    // The base URI of each open element (`None`: another origin, left alone).
    let mut bases: Vec<Option<String>> = vec![Some(uri.to_string())];
    let mut rest = text;
    while let Some(lt) = rest.find('<') {
        let (before, from) = rest.split_at(lt);
        out.push_str(before);
        let (skip, end) = if from.starts_with("<!--") {
            (true, from.find("-->").map(|i| i + 3))
        } else if from.starts_with("<![CDATA[") {
            (true, from.find("]]>").map(|i| i + 3))
        } else if from.starts_with("<?") || from.starts_with("<!") {
            (true, from.find('>').map(|i| i + 1))
        } else {
            (false, tag_end(from))
        };
        let Some(end) = end else {
            out.push_str(from);
            return out;
        };
        let tag = &from[..end];
        rest = &from[end..];
        if skip {
            out.push_str(tag);
            continue;
        }
        if tag.starts_with("</") {
            if bases.len() > 1 {
                bases.pop();
            }
            out.push_str(tag);
            continue;
        }
        let self_closing = tag.ends_with("/>");
        let name_end = tag[1..]
            .find(|c: char| c.is_whitespace() || c == '/' || c == '>')
            .map_or(tag.len(), |i| i + 1);
        let name = local_name(&tag[1..name_end]);
        let base = bases.last().cloned().flatten();
        match &base {
            Some(b) => out.push_str(&rewrite_attributes(tag, uri_attributes(name), b, s)),
            None => out.push_str(tag),
        }
        if self_closing {
            continue;
        }
        if name == "BaseURL" {
            // Its text: signed when it names a file, and the base of its parent's subtree.
            let close = rest.find("</").unwrap_or(rest.len());
            let raw = &rest[..close];
            let value = unescape(raw.trim());
            let (resolved, signed) = match &base {
                Some(b) if !value.contains('$') => {
                    let signed = (!value.ends_with('/'))
                        .then(|| signed_ref(b, &value, s))
                        .flatten();
                    (local_target(b, &value).map(|t| keep_dir(t, &value)), signed)
                }
                _ => (None, None),
            };
            match signed {
                Some(v) => out.push_str(&escape(&v)),
                None => out.push_str(raw),
            }
            rest = &rest[close..];
            // The BaseURL element itself is open: its parent is one below.
            let parent = bases.len() - 1;
            if let Some(slot) = bases.get_mut(parent) {
                *slot = resolved;
            }
            bases.push(None);
            continue;
        }
        bases.push(base);
    }
    out.push_str(rest);
    out
}

/// A resolved base keeps the trailing slash its reference had (a directory).
fn keep_dir(mut target: String, reference: &str) -> String {
    let path = reference.split(['?', '#']).next().unwrap_or(reference);
    if path.ends_with('/') && !target.ends_with('/') {
        target.push('/');
    }
    target
}

/// The end (exclusive) of the tag starting `from`, quotes respected.
fn tag_end(from: &str) -> Option<usize> {
    let mut quote = None;
    for (i, c) in from.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '>') => return Some(i + 1),
            _ => {}
        }
    }
    None
}

/// `tag` with its attributes in `names` signed (templates get a scope token).
fn rewrite_attributes(tag: &str, names: &[&str], base: &str, s: &Signing<'_>) -> String {
    if names.is_empty() {
        return tag.to_string();
    }
    let mut out = String::with_capacity(tag.len() * 2);
    let mut rest = tag;
    loop {
        // The next `name="` or `name='` among `names`, preceded by whitespace.
        let next = names
            .iter()
            .filter_map(|n| find_attribute(rest, n))
            .min_by_key(|&(at, _, _)| at);
        let Some((_, value_start, quote)) = next else {
            break;
        };
        let Some(len) = rest[value_start..].find(quote) else {
            break;
        };
        out.push_str(&rest[..value_start]);
        let raw = &rest[value_start..value_start + len];
        let value = unescape(raw);
        match sign_attribute(&value, base, s) {
            Some(v) => out.push_str(&escape(&v)),
            None => out.push_str(raw),
        }
        rest = &rest[value_start + len..];
    }
    out.push_str(rest);
    out
}

/// Where attribute `name`'s value starts in `tag`: (name offset, value offset, quote).
fn find_attribute(tag: &str, name: &str) -> Option<(usize, usize, char)> {
    let mut from = 0;
    while let Some(i) = tag[from..].find(name) {
        let at = from + i;
        let after = &tag[at + name.len()..];
        let preceded = tag[..at].ends_with(|c: char| c.is_whitespace());
        let trimmed = after.trim_start();
        if preceded {
            if let Some(v) = trimmed.strip_prefix('=') {
                let v = v.trim_start();
                if let Some(q) = v.chars().next().filter(|c| matches!(c, '"' | '\'')) {
                    let value_start = tag.len() - v.len() + 1;
                    return Some((at, value_start, q));
                }
            }
        }
        from = at + name.len();
    }
    None
}

/// An attribute value signed: a template (with `$…$`) gets a scope token for the
/// directory its static part resolves to, a plain URI its own signature.
fn sign_attribute(value: &str, base: &str, s: &Signing<'_>) -> Option<String> {
    if !value.contains('$') {
        return signed_ref(base, value, s);
    }
    let target = local_target(base, value)?;
    let fixed = &target[..target.find('$').unwrap_or(target.len())];
    let scope = &fixed[..fixed.rfind('/').map_or(1, |i| i + 1)];
    Some(append_query(value, &s.grant.scope_params(s.secret, scope)))
}

fn unescape(text: &str) -> String {
    if !text.contains('&') {
        return text.to_string();
    }
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('"', "&quot;")
}
