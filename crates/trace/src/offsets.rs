//! A word per file id (the analysis keeps each sizeless file's furthest byte read so) in
//! pages of [`PAGE`] words, within a memory limit: past it the pages used least lately (a
//! clock sweep) go to an unnamed scratch file, each to its own place, and come back when
//! used again. A log names its files in time, so the pages of files not asked for lately
//! stay on disk; a page never written costs no memory at all.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::runfile::at_dir;

/// Words a page holds (4 KiB).
const PAGE: usize = 512;

enum Page {
    /// Never written: every word is 0.
    Zero,
    Mem {
        words: Box<[u64; PAGE]>,
        used: bool,
    },
    /// In the scratch file, at its number times the page's size.
    Disk,
}

/// Words by index, `0` until set.
pub(crate) struct Offsets {
    pages: Vec<Page>,
    /// Pages in memory, and at most how many.
    resident: usize,
    limit: usize,
    hand: usize,
    dir: PathBuf,
    scratch: Option<File>,
    /// Pages written to the scratch file.
    writes: u64,
    err: Option<io::Error>,
    /// Where a word goes when its page could not be had (after an error, which
    /// [`Offsets::take_error`] reports).
    lost: u64,
}

impl Offsets {
    /// Pages go to a scratch file made in `dir` once they pass `limit_bytes` (at least one
    /// page stays).
    pub(crate) fn new(dir: &Path, limit_bytes: usize) -> Offsets {
        Offsets {
            pages: Vec::new(),
            resident: 0,
            limit: (limit_bytes / (PAGE * 8)).max(1),
            hand: 0,
            dir: dir.to_path_buf(),
            scratch: None,
            writes: 0,
            err: None,
            lost: 0,
        }
    }

    /// The word at `i` (0 if never set; `None` past the last page written).
    pub(crate) fn get(&mut self, i: usize) -> Option<u64> {
        if i / PAGE >= self.pages.len() {
            return None;
        }
        Some(*self.slot(i))
    }

    /// The word at `i`, to read or set.
    pub(crate) fn slot(&mut self, i: usize) -> &mut u64 {
        let p = i / PAGE;
        if p >= self.pages.len() {
            self.pages.resize_with(p + 1, || Page::Zero);
        }
        if !matches!(self.pages[p], Page::Mem { .. }) {
            self.load(p);
        }
        match &mut self.pages[p] {
            Page::Mem { words, used } => {
                *used = true;
                &mut words[i % PAGE]
            }
            _ => &mut self.lost,
        }
    }

    /// Bring page `p` into memory, making room first.
    fn load(&mut self, p: usize) {
        self.make_room();
        let mut words = Box::new([0u64; PAGE]);
        if matches!(self.pages[p], Page::Disk) {
            let mut b = [0u8; PAGE * 8];
            let read = match &self.scratch {
                Some(f) => f.read_exact_at(&mut b, (p * PAGE * 8) as u64),
                None => Err(io::Error::other("offsets: a page on disk without a file")),
            };
            match read {
                Ok(()) => {
                    for (w, c) in words.iter_mut().zip(b.chunks_exact(8)) {
                        let mut x = [0u8; 8];
                        x.copy_from_slice(c);
                        *w = u64::from_le_bytes(x);
                    }
                }
                Err(e) => {
                    self.err.get_or_insert(e);
                }
            }
        }
        self.pages[p] = Page::Mem { words, used: true };
        self.resident += 1;
    }

    /// Write pages not used since the hand last passed them until one more fits.
    fn make_room(&mut self) {
        let n = self.pages.len();
        // Two turns of the hand clear every page's use and write one.
        let mut steps = 2 * n + 1;
        while self.resident >= self.limit && steps > 0 && self.err.is_none() {
            steps -= 1;
            self.hand = (self.hand + 1) % n;
            let h = self.hand;
            let Page::Mem { words, used } = &mut self.pages[h] else {
                continue;
            };
            if *used {
                *used = false;
                continue;
            }
            let mut b = [0u8; PAGE * 8];
            for (c, w) in b.chunks_exact_mut(8).zip(words.iter()) {
                c.copy_from_slice(&w.to_le_bytes());
            }
            if let Err(e) = self
                .scratch()
                .and_then(|f| f.write_all_at(&b, (h * PAGE * 8) as u64))
            {
                self.err.get_or_insert(e);
                return;
            }
            self.pages[h] = Page::Disk;
            self.resident -= 1;
            self.writes += 1;
        }
    }

    fn scratch(&mut self) -> io::Result<&File> {
        if self.scratch.is_none() {
            std::fs::create_dir_all(&self.dir).map_err(at_dir(&self.dir))?;
            let f = tempfile::tempfile_in(&self.dir).map_err(at_dir(&self.dir))?;
            self.scratch = Some(f);
        }
        self.scratch
            .as_ref()
            .ok_or_else(|| io::Error::other("offsets: no scratch file"))
    }

    /// Heap bytes held: the pages in memory and the table of pages.
    pub(crate) fn bytes(&self) -> usize {
        self.resident * PAGE * 8 + self.pages.capacity() * std::mem::size_of::<Page>()
    }

    /// Pages written to disk so far.
    #[cfg(test)]
    pub(crate) fn writes(&self) -> u64 {
        self.writes
    }

    /// The first I/O error, if any (words since then may read 0).
    pub(crate) fn take_error(&mut self) -> Option<io::Error> {
        self.err.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_past_the_limit_go_to_disk_and_come_back() {
        let dir = tempfile::tempdir().unwrap();
        // Four pages in memory at most, for 40 pages' worth of words.
        let mut o = Offsets::new(&dir.path().join("not-yet"), 4 * PAGE * 8);
        assert_eq!(o.get(0), None);
        let n = 40 * PAGE;
        for round in 0..3u64 {
            for i in (0..n).step_by(7) {
                let w = o.slot(i);
                assert_eq!(
                    *w,
                    if round == 0 {
                        0
                    } else {
                        i as u64 * 3 + round - 1
                    }
                );
                *w = i as u64 * 3 + round;
            }
        }
        assert!(o.writes() > 100, "{} pages written", o.writes());
        assert!(o.bytes() <= 4 * PAGE * 8 + 64 * 16, "{} bytes", o.bytes());
        for i in 0..n {
            let want = if i % 7 == 0 { i as u64 * 3 + 2 } else { 0 };
            assert_eq!(o.get(i), Some(want), "{i}");
        }
        assert_eq!(o.get(n), None);
        assert!(o.take_error().is_none());
    }
}
