//! Signed URLs end to end: the load generator's signatures against `vodkit serve
//! --secure-link` and a real nginx with `secure_link` (each accepts the other's URLs and
//! refuses tampered, expired and replayed ones alike), signed manifests whose every URI
//! plays, and a load run that signs what it requests.

use std::path::Path;
use std::process::Command;

use crate::common::{run, write_file};
use vodkit_load::player::manifest::{self, Piece, Segments};
use vodkit_load::Target;
use vodkit_securelink::{unix_now, Form, Secret, Signer};
use vodkit_server::SecureLink;
use vodkit_testkit::http;
use vodkit_testkit::peer::Peer;
use vodkit_testkit::server::TestServer;
use vodkit_testkit::{needs, Need};
use vodkit_workload::model::{Request, Session};

const SECRET: &str = "s3cr3t";

fn secret() -> Secret {
    Secret::new(SECRET).unwrap()
}

fn signer(form: Form) -> Signer {
    Signer {
        secret: secret(),
        form,
        ttl_s: 300,
    }
}

/// A vodkit server over `root` checking signatures on every path.
fn signed_vodkit(root: &Path) -> TestServer {
    TestServer::serving(root, |c| {
        c.secure_link = Some(SecureLink {
            secret: secret(),
            prefix: "/".into(),
        });
    })
}

