//! Expiring signed URLs, signed (by `vodkit load`, the manifest rewriter) and verified (by
//! `vodkit serve`) by this one implementation, in two forms that share one secret.
//!
//! # Forms
//!
//! | form | query | signed message | signature |
//! | --- | --- | --- | --- |
//! | [`Form::Md5`] (nginx) | `?md5=S&expires=E` | `E` `URI` ` ` `SECRET` | MD5, base64url, no padding |
//! | [`Form::Hmac`] exact | `?hmac=S&expires=E` | `E` `URI` | HMAC-SHA-256 keyed by the secret, base64url |
//! | [`Form::Hmac`] scoped | `?hmac=S&expires=E&scope=P` | `E` `scope=` `P` | HMAC-SHA-256, base64url |
//!
//! The MD5 form is exactly nginx's `secure_link $arg_md5,$arg_expires; secure_link_md5
//! "$secure_link_expires$uri SECRET";` (note the space before the secret), so a URL signed
//! for nginx is accepted here and back. `URI` is the request's path, percent-decoded and
//! without dot segments or repeated slashes (nginx's `$uri`), never its query. `E` is the
//! expiry in Unix seconds, signed as written in the query.
//!
//! A scoped token is valid for every path that starts with `P` (a path ending in `/`): the
//! manifest rewriter gives one to a DASH `SegmentTemplate`, whose `$Number$` URIs are not
//! known when the manifest is served. Its message starts `E` `scope=`, which no exact
//! message does (a URI starts with `/`), so an exact signature never passes for a scope.
//!
//! # Checking
//!
//! [`verify`] checks the signature first and the expiry second, as nginx does: a forged
//! URL is [`Verdict::Bad`] whatever its expiry, a genuine one past its expiry is
//! [`Verdict::Expired`]. A URL is valid up to and including its expiry second, against the
//! verifier's clock with no grace period. Signatures are compared in constant time.

use std::fmt;
use std::path::{Path, PathBuf};

use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine as _;
use hmac::{Hmac, Mac};
use md5::{Digest, Md5};
use sha2::Sha256;
use strum::{Display, EnumString, VariantNames};
use subtle::ConstantTimeEq;

/// base64url without padding when written; with or without it when read (nginx accepts both).
const B64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Which signature a URL carries.
///
/// Its name in flags (parsed and displayed) is `md5` or `hmac`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Display, EnumString, VariantNames)]
#[strum(serialize_all = "lowercase", parse_err_ty = String, parse_err_fn = unknown_form)]
pub enum Form {
    /// nginx `secure_link_md5`: `?md5=…&expires=…`.
    #[default]
    Md5,
    /// HMAC-SHA-256: `?hmac=…&expires=…[&scope=…]`.
    Hmac,
}

fn unknown_form(s: &str) -> String {
    vodkit_units::unknown_choice("signature form", s, Form::VARIANTS)
}

/// The shared secret: the one line of a secret file.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

/// A secret file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretError {
    pub path: PathBuf,
    pub why: String,
}

impl fmt::Display for SecretError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.why)
    }
}

impl std::error::Error for SecretError {}

impl Secret {
    /// A secret from its bytes; `None` when empty or holding a line break.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Option<Secret> {
        let bytes = bytes.into();
        (!bytes.is_empty() && !bytes.contains(&b'\n') && !bytes.contains(&b'\r'))
            .then_some(Secret(bytes))
    }

    /// Read a secret file: one line, its line ending (`\n` or `\r\n`) stripped.
    pub fn from_file(path: &Path) -> Result<Secret, SecretError> {
        let err = |why: String| SecretError {
            path: path.to_path_buf(),
            why,
        };
        let mut text = std::fs::read(path).map_err(|e| err(format!("cannot read: {e}")))?;
        if text.ends_with(b"\n") {
            text.pop();
            if text.ends_with(b"\r") {
                text.pop();
            }
        }
        if text.is_empty() {
            return Err(err("empty: expected one line holding the secret".into()));
        }
        Secret::new(text)
            .ok_or_else(|| err("expected one line holding the secret, found several".into()))
    }

    /// The secret's bytes (for writing a peer's configuration).
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// The base64url MD5 signature of `uri` until `expires`, exactly as nginx computes it.
pub fn md5_signature(secret: &Secret, uri: &str, expires: &str) -> String {
    B64.encode(md5_digest(secret, uri, expires))
}

fn md5_digest(secret: &Secret, uri: &str, expires: &str) -> [u8; 16] {
    let mut h = Md5::new();
    h.update(expires.as_bytes());
    h.update(uri.as_bytes());
    h.update(b" ");
    h.update(&secret.0);
    h.finalize().into()
}

fn hmac_of(secret: &Secret, parts: &[&[u8]]) -> Hmac<Sha256> {
    // HMAC takes keys of any length: new_from_slice cannot fail for it.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&secret.0)
        .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
    for p in parts {
        mac.update(p);
    }
    mac
}

