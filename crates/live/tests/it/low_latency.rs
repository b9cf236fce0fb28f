//! A low-latency source (`vodkit live push --low-latency`): every segment published in
//! parts, each part `PUT` whole and appended as one chunk to the segment's chunked `PUT` on
//! a second connection, the LL-HLS playlist after every part. Against `vodkit serve
//! --ingest` the stored segment equals its parts end to end, a blocking reload waits for
//! the hinted part and a segment is read while it is uploaded; against a recording origin the
//! segment's chunks arrive as the parts are produced, not at the end; and a real title
//! fragmented at a quarter second (ffmpeg) plays part by part.

use crate::common::{ffmpeg_scratch, frame_times, get, ingest_origin, read_chunk, run_out_cleanly};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use vodkit_live::{LiveTitle, LowLatency, Source, SourceConfig};
use vodkit_testkit::server::TestServer;

const TOKEN: &str = "ll-token";

/// An in-process `vodkit serve --ingest` whose window holds every part of the test's
/// segments, and which gives up quickly on objects that never come.
fn origin(root: &std::path::Path) -> TestServer {
    TestServer::serving(root, |cfg| {
        let mut ingest = vodkit_server::live::IngestConfig::new("/live/", TOKEN);
        ingest.window = 500;
        ingest.max_objects = 1000;
        ingest.hold = Duration::from_millis(200);
        cfg.ingest = Some(ingest);
    })
}

/// One stream of 1 s segments in quarter-second parts for `seconds`.
fn config(port: u16, seconds: f64) -> SourceConfig {
    let target = format!("http://127.0.0.1:{port}");
    let mut c = SourceConfig::new(&target, 1, 400);
    c.segment_s = 1.0;
    c.window = 3;
    c.token = Some(TOKEN.into());
    c.duration = Some(Duration::from_secs_f64(seconds));
    c.low_latency = Some(LowLatency {
        part_s: 0.25,
        ..LowLatency::new(&target)
    });
    c
}

fn text(body: &[u8]) -> String {
    String::from_utf8_lossy(body).into_owned()
}

