//! The file table: nominal bit rate, media type, size and drive of every file, read from a
//! `files.csv` (`file,bitrate_kbps,media,size_bytes,drive`) or from a `catalog.json`.

use std::collections::HashMap;
use std::path::Path;

use vodkit_workload::model::{Catalog, Media};

#[derive(Clone, Debug, Default, PartialEq)]
pub struct FileInfo {
    pub name: String,
    pub bitrate_kbps: Option<u32>,
    pub media: Option<Media>,
    pub size_bytes: Option<u64>,
    pub drive: Option<String>,
}

/// Files by name, with dense ids for the analyzer.
#[derive(Clone, Debug, Default)]
pub struct FileTable {
    pub files: Vec<FileInfo>,
    /// Name → id; a fast seeded hasher (names come from the log, one lookup per request).
    index: HashMap<String, u32, foldhash::fast::RandomState>,
}

pub fn parse_media(s: &str) -> Option<Media> {
    match s {
        "audio" => Some(Media::Audio),
        "video" => Some(Media::Video),
        "combined" => Some(Media::Combined),
        _ => None,
    }
}

/// The media the statistics tables break down by, in their order (`None`: not known).
pub const MEDIA: [Option<Media>; 4] = [
    Some(Media::Audio),
    Some(Media::Video),
    Some(Media::Combined),
    None,
];

/// The place of `m` in [`MEDIA`].
pub fn media_slot(m: Option<Media>) -> usize {
    match m {
        Some(Media::Audio) => 0,
        Some(Media::Video) => 1,
        Some(Media::Combined) => 2,
        None => 3,
    }
}

pub fn media_name(m: Option<Media>) -> &'static str {
    match m {
        Some(Media::Audio) => "audio",
        Some(Media::Video) => "video",
        Some(Media::Combined) => "combined",
        None => "",
    }
}

/// A file name as logs and tables spell it: no leading slash, no query string.
pub fn normalize_name(path: &str) -> &str {
    let p = match memchr::memchr2(b'?', b'#', path.as_bytes()) {
        // An ASCII byte: a character boundary.
        Some(i) => &path[..i],
        None => path,
    };
    p.trim_start_matches('/')
}

impl FileTable {
    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    pub fn get(&self, id: u32) -> &FileInfo {
        &self.files[id as usize]
    }

    pub fn lookup(&self, name: &str) -> Option<u32> {
        self.index.get(normalize_name(name)).copied()
    }

    /// The id of `name`, adding an entry without metadata for files the table lacks.
    pub fn intern(&mut self, name: &str) -> u32 {
        let name = normalize_name(name);
        if let Some(&id) = self.index.get(name) {
            return id;
        }
        let id = self.files.len() as u32;
        self.files.push(FileInfo {
            name: name.to_string(),
            ..Default::default()
        });
        self.index.insert(name.to_string(), id);
        id
    }

    fn insert(&mut self, info: FileInfo) -> Result<(), String> {
        let name = normalize_name(&info.name).to_string();
        if self.index.contains_key(&name) {
            return Err(format!("file {name} listed twice"));
        }
        self.index.insert(name.clone(), self.files.len() as u32);
        self.files.push(FileInfo { name, ..info });
        Ok(())
    }

    /// Read a `files.csv` (RFC 4180 quoting, read with the `csv` crate). Errors name the
    /// line and field.
    pub fn from_csv(path: &Path) -> Result<FileTable, String> {
        let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut rdr = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .trim(csv::Trim::All)
            .from_reader(std::io::BufReader::new(f));
        let mut t = FileTable::default();
        let mut cols: Option<[usize; 5]> = None;
        let mut rec = csv::StringRecord::new();
        loop {
            match rdr.read_record(&mut rec) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => return Err(format!("{}: {e}", path.display())),
            }
            let n = rec.position().map_or(0, |p| p.line());
            if rec.iter().all(str::is_empty) {
                continue;
            }
            let fields: Vec<&str> = rec.iter().collect();
            let Some(c) = cols else {
                let pos = |name: &str| {
                    fields.iter().position(|f| *f == name).ok_or_else(|| {
                        format!(
                            "{}:{n}: header must name file,bitrate_kbps,media,size_bytes,drive (missing {name})",
                            path.display()
                        )
                    })
                };
                cols = Some([
                    pos("file")?,
                    pos("bitrate_kbps")?,
                    pos("media")?,
                    pos("size_bytes")?,
                    pos("drive")?,
                ]);
                continue;
            };
            let get = |k: usize| fields.get(c[k]).copied().unwrap_or("");
            let bad = |field: &str, want: &str| {
                format!("{}:{n}: field {field}: expected {want}", path.display())
            };
            let bitrate = get(1);
            let size = get(3);
            let media = get(2);
            let info = FileInfo {
                name: get(0).to_string(),
                bitrate_kbps: if bitrate.is_empty() {
                    None
                } else {
                    Some(
                        bitrate
                            .parse()
                            .map_err(|_| bad("bitrate_kbps", "kbit/s as an integer"))?,
                    )
                },
                media: if media.is_empty() {
                    None
                } else {
                    Some(
                        parse_media(media)
                            .ok_or_else(|| bad("media", "audio, video or combined"))?,
                    )
                },
                size_bytes: if size.is_empty() {
                    None
                } else {
                    Some(
                        size.parse()
                            .map_err(|_| bad("size_bytes", "bytes as an integer"))?,
                    )
                },
                drive: Some(get(4).to_string()).filter(|d| !d.is_empty()),
            };
            if info.name.is_empty() {
                return Err(bad("file", "a file name"));
            }
            t.insert(info)
                .map_err(|e| format!("{}:{n}: {e}", path.display()))?;
        }
        if cols.is_none() {
            return Err(format!("{}: empty file table", path.display()));
        }
        Ok(t)
    }

    /// Build the table from a `catalog.json` (drive unknown).
    pub fn from_catalog(path: &Path) -> Result<FileTable, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let cat: Catalog =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut t = FileTable::default();
        for title in &cat.titles {
            for r in &title.renditions {
                for f in &r.files {
                    t.insert(FileInfo {
                        name: f.path.clone(),
                        bitrate_kbps: Some(r.bitrate_kbps),
                        media: Some(r.media),
                        size_bytes: Some(f.size_bytes),
                        drive: None,
                    })
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                }
            }
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_table_reads_and_reports_bad_fields() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("files.csv");
        std::fs::write(
            &p,
            "file,bitrate_kbps,media,size_bytes,drive\nnf/a.mp4,96,audio,1000,d01\n/v.mp4,,,,\n\"w, \"\"x\"\".mp4\",1,,,\n",
        )
        .unwrap();
        let t = FileTable::from_csv(&p).unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(
            t.get(2).name,
            "w, \"x\".mp4",
            "quoted name with a comma and quotes"
        );
        let a = t.get(t.lookup("/nf/a.mp4").unwrap());
        assert_eq!(a.bitrate_kbps, Some(96));
        assert_eq!(a.media, Some(Media::Audio));
        assert_eq!(a.drive.as_deref(), Some("d01"));
        assert_eq!(t.get(t.lookup("v.mp4").unwrap()).size_bytes, None);
        std::fs::write(
            &p,
            "file,bitrate_kbps,media,size_bytes,drive\nx,9k,video,1,d\n",
        )
        .unwrap();
        let e = FileTable::from_csv(&p).unwrap_err();
        assert!(e.contains(":2: field bitrate_kbps"), "{e}");
    }
}