/// The message of a scoped HMAC token.
const SCOPE_TAG: &[u8] = b"scope=";

/// The base64url HMAC-SHA-256 signature of `uri` until `expires`.
pub fn hmac_signature(secret: &Secret, uri: &str, expires: &str) -> String {
    let mac = hmac_of(secret, &[expires.as_bytes(), uri.as_bytes()]);
    B64.encode(mac.finalize().into_bytes())
}

/// The base64url HMAC-SHA-256 signature of every path under `scope` until `expires`.
pub fn scope_signature(secret: &Secret, scope: &str, expires: &str) -> String {
    let mac = hmac_of(secret, &[expires.as_bytes(), SCOPE_TAG, scope.as_bytes()]);
    B64.encode(mac.finalize().into_bytes())
}

/// The query parameters that sign `uri` until `expires` in `form`
/// (`md5=…&expires=…` or `hmac=…&expires=…`).
pub fn sign(secret: &Secret, form: Form, uri: &str, expires: u64) -> String {
    let e = expires.to_string();
    match form {
        Form::Md5 => format!("md5={}&expires={e}", md5_signature(secret, uri, &e)),
        Form::Hmac => format!("hmac={}&expires={e}", hmac_signature(secret, uri, &e)),
    }
}

/// The query parameters that sign every path under `scope` (a path ending in `/`) until
/// `expires`: `hmac=…&expires=…&scope=…` (the scope percent-encoded where a query needs it).
pub fn sign_scope(secret: &Secret, scope: &str, expires: u64) -> String {
    let e = expires.to_string();
    format!(
        "hmac={}&expires={e}&scope={}",
        scope_signature(secret, scope, &e),
        encode_query_value(scope)
    )
}

/// `url` with `params` added to its query (before any fragment).
pub fn append_query(url: &str, params: &str) -> String {
    let (head, fragment) = match url.find('#') {
        Some(i) => (&url[..i], &url[i..]),
        None => (url, ""),
    };
    let sep = if !head.contains('?') {
        "?"
    } else if head.ends_with('?') || head.ends_with('&') {
        ""
    } else {
        "&"
    };
    format!("{head}{sep}{params}{fragment}")
}

/// Signs URLs for a client: one secret, one form, one lifetime.
#[derive(Debug, Clone)]
pub struct Signer {
    pub secret: Secret,
    pub form: Form,
    /// Seconds from signing to expiry.
    pub ttl_s: u64,
}

impl Signer {
    /// `target` (a path with an optional query) signed to expire `ttl_s` after `now_s`:
    /// the signature covers its path and is added to its query. A target whose query already
    /// carries a signature (a URL from a signed manifest) is returned as it is.
    pub fn sign_target(&self, target: &str, now_s: u64) -> String {
        let (path, query) = split_target(target);
        if query.is_some_and(query_has_signature) {
            return target.to_string();
        }
        let uri = normalize_path(path);
        append_query(
            target,
            &sign(&self.secret, self.form, &uri, now_s + self.ttl_s),
        )
    }
}

/// The current Unix time in seconds.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `target`'s path and query (without the fragment).
fn split_target(target: &str) -> (&str, Option<&str>) {
    let target = target.split('#').next().unwrap_or(target);
    match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    }
}

/// Whether a query (the part after `?`) carries a signature (`md5=` or `hmac=`).
pub fn query_has_signature(query: &str) -> bool {
    query
        .split('&')
        .any(|kv| kv.starts_with("md5=") || kv.starts_with("hmac="))
}

/// A signed URL's parameters as read from its query.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Token<'q> {
    form: Form,
    signature: &'q str,
    expires: &'q str,
    scope: Option<String>,
}

/// The parameters of `query` (the part after `?`); `None` when no signature is there.
fn token(query: &str) -> Option<Token<'_>> {
    let (mut md5, mut hmac, mut expires, mut scope) = (None, None, None, None);
    for kv in query.split('&') {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        // The first of a repeated name, as nginx's $arg_ takes it.
        let slot = match k {
            "md5" => &mut md5,
            "hmac" => &mut hmac,
            "expires" => &mut expires,
            "scope" => &mut scope,
            _ => continue,
        };
        if slot.is_none() {
            *slot = Some(v);
        }
    }
    let (form, signature) = match (hmac, md5) {
        (Some(s), _) => (Form::Hmac, s),
        (None, Some(s)) => (Form::Md5, s),
        (None, None) => return None,
    };
    Some(Token {
        form,
        signature,
        expires: expires.unwrap_or(""),
        scope: scope.map(percent_decode),
    })
}

/// What a granted request may do next: the manifest rewriter signs the URLs inside a
/// manifest with the same expiry (and reuses a scoped token whose scope covers them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub form: Form,
    pub expires: u64,
    /// The scope of a scoped token, and its query parameters as they came.
    pub scope: Option<(String, String)>,
}

