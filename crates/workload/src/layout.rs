//! How a title's bytes are laid out in files: names, chunk splitting, padding, and the
//! mapping of a byte range of title content onto HTTP requests for those files.
//!
//! A title `sd-000042` is stored as `full/sd-000042.dat` (unchunked) or as
//! `chunk-512k/sd-000042-0000.dat`, `chunk-512k/sd-000042-0001.dat`, ... (chunked). Every
//! layout of a title occupies the same number of bytes on disk: the content size rounded up
//! to the catalog's `pad_to` (thesis 3.5.2); the padding is never requested.

use crate::model::{ByteRange, FileRef, Layout, Rendition};
use crate::units::compact_size;

/// Directory (relative to the served root) that holds a layout's files.
pub fn layout_dir(layout: Layout) -> String {
    match layout {
        Layout::Unchunked => "full".to_string(),
        Layout::Chunked { chunk_bytes } => format!("chunk-{}", compact_size(chunk_bytes)),
    }
}

/// Human name of a layout as accepted by `--layout` (`unchunked`, `chunked:512KiB`).
pub fn layout_name(layout: Layout) -> String {
    match layout {
        Layout::Unchunked => "unchunked".into(),
        Layout::Chunked { chunk_bytes } => {
            let c = compact_size(chunk_bytes);
            match c.strip_suffix(['k', 'm', 'g']) {
                Some(n) => format!("chunked:{n}{}iB", c[n.len()..].to_uppercase()),
                None => format!("chunked:{c}"),
            }
        }
    }
}

/// The files of one title stored under `stem` with `disk_bytes` on disk.
pub fn title_files(stem: &str, layout: Layout, disk_bytes: u64) -> Vec<FileRef> {
    let dir = layout_dir(layout);
    match layout {
        Layout::Unchunked => vec![FileRef {
            path: format!("{dir}/{stem}.dat"),
            size_bytes: disk_bytes,
        }],
        Layout::Chunked { chunk_bytes } => {
            let n = disk_bytes.div_ceil(chunk_bytes).max(1);
            (0..n)
                .map(|k| FileRef {
                    path: format!("{dir}/{stem}-{k:04}.dat"),
                    size_bytes: chunk_bytes.min(disk_bytes - k * chunk_bytes),
                })
                .collect()
        }
    }
}

/// The stem (`sd-000042`) of a rendition written by this module, recovered from its first
/// file name.
pub fn stem_of(r: &Rendition) -> Option<String> {
    let name = r.files.first()?.path.rsplit('/').next()?;
    let base = name.strip_suffix(".dat")?;
    match r.layout {
        Layout::Unchunked => Some(base.to_string()),
        Layout::Chunked { .. } => base.rsplit_once('-').map(|(s, _)| s.to_string()),
    }
}

/// The same rendition stored in another layout (same stem, same on-disk total).
pub fn relayout(r: &Rendition, layout: Layout) -> Option<Rendition> {
    let stem = stem_of(r)?;
    let disk: u64 = r.files.iter().map(|f| f.size_bytes).sum();
    Some(Rendition {
        layout,
        files: title_files(&stem, layout, disk),
        ..r.clone()
    })
}

/// One HTTP request covering part of a title's content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    /// URL path (leading `/`).
    pub path: String,
    pub range: Option<ByteRange>,
    /// Bytes of title content the response carries.
    pub content_bytes: u64,
}

/// The requests that fetch content bytes `[start, end)` of a rendition holding `content`
/// bytes. Unchunked: one range request. Chunked: one request per chunk file touched; a
/// chunk whose content is covered entirely is fetched whole (with its padding, as a client
/// of a chunked server would), otherwise by range.
pub fn pieces(r: &Rendition, start: u64, end: u64) -> Vec<Piece> {
    let end = end.min(r.size_bytes);
    if start >= end {
        return Vec::new();
    }
    match r.layout {
        Layout::Unchunked => vec![Piece {
            path: format!("/{}", r.files[0].path),
            range: Some(ByteRange::Closed {
                first: start,
                last: end - 1,
            }),
            content_bytes: end - start,
        }],
        Layout::Chunked { chunk_bytes } => {
            let mut out = Vec::new();
            let mut m = start / chunk_bytes;
            while m * chunk_bytes < end && (m as usize) < r.files.len() {
                let file_start = m * chunk_bytes;
                let content_in_file = chunk_bytes.min(r.size_bytes - file_start);
                let a = start.max(file_start) - file_start;
                let b = end.min(file_start + chunk_bytes) - file_start;
                let range = if a == 0 && b == content_in_file {
                    None
                } else {
                    Some(ByteRange::Closed {
                        first: a,
                        last: b - 1,
                    })
                };
                out.push(Piece {
                    path: format!("/{}", r.files[m as usize].path),
                    range,
                    content_bytes: b - a,
                });
                m += 1;
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Media;

    fn rendition(layout: Layout, content: u64, disk: u64) -> Rendition {
        Rendition {
            bitrate_kbps: 419,
            media: Media::Combined,
            size_bytes: content,
            layout,
            files: title_files("sd-000007", layout, disk),
        }
    }

    #[test]
    fn chunked_layouts_occupy_the_unchunked_size() {
        let disk = 10 * 524_288 + 4096;
        for chunk in [524_288u64, 2 << 20] {
            let files = title_files("t", Layout::Chunked { chunk_bytes: chunk }, disk);
            assert_eq!(files.iter().map(|f| f.size_bytes).sum::<u64>(), disk);
            assert!(files
                .iter()
                .all(|f| f.size_bytes <= chunk && f.size_bytes > 0));
        }
        assert_eq!(
            title_files("t", Layout::Unchunked, disk)[0].size_bytes,
            disk
        );
    }

    #[test]
    fn stems_survive_relayout() {
        let r = rendition(
            Layout::Chunked {
                chunk_bytes: 524_288,
            },
            1_000_000,
            1_003_520,
        );
        assert_eq!(stem_of(&r).as_deref(), Some("sd-000007"));
        let u = relayout(&r, Layout::Unchunked).unwrap();
        assert_eq!(u.files[0].path, "full/sd-000007.dat");
        assert_eq!(u.files[0].size_bytes, 1_003_520);
        assert_eq!(
            layout_name(Layout::Chunked {
                chunk_bytes: 524_288
            }),
            "chunked:512KiB"
        );
    }

    #[test]
    fn pieces_map_content_to_files() {
        let closed = |first, last| Some(ByteRange::Closed { first, last });
        let u = rendition(Layout::Unchunked, 1_000_000, 1_003_520);
        let p = pieces(&u, 524_288, 1_048_576);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].range, closed(524_288, 999_999));
        assert_eq!(p[0].content_bytes, 475_712);

        let c = rendition(
            Layout::Chunked {
                chunk_bytes: 524_288,
            },
            1_000_000,
            1_003_520,
        );
        // Exactly one chunk: a whole-file GET.
        let p = pieces(&c, 0, 524_288);
        assert_eq!(
            p,
            vec![Piece {
                path: "/chunk-512k/sd-000007-0000.dat".into(),
                range: None,
                content_bytes: 524_288
            }]
        );
        // The last chunk's content, padded on disk, is still fetched whole.
        let p = pieces(&c, 524_288, 1_048_576);
        assert_eq!(p[0].range, None);
        assert_eq!(p[0].content_bytes, 475_712);
        // A request spanning chunks becomes one request per chunk.
        let p = pieces(&c, 262_144, 786_432);
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].range, closed(262_144, 524_287));
        assert_eq!(p[1].range, closed(0, 262_143));
    }
}
