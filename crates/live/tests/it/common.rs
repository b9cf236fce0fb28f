//! What the live tests share: a live origin to publish to, reading back what it holds, a
//! chunked body piece by piece, and the frames ffprobe decodes.

use std::ffi::OsStr;
use std::io::BufRead;
use std::process::Command;

use vodkit_live::{Report, Source};
use vodkit_testkit::http::Client;
use vodkit_testkit::server::TestServer;

/// GET `path` from the origin on `port` of the loopback address: (status, body).
pub fn get(port: u16, path: &str) -> (u16, Vec<u8>) {
    let r = Client::connect(([127, 0, 0, 1], port).into()).get(path, &[]);
    (r.status, r.body)
}

/// A vodkit server over `root` that is a live origin under `/live/` for publishers
/// presenting `token`.
pub fn ingest_origin(root: &std::path::Path, token: &str) -> TestServer {
    TestServer::serving(root, |cfg| {
        cfg.ingest = Some(vodkit_server::live::IngestConfig::new("/live/", token));
    })
}

/// A scratch directory for a test that runs ffmpeg and ffprobe; `None` (the test skipped,
/// or failed under CI) when they are not installed.
pub fn ffmpeg_scratch() -> Option<tempfile::TempDir> {
    vodkit_testkit::needs(&[
        vodkit_testkit::Need::Tool("ffmpeg"),
        vodkit_testkit::Need::Tool("ffprobe"),
    ])
    .then(|| tempfile::tempdir().unwrap())
}

/// The presentation times of the video frames ffprobe decodes from `input` (a file or a
/// URL), in decoding order.
pub fn frame_times(input: impl AsRef<OsStr>) -> Vec<f64> {
    let out = vodkit_testkit::process::run_ok(
        Command::new("ffprobe")
            .args(["-v", "error", "-select_streams", "v:0", "-show_entries"])
            .args(["frame=pts_time", "-of", "csv=p=0"])
            .arg(input),
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().trim_end_matches(',').parse().ok())
        .collect()
}

/// The next chunk of a chunked body read from `r`; `None` at the last (empty) chunk.
pub fn read_chunk(r: &mut impl BufRead) -> Option<Vec<u8>> {
    let mut size = String::new();
    r.read_line(&mut size).unwrap();
    let size = usize::from_str_radix(size.trim(), 16).unwrap();
    let mut data = vec![0u8; size + 2];
    r.read_exact(&mut data).unwrap();
    if size == 0 {
        return None;
    }
    data.truncate(size);
    Some(data)
}

/// Wait until `src` has published all it was to publish, then stop it: its report.
pub fn run_out(src: Source) -> Report {
    while !src.finished() {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    src.stop()
}

/// [`run_out`], every `PUT` of which succeeded.
pub fn run_out_cleanly(src: Source) -> Report {
    let report = run_out(src);
    assert_eq!(report.published.failed_puts, 0, "{}", report.summary());
    report
}
