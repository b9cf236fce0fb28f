//! A workload directory as `vodkit workload new` writes it: the one owner of its file
//! names (`catalog.json`, `sessions.jsonl`, `workload.json`, `warmup.jsonl`) and of
//! reading and writing them, so the load tool, the bench and the validation run do not
//! each assemble paths and parsers by hand.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::bitrates::{self, Bitrates};
use crate::error::InputError;
pub use crate::fileset::CATALOG;
use crate::fileset::{self, FilesetError};
use crate::logfmt::{self, LogFormat};
use crate::model::{Catalog, Request, Session, WorkloadMeta};

/// One viewing session per line.
pub const SESSIONS: &str = "sessions.jsonl";
/// Client classes and measurement settings (ramps, warm-up size).
pub const META: &str = "workload.json";
/// The warm-up requests, most popular first.
pub const WARMUP: &str = "warmup.jsonl";
/// The generator's summary.
pub const SUMMARY: &str = "summary.json";

/// A workload directory (which of its files exist is checked when they are read).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadDir {
    root: PathBuf,
}

impl WorkloadDir {
    /// The directory at `root`, whatever it holds (for writing, or lenient reading).
    pub fn new(root: impl Into<PathBuf>) -> WorkloadDir {
        WorkloadDir { root: root.into() }
    }

    /// The directory a session log lies in: its `workload.json` and `warmup.jsonl` are
    /// the ones beside the log.
    pub fn beside(log: &Path) -> WorkloadDir {
        let parent = log.parent().filter(|p| !p.as_os_str().is_empty());
        WorkloadDir::new(parent.unwrap_or(Path::new(".")))
    }

    /// A directory that holds `sessions.jsonl`; otherwise a one-line error naming it.
    pub fn open(root: impl Into<PathBuf>) -> Result<WorkloadDir, InputError> {
        let dir = WorkloadDir::new(root);
        if !dir.sessions_path().is_file() {
            return Err(InputError::whole(
                &dir.root.display().to_string(),
                format!("no {SESSIONS} (expected a `vodkit workload new` output)"),
            ));
        }
        Ok(dir)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn catalog_path(&self) -> PathBuf {
        self.root.join(CATALOG)
    }

    pub fn sessions_path(&self) -> PathBuf {
        self.root.join(SESSIONS)
    }

    pub fn meta_path(&self) -> PathBuf {
        self.root.join(META)
    }

    pub fn warmup_path(&self) -> PathBuf {
        self.root.join(WARMUP)
    }

    /// `path` if it is an existing file.
    fn existing(path: PathBuf) -> Option<PathBuf> {
        path.is_file().then_some(path)
    }

    /// `catalog.json`, if the directory has one.
    pub fn existing_catalog(&self) -> Option<PathBuf> {
        Self::existing(self.catalog_path())
    }

    /// `workload.json`, if the directory has one.
    pub fn existing_meta(&self) -> Option<PathBuf> {
        Self::existing(self.meta_path())
    }

    /// `warmup.jsonl`, if the directory has one.
    pub fn existing_warmup(&self) -> Option<PathBuf> {
        Self::existing(self.warmup_path())
    }

    /// The sessions of `sessions.jsonl` (at least one).
    pub fn sessions(&self) -> Result<Vec<Session>, InputError> {
        let path = self.sessions_path();
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(&path)
            .map_err(|e| InputError::whole(&origin, e.to_string()))?;
        let sessions = logfmt::parse(&text, LogFormat::Jsonl, &origin)?;
        if sessions.is_empty() {
            return Err(InputError::whole(&origin, "no sessions in the log"));
        }
        Ok(sessions)
    }

    /// `workload.json`, or `None` when the directory has none.
    pub fn meta(&self) -> Result<Option<WorkloadMeta>, InputError> {
        self.existing_meta().map(|p| read_meta(&p)).transpose()
    }

    /// Up to `limit` warm-up requests (`None`: `workload.json`'s `warmup_chunks` when it
    /// is positive, else all); none when the directory has no `warmup.jsonl`.
    pub fn warmup(&self, limit: Option<u64>) -> Result<Vec<Request>, InputError> {
        let Some(path) = self.existing_warmup() else {
            return Ok(Vec::new());
        };
        let limit = match limit {
            Some(l) => Some(l),
            None => self
                .meta()?
                .map(|m| m.measurement.warmup_chunks)
                .filter(|&n| n > 0),
        };
        read_warmup(&path, limit)
    }

    /// `catalog.json`, its file paths checked as `vodkit fileset` checks them.
    pub fn catalog(&self) -> Result<Catalog, FilesetError> {
        fileset::load_catalog(&self.catalog_path())
    }

    /// Bit rate of every file of the catalog.
    pub fn bitrates(&self) -> Result<Bitrates, InputError> {
        bitrates::load(&self.catalog_path())
    }

    /// Write `catalog.json` (creating the directory).
    pub fn write_catalog(&self, catalog: &Catalog) -> std::io::Result<()> {
        self.write_json(&self.catalog_path(), catalog)
    }

    /// Write `workload.json` (creating the directory).
    pub fn write_meta(&self, meta: &WorkloadMeta) -> std::io::Result<()> {
        self.write_json(&self.meta_path(), meta)
    }

    /// Write `sessions.jsonl` (creating the directory).
    pub fn write_sessions(&self, sessions: &[Session]) -> std::io::Result<()> {
        self.write_session_stream(sessions)
    }

    /// Write `sessions.jsonl` from sessions made one at a time (owned or borrowed), so a
    /// producer never has to hold the whole list.
    pub fn write_session_stream<S: std::borrow::Borrow<Session>>(
        &self,
        sessions: impl IntoIterator<Item = S>,
    ) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.root)?;
        let path = self.sessions_path();
        let mut w = std::io::BufWriter::new(std::fs::File::create(&path)?);
        for s in sessions {
            serde_json::to_writer(&mut w, s.borrow())?;
            w.write_all(b"\n")?;
        }
        w.flush()
    }

    fn write_json<T: serde::Serialize>(&self, path: &Path, value: &T) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.root)?;
        let mut w = std::io::BufWriter::new(std::fs::File::create(path)?);
        serde_json::to_writer_pretty(&mut w, value)?;
        w.write_all(b"\n")?;
        w.flush()
    }
}

