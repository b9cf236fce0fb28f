//! What a shared cache in front of one or more origins relies on: validators that replicas
//! of a file share (two roots holding a copy give the same ETag and Last-Modified, so a
//! revalidation or a resume against the other origin gets 304 or 206), VoD manifests cached
//! long and live playlists about half a segment, and no `Cache-Control` on errors.

use crate::common;

use common::{pattern, Client, TestServer};
use std::io::Write;
use std::time::{Duration, UNIX_EPOCH};
use vodkit_server::live::IngestConfig;

/// Write `data` at `rel` under `root` with the modification time `mtime`, as a copy made
/// with its times kept (`cp -p`, `rsync -t`) has.
fn write_with_mtime(root: &std::path::Path, rel: &str, data: &[u8], mtime: std::time::SystemTime) {
    let p = root.join(rel);
    std::fs::write(&p, data).unwrap();
    let f = std::fs::File::options().write(true).open(&p).unwrap();
    f.set_times(std::fs::FileTimes::new().set_modified(mtime))
        .unwrap();
}

#[test]
fn replicas_of_a_file_share_their_validators() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let mtime = UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789);
    let data = pattern(300_000);
    write_with_mtime(a.path(), "title.mp4", &data, mtime);
    // Another file first, so the copy does not land on the same inode number by chance.
    std::fs::write(b.path().join("other.bin"), b"x").unwrap();
    write_with_mtime(b.path(), "title.mp4", &data, mtime);
    let sa = TestServer::serving(a.path(), |_| {});
    let sb = TestServer::serving(b.path(), |_| {});
    let ra = sa.connect().get("/title.mp4", &[]);
    let rb = sb.connect().get("/title.mp4", &[]);
    assert_eq!((ra.status, rb.status), (200, 200));
    let etag = ra.header("etag").unwrap().to_string();
    assert_eq!(rb.header("etag"), Some(etag.as_str()));
    assert_eq!(ra.header("last-modified"), rb.header("last-modified"));
    assert_eq!(
        ra.header("last-modified"),
        Some("Tue, 14 Nov 2023 22:13:20 GMT")
    );
    // nginx's form for the same file: mtime and size in hex.
    assert_eq!(etag, format!("\"{:x}-{:x}\"", 1_700_000_000u64, data.len()));
    // A cache revalidating against the other origin, a player resuming from it.
    let r = sb.connect().get("/title.mp4", &[("If-None-Match", &etag)]);
    assert_eq!(r.status, 304);
    let r = sb.connect().get(
        "/title.mp4",
        &[("Range", "bytes=1000-1999"), ("If-Range", &etag)],
    );
    assert_eq!(r.status, 206);
    assert_eq!(r.body, &data[1000..2000]);
    let lm = ra.header("last-modified").unwrap();
    let r = sb
        .connect()
        .get("/title.mp4", &[("Range", "bytes=0-9"), ("If-Range", lm)]);
    assert_eq!(r.status, 206);
}

const LIVE_HLS: &[u8] = b"#EXTM3U\n#EXT-X-TARGETDURATION:6\n#EXTINF:6,\nseg-1.ts\n";

#[test]
fn manifests_are_cached_by_kind_and_errors_are_not() {
    let s = TestServer::start_with(|c| {
        c.ingest = Some(IngestConfig::new("/live/", "t0ken"));
    });
    s.write(
        "vod/index.m3u8",
        b"#EXTM3U\n#EXT-X-TARGETDURATION:6\n#EXTINF:6,\nseg-1.ts\n#EXT-X-ENDLIST\n",
    );
    s.write("vod/manifest.mpd", br#"<MPD type="static"></MPD>"#);
    s.write("disk-live/index.m3u8", LIVE_HLS);
    s.write(
        "disk-live/manifest.mpd",
        br#"<MPD type="dynamic" maxSegmentDuration="PT4S"></MPD>"#,
    );
    let mut c = s.connect();
    for path in ["/vod/index.m3u8", "/vod/manifest.mpd"] {
        let r = c.get(path, &[]);
        assert_eq!(r.status, 200);
        assert_eq!(
            r.header("cache-control"),
            Some("public, max-age=86400"),
            "{path}"
        );
    }
    let r = c.get("/disk-live/index.m3u8", &[]);
    assert_eq!(r.header("cache-control"), Some("max-age=3"));
    let r = c.get("/disk-live/manifest.mpd", &[("Accept-Encoding", "gzip")]);
    assert_eq!(r.header("cache-control"), Some("max-age=2"));
    // A live playlist published by PUT: half its 6 s target duration.
    let mut raw = format!(
        "PUT /live/a/index.m3u8 HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer t0ken\r\nContent-Length: {}\r\n\r\n",
        LIVE_HLS.len()
    )
    .into_bytes();
    raw.extend_from_slice(LIVE_HLS);
    c.reader.get_mut().write_all(&raw).unwrap();
    assert_eq!(c.read_response(false).status, 201);
    let r = c.get("/live/a/index.m3u8", &[]);
    assert_eq!(r.header("cache-control"), Some("max-age=3"));
    // Errors carry no Cache-Control, whatever the file's kind.
    let r = c.get("/video.mp4", &[("Range", "bytes=99999999-")]);
    assert_eq!(r.status, 416);
    assert_eq!(r.header("cache-control"), None);
    let r = c.get("/video.mp4", &[("If-Match", "\"other\"")]);
    assert_eq!(r.status, 412);
    assert_eq!(r.header("cache-control"), None);
    for path in ["/missing.mp4", "/live/a/missing.m3u8", "/%zz"] {
        let r = Client::connect(s.addr).get(path, &[]);
        assert!(r.status >= 400, "{path}");
        assert_eq!(r.header("cache-control"), None, "{path}");
    }
    // What a cache may keep still says so.
    let r = c.get("/video.mp4", &[("Range", "bytes=0-9")]);
    assert_eq!(r.status, 206);
    assert_eq!(r.header("cache-control"), Some("public, max-age=86400"));
}
