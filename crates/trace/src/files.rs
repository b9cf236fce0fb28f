//! The file table: nominal bit rate, media type, size and drive of every file, read from a
//! `files.csv` (`file,bitrate_kbps,media,size_bytes,drive`) or from a `catalog.json`.

use std::hash::BuildHasher;
use std::path::Path;

use hashbrown::hash_table::HashTable;

use vodkit_workload::model::{Catalog, Media};

/// What the table knows of a file besides its name and drive ([`FileTable::get`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FileInfo {
    pub bitrate_kbps: Option<u32>,
    pub media: Option<Media>,
    pub size_bytes: Option<u64>,
}

#[cfg(test)]
impl FileInfo {
    /// A file of `media` at `kbps`, its size not known.
    pub(crate) fn of(media: Media, kbps: u32) -> FileInfo {
        FileInfo {
            bitrate_kbps: Some(kbps),
            media: Some(media),
            size_bytes: None,
        }
    }
}

/// Strings interned once: every one in a single buffer, one after the other in the order
/// they were first seen (their ids), found through a hash table of ids that compares
/// against the buffer, so each string is stored once.
#[derive(Clone, Debug, Default)]
struct Names {
    text: String,
    /// Where each string ends in `text`.
    ends: Vec<u64>,
    /// Ids by the hash of their string.
    index: HashTable<u32>,
    /// A fast seeded hasher (names come from the log, one lookup per request).
    hasher: foldhash::fast::RandomState,
}

/// The string of `id` in an interner's buffer.
fn string_at<'t>(text: &'t str, ends: &[u64], id: u32) -> &'t str {
    let i = id as usize;
    let start = if i == 0 { 0 } else { ends[i - 1] as usize };
    &text[start..ends[i] as usize]
}

impl Names {
    fn get(&self, id: u32) -> &str {
        string_at(&self.text, &self.ends, id)
    }

    fn find(&self, s: &str) -> Option<u32> {
        let hash = self.hasher.hash_one(s);
        self.index.find(hash, |&id| self.get(id) == s).copied()
    }

    /// The id of `s` (the next one when new), and whether it is new.
    fn intern(&mut self, s: &str) -> (u32, bool) {
        let hash = self.hash(s);
        self.intern_hashed(s, hash)
    }

    fn hash(&self, s: &str) -> u64 {
        self.hasher.hash_one(s)
    }

    /// [`Names::intern`] with `hash` = [`Names::hash`] of `s`.
    fn intern_hashed(&mut self, s: &str, hash: u64) -> (u32, bool) {
        let Names {
            text,
            ends,
            index,
            hasher,
        } = self;
        // Found first, inserted only when new: `entry` makes room before it looks, so
        // calling it for a name already held would grow the table at a moment that
        // depends on which lookups [`Recent`] answered.
        if let Some(&id) = index.find(hash, |&id| string_at(text, ends, id) == s) {
            return (id, false);
        }
        let id = ends.len() as u32;
        text.push_str(s);
        ends.push(text.len() as u64);
        index.insert_unique(hash, id, |&id| hasher.hash_one(string_at(text, ends, id)));
        (id, true)
    }

    /// Heap bytes held (capacities, not lengths: what the allocator gave).
    fn bytes(&self) -> usize {
        self.text.capacity()
            + self.ends.capacity() * std::mem::size_of::<u64>()
            + self.index.allocation_size()
    }
}

/// Files looked up lately, by their names' hashes: one cache line each with the name, its
/// id and what is known of it. A log names, line after line, the files its open sessions are
/// reading, a small set next to the table; a hit here reads one line of a small array where
/// the table's index, the name's end and its text are three reads spread over megabytes.
#[derive(Clone, Debug, Default)]
struct Recent {
    /// A power of two of slots once the first name is looked up: [`RECENT_SLOTS`], more
    /// as the table grows ([`Recent::wanted`]).
    slots: Vec<Slot>,
}

/// Slots of [`Recent`] at first (a power of two): 256 KiB, well inside a core's own cache.
const RECENT_SLOTS: usize = 4096;
/// Most slots of [`Recent`]: 4 MiB, in the processor's shared cache. A log of a million
/// files read by tens of thousands of sessions reads tens of thousands of them at once;
/// with 4,096 slots the analysis of such a log (54 M requests, 1.18 M files) took about
/// 1.2 times as long on one thread.
const RECENT_SLOTS_MAX: usize = 65536;
/// Longest name a [`Slot`] holds; longer ones always go through the table.
const RECENT_NAME: usize = 35;