/// Read a `workload.json` (client delays checked).
pub fn read_meta(path: &Path) -> Result<WorkloadMeta, InputError> {
    let origin = path.display().to_string();
    let text =
        std::fs::read_to_string(path).map_err(|e| InputError::whole(&origin, e.to_string()))?;
    let meta: WorkloadMeta = serde_json::from_str(&text)
        .map_err(|e| InputError::at_line(&origin, e.line(), e.to_string()))?;
    for (i, c) in meta.client_classes.iter().enumerate() {
        if !(c.one_way_delay_s.is_finite() && (0.0..=60.0).contains(&c.one_way_delay_s)) {
            return Err(InputError::in_field(
                &origin,
                &format!("client_classes[{i}] ({}).one_way_delay_s", c.name),
                format!("{} is not a number of seconds in 0..=60", c.one_way_delay_s),
            ));
        }
    }
    Ok(meta)
}

/// Read up to `limit` warm-up requests (one JSON request per line, most popular first).
pub fn read_warmup(path: &Path, limit: Option<u64>) -> Result<Vec<Request>, InputError> {
    let origin = path.display().to_string();
    let text =
        std::fs::read_to_string(path).map_err(|e| InputError::whole(&origin, e.to_string()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if limit.is_some_and(|l| out.len() as u64 >= l) {
            break;
        }
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let req: Request = serde_json::from_str(line)
            .map_err(|e| InputError::at_line(&origin, i + 1, e.to_string()))?;
        if !req.path.starts_with('/') {
            return Err(InputError::at_line(
                &origin,
                i + 1,
                format!("path {:?} must start with '/'", req.path),
            ));
        }
        out.push(req);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ClientClass, Measurement};

    fn meta(warmup_chunks: u64, delay: f64) -> WorkloadMeta {
        WorkloadMeta {
            spec: "t".into(),
            seed: 1,
            client_classes: vec![ClientClass {
                name: "dsl".into(),
                bandwidth_bps: 1_000_000,
                one_way_delay_s: delay,
                share: 1.0,
            }],
            measurement: Measurement {
                warmup_chunks,
                ..Measurement::default()
            },
        }
    }

    #[test]
    fn warmup_lists_are_limited_and_located() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = WorkloadDir::new(tmp.path());
        assert_eq!(dir.warmup(None).unwrap(), Vec::new());
        let line = r#"{"path":"/v/a.dat","timeout_s":10}"#;
        std::fs::write(dir.warmup_path(), format!("{line}\n\n{line}\n{line}\n")).unwrap();
        assert_eq!(dir.warmup(Some(2)).unwrap().len(), 2);
        assert_eq!(dir.warmup(None).unwrap().len(), 3);
        // workload.json's warmup_chunks limits the list when no limit is given.
        dir.write_meta(&meta(1, 0.05)).unwrap();
        assert_eq!(dir.warmup(None).unwrap().len(), 1);
        std::fs::write(
            dir.warmup_path(),
            format!("{line}\n{{\"path\":\"x\",\"timeout_s\":1}}\n"),
        )
        .unwrap();
        let e = dir.warmup(Some(5)).unwrap_err().to_string();
        assert!(e.contains("warmup.jsonl:2"), "{e}");
        let beside = WorkloadDir::beside(&tmp.path().join("any.log"));
        assert_eq!(beside.existing_warmup(), Some(dir.warmup_path()));
        assert_eq!(
            WorkloadDir::beside(Path::new("x.log")).root(),
            Path::new(".")
        );
    }

    #[test]
    fn open_needs_sessions_and_files_round_trip() {
        let tmp = tempfile::tempdir().unwrap();
        let e = WorkloadDir::open(tmp.path()).unwrap_err().to_string();
        assert!(e.contains("no sessions.jsonl") && !e.contains('\n'), "{e}");
        let dir = WorkloadDir::new(tmp.path().join("w"));
        let s = Session::new(7, 1.0, "dsl", vec![Request::new("/a", None, 10.0)]);
        dir.write_sessions(std::slice::from_ref(&s)).unwrap();
        dir.write_meta(&meta(0, 0.02)).unwrap();
        let opened = WorkloadDir::open(dir.root()).unwrap();
        assert_eq!(opened.sessions().unwrap(), vec![s]);
        assert_eq!(opened.meta().unwrap(), Some(meta(0, 0.02)));
        assert_eq!(opened.existing_catalog(), None);
        assert!(opened.catalog().is_err());
        dir.write_sessions(&[]).unwrap();
        let e = opened.sessions().unwrap_err().to_string();
        assert!(e.contains("no sessions"), "{e}");
    }

    #[test]
    fn bad_client_delay_names_the_field() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = WorkloadDir::new(tmp.path());
        dir.write_meta(&meta(0, 90.0)).unwrap();
        let e = dir.meta().unwrap_err().to_string();
        assert!(
            e.contains("workload.json") && e.contains("one_way_delay_s") && e.contains("0..=60"),
            "{e}"
        );
    }
}