#[test]
fn segments_on_the_origin_equal_their_parts() {
    let root = tempfile::tempdir().unwrap();
    let handle = origin(root.path());
    let port = handle.addr.port();
    let c = config(port, 4.2);
    assert_eq!(c.parts(), Some(4));
    let part_len = c.part_bytes();
    let src = Source::start(c).unwrap();
    assert!(src.wait_ready(Duration::from_secs(10)));
    // While it runs: an LL-HLS playlist with a hint, and an LL-DASH MPD.
    let (status, live) = get(port, "/live/stream-0/index.m3u8");
    assert_eq!(status, 200);
    let live = text(&live);
    assert!(
        live.contains("#EXT-X-PART-INF:PART-TARGET=0.250\n"),
        "{live}"
    );
    assert!(live.contains("CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK=0.750,CAN-SKIP-UNTIL=6.000"));
    assert!(
        live.contains("#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"seg-"),
        "{live}"
    );
    let (_, mpd) = get(port, "/live/stream-0/manifest.mpd");
    let mpd = text(&mpd);
    assert!(mpd.contains("availabilityTimeOffset=\"0.750\" availabilityTimeComplete=\"false\""));
    assert!(mpd.contains(&format!("value=\"http://127.0.0.1:{port}/.vodkit/clock\"")));
    let report = run_out_cleanly(src);
    assert_eq!(report.published.segments, 4, "{}", report.summary());
    assert_eq!(report.published.parts, 16, "{}", report.summary());
    assert!(
        report.published.part_puts >= 16 && report.part_s == 0.25,
        "{report:?}"
    );
    assert!(report.summary().contains("low latency: 0.250 s parts 16"));

    let (_, last) = get(port, "/live/stream-0/index.m3u8");
    let last = text(&last);
    assert!(last.ends_with("seg-3.m4s\n#EXT-X-ENDLIST\n"), "{last}");
    assert!(!last.contains("PRELOAD-HINT"));
    let p = m3u8_rs::parse_media_playlist_res(last.as_bytes()).unwrap();
    assert_eq!(p.segments.len(), 3);
    let (_, mpd) = get(port, "/live/stream-0/manifest.mpd");
    assert!(text(&mpd).contains("type=\"static\""));
    for n in 1..4 {
        let (status, whole) = get(port, &format!("/live/stream-0/seg-{n}.m4s"));
        assert_eq!(status, 200, "seg-{n}");
        let mut parts = Vec::new();
        for i in 0..4 {
            let (status, part) = get(port, &format!("/live/stream-0/seg-{n}.{i}.m4s"));
            assert_eq!(status, 200, "seg-{n}.{i}");
            assert_eq!(part.len(), part_len);
            parts.extend_from_slice(&part);
        }
        assert!(whole == parts, "seg-{n}.m4s is its four parts end to end");
    }
}

#[test]
fn a_backfilled_window_comes_with_its_parts_at_once() {
    let root = tempfile::tempdir().unwrap();
    let handle = origin(root.path());
    let port = handle.addr.port();
    let mut c = config(port, 1.1);
    c.backfill = true;
    let src = Source::start(c).unwrap();
    assert!(src.wait_ready(Duration::from_secs(10)));
    let (_, first) = get(port, "/live/stream-0/index.m3u8");
    let first = text(&first);
    // Three segments dated in the past, published at once, with the parts of the recent ones.
    assert!(
        first.contains("\nseg-2.m4s\n") && first.contains("URI=\"seg-2.3.m4s\""),
        "{first}"
    );
    assert!(
        first.contains("#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"seg-3.0.m4s\""),
        "{first}"
    );
    let report = run_out_cleanly(src);
    // The backfilled three and one in real time.
    assert_eq!(
        (report.published.segments, report.published.parts),
        (4, 16),
        "{}",
        report.summary()
    );
    for n in 0..4 {
        let (_, whole) = get(port, &format!("/live/stream-0/seg-{n}.m4s"));
        let parts: Vec<u8> = (0..4)
            .flat_map(|i| get(port, &format!("/live/stream-0/seg-{n}.{i}.m4s")).1)
            .collect();
        assert!(
            !whole.is_empty() && whole == parts,
            "seg-{n}.m4s is its parts"
        );
    }
}

/// A `GET` of `path` on the origin at `port` whose answer is chunked (a segment read while
/// it is uploaded): its chunks, and what `at_first` returned when the first one arrived.
fn read_growing<T>(port: u16, path: &str, at_first: impl FnOnce() -> T) -> (Vec<Vec<u8>>, T) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut r = BufReader::new(s);
    let mut head = Vec::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        let line = line.trim_end().to_ascii_lowercase();
        if line.is_empty() {
            break;
        }
        head.push(line);
    }
    assert!(head[0].starts_with("http/1.1 200"), "{head:?}");
    assert!(
        head.iter().any(|h| h == "transfer-encoding: chunked"),
        "{head:?}"
    );
    assert!(
        !head.iter().any(|h| h.starts_with("content-length")),
        "{head:?}"
    );
    let mut chunks = Vec::new();
    let mut at_first = Some(at_first);
    let mut seen = None;
    while let Some(data) = read_chunk(&mut r) {
        chunks.push(data);
        if let Some(f) = at_first.take() {
            seen = Some(f());
        }
    }
    (chunks, seen.unwrap())
}

