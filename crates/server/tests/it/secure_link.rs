//! `--secure-link`: requests under the prefix need a valid signature (403 without, 410 when
//! expired, on a connection that stays open), paths outside it and the live source's
//! uploads do not (its playlists are signed like files); a signed manifest comes back whole
//! with every URI signed, the same for HEAD, GET and gzip; and the rewriter's output, line
//! by line.

use crate::common;

use common::TestServer;
use vodkit_securelink::{sign, sign_scope, unix_now, Form, Grant, Secret, Signer, Verdict};
use vodkit_server::signed_manifest::{rewrite, Kind, Signing};
use vodkit_server::SecureLink;

fn secret() -> Secret {
    Secret::new("k3y").unwrap()
}

fn signed(path: &str) -> String {
    Signer {
        secret: secret(),
        form: Form::Md5,
        ttl_s: 60,
    }
    .sign_target(path, unix_now())
}

fn server(prefix: &str, tune: impl FnOnce(&mut vodkit_server::ServerConfig)) -> TestServer {
    let s = TestServer::start_with(|c| {
        c.secure_link = Some(SecureLink {
            secret: secret(),
            prefix: prefix.into(),
        });
        tune(c);
    });
    s.write(
        "p/t/index.m3u8",
        b"#EXTM3U\n#EXT-X-MAP:URI=\"init.mp4\"\n#EXTINF:4,\nseg-1.m4s\n#EXT-X-ENDLIST\n",
    );
    s.write("p/t/seg-1.m4s", b"segment");
    s.write("p/t/init.mp4", b"init");
    s
}

#[test]
fn requests_under_the_prefix_need_a_signature() {
    let s = server("/p/", |_| {});
    let mut c = s.connect();
    // Outside the prefix: served as ever.
    assert_eq!(c.get("/video.mp4", &[("Range", "bytes=0-9")]).status, 206);
    let r = c.get("/p/t/seg-1.m4s", &[]);
    assert_eq!(r.status, 403);
    let expired = format!(
        "/p/t/seg-1.m4s?{}",
        sign(&secret(), Form::Md5, "/p/t/seg-1.m4s", unix_now() - 5)
    );
    let r = c.get(&expired, &[]);
    assert_eq!(r.status, 410);
    assert_eq!(r.body, b"410 Gone\n");
    // The connection survived both refusals.
    let r = c.get(&signed("/p/t/seg-1.m4s"), &[]);
    assert_eq!((r.status, r.body.as_slice()), (200, &b"segment"[..]));
    let r = c.get(&signed("/p/t/seg-1.m4s"), &[("Range", "bytes=1-2")]);
    assert_eq!((r.status, r.body.as_slice()), (206, &b"eg"[..]));
    // A signature for the manifest is not one for its segment.
    let manifest = signed("/p/t/index.m3u8");
    let query = manifest.split_once('?').unwrap().1;
    assert_eq!(c.get(&format!("/p/t/seg-1.m4s?{query}"), &[]).status, 403);
    // Encoded paths are checked as decoded, as nginx's $uri is.
    assert_eq!(c.get(&signed("/p/t/%73eg-1.m4s"), &[]).status, 200);
    // A path that is not UTF-8 once decoded has no signature (no two such paths share one).
    assert_eq!(c.get(&signed("/p/t/%FF"), &[]).status, 403);
}

#[test]
fn a_signed_manifest_is_served_whole_with_its_uris_signed() {
    let s = server("/", |_| {});
    let mut c = s.connect();
    let url = signed("/p/t/index.m3u8");
    let expires = url.rsplit("expires=").next().unwrap().to_string();
    let r = c.get(&url, &[("Range", "bytes=0-3")]);
    assert_eq!(
        r.status, 200,
        "a range of a signed manifest is the whole of it"
    );
    let text = String::from_utf8(r.body.clone()).unwrap();
    let seg = sign(
        &secret(),
        Form::Md5,
        "/p/t/seg-1.m4s",
        expires.parse().unwrap(),
    );
    assert!(text.contains(&format!("\nseg-1.m4s?{seg}\n")), "{text}");
    assert!(r.header("etag").is_none() && r.header("accept-ranges").is_none());
    // A shared cache does not keep this token's manifest, nor anyone past its expiry.
    let cache = r.header("cache-control").unwrap();
    let left: u64 = cache
        .strip_prefix("private, max-age=")
        .unwrap()
        .parse()
        .unwrap();
    assert!(left <= 60, "{cache}");
    let head = c.request("HEAD", &url, &[]);
    assert_eq!(head.header("content-length"), r.header("content-length"));
    let z = c.get(&url, &[("Accept-Encoding", "gzip")]);
    assert_eq!(z.header("content-encoding"), Some("gzip"));
    let mut unzipped = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::GzDecoder::new(z.body.as_slice()),
        &mut unzipped,
    )
    .unwrap();
    assert_eq!(unzipped, r.body);
    // Every URI it names is served.
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        assert_eq!(c.get(&format!("/p/t/{line}"), &[]).status, 200, "{line}");
    }
    let map = text
        .split("URI=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    assert_eq!(c.get(&format!("/p/t/{map}"), &[]).status, 200, "{map}");
    // Unsigned, the manifest is refused, not served unsigned.
    assert_eq!(c.get("/p/t/index.m3u8", &[]).status, 403);
}