#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
struct Slot {
    hash: u64,
    info: Packed,
    id: u32,
    /// The name's length plus one; 0: empty.
    len: u8,
    name: [u8; RECENT_NAME],
}

impl Recent {
    /// Slots for a table of `files`: one for every sixteen files, within
    /// [`RECENT_SLOTS`]..=[`RECENT_SLOTS_MAX`].
    fn wanted(files: usize) -> usize {
        (files / 16)
            .next_power_of_two()
            .clamp(RECENT_SLOTS, RECENT_SLOTS_MAX)
    }

    /// The slot of `hash` (a power of two of slots; 0, past the end, while there are none).
    fn at(&self, hash: u64) -> usize {
        (hash >> 32) as usize & self.slots.len().saturating_sub(1)
    }

    fn find(&self, hash: u64, name: &str) -> Option<(u32, Packed)> {
        let s = self.slots.get(self.at(hash))?;
        let n = usize::from(s.len).checked_sub(1)?;
        (s.hash == hash && s.name.get(..n) == Some(name.as_bytes())).then_some((s.id, s.info))
    }

    /// Ask the CPU for the slot of `hash`.
    fn prefetch(&self, hash: u64) {
        if let Some(slot) = self.slots.get(self.at(hash)) {
            crate::cacheline::prefetch(slot);
        }
    }

    /// Remember `name` as `id` with `info`; the slots, emptied, grow to what a table of
    /// `files` wants first.
    fn put(&mut self, hash: u64, name: &str, id: u32, info: Packed, files: usize) {
        if name.len() > RECENT_NAME {
            return;
        }
        let wanted = Recent::wanted(files);
        if self.slots.len() < wanted {
            let empty = Slot {
                hash: 0,
                info: Packed::default(),
                id: 0,
                len: 0,
                name: [0; RECENT_NAME],
            };
            self.slots = vec![empty; wanted];
        }
        let at = self.at(hash);
        let s = &mut self.slots[at];
        s.hash = hash;
        s.info = info;
        s.id = id;
        // At most RECENT_NAME bytes: the length fits a byte.
        s.len = name.len() as u8 + 1;
        s.name[..name.len()].copy_from_slice(name.as_bytes());
    }

    fn bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot>()
    }
}

/// A [`FileInfo`] and a drive in 16 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Packed {
    size_bytes: u64,
    bitrate_kbps: u32,
    /// 0: not known; else the drive's id in [`FileTable::drives`] plus one.
    drive: u16,
    /// Bits 0-1: the media (0: not known, else its place in [`MEDIA`] plus one); bit 2: bit
    /// rate known; bit 3: size known. All zero: nothing known, as [`FileInfo::default`].
    flags: u8,
}

const HAS_BITRATE: u8 = 1 << 2;
const HAS_SIZE: u8 = 1 << 3;

impl Packed {
    fn new(f: &FileInfo, drive: u16) -> Packed {
        let mut flags = match f.media {
            None => 0,
            m => media_slot(m) as u8 + 1,
        };
        if f.bitrate_kbps.is_some() {
            flags |= HAS_BITRATE;
        }
        if f.size_bytes.is_some() {
            flags |= HAS_SIZE;
        }
        Packed {
            size_bytes: f.size_bytes.unwrap_or(0),
            bitrate_kbps: f.bitrate_kbps.unwrap_or(0),
            drive,
            flags,
        }
    }

    fn info(self) -> FileInfo {
        FileInfo {
            bitrate_kbps: (self.flags & HAS_BITRATE != 0).then_some(self.bitrate_kbps),
            media: match self.flags & 3 {
                0 => None,
                m => MEDIA[usize::from(m - 1)],
            },
            size_bytes: (self.flags & HAS_SIZE != 0).then_some(self.size_bytes),
        }
    }
}

/// Files by name, with dense ids (in the order they were added) for the analyzer. Each
/// name is stored once ([`Names`]), what is known of it in 16 bytes and drives as small
/// ids: about 40 bytes a file beyond its name's ([`FileTable::bytes`]).
#[derive(Clone, Debug, Default)]
pub struct FileTable {
    names: Names,
    /// By id.
    info: Vec<Packed>,
    /// What [`FileTable::intern_info`] found lately.
    recent: Recent,
    /// The drives' names (few).
    drives: Names,
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

/// The media as the statistics tables name it: "unknown" where not known.
pub fn media_label(m: Option<Media>) -> &'static str {
    match m {
        None => "unknown",
        known => media_name(known),
    }
}