/// The part a playlist's preload hint names: (segment, part).
fn hinted(playlist: &str) -> (u64, u32) {
    let uri = playlist
        .lines()
        .find_map(|l| l.strip_prefix("#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"seg-"))
        .unwrap_or_else(|| panic!("no hint: {playlist}"));
    let (n, rest) = uri.split_once('.').unwrap();
    let p = rest.split('.').next().unwrap();
    (n.parse().unwrap(), p.parse().unwrap())
}

/// The source with `vodkit serve --ingest` as it is configured by default: a blocking
/// reload for the hinted part is answered with the playlist listing it, the next segment
/// is read while it is uploaded — its first bytes before its third part is published —
/// and equals its parts, and the MPD's clock answers.
#[test]
fn players_block_for_parts_and_read_segments_while_they_are_uploaded() {
    let root = tempfile::tempdir().unwrap();
    let handle = ingest_origin(root.path(), TOKEN);
    let port = handle.addr.port();
    let mut c = config(port, 4.2);
    c.backfill = true;
    let src = Source::start(c).unwrap();
    assert!(src.wait_ready(Duration::from_secs(10)));
    let dir = "/live/stream-0";
    let (_, now) = get(port, &format!("{dir}/index.m3u8"));
    let (n, p) = hinted(&text(&now));
    let (status, blocked) = get(
        port,
        &format!("{dir}/index.m3u8?_HLS_msn={n}&_HLS_part={p}"),
    );
    assert_eq!(status, 200);
    let blocked = text(&blocked);
    assert!(
        blocked.contains(&format!("URI=\"seg-{n}.{p}.m4s\"")),
        "{blocked}"
    );
    // The segment after: the request is held until its upload begins, then read as it grows.
    let next = n + 1;
    // Its first bytes come before its third part is published (a body sent whole at the
    // end would come after all of them).
    let third = format!("URI=\"seg-{next}.2.m4s\"");
    let (chunks, listed_then) = read_growing(port, &format!("{dir}/seg-{next}.m4s"), || {
        text(&get(port, &format!("{dir}/index.m3u8")).1).contains(&third)
    });
    assert!(
        !listed_then,
        "the first bytes of seg-{next} came before its third part was published"
    );
    let parts: Vec<u8> = (0..4)
        .flat_map(|i| get(port, &format!("{dir}/seg-{next}.{i}.m4s")).1)
        .collect();
    assert!(
        chunks.concat() == parts,
        "seg-{next} as read equals its parts"
    );
    let (_, mpd) = get(port, &format!("{dir}/manifest.mpd"));
    assert!(text(&mpd).contains(&format!("value=\"http://127.0.0.1:{port}/.vodkit/clock\"")));
    let (status, clock) = get(port, "/.vodkit/clock");
    assert_eq!(status, 200);
    assert!(text(&clock).ends_with('Z'), "{}", text(&clock));
    run_out_cleanly(src);
}

#[test]
fn a_stop_mid_segment_leaves_the_unfinished_segment_out() {
    let root = tempfile::tempdir().unwrap();
    let handle = origin(root.path());
    let port = handle.addr.port();
    let src = Source::start(config(port, 60.0)).unwrap();
    // Until segment 1 is on its way: three parts of it listed.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, p) = get(port, "/live/stream-0/index.m3u8");
        if text(&p).contains("URI=\"seg-1.2.m4s\"") {
            break;
        }
        assert!(Instant::now() < deadline, "{}", text(&p));
        std::thread::sleep(Duration::from_millis(20));
    }
    let report = src.stop();
    assert_eq!(report.published.failed_puts, 0, "{}", report.summary());
    let (_, last) = get(port, "/live/stream-0/index.m3u8");
    let last = m3u8_rs::parse_media_playlist_res(&last).unwrap();
    assert!(last.end_list);
    // The segment in progress when the source stopped is not listed, and its aborted
    // upload was not stored as if it were the whole segment.
    let newest = last.media_sequence + last.segments.len() as u64 - 1;
    assert_eq!(
        last.segments.last().unwrap().uri,
        format!("seg-{newest}.m4s")
    );
    let unfinished = format!("/live/stream-0/seg-{}.m4s", newest + 1);
    assert_eq!(get(port, &unfinished).0, 404, "{unfinished}");
}

/// What a recording origin received: every `PUT` body, and every chunk of a chunked one,
/// with when it arrived and on which connection.
#[derive(Debug, Clone)]
struct Arrival {
    at: Instant,
    conn: usize,
    path: String,
    /// `Some(i)`: chunk i of a chunked body; `None`: a whole body.
    chunk: Option<usize>,
    /// The request head named `Transfer-Encoding: chunked`.
    chunked: bool,
    body: Vec<u8>,
}

/// A minimal HTTP/1.1 origin on a loopback port recording what arrives; answers `201` to
/// every `PUT` and `204` to anything else.
fn recording_origin() -> (u16, Arc<Mutex<Vec<Arrival>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let log = Arc::new(Mutex::new(Vec::new()));
    let shared = log.clone();
    std::thread::spawn(move || {
        for (conn, s) in l.incoming().enumerate() {
            let Ok(s) = s else { return };
            let log = shared.clone();
            std::thread::spawn(move || serve_connection(conn, s, &log));
        }
    });
    (port, log)
}

fn serve_connection(conn: usize, s: std::net::TcpStream, log: &Mutex<Vec<Arrival>>) {
    let mut out = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut words = line.split_whitespace();
        let method = words.next().unwrap_or("").to_string();
        let path = words.next().unwrap_or("").to_string();
        let (mut length, mut chunked) = (0usize, false);
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            let (name, value) = h.split_once(':').unwrap_or((h, ""));
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap();
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value.trim().eq_ignore_ascii_case("chunked");
            }
        }
        let record = |chunk, body| {
            log.lock().unwrap().push(Arrival {
                at: Instant::now(),
                conn,
                path: path.clone(),
                chunk,
                chunked,
                body,
            })
        };
        if chunked {
            let mut i = 0;
            while let Some(data) = read_chunk(&mut r) {
                record(Some(i), data);
                i += 1;
            }
        } else {
            let mut body = vec![0u8; length];
            r.read_exact(&mut body).unwrap();
            record(None, body);
        }
        let status = if method == "PUT" {
            "201 Created"
        } else {
            "204 No Content"
        };
        let answer = format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
        if out.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

