//! The file table: nominal bit rate, media type, size and drive of every file, read from a
//! `files.csv` (`file,bitrate_kbps,media,size_bytes,drive`) or from a `catalog.json`.

use std::borrow::Cow;
use std::cell::Cell;
use std::hash::BuildHasher;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use hashbrown::hash_table::HashTable;

use vodkit_workload::model::{Catalog, Media};

use crate::coldfiles::{Cold, Leaving};

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

    #[cfg(test)]
    fn find(&self, s: &str) -> Option<u32> {
        self.find_hashed(s, self.hash(s))
    }

    fn find_hashed(&self, s: &str, hash: u64) -> Option<u32> {
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

    /// The 16 bytes the part on disk keeps.
    fn to_bytes(self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.size_bytes.to_le_bytes());
        b[8..12].copy_from_slice(&self.bitrate_kbps.to_le_bytes());
        b[12..14].copy_from_slice(&self.drive.to_le_bytes());
        b[14] = self.flags;
        b
    }

    fn from_bytes(b: [u8; 16]) -> Packed {
        let mut size = [0u8; 8];
        size.copy_from_slice(&b[..8]);
        Packed {
            size_bytes: u64::from_le_bytes(size),
            bitrate_kbps: u32::from_le_bytes([b[8], b[9], b[10], b[11]]),
            drive: u16::from_le_bytes([b[12], b[13]]),
            flags: b[14],
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
///
/// Past a limit ([`FileTable::bound`]) the table lets go of the files it holds: they go to
/// disk ([`Cold`]) with their ids, and a name looked up again comes back into memory with
/// its id, so ids and answers are the same as with everything in memory.
#[derive(Debug, Default)]
pub struct FileTable {
    /// The names in memory, by slot: every file's, its slot its id, until the table first
    /// lets go; after that the files added or looked up since it last did.
    names: Names,
    /// By slot.
    info: Vec<Packed>,
    /// The id of each slot, once the table has let go of files.
    ids: Vec<u32>,
    /// Slots by id, once the table has let go of files.
    slots: HashTable<u32>,
    /// Files added: ids `0..files`.
    files: u32,
    /// Files up to the last one [`FileTable::insert`] added: past it, only names first seen
    /// in a log, of which nothing is known.
    listed: u32,
    /// What [`FileTable::intern_info`] found lately.
    recent: Recent,
    /// Once the table has let go of files: the metadata last read back from disk, by id (the
    /// id plus one, 0: empty; a power of two of slots), so that of a file whose sessions
    /// close is read back once, not for every chain and table.
    known: Vec<Cell<(u32, Packed)>>,
    /// The drives' names (few).
    drives: Names,
    /// Bytes the files in memory may fill ([`FileTable::filled`]) before they go to disk
    /// (0: never), and where they go.
    limit: usize,
    spill_dir: PathBuf,
    cold: Option<Box<Cold>>,
    /// The first error reading or writing the part on disk.
    err: OnceLock<String>,
}

/// Most slots of [`FileTable::known`] (1.5 MiB); it gets a power of two of them, one for
/// every 128 bytes of the limit, at least 64.
const KNOWN: usize = 65536;

/// Fewest files the table lets go of at once: below, a limit too small for the files
/// looked up between two spills would make a run of every name.
const LEAVING_MIN: usize = 256;

/// The hash of an id in [`FileTable::slots`].
fn id_hash(id: u32) -> u64 {
    u64::from(id).wrapping_mul(0x9e37_79b9_7f4a_7c15)
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
        self.files as usize
    }

    pub fn is_empty(&self) -> bool {
        self.files == 0
    }

    /// Let go of the files in memory, to a directory made in `dir`, whenever they fill more
    /// than `bytes` (0: never), now if they already do.
    pub fn bound(&mut self, bytes: usize, dir: &Path) {
        self.limit = bytes;
        self.spill_dir = dir.to_path_buf();
        if self.over() {
            self.let_go();
        }
    }

    /// The first error reading or writing the files let go to disk: the answers since may
    /// be wrong.
    pub fn error(&self) -> Option<&str> {
        self.err.get().map(String::as_str)
    }

    /// Times the table let go of files with new ids to disk.
    pub fn spills(&self) -> usize {
        self.cold.as_ref().map_or(0, |c| c.writes())
    }

    fn fail(&self, e: std::io::Error) {
        let _ = self.err.set(format!("file table on disk: {e}"));
    }

    /// The slot of file `id` in memory.
    fn slot(&self, id: u32) -> Option<usize> {
        if self.cold.is_none() {
            return Some(id as usize);
        }
        self.slots
            .find(id_hash(id), |&s| self.ids[s as usize] == id)
            .map(|&s| s as usize)
    }

    fn packed(&self, id: u32) -> Packed {
        let Some(cold) = &self.cold else {
            return self.info[id as usize];
        };
        if let Some(k) = self
            .known
            .get(id as usize & self.known.len().wrapping_sub(1))
        {
            let (known, p) = k.get();
            if known == id.wrapping_add(1) {
                return p;
            }
        }
        if let Some(s) = self.slot(id) {
            return self.info[s];
        }
        if id >= self.listed {
            return Packed::default();
        }
        match cold.packed(id) {
            Ok(b) => {
                let p = Packed::from_bytes(b);
                self.remember(id, p);
                p
            }
            Err(e) => {
                self.fail(e);
                Packed::default()
            }
        }
    }

    /// What is known of file `id`.
    pub fn get(&self, id: u32) -> FileInfo {
        self.packed(id).info()
    }

    /// The name of file `id` (read back from disk when the table let go of it).
    pub fn name(&self, id: u32) -> Cow<'_, str> {
        if let Some(s) = self.slot(id) {
            return Cow::Borrowed(self.names.get(s as u32));
        }
        match self.cold.as_ref().map(|c| c.name(id)) {
            Some(Ok(n)) => Cow::Owned(n),
            Some(Err(e)) => {
                self.fail(e);
                Cow::Borrowed("")
            }
            None => Cow::Borrowed(""),
        }
    }

    /// The drive of file `id`, when known.
    pub fn drive(&self, id: u32) -> Option<&str> {
        match self.packed(id).drive {
            0 => None,
            d => Some(self.drives.get(u32::from(d) - 1)),
        }
    }

    /// The id of file `name` and what is known of it, if the table holds it.
    fn find(&self, name: &str, hash: u64) -> Option<(u32, Packed)> {
        if let Some(s) = self.names.find_hashed(name, hash) {
            let id = self.ids.get(s as usize).copied().unwrap_or(s);
            return Some((id, self.info[s as usize]));
        }
        match self.cold.as_ref()?.find(hash, name) {
            Ok(found) => found.map(|(id, b)| (id, Packed::from_bytes(b))),
            Err(e) => {
                self.fail(e);
                None
            }
        }
    }

    pub fn lookup(&self, name: &str) -> Option<u32> {
        let name = normalize_name(name);
        self.find(name, self.names.hash(name)).map(|(id, _)| id)
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
        let (id, info) = if self.cold.is_none() {
            let (id, new) = self.names.intern_hashed(name, hash);
            if new {
                self.info.push(Packed::default());
                self.files += 1;
            }
            (id, self.info[id as usize])
        } else {
            let (id, info) = match self.find(name, hash) {
                Some(found) => found,
                None => {
                    self.files += 1;
                    (self.files - 1, Packed::default())
                }
            };
            if self.slot(id).is_none() {
                self.hold(name, hash, id, info);
            }
            (id, info)
        };
        self.recent.put(hash, name, id, info, self.files as usize);
        if self.over() {
            self.let_go();
        }
        (id, info.info())
    }

    /// Keep `name` (of `hash`) in memory as `id` with `info`, once the table has let go.
    fn hold(&mut self, name: &str, hash: u64, id: u32, info: Packed) {
        let (slot, _) = self.names.intern_hashed(name, hash);
        self.info.push(info);
        self.ids.push(id);
        let ids = &self.ids;
        self.slots
            .insert_unique(id_hash(id), slot, |&s| id_hash(ids[s as usize]));
    }

    fn remember(&self, id: u32, info: Packed) {
        let mask = self.known.len().wrapping_sub(1);
        if let Some(k) = self.known.get(id as usize & mask) {
            k.set((id.wrapping_add(1), info));
        }
    }

    /// Heap bytes of the files in memory.
    fn held(&self) -> usize {
        self.names.bytes()
            + self.info.capacity() * std::mem::size_of::<Packed>()
            + self.ids.capacity() * std::mem::size_of::<u32>()
            + self.slots.allocation_size()
    }

    /// Bytes the files in memory fill: their names, what is known of them, where their
    /// names end, their ids, and about 8 bytes a file in each hash index. The vectors'
    /// spare room is left out: a vector that just doubled has not touched it, so it is not
    /// resident yet, and counting it would let a table read from a `files.csv` of just
    /// under the limit go to disk for a moment's doubling.
    fn filled(&self) -> usize {
        let n = self.info.len();
        self.names.text.len()
            + n * (std::mem::size_of::<u64>() + std::mem::size_of::<Packed>() + 8)
            + self.ids.len() * (std::mem::size_of::<u32>() + 8)
    }

    /// Whether the files in memory should go to disk.
    fn over(&self) -> bool {
        self.limit > 0
            && self.info.len() >= LEAVING_MIN
            && self.err.get().is_none()
            && self.filled() > self.limit
    }

    /// Write the files added since the last time to disk, and let go of every file in
    /// memory; a failure is kept ([`FileTable::error`]) and stops further spills.
    fn let_go(&mut self) {
        if let Err(e) = self.write_out() {
            self.fail(e);
            return;
        }
        let names = Names {
            hasher: self.names.hasher.clone(),
            ..Names::default()
        };
        self.names = names;
        self.info = Vec::new();
        self.ids = Vec::new();
        self.slots = HashTable::new();
        if self.known.is_empty() {
            let slots = (self.limit / 128).clamp(64, KNOWN);
            self.known = vec![Cell::new((0, Packed::default())); 1 << slots.ilog2()];
        }
    }

    fn write_out(&mut self) -> std::io::Result<()> {
        if self.cold.is_none() {
            self.cold = Some(Box::new(Cold::create(&self.spill_dir)?));
        }
        let Some(cold) = self.cold.as_mut() else {
            return Ok(());
        };
        let first = cold.ids();
        let (names, ids) = (&self.names, &self.ids);
        let leaving = self.info.iter().enumerate().filter_map(|(slot, info)| {
            let id = ids.get(slot).copied().unwrap_or(slot as u32);
            if id < first {
                return None;
            }
            let name = names.get(slot as u32);
            Some(Leaving {
                id,
                name,
                hash: names.hash(name),
                packed: info.to_bytes(),
            })
        });
        cold.write(leaving)
    }

    /// Add a file the table does not hold yet and return its id.
    pub fn insert(
        &mut self,
        name: &str,
        info: FileInfo,
        drive: Option<&str>,
    ) -> Result<u32, String> {
        let name = normalize_name(name);
        let hash = self.names.hash(name);
        if self.find(name, hash).is_some() {
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
        let id = self.files;
        self.files += 1;
        self.listed = self.files;
        let packed = Packed::new(&info, drive);
        if self.cold.is_none() {
            self.names.intern_hashed(name, hash);
            self.info.push(packed);
        } else {
            self.hold(name, hash, id, packed);
        }
        if self.over() {
            self.let_go();
        }
        Ok(id)
    }

    /// Heap bytes the table holds: its names once, 16 bytes of metadata, 8 of where the
    /// name ends and the hash index's 4-byte id and control byte per bucket for every file
    /// in memory, and the recently looked-up names (256 KiB to 4 MiB, a line for every
    /// sixteen files) once a name has been looked up; past its limit about a byte and a
    /// half for each file on disk, and the lately looked-up ids (24 bytes for every 128 of
    /// the limit, at most 1.5 MiB).
    pub fn bytes(&self) -> usize {
        self.held()
            + self.drives.bytes()
            + self.recent.bytes()
            + self.known.capacity() * std::mem::size_of::<Cell<(u32, Packed)>>()
            + self.cold.as_ref().map_or(0, |c| c.bytes())
    }

    /// Read a `files.csv` (RFC 4180 quoting, read with the `csv` crate). Errors name the
    /// line and field.
    pub fn from_csv(path: &Path) -> Result<FileTable, String> {
        Self::from_csv_within(path, 0, Path::new(""))
    }

    /// [`FileTable::from_csv`] into a table [`FileTable::bound`] by `bytes` in `dir` as it
    /// is read, so a catalog of any size is read within the limit.
    pub fn from_csv_within(path: &Path, bytes: usize, dir: &Path) -> Result<FileTable, String> {
        let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut t = FileTable::default();
        t.bound(bytes, dir);
        t.read_csv(std::io::BufReader::new(f), &path.display().to_string())?;
        Ok(t)
    }

    /// A `files.csv` read from `input`, as [`FileTable::from_csv`]; errors start with
    /// `origin` (the file's name).
    pub fn parse_csv(input: impl std::io::Read, origin: &str) -> Result<FileTable, String> {
        let mut t = FileTable::default();
        t.read_csv(input, origin)?;
        Ok(t)
    }

    fn read_csv(&mut self, input: impl std::io::Read, origin: &str) -> Result<(), String> {
        let mut rdr = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .trim(csv::Trim::All)
            .from_reader(input);
        let t = self;
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
        if let Some(e) = t.error() {
            return Err(format!("{origin}: {e}"));
        }
        Ok(())
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

    /// What a table says of file `i`: metadata, some of it not known, and one of a few
    /// drives or none.
    fn entry(i: u32) -> (FileInfo, Option<String>) {
        let info = FileInfo {
            bitrate_kbps: (!i.is_multiple_of(11)).then_some(i % 5000),
            media: MEDIA[(i % 4) as usize],
            size_bytes: (!i.is_multiple_of(3)).then_some(u64::from(i) << 20),
        };
        (
            info,
            (!i.is_multiple_of(10)).then(|| format!("d{:02}", i % 36)),
        )
    }

    #[test]
    fn interned_names_keep_first_seen_ids_and_are_stored_once() {
        let n = 100_000u32;
        let mut t = FileTable::default();
        // Table entries first, with metadata and one of a few drives, then the log's
        // names: known ones keep their ids, new ones get the next ids in order.
        for i in 0..n / 2 {
            let (info, drive) = entry(i);
            let drive = drive.as_deref();
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

    #[test]
    fn a_bounded_table_gives_the_ids_and_answers_of_one_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let n = 30_000u32;
        let long = |i: u32| format!("collections/a-name-longer-than-a-slot/{}", name(i));
        let limit = 256 << 10;
        let (mut bounded, mut free) = (FileTable::default(), FileTable::default());
        bounded.bound(limit, dir.path());
        // Table entries with metadata and drives (they go to disk as they are read), then
        // the log's names: known ones, new ones, short and long, seen again after the
        // table let go of them.
        for i in 0..n / 2 {
            let (info, drive) = entry(i);
            let drive = drive.as_deref();
            assert_eq!(
                bounded.insert(&name(i), info, drive),
                free.insert(&name(i), info, drive)
            );
            assert!(bounded.filled() <= limit);
        }
        let on_disk = bounded.spills();
        assert!(on_disk > 0);
        assert!(bounded
            .insert(&name(3), FileInfo::default(), None)
            .unwrap_err()
            .contains("listed twice"));
        for i in (0..n).rev().step_by(3).chain(0..n).chain((0..n).step_by(7)) {
            for file in [name(i), long(i)] {
                let q = format!("/{file}?x=1");
                assert_eq!(bounded.intern_info(&q), free.intern_info(&q), "{file}");
                assert!(bounded.filled() <= limit && bounded.held() <= 3 * limit);
            }
        }
        assert!(
            bounded.spills() > on_disk + 2,
            "{} spills",
            bounded.spills()
        );
        assert_eq!(bounded.len(), free.len());
        for id in 0..free.len() as u32 {
            assert_eq!(bounded.name(id), free.name(id));
            assert_eq!(bounded.get(id), free.get(id), "{id}");
            assert_eq!(bounded.drive(id), free.drive(id), "{id}");
        }
        for i in 0..n {
            assert_eq!(bounded.lookup(&long(i)), free.lookup(&long(i)));
        }
        assert_eq!(bounded.lookup("nf/t99999/v1.mp4"), None);
        assert_eq!(bounded.error(), None);
        // What stays: the files looked up since the last spill, the recent names and ids,
        // and under two bytes a file on disk.
        let cold = bounded.cold.as_ref().unwrap().bytes();
        assert!(cold < 2 * free.len(), "{cold} bytes");
        assert!(
            bounded.bytes() < free.bytes() / 2,
            "{} of {}",
            bounded.bytes(),
            free.bytes()
        );
    }
}