/// The outcome of checking a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Valid(Grant),
    /// No signature in the query: 403.
    Missing,
    /// A signature that does not match, a malformed expiry or a path outside its scope: 403.
    Bad,
    /// A genuine signature past its expiry: 410.
    Expired,
}

impl Verdict {
    /// The HTTP status a refused request gets (403 or 410); `None` when valid.
    pub fn refusal_status(&self) -> Option<u16> {
        match self {
            Verdict::Valid(_) => None,
            Verdict::Missing | Verdict::Bad => Some(403),
            Verdict::Expired => Some(410),
        }
    }
}

/// Check that `query` (the request's query, without `?`) signs `uri` (its decoded,
/// normalized path) at Unix time `now_s`.
pub fn verify(secret: &Secret, query: &str, uri: &str, now_s: u64) -> Verdict {
    let Some(t) = token(query) else {
        return Verdict::Missing;
    };
    let Some(expires) = parse_expires(t.expires) else {
        return Verdict::Bad;
    };
    let Ok(given) = B64.decode(t.signature) else {
        return Verdict::Bad;
    };
    let genuine = match (t.form, &t.scope) {
        (Form::Md5, _) => bool::from(given.ct_eq(&md5_digest(secret, uri, t.expires))),
        (Form::Hmac, None) => hmac_of(secret, &[t.expires.as_bytes(), uri.as_bytes()])
            .verify_slice(&given)
            .is_ok(),
        (Form::Hmac, Some(scope)) => {
            within(uri, scope)
                && hmac_of(secret, &[t.expires.as_bytes(), SCOPE_TAG, scope.as_bytes()])
                    .verify_slice(&given)
                    .is_ok()
        }
    };
    if !genuine {
        return Verdict::Bad;
    }
    if expires < now_s {
        return Verdict::Expired;
    }
    let scope = match (t.form, t.scope) {
        (Form::Hmac, Some(scope)) => Some((scope, query_params(query))),
        _ => None,
    };
    Verdict::Valid(Grant {
        form: t.form,
        expires,
        scope,
    })
}

/// The signature parameters of `query` (`hmac`, `expires`, `scope`) in their order.
fn query_params(query: &str) -> String {
    query
        .split('&')
        .filter(|kv| {
            let k = kv.split('=').next().unwrap_or("");
            matches!(k, "hmac" | "expires" | "scope")
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// Whether `uri` lies under `scope` (a path that starts and ends with `/`).
fn within(uri: &str, scope: &str) -> bool {
    scope.starts_with('/') && scope.ends_with('/') && uri.starts_with(scope)
}

/// An expiry: decimal Unix seconds above zero.
fn parse_expires(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<u64>().ok().filter(|&e| e > 0)
}

impl Grant {
    /// The query parameters that give `uri` the same expiry: the scoped token itself when
    /// its scope covers `uri`, else a signature of `uri` in the granted form.
    pub fn params_for(&self, secret: &Secret, uri: &str) -> String {
        if let Some((scope, params)) = &self.scope {
            if within(uri, scope) {
                return params.clone();
            }
        }
        sign(secret, self.form, uri, self.expires)
    }

    /// The query parameters of a scoped token for every path under `scope`, with the same
    /// expiry (the granted token itself when its scope is the same).
    pub fn scope_params(&self, secret: &Secret, scope: &str) -> String {
        if let Some((s, params)) = &self.scope {
            if s == scope {
                return params.clone();
            }
        }
        sign_scope(secret, scope, self.expires)
    }
}

/// `path` percent-decoded, without dot segments or repeated slashes (nginx's `$uri`); a
/// trailing slash stays. Bytes that are not UTF-8 after decoding are replaced (for signing;
/// a verifier uses [`decoded_path`], which refuses them).
pub fn normalize_path(path: &str) -> String {
    normalized(&String::from_utf8_lossy(&percent_decode_bytes(path)))
}

/// [`normalize_path`] for a verifier: `None` when the decoded path is not UTF-8, so two
/// paths that differ only in such bytes never share a signature.
pub fn decoded_path(path: &str) -> Option<String> {
    String::from_utf8(percent_decode_bytes(path))
        .ok()
        .map(|d| normalized(&d))
}

fn normalized(decoded: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for seg in decoded.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    let mut out = String::with_capacity(decoded.len() + 1);
    out.push('/');
    out.push_str(&parts.join("/"));
    let trailing = decoded.ends_with('/') || decoded.ends_with("/.") || decoded.ends_with("/..");
    if trailing && !parts.is_empty() {
        out.push('/');
    }
    out
}

fn percent_decode(text: &str) -> String {
    String::from_utf8_lossy(&percent_decode_bytes(text)).into_owned()
}

fn percent_decode_bytes(text: &str) -> Vec<u8> {
    let raw = text.as_bytes();
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let hex = |j: usize| raw.get(j).and_then(|c| (*c as char).to_digit(16));
        match (raw[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// `value` with the bytes a query value may not hold as they are percent-encoded.
fn encode_query_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/:@!()*,".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