#[test]
fn a_segment_is_uploaded_chunk_by_chunk_while_its_parts_are_produced() {
    let (port, log) = recording_origin();
    let mut c = config(port, 3.2);
    c.token = None;
    let src = Source::start(c).unwrap();
    let report = run_out_cleanly(src);
    assert_eq!(report.published.segments, 3, "{}", report.summary());
    let log = log.lock().unwrap().clone();
    let dir = "/live/stream-0/";
    let find = |path: &str| -> Vec<&Arrival> {
        log.iter()
            .filter(|a| a.path == format!("{dir}{path}"))
            .collect()
    };
    for n in 0..3 {
        let chunks = find(&format!("seg-{n}.m4s"));
        assert_eq!(chunks.len(), 4, "seg-{n}: one chunk per part");
        assert!(chunks.iter().all(|a| a.chunked));
        let parts: Vec<&Arrival> = (0..4)
            .map(|i| {
                let p = find(&format!("seg-{n}.{i}.m4s"));
                assert_eq!(p.len(), 1, "seg-{n}.{i}");
                p[0]
            })
            .collect();
        for (i, (chunk, part)) in chunks.iter().zip(&parts).enumerate() {
            assert_eq!(chunk.chunk, Some(i));
            assert!(chunk.body == part.body, "chunk {i} of seg-{n} is part {i}");
            assert!(!part.chunked);
            // Parts and playlists on one connection, the segment's upload on another.
            assert_ne!(chunk.conn, part.conn);
        }
        // The first chunk arrived before the last part was even produced, and the chunks
        // spread over the segment: the body was not sent at the end.
        assert!(
            chunks[0].at < parts[3].at,
            "seg-{n}: first chunk before the last part"
        );
        assert!(
            chunks[3].at.duration_since(chunks[0].at) >= Duration::from_millis(250),
            "seg-{n}: chunks spread over the segment"
        );
    }
    // Every segment's upload on the same (second, keep-alive) connection.
    let uploads: Vec<usize> = log.iter().filter(|a| a.chunked).map(|a| a.conn).collect();
    assert!(uploads.windows(2).all(|w| w[0] == w[1]), "{uploads:?}");
    // Each playlist lists only parts already published, and hints one that is not.
    let mut published = std::collections::HashSet::new();
    let mut playlists = 0;
    for a in &log {
        let name = a.path.trim_start_matches(dir);
        if a.chunk.is_none() && name.starts_with("seg-") {
            published.insert(name.to_string());
        }
        if name != "index.m3u8" {
            continue;
        }
        playlists += 1;
        let p = text(&a.body);
        for line in p.lines() {
            let uri = line
                .split("URI=\"")
                .nth(1)
                .and_then(|u| u.split('"').next());
            match uri {
                Some(u) if line.starts_with("#EXT-X-PART:") => {
                    assert!(published.contains(u), "{u} listed before it was published")
                }
                Some(u) if line.starts_with("#EXT-X-PRELOAD-HINT:") => {
                    assert!(!published.contains(u), "{u} hinted after it was published")
                }
                _ => {}
            }
        }
    }
    // After every part, and the final one.
    assert_eq!(playlists, 12 + 1);
    // The MPD once per segment, and the final one.
    assert_eq!(find("manifest.mpd").len(), 3 + 1);
}