/// Calls `each` with every record of `rdr` and its line number; a record that cannot be
/// read ends the reading with `origin: error`.
pub(crate) fn each_csv_record<R: std::io::Read>(
    rdr: &mut csv::Reader<R>,
    origin: &str,
    mut each: impl FnMut(&csv::StringRecord, u64) -> Result<(), String>,
) -> Result<(), String> {
    let mut rec = csv::StringRecord::new();
    loop {
        match rdr.read_record(&mut rec) {
            Ok(true) => {}
            Ok(false) => return Ok(()),
            Err(e) => return Err(format!("{origin}: {e}")),
        }
        each(&rec, rec.position().map_or(0, |p| p.line()))?;
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
        self.info.len()
    }

    pub fn is_empty(&self) -> bool {
        self.info.is_empty()
    }

    /// What is known of file `id`.
    pub fn get(&self, id: u32) -> FileInfo {
        self.info[id as usize].info()
    }

    /// The name of file `id`.
    pub fn name(&self, id: u32) -> &str {
        self.names.get(id)
    }

    /// The drive of file `id`, when known.
    pub fn drive(&self, id: u32) -> Option<&str> {
        match self.info[id as usize].drive {
            0 => None,
            d => Some(self.drives.get(u32::from(d) - 1)),
        }
    }

    pub fn lookup(&self, name: &str) -> Option<u32> {
        self.names.find(normalize_name(name))
    }

    /// The id of `name`, adding an entry without metadata for files the table lacks.
    pub fn intern(&mut self, name: &str) -> u32 {
        self.intern_info(name).0
    }

    /// Fetch into the cache the slot of the recently looked-up names where `name` would
    /// be, some requests before [`FileTable::intern_info`] looks it up.
    pub(crate) fn prefetch(&self, name: &str) {
        self.recent.prefetch(self.names.hash(normalize_name(name)));
    }

    /// [`FileTable::intern`], and what is known of the file ([`FileTable::get`]).
    pub fn intern_info(&mut self, name: &str) -> (u32, FileInfo) {
        let name = normalize_name(name);
        let hash = self.names.hash(name);
        if let Some((id, info)) = self.recent.find(hash, name) {
            return (id, info.info());
        }
        let (id, new) = self.names.intern_hashed(name, hash);
        if new {
            self.info.push(Packed::default());
        }
        let info = self.info[id as usize];
        self.recent.put(hash, name, id, info, self.info.len());
        (id, info.info())
    }

    /// Add a file the table does not hold yet and return its id.
    pub fn insert(
        &mut self,
        name: &str,
        info: FileInfo,
        drive: Option<&str>,
    ) -> Result<u32, String> {
        let name = normalize_name(name);
        if self.names.find(name).is_some() {
            return Err(format!("file {name} listed twice"));
        }
        let drive = match drive {
            None => 0,
            Some(d) => {
                let (id, _) = self.drives.intern(d);
                u16::try_from(id + 1)
                    .map_err(|_| format!("file {name}: more than {} distinct drives", u16::MAX))?
            }
        };
        let (id, _) = self.names.intern(name);
        self.info.push(Packed::new(&info, drive));
        Ok(id)
    }

    /// Heap bytes the table holds: its names once, 16 bytes of metadata, 8 of where the
    /// name ends and the hash index's 4-byte id and control byte per bucket for every file,
    /// and the recently looked-up names (256 KiB to 4 MiB, a line for every sixteen files)
    /// once a name has been looked up.
    pub fn bytes(&self) -> usize {
        self.names.bytes()
            + self.info.capacity() * std::mem::size_of::<Packed>()
            + self.drives.bytes()
            + self.recent.bytes()
    }

    /// Read a `files.csv` (RFC 4180 quoting, read with the `csv` crate). Errors name the
    /// line and field.
    pub fn from_csv(path: &Path) -> Result<FileTable, String> {
        let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse_csv(std::io::BufReader::new(f), &path.display().to_string())
    }

    /// A `files.csv` read from `input`, as [`FileTable::from_csv`]; errors start with
    /// `origin` (the file's name).
    pub fn parse_csv(input: impl std::io::Read, origin: &str) -> Result<FileTable, String> {
        let mut rdr = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .trim(csv::Trim::All)
            .from_reader(input);
        let mut t = FileTable::default();
        let mut cols: Option<[usize; 5]> = None;
        each_csv_record(&mut rdr, origin, |rec, n| {
            if rec.iter().all(str::is_empty) {
                return Ok(());
            }
            let fields: Vec<&str> = rec.iter().collect();
            let Some(c) = cols else {
                let pos = |name: &str| {
                    fields.iter().position(|f| *f == name).ok_or_else(|| {
                        format!(
                            "{origin}:{n}: header must name file,bitrate_kbps,media,size_bytes,drive (missing {name})"
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
                return Ok(());
            };
            let get = |k: usize| fields.get(c[k]).copied().unwrap_or("");
            let bad =
                |field: &str, want: &str| format!("{origin}:{n}: field {field}: expected {want}");
            let bitrate = get(1);
            let size = get(3);
            let media = get(2);
            let info = FileInfo {
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
            };
            let name = get(0);
            if name.is_empty() {
                return Err(bad("file", "a file name"));
            }
            let drive = Some(get(4)).filter(|d| !d.is_empty());
            t.insert(name, info, drive)
                .map_err(|e| format!("{origin}:{n}: {e}"))?;
            Ok(())
        })?;
        if cols.is_none() {
            return Err(format!("{origin}: empty file table"));
        }
        t.shrink_to_fit();
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
                    let info = FileInfo {
                        bitrate_kbps: Some(r.bitrate_kbps),
                        media: Some(r.media),
                        size_bytes: Some(f.size_bytes),
                    };
                    t.insert(&f.path, info, None)
                        .map_err(|e| format!("{}: {e}", path.display()))?;
                }
            }
        }
        t.shrink_to_fit();
        Ok(t)
    }

    /// Give back what the buffers hold beyond their contents (once a table is read).
    fn shrink_to_fit(&mut self) {
        for n in [&mut self.names, &mut self.drives] {
            n.text.shrink_to_fit();
            n.ends.shrink_to_fit();
            let Names {
                text,
                ends,
                index,
                hasher,
            } = n;
            index.shrink_to_fit(|&id| hasher.hash_one(string_at(text, ends, id)));
        }
        self.info.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_table_reads_and_reports_bad_fields() {
        let text = "file,bitrate_kbps,media,size_bytes,drive\nnf/a.mp4,96,audio,1000,d01\n/v.mp4,,,,\n\"w, \"\"x\"\".mp4\",1,,,\n";
        let t = FileTable::parse_csv(text.as_bytes(), "files.csv").unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(
            t.name(2),
            "w, \"x\".mp4",
            "quoted name with a comma and quotes"
        );
        let id = t.lookup("/nf/a.mp4").unwrap();
        let a = t.get(id);
        assert_eq!(a.bitrate_kbps, Some(96));
        assert_eq!(a.media, Some(Media::Audio));
        assert_eq!(t.drive(id), Some("d01"));
        assert_eq!(t.drive(1), None);
        assert_eq!(t.get(t.lookup("v.mp4").unwrap()).size_bytes, None);
        let bad = "file,bitrate_kbps,media,size_bytes,drive\nx,9k,video,1,d\n";
        let e = FileTable::parse_csv(bad.as_bytes(), "files.csv").unwrap_err();
        assert!(e.contains("files.csv:2: field bitrate_kbps"), "{e}");
    }

    /// Names of files as a catalog spells them, many per title and rendition.
    fn name(i: u32) -> String {
        format!("nf/t{:05}/v{}.mp4", i / 7, 235 + (i % 7) * 500)
    }

    #[test]
    fn recently_seen_names_give_the_table_s_ids_and_metadata() {
        // More names than the recent slots hold, short and long (past what a slot keeps),
        // looked up again in an order that both hits and evicts them; enough names that the
        // slots grow on the way.
        let n = 12 * RECENT_SLOTS as u32;
        let long = |i: u32| format!("collections/a-name-longer-than-a-slot/{}", name(i));
        let mut t = FileTable::default();
        for i in 0..n / 2 {
            let info = FileInfo {
                bitrate_kbps: Some(i),
                media: MEDIA[(i % 4) as usize],
                size_bytes: (i % 3 != 0).then_some(u64::from(i) << 10),
            };
            t.insert(&name(i), info, None).unwrap();
        }
        let mut want = FileTable::default();
        for i in (0..n).chain((0..n).rev().step_by(5)).chain(0..n) {
            for file in [name(i), long(i)] {
                let (id, info) = t.intern_info(&format!("/{file}?x=1"));
                // The plain table, without the recent slots in the way.
                let id_plain = t.names.find(&file).unwrap();
                assert_eq!(id, id_plain, "{file}");
                assert_eq!(info, t.get(id), "{file}");
                want.intern(&file);
            }
        }
        assert_eq!(t.len(), 2 * n as usize);
        assert_eq!(want.len(), t.len());
        assert_eq!(t.recent.slots.len(), Recent::wanted(t.len()));
        assert!(t.recent.slots.len() > RECENT_SLOTS);
    }

    #[test]
    fn the_table_grows_only_when_a_name_is_added() {
        // Names past a slot's length always reach the table's index; looking each up again
        // right after adding it must not change what the table holds, whatever the count
        // (a lookup that made room before looking grew a full table a step early).
        for n in 1..300u32 {
            let long = |i: u32| format!("a-name-longer-than-a-recent-slot-holds/{i:08}.mp4");
            let (mut once, mut twice) = (FileTable::default(), FileTable::default());
            for i in 0..n {
                once.intern(&long(i));
                twice.intern(&long(i));
                twice.intern(&long(i));
            }
            assert_eq!(once.bytes(), twice.bytes(), "{n} names");
        }
    }

    #[test]
    fn interned_names_keep_first_seen_ids_and_are_stored_once() {
        let n = 100_000u32;
        let mut t = FileTable::default();
        // Table entries first, with metadata and one of a few drives, then the log's
        // names: known ones keep their ids, new ones get the next ids in order.
        for i in 0..n / 2 {
            let info = FileInfo {
                bitrate_kbps: (i % 11 != 0).then_some(i % 5000),
                media: MEDIA[(i % 4) as usize],
                size_bytes: (i % 3 != 0).then_some(u64::from(i) << 20),
            };
            let drive = format!("d{:02}", i % 36);
            let drive = (i % 10 != 0).then_some(drive.as_str());
            assert_eq!(t.insert(&name(i), info, drive), Ok(i));
        }
        assert!(t
            .insert(&format!("/{}", name(7)), FileInfo::default(), None)
            .unwrap_err()
            .contains("listed twice"));
        for i in (0..n).rev().step_by(3).chain(0..n) {
            let id = t.intern(&format!("/{}?start=0", name(i)));
            if i < n / 2 {
                assert_eq!(id, i, "a table entry keeps its id");
            }
        }
        assert_eq!(t.len(), n as usize);
        // Names first seen in the log: ids in the order they were seen.
        let mut want = n / 2;
        for i in (0..n).rev().step_by(3).chain(0..n) {
            if i >= n / 2 && t.lookup(&name(i)) == Some(want) {
                want += 1;
            }
        }
        assert_eq!(want, n, "every new name got the next id in order");
        for i in 0..n {
            let id = t.lookup(&name(i)).unwrap();
            assert_eq!(t.name(id), name(i));
            let f = t.get(id);
            if id < n / 2 {
                assert_eq!(f.bitrate_kbps, (id % 11 != 0).then_some(id % 5000));
                assert_eq!(f.media, MEDIA[(id % 4) as usize]);
                assert_eq!(f.size_bytes, (id % 3 != 0).then_some(u64::from(id) << 20));
                let d = t.drive(id);
                assert_eq!(
                    d.map(str::to_string),
                    (id % 10 != 0).then(|| format!("d{:02}", id % 36))
                );
            } else {
                assert_eq!((f, t.drive(id)), (FileInfo::default(), None));
            }
        }
        assert_eq!(t.lookup("nf/t99999/v1.mp4"), None);
        assert_eq!(t.lookup(""), None);
        // Each name once, plus well under 64 bytes a file for everything else.
        assert_eq!(std::mem::size_of::<Packed>(), 16);
        let names: usize = (0..n).map(|i| name(i).len()).sum();
        let per_file = (t.bytes() - names) / n as usize;
        assert!(
            t.bytes() > names && per_file < 64,
            "{} bytes: {per_file} a file",
            t.bytes()
        );
    }
}
