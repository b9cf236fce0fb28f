//! The simulator's view of a trace: chains with their file's size, bit rate and drive,
//! read from `chains.csv` and `files.csv` (the formats of `vodkit trace`).

use std::collections::HashMap;
use std::path::Path;

use vodkit_prefetch::ChainKind;
use vodkit_trace::chain::{read_chains_csv, Chain};
use vodkit_trace::files::FileTable;

/// Drive name used for chains whose file has no drive in either table.
pub const DEFAULT_DRIVE: &str = "default";

/// One chain, reduced to what the model needs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SimChain {
    /// Identity of the file for the policy (index into [`Trace::files`]).
    pub file: u32,
    /// Index into [`Trace::drives`].
    pub drive: u32,
    /// First byte of the chain in its file.
    pub offset: u64,
    /// Bytes the chain covers.
    pub bytes: u64,
    /// Start and end time of the chain (seconds on the trace's clock).
    pub t_start: f64,
    pub t_end: f64,
    pub kind: ChainKind,
    /// Nominal bit rate of the file; `None` lets the policy use its default.
    pub bitrate_kbps: Option<u32>,
    /// Size of the file; reads are clipped here. `u64::MAX` when unknown.
    pub file_size: u64,
}

/// All chains of a trace plus the names behind the indices.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    pub chains: Vec<SimChain>,
    pub files: Vec<String>,
    pub drives: Vec<String>,
}

impl Trace {
    /// Read `chains.csv` and `files.csv`; errors name the file, line and field.
    pub fn load(chains_csv: &Path, files_csv: &Path) -> Result<Trace, String> {
        let table = FileTable::from_csv(files_csv)?;
        let chains = read_chains_csv(chains_csv)?;
        Trace::from_chains(&chains, &table, &chains_csv.display().to_string())
    }

    /// Build from parsed chains and a file table. A chain's drive, bit rate and size come
    /// from the file table first, then from the chain's own columns.
    pub fn from_chains(chains: &[Chain], table: &FileTable, name: &str) -> Result<Trace, String> {
        let mut t = Trace::default();
        let mut file_ids: HashMap<String, u32> = HashMap::new();
        let mut drive_ids: HashMap<String, u32> = HashMap::new();
        for (i, c) in chains.iter().enumerate() {
            // Line numbers: header is line 1 (blank lines are rare in generated files).
            let line = i + 2;
            if !(c.t_start.is_finite() && c.t_end.is_finite()) || c.t_end < c.t_start {
                return Err(format!(
                    "{name}:{line}: field t_end: expected a time not before t_start"
                ));
            }
            let id = table.lookup(&c.file);
            let info = id.map(|id| table.get(id));
            let drive_name = id
                .and_then(|id| table.drive(id))
                .map(str::to_string)
                .or_else(|| c.drive.clone())
                .unwrap_or_else(|| DEFAULT_DRIVE.to_string());
            let bitrate = info.and_then(|f| f.bitrate_kbps).or(c.bitrate_kbps);
            let size = info.and_then(|f| f.size_bytes).unwrap_or(u64::MAX);
            let next_file = file_ids.len() as u32;
            let file = *file_ids.entry(c.file.clone()).or_insert_with(|| {
                t.files.push(c.file.clone());
                next_file
            });
            let next_drive = drive_ids.len() as u32;
            let drive = *drive_ids.entry(drive_name.clone()).or_insert_with(|| {
                t.drives.push(drive_name);
                next_drive
            });
            t.chains.push(SimChain {
                file,
                drive,
                offset: c.start_offset,
                bytes: c.bytes,
                t_start: c.t_start,
                t_end: c.t_end,
                kind: c.chain_kind(),
                bitrate_kbps: bitrate,
                file_size: size,
            });
        }
        Ok(t)
    }

    /// Earliest chain start (the origin of interval 0); 0 for an empty trace.
    pub fn origin_s(&self) -> f64 {
        if self.chains.is_empty() {
            return 0.0;
        }
        self.chains
            .iter()
            .map(|c| c.t_start)
            .fold(f64::INFINITY, f64::min)
    }

    /// Latest chain end.
    pub fn end_s(&self) -> f64 {
        self.chains
            .iter()
            .map(|c| c.t_end)
            .fold(self.origin_s(), f64::max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str =
        "session,file,start_offset,bytes,requests,t_start,t_end,kind,media,bitrate_kbps,drive";

    fn load(chains: &str, files: &str) -> Result<Trace, String> {
        let dir = tempfile::tempdir().unwrap();
        let (c, f) = (dir.path().join("chains.csv"), dir.path().join("files.csv"));
        std::fs::write(&c, chains).unwrap();
        std::fs::write(&f, files).unwrap();
        Trace::load(&c, &f)
    }

    #[test]
    fn joins_chains_with_the_file_table() {
        let files = "file,bitrate_kbps,media,size_bytes,drive\nnf/a.mp4,2000,video,5000,d01\n";
        let chains = format!(
            "{HEADER}\n1,nf/a.mp4,0,100,1,1.0,2.0,open,video,,\n\
             1,nf/b.mp4,10,100,2,3.0,4.0,chunk,,560,d07\n2,nf/c.mp4,0,5,1,5.0,6.0,chunk,,,\n"
        );
        let t = load(&chains, files).unwrap();
        assert_eq!(t.chains.len(), 3);
        let a = t.chains[0];
        assert_eq!(
            (a.kind, a.bitrate_kbps, a.file_size),
            (ChainKind::OpenAtZero, Some(2000), 5000)
        );
        assert_eq!(t.drives[a.drive as usize], "d01");
        let b = t.chains[1];
        assert_eq!(
            (b.kind, b.bitrate_kbps, b.file_size),
            (ChainKind::Other, Some(560), u64::MAX)
        );
        assert_eq!(t.drives[b.drive as usize], "d07");
        assert_eq!(t.chains[2].kind, ChainKind::ChunkAtZero);
        assert_eq!(t.drives[t.chains[2].drive as usize], DEFAULT_DRIVE);
        assert_eq!((t.origin_s(), t.end_s()), (1.0, 6.0));
    }

    #[test]
    fn bad_input_names_file_line_and_field() {
        let files = "file,bitrate_kbps,media,size_bytes,drive\n";
        let backwards = format!("{HEADER}\n1,f,0,100,1,9.0,2.0,open,,,\n");
        let e = load(&backwards, files).unwrap_err();
        assert!(e.contains("chains.csv:2: field t_end"), "{e}");
        let garbage = format!("{HEADER}\n1,f,zero,100,1,1.0,2.0,open,,,\n");
        let e = load(&garbage, files).unwrap_err();
        assert!(e.contains(":2: field start_offset"), "{e}");
        let e = load(&format!("{HEADER}\n"), "nonsense\n").unwrap_err();
        assert!(e.contains("files.csv:1"), "{e}");
    }
}