/// The presentation times of the video frames ffprobe decodes from `file`, in order.
fn sorted_frame_times(file: &std::path::Path) -> Vec<f64> {
    let mut t = frame_times(file);
    t.sort_by(f64::total_cmp);
    t
}

#[test]
fn a_title_fragmented_at_a_quarter_second_plays_part_by_part() {
    let Some(dir) = ffmpeg_scratch() else {
        return;
    };
    // 3 s at 24 frames/s, a key frame every second, a fragment every quarter second.
    let file = dir.path().join("quarters.mp4");
    vodkit_testkit::process::run_ok(
        Command::new("ffmpeg")
            .args(["-v", "error", "-y", "-f", "lavfi"])
            .args(["-i", "testsrc=size=160x120:rate=24", "-t", "3"])
            .args([
                "-c:v",
                "libx264",
                "-preset",
                "ultrafast",
                "-pix_fmt",
                "yuv420p",
            ])
            .args(["-g", "24", "-keyint_min", "24", "-sc_threshold", "0"])
            .args(["-movflags", "+empty_moov+default_base_moof"])
            .args(["-frag_duration", "250000"])
            .arg(&file),
    );
    let what = file.display().to_string();
    let media = vodkit_media::rendition(&file).unwrap();
    let title = LiveTitle::new(media, &what).unwrap();
    // Half-second segments would start at fragments without a key frame.
    let e = title.clone().in_parts(Some(0.5), &what).unwrap_err();
    assert!(
        e.contains("does not start with a key frame") && e.contains(&what),
        "{e}"
    );
    // 1 s segments of four parts; 11 fragments in the file's loop, cut to 8.
    let title = title.in_parts(Some(1.0), &what).unwrap();
    assert_eq!((title.parts(), title.fragments()), (4, 8));

    let served = tempfile::tempdir().unwrap();
    let handle = origin(served.path());
    let port = handle.addr.port();
    let c = config(port, 3.2).with_title(title);
    c.validate().unwrap();
    assert_eq!(c.part_s(), Some(0.25));
    let src = Source::start(c).unwrap();
    let report = run_out_cleanly(src);
    assert_eq!(report.published.segments, 3, "{}", report.summary());

    let (status, init) = get(port, "/live/stream-0/init.mp4");
    assert_eq!(status, 200);
    // Segment 2 starts the loop again, renumbered to follow segment 1.
    let mut parts = Vec::new();
    for i in 0..4 {
        let (status, part) = get(port, &format!("/live/stream-0/seg-2.{i}.m4s"));
        assert_eq!(status, 200);
        parts.push(part);
    }
    let (_, whole) = get(port, "/live/stream-0/seg-2.m4s");
    assert!(whole == parts.concat(), "seg-2.m4s is its parts end to end");
    // A player joining at part 0 decodes it alone: it starts with a key frame.
    let first = dir.path().join("part0.mp4");
    std::fs::write(&first, [init.as_slice(), &parts[0]].concat()).unwrap();
    let t = sorted_frame_times(&first);
    assert_eq!(t.len(), 6, "{t:?}");
    assert!((t[0] - 2.0).abs() < 1e-3, "segment 2 starts at 2 s: {t:?}");
    // The init segment and the four parts: every frame of the second, in order.
    let all = dir.path().join("seg2.mp4");
    std::fs::write(&all, [init.as_slice(), &parts.concat()].concat()).unwrap();
    let t = sorted_frame_times(&all);
    assert_eq!(t.len(), 24, "{t:?}");
    assert!(
        t.windows(2)
            .all(|w| (w[1] - w[0] - 1.0 / 24.0).abs() < 2e-3),
        "one frame every 1/24 s: {t:?}"
    );
}
