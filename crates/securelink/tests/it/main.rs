//! Signing and verification against vectors computed outside this crate (the openssl recipe
//! of the nginx documentation), and every way a signed URL must be refused.

use vodkit_securelink::{
    append_query, normalize_path, sign, sign_scope, verify, Form, Grant, Secret, Signer, Verdict,
};

fn secret() -> Secret {
    Secret::new("s3cr3t").unwrap()
}

const T: u64 = 1_700_000_000;

/// `echo -n '1700000000/t1/manifest.mpd s3cr3t' | openssl md5 -binary | openssl base64 |
/// tr +/ -_ | tr -d =`
const MD5_VECTOR: &str = "b4FWtTRZxc8Qki3AcAEXOQ";
/// `echo -n '1700000000/t1/manifest.mpd' | openssl dgst -sha256 -hmac s3cr3t -binary |
/// openssl base64 | tr +/ -_ | tr -d =`
const HMAC_VECTOR: &str = "iCCJCgEoIH2-bEqYtgwjP3OEoLeWtmWYAHUoVH3BlJ0";
/// The same for the message `1700000000scope=/t1/`.
const SCOPE_VECTOR: &str = "NJBs2GgCj9DOZgra2XzAtKw61GwIWkD7cdLU_h6Xo1k";

#[test]
fn signatures_match_the_openssl_recipe() {
    assert_eq!(
        sign(&secret(), Form::Md5, "/t1/manifest.mpd", T),
        format!("md5={MD5_VECTOR}&expires={T}")
    );
    assert_eq!(
        sign(&secret(), Form::Hmac, "/t1/manifest.mpd", T),
        format!("hmac={HMAC_VECTOR}&expires={T}")
    );
    assert_eq!(
        sign_scope(&secret(), "/t1/", T),
        format!("hmac={SCOPE_VECTOR}&expires={T}&scope=/t1/")
    );
    // The nginx documentation's own example secret and URI.
    let nginx = Secret::new("secret").unwrap();
    assert_eq!(
        sign(&nginx, Form::Md5, "/s/link", 2147483647),
        "md5=0Xgm37lo5nFEuHMDKl_vQg&expires=2147483647"
    );
}

#[test]
fn genuine_urls_pass_until_their_expiry_second() {
    let q = format!("md5={MD5_VECTOR}&expires={T}");
    let grant = Grant {
        form: Form::Md5,
        expires: T,
        scope: None,
    };
    assert_eq!(
        verify(&secret(), &q, "/t1/manifest.mpd", T),
        Verdict::Valid(grant)
    );
    assert!(matches!(
        verify(&secret(), &q, "/t1/manifest.mpd", T - 100),
        Verdict::Valid(_)
    ));
    assert_eq!(
        verify(&secret(), &q, "/t1/manifest.mpd", T + 1),
        Verdict::Expired
    );
    // Padding and other parameters around the signature change nothing.
    let padded = format!("a=1&md5={MD5_VECTOR}==&expires={T}&b");
    assert!(matches!(
        verify(&secret(), &padded, "/t1/manifest.mpd", T),
        Verdict::Valid(_)
    ));
    let h = format!("hmac={HMAC_VECTOR}&expires={T}");
    assert!(matches!(
        verify(&secret(), &h, "/t1/manifest.mpd", T),
        Verdict::Valid(Grant {
            form: Form::Hmac,
            ..
        })
    ));
}

#[test]
fn tampered_replayed_and_malformed_urls_are_refused() {
    let s = secret();
    let uri = "/t1/manifest.mpd";
    let bad = |q: &str, u: &str| verify(&s, q, u, T);
    assert_eq!(bad("", uri), Verdict::Missing);
    assert_eq!(bad(&format!("expires={T}"), uri), Verdict::Missing);
    // Another URI, another expiry, a flipped character, another secret.
    let good = format!("md5={MD5_VECTOR}&expires={T}");
    assert_eq!(bad(&good, "/t1/other.mpd"), Verdict::Bad);
    assert_eq!(
        bad(&format!("md5={MD5_VECTOR}&expires={}", T + 1), uri),
        Verdict::Bad
    );
    let flipped = format!("md5=c{}&expires={T}", &MD5_VECTOR[1..]);
    assert_eq!(bad(&flipped, uri), Verdict::Bad);
    let other = Secret::new("other").unwrap();
    assert_eq!(verify(&other, &good, uri, T), Verdict::Bad);
    // A forged signature is Bad even past its expiry (no expiry oracle).
    assert_eq!(verify(&s, &flipped, uri, T + 10), Verdict::Bad);
    // Malformed expiry and signature.
    for q in [
        format!("md5={MD5_VECTOR}"),
        format!("md5={MD5_VECTOR}&expires="),
        format!("md5={MD5_VECTOR}&expires=-5"),
        format!("md5={MD5_VECTOR}&expires=0"),
        format!("md5={MD5_VECTOR}&expires=1e9"),
        format!("md5=!!&expires={T}"),
        format!("md5={}&expires={T}", &MD5_VECTOR[..10]),
    ] {
        assert_eq!(bad(&q, uri), Verdict::Bad, "{q}");
    }
    // An HMAC signature presented as MD5, and the reverse.
    assert_eq!(
        bad(&format!("md5={HMAC_VECTOR}&expires={T}"), uri),
        Verdict::Bad
    );
    assert_eq!(
        bad(&format!("hmac={MD5_VECTOR}&expires={T}"), uri),
        Verdict::Bad
    );
}