#[test]
fn the_live_sources_uploads_need_only_its_token() {
    let s = server("/", |c| {
        c.ingest = Some(vodkit_server::live::IngestConfig::new("/live/", "t0ken"));
    });
    let mut c = s.connect();
    c.send("PUT /live/a/seg-1.m4s HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer t0ken\r\nContent-Length: 3\r\n\r\nabc");
    assert_eq!(c.read_response(false).status, 201);
    // Viewers of the live stream sign like everyone else.
    assert_eq!(c.get("/live/a/seg-1.m4s", &[]).status, 403);
    let r = c.get(&signed("/live/a/seg-1.m4s"), &[]);
    assert_eq!((r.status, r.body.as_slice()), (200, &b"abc"[..]));
    // A live playlist carries the viewer's signature to its segments.
    let pl = "#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:2,\nseg-1.m4s\n";
    c.send(&format!(
        "PUT /live/a/index.m3u8 HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer t0ken\r\nContent-Length: {}\r\n\r\n{pl}",
        pl.len()
    ));
    assert_eq!(c.read_response(false).status, 201);
    let r = c.get(&signed("/live/a/index.m3u8"), &[]);
    assert_eq!(r.status, 200);
    assert!(r.header("etag").is_none());
    let text = String::from_utf8(r.body).unwrap();
    let seg = text
        .lines()
        .find(|l| l.starts_with("seg-1.m4s?md5="))
        .unwrap();
    let r = c.get(&format!("/live/a/{seg}"), &[]);
    assert_eq!((r.status, r.body.as_slice()), (200, &b"abc"[..]));
}

/// When the grants of the rewriter's tests expire.
const EXPIRES: u64 = 2_000_000_000;

/// `text`, the manifest of kind `kind` at `path`, rewritten for an MD5 grant of
/// [`secret`] that expires at [`EXPIRES`].
fn rewrite_md5(kind: Kind, text: &str, path: &str) -> String {
    let grant = Grant {
        form: Form::Md5,
        expires: EXPIRES,
        scope: None,
    };
    let secret = secret();
    let signing = Signing {
        secret: &secret,
        grant: &grant,
    };
    rewrite(kind, text, path, &signing)
}

#[test]
fn hls_playlists_have_every_uri_signed() {
    let k = secret();
    let e = EXPIRES;
    let text = "#EXTM3U\r\n#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"a\",URI=\"../a/en.m3u8\"\r\n\
#EXT-X-KEY:METHOD=SAMPLE-AES,URI=\"skd://key\"\r\n#EXT-X-STREAM-INF:BANDWIDTH=1\r\nv0.m3u8\r\n\
#EXT-X-STREAM-INF:BANDWIDTH=2\r\nhttps://cdn.example/v1.m3u8\r\n\r\n/abs/v2.m3u8?x=1#f\r\n\
v3.m3u8?md5=keep&expires=1\r\n";
    let out = rewrite_md5(Kind::Hls, text, "/t/master.m3u8");
    let md5 = |uri: &str| sign(&k, Form::Md5, uri, e);
    let want = format!(
        "#EXTM3U\r\n#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"a\",URI=\"../a/en.m3u8?{}\"\r\n\
#EXT-X-KEY:METHOD=SAMPLE-AES,URI=\"skd://key\"\r\n#EXT-X-STREAM-INF:BANDWIDTH=1\r\nv0.m3u8?{}\r\n\
#EXT-X-STREAM-INF:BANDWIDTH=2\r\nhttps://cdn.example/v1.m3u8\r\n\r\n/abs/v2.m3u8?x=1&{}#f\r\n\
v3.m3u8?md5=keep&expires=1\r\n",
        md5("/a/en.m3u8"),
        md5("/t/v0.m3u8"),
        md5("/abs/v2.m3u8"),
    );
    assert_eq!(out, want);
}

#[test]
fn dash_templates_get_a_scope_and_files_their_own_signature() {
    let k = secret();
    let e = EXPIRES;
    let mpd = r#"<?xml version="1.0"?>
<MPD><BaseURL>http://other/</BaseURL><!-- media="x.m4s" --><Period><AdaptationSet>
<Representation id="v0"><SegmentTemplate media='$RepresentationID$/s-$Number$.m4s' initialization="v0/init.mp4"/></Representation>
<Representation id="v1"><BaseURL>v1.mp4</BaseURL><SegmentList><Initialization sourceURL="v1i.mp4"/><SegmentURL media="../x/s1.m4s"/></SegmentList></Representation>
</AdaptationSet></Period></MPD>"#;
    // A BaseURL on another host: nothing under it is signed.
    let out = rewrite_md5(Kind::Dash, mpd, "/t/m.mpd");
    assert_eq!(out, mpd);
    let local = mpd.replace("<BaseURL>http://other/</BaseURL>", "");
    let out = rewrite_md5(Kind::Dash, &local, "/t/m.mpd");
    let amp = |q: String| q.replace('&', "&amp;");
    let md5 = |uri: &str| amp(sign(&k, Form::Md5, uri, e));
    let want = local
        .replace(
            "s-$Number$.m4s'",
            &format!("s-$Number$.m4s?{}'", amp(sign_scope(&k, "/t/", e))),
        )
        .replace(
            "v0/init.mp4\"",
            &format!("v0/init.mp4?{}\"", md5("/t/v0/init.mp4")),
        )
        .replace("v1.mp4<", &format!("v1.mp4?{}<", md5("/t/v1.mp4")))
        .replace("v1i.mp4\"", &format!("v1i.mp4?{}\"", md5("/t/v1i.mp4")))
        .replace("s1.m4s\"", &format!("s1.m4s?{}\"", md5("/x/s1.m4s")));
    assert_eq!(out, want);
    // The scope verifies for the expanded URIs, and only under the title.
    let scope = sign_scope(&k, "/t/", e);
    assert!(matches!(
        vodkit_securelink::verify(&k, &scope, "/t/v0/s-7.m4s", e),
        Verdict::Valid(_)
    ));
    assert_eq!(
        vodkit_securelink::verify(&k, &scope, "/u/v0/s-7.m4s", e),
        Verdict::Bad
    );
}
