//! Content-Type by file extension, with the video and streaming-manifest types first.

use std::path::Path;

/// Media type for a file name; `application/octet-stream` when the extension is unknown.
pub fn content_type(path: &Path) -> &'static str {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    // Lowercased on the stack; an extension longer than any known matches none.
    let mut lower = [0u8; 8];
    match crate::ascii_lowercase_in(ext, &mut lower) {
        "mp4" | "m4v" | "cmfv" => "video/mp4",
        "m4s" => "video/iso.segment",
        "m4a" | "cmfa" => "audio/mp4",
        "webm" => "video/webm",
        "weba" => "audio/webm",
        "mkv" => "video/x-matroska",
        "mov" => "video/quicktime",
        "ts" | "m2ts" => "video/mp2t",
        "flv" => "video/x-flv",
        "ogv" => "video/ogg",
        "ogg" | "oga" => "audio/ogg",
        "aac" => "audio/aac",
        "mp3" => "audio/mpeg",
        "mpd" => "application/dash+xml",
        "m3u8" => "application/vnd.apple.mpegurl",
        "vtt" => "text/vtt; charset=utf-8",
        "ttml" | "dfxp" => "application/ttml+xml",
        "srt" => "application/x-subrip",
        "xml" => "application/xml",
        "json" => "application/json",
        "html" | "htm" => "text/html; charset=utf-8",
        "txt" => "text/plain; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "map" => "application/json",
        "wasm" => "application/wasm",
        "svg" => "image/svg+xml",
        "jpg" | "jpeg" => "image/jpeg",
        "png" => "image/png",
        "webp" => "image/webp",
        "gif" => "image/gif",
        "ico" => "image/x-icon",
        "avif" => "image/avif",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn video_types() {
        for (name, want) in [
            ("a/b.MP4", "video/mp4"),
            ("seg-1.m4s", "video/iso.segment"),
            ("x.mpd", "application/dash+xml"),
            ("x.m3u8", "application/vnd.apple.mpegurl"),
            ("x.ts", "video/mp2t"),
            ("noext", "application/octet-stream"),
            // Longer than any known extension, including one whose prefix is known.
            ("a.mp4mp4mp4", "application/octet-stream"),
            ("A.WEBP", "image/webp"),
            // What a web player page loads: ES modules must not go out as octet-stream.
            ("dash.all.min.mjs", "text/javascript; charset=utf-8"),
            ("p.css", "text/css; charset=utf-8"),
            ("sub.vtt", "text/vtt; charset=utf-8"),
            ("sub.ttml", "application/ttml+xml"),
            ("a.wasm", "application/wasm"),
            ("i.svg", "image/svg+xml"),
        ] {
            assert_eq!(content_type(Path::new(name)), want, "{name}");
        }
    }
}