/// The signature of `uri` until `expires` by the nginx documentation's recipe:
/// `echo -n 'EXPIRESURI SECRET' | openssl md5 -binary | openssl base64 | tr +/ -_ | tr -d =`.
fn openssl_signature(uri: &str, expires: u64) -> String {
    let script = format!(
        "printf '%s' '{expires}{uri} {SECRET}' | openssl md5 -binary | openssl base64 | tr +/ -_ | tr -d ="
    );
    let out = Command::new("sh").arg("-c").arg(&script).output().unwrap();
    assert!(out.status.success(), "{script}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn nginx_and_vodkit_accept_and_refuse_the_same_signed_urls() {
    if !needs(&[Need::Peer("nginx"), Need::Tool("openssl")]) {
        return;
    }
    let fill = |root: &Path| {
        write_file(root, "t1/a.m4s", 1000);
        write_file(root, "t1/b.m4s", 1000);
    };
    let probe = signer(Form::Md5).sign_target("/t1/a.m4s", unix_now());
    let directives = vodkit_peers::nginx::secure_link_directives(SECRET).unwrap();
    let Some(nginx) = Peer::start_configured("nginx", &probe, &directives, fill) else {
        return;
    };
    let vodkit = signed_vodkit(&nginx.root());
    let now = unix_now();
    let later = now + 300;
    let genuine = format!(
        "/t1/a.m4s?{}",
        vodkit_securelink::sign(&secret(), Form::Md5, "/t1/a.m4s", later)
    );
    let by_openssl = format!(
        "/t1/a.m4s?md5={}&expires={later}",
        openssl_signature("/t1/a.m4s", later)
    );
    // The recipe and the signer agree to the byte.
    assert_eq!(genuine, by_openssl);
    let sig = openssl_signature("/t1/a.m4s", later);
    let flipped: String = sig
        .chars()
        .enumerate()
        .map(|(i, c)| {
            if i == 3 {
                if c == 'A' {
                    'B'
                } else {
                    'A'
                }
            } else {
                c
            }
        })
        .collect();
    let past = now - 100;
    let cases: Vec<(String, u16, &str)> = vec![
        (genuine.clone(), 200, "signed by vodkit"),
        (
            signer(Form::Md5).sign_target("/t1/./x/../b.m4s", now),
            200,
            "a path with dot segments",
        ),
        (
            format!("/t1/a.m4s?md5={flipped}&expires={later}"),
            403,
            "tampered signature",
        ),
        (
            format!("/t1/a.m4s?md5={sig}&expires={}", later + 1),
            403,
            "tampered expiry",
        ),
        (
            format!("/t1/b.m4s?md5={sig}&expires={later}"),
            403,
            "replayed on another URI",
        ),
        (
            format!(
                "/t1/a.m4s?md5={}&expires={past}",
                openssl_signature("/t1/a.m4s", past)
            ),
            410,
            "expired",
        ),
        ("/t1/a.m4s".into(), 403, "unsigned"),
    ];
    for (server, addr) in [("nginx", nginx.url()), ("vodkit", vodkit.url(""))] {
        let addr = addr
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        for (path, want, what) in &cases {
            let (status, _) = http::get(&addr, path);
            assert_eq!(status, *want, "{server}: {what}: {path}");
        }
    }
    // The HMAC form is vodkit's own.
    let hmac = signer(Form::Hmac).sign_target("/t1/a.m4s", now);
    assert_eq!(http::get(&vodkit_addr(&vodkit), &hmac).0, 200, "{hmac}");
}

fn vodkit_addr(s: &TestServer) -> String {
    s.addr.to_string()
}

const MASTER: &str = "#EXTM3U\n#EXT-X-VERSION:7\n\
#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"a\",NAME=\"en\",URI=\"audio.m3u8\"\n\
#EXT-X-STREAM-INF:BANDWIDTH=100000,AUDIO=\"a\"\nv0.m3u8\n\
#EXT-X-STREAM-INF:BANDWIDTH=200000,AUDIO=\"a\"\n/t1/v1.m3u8\n";

fn media_playlist(rid: &str) -> String {
    let mut s = format!(
        "#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-TARGETDURATION:4\n#EXT-X-PLAYLIST-TYPE:VOD\n\
         #EXT-X-MAP:URI=\"{rid}/init.mp4\"\n"
    );
    for i in 1..=3 {
        s.push_str(&format!("#EXTINF:4.000,\n{rid}/seg-{i}.m4s\n"));
    }
    s.push_str("#EXT-X-ENDLIST\n");
    s
}

const MPD: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<MPD xmlns="urn:mpeg:dash:schema:mpd:2011" type="static" mediaPresentationDuration="PT12S" minBufferTime="PT2S" profiles="urn:mpeg:dash:profile:isoff-live:2011">
  <!-- <BaseURL>ignored/</BaseURL> -->
  <Period id="0">
    <AdaptationSet contentType="video" mimeType="video/mp4" segmentAlignment="true">
      <Representation id="v0" bandwidth="100000" codecs="avc1.64001f" width="640" height="360">
        <SegmentTemplate timescale="1000" startNumber="1" initialization="$RepresentationID$/init.mp4" media="$RepresentationID$/seg-$Number$.m4s">
          <SegmentTimeline><S t="0" d="4000" r="2"/></SegmentTimeline>
        </SegmentTemplate>
      </Representation>
      <Representation id="v1" bandwidth="200000" codecs="avc1.64001f" width="1280" height="720">
        <BaseURL>v1/</BaseURL>
        <SegmentTemplate timescale="1000" startNumber="1" initialization="init.mp4" media="seg-$Number$.m4s">
          <SegmentTimeline><S t="0" d="4000" r="2"/></SegmentTimeline>
        </SegmentTemplate>
      </Representation>
      <Representation id="v2" bandwidth="300000" codecs="avc1.64001f" width="1920" height="1080">
        <BaseURL>v2.mp4</BaseURL>
        <SegmentBase timescale="1000" indexRange="100-199"><Initialization range="0-99"/></SegmentBase>
      </Representation>
    </AdaptationSet>
  </Period>
</MPD>
"#;

/// A title `t1` in both packagings, and a second title `t2`.
fn fill_title(root: &Path) {
    let w = |rel: &str, text: &str| {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    w("t1/master.m3u8", MASTER);
    for rid in ["v0", "v1", "audio"] {
        w(&format!("t1/{rid}.m3u8"), &media_playlist(rid));
        write_file(root, &format!("t1/{rid}/init.mp4"), 100);
        for i in 1..=3 {
            write_file(root, &format!("t1/{rid}/seg-{i}.m4s"), 500);
        }
    }
    w("t1/manifest.mpd", MPD);
    write_file(root, "t1/v2.mp4", 4000);
    write_file(root, "t2/v0/seg-1.m4s", 500);
}

/// Fetch `piece` (ranges are served whole here: only the status matters) and record it.
fn fetch_piece(addr: &str, piece: &Piece, fetched: &mut Vec<String>) {
    assert!(
        piece.path.contains("md5=") || piece.path.contains("hmac="),
        "unsigned URI in a signed manifest: {}",
        piece.path
    );
    let (status, _) = http::get(addr, &piece.path);
    assert_eq!(status, 200, "{}", piece.path);
    fetched.push(piece.path.clone());
}

#[test]
fn signed_manifests_sign_every_uri_they_name() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    fill_title(&root);
    let server = signed_vodkit(&root);
    let addr = vodkit_addr(&server);
    let now = unix_now();
    let mut fetched = Vec::new();

    // HLS: the master playlist, each variant and rendition playlist, their maps and segments.
    let master = signer(Form::Md5).sign_target("/t1/master.m3u8", now);
    let (status, text) = http::get(&addr, &master);
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("URI=\"audio.m3u8?md5="), "{text}");
    let p = manifest::hls(&master, text.as_bytes()).unwrap();
    let mut playlists: Vec<String> = p.periods[0]
        .renditions
        .iter()
        .map(|r| match &r.segments {
            Segments::Playlist { path } => path.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    let audio = text
        .lines()
        .find_map(|l| l.split("URI=\"").nth(1))
        .and_then(|r| r.split('"').next())
        .unwrap();
    playlists.push(manifest::resolve(&master, audio).unwrap());
    assert!(playlists.len() >= 3, "{playlists:?}");
    for list in &playlists {
        let (status, body) = http::get(&addr, list);
        assert_eq!(status, 200, "{list}");
        let (init, segments) = manifest::hls_media(list, body.as_bytes()).unwrap();
        fetch_piece(&addr, &init.unwrap(), &mut fetched);
        assert_eq!(segments.len(), 3, "{body}");
        for s in &segments {
            fetch_piece(&addr, &s.piece, &mut fetched);
        }
    }

    // DASH: templates (with and without a BaseURL), and a SegmentBase file named by BaseURL.
    for form in [Form::Md5, Form::Hmac] {
        let mpd = signer(form).sign_target("/t1/manifest.mpd", now);
        let (status, xml) = http::get(&addr, &mpd);
        assert_eq!(status, 200, "{xml}");
        assert!(
            xml.contains("ignored/</BaseURL>"),
            "comments stay as they are: {xml}"
        );
        let p = manifest::dash(&mpd, &xml).unwrap();
        let renditions = &p.periods[0].renditions;
        assert_eq!(renditions.len(), 3);
        for r in renditions {
            if let Some(init) = &r.init {
                fetch_piece(&addr, init, &mut fetched);
            }
            match &r.segments {
                Segments::Listed(s) => {
                    assert_eq!(s.len(), 3, "{}", r.id);
                    for seg in s {
                        fetch_piece(&addr, &seg.piece, &mut fetched);
                    }
                }
                Segments::Sidx { index } => fetch_piece(&addr, index, &mut fetched),
                other => panic!("{other:?}"),
            }
        }
    }
    assert!(fetched.len() >= 30, "{fetched:?}");

    // What the manifests gave out opens nothing else: an unsigned segment, another title
    // with a scoped token of this one, and a manifest's own signature on a segment.
    assert_eq!(http::get(&addr, "/t1/v0/seg-1.m4s").0, 403);
    let scoped = fetched.iter().find(|u| u.contains("scope=")).unwrap();
    let query = scoped.split_once('?').unwrap().1;
    assert_eq!(
        http::get(&addr, &format!("/t2/v0/seg-1.m4s?{query}")).0,
        403
    );
    let master_query = master.split_once('?').unwrap().1;
    assert_eq!(
        http::get(&addr, &format!("/t1/v0/seg-1.m4s?{master_query}")).0,
        403
    );
    // An expired manifest is refused, not rewritten.
    let old = Signer {
        ttl_s: 0,
        ..signer(Form::Md5)
    }
    .sign_target("/t1/master.m3u8", now - 10);
    assert_eq!(http::get(&addr, &old).0, 410);
}

#[test]
fn the_load_generator_signs_every_url_it_requests() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    for f in ["v/a", "v/b", "v/c"] {
        write_file(&root, f, 3000);
    }
    let server = signed_vodkit(&root);
    let target = Target::parse(&format!("http://{}", server.addr), false).unwrap();
    let sessions: Vec<Session> = (0..2)
        .map(|id| {
            let requests = ["/v/a", "/v/b", "/v/c"]
                .iter()
                .map(|p| Request::new(*p, None, 10.0))
                .collect();
            Session::new(id, 0.0, "default", requests)
        })
        .collect();
    for form in [Form::Md5, Form::Hmac] {
        let signed = run(target.clone(), sessions.clone(), |c| {
            c.sign = Some(signer(form));
            c.verify = true;
        });
        let r = &signed.results;
        assert_eq!(
            r.requests.errors,
            Default::default(),
            "{form}: {}",
            r.summary()
        );
        assert_eq!(r.sessions.completed, 2, "{form}: {}", r.summary());
    }
    let unsigned = run(target, sessions, |_| {});
    let r = &unsigned.results;
    assert_eq!(r.sessions.completed, 0, "{}", r.summary());
    assert!(
        r.requests.errors.get("status").is_some_and(|&n| n > 0),
        "{}",
        r.summary()
    );
}
