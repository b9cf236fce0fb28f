//! Real clients against the origin: curl (single and multiple ranges) and ffprobe/ffmpeg
//! reading and seeking an MP4 that ffmpeg makes at test time (no media is committed).

use crate::common;

use std::path::Path;
use std::process::Command;

use common::{pattern, run_ok as run, TestServer};
use vodkit_testkit::{needs, Need};

#[test]
fn curl_single_and_multi_range() {
    if !needs(&[Need::Tool("curl")]) {
        return;
    }
    let s = TestServer::start();
    let b = pattern(1024 * 1024 + 3);
    let out = run(Command::new("curl").args(["-sS", "-r", "1000-1999", &s.url("/video.mp4")]));
    assert_eq!(out.stdout, &b[1000..2000]);
    let out = run(Command::new("curl").args([
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code} %{size_download}",
        "-r",
        "-10",
        &s.url("/video.mp4"),
    ]));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "206 10");
    // Multi-range: curl prints the raw multipart body; check each part's data is in it.
    let out = run(Command::new("curl").args([
        "-sS",
        "-D",
        "-",
        "-r",
        "0-99,5000-5099",
        &s.url("/video.mp4"),
    ]));
    let text = out.stdout;
    let head =
        String::from_utf8_lossy(&text[..text.windows(4).position(|w| w == b"\r\n\r\n").unwrap()])
            .to_string();
    assert!(head.contains("multipart/byteranges; boundary="), "{head}");
    assert!(text.windows(100).any(|w| w == &b[0..100]));
    assert!(text.windows(100).any(|w| w == &b[5000..5100]));
    assert!(String::from_utf8_lossy(&text).contains("Content-Range: bytes 5000-5099/1048579"));
    // Whole file, then a conditional re-fetch with the ETag curl saw.
    let dir = tempfile::tempdir().unwrap();
    let etag_file = dir.path().join("etag");
    let out = run(Command::new("curl")
        .args(["-sS", "--etag-save"])
        .arg(&etag_file)
        .arg(s.url("/video.mp4")));
    assert_eq!(out.stdout, b);
    let out = run(Command::new("curl")
        .args([
            "-sS",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--etag-compare",
        ])
        .arg(&etag_file)
        .arg(s.url("/video.mp4")));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "304");
}

fn make_mp4(path: &Path) {
    run(Command::new("ffmpeg")
        .args([
            "-hide_banner",
            "-loglevel",
            "error",
            "-y",
            "-f",
            "lavfi",
            "-i",
            "testsrc=duration=5:size=320x240:rate=25",
            "-c:v",
            "mpeg4",
            "-q:v",
            "5",
            "-movflags",
            "+faststart",
        ])
        .arg(path));
}

#[test]
fn ffprobe_and_ffmpeg_read_and_seek_over_http() {
    if !needs(&[Need::Tool("ffmpeg"), Need::Tool("ffprobe")]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let log2 = log.clone();
    let s = TestServer::start_with(move |c| c.access_log = Some(log2));
    let mp4 = s.root().join("clip.mp4");
    make_mp4(&mp4);
    let out = run(Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-show_entries",
            "format=duration:stream=codec_name,width,height,nb_frames",
            "-of",
            "default=nw=1",
        ])
        .arg(s.url("/clip.mp4")));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("width=320") && text.contains("height=240"),
        "{text}"
    );
    assert!(text.contains("nb_frames=125"), "{text}");
    let duration: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("duration="))
        .unwrap()
        .parse()
        .unwrap();
    assert!((duration - 5.0).abs() < 0.1, "{duration}");
    // Decode the whole clip over HTTP and check the frame count.
    let out = run(Command::new("ffmpeg")
        .args(["-hide_banner", "-v", "error", "-i"])
        .arg(s.url("/clip.mp4"))
        .args(["-f", "framemd5", "-"]));
    let frames = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .count();
    assert_eq!(frames, 125);
    // Seek to 3.5 s: ffmpeg issues a range request into the middle of the file.
    let out = run(Command::new("ffmpeg")
        .args(["-hide_banner", "-v", "error", "-ss", "3.5", "-i"])
        .arg(s.url("/clip.mp4"))
        .args(["-frames:v", "5", "-f", "framemd5", "-"]));
    let seeked = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .count();
    assert_eq!(seeked, 5);
    s.stop();
    let logged = std::fs::read_to_string(&log).unwrap();
    let ranged = logged
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.split('\t').nth(8) != Some("-"))
        .count();
    assert!(ranged > 0, "ffmpeg sent range requests:\n{logged}");
    assert!(
        logged.lines().filter(|l| !l.starts_with('#')).all(|l| {
            let status = l.split('\t').nth(9).unwrap();
            status == "200" || status == "206"
        }),
        "{logged}"
    );
}