#[test]
fn a_scoped_token_covers_its_directory_only() {
    let s = secret();
    let q = sign_scope(&s, "/t1/", T);
    for uri in ["/t1/manifest.mpd", "/t1/v0/seg-7.m4s", "/t1/"] {
        assert!(matches!(verify(&s, &q, uri, T), Verdict::Valid(_)), "{uri}");
    }
    for uri in ["/t2/seg-1.m4s", "/t1", "/", "/x/t1/a"] {
        assert_eq!(verify(&s, &q, uri, T), Verdict::Bad, "{uri}");
    }
    // Widening the scope breaks the signature.
    let widened = q.replace("scope=/t1/", "scope=/");
    assert_eq!(verify(&s, &widened, "/t2/a", T), Verdict::Bad);
    // An exact signature of the directory is not a scope over it.
    let exact = sign(&s, Form::Hmac, "/t1/", T);
    assert_eq!(
        verify(&s, &format!("{exact}&scope=/t1/"), "/t1/a.m4s", T),
        Verdict::Bad
    );
    // The grant hands its own parameters to URIs it covers, a new signature elsewhere.
    let Verdict::Valid(grant) = verify(&s, &format!("x=1&{q}"), "/t1/a", T) else {
        panic!("scoped token refused");
    };
    assert_eq!(grant.params_for(&s, "/t1/v/b.m4s"), q);
    assert_eq!(grant.scope_params(&s, "/t1/"), q);
    let elsewhere = grant.params_for(&s, "/t2/b.m4s");
    assert!(matches!(
        verify(&s, &elsewhere, "/t2/b.m4s", T),
        Verdict::Valid(_)
    ));
}

#[test]
fn the_signer_signs_the_normalized_path_and_keeps_signed_targets() {
    let signer = Signer {
        secret: secret(),
        form: Form::Md5,
        ttl_s: 60,
    };
    let url = signer.sign_target("/t1/./x/../manifest.mpd", T - 60);
    assert_eq!(
        url,
        format!("/t1/./x/../manifest.mpd?md5={MD5_VECTOR}&expires={T}")
    );
    let with_query = signer.sign_target("/t1/manifest.mpd?v=2", T - 60);
    assert_eq!(
        with_query,
        format!("/t1/manifest.mpd?v=2&md5={MD5_VECTOR}&expires={T}")
    );
    let signed = format!("/t1/a.m4s?hmac=abc&expires={T}");
    assert_eq!(signer.sign_target(&signed, 0), signed);
    assert_eq!(normalize_path("/a//b/%41/../c/"), "/a/b/c/");
    assert_eq!(normalize_path("/a/.."), "/");
    assert_eq!(
        vodkit_securelink::decoded_path("/a/%73/./b").as_deref(),
        Some("/a/s/b")
    );
    // A verifier refuses what is not UTF-8 once decoded: %FE and %FF would both read as
    // U+FFFD and share a signature.
    assert_eq!(vodkit_securelink::decoded_path("/a%FF"), None);
    assert_eq!(normalize_path("/a%FF"), normalize_path("/a%FE"));
    assert_eq!(append_query("/a#f", "x=1"), "/a?x=1#f");
    assert_eq!(append_query("/a?", "x=1"), "/a?x=1");
}

#[test]
fn secret_files_hold_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let s = Secret::from_file(&write("ok", "s3cr3t\n")).unwrap();
    assert_eq!(s, secret());
    assert_eq!(
        Secret::from_file(&write("crlf", "s3cr3t\r\n")).unwrap(),
        secret()
    );
    for (name, text) in [("empty", ""), ("newline", "\n"), ("two", "a\nb\n")] {
        let p = write(name, text);
        let e = Secret::from_file(&p).unwrap_err().to_string();
        assert!(e.starts_with(&p.display().to_string()), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }
    let missing = dir.path().join("missing");
    let e = Secret::from_file(&missing).unwrap_err().to_string();
    assert!(e.contains("missing") && e.contains("cannot read"), "{e}");
    assert_eq!("md5".parse::<Form>(), Ok(Form::Md5));
    assert!("sha1".parse::<Form>().is_err());
}
